//! The HTTP front end: routes, authentication, rate limits and error mapping over [`Service`].
//!
//! The router and the OpenAPI document come from one list ([`routes`]): every route is a
//! handler annotated with `#[utoipa::path]` and registered through `utoipa_axum::routes!`,
//! which documents it as it registers it, so no route can be served undocumented. Every answer
//! that is not a success is the JSON error of the contract, `{"error": {"code", "message"}}`,
//! including unmatched routes (404), wrong methods (405, with `Allow`) and what axum's own
//! extractors reject.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use cordon_policy::Outcome;
use cordon_service::files;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{IntoParams, OpenApi as _, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, ErrorKind};
use cordon_service::types::*;
use cordon_service::{
    signal_number, Caller, ContextEnd, ExecEvent, ImageList, PullEvent, PullRequest, PullResult,
    Service,
};

pub struct AppState {
    pub service: Arc<Service>,
    /// Authentication disabled (only allowed on loopback).
    pub open: bool,
    /// The MCP transport, served at `/mcp` by the handlers below.
    mcp: Router,
}

impl AppState {
    pub fn new(service: Arc<Service>, open: bool) -> Arc<AppState> {
        let mcp = crate::mcp::http_service(crate::mcp::McpState::new(service.clone(), None, None));
        Arc::new(AppState { service, open, mcp })
    }
}

/// Local users of an open (no-auth) server all act as this key id.
const OPEN_KEY: &str = "local";

/// True for `localhost`, `127.x.y.z` and `[::1]`, with or without a port.
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Without keys, anything that reaches the port may use the server, so make sure that is a
/// local program and not a web page: a page can send a JSON body as `text/plain` without a
/// preflight (and the server reads JSON whatever the content type), so it must not get in with
/// its own `Origin`, nor through a name of its own that resolves to 127.0.0.1 (DNS rebinding:
/// its `Host` is that name).
fn local_request(h: &HeaderMap) -> Result<(), ApiError> {
    let forbidden = |what: String| ApiError::new(ErrorKind::Forbidden, "forbidden", what);
    if let Some(host) = h.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !is_loopback_authority(host) {
            return Err(forbidden(format!(
                "this server runs without API keys and answers only requests addressed to \
                 127.0.0.1, [::1] or localhost, not to '{host}'"
            )));
        }
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if !is_loopback_authority(authority) {
            return Err(forbidden(format!(
                "this server runs without API keys and refuses requests from web pages of \
                 other origins ('{origin}')"
            )));
        }
    }
    Ok(())
}

async fn auth(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let caller = match authenticate(
        &st,
        req.headers(),
        token,
        "missing API key: send 'Authorization: Bearer <key>'",
    ) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Who sends `token` (an API key), under its rate limit; on a server without keys, any local
/// program. Every front end (this API, the E2B door) authenticates through here.
pub(crate) fn authenticate(
    st: &AppState,
    headers: &HeaderMap,
    token: Option<&str>,
    missing: &str,
) -> Result<Caller, ApiError> {
    if st.open {
        if let Err(e) = local_request(headers) {
            st.service.deny("origin");
            return Err(e);
        }
        return Ok(Caller {
            key_id: OPEN_KEY.into(),
            max_sandboxes: 1000,
        });
    }
    Ok(st.service.authenticate(token, missing)?)
}

/// Routes anyone may call: no key, no rate limit.
fn public_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
}

/// Routes behind the API key. Each `routes!` call registers the handlers of one path, and
/// documents them from their `#[utoipa::path]` as it does.
fn protected_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get_one, delete))
        .routes(routes!(extend))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(exec))
        .routes(routes!(list_commands))
        .routes(routes!(get_command))
        .routes(routes!(wait_command))
        .routes(routes!(command_stdin))
        .routes(routes!(command_signal))
        .routes(routes!(file_read, file_write, file_delete))
        .routes(routes!(file_list))
        .routes(routes!(file_stat))
        .routes(routes!(file_mkdir))
        .routes(routes!(file_move))
        .routes(routes!(get_network, put_network))
        .routes(routes!(run_code))
        .routes(routes!(list_contexts, create_context))
        .routes(routes!(delete_context))
        .routes(routes!(restart_context))
        .routes(routes!(run_oneshot))
        .routes(routes!(list_images))
        .routes(routes!(pull_image))
        .routes(routes!(mcp_post, mcp_get, mcp_delete))
}

