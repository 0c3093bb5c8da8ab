//! The reference Directory API v1 provider: one instance's directory in memory, every answer
//! signed with Ed25519, and faults per route (stale pages, untrusted or bad signatures, unsigned
//! answers, skewed timestamps, plus the transport faults of [`crate::fault`]).
//!
//! Signature format (the client side is `tenantry_remote_http::directory::signature`): headers
//! [`KEY_ID_HEADER`], [`TIMESTAMP_HEADER`] (Unix seconds) and [`SIGNATURE_HEADER`] (hex Ed25519
//! signature) over `tenantry-directory-v2\n{METHOD}\n{path}\n{query}\n{timestamp}\n{body}`
//! ([`signed_message`]: the request as received, so an answer cannot be replayed for another
//! request). Two trusted signing keys exist so a test can rotate
//! ([`ReferenceDirectory::rotate_signing_key`]); a third, untrusted key signs when
//! [`Fault::UntrustedSignature`] hits. [`Fault::ReplayedResponse`] sends the route's previous
//! signed answer byte for byte, signature included, as a replaying cache or attacker would.
//!
//! A test mutates the directory with [`ReferenceDirectory::change`], which hands out the
//! [`DirectoryModel`]: add / change / remove workspaces and members, emit entitlement events.

mod paging;
pub mod state;

use std::collections::BTreeMap;
use std::future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use ed25519_dalek::{Signer, SigningKey};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use tenantry_directory::{
    DirectoryDelta, DirectoryEventBatch, DirectorySnapshotPage, InstanceUuid,
    model::WorkspacesRequest,
};
use utoipa::OpenApi;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{Header, HeaderBuilder, ObjectBuilder, Required, Type};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use state::DirectoryModel;

use crate::fault::{DEFAULT_STALL, Fault, FaultInjector, FaultProfile, Route, RoutePlan};
use crate::http::{
    ApiConventions, CommonResponse, ErrorJson, RemoteErrorBody, error_response, retry_after_header,
    schema_ref, with_retry_after,
};
use crate::serve::{ConnectionControl, Server};

/// Header naming the signing key.
pub const KEY_ID_HEADER: &str = "x-directory-key-id";
/// Header with the signing time in Unix seconds.
pub const TIMESTAMP_HEADER: &str = "x-directory-timestamp";
/// Header with the hex Ed25519 signature.
pub const SIGNATURE_HEADER: &str = "x-directory-signature";
/// Domain-separation prefix of the signed message; `v2` binds the request too.
pub const SIGNATURE_CONTEXT: &str = "tenantry-directory-v2";

/// Path templates of Directory API v1, in axum syntax; the OpenAPI file documents exactly these.
pub const PATHS: [(&str, &str, Route); 3] = [
    (
        "GET",
        "/v1/instances/{instance_uuid}/directory/snapshot",
        Route::DirectorySnapshot,
    ),
    (
        "GET",
        "/v1/instances/{instance_uuid}/directory/events",
        Route::DirectoryEvents,
    ),
    (
        "POST",
        "/v1/instances/{instance_uuid}/directory/workspaces",
        Route::DirectoryWorkspaces,
    ),
];

/// Configuration of a reference directory.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectoryServerConfig {
    /// The one instance this directory serves.
    pub instance_uuid: InstanceUuid,
    /// Bearer token required on `/v1` requests, if any.
    pub bearer_token: Option<String>,
    /// Fault plans of the directory routes.
    pub profile: FaultProfile,
    /// Seed of the random fault draws.
    pub seed: u64,
    /// Seed the signing keys are derived from.
    pub key_seed: u64,
    /// How long a stalled request waits before answering.
    pub stall: Duration,
}

impl DirectoryServerConfig {
    /// A fault-free directory for `instance_uuid`, no bearer token.
    pub fn new(instance_uuid: InstanceUuid) -> Self {
        Self {
            instance_uuid,
            bearer_token: None,
            profile: FaultProfile::None,
            seed: 0,
            key_seed: 0,
            stall: DEFAULT_STALL,
        }
    }
}

/// A running reference directory on `127.0.0.1`. Dropping it stops the server.
#[derive(Debug)]
pub struct ReferenceDirectory {
    server: Server,
    base_url: String,
    shared: Arc<Shared>,
}

