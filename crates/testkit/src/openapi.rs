//! The OpenAPI 3.1 documents of the remote APIs, generated from the handlers and wire types
//! with utoipa (the shared scaffolding is in `src/http.rs`), as the reference servers serve
//! them at `/openapi.json`. The committed copies in `docs/openapi/` must equal them:
//! `tests/openapi.rs` fails when they differ and rewrites them when run with
//! `UPDATE_OPENAPI=1`.

/// `docs/openapi/knowledgefs-v1.json`: KnowledgeFS lifecycle API v1, pretty JSON with a final
/// newline.
pub fn knowledge_fs_v1() -> String {
    crate::knowledge_fs::document_json()
}

/// `docs/openapi/directory-v1.json`: Directory API v1, pretty JSON with a final newline.
pub fn directory_v1() -> String {
    crate::directory::document_json()
}

/// Test helper: fails when the committed `docs/openapi/{name}` differs from `generated`
/// (naming the first differing line and the `regenerate` command), or, when the test runs
/// with `UPDATE_OPENAPI=1`, rewrites the file with `generated` instead. The test kit's and the
/// app's `tests/openapi.rs` both use it.
///
/// # Panics
/// When the file differs, or cannot be written under `UPDATE_OPENAPI=1`.
pub fn check_committed(name: &str, generated: &str, regenerate: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/openapi")
        .join(name);
    if std::env::var_os("UPDATE_OPENAPI").is_some_and(|v| v == "1") {
        if let Err(e) = std::fs::write(&path, generated) {
            panic!("cannot write {}: {e}", path.display());
        }
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/openapi/{name} differs from what the handlers and wire types generate \
             (first difference at line {}). Regenerate it with `{regenerate}` and commit it.",
            line + 1
        );
    }
}

/// Test helper: the (upper-case method, path template) of every operation an OpenAPI 3.x
/// `document` (JSON text) lists.
///
/// # Panics
/// When `document` is not JSON, not OpenAPI 3.x, or its `paths` are not objects.
pub fn documented_routes(document: &str) -> std::collections::BTreeSet<(String, String)> {
    let doc: serde_json::Value = match serde_json::from_str(document) {
        Ok(doc) => doc,
        Err(e) => panic!("the OpenAPI document is not JSON: {e}"),
    };
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "not an OpenAPI 3 document"
    );
    let Some(paths) = doc["paths"].as_object() else {
        panic!("the OpenAPI document has no paths object");
    };
    paths
        .iter()
        .flat_map(|(path, operations)| {
            let Some(operations) = operations.as_object() else {
                panic!("path {path} is not an object");
            };
            operations
                .keys()
                .map(move |method| (method.to_uppercase(), path.clone()))
        })
        .collect()
}
