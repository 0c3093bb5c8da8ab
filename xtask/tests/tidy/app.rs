//! Tidy checks of the app crate: it names the storage adapter in its wiring only, and builds
//! the process's one system clock in one place.

use std::fs;

use super::{collect_rust_files, workspace_root};

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

/// One clock per process: outside comments, `use` lines and unit-test modules the app names
/// `SystemClock` only in `service::system_clock`, so every component gets the instance the
/// wiring hands it instead of defaulting to a clock of its own.
#[test]
fn the_app_constructs_the_system_clock_in_one_place_only() {
    let src = workspace_root().join("crates/app/src");
    let mut files = Vec::new();
    collect_rust_files(&src, &mut files);
    let mut places = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("read app source");
        let shipped = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        for (n, line) in shipped.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default().trim();
            if code.contains("SystemClock") && !code.starts_with("use ") {
                let relative = file
                    .strip_prefix(&src)
                    .expect("below src")
                    .display()
                    .to_string();
                places.push(format!("src/{relative}:{}: {code}", n + 1));
            }
        }
    }
    assert_eq!(
        places.len(),
        1,
        "construct the SystemClock only in service::system_clock and hand that clock \
         down; found: {places:#?}"
    );
    assert!(
        places[0].starts_with("src/service.rs") && places[0].contains("Arc::new(SystemClock)"),
        "{places:#?}"
    );
}