impl ReferenceDirectory {
    /// Starts a reference directory on `127.0.0.1:0`; returns its base URL and its handle.
    ///
    /// # Errors
    /// The bind error when no local port can be bound.
    pub async fn start(config: DirectoryServerConfig) -> io::Result<(String, Self)> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts a reference directory on `addr` (the standalone binary uses a fixed port).
    ///
    /// # Errors
    /// The bind error when `addr` cannot be bound.
    pub async fn start_on(
        addr: SocketAddr,
        config: DirectoryServerConfig,
    ) -> io::Result<(String, Self)> {
        Self::start_tls_on(addr, config, None).await
    }

    /// Starts a reference directory on `addr` serving HTTPS with `tls` (for example
    /// [`crate::tls::server_config`]; plain HTTP when `None`); the base URL is
    /// `https://<addr>`.
    ///
    /// # Errors
    /// The bind error when `addr` cannot be bound.
    pub async fn start_tls_on(
        addr: SocketAddr,
        config: DirectoryServerConfig,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<(String, Self)> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut rng = StdRng::seed_from_u64(config.key_seed);
        let mut key = |id: &str| (id.to_owned(), SigningKey::from_bytes(&rng.random()));
        let keys = Keys {
            trusted: vec![key("reference-1"), key("reference-2")],
            active: 0,
            untrusted: key("untrusted"),
        };
        let shared = Arc::new(Shared {
            token: config.bearer_token,
            stall: config.stall,
            inner: Mutex::new(Inner {
                model: DirectoryModel::new(config.instance_uuid),
                faults: FaultInjector::new(config.profile, config.seed),
                keys,
                last_bodies: BTreeMap::new(),
                last_signed: BTreeMap::new(),
                requests: BTreeMap::new(),
                traceparents: Vec::new(),
                pagings: paging::Pagings::default(),
            }),
        });
        let server = Server::start_tls_on(addr, router(Arc::clone(&shared)), tls).await?;
        let base_url = format!("{scheme}://{}", server.addr());
        Ok((
            base_url.clone(),
            Self {
                server,
                base_url,
                shared,
            },
        ))
    }

    /// Base URL, `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The served instance.
    pub fn instance_uuid(&self) -> InstanceUuid {
        self.shared.lock().model.instance().clone()
    }

    /// The trusted public keys `(key id, 32 bytes)` a client should accept (both rotation
    /// keys).
    pub fn trusted_public_keys(&self) -> Vec<(String, [u8; 32])> {
        self.shared
            .lock()
            .keys
            .trusted
            .iter()
            .map(|(id, k)| (id.clone(), k.verifying_key().to_bytes()))
            .collect()
    }

    /// The id of the key that currently signs.
    pub fn active_key_id(&self) -> String {
        let inner = self.shared.lock();
        inner.keys.trusted[inner.keys.active % inner.keys.trusted.len()]
            .0
            .clone()
    }

    /// Switches signing to the other trusted key; returns its id.
    pub fn rotate_signing_key(&self) -> String {
        {
            let mut inner = self.shared.lock();
            inner.keys.active = (inner.keys.active + 1) % inner.keys.trusted.len();
        }
        self.active_key_id()
    }

    /// Mutates the directory (each change appends its event); returns what `f` returns.
    pub fn change<R>(&self, f: impl FnOnce(&mut DirectoryModel) -> R) -> R {
        f(&mut self.shared.lock().model)
    }

    /// The newest cursor.
    pub fn cursor(&self) -> i64 {
        self.shared.lock().model.cursor()
    }

    /// Appends `faults` to the script of a directory `route`.
    pub fn script(&self, route: Route, faults: impl IntoIterator<Item = Option<Fault>>) {
        self.shared.lock().faults.script(route, faults);
    }

    /// Replaces the fault plan of `route`.
    pub fn set_plan(&self, route: Route, plan: RoutePlan) {
        self.shared.lock().faults.set_plan(route, plan);
    }

    /// Faults injected per route and fault name.
    pub fn faults_injected(&self) -> BTreeMap<(Route, &'static str), u64> {
        self.shared.lock().faults.injected()
    }

    /// Requests that passed auth and parsing, per route.
    pub fn requests(&self) -> BTreeMap<Route, u64> {
        self.shared.lock().requests.clone()
    }

    /// The W3C `traceparent` header of every authorized request that carried one, in arrival
    /// order (the directory client sends its request span's context: docs/protocol.md).
    pub fn traceparents(&self) -> Vec<String> {
        self.shared.lock().traceparents.clone()
    }

