//! OpenAPI schema of the identifiers (feature `openapi`): every [`define_id!`](crate::define_id)
//! type is the component schema [`ID_SCHEMA`], a string with the rules of [`crate::id`]. The
//! API documents in `docs/openapi/` are generated from it (see `crates/testkit` and the app's
//! admin API); the domain rules never use it.

pub use utoipa;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

use crate::id::MAX_ID_LEN;

/// Name of the component schema every identifier refers to.
pub const ID_SCHEMA: &str = "Id";

/// The schema of an identifier: a non-empty string of at most [`MAX_ID_LEN`] bytes without
/// whitespace or control characters (the pattern states what a JSON Schema can; `parse` also
/// refuses `/`, invisible format characters and non-NFC text).
pub fn id_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_ID_LEN))
        .pattern(Some(r"^[^\s\p{Cc}]+$"))
        .description(Some(
            "Non-empty, at most 255 bytes, no whitespace or control characters.",
        ))
        .into()
}
