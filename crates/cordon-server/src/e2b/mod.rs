//! The E2B door: the REST control plane, envd's Connect RPCs and `/files`, and the code
//! interpreter's `/execute` and `/contexts`, as the published E2B SDKs speak them
//! (`E2B_API_URL` and `E2B_SANDBOX_URL` pointed at `cordon serve`). A front end like the others:
//! every sandbox, command, file and code cell goes through [`cordon_service`].
//!
//! Requests for a sandbox carry no API key: the SDK names the sandbox in `E2b-Sandbox-Id` and
//! proves it may use it with the access token the control plane handed out at create or
//! connect (`X-Access-Token`, or `E2B-Traffic-Access-Token` on the code-context calls, which
//! carry no other).
//!
//! envd's surface is split by job: `connect` (the Connect framing and its errors), `process`
//! and `filesystem` (its two Connect services), `files` (plain-HTTP `/files`); `/health` is here.

mod connect;
mod control;
mod files;
mod filesystem;
mod gzip;
mod interp;
pub(crate) mod openapi;
mod process;
mod secrets;
mod state;
mod templates;
mod volume_content;
mod watch;

/// Entry points for the fuzz targets (`fuzz/`): envd's parsers of hostile bytes. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// The largest Connect message taken.
    pub const MAX_MESSAGE: usize = super::connect::MAX_MESSAGE;

    /// Splits whole Connect envelopes off the front of `buf` (the error is the Connect code).
    pub fn take_frames(buf: &mut Vec<u8>) -> Result<Vec<(u8, Vec<u8>)>, &'static str> {
        super::connect::take_frames(buf).map_err(|e| e.code)
    }

    /// A gzip upload unpacked to at most `max` bytes (the error is the HTTP status).
    pub fn gunzip(data: &[u8], max: usize) -> Result<Vec<u8>, u16> {
        super::gzip::gunzip(data, max).map_err(|e| crate::error::status_of(e.0.kind).as_u16())
    }

    /// Where an upload's path lands in the sandbox.
    pub fn sandbox_path(p: &str) -> Option<String> {
        super::sandbox_path(p).ok()
    }
}

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use serde_json::json;

use crate::app::AppState;
use crate::auth::authenticate;
use crate::error::{ApiError, ErrorKind};
use cordon_service::Caller;

/// The envd version reported to the SDK: it gates features on it, and this one enables all
/// the SDK knows of (stdin control, octet-stream uploads, file metadata).
pub const ENVD_VERSION: &str = "0.6.4";
/// The default template, as the code-interpreter SDK names it.
pub const DEFAULT_TEMPLATE: &str = "code-interpreter-v1";
/// Where E2B programs expect to be: the sandbox user's home (`/home/user` is a link to cordon's
/// `/home/sandbox` in every sandbox).
pub const HOME: &str = "/home/user";

/// What the E2B door knows of a sandbox beyond the service: the token that opens its envd
/// and interpreter routes, and the template it was created from.
#[derive(Clone)]
struct Door {
    caller: Caller,
    token: String,
    template: String,
}

pub(crate) struct E2b {
    st: Arc<AppState>,
    doors: Mutex<HashMap<String, Door>>,
    watchers: watch::Watchers,
}

type St = Arc<E2b>;

/// An error as the E2B control plane and envd's plain-HTTP routes give it:
/// `{"code": <status>, "message"}` (the SDK reads `message` and maps the status to its
/// exception types; any other shape makes it fail).
pub(crate) struct E2bError(pub ApiError);

impl From<cordon_service::error::ServiceError> for E2bError {
    fn from(e: cordon_service::error::ServiceError) -> Self {
        E2bError(ApiError(e))
    }
}

impl From<ApiError> for E2bError {
    fn from(e: ApiError) -> Self {
        E2bError(e)
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        e2b_error(self.0.status(), &self.0.message, self.0.retry_after)
    }
}