/// Paths served without a key.
const PUBLIC_PATHS: [&str; 3] = ["/healthz", "/metrics", "/openapi.json"];

pub fn router(st: Arc<AppState>) -> Router {
    let max_upload = st.service.config().max_upload as usize;
    let (router, _) = public_routes()
        .merge(protected_routes().route_layer(middleware::from_fn_with_state(st.clone(), auth)))
        .split_for_parts();
    let api = router
        .layer(DefaultBodyLimit::max(max_upload))
        .with_state(st.clone());
    // Around the whole router, not route by route: the 405 answers get their `Allow` header
    // from the router itself, after any per-route layer has run.
    // The E2B door answers its own paths (none of which this API uses) in E2B's shapes.
    Router::new()
        .merge(crate::e2b::router(st))
        .fallback_service(api)
        .layer(middleware::from_fn(json_errors))
}

/// The OpenAPI document of [`router`]: the same route list, plus what the route annotations
/// leave out — the security scheme, the error answers every operation can give, and which
/// operations need no key.
pub fn openapi() -> OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(public_routes().merge(protected_routes()).into_openapi());
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API key of this server: `cordon serve` prints the first one, `cordon keys create` makes more",
                ))
                .build(),
        ),
    );
    doc.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
        "bearer",
        Vec::<String>::new(),
    )]);
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = PUBLIC_PATHS.contains(&path.as_str());
        for op in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
            &mut item.head,
            &mut item.options,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            if public {
                op.security = Some(Vec::new());
                continue;
            }
            for status in error_statuses(path, op.request_body.is_some()) {
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| error_response(path, status));
            }
        }
    }
    // The E2B door keeps its own authentication and error shape: added after the above.
    crate::e2b::openapi::document(&mut doc);
    doc
}

/// The error statuses an authenticated operation can answer (besides what its annotation
/// lists): the key check (401, 429), bad input (400), a body over the limit (413), a sandbox
/// or other resource that does not exist (404), a sandbox that cannot take the request now
/// (409), file system answers (403, 501, 507), and a pull's refusals (403, 422, 502).
fn error_statuses(path: &str, has_body: bool) -> Vec<u16> {
    let mut v = vec![400, 401, 429, 500];
    if has_body {
        v.push(413);
    }
    if path.contains("{id}") || path.contains("{cid}") || path == "/mcp" {
        v.push(404);
    }
    if path.starts_with("/v1/sandboxes/{id}/") {
        v.push(409);
    }
    if path.contains("/files") {
        v.extend([403, 501, 507]);
    }
    if path == "/mcp" {
        v.extend([403, 405, 406, 415]);
    }
    if path == "/v1/images/pull" {
        v.extend([403, 404, 422, 502]);
    }
    v
}

fn error_response(path: &str, status: u16) -> RefOr<utoipa::openapi::Response> {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let description = match status {
        400 => "The request is malformed: its body, query or path does not fit the schema, or a value is out of range (the message names the field)",
        401 => "No API key, or one that is invalid or revoked",
        403 => "Not allowed: a path outside what the sandbox may touch, a registry this server may not pull from, or (without keys) a request that is not local",
        404 => "No such sandbox (or command, context, file, MCP session) for this key",
        405 => "Method not allowed here; `Allow` lists the ones that are",
        406 => "The client does not accept what this endpoint sends",
        409 => "The sandbox cannot do this now (it ended, its kernel did not start, a file is in the way, …)",
        413 => "The body is larger than this server accepts",
        415 => "A content type this endpoint does not take",
        422 => "The image cannot be used: a digest that does not match, a format or feature not handled, a size cap reached, no image for the platform asked for",
        429 => "Rate limit or sandbox quota of this key reached; retry after `Retry-After` seconds",
        500 => "The server or the host failed (the message says what)",
        501 => "The sandbox's file system cannot do this",
        502 => "The registry refused or failed (the message says what it answered)",
        507 => "The sandbox's disk is full",
        _ => "Error",
    };
    let mut schema: RefOr<utoipa::openapi::schema::Schema> =
        Ref::from_schema_name("ErrorBody").into();
    if path == "/mcp" && status == 400 {
        // rmcp answers JSON-RPC errors there; our own checks answer the contract's body.
        schema = utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::Object)
            .description(Some(
                "A JSON-RPC error response, or the error body of this API",
            ))
            .into();
    }
    let mut r = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(schema)).build(),
    );
    if status == 429 {
        r = r.header(
            "Retry-After",
            utoipa::openapi::HeaderBuilder::new()
                .schema(
                    utoipa::openapi::schema::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::schema::Type::Integer)
                        .minimum(Some(0)),
                )
                .description(Some("Seconds to wait before retrying"))
                .build(),
        );
    }
    if status == 405 {
        r = r.header(
            "Allow",
            utoipa::openapi::HeaderBuilder::new()
                .schema(
                    utoipa::openapi::schema::ObjectBuilder::new()
                        .schema_type(utoipa::openapi::schema::Type::String),
                )
                .build(),
        );
    }
    r.build().into()
}

