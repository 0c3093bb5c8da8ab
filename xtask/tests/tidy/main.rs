//! Tidy checks: repository-wide rules written as ordinary tests, so `cargo test` enforces them.
//!
//! - every Rust file under `crates/`, `migrations/` and `xtask/` opens with a `//!` comment;
//! - dependency edges respect the architecture (docs/architecture.md): domain crates do no I/O,
//!   only the storage adapter and the migrations know SeaORM, only the HTTP adapter knows reqwest;
//! - `.ci/run` and the README run the gate, `cargo xtask ci`;
//! - no two crates define a public type (`pub struct | enum | trait | type`) of the same name,
//!   so one name means one thing across the workspace (re-exports of one type are fine);
//! - `unsafe` code is allowed in one file only, [`UNSAFE_ALLOWED_IN`] (the workspace lint
//!   `unsafe_code` is `deny`, which a local `allow` could lift: this check keeps it to that
//!   file);
//! - domain crates read no clock, make no ids and draw no random numbers: their source calls
//!   none of [`DISALLOWED_IN_DOMAIN`], and each has a `clippy.toml` that disallows them and
//!   keeps the workspace's clippy settings;
//! - the service binary ships no test code: the app's and the demo's normal dependencies enable
//!   no `testing` feature, and the default `tenantry` build (`cargo build -p tenantry-app`) has
//!   neither the demo, nor the test kit, nor any crate's `testing` feature in its dependency
//!   tree (read with `cargo tree`; the demo is its own binary, `tenantry-demo`).
//!
//! Dependencies are read with `cargo metadata --no-deps`, so inherited (`dep.workspace = true`)
//! and renamed dependencies are seen as cargo sees them. Crates that do not exist yet are
//! simply not checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod app;
mod public_names;

/// Domain crates: synchronous and pure.
const DOMAIN_CRATES: &[&str] = &[
    "crates/kernel",
    "crates/lifecycle",
    "crates/fence",
    "crates/directory",
];

/// Dependencies a domain crate must not have (a trailing `*` matches a prefix).
const FORBIDDEN_IN_DOMAIN: &[&str] = &[
    "tokio",
    "sea-orm*",
    "sea-query*",
    "sqlx*",
    "reqwest",
    "axum",
    "hyper",
    "rand",
    "getrandom",
    // traces: the domain carries a command's trace context as an opaque string
    "opentelemetry*",
    "tracing-opentelemetry",
];

/// Methods a domain crate must not call: `(clippy path, text of a call)`. Time, ids and random
/// draws are arguments (docs/architecture.md); the engine reads the `Clock` port.
const DISALLOWED_IN_DOMAIN: &[(&str, &str)] = &[
    ("chrono::Utc::now", "Utc::now"),
    ("chrono::Local::now", "Local::now"),
    ("std::time::SystemTime::now", "SystemTime::now"),
    ("std::time::Instant::now", "Instant::now"),
    ("tokio::time::Instant::now", "Instant::now"),
    ("uuid::Uuid::new_v4", "new_v4"),
    ("uuid::Uuid::now_v7", "now_v7"),
    ("rand::random", "rand::random"),
    ("rand::thread_rng", "thread_rng"),
    ("rand::rng", "rand::rng"),
];

#[test]
fn every_rust_file_starts_with_a_module_doc_comment() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["crates", "migrations", "xtask"] {
        collect_rust_files(&root.join(dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "no Rust files found under {}",
        root.display()
    );
    let offenders: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = fs::read_to_string(path).unwrap_or_default();
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            !first.is_some_and(|l| l.starts_with("//!"))
        })
        .map(|path| relative(&root, path))
        .collect();
    assert!(
        offenders.is_empty(),
        "these files must start with a `//!` comment saying what the module is for:\n  {}",
        offenders.join("\n  ")
    );
}

/// The one file whose code may lift the `unsafe_code` lint (glibc's `malloc_trim`;
/// docs/architecture.md, "Unsafe code").
const UNSAFE_ALLOWED_IN: &str = "crates/engine/src/memory.rs";

