//! Tidy checks: repository-wide rules written as ordinary tests, so `cargo test` enforces them.
//!
//! - every Rust file under `crates/`, `migrations/` and `xtask/` opens with a `//!` comment;
//! - dependency edges respect the architecture (docs/architecture.md): domain crates do no I/O,
//!   only the storage adapter and the migrations know SeaORM, only the HTTP adapter knows reqwest;
//! - `.ci/run` and the README run the gate, `cargo xtask ci`;
//! - no two crates define a public type (`pub struct | enum | trait | type`) of the same name,
//!   so one name means one thing across the workspace (re-exports of one type are fine);
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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

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

/// The app names the storage adapter in one module only, the wiring that builds the stores
/// (`crates/app/src/stores.rs`): the service, the CLI and the directory wiring work on the
/// ports it hands on (issue 28).
#[test]
fn only_the_app_wiring_names_the_storage_adapter() {
    let src = workspace_root().join("crates/app/src");
    let mut files = Vec::new();
    collect_rust_files(&src, &mut files);
    assert!(files.len() > 3, "no app sources under {}", src.display());
    let mut violations = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("stores.rs")) {
        let text = fs::read_to_string(file).expect("read app source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("tenantry_store_seaorm::") || names_a_seaorm_type(code) {
                violations.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "only crates/app/src/stores.rs may name tenantry-store-seaorm and its SeaOrm* stores; \
         take the stores as ports from `stores::Stores`:\n  {}",
        violations.join("\n  ")
    );
}

/// Whether `code` names a `SeaOrm…` type (an identifier starting `SeaOrm` and an upper-case
/// letter).
fn names_a_seaorm_type(code: &str) -> bool {
    code.match_indices("SeaOrm").any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + "SeaOrm".len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && after.is_some_and(|c| c.is_ascii_uppercase())
    })
}