    /// Forgets every paged snapshot in progress: their page tokens answer `410
    /// SNAPSHOT_PAGE_EXPIRED` (a provider restarted, or one that keeps a paging only so long).
    pub fn expire_snapshot_pages(&self) {
        self.shared.lock().pagings.expire();
    }

    /// Stops the server: open connections are dropped.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

#[derive(Debug)]
struct Keys {
    trusted: Vec<(String, SigningKey)>,
    active: usize,
    untrusted: (String, SigningKey),
}

#[derive(Debug)]
struct Shared {
    token: Option<String>,
    stall: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    model: DirectoryModel,
    faults: FaultInjector,
    keys: Keys,
    last_bodies: BTreeMap<Route, Vec<u8>>,
    last_signed: BTreeMap<Route, SignedAnswer>,
    requests: BTreeMap<Route, u64>,
    /// The `traceparent` header of every authorized request that carried one, in order.
    traceparents: Vec<String>,
    /// Paged snapshots in progress.
    pagings: paging::Pagings,
}

/// One signed answer as sent: body and signature headers.
#[derive(Debug, Clone)]
struct SignedAnswer {
    body: Vec<u8>,
    key_id: String,
    timestamp: i64,
    signature: [u8; 64],
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every step leaves the model whole, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<(), RemoteErrorBody> {
        if let Some(token) = &self.token {
            crate::http::check_bearer(headers, token)?;
        }
        if let Some(traceparent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
            self.lock().traceparents.push(traceparent.to_owned());
        }
        Ok(())
    }

    fn check_instance(&self, instance: &str) -> Result<(), RemoteErrorBody> {
        if self.lock().model.instance().as_str() == instance {
            Ok(())
        } else {
            Err(RemoteErrorBody::new(
                404,
                "INSTANCE_NOT_FOUND",
                format!("this directory does not serve instance {instance}"),
            ))
        }
    }
}

/// The head of the OpenAPI document; the paths come from the handlers below.
#[derive(OpenApi)]
#[openapi(info(
    title = "Directory API",
    version = "1.0.0",
    description = "The signed SaaS directory that Tenantry projects into local accounts, workspaces, memberships and execution state: a full snapshot, the event stream in pages, and per-workspace deltas.\n\nEvery 2xx response is signed with Ed25519. The signed bytes are `tenantry-directory-v2\\n{METHOD}\\n{path}\\n{query}\\n{timestamp}\\n{body}`: the ASCII context string (signature version 2), then, each followed by a newline, the request method in upper case, the request path from `/v1/` on as sent (percent-encoded), the raw query string without `?` (empty when none), the decimal Unix-seconds timestamp of `X-Directory-Timestamp`; then the response body exactly as sent. Binding the request stops a signed answer from being replayed for another request. `X-Directory-Key-Id` names the signing key; clients trust several keys at once so the provider can rotate. A client refuses (and applies nothing of) a response that is unsigned, has a malformed header, names an untrusted key id, carries a timestamp more than 300 s away from the client's clock, or whose signature does not verify (strict verification). Clients also refuse bodies above their size limit (default 128 MiB). Error responses (`{code, message}`) need no signature: nothing is applied from them.\n\nAuthentication by bearer token is optional and provider-specific."
))]
struct DirectoryDoc;

/// The routes of Directory API v1, documented.
fn api() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::with_openapi(DirectoryDoc::openapi())
        .routes(routes!(snapshot))
        .routes(routes!(events))
        .routes(routes!(workspaces))
}

/// The signature headers as the document spells them (HTTP names are case-insensitive; the
/// constants above are the lower-case forms the server sends).
const KEY_ID_HEADER_NAME: &str = "X-Directory-Key-Id";
const TIMESTAMP_HEADER_NAME: &str = "X-Directory-Timestamp";
const SIGNATURE_HEADER_NAME: &str = "X-Directory-Signature";

/// What every operation of Directory API v1 has in common: every 2xx answer is signed.
const CONVENTIONS: ApiConventions = ApiConventions {
    parameters: shared_parameters,
    headers: shared_headers,
    common_responses: &[
        CommonResponse {
            status: "401",
            description: "Missing or wrong bearer token, when the provider requires one (`UNAUTHORIZED`).",
            retry_after: false,
            post_only: false,
        },
        CommonResponse {
            status: "404",
            description: "This provider does not serve the instance (`INSTANCE_NOT_FOUND`).",
            retry_after: false,
            post_only: false,
        },
        CommonResponse {
            status: "429",
            description: "Rate limited (`DIRECTORY_RATE_LIMITED`); retry after `Retry-After`.",
            retry_after: true,
            post_only: false,
        },
        CommonResponse {
            status: "503",
            description: "Temporarily unavailable (`DIRECTORY_UNAVAILABLE`); retry after `Retry-After`.",
            retry_after: true,
            post_only: false,
        },
    ],
    success_headers: &[
        KEY_ID_HEADER_NAME,
        TIMESTAMP_HEADER_NAME,
        SIGNATURE_HEADER_NAME,
    ],
    not_found: "no such route in Directory API v1",
};

