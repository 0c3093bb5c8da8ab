//! `docs/openapi/admin-v1.json` is what the admin API's handlers and types generate (and what
//! `tenantry serve` answers at `/openapi.json`, see `admin_api.rs`). After changing a handler
//! or an answer type, regenerate the file with
//! `UPDATE_OPENAPI=1 cargo test -p tenantry-app --test openapi` and commit it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi/admin-v1.json")
}

#[test]
fn committed_admin_document_is_generated_from_the_types() {
    let generated = tenantry_app::admin::document_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        std::fs::write(doc_path(), &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(doc_path()).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/openapi/admin-v1.json differs from what the admin handlers and types generate \
             (first difference at line {}). Regenerate it with \
             `UPDATE_OPENAPI=1 cargo test -p tenantry-app --test openapi` and commit it.",
            line + 1
        );
    }
}
