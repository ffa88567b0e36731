//! The HTTP front end: routes, authentication, rate limits and error mapping over [`Service`].

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use cordon_linux::fsview::{FsError, SandboxFs};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use utoipa::OpenApi;

use crate::error::{ApiError, ErrorBody};
use crate::keys;
use crate::service::{signal_number, Caller, ExecEvent, Service};
use crate::types::*;

pub struct AppState {
    pub service: Arc<Service>,
    /// Authentication disabled (only allowed on loopback).
    pub open: bool,
    limiter: Mutex<HashMap<String, (f64, Instant)>>,
}

impl AppState {
    pub fn new(service: Arc<Service>, open: bool) -> Arc<AppState> {
        Arc::new(AppState {
            service,
            open,
            limiter: Mutex::new(HashMap::new()),
        })
    }

    /// Token bucket per key: `rps` requests per second, bursts up to `rps`.
    fn allow(&self, key: &str, rps: u32) -> bool {
        let Ok(mut m) = self.limiter.lock() else {
            return true;
        };
        let now = Instant::now();
        let cap = f64::from(rps.max(1));
        let entry = m.entry(key.to_string()).or_insert((cap, now));
        let refill = now.duration_since(entry.1).as_secs_f64() * cap;
        entry.0 = (entry.0 + refill).min(cap);
        entry.1 = now;
        if entry.0 >= 1.0 {
            entry.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, Json(ErrorBody::from(&self))).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

/// Local users of an open (no-auth) server all act as this key id.
const OPEN_KEY: &str = "local";

async fn auth(State(st): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let caller = if st.open {
        Caller {
            key_id: OPEN_KEY.into(),
            max_sandboxes: 1000,
        }
    } else {
        let token = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(token) = token else {
            st.service.metrics.deny("unauthenticated");
            return ApiError::unauthorized("missing API key: send 'Authorization: Bearer <key>'")
                .into_response();
        };
        let rec = match st.service.registry.key_by_hash(&keys::hash(token)) {
            Ok(Some(r)) if !r.revoked => r,
            Ok(_) => {
                st.service.metrics.deny("bad_key");
                return ApiError::unauthorized("invalid or revoked API key").into_response();
            }
            Err(e) => return e.into_response(),
        };
        if !st.allow(&rec.id, rec.requests_per_second) {
            st.service.metrics.deny("rate_limit");
            return ApiError::too_many(
                format!(
                    "rate limit of {} requests per second exceeded",
                    rec.requests_per_second
                ),
                1,
            )
            .into_response();
        }
        Caller {
            key_id: rec.id,
            max_sandboxes: rec.max_sandboxes,
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

pub fn router(st: Arc<AppState>) -> Router {
    let max_upload = st.service.cfg.max_upload as usize;
    let api = Router::new()
        .route("/v1/sandboxes", post(create).get(list))
        .route("/v1/sandboxes/{id}", get(get_one).delete(delete))
        .route("/v1/sandboxes/{id}/ttl", post(extend))
        .route("/v1/sandboxes/{id}/exec", post(exec))
        .route("/v1/sandboxes/{id}/commands", get(list_commands))
        .route("/v1/sandboxes/{id}/commands/{cid}", get(get_command))
        .route("/v1/sandboxes/{id}/commands/{cid}/wait", post(wait_command))
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/stdin",
            post(command_stdin),
        )
        .route(
            "/v1/sandboxes/{id}/commands/{cid}/signal",
            post(command_signal),
        )
        .route(
            "/v1/sandboxes/{id}/files",
            get(file_read).put(file_write).delete(file_delete),
        )
        .route("/v1/sandboxes/{id}/files/list", get(file_list))
        .route("/v1/sandboxes/{id}/files/stat", get(file_stat))
        .route("/v1/sandboxes/{id}/files/mkdir", post(file_mkdir))
        .route("/v1/sandboxes/{id}/files/move", post(file_move))
        .route(
            "/v1/sandboxes/{id}/network",
            get(get_network).put(put_network),
        )
        .route("/v1/sandboxes/{id}/code", post(run_code))
        .route(
            "/v1/sandboxes/{id}/contexts",
            get(list_contexts).post(create_context),
        )
        .route(
            "/v1/sandboxes/{id}/contexts/{language}/{name}",
            axum::routing::delete(delete_context),
        )
        .route(
            "/v1/sandboxes/{id}/contexts/{language}/{name}/restart",
            post(restart_context),
        )
        .route("/v1/run", post(run_oneshot))
        .nest_service(
            "/mcp",
            crate::mcp::http_service(crate::mcp::McpState::new(st.service.clone(), None, None)),
        )
        .layer(middleware::from_fn_with_state(st.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
        .merge(api)
        .layer(DefaultBodyLimit::max(max_upload))
        .with_state(st)
}

async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let body = st.service.metrics.render(&st.service.by_state());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// JSON bodies with errors in our shape (axum's default rejection is plain text).
struct JsonBody<T>(T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: for<'de> Deserialize<'de>,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
                413,
                "too_large",
                "the request body is larger than this server accepts",
            )),
            Err(e) => Err(ApiError::bad_request(e.body_text())),
        }
    }
}

#[utoipa::path(post, path = "/v1/sandboxes", request_body = CreateSandbox,
    responses((status = 201, body = SandboxInfo), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn create(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateSandbox>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st.service.create(&c, req).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(get, path = "/v1/sandboxes", params(("metadata.KEY" = Option<String>, Query, description = "only sandboxes whose metadata KEY equals the value")),
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

#[utoipa::path(get, path = "/v1/sandboxes/{id}", responses((status = 200, body = SandboxInfo), (status = 404, body = ErrorBody)))]
async fn get_one(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.get(&c, &id)?))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", responses((status = 204), (status = 404, body = ErrorBody)))]
async fn delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.service.delete(&c, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/ttl", request_body = ExtendTtl, responses((status = 200, body = SandboxInfo)))]
async fn extend(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<ExtendTtl>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.extend(&c, &id, &req.ttl)?))
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

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", request_body = ExecRequest,
    responses((status = 200, description = "the Outcome, or server-sent events (stdout, stderr, exit) with Accept: text/event-stream"), (status = 202, body = CommandInfo, description = "background command started")))]
async fn exec(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
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

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands", responses((status = 200, body = CommandList)))]
async fn list_commands(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<CommandList>, ApiError> {
    Ok(Json(st.service.list_commands(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands/{cid}", responses((status = 200, body = CommandInfo)))]
async fn get_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, cid)): Path<(String, String)>,
) -> Result<Json<CommandInfo>, ApiError> {
    Ok(Json(st.service.get_command(&c, &id, &cid)?))
}

#[derive(Deserialize)]
struct WaitQuery {
    timeout: Option<String>,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/wait", params(("timeout" = Option<String>, Query, description = "how long to wait, e.g. 30s")), responses((status = 200, body = CommandInfo)))]
async fn wait_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, cid)): Path<(String, String)>,
    Query(q): Query<WaitQuery>,
) -> Result<Json<CommandInfo>, ApiError> {
    let t = match q.timeout.as_deref() {
        Some(t) => cordon_policy::units::parse_duration(t)
            .map_err(|e| ApiError::bad_request(format!("timeout: {e}")))?,
        None => Duration::from_secs(30),
    }
    .min(Duration::from_secs(300));
    Ok(Json(st.service.wait_command(&c, &id, &cid, t).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/stdin", request_body = StdinRequest, responses((status = 204)))]
async fn command_stdin(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, cid)): Path<(String, String)>,
    JsonBody(req): JsonBody<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    st.service.command_stdin(&c, &id, &cid, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/signal", request_body = SignalRequest, responses((status = 204)))]
async fn command_signal(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, cid)): Path<(String, String)>,
    JsonBody(req): JsonBody<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    st.service
        .command_signal(&c, &id, &cid, signal_number(&req.signal)?)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct PathQuery {
    path: Option<String>,
    #[serde(default)]
    recursive: bool,
}

fn need_path(q: &PathQuery) -> Result<String, ApiError> {
    q.path
        .clone()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad_request("path: give ?path=/workspace/file"))
}

async fn with_fs<T: Send + 'static>(
    st: &AppState,
    c: &Caller,
    id: &str,
    event: &str,
    path: &str,
    op: impl FnOnce(&SandboxFs) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ApiError> {
    crate::files::with_fs(&st.service, c, id, event, path, op).await
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(("path" = String, Query,)), responses((status = 200, description = "the file's bytes", content_type = "application/octet-stream")))]
async fn file_read(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = need_path(&q)?;
    let max = st.service.cfg.max_download;
    let p = path.clone();
    let data = with_fs(&st, &c, &id, "file.read", &path, move |fs| fs.read(&p, max)).await?;
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
    let too_large = || {
        ApiError::new(
            413,
            "too_large",
            format!("uploads are limited to {max} bytes"),
        )
    };
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

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(("path" = String, Query,)), request_body(content = Vec<u8>, content_type = "application/octet-stream"), responses((status = 201), (status = 413, body = ErrorBody), (status = 507, body = ErrorBody)))]
async fn file_write(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let path = need_path(&q)?;
    let max = st.service.cfg.max_upload;
    let data = read_upload(body, max).await?;
    if data.len() as u64 > max {
        return Err(ApiError::new(
            413,
            "too_large",
            format!("uploads are limited to {max} bytes"),
        ));
    }
    let written = crate::files::write(&st.service, &c, &id, &path, data.to_vec()).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"path": path, "bytes": written})),
    ))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", params(("path" = String, Query,), ("recursive" = Option<bool>, Query,)), responses((status = 204)))]