fn shared_parameters() -> Vec<(&'static str, Parameter)> {
    vec![(
        "InstanceUuid",
        ParameterBuilder::new()
            .name("instance_uuid")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .schema(Some(schema_ref("Id")))
            .build(),
    )]
}

fn string_header(description: &str, pattern: Option<&str>) -> Header {
    HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(pattern),
        ))
        .description(Some(description))
        .build()
}

fn shared_headers() -> Vec<(&'static str, &'static str, Header)> {
    vec![
        ("RetryAfter", "Retry-After", retry_after_header()),
        (
            "KeyId",
            KEY_ID_HEADER_NAME,
            string_header("Id of the signing key.", None),
        ),
        (
            "Timestamp",
            TIMESTAMP_HEADER_NAME,
            string_header(
                "Signing time, Unix seconds (decimal). Must be within 300 s of the client's clock.",
                Some("^-?[0-9]+$"),
            ),
        ),
        (
            "Signature",
            SIGNATURE_HEADER_NAME,
            string_header(
                "Ed25519 signature (64 bytes, lowercase hex) over `tenantry-directory-v2\\n{METHOD}\\n{path}\\n{query}\\n{timestamp}\\n{body}`.",
                Some("^[0-9a-f]{128}$"),
            ),
        ),
    ]
}

/// The OpenAPI document of Directory API v1 as JSON (`docs/openapi/directory-v1.json`).
pub(crate) fn document_json() -> String {
    CONVENTIONS.document_json(api())
}

fn router(shared: Arc<Shared>) -> Router {
    CONVENTIONS.router(api()).with_state(shared)
}

type Ctl = Extension<Arc<ConnectionControl>>;