/// The document as served, built once.
fn openapi_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        openapi()
            .to_json()
            .unwrap_or_else(|e| json!({"error": e.to_string()}).to_string())
    })
}

/// Every answer that is not a success carries the contract's JSON error. Handlers answer that
/// way themselves; what is left — unmatched routes and methods (axum answers those with an
/// empty body), extractor rejections (plain text) and the MCP transport's plain-text refusals
/// — is rewritten here, keeping its status and headers (`Allow`, `Retry-After`).
async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let (code, message) = match status {
        StatusCode::NOT_FOUND if text.is_empty() => (
            "no_route",
            format!("no route {method} {path}; the API is described at /openapi.json"),
        ),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allow = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            (
                "method_not_allowed",
                format!("{method} is not allowed on {path}; allowed: {allow}"),
            )
        }
        _ => (status_code_name(status), text),
    };
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        message
    };
    let body = serde_json::to_vec(&json!({"error": {"code": code, "message": message}}))
        .unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

fn status_code_name(s: StatusCode) -> &'static str {
    match s.as_u16() {
        400 => "invalid_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        406 => "not_acceptable",
        409 => "conflict",
        413 => "too_large",
        415 => "unsupported_media_type",
        422 => "invalid_request",
        429 => "rate_limited",
        500 => "internal",
        501 => "unsupported",
        503 => "unavailable",
        507 => "no_space",
        _ => "error",
    }
}

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = inline(Health))))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

#[utoipa::path(get, path = "/openapi.json",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_text()).into_response()
}

#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain", body = String)))]
async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let body = st.service.metrics_text();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// JSON bodies with errors in our shape (axum's default rejection is plain text).
/// A JSON request body. The body is read as JSON whatever its `Content-Type` says: `curl -d`
/// labels JSON `application/x-www-form-urlencoded`, and refusing it (415) would turn the
/// commonest first try into an error while protecting nothing (without keys, `local_request`
/// keeps web pages out). An empty body (or `null`) stands for `{}`; anything else must be one
/// JSON object.
struct JsonBody<T>(T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: for<'de> Deserialize<'de>,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorKind::TooLarge,
                    "too_large",
                    "the request body is larger than this server accepts (its operator sets \
                     the limit with `cordon serve --max-upload`)",
                )
            } else {
                ApiError::bad_request(format!("reading the body: {}", e.body_text()))
            }
        })?;
        let trimmed = bytes.trim_ascii();
        let text: &[u8] = if trimmed.is_empty() || trimmed == b"null" {
            b"{}"
        } else {
            trimmed
        };
        let hint = match &content_type {
            Some(c) if !c.starts_with("application/json") && !c.contains("+json") => {
                format!(" (the body is read as JSON whatever its Content-Type; it was '{c}')")
            }
            _ => String::new(),
        };
        if text.first() != Some(&b'{') {
            return Err(ApiError::bad_request(format!(
                "the body must be a JSON object{hint}"
            )));
        }
        serde_json::from_slice(text).map(JsonBody).map_err(|e| {
            ApiError::bad_request(format!("the body does not fit this request: {e}{hint}"))
        })
    }
}

