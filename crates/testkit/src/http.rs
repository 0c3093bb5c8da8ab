//! What the two reference servers share: the `{code, message}` error body, bearer auth,
//! `Retry-After`, and the router scaffolding that keeps each server's routes and its OpenAPI
//! document one thing.
//!
//! A server lists its handlers (each annotated with `#[utoipa::path]`) in a
//! [`utoipa_axum::router::OpenApiRouter`]; [`ApiConventions::document`] completes the document
//! with what every operation of that API has in common (security scheme, shared parameters and
//! headers as components, the error answers every route can give), and [`ApiConventions::router`]
//! turns the same routes into the axum router, with `GET /openapi.json` serving the document and
//! a `{code, message}` 404 for every other path. The committed files in `docs/openapi/` are this
//! document; `tests/openapi.rs` fails when they differ.

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::path::{Operation, Parameter};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::openapi::{
    ContentBuilder, Header, HeaderBuilder, ObjectBuilder, OpenApi, Ref, RefOr, ResponseBuilder,
    Schema, Type,
};
use utoipa_axum::router::OpenApiRouter;

/// A refusal of a reference server, answered as `{code, message}` JSON with `status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct RemoteErrorBody {
    /// HTTP status.
    pub status: u16,
    /// Machine-readable code.
    pub code: &'static str,
    /// Human-readable detail.
    pub message: String,
}

impl RemoteErrorBody {
    pub(crate) fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

/// An error answer as sent.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorJson {
    /// Machine-readable code, e.g. `UNAUTHORIZED`.
    code: &'static str,
    /// Human-readable detail.
    message: String,
}

/// `{code, message}` with the error's status.
pub(crate) fn error_response(error: &RemoteErrorBody) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ErrorJson {
        code: error.code,
        message: error.message.clone(),
    };
    (status, axum::Json(body)).into_response()
}

/// Adds `Retry-After: secs`.
pub(crate) fn with_retry_after(mut response: Response, secs: u32) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// `Ok` when `headers` carry `Authorization: Bearer <token>`; otherwise the 401 answer.
pub(crate) fn check_bearer(headers: &HeaderMap, token: &str) -> Result<(), RemoteErrorBody> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented == Some(token) {
        Ok(())
    } else {
        Err(RemoteErrorBody::new(
            401,
            "UNAUTHORIZED",
            "missing or wrong bearer token; send Authorization: Bearer <token>",
        ))
    }
}

/// `Retry-After`, the response header of 429 and 503 in both APIs.
pub(crate) fn retry_after_header() -> Header {
    HeaderBuilder::new()
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .description(Some(
            "Delay before retrying: whole seconds, or an HTTP date.",
        ))
        .build()
}

/// An error answer every operation of an API can give.
pub(crate) struct CommonResponse {
    /// Status code, e.g. `"503"`.
    pub status: &'static str,
    /// What it means and what the client does.
    pub description: &'static str,
    /// Whether it carries the `Retry-After` header (component `RetryAfter`).
    pub retry_after: bool,
    /// Whether only mutations (POST) give it.
    pub post_only: bool,
}

/// What every operation of one API has in common, and how its router is built. Every API is
/// served at `/` and documents bearer auth (`bearer`) as its security scheme.
pub(crate) struct ApiConventions {
    /// Shared parameters: (component name, parameter). An operation parameter with the same
    /// name and location becomes a `$ref` to the component.
    pub parameters: fn() -> Vec<(&'static str, Parameter)>,
    /// Shared response headers: (component name, header name, header). A response header of
    /// that name becomes a `$ref` to the component.
    pub headers: fn() -> Vec<(&'static str, &'static str, Header)>,
    /// Error answers added to every operation that does not declare them itself.
    pub common_responses: &'static [CommonResponse],
    /// Shared headers (by header name) every 2xx answer carries, e.g. the directory's
    /// signature headers.
    pub success_headers: &'static [&'static str],
    /// The message of the 404 for paths outside the API.
    pub not_found: &'static str,
}

impl ApiConventions {
    /// The OpenAPI document of `api`, completed with these conventions.
    pub(crate) fn document<S>(&self, api: OpenApiRouter<S>) -> OpenApi
    where
        S: Clone + Send + Sync + 'static,
    {
        self.complete(api.into_openapi())
    }

    /// The document as served and committed: pretty JSON with a final newline.
    pub(crate) fn document_json<S>(&self, api: OpenApiRouter<S>) -> String
    where
        S: Clone + Send + Sync + 'static,
    {
        to_json(&self.document(api))
    }