#[test]
fn a_seaorm_type_name_is_recognised() {
    assert!(names_a_seaorm_type(
        "let s = SeaOrmLifecycleStore::new(&db);"
    ));
    assert!(names_a_seaorm_type("use x::{SeaOrmHostStorage};"));
    assert!(!names_a_seaorm_type("let s = Stores::new(&db).lifecycle;"));
    assert!(!names_a_seaorm_type("\"tenantry_store_seaorm\","));
    assert!(!names_a_seaorm_type("NotSeaOrmX"));
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

/// Public type names two crates may both define for now.
const SHARED_TYPE_NAMES: &[&str] = &[];

#[test]
fn no_two_crates_define_a_public_type_of_the_same_name() {
    let root = workspace_root();
    let mut definitions = Vec::new();
    for dir in fs::read_dir(root.join("crates"))
        .expect("crates/ exists")
        .flatten()
    {
        let src = dir.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let krate = relative(&root, &dir.path());
        let mut files = Vec::new();
        collect_rust_files(&src, &mut files);
        let skipped = test_module_paths(&files);
        for file in files
            .iter()
            .filter(|f| !skipped.iter().any(|s| f.starts_with(s)))
        {
            let text = fs::read_to_string(file).unwrap_or_default();
            for (name, line) in public_type_names(&text) {
                definitions.push(Definition {
                    name,
                    krate: krate.clone(),
                    at: format!("{}:{line}", relative(&root, file)),
                });
            }
        }
    }
    definitions.sort_by(|a, b| a.at.cmp(&b.at));
    assert!(
        definitions.iter().any(|d| d.name == "DispatchOutcome"),
        "the scan found no public type: is it reading crates/*/src?"
    );
    let clashes = shared_names(&definitions, SHARED_TYPE_NAMES);
    assert!(
        clashes.is_empty(),
        "each public type name belongs to one crate; rename one of each pair to what it is (a \
         re-export with `pub use` is fine):\n  {}",
        clashes.join("\n  ")
    );
}

#[test]
fn the_public_type_scan_reads_items_and_skips_test_code() {
    let text = "\
//! doc
/// pub struct InDocComment;
pub struct Plain;
pub(crate) struct CrateOnly;
    pub enum Nested<T> {
pub trait Port: Send {}
pub type Alias = u8;
#[cfg(feature = \"testing\")]
pub struct Fake;
#[cfg(test)]
pub struct TestOnly;
#[cfg(test)]
mod tests {
    pub struct InTests;
}
pub struct After;
";
    let names: Vec<String> = public_type_names(text)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["Plain", "Nested", "Port", "Alias", "Fake", "After"],
        "{text}"
    );
    let defs = [
        ("Same", "crates/a"),
        ("Same", "crates/b"),
        ("Own", "crates/a"),
        ("Own", "crates/a"),
    ]
    .map(|(name, krate)| Definition {
        name: name.to_owned(),
        krate: krate.to_owned(),
        at: format!("{krate}/src/lib.rs:1"),
    });
    assert_eq!(
        shared_names(&defs, &[]),
        ["Same: crates/a/src/lib.rs:1, crates/b/src/lib.rs:1"]
    );
    assert!(shared_names(&defs, &["Same"]).is_empty());
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

/// One `pub struct | enum | trait | type` item.
#[derive(Debug)]
struct Definition {
    name: String,
    /// The crate's folder, e.g. `crates/kernel`.
    krate: String,
    /// `file:line`.
    at: String,
}

/// `NAME: where, where` for every name defined in more than one crate, except `allowed`.
fn shared_names(definitions: &[Definition], allowed: &[&str]) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<&Definition>> = BTreeMap::new();
    for d in definitions {
        by_name.entry(d.name.as_str()).or_default().push(d);
    }
    by_name
        .into_iter()
        .filter(|(name, defs)| {
            !allowed.contains(name)
                && defs
                    .iter()
                    .map(|d| d.krate.as_str())
                    .collect::<BTreeSet<_>>()
                    .len()
                    > 1
        })
        .map(|(name, defs)| {
            let places: Vec<&str> = defs.iter().map(|d| d.at.as_str()).collect();
            format!("{name}: {}", places.join(", "))
        })
        .collect()
}

/// The names (and 1-based lines) of the `pub struct | enum | trait | type` items of one file,
/// leaving out items marked `#[cfg(test)]` and the bodies of inline `#[cfg(test)]` modules.
fn public_type_names(text: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    let mut cfg_test = false;
    // The indentation of the `mod` line of the inline test module being skipped.
    let mut skipping: Option<usize> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(depth) = skipping {
            if indent == depth && trimmed.starts_with('}') {
                skipping = None;
            }
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            cfg_test = true;
            continue;
        }
        if trimmed.starts_with("#[") || trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        if std::mem::take(&mut cfg_test) {
            if item_name(trimmed, "mod").is_some() && trimmed.ends_with('{') {
                skipping = Some(indent);
            }
            continue;
        }
        if let Some(name) = ["struct", "enum", "trait", "type"]
            .iter()
            .find_map(|kind| item_name(trimmed.strip_prefix("pub ")?, kind))
        {
            names.push((name, index + 1));
        }
    }
    names
}

/// The identifier after `kind ` (`struct`, `mod`, ...) at the start of `item`, after an
/// optional visibility.
fn item_name(item: &str, kind: &str) -> Option<String> {
    let item = item
        .strip_prefix("pub ")
        .or_else(|| item.strip_prefix("pub(crate) "))
        .unwrap_or(item);
    let rest = item.strip_prefix(kind)?.strip_prefix(' ')?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The files and folders of modules declared as `#[cfg(test)] mod name;` by one of `files`:
/// `name.rs` and `name/` beside a `lib.rs`, `main.rs` or `mod.rs`, under `stem/` otherwise.
fn test_module_paths(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let Some(parent) = file.parent() else {
            continue;
        };
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let base = if matches!(stem, "lib" | "main" | "mod") {
            parent.to_path_buf()
        } else {
            parent.join(stem)
        };
        let mut cfg_test = false;
        for line in text.lines().map(str::trim) {
            if line == "#[cfg(test)]" {
                cfg_test = true;
            } else if !line.starts_with("#[")
                && !line.is_empty()
                && std::mem::take(&mut cfg_test)
                && let Some(name) = line.strip_suffix(';').and_then(|l| item_name(l, "mod"))
            {
                paths.push(base.join(format!("{name}.rs")));
                paths.push(base.join(name));
            }
        }
    }
    paths
}

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
