//! The OpenAPI 3 documents of the remote APIs, as the reference servers serve them at
//! `/openapi.json`. The files live in `docs/openapi/`; a test checks that the served document
//! is the file and that it documents exactly the routes the server has. They are read through
//! the symbolic links in `crates/testkit/openapi/`, so the published package carries them.

/// `docs/openapi/knowledgefs-v1.json`: KnowledgeFS lifecycle API v1.
pub const KNOWLEDGE_FS_V1: &str = include_str!("../openapi/knowledgefs-v1.json");

/// `docs/openapi/directory-v1.json`: Directory API v1.
pub const DIRECTORY_V1: &str = include_str!("../openapi/directory-v1.json");