    /// The axum router of `api` plus `GET /openapi.json` (the completed document) and a JSON
    /// 404 fallback.
    pub(crate) fn router<S>(&self, api: OpenApiRouter<S>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let (router, doc) = api.split_for_parts();
        let json = to_json(&self.complete(doc));
        let not_found = self.not_found;
        router
            .route(
                "/openapi.json",
                get(move || async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        )],
                        json,
                    )
                }),
            )
            .fallback(move || async move {
                error_response(&RemoteErrorBody::new(404, "NOT_FOUND", not_found))
            })
    }

    fn complete(&self, mut doc: OpenApi) -> OpenApi {
        let parameters = (self.parameters)();
        let headers = (self.headers)();
        doc.servers = Some(vec![Server::new("/")]);
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
        let components = doc.components.get_or_insert_with(Default::default);
        components.security_schemes.insert(
            "bearer".to_owned(),
            RefOr::T(SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build(),
            )),
        );
        let retry_after = headers
            .iter()
            .find(|(_, name, _)| name.eq_ignore_ascii_case("Retry-After"))
            .map(|(component, name, _)| (*name, *component));
        for (component, parameter) in &parameters {
            components
                .parameters
                .insert((*component).to_owned(), RefOr::T(parameter.clone()));
        }
        for (component, _, header) in &headers {
            components
                .headers
                .insert((*component).to_owned(), RefOr::T(header.clone()));
        }
        for item in doc.paths.paths.values_mut() {
            for (operation, is_post) in [
                (&mut item.get, false),
                (&mut item.put, false),
                (&mut item.post, true),
                (&mut item.delete, false),
                (&mut item.patch, false),
            ] {
                let Some(operation) = operation else { continue };
                self.add_common_responses(operation, is_post, retry_after);
                self.add_success_headers(operation, &headers);
                hoist(operation, &parameters, &headers);
            }
        }
        doc
    }

    fn add_common_responses(
        &self,
        operation: &mut Operation,
        is_post: bool,
        retry_after: Option<(&str, &str)>,
    ) {
        for common in self.common_responses {
            if (common.post_only && !is_post)
                || operation.responses.responses.contains_key(common.status)
            {
                continue;
            }
            let mut response = ResponseBuilder::new()
                .description(common.description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Error")))
                        .build(),
                )
                .build();
            if let (true, Some((name, component))) = (common.retry_after, retry_after) {
                response
                    .headers
                    .insert(name.to_owned(), header_ref(component));
            }
            operation
                .responses
                .responses
                .insert(common.status.to_owned(), RefOr::T(response));
        }
    }
}

impl ApiConventions {
    fn add_success_headers(
        &self,
        operation: &mut Operation,
        headers: &[(&'static str, &'static str, Header)],
    ) {
        for (status, response) in &mut operation.responses.responses {
            let RefOr::T(response) = response else {
                continue;
            };
            if !status.starts_with('2') {
                continue;
            }
            for name in self.success_headers {
                if let Some((component, shared, _)) =
                    headers.iter().find(|(_, shared, _)| shared == name)
                {
                    response
                        .headers
                        .insert((*shared).to_owned(), header_ref(component));
                }
            }
        }
    }
}

/// Replaces the operation's parameters and response headers that match a shared one by a
/// `$ref` to its component.
fn hoist(
    operation: &mut Operation,
    parameters: &[(&'static str, Parameter)],
    headers: &[(&'static str, &'static str, Header)],
) {
    for parameter in operation.parameters.iter_mut().flatten() {
        let RefOr::T(inline) = parameter else {
            continue;
        };
        if let Some((component, _)) = parameters
            .iter()
            .find(|(_, p)| p.name == inline.name && p.parameter_in == inline.parameter_in)
        {
            *parameter = RefOr::Ref(Ref::new(format!("#/components/parameters/{component}")));
        }
    }
    for response in operation.responses.responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        for (name, header) in response.headers.iter_mut() {
            if let Some((component, _, _)) = headers
                .iter()
                .find(|(_, shared, _)| shared.eq_ignore_ascii_case(name))
            {
                *header = header_ref(component);
            }
        }
    }
}

fn header_ref(component: &str) -> RefOr<Header> {
    RefOr::Ref(Ref::new(format!("#/components/headers/{component}")))
}

/// A schema reference to the component `name`.
pub(crate) fn schema_ref(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn to_json(doc: &OpenApi) -> String {
    // Serializing a document of plain maps and strings cannot fail.
    let mut json = doc.to_pretty_json().unwrap_or_default();
    json.push('\n');
    json
}
