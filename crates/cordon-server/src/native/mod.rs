//! The native HTTP API: the router of its routes and the OpenAPI document, both from one
//! list ([`public_routes`], [`protected_routes`]); each route's handler lives, with its
//! `#[utoipa::path]`, in the module of its resource.
//!
//! Every route is registered through `utoipa_axum::routes!`, which documents it as it
//! registers it, so no route can be served undocumented. Every answer that is not a success is
//! the JSON error of the contract, `{"error": {"code", "message"}}`, including unmatched routes
//! (404), wrong methods (405, with `Allow`) and what axum's own extractors reject
//! ([`json_errors`]).
//!
//! Threat model: every body is client input, read by [`JsonBody`] into typed requests (as JSON
//! whatever its content type; without keys, `crate::auth` keeps web pages out).

mod admin;
mod audit;
mod batch;
mod code;
mod commands;
mod files;
mod gateway;
mod health;
mod images;
mod mcp_mount;
mod network;
mod run;
mod sandboxes;
pub(crate) mod schema;
mod secrets;
mod state;

use std::sync::{Arc, OnceLock};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::{IntoParams, OpenApi as _};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::app::AppState;
use crate::auth::auth;
use crate::error::{ApiError, ErrorBody, ErrorKind};

/// Routes anyone may call: no key, no rate limit.
pub(super) fn public_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(health::healthz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi_json))
}

/// Routes behind the API key. Each `routes!` call registers the handlers of one path, and
/// documents them from their `#[utoipa::path]` as it does.
pub(super) fn protected_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(sandboxes::create, sandboxes::list))
        .routes(routes!(sandboxes::get_one, sandboxes::delete))
        .routes(routes!(sandboxes::metrics))
        .routes(routes!(sandboxes::metrics_history))
        .routes(routes!(sandboxes::usage_now))
        .routes(routes!(sandboxes::processes))
        .routes(routes!(sandboxes::extend))
        .routes(routes!(sandboxes::pause))
        .routes(routes!(sandboxes::resume))
        .routes(routes!(sandboxes::learned_profile))
        .routes(routes!(commands::exec))
        .routes(routes!(commands::list_commands))
        .routes(routes!(commands::command_log))
        .routes(routes!(commands::get_command))
        .routes(routes!(commands::wait_command))
        .routes(routes!(commands::command_stdin))
        .routes(routes!(commands::command_signal))
        .routes(routes!(
            files::file_read,
            files::file_write,
            files::file_delete
        ))
        .routes(routes!(files::file_list))
        .routes(routes!(files::file_stat))
        .routes(routes!(files::file_mkdir))
        .routes(routes!(files::file_move))
        .routes(routes!(network::get_network, network::put_network))
        .routes(routes!(code::run_code))
        .routes(routes!(code::list_contexts, code::create_context))
        .routes(routes!(code::delete_context))
        .routes(routes!(code::restart_context))
        .routes(routes!(run::run_oneshot))
        .routes(routes!(audit::audit_trail))
        .routes(routes!(gateway::list_approvals))
        .routes(routes!(admin::list_keys, admin::create_key))
        .routes(routes!(admin::revoke_key))
        .routes(routes!(admin::host_enforcement))
        .routes(routes!(gateway::answer_approval))
        .routes(routes!(batch::batch))
        .routes(routes!(images::list_images))
        .routes(routes!(images::pull_image))
        .routes(routes!(images::commit_sandbox))
        .routes(routes!(secrets::create_secret, secrets::list_secrets))
        .routes(routes!(
            secrets::get_secret,
            secrets::update_secret,
            secrets::delete_secret
        ))
        .routes(routes!(state::create_volume, state::list_volumes))
        .routes(routes!(state::get_volume, state::delete_volume))
        .routes(routes!(state::create_snapshot))
        .routes(routes!(state::list_snapshots))
        .routes(routes!(state::delete_snapshot))
        .routes(routes!(state::fork))
        .routes(routes!(
            mcp_mount::mcp_post,
            mcp_mount::mcp_get,
            mcp_mount::mcp_delete
        ))
}

/// Paths served without a key.
pub(super) const PUBLIC_PATHS: [&str; 3] = ["/healthz", "/metrics", "/openapi.json"];