#[utoipa::path(post, path = "/v1/sandboxes", request_body(content = Option<CreateSandbox>, description = "All fields are optional; an empty body is `{}`"),
    responses((status = 201, description = "The sandbox runs", body = SandboxInfo)))]
async fn create(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateSandbox>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st.service.create(&c, req).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(get, path = "/v1/sandboxes",
    description = "The key's running sandboxes. `?metadata.KEY=VALUE` (any number of them) keeps only those whose metadata has KEY equal to VALUE; other query parameters are ignored.",
    responses((status = 200, body = SandboxList)))]
async fn list(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Json<SandboxList> {
    let filter: BTreeMap<String, String> = q
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix("metadata.").map(|k| (k.to_string(), v)))
        .collect();
    Json(st.service.list(&c, &filter))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", params(IdPath),
    description = "A running sandbox, or one that ended (its `state` and `ended_reason` say how; `enforcement` and `limits` are then null).",
    responses((status = 200, body = SandboxInfo)))]
async fn get_one(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.get(&c, &id)?))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", params(IdPath),
    responses((status = 204, description = "Deleted: every process of the sandbox is gone")))]
async fn delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<StatusCode, ApiError> {
    st.service.delete(&c, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/ttl", params(IdPath), request_body = ExtendTtl,
    responses((status = 200, body = SandboxInfo)))]
async fn extend(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<ExtendTtl>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.extend(&c, &id, &req.ttl)?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", params(IdPath),
    responses((status = 200, body = SandboxInfo,
        description = "Paused: every process is frozen (`paused_by` says how), memory and files stay; \
        commands answer 409 until it is resumed. It still counts against the key's quota and its TTL keeps running. \
        409 `already_paused` when it is paused already")))]
async fn pause(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.pause(&c, &id).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", params(IdPath),
    responses((status = 200, body = SandboxInfo,
        description = "Running again (a sandbox that was not paused is left as it is)")))]
async fn resume(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<SandboxInfo>, ApiError> {
    st.service.resume(&c, &id).await?;
    Ok(Json(st.service.get(&c, &id)?))
}

fn wants_stream(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

fn chunk_event(name: &str, data: &[u8]) -> Event {
    use base64::Engine;
    let payload = match std::str::from_utf8(data) {
        Ok(s) => json!({"data": s}),
        Err(_) => {
            json!({"data": String::from_utf8_lossy(data), "b64": base64::engine::general_purpose::STANDARD.encode(data)})
        }
    };
    Event::default().event(name).data(payload.to_string())
}

/// Path parameter of every sandbox route.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct IdPath {
    /// The sandbox's id.
    id: String,
}

/// Path parameters of a background command's routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct CommandPath {
    /// The sandbox's id.
    id: String,
    /// The command's id.
    cid: String,
}

/// Path parameters of an interpreter context's routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct ContextPath {
    /// The sandbox's id.
    id: String,
    /// `python` (or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`, `shell`), any case.
    #[param(
        pattern = r"^([pP][yY][tT][hH][oO][nN]3?|[pP][yY]|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]|[jJ][sS]|[nN][oO][dD][eE]|[bB][aA][sS][hH]|[sS][hH]|[sS][hH][eE][lL][lL])$"
    )]
    language: String,
    /// The context's name.
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    name: String,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", params(IdPath), request_body = ExecRequest,
    responses(
        (status = 200, description = "How the command ended; with `Accept: text/event-stream`, server-sent events instead: `stdout` and `stderr` (`{data, b64?}`) as output comes, then one `exit` with the Outcome",
            content((Outcome = "application/json"), (String = "text/event-stream"))),
        (status = 202, body = CommandInfo, description = "`background: true`: the command started; follow it under /commands/{cid}")))]
