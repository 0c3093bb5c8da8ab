//! The OpenAPI 3.1 document of the admin API, generated with utoipa from the handlers'
//! `#[utoipa::path]` annotations and the request, answer and error types (`ToSchema`,
//! `IntoParams`, the `ToResponse` error answers of `error.rs`). The committed
//! `docs/openapi/admin-v1.json` is this document, served at `/openapi.json`; the test
//! `tests/openapi.rs` fails when they differ and rewrites the file with `UPDATE_OPENAPI=1`.
//!
//! The app has its own small head here instead of the reference servers' conventions in the
//! test kit (which the service binary must not link): the admin API's rules differ anyway
//! (auth on `/v1/*` only, error answers that vary per route), so each operation states its
//! own answers.

use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, Ref, Required};
use utoipa::{IntoParams, Modify, OpenApi};

use super::error::{
    BadRequest, Conflict, Forbidden, IdempotencyKeyReused, NotFound, PayloadTooLarge, Unauthorized,
    Unavailable, UnsupportedMediaType,
};
use super::extract::IdempotencyKeyHeader;
use super::{commands, fences, lifecycle, probes};

/// The head of the document; the paths come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tenantry admin API",
        version = "1.0.0",
        description = "Admin API of `tenantry serve`. JSON everywhere; errors are `{code, message}`. `/v1/*` requires `Authorization: Bearer <token>` with an operator's token (`admin_token`, operator `admin`, or an `[[operators]]` entry) when any is configured. Each operator has a role: `read` may send GET only (any other method is 403 FORBIDDEN_ROLE, nothing written); `operate` may do everything. Every action records the authenticated operator's name as its actor: a body `actor` may be omitted, and one that differs from the name is 403 ACTOR_MISMATCH (without any operator configured, the body's actor is recorded and required). Mutations accept one `Idempotency-Key` header (an Id; generated when absent, which makes the request non-replayable; two or more are 400 DUPLICATE_IDEMPOTENCY_KEY). Ids are 1..=255 bytes without whitespace, control or invisible format characters or '/', in Unicode NFC (a non-NFC id is refused, not normalized). A 5xx answer carries a correlation_id (also the X-Correlation-Id header) and never the underlying error text; the service log has the detail under the same id. Request bodies are limited to 64 KiB (413). Bad input is refused with 4xx and nothing is written."
    ),
    servers((url = "http://127.0.0.1:8080")),
    paths(
        lifecycle::create_control_space,
        lifecycle::get_control_space,
        lifecycle::delete_control_space,
        lifecycle::revoke_grant,
        lifecycle::list_commands,
        fences::list_fences,
        fences::clear_fence,
        probes::directory_status,
        probes::healthz,
        probes::readyz,
        probes::metrics,
        commands::retry_command,
        commands::abandon_command,
        commands::retry_matching,
        commands::abandon_matching,
        commands::list_actions,
        commands::get_command,
        commands::mark_deleted,
    ),
    components(responses(
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        IdempotencyKeyReused,
        PayloadTooLarge,
        UnsupportedMediaType,
        Unavailable,
    )),
    modifiers(&BearerAuth)
)]
struct AdminDoc;

/// Declares the `bearer` security scheme the `/v1/*` operations require.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut Document) {
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
    }
}

impl IntoParams for IdempotencyKeyHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes the request replayable: the same key with the same request returns the original receipt; with a different request it is refused (422). Send it at most once (two headers: 400 DUPLICATE_IDEMPOTENCY_KEY).",
                ))
                .schema(Some(Ref::from_schema_name(tenantry_kernel::openapi::ID_SCHEMA)))
                .build(),
        ]
    }
}

/// `docs/openapi/admin-v1.json` as the types generate it: pretty JSON with a final newline.
pub fn document_json() -> String {
    // Serializing a document of plain maps and strings cannot fail.
    let mut json = AdminDoc::openapi().to_pretty_json().unwrap_or_default();
    json.push('\n');
    json
}