/// The native API: its public routes, and the rest behind the API key.
pub(crate) fn router(st: Arc<AppState>) -> Router {
    let max_upload = st.service.config().max_upload as usize;
    let (router, _) = public_routes()
        .merge(protected_routes().route_layer(middleware::from_fn_with_state(st.clone(), auth)))
        .split_for_parts();
    router
        .layer(DefaultBodyLimit::max(max_upload))
        .with_state(st)
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
pub(super) fn error_statuses(path: &str, has_body: bool) -> Vec<u16> {
    let mut v = vec![400, 401, 429, 500];
    if has_body {
        v.push(413);
    }
    // `/v1/sandboxes`: a `from` snapshot or a volume the key does not have.
    if path.contains("{id}")
        || path.contains("{cid}")
        || path.contains("{name}")
        || path == "/mcp"
        || path == "/v1/sandboxes"
    {
        v.push(404);
    }
    // A name taken, or (secrets) a key full or an update racing another.
    if path.starts_with("/v1/volumes")
        || path.contains("snapshots")
        || path.starts_with("/v1/secrets")
    {
        v.push(409);
    }
    // A disk full: the sandbox's, or the data directory's (anything that stores state).
    if path.starts_with("/v1/volumes")
        || path.contains("snapshots")
        || path.ends_with("/fork")
        || path == "/v1/sandboxes"
        || path.starts_with("/v1/secrets")
        || path == "/v1/images/pull"
        || path.ends_with("/commit")
    {
        v.push(507);
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
    // Admin keys only; a held call answered, expired or gone; a key that revokes itself.
    if path.starts_with("/v1/gateway/")
        || path.starts_with("/v1/keys")
        || path.starts_with("/v1/host/")
    {
        v.push(403);
        if path.contains("{id}") {
            v.extend([404, 409]);
        }
    }
    // A layer past the store's caps.
    if path.ends_with("/commit") {
        v.push(422);
    }
    v.sort_unstable();
    v.dedup();
    v
}

pub(super) fn error_response(path: &str, status: u16) -> RefOr<utoipa::openapi::Response> {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let description = match status {
        400 => "The request is malformed: its body, query or path does not fit the schema, or a value is out of range (the message names the field)",
        401 => "No API key, or one that is invalid or revoked",
        403 => "Not allowed: a path outside what the sandbox may touch, a registry this server may not pull from, a route for admin keys only (`admin_only`), or (without keys) a request that is not local",
        404 => "No such sandbox (or command, context, file, MCP session, snapshot, volume, secret) for this key",
        405 => "Method not allowed here; `Allow` lists the ones that are",
        406 => "The client does not accept what this endpoint sends",
        409 => "The sandbox cannot do this now (it ended, its kernel did not start, a file is in the way, …), or a volume, snapshot or secret of that name exists already, or a volume is in use, or a held gateway call is answered already or expired, or an admin key would revoke itself",
        413 => "The body is larger than this server accepts",
        415 => "A content type this endpoint does not take",
        422 => "The image cannot be used: a digest that does not match, a format or feature not handled, a size cap reached, no image for the platform asked for",
        429 => "Rate limit or sandbox quota of this key reached; retry after `Retry-After` seconds",
        500 => "The server or the host failed (the message says what)",
        501 => "The sandbox's file system cannot do this",
        502 => "The registry refused or failed (the message says what it answered)",
        507 => "The sandbox's disk is full, a volume is full, the key's volumes or snapshots are at their quota, or the server's data directory is full (`storage_full`: nothing was changed, reads still work)",
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
pub(super) fn openapi_text() -> &'static str {
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
pub(crate) async fn json_errors(req: Request, next: Next) -> Response {
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

pub(super) fn status_code_name(s: StatusCode) -> &'static str {
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

/// JSON bodies with errors in our shape (axum's default rejection is plain text).
/// A JSON request body. The body is read as JSON whatever its `Content-Type` says: `curl -d`
/// labels JSON `application/x-www-form-urlencoded`, and refusing it (415) would turn the
/// commonest first try into an error while protecting nothing (without keys, `local_request`
/// keeps web pages out). An empty body (or `null`) stands for `{}`; anything else must be one
/// JSON object.
pub(super) struct JsonBody<T>(pub(super) T);

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

pub(super) fn wants_stream(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// Path parameter of every sandbox route.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct IdPath {
    /// The sandbox's id.
    pub(super) id: String,
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
    /// in the native API's files, where a route would be served but left out of the document.
    #[test]
    fn no_route_bypasses_the_document() {
        let files = [
            ("mod.rs", include_str!("mod.rs")),
            ("code.rs", include_str!("code.rs")),
            ("commands.rs", include_str!("commands.rs")),
            ("files.rs", include_str!("files.rs")),
            ("health.rs", include_str!("health.rs")),
            ("images.rs", include_str!("images.rs")),
            ("mcp_mount.rs", include_str!("mcp_mount.rs")),
            ("network.rs", include_str!("network.rs")),
            ("run.rs", include_str!("run.rs")),
            ("batch.rs", include_str!("batch.rs")),
            ("sandboxes.rs", include_str!("sandboxes.rs")),
        ];
        for (name, src) in files {
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
                    "native/{name} registers a route with `{raw}`"
                );
            }
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