async fn exec(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ExecRequest>,
) -> Result<Response, ApiError> {
    if req.background {
        let info = st.service.exec_background(&c, &id, req).await?;
        return Ok((StatusCode::ACCEPTED, Json(info)).into_response());
    }
    if !wants_stream(&headers) {
        let outcome = st.service.exec(&c, &id, req, None).await?;
        return Ok(Json(outcome).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<ExecEvent>(64);
    let svc = st.service.clone();
    // Validate (and start) before answering, so errors come back as JSON, not as a stream.
    svc.get_live(&c, &id)?;
    tokio::spawn(async move {
        if let Err(e) = svc.exec(&c, &id, req, Some(tx.clone())).await {
            let mut o = cordon_policy::Outcome::error(e.message, Default::default());
            o.exit_code = None;
            let _ = tx.send(ExecEvent::Exit(Box::new(o))).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Ok::<Event, Infallible>(match ev {
            ExecEvent::Stdout(d) => chunk_event("stdout", &d),
            ExecEvent::Stderr(d) => chunk_event("stderr", &d),
            ExecEvent::Exit(o) => Event::default()
                .event("exit")
                .data(serde_json::to_string(&o).unwrap_or_default()),
        })
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands", params(IdPath),
    responses((status = 200, body = CommandList)))]
async fn list_commands(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<CommandList>, ApiError> {
    Ok(Json(st.service.list_commands(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands/{cid}", params(CommandPath),
    responses((status = 200, body = CommandInfo)))]
async fn get_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
) -> Result<Json<CommandInfo>, ApiError> {
    Ok(Json(st.service.get_command(&c, &id, &cid)?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WaitQuery {
    /// How long to wait for the command to end (default 30s, at most 300s), e.g. `10s`.
    #[param(pattern = r"^([0-9]*[1-9][0-9]*(\.[0-9]+)?|0+\.[0-9]*[1-9][0-9]*)(ms|s|sec|m|min|h)$")]
    timeout: Option<String>,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/wait", params(CommandPath, WaitQuery),
    responses((status = 200, body = CommandInfo, description = "The command, ended or (after the wait) still running")))]
async fn wait_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    Query(q): Query<WaitQuery>,
) -> Result<Json<CommandInfo>, ApiError> {
    const MAX_WAIT: Duration = Duration::from_secs(300);
    let t = match q.timeout {
        // Any well-formed duration: longer ones wait the longest this server waits.
        Some(t) if is_duration_text(&t) => Amount::Text(t).duration("timeout").unwrap_or(MAX_WAIT),
        Some(t) => Amount::Text(t).duration("timeout")?,
        None => Duration::from_secs(30),
    }
    .min(MAX_WAIT);
    Ok(Json(st.service.wait_command(&c, &id, &cid, t).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/stdin", params(CommandPath),
    request_body(content = Option<StdinRequest>, description = "An empty body is `{}`"),
    responses((status = 204, description = "Written (and closed, with `close: true`)")))]
async fn command_stdin(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    JsonBody(req): JsonBody<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    st.service.command_stdin(&c, &id, &cid, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/signal", params(CommandPath),
    request_body = SignalRequest, responses((status = 204, description = "Sent")))]
async fn command_signal(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    JsonBody(req): JsonBody<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    st.service
        .command_signal(&c, &id, &cid, signal_number(&req.signal)?)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PathQuery {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    #[param(pattern = r"^[^\x00]+$")]
    path: String,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DeleteQuery {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    #[param(pattern = r"^[^\x00]+$")]
    path: String,
    /// Delete a directory and everything in it.
    recursive: Option<bool>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// A directory inside the sandbox (default `/workspace`).
    #[param(pattern = r"^[^\x00]+$")]
    path: Option<String>,
}

/// Checks a path against the schema's pattern (`^[^\x00]+$`): not empty, no NUL.
fn checked_path(p: &str, field: &str) -> Result<String, ApiError> {
    if p.is_empty() || p.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{field}: give a path inside the sandbox, e.g. /workspace/file"
        )));
    }
    Ok(p.to_string())
}

/// Schema of raw bytes.
struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .into()
    }
}
impl ToSchema for Binary {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(IdPath, PathQuery),
    responses((status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = inline(Binary))))]
async fn file_read(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let data = files::read(&st.service, &c, &id, &path).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(data),
    )
        .into_response())
}

/// Reads an upload of at most `max` bytes. Past the limit nothing more is kept, but the rest
/// is read and dropped (up to a bound) so the client can read the 413 instead of meeting a
/// reset connection.
async fn read_upload(body: Body, max: u64) -> Result<Vec<u8>, ApiError> {
    const DRAIN_LIMIT: u64 = 64 << 20;
    let too_large = || ApiError::too_large("the upload", max);
    let mut stream = body.into_data_stream();
    let mut data = Vec::new();
    let mut seen: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the upload: {e}")))?;
        seen += chunk.len() as u64;
        if seen > max {
            if seen > max.saturating_add(DRAIN_LIMIT) {
                return Err(too_large());
            }
            data.clear();
            continue;
        }
        data.extend_from_slice(&chunk);
    }
    if seen > max {
        return Err(too_large());
    }
    Ok(data)
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(IdPath, PathQuery),
    request_body(content = inline(Option<Binary>), content_type = "application/octet-stream", description = "The file's new contents (any content type; the bytes are written as they are; none: an empty file)"),
    responses((status = 201, body = inline(Written), description = "Written, as the sandbox's user; missing parent directories are made")))]