/// E2B's error body with `status`, and `Retry-After` when given.
fn e2b_error(status: StatusCode, message: &str, retry_after: Option<u64>) -> Response {
    let mut resp = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"code": status.as_u16(), "message": message}).to_string(),
    )
        .into_response();
    if let Some(s) = retry_after {
        if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}

pub fn router(st: Arc<AppState>) -> Router {
    let max_upload = st.service.config().max_upload as usize;
    let e2b: St = Arc::new(E2b {
        st,
        doors: Mutex::new(HashMap::new()),
        watchers: Default::default(),
    });
    Router::new()
        // Control plane (API key in `X-API-KEY`).
        .route("/sandboxes", post(control::create).get(control::list_v1))
        .route("/v2/sandboxes", post(control::create).get(control::list))
        .route("/sandboxes/{id}", get(control::info).delete(control::kill))
        .route("/sandboxes/{id}/timeout", post(control::set_timeout))
        .route("/sandboxes/{id}/connect", post(control::connect))
        .route("/v2/sandboxes/{id}/connect", post(control::connect))
        .route("/sandboxes/{id}/refreshes", post(control::refresh))
        .route("/sandboxes/{id}/pause", post(control::pause))
        .route("/sandboxes/{id}/resume", post(control::resume))
        .route("/sandboxes/{id}/metrics", get(control::metrics))
        .route("/sandboxes/{id}/network", put(control::update_network))
        .route("/sandboxes/{id}/snapshots", post(state::create_snapshot))
        .route("/sandboxes/{id}/fork", post(state::fork))
        .route("/snapshots", get(state::list_snapshots))
        .route("/secrets", post(secrets::create).get(secrets::list))
        .route(
            "/secrets/{id}",
            get(secrets::get)
                .post(secrets::update)
                .delete(secrets::destroy),
        )
        .route(
            "/templates/{id}",
            get(templates::get).delete(state::delete_template),
        )
        // Template builds (E2B's Template SDK).
        .route("/templates", get(templates::list))
        .route("/v2/templates", get(templates::list))
        .route("/v3/templates", post(templates::request))
        .route("/templates/{id}/files/{hash}", get(templates::upload_link))
        .route("/v2/templates/{id}/builds/{build}", post(templates::start))
        .route(
            "/templates/{id}/builds/{build}/status",
            get(templates::status),
        )
        .route("/templates/aliases/{alias}", get(templates::alias))
        .route(
            "/templates/tags",
            post(templates::assign_tags).delete(templates::remove_tags),
        )
        .route("/templates/{id}/tags", get(templates::tags))
        // The presigned upload URL (its token is the credential, no API key).
        .route(
            "/e2b-template-files/{token}",
            put(templates::upload).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route(
            "/volumes",
            post(state::create_volume).get(state::list_volumes),
        )
        .route(
            "/volumes/{id}",
            get(state::get_volume).delete(state::delete_volume),
        )
        // The volume content API (a volume's token, `Authorization: Bearer`).
        .route(
            "/volumecontent/{id}/path",
            get(volume_content::stat)
                .delete(volume_content::remove)
                .patch(volume_content::update),
        )
        .route(
            "/volumecontent/{id}/dir",
            get(volume_content::list).post(volume_content::make_dir),
        )
        .route(
            "/volumecontent/{id}/file",
            get(volume_content::read).put(volume_content::write),
        )
        // envd (access token).
        .route("/health", get(health))
        .route("/process.Process/{method}", post(process::process))
        .route(
            "/filesystem.Filesystem/{method}",
            post(filesystem::filesystem),
        )
        .route("/files", get(files::download).post(files::upload))
        // The code interpreter (access token).
        .route("/execute", post(interp::execute))
        .route(
            "/contexts",
            post(interp::create_context).get(interp::list_contexts),
        )
        .route("/contexts/{id}", delete(interp::delete_context))
        .route("/contexts/{id}/restart", post(interp::restart_context))
        .layer(axum::extract::DefaultBodyLimit::max(max_upload))
        .layer(middleware::from_fn(e2b_errors))
        .with_state(e2b)
}

/// envd's health: with `E2b-Sandbox-Id`, whether that sandbox runs (502 "was not found" when
/// it does not, and 502 while it is paused, as E2B's proxy says it: the SDK's `is_running()`
/// reads this); without, the server's.
async fn health(State(e2b): State<St>, h: HeaderMap) -> Result<StatusCode, E2bError> {
    if h.contains_key("e2b-sandbox-id") {
        let (caller, id) = e2b.sandbox(&h)?;
        if e2b.st.service.get(&caller, &id)?.state == cordon_service::types::SandboxState::Paused {
            return Err(ApiError::new(
                ErrorKind::Upstream,
                "sandbox_paused",
                format!("The sandbox {id} is paused"),
            )
            .into());
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// What axum answers by itself on these routes (a wrong method, a body it cannot take) gets
/// E2B's error shape too.
async fn e2b_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("application/connect"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_string();
    }
    let mut out = e2b_error(status, &message, None);
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// Whether a request comes from an E2B SDK (its `User-Agent`, `e2b-python-sdk/…` or
/// `e2b-js-sdk/…`, or an envd header): such a client reads every error as E2B's shape.
fn from_e2b_client(h: &HeaderMap) -> bool {
    h.contains_key("e2b-sandbox-id")
        || h.get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ua| ua.starts_with("e2b-"))
}

/// An E2B SDK that calls a route this server does not have (templates, snapshots, volumes…)
/// gets the answer in E2B's error shape, `{"code": <status>, "message"}`, which it turns into
/// its own exception, rather than the native API's `{"error": {…}}`, on which it crashes
/// (`KeyError: 'code'`). Other clients keep the native shape.
pub(crate) async fn errors_for_e2b_clients(req: Request, next: Next) -> Response {
    let e2b_client = from_e2b_client(req.headers());
    let resp = next.run(req).await;
    let status = resp.status();
    if !e2b_client || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let native = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("error")?.get("message")?.as_str().map(str::to_string));
    let Some(message) = native else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    let retry_after = parts
        .headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut out = e2b_error(status, &message, retry_after);
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// A control-plane request's door and its caller, authenticated by its `X-API-KEY` before any
/// other part of the request is looked at (the first extractor of every control handler).
pub(super) struct Control(pub St, pub Caller);

impl axum::extract::FromRequestParts<St> for Control {
    type Rejection = E2bError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        e2b: &St,
    ) -> Result<Self, E2bError> {
        let caller = e2b.caller(&parts.headers)?;
        Ok(Control(e2b.clone(), caller))
    }
}

impl E2b {
    /// The caller of a control-plane request: its `X-API-KEY` is a cordon API key.
    fn caller(&self, h: &HeaderMap) -> Result<Caller, ApiError> {
        let key = h
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim);
        authenticate(
            &self.st,
            h,
            key,
            "missing API key: set E2B_API_KEY to a key of this cordon server",
        )
    }

    /// Records (or finds) the door of a sandbox the caller may use, with a fresh token the
    /// first time.
    fn door(&self, caller: &Caller, id: &str, template: Option<&str>) -> Result<Door, ApiError> {
        let mut doors = self.doors.lock().map_err(|_| ApiError::internal("lock"))?;
        if let Some(d) = doors.get(id).filter(|d| d.caller.key_id == caller.key_id) {
            return Ok(d.clone());
        }
        let template = match template {
            Some(t) => t.to_string(),
            None => self
                .st
                .service
                .get(caller, id)
                .map(|i| i.profile)
                .unwrap_or_else(|_| DEFAULT_TEMPLATE.to_string()),
        };
        let d = Door {
            caller: caller.clone(),
            token: cordon_service::keys::random_hex(24),
            template,
        };
        // Doors of sandboxes that ended meanwhile (their time ran out, or another door
        // deleted them) go now, so the table stays as large as the live sandboxes.
        let svc = &self.st.service;
        // One paused to disk keeps its door: the SDK's handle stays valid across the resume.
        doors.retain(|sid, d| {
            svc.get_live(&d.caller, sid).is_ok() || svc.is_paused_to_disk(&d.caller, sid)
        });
        doors.insert(id.to_string(), d.clone());
        Ok(d)
    }

    fn template_of(&self, id: &str, fallback: &str) -> String {
        self.doors
            .lock()
            .ok()
            .and_then(|d| d.get(id).map(|d| d.template.clone()))
            .unwrap_or_else(|| fallback.to_string())
    }

    fn forget(&self, id: &str) {
        if let Ok(mut d) = self.doors.lock() {
            d.remove(id);
        }
    }

    /// The sandbox a request to its envd or interpreter is for, and who owns it: the
    /// `E2b-Sandbox-Id` header names it, its access token opens it.
    fn sandbox(&self, h: &HeaderMap) -> Result<(Caller, String), ApiError> {
        let id = h
            .get("e2b-sandbox-id")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request("missing E2b-Sandbox-Id header: which sandbox is this for?")
            })?;
        let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
        let (access, traffic) = (header("x-access-token"), header("e2b-traffic-access-token"));
        let door = self
            .doors
            .lock()
            .map_err(|_| ApiError::internal("lock"))?
            .get(id)
            .cloned();
        // E2B's proxy answers 502 "… was not found" for a sandbox that is gone: the SDK
        // reads that as "killed or timed out".
        let gone = || {
            ApiError::new(
                ErrorKind::Upstream,
                "sandbox_not_found",
                format!("The sandbox {id} was not found"),
            )
        };
        let Some(door) = door else {
            return Err(gone());
        };
        if access.is_none() && traffic.is_none() {
            self.st.service.deny("unauthenticated");
            return Err(ApiError::unauthorized(
                "missing access token: send the envdAccessToken of this sandbox as X-Access-Token",
            ));
        }
        // The traffic access token opens the sandbox's ports, the code interpreter's among
        // them (the code-context calls carry no other); envd's routes need the access token.
        let interpreter = h
            .get("e2b-sandbox-port")
            .is_some_and(|v| v.as_bytes() == b"49999");
        let traffic_ok = |t: &str| {
            same_secret(t, &door.token)
                || (interpreter
                    && self
                        .st
                        .service
                        .port_grant(&door.caller, id)
                        .is_ok_and(|g| same_secret(t, &g.token)))
        };
        if !access.is_some_and(|t| same_secret(t, &door.token)) && !traffic.is_some_and(traffic_ok)
        {
            self.st.service.deny("bad_key");
            return Err(ApiError::unauthorized(
                "invalid access token for this sandbox",
            ));
        }
        self.admit(id, door)
    }

    /// The checks every request that opened a sandbox's door passes after its token: the
    /// token acts for the key that made the sandbox, so a revoked key's tokens stop working
    /// and their requests spend from that key's rate limit; and the sandbox must still run.
    fn admit(&self, id: &str, door: Door) -> Result<(Caller, String), ApiError> {
        let gone = || {
            ApiError::new(
                ErrorKind::Upstream,
                "sandbox_not_found",
                format!("The sandbox {id} was not found"),
            )
        };
        if !self.st.open {
            match self.st.service.key(&door.caller.key_id)? {
                Some(rec) if !rec.revoked => self.st.service.charge(&rec)?,
                _ => {
                    self.st.service.deny("bad_key");
                    return Err(ApiError::unauthorized(
                        "the API key this sandbox belongs to was revoked",
                    ));
                }
            }
        }
        // A sandbox that ended since: its door closes with it. One paused to disk keeps its
        // door for the resume (its token stays valid, as E2B's does), and answers as gone.
        if self.st.service.get_live(&door.caller, id).is_err() {
            if !self.st.service.is_paused_to_disk(&door.caller, id) {
                self.forget(id);
            }
            return Err(gone());
        }
        Ok((door.caller, id.to_string()))
    }

    /// The sandbox a signed file URL (`download_url` / `upload_url`) is for. Such a URL names
    /// no sandbox — E2B's names it in the host, which `E2B_SANDBOX_URL` replaces — so the
    /// signature itself says which: the one sandbox whose access token makes it, computed as
    /// the SDK does (`v1_` + unpadded base64 of SHA-256 over `path:operation:user:token`, then
    /// `:expiration` when there is one). An expiration in the past is refused whoever signed.
    fn signed(
        &self,
        path: &str,
        operation: &str,
        user: Option<&str>,
        signature: &str,
        expiration: Option<i64>,
    ) -> Result<(Caller, String), ApiError> {
        use base64::Engine;
        use sha2::{Digest, Sha256};
        let user = user.unwrap_or("");
        let found = {
            let doors = self.doors.lock().map_err(|_| ApiError::internal("lock"))?;
            doors
                .iter()
                .find(|(_, d)| {
                    let raw = match expiration {
                        None => format!("{path}:{operation}:{user}:{}", d.token),
                        Some(e) => format!("{path}:{operation}:{user}:{}:{e}", d.token),
                    };
                    let want = format!(
                        "v1_{}",
                        base64::engine::general_purpose::STANDARD_NO_PAD
                            .encode(Sha256::digest(raw.as_bytes()))
                    );
                    same_secret(&want, signature)
                })
                .map(|(id, d)| (id.clone(), d.clone()))
        };
        let Some((id, door)) = found else {
            self.st.service.deny("bad_key");
            return Err(ApiError::unauthorized("invalid signature"));
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        if expiration.is_some_and(|e| e < now) {
            return Err(ApiError::unauthorized("signature is already expired"));
        }
        self.admit(&id, door)
    }
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// RFC 3339 in UTC for seconds since the epoch.
fn rfc3339(secs: u64) -> String {
    chrono::DateTime::from_timestamp(secs as i64, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

/// RFC 3339 in UTC, to the millisecond, for milliseconds since the epoch.
fn rfc3339_ms(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".into())
}

/// A path as E2B programs give it: relative ones are in the user's home.
fn sandbox_path(p: &str) -> Result<String, ApiError> {
    if p.contains('\0') {
        return Err(ApiError::bad_request("path: no NUL bytes"));
    }
    let p = if let Some(rest) = p.strip_prefix("~/") {
        format!("{HOME}/{rest}")
    } else if p == "~" || p.is_empty() {
        HOME.to_string()
    } else if p.starts_with('/') {
        p.to_string()
    } else {
        format!("{HOME}/{p}")
    };
    Ok(p)
}

/// The OS user a request asks for (`authorization: Basic base64("<user>:")` on envd, or
/// `?username=`): `user` is the sandbox's user; `root` is accepted and runs as that same
/// unprivileged user — no one is root in a cordon sandbox.
fn check_user(h: &HeaderMap, query_user: Option<&str>) -> Result<(), ApiError> {
    use base64::Engine;
    let from_header = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .map(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
                .map(|s| s.split(':').next().unwrap_or("").to_string())
                .unwrap_or_default()
        });
    for u in from_header.as_deref().into_iter().chain(query_user) {
        if !matches!(u, "" | "user" | "root") {
            return Err(ApiError::bad_request(format!(
                "user '{u}' does not exist in this sandbox (there is 'user'; 'root' runs as it)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_in_the_home() {
        assert_eq!(
            sandbox_path("a.txt").ok().as_deref(),
            Some("/home/user/a.txt")
        );
        assert_eq!(sandbox_path("~/b").ok().as_deref(), Some("/home/user/b"));
        assert_eq!(sandbox_path("/tmp/c").ok().as_deref(), Some("/tmp/c"));
        assert!(sandbox_path("x\0y").is_err());
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_ms(1_700_000_000_042), "2023-11-14T22:13:20.042Z");
    }
}