#[test]
fn unsafe_code_is_allowed_in_one_file_only() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["crates", "migrations", "xtask", "fixtures", "examples"] {
        collect_rust_files(&root.join(dir), &mut files);
    }
    let offenders: Vec<String> = files
        .iter()
        .map(|path| relative(&root, path))
        .filter(|path| path != UNSAFE_ALLOWED_IN && !path.starts_with("xtask/tests/tidy/"))
        .filter(|path| {
            let text = fs::read_to_string(root.join(path)).unwrap_or_default();
            text.lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .any(lifts_unsafe_code)
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "these files lift the unsafe_code lint, which only {UNSAFE_ALLOWED_IN} may: {offenders:?}"
    );
    let allowed = fs::read_to_string(root.join(UNSAFE_ALLOWED_IN)).unwrap();
    assert!(
        allowed.lines().any(lifts_unsafe_code),
        "{UNSAFE_ALLOWED_IN} no longer needs unsafe code: make the workspace lint `forbid` again"
    );
}

/// Whether a line of code (comments cut off) names the `unsafe_code` lint: in Rust source
/// that is a lint attribute (`allow`, `expect`, `warn`), which is what lifts the workspace's
/// `deny`.
fn lifts_unsafe_code(code: &str) -> bool {
    code.contains("unsafe_code")
}