async fn file_write(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let max = st.service.config().max_upload;
    let data = read_upload(body, max).await?;
    let written = cordon_service::files::write(&st.service, &c, &id, &path, data).await?;
    Ok((
        StatusCode::CREATED,
        Json(Written {
            path,
            bytes: written,
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", params(IdPath, DeleteQuery),
    responses((status = 204, description = "Deleted")))]
async fn file_delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let path = checked_path(&q.path, "path")?;
    files::remove(&st.service, &c, &id, &path, q.recursive.unwrap_or(false)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(IdPath, ListQuery),
    responses((status = 200, body = FileList)))]
async fn file_list(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = match &q.path {
        Some(p) => checked_path(p, "path")?,
        None => "/workspace".into(),
    };
    let entries = files::list(&st.service, &c, &id, &path, 1, usize::MAX).await?;
    Ok(Json(json!({ "entries": entries })))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", params(IdPath, PathQuery),
    responses((status = 200, body = FileEntry)))]
async fn file_stat(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let entry = files::stat(&st.service, &c, &id, &path).await?;
    Ok(Json(serde_json::to_value(entry).unwrap_or_default()))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", params(IdPath), request_body = MkdirRequest,
    responses((status = 201, description = "Made (with its parents unless `parents: false`)")))]
async fn file_mkdir(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<MkdirRequest>,
) -> Result<StatusCode, ApiError> {
    let p = checked_path(&req.path, "path")?;
    files::mkdir(&st.service, &c, &id, &p, req.parents).await?;
    Ok(StatusCode::CREATED)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/move", params(IdPath), request_body = MoveRequest,
    responses((status = 204, description = "Moved")))]
async fn file_move(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<MoveRequest>,
) -> Result<StatusCode, ApiError> {
    let (from, to) = (
        checked_path(&req.from, "from")?,
        checked_path(&req.to, "to")?,
    );
    files::rename(&st.service, &c, &id, &from, &to).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/code", params(IdPath), request_body = cordon_service::interpreter::CodeRequest,
    responses((status = 200, description = "The cell's result; with `Accept: text/event-stream`, server-sent events instead: `stdout`, `stderr`, `result`, `error`, then one `done` with the whole result",
        content((cordon_service::interpreter::CodeResult = "application/json"), (String = "text/event-stream")))))]