/// Full directory snapshot, whole or in pages
///
/// Every workspace of the instance with its members, covering the event stream up to and including `cursor`. Without a query the answer is the whole snapshot. With `page_size` it is the first page of a paged snapshot (`page` links; whole workspaces in ascending uuid order, at most `page_size` memberships unless one workspace alone has more); `page_token` answers the page a previous page named. Every page is signed for its own request, names the SHA-256 of the previous page's body and has the snapshot's cursor.
#[utoipa::path(
    get,
    path = "/v1/instances/{instance_uuid}/directory/snapshot",
    operation_id = "getSnapshot",
    params(
        ("instance_uuid" = InstanceUuid, Path),
        ("page_size" = Option<u32>, Query, minimum = 1, description = "Start a paged snapshot: most memberships per page (a Tenantry extension; a provider may ignore it and answer the whole snapshot)."),
        ("page_token" = Option<String>, Query, description = "The `next_page_token` of the previous page."),
    ),
    responses(
        (status = 200, description = "The snapshot or one page of it. Signed (see the signature headers); a client verifies the signature before parsing.", body = DirectorySnapshotPage),
        (status = 400, description = "`page_size` is not a positive integer, or both parameters are given (`INVALID_REQUEST`).", body = ErrorJson),
        (status = 410, description = "The provider no longer holds the snapshot `page_token` belongs to (`SNAPSHOT_PAGE_EXPIRED`); start again with `page_size`.", body = ErrorJson),
    )
)]
async fn snapshot(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(instance): Path<String>,
    query: Result<Query<SnapshotQuery>, QueryRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let parsed = shared
        .authorize(&headers)
        .and_then(|()| shared.check_instance(&instance))
        .and_then(|()| {
            let invalid = |reason: String| RemoteErrorBody::new(400, "INVALID_REQUEST", reason);
            let Query(query) = query.map_err(|e| {
                invalid(format!(
                    "query takes a positive integer page_size or a page_token: {e}"
                ))
            })?;
            match (query.page_size, query.page_token) {
                (Some(_), Some(_)) => Err(invalid(
                    "give page_size to start a paged snapshot or page_token to continue one, not both"
                        .to_owned(),
                )),
                (Some(0), None) => Err(invalid("page_size must be at least 1".to_owned())),
                (Some(size), None) => Ok(SnapshotRequest::FirstPage(size)),
                (None, Some(token)) => match shared.lock().pagings.take(&token) {
                    Some(pending) => Ok(SnapshotRequest::NextPage(pending)),
                    None => Err(RemoteErrorBody::new(
                        410,
                        "SNAPSHOT_PAGE_EXPIRED",
                        "the snapshot this page token belongs to is no longer held; start again with page_size",
                    )),
                },
                (None, None) => Ok(SnapshotRequest::Whole),
            }
        });
    let request = match parsed {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    serve(
        &shared,
        &ctl,
        Route::DirectorySnapshot,
        &uri,
        move |inner| {
            let now = chrono::Utc::now();
            match request {
                SnapshotRequest::Whole => serde_json::to_vec(&inner.model.snapshot(now)),
                SnapshotRequest::FirstPage(size) => {
                    let snapshot = inner.model.snapshot(now);
                    inner.pagings.first(snapshot, u64::from(size))
                }
                SnapshotRequest::NextPage(pending) => inner.pagings.next(pending),
            }
        },
    )
    .await
}

#[derive(Debug, Deserialize)]
struct SnapshotQuery {
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// What a snapshot request asks for.
enum SnapshotRequest {
    Whole,
    FirstPage(u32),
    NextPage(paging::Pending),
}

#[derive(Debug, Deserialize)]
struct EventsQuery {
    after: i64,
    limit: Option<u32>,
}

/// One page of the event stream
///
/// Events with `after < cursor`, in cursor order, at most `limit`. The page covers `(after_cursor, cursor]`; it is the last one when `cursor == high_water_cursor`. An empty page has `cursor == after_cursor`.
#[utoipa::path(
    get,
    path = "/v1/instances/{instance_uuid}/directory/events",
    operation_id = "getEvents",
    params(
        ("instance_uuid" = InstanceUuid, Path),
        ("after" = i64, Query, description = "Cursor already applied; the page starts after it."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Most events in the page, 1 to 100 (default 100; larger values are capped)."),
    ),
    responses(
        (status = 200, description = "The page. Signed (see the signature headers); a client verifies the signature before parsing.", body = DirectoryEventBatch),
        (status = 400, description = "`after` is missing or not an integer (`INVALID_REQUEST`).", body = ErrorJson),
    )
)]
async fn events(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(instance): Path<String>,
    query: Result<Query<EventsQuery>, QueryRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let parsed = shared
        .authorize(&headers)
        .and_then(|()| shared.check_instance(&instance))
        .and_then(|()| {
            query.map_err(|e| {
                RemoteErrorBody::new(
                    400,
                    "INVALID_REQUEST",
                    format!("query needs integer after and optional limit: {e}"),
                )
            })
        });
    let Query(query) = match parsed {
        Ok(q) => q,
        Err(e) => return error_response(&e),
    };
    let limit = query.limit.unwrap_or(state::MAX_PAGE);
    serve(&shared, &ctl, Route::DirectoryEvents, &uri, move |inner| {
        serde_json::to_vec(&inner.model.events(query.after, limit))
    })
    .await
}

/// Current state of the named workspaces (delta)
///
/// A read with a body: the current state of the requested workspaces. `requested_workspace_uuids` echoes the request sorted and without duplicates; a requested workspace missing from `workspaces` no longer exists (tombstone). Safe to repeat; no `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/v1/instances/{instance_uuid}/directory/workspaces",
    operation_id = "getWorkspaces",
    params(("instance_uuid" = InstanceUuid, Path)),
    request_body = WorkspacesRequest,
    responses(
        (status = 200, description = "The delta. Signed (see the signature headers); a client verifies the signature before parsing.", body = DirectoryDelta),
        (status = 400, description = "Malformed body (`INVALID_REQUEST`).", body = ErrorJson),
    )
)]
async fn workspaces(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(instance): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = shared
        .authorize(&headers)
        .and_then(|()| shared.check_instance(&instance))
        .and_then(|()| {
            serde_json::from_slice::<WorkspacesRequest>(&body).map_err(|e| {
                RemoteErrorBody::new(
                    400,
                    "INVALID_REQUEST",
                    format!("body must be {{\"workspace_uuids\": [...]}}: {e}"),
                )
            })
        });
    let request = match parsed {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    serve(
        &shared,
        &ctl,
        Route::DirectoryWorkspaces,
        &uri,
        move |inner| {
            serde_json::to_vec(
                &inner
                    .model
                    .delta(&request.workspace_uuids, chrono::Utc::now()),
            )
        },
    )
    .await
}

/// Runs one read through the faults, renders the body with `render`, and signs it for the
/// request `uri` of `route`'s method.
async fn serve(
    shared: &Shared,
    ctl: &ConnectionControl,
    route: Route,
    uri: &Uri,
    render: impl FnOnce(&mut Inner) -> serde_json::Result<Vec<u8>>,
) -> Response {
    let fault = {
        let mut inner = shared.lock();
        *inner.requests.entry(route).or_default() += 1;
        inner.faults.next(route)
    };
    match fault {
        Some(Fault::Unavailable { retry_after_secs }) => {
            let e =
                RemoteErrorBody::new(503, "DIRECTORY_UNAVAILABLE", "the directory is unavailable");
            return with_retry_after(error_response(&e), retry_after_secs);
        }
        Some(Fault::RateLimited { retry_after_secs }) => {
            let e = RemoteErrorBody::new(429, "DIRECTORY_RATE_LIMITED", "too many requests");
            return with_retry_after(error_response(&e), retry_after_secs);
        }
        Some(Fault::Stall { commit: false }) => tokio::time::sleep(shared.stall).await,
        _ => {}
    }
    let now = chrono::Utc::now().timestamp();
    let (body, signer) = {
        let mut inner = shared.lock();
        let fresh = match render(&mut inner) {
            Ok(b) => b,
            Err(e) => {
                drop(inner);
                return error_response(&RemoteErrorBody::new(500, "INTERNAL", e.to_string()));
            }
        };
        let stale = (fault == Some(Fault::StalePage))
            .then(|| inner.last_bodies.get(&route).cloned())
            .flatten();
        inner.last_bodies.insert(route, fresh.clone());
        let (id, key) = if fault == Some(Fault::UntrustedSignature) {
            inner.keys.untrusted.clone()
        } else {
            inner.keys.trusted[inner.keys.active % inner.keys.trusted.len()].clone()
        };
        (stale.unwrap_or(fresh), (id, key))
    };
    match fault {
        Some(Fault::LostAck) => {
            ctl.close();
            return future::pending().await;
        }
        Some(Fault::ResetAfterCommit) => {
            ctl.reset();
            return future::pending().await;
        }
        Some(Fault::Stall { commit: true }) => tokio::time::sleep(shared.stall).await,
        _ => {}
    }
    let timestamp = if fault == Some(Fault::SkewedTimestamp) {
        now - 3600
    } else {
        now
    };
    let (key_id, key) = signer;
    let method = if route == Route::DirectoryWorkspaces {
        Method::POST
    } else {
        Method::GET
    };
    let request = BoundRequest {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
    };
    let mut signature = key
        .sign(&signed_message(&request, timestamp, &body))
        .to_bytes();
    if fault == Some(Fault::BadSignature) {
        signature[0] ^= 0x01;
    }
    let answer = SignedAnswer {
        body,
        key_id,
        timestamp,
        signature,
    };
    let answer = {
        let mut inner = shared.lock();
        let previous = inner.last_signed.insert(route, answer.clone());
        match previous {
            Some(previous) if fault == Some(Fault::ReplayedResponse) => previous,
            _ => answer,
        }
    };
    let SignedAnswer {
        body,
        key_id,
        timestamp,
        signature,
    } = answer;
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if fault != Some(Fault::Unsigned) {
        for (name, value) in [
            (KEY_ID_HEADER, key_id),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, hex::encode(signature)),
        ] {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
    response
}

/// The request a signed answer is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundRequest<'a> {
    /// HTTP method, upper case.
    pub method: &'a str,
    /// The request path as received (percent-encoded), starting at `/v1/`.
    pub path: &'a str,
    /// The raw query string without `?`; empty when there is none.
    pub query: &'a str,
}

/// The bytes signed for a response:
/// `tenantry-directory-v2\n{METHOD}\n{path}\n{query}\n{timestamp}\n{body}`.
pub fn signed_message(request: &BoundRequest<'_>, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut message = format!(
        "{SIGNATURE_CONTEXT}\n{}\n{}\n{}\n{timestamp}\n",
        request.method, request.path, request.query
    )
    .into_bytes();
    message.extend_from_slice(body);
    message
}