async fn file_delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = need_path(&q)?;
    let p = path.clone();
    let rec = q.recursive;
    with_fs(&st, &c, &id, "file.delete", &path, move |fs| {
        fs.remove(&p, rec)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(("path" = Option<String>, Query,)), responses((status = 200, description = "{\"entries\": [{name, path, type, size, mode, modified}]}")))]
async fn file_list(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = q.path.clone().unwrap_or_else(|| "/workspace".into());
    let p = path.clone();
    let entries = with_fs(&st, &c, &id, "file.list", &path, move |fs| fs.list(&p)).await?;
    Ok(Json(json!({ "entries": entries })))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", params(("path" = String, Query,)), responses((status = 200, description = "{name, path, type, size, mode, modified}")))]
async fn file_stat(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = need_path(&q)?;
    let p = path.clone();
    let entry = with_fs(&st, &c, &id, "file.stat", &path, move |fs| fs.stat(&p)).await?;
    Ok(Json(serde_json::to_value(entry).unwrap_or_default()))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", request_body = MkdirRequest, responses((status = 201)))]
async fn file_mkdir(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<MkdirRequest>,
) -> Result<StatusCode, ApiError> {
    let p = req.path.clone();
    with_fs(&st, &c, &id, "file.mkdir", &req.path, move |fs| {
        fs.mkdir(&p, req.parents)
    })
    .await?;
    Ok(StatusCode::CREATED)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/move", request_body = MoveRequest, responses((status = 204)))]
async fn file_move(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<MoveRequest>,
) -> Result<StatusCode, ApiError> {
    let (from, to) = (req.from.clone(), req.to.clone());
    with_fs(
        &st,
        &c,
        &id,
        "file.move",
        &format!("{} -> {}", req.from, req.to),
        move |fs| fs.rename(&from, &to),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/code", request_body = crate::kernel::CodeRequest,
    responses((status = 200, body = crate::kernel::CodeResult, description = "or server-sent events (stdout, stderr, result, error, done) with Accept: text/event-stream")))]
async fn run_code(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<crate::kernel::CodeRequest>,
) -> Result<Response, ApiError> {
    use crate::kernel::CellEvent;
    if !wants_stream(&headers) {
        return Ok(Json(st.service.run_code(&c, &id, req, None).await?).into_response());
    }
    st.service.get_live(&c, &id)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<CellEvent>(64);
    let svc = st.service.clone();
    tokio::spawn(async move {
        if let Err(e) = svc.run_code(&c, &id, req, Some(tx.clone())).await {
            let r = crate::kernel::CodeResult {
                error: Some(crate::kernel::CodeError {
                    name: e.code.to_string(),
                    value: e.message,
                    traceback: vec![],
                }),
                ..Default::default()
            };
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

#[utoipa::path(get, path = "/v1/sandboxes/{id}/network", responses((status = 200, description = "{policy: {allow, hosts}, events: [{time_ms, host, port, verdict, reason, bytes}]}")))]
async fn get_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(st.service.network(&c, &id)?))
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/network", request_body(content = Object, description = "{allow: [\"DOMAIN[:PORT]\", …], hosts: {name: ip}}"), responses((status = 200), (status = 400, body = ErrorBody)))]
async fn put_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(policy): JsonBody<cordon_policy::network::NetworkPolicy>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(st.service.set_network(&c, &id, policy)?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct NewContext {
    #[serde(default = "py")]
    language: String,
    #[serde(default = "default_ctx")]
    name: String,
}

fn py() -> String {
    "python".into()
}

fn default_ctx() -> String {
    "default".into()
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/contexts", responses((status = 200, description = "{\"contexts\": [{language, name, execution_count, alive}]}")))]
async fn list_contexts(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(
        json!({"contexts": st.service.list_contexts(&c, &id)?}),
    ))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts", request_body = NewContext, responses((status = 201, body = crate::kernel::ContextInfo)))]
async fn create_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<NewContext>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st
        .service
        .create_context(&c, &id, &req.language, &req.name)
        .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{language}/{name}/restart", responses((status = 204)))]
async fn restart_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, language, name)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    st.service
        .restart_context(&c, &id, &language, &name)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/contexts/{language}/{name}", responses((status = 204)))]
async fn delete_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path((id, language, name)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    st.service.delete_context(&c, &id, &language, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/run", request_body = RunRequest, responses((status = 200, description = "the Outcome of a one-shot run")))]
async fn run_oneshot(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let outcome = crate::oneshot::run(&st.service, &c, req).await?;
    Ok(Json(outcome).into_response())
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cordon",
        description = "Persistent and one-shot sandboxes for code that AI agents write. Authenticate with 'Authorization: Bearer <key>'."
    ),
    paths(
        create,
        list,
        get_one,
        delete,
        extend,
        exec,
        list_commands,
        get_command,
        wait_command,
        command_stdin,
        command_signal,
        file_read,
        file_write,
        file_delete,
        file_list,
        file_stat,
        file_mkdir,
        file_move,
        run_oneshot,
        run_code,
        list_contexts,
        create_context,
        restart_context,
        delete_context
    ),
    components(schemas(
        CreateSandbox,
        SandboxInfo,
        SandboxList,
        LimitsView,
        ExtendTtl,
        ExecRequest,
        Cmd,
        Amount,
        RunRequest,
        CommandInfo,
        CommandList,
        StdinRequest,
        SignalRequest,
        MkdirRequest,
        MoveRequest,
        ErrorBody,
        crate::error::ErrorDetail,
        crate::kernel::CodeRequest,
        crate::kernel::CodeResult,
        crate::kernel::CodeError,
        crate::kernel::ContextInfo,
        NewContext
    ))
)]
pub struct ApiDoc;