async fn run_code(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<cordon_service::interpreter::CodeRequest>,
) -> Result<Response, ApiError> {
    use cordon_service::interpreter::CellEvent;
    if !wants_stream(&headers) {
        return Ok(Json(st.service.run_code(&c, &id, req, None).await?).into_response());
    }
    st.service.get_live(&c, &id)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<CellEvent>(64);
    let svc = st.service.clone();
    tokio::spawn(async move {
        if let Err(e) = svc.run_code(&c, &id, req, Some(tx.clone())).await {
            let r = cordon_service::interpreter::CodeResult::failed(&e);
            let _ = tx.send(CellEvent::Done(Box::new(r))).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Ok::<Event, Infallible>(match ev {
            CellEvent::Stdout(t) => Event::default()
                .event("stdout")
                .data(json!({"data": t}).to_string()),
            CellEvent::Stderr(t) => Event::default()
                .event("stderr")
                .data(json!({"data": t}).to_string()),
            CellEvent::Result(v) => Event::default().event("result").data(v.to_string()),
            CellEvent::Error(e) => Event::default()
                .event("error")
                .data(serde_json::to_string(&e).unwrap_or_default()),
            CellEvent::Done(r) => Event::default()
                .event("done")
                .data(serde_json::to_string(&r).unwrap_or_default()),
        })
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/network", params(IdPath),
    responses((status = 200, body = NetworkInfo)))]
async fn get_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<NetworkInfo>, ApiError> {
    Ok(Json(st.service.network(&c, &id)?))
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/network", params(IdPath),
    request_body(content = Option<cordon_policy::network::NetworkPolicy>, description = "An empty body is `{}`: no network. The new policy, in force at once for new connections: `allow` entries `DOMAIN[:PORT]`, `*.DOMAIN[:PORT]`, `IP[:PORT]`, `CIDR`; `hosts` pins names to addresses"),
    responses((status = 200, body = inline(NetworkSet))))]
async fn put_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(policy): JsonBody<cordon_policy::network::NetworkPolicy>,
) -> Result<Json<NetworkSet>, ApiError> {
    Ok(Json(st.service.set_network(&c, &id, policy)?))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct NewContext {
    /// `python` (default; or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`, `shell`), any case.
    #[serde(default = "py")]
    #[schema(
        pattern = r"^([pP][yY][tT][hH][oO][nN]3?|[pP][yY]|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]|[jJ][sS]|[nN][oO][dD][eE]|[bB][aA][sS][hH]|[sS][hH]|[sS][hH][eE][lL][lL])$"
    )]
    language: String,
    /// The context's name (default `default`).
    #[serde(default = "default_ctx")]
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    name: String,
}

fn py() -> String {
    "python".into()
}

fn default_ctx() -> String {
    "default".into()
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/contexts", params(IdPath),
    responses((status = 200, body = ContextList)))]
async fn list_contexts(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<ContextList>, ApiError> {
    Ok(Json(ContextList {
        contexts: st.service.list_contexts(&c, &id)?,
    }))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts", params(IdPath),
    request_body(content = Option<NewContext>, description = "An empty body is `{}`: the default Python context"),
    responses((status = 201, body = cordon_service::interpreter::ContextInfo, description = "The context's kernel runs")))]
async fn create_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<NewContext>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st
        .service
        .create_context(&c, &id, &req.language, &req.name)
        .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{language}/{name}/restart", params(ContextPath),
    responses((status = 204, description = "Its kernel stopped; the next cell starts a fresh one")))]
async fn restart_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(ContextPath { id, language, name }): Path<ContextPath>,
) -> Result<StatusCode, ApiError> {
    st.service
        .end_context(&c, &id, &language, &name, ContextEnd::Restart)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/contexts/{language}/{name}", params(ContextPath),
    responses((status = 204, description = "Its kernel stopped and the context is gone")))]
async fn delete_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(ContextPath { id, language, name }): Path<ContextPath>,
) -> Result<StatusCode, ApiError> {
    st.service
        .end_context(&c, &id, &language, &name, ContextEnd::Delete)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/images",
    responses((status = 200, body = ImageList, description = "The images in this node's store (pulled through the API or with `cordon image pull|import` on the same data directory), newest first")))]
async fn list_images(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<ImageList>, ApiError> {
    Ok(Json(st.service.list_images(&c).await?))
}

#[utoipa::path(post, path = "/v1/images/pull", request_body = PullRequest,
    responses((status = 200, description = "The image is in the store; with `Accept: text/event-stream`, server-sent events instead: `progress` events (`{event: resolved|layer_cached|layer_start|layer_progress|layer_unpacking|layer_done|retry, …}`) as the pull goes, then one `done` with the result or one `error` with `{code, message}`",
        content((PullResult = "application/json"), (PullEvent = "text/event-stream")))))]
