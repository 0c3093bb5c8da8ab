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
/// refuses `/`, `.` and `..`, invisible format characters and non-NFC text).
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

/// With the `openapi` feature: every identifier is the OpenAPI schema `Id`
/// ([`id_schema`]). Chosen by the kernel's features, not the caller's.
#[doc(hidden)]
#[macro_export]
macro_rules! __id_openapi_schema {
    ($name:ident) => {
        impl $crate::openapi::utoipa::PartialSchema for $name {
            fn schema() -> $crate::openapi::utoipa::openapi::RefOr<
                $crate::openapi::utoipa::openapi::schema::Schema,
            > {
                $crate::openapi::id_schema()
            }
        }

        impl $crate::openapi::utoipa::ToSchema for $name {
            fn name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed($crate::openapi::ID_SCHEMA)
            }
        }
    };
}
