//! Feature checks: a fences-only build of the library crates compiles neither the saga nor the
//! directory (issue 17, "features that trim").
//!
//! The dependency graph is read with `cargo tree` (normal and build edges, the features a user
//! of `default-features = false, features = ["fences"]` gets), so a new unconditional
//! dependency on `tenantry-lifecycle` or `tenantry-directory` anywhere below the fence runtime
//! fails this test. `cargo xtask ci` also compiles and tests that build (see `xtask/src/ci/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates a fences-only platform depends on; each has a `fences` feature.
const FENCE_STACK: &[&str] = &[
    "tenantry-ports",
    "tenantry-engine",
    "tenantry-store-seaorm",
    "tenantry-remote-http",
];

/// Every package in the dependency tree of `packages` built with `features` only.
fn dependency_tree(packages: &[&str], features: &str) -> Vec<String> {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root()).args([
        "tree",
        "--locked",
        "--offline",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "--no-default-features",
        "--features",
        features,
    ]);
    for package in packages {
        cmd.args(["--package", package]);
    }
    let output = cmd.output().expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn fences_only_build_compiles_neither_the_saga_nor_the_directory() {
    let tree = dependency_tree(FENCE_STACK, "fences");
    for needed in ["tenantry-fence", "tenantry-engine", "tenantry-store-seaorm"] {
        assert!(
            tree.iter().any(|p| p == needed),
            "{needed} missing from the fences-only tree (is the test reading the right graph?): {tree:?}"
        );
    }
    let unwanted: Vec<&String> = tree
        .iter()
        .filter(|p| *p == "tenantry-lifecycle" || *p == "tenantry-directory")
        .collect();
    assert!(
        unwanted.is_empty(),
        "a fences-only build pulls in {unwanted:?}: make the dependency optional behind the \
         crate's `lifecycle` / `directory` feature"
    );
}

#[test]
fn each_mechanism_alone_pulls_only_its_own_domain_crate() {
    for (feature, own, other) in [
        ("lifecycle", "tenantry-lifecycle", "tenantry-directory"),
        ("directory", "tenantry-directory", "tenantry-lifecycle"),
    ] {
        let tree = dependency_tree(&["tenantry-engine", "tenantry-store-seaorm"], feature);
        assert!(
            tree.iter().any(|p| p == own),
            "{feature}: {own} missing: {tree:?}"
        );
        assert!(
            !tree.iter().any(|p| p == other),
            "a {feature}-only build pulls in {other}: {tree:?}"
        );
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}