async fn pull_image(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<PullRequest>,
) -> Result<Response, ApiError> {
    if !wants_stream(&headers) {
        return Ok(Json(st.service.pull_image(&c, req, None).await?).into_response());
    }
    // Refusals that need no registry (a malformed reference, a registry not allowed) come
    // back as the JSON error, before any stream starts.
    cordon_service::validate_pull(&req)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<PullEvent>(64);
    let (done_tx, done_rx) =
        tokio::sync::oneshot::channel::<Result<PullResult, cordon_service::error::ServiceError>>();
    let svc = st.service.clone();
    tokio::spawn(async move {
        let r = svc.pull_image(&c, req, Some(tx)).await;
        let _ = done_tx.send(r);
    });
    let progress = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Event::default()
            .event("progress")
            .data(serde_json::to_string(&ev).unwrap_or_default())
    });
    // The progress channel closes when the pull's sender is dropped, that is when the pull
    // has ended; then its result follows as the last event.
    let end = futures::stream::once(async move {
        match done_rx.await {
            Ok(Ok(r)) => Event::default()
                .event("done")
                .data(serde_json::to_string(&r).unwrap_or_default()),
            Ok(Err(e)) => Event::default()
                .event("error")
                .data(json!({"code": e.code, "message": e.message}).to_string()),
            Err(_) => Event::default().event("error").data(
                json!({"code": "internal", "message": "the pull stopped unexpectedly"}).to_string(),
            ),
        }
    });
    let stream = progress.chain(end).map(Ok::<Event, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[utoipa::path(post, path = "/v1/run", request_body = RunRequest,
    responses((status = 200, body = Outcome, description = "How the one-shot run ended")))]
async fn run_oneshot(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let outcome = cordon_service::oneshot::run(&st.service, &c, req).await?;
    Ok(Json(outcome).into_response())
}

/// The MCP transport (rmcp's streamable HTTP server behind its JSON-RPC guard) answers every
/// method of `/mcp` itself.
async fn mcp(st: &AppState, req: Request) -> Response {
    match tower::ServiceExt::oneshot(st.mcp.clone(), req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

#[utoipa::path(post, path = "/mcp",
    description = "Model Context Protocol over streamable HTTP (JSON-RPC 2.0 messages; see the MCP specification). Tools: run_code, run_command, read_file, write_file, list_files, reset_sandbox; one sandbox per session.",
    request_body(content = Object, description = "A JSON-RPC request, notification or response"),
    responses(
        (status = 200, description = "The JSON-RPC answer, as JSON or as a server-sent event stream",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 202, description = "Accepted (a notification or response)")))]
async fn mcp_post(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}

#[utoipa::path(get, path = "/mcp",
    description = "The session's server-to-client event stream (needs `Mcp-Session-Id` and `Accept: text/event-stream`).",
    responses((status = 200, description = "Server-sent events", content_type = "text/event-stream", body = String)))]
async fn mcp_get(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}

#[utoipa::path(delete, path = "/mcp",
    description = "Ends the session given in `Mcp-Session-Id` (and deletes its sandbox).",
    responses((status = 202, description = "The session ended"), (status = 200, description = "The session ended")))]
async fn mcp_delete(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}

#[derive(utoipa::OpenApi)]
#[openapi(
    components(schemas(ErrorBody, crate::error::ErrorDetail)),
    info(
        title = "cordon",
        description = "Persistent and one-shot sandboxes for code that AI agents write. Authenticate with `Authorization: Bearer <key>`. Every error is `{\"error\": {\"code\", \"message\"}}` with a fitting status. Request bodies are JSON (read as JSON whatever their Content-Type)."
    )
)]
struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route is registered through `routes!` (which documents it): no raw axum routing
    /// in this file, where a route would be served but left out of the document.
    #[test]
    fn no_route_bypasses_the_document() {
        let src = include_str!("http.rs");
        let code = src.split("#[cfg(test)]").next().unwrap_or(src);
        for raw in [
            ".route(",
            ".route_service(",
            ".nest(",
            ".nest_service(",
            ".fallback(",
        ] {
            assert!(
                !code.contains(raw),
                "http.rs registers a route with `{raw}`"
            );
        }
    }

    /// Every `$ref` in the document points at a schema it defines.
    #[test]
    fn document_references_resolve() {
        let doc: serde_json::Value = serde_json::from_str(openapi_text()).expect("json");
        let schemas = &doc["components"]["schemas"];
        let text = openapi_text();
        for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap_or("");
            assert!(schemas.get(name).is_some(), "dangling $ref to {name}");
        }
    }
}
