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