#[test]
fn domain_crates_do_no_io() {
    let packages = workspace_packages();
    let mut violations = Vec::new();
    for package in packages
        .iter()
        .filter(|p| DOMAIN_CRATES.contains(&p.dir.as_str()))
    {
        for dep in package.deps.iter().filter(|d| d.kind != "dev") {
            if FORBIDDEN_IN_DOMAIN
                .iter()
                .any(|pattern| matches(pattern, &dep.name))
            {
                violations.push(format!(
                    "{} depends on {} ({})",
                    package.dir, dep.name, dep.kind
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "domain crates are synchronous and pure (no runtime, database, HTTP or randomness):\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn domain_crates_depend_only_on_domain_crates() {
    let packages = workspace_packages();
    let domain_names: Vec<&str> = packages
        .iter()
        .filter(|p| DOMAIN_CRATES.contains(&p.dir.as_str()))
        .map(|p| p.name.as_str())
        .collect();
    let member_names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let mut violations = Vec::new();
    for package in packages
        .iter()
        .filter(|p| DOMAIN_CRATES.contains(&p.dir.as_str()))
    {
        for dep in package.deps.iter().filter(|d| d.kind != "dev") {
            if member_names.contains(&dep.name.as_str())
                && !domain_names.contains(&dep.name.as_str())
            {
                violations.push(format!("{} depends on {}", package.dir, dep.name));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "edges point down: a domain crate may use only other domain crates:\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn only_the_storage_adapter_and_migrations_know_sea_orm() {
    // `examples` plays the host platform: its own transaction is the point of one example.
    // `crates/verification`: its planted settle (deliberately broken, for the chaos harness and
    // the store check) writes the outbox table directly, outside the store crate.
    let allowed = [
        "crates/store-seaorm",
        "migrations",
        "examples",
        "crates/verification",
    ];
    let violations = find_dependents(&["sea-orm", "sea-orm-migration"], |package, _| {
        allowed.contains(&package.dir.as_str())
    });
    assert!(
        violations.is_empty(),
        "only crates/store-seaorm and migrations/ may depend on SeaORM; use the ports instead:\n  {}",
        violations.join("\n  ")
    );
}

/// The operator façade is handed its stores as ports (`tenantry_operator::ports`) by the app's
/// wiring: outside its tests it depends on no storage or HTTP client adapter (issue 28).
#[test]
fn the_operator_facade_knows_no_adapter() {
    let violations = find_dependents(
        &["tenantry-store-seaorm", "tenantry-remote-http"],
        |package, dep| package.dir != "crates/operator" || dep.kind == "dev",
    );
    assert!(
        violations.is_empty(),
        "crates/operator reads and writes through the ports; the app builds the adapters and \
         hands them in:\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn only_the_http_adapter_knows_reqwest() {
    let violations = find_dependents(&["reqwest"], |package, dep| match package.dir.as_str() {
        "crates/remote-http" | "crates/testkit" => true,
        "crates/app" => dep.kind == "dev",
        _ => false,
    });
    assert!(
        violations.is_empty(),
        "only crates/remote-http may depend on reqwest (crates/testkit too, crates/app as a \
         dev-dependency):\n  {}",
        violations.join("\n  ")
    );
}

/// The crates built into the shipped binaries: the app and its operator façade (`tenantry`),
/// and the demo (`tenantry-demo`, which brings the test kit's reference remotes but no
/// `testing` helpers).
const SHIPPED_CRATES: &[&str] = &["crates/app", "crates/operator", "crates/demo"];

#[test]
fn shipped_crates_enable_no_testing_feature() {
    let packages = workspace_packages();
    let mut violations = Vec::new();
    for package in packages
        .iter()
        .filter(|p| SHIPPED_CRATES.contains(&p.dir.as_str()))
    {
        for dep in package.deps.iter().filter(|d| d.kind != "dev") {
            if dep.features.iter().any(|f| f == "testing") {
                violations.push(format!(
                    "{} enables {}/testing in [dependencies]",
                    package.dir, dep.name
                ));
            }
        }
        for (feature, enables) in &package.features {
            for enabled in enables.iter().filter(|e| e.ends_with("/testing")) {
                violations.push(format!(
                    "{}'s feature `{feature}` enables {enabled}",
                    package.dir
                ));
            }
        }
    }
    assert!(
        packages.iter().any(|p| p.dir == "crates/app"),
        "crates/app not found: is the test reading the right workspace?"
    );
    assert!(
        violations.is_empty(),
        "the tenantry binary ships no test code: read through the ports' read traits instead \
         of `testing` helpers (move a test-only use to [dev-dependencies]):\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn default_tenantry_build_carries_no_test_kit() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "tree",
            "--locked",
            "--offline",
            "--package",
            "tenantry-app",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}|{f}",
        ])
        .output()
        .expect("run cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        tree.lines().any(|l| l.starts_with("tenantry-engine ")),
        "tenantry-engine missing from the tree (is the test reading the right graph?):\n{tree}"
    );
    let mut violations = Vec::new();
    for line in tree.lines() {
        let (package, features) = line.split_once('|').unwrap_or((line, ""));
        let name = package.split_whitespace().next().unwrap_or_default();
        if name == "tenantry-testkit" || name == "tenantry-demo" {
            violations.push(format!("{name} is in the tree"));
        }
        let features = features.trim_end_matches(" (*)");
        if name.starts_with("tenantry-") && features.split(',').any(|f| f == "testing") {
            violations.push(format!("{name} is built with its `testing` feature"));
        }
    }
    violations.sort();
    violations.dedup();
    assert!(
        violations.is_empty(),
        "the default `tenantry` build (`cargo build -p tenantry-app`) must carry neither the \
         demo, nor the test kit, nor any `testing` feature: the demo is its own binary \
         (crates/demo depends on tenantry-app, never the other way round); move a test-only \
         dependency of the app or of a crate below it to [dev-dependencies]:\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn ci_script_and_readme_run_the_gate() {
    let root = workspace_root();
    let ci = fs::read_to_string(root.join(".ci/run")).expect(".ci/run exists");
    assert!(
        ci.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("cargo xtask ci")),
        ".ci/run must run `cargo xtask ci`"
    );
    if let Ok(readme) = fs::read_to_string(root.join("README.md")) {
        assert!(
            readme.contains("cargo xtask ci"),
            "README.md must name the test command `cargo xtask ci`"
        );
    }
}

#[test]
fn ci_workflow_runs_the_gate() {
    let root = workspace_root();
    let workflow = fs::read_to_string(root.join(".github/workflows/ci.yml"))
        .expect(".github/workflows/ci.yml exists");
    assert!(workflow.contains("cargo xtask ci"));
}

#[test]
fn domain_crates_call_no_clock_id_or_random_source() {
    let root = workspace_root();
    let mut violations = Vec::new();
    for dir in DOMAIN_CRATES {
        let mut files = Vec::new();
        collect_rust_files(&root.join(dir), &mut files);
        for path in files {
            let text = fs::read_to_string(&path).unwrap_or_default();
            for (line, call) in disallowed_calls(&text) {
                violations.push(format!("{}:{line} calls {call}", relative(&root, &path)));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "domain crates are deterministic: take time, ids and random draws as arguments (the \
         engine reads the Clock port):\n  {}",
        violations.join("\n  ")
    );
}

#[test]
fn domain_crates_have_a_clippy_config_that_disallows_them_and_keeps_the_workspace_one() {
    let root = workspace_root();
    let workspace: Vec<String> = fs::read_to_string(root.join("clippy.toml"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let mut violations = Vec::new();
    for dir in DOMAIN_CRATES {
        if !root.join(dir).join("Cargo.toml").exists() {
            continue;
        }
        let path = root.join(dir).join("clippy.toml");
        let Ok(config) = fs::read_to_string(&path) else {
            violations.push(format!("{dir}/clippy.toml is missing"));
            continue;
        };
        let lines: Vec<&str> = config.lines().map(str::trim).collect();
        for setting in &workspace {
            if !lines.contains(&setting.as_str()) {
                violations.push(format!(
                    "{dir}/clippy.toml lacks the workspace setting `{setting}` (clippy reads \
                     only the nearest clippy.toml)"
                ));
            }
        }
        for (method, _) in DISALLOWED_IN_DOMAIN {
            if !config.contains(&format!("path = \"{method}\"")) {
                violations.push(format!("{dir}/clippy.toml does not disallow {method}"));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

// ---- helpers ----

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The calls of [`DISALLOWED_IN_DOMAIN`] in Rust source `text`, as (line number, call); the
/// text after `//` on a line (comments, doc comments) is ignored.
fn disallowed_calls(text: &str) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for (_, call) in DISALLOWED_IN_DOMAIN {
            if code.contains(call) && !found.contains(&(index + 1, *call)) {
                found.push((index + 1, *call));
            }
        }
    }
    found
}

/// `pattern` is a crate name, or a prefix followed by `*`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// A workspace member as `cargo metadata` describes it.
#[derive(Debug)]
struct Package {
    name: String,
    /// Folder relative to the workspace root, e.g. `crates/kernel`.
    dir: String,
    deps: Vec<Dep>,
    /// The `[features]` table: feature → what it enables (`dep:x`, `x/feature`, ...).
    features: Vec<(String, Vec<String>)>,
}

/// One declared dependency.
#[derive(Debug)]
struct Dep {
    /// The package name (not the rename).
    name: String,
    /// `normal`, `dev` or `build`.
    kind: String,
    /// Features the declaration enables.
    features: Vec<String>,
}

/// Every workspace member with its declared dependencies.
fn workspace_packages() -> Vec<Package> {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let packages = metadata["packages"].as_array().expect("packages array");
    let packages: Vec<Package> = packages
        .iter()
        .map(|p| {
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest
                .parent()
                .map_or_else(String::new, |d| relative(&root, d));
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies array")
                .iter()
                .map(|d| Dep {
                    name: d["name"].as_str().expect("dependency name").to_owned(),
                    kind: d["kind"].as_str().unwrap_or("normal").to_owned(),
                    features: strings(&d["features"]),
                })
                .collect();
            let features = p["features"]
                .as_object()
                .map(|table| {
                    table
                        .iter()
                        .map(|(name, enables)| (name.clone(), strings(enables)))
                        .collect()
                })
                .unwrap_or_default();
            Package {
                name: p["name"].as_str().expect("package name").to_owned(),
                dir,
                deps,
                features,
            }
        })
        .collect();
    assert!(
        packages.iter().any(|p| p.dir == "xtask"),
        "cargo metadata did not list the workspace members"
    );
    packages
}

/// The strings of a JSON array (empty for anything else).
fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Every `crate depends on dep (kind)` edge to one of `names` that `allowed` refuses.
fn find_dependents(names: &[&str], allowed: impl Fn(&Package, &Dep) -> bool) -> Vec<String> {
    let mut violations = Vec::new();
    for package in &workspace_packages() {
        for dep in package
            .deps
            .iter()
            .filter(|d| names.contains(&d.name.as_str()))
        {
            if !allowed(package, dep) {
                violations.push(format!(
                    "{} depends on {} ({})",
                    package.dir, dep.name, dep.kind
                ));
            }
        }
    }
    violations
}

#[test]
fn pattern_matching_of_crate_names() {
    assert!(matches("sea-orm*", "sea-orm-migration"));
    assert!(matches("tokio", "tokio"));
    assert!(!matches("tokio", "tokio-util"));
    assert!(!matches("rand", "rand_core"));
}

#[test]
fn disallowed_calls_are_found_in_code_not_in_comments() {
    let source = "//! Reads `Utc::now()` nowhere.\n\
                  fn f() -> DateTime<Utc> {\n\
                  \x20   let id = Uuid::new_v4(); // or SystemTime::now()\n\
                  \x20   chrono::Utc::now()\n\
                  }\n\
                  fn g() { let _ = std::time::Instant::now(); let _: f64 = rand::random(); }\n";
    assert_eq!(
        disallowed_calls(source),
        vec![
            (3, "new_v4"),
            (4, "Utc::now"),
            (6, "Instant::now"),
            (6, "rand::random")
        ]
    );
    assert!(disallowed_calls("fn pure(now: DateTime<Utc>) -> DateTime<Utc> { now }").is_empty());
}
