//! The router: an HTTP door in front of the cluster's nodes. Each request goes, byte for byte
//! and streamed both ways, to the node its sandbox id names ([`crate::route`]); a create to the
//! node placement picks ([`crate::place`]), tried on another when its node cannot be reached;
//! a listing to every live node, merged. The router keeps no table of its own, so any number
//! of replicas may run and one restarted loses nothing.
//!
//! A sandbox create first takes one of its key's slots from the cluster's control actor (a
//! Ray actor, so one call at a time: concurrent creates through different routers cannot both
//! take the last slot); the router names the key by its secret's SHA-256, the form the cluster
//! stores, confirms the slot with the new sandbox's id, or releases it when the create fails
//! (a router that dies between the two leaves the slot to the control actor's lease).
//!
//! Failure is said, never waited out: a sandbox whose node Ray reports gone (or whose node
//! cannot be reached) answers `sandbox_lost` (404, in the shape of the door the client speaks:
//! the E2B SDK raises its not-found exception); a call in flight to a node that membership
//! then reports dead is cut short the same way; connecting to a node gives up after 2 s.
//!
//! Threat model: requests are hostile client input and pass through unread except for the
//! route, a create's API key (hashed here: its secret never leaves the router but for the
//! node that checks it) and an MCP session id (whose node prefix only selects among the nodes
//! membership knows); the cluster secret header is stripped from every incoming request and
//! set by the router alone, so a client can neither learn nor forge it. Hop-by-hop headers
//! are dropped. An unknown key takes no slot: its node refuses it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::membership::{self, Control, NodeView, View};
use crate::route::{self, Target};

/// The header in which a router proves itself to a node (the node side:
/// `cordon_server::app::CLUSTER_SECRET_HEADER`).
pub const SECRET_HEADER: &str = "x-cordon-cluster-secret";
/// Largest create body the router holds to retry on another node.
const MAX_CREATE_BODY: usize = 4 << 20;
/// Largest listing a node may answer with.
const MAX_LIST_BODY: usize = 64 << 20;
/// Nodes tried for one create before giving up.
const CREATE_TRIES: usize = 3;
/// Largest create answer the router reads for the new sandbox's id.
const MAX_CREATE_ANSWER: usize = 1 << 20;
/// A sandbox call's body up to this size is read whole before it is sent on, so that a node
/// lost mid-call leaves nothing of it unread (see [`drain`]); larger bodies (uploads) stream.
const BUFFER_BODY: u64 = 256 << 10;
/// How much of an unsent body, and for how long, the router reads before answering anyway.
const DRAIN_MAX: usize = 1 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("serving: {0}")]
    Serve(std::io::Error),
}

/// Where the router listens and how it learns the cluster.
pub struct RouterOptions {
    pub listen: SocketAddr,
    /// The membership process (program and arguments).
    pub membership: Vec<OsString>,
}

struct Router {
    view: watch::Receiver<Arc<View>>,
    control: Control,
    client: Client<HttpConnector, Body>,
    inflight: Mutex<HashMap<String, u32>>,
    salt: AtomicU64,
}

/// Runs the router until SIGINT/SIGTERM; `ready` is told the address once it listens.
pub async fn serve(opts: RouterOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), RouterError> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| RouterError::Listen(opts.listen, e))?;
    let addr = listener.local_addr().map_err(RouterError::Serve)?;
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(Duration::from_secs(2)));
    http.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(http);
    let (view, control) = membership::follow(opts.membership);
    let router = Arc::new(Router {
        view,
        control,
        client,
        inflight: Mutex::new(HashMap::new()),
        salt: AtomicU64::new(0),
    });
    ready(addr);
    let app = axum::Router::new().fallback(handle).with_state(router);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
            }
        })
        .await
        .map_err(RouterError::Serve)
}

/// The error shape of the door a request speaks.
#[derive(Clone, Copy)]
enum Style {
    Native,
    E2b,
    Connect,
}

fn style(path: &str, h: &HeaderMap) -> Style {
    if path.starts_with("/process.Process/") || path.starts_with("/filesystem.Filesystem/") {
        Style::Connect
    } else if h.contains_key("e2b-sandbox-id")
        || h.contains_key("x-api-key")
        || path.starts_with("/sandboxes")
        || path.starts_with("/v2/")
    {
        Style::E2b
    } else {
        Style::Native
    }
}

fn fail(style: Style, status: StatusCode, code: &str, message: &str) -> Response {
    let body = match style {
        Style::Native => json!({"error": {"code": code, "message": message}}),
        Style::E2b => json!({"code": status.as_u16(), "message": format!("{code}: {message}")}),
        Style::Connect => {
            let c = match status {
                StatusCode::NOT_FOUND => "not_found",
                StatusCode::TOO_MANY_REQUESTS => "resource_exhausted",
                _ => "unavailable",
            };
            json!({"code": c, "message": format!("{code}: {message}")})
        }
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn lost(style: Style, id: &str, node: &str) -> Response {
    fail(
        style,
        StatusCode::NOT_FOUND,
        "sandbox_lost",
        &format!(
            "sandbox {id} was on node {node}, which has left the cluster: the sandbox is lost"
        ),
    )
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The headers a node gets: the client's, less hop-by-hop ones, plus the cluster secret.
fn node_headers(h: &mut HeaderMap, secret: &str) {
    h.remove(SECRET_HEADER);
    for name in HOP_BY_HOP {
        h.remove(name);
    }
    if let Ok(v) = HeaderValue::from_str(secret) {
        h.insert(SECRET_HEADER, v);
    }
}

/// Reads what is left of a body the router answers without sending on. A client still writing
/// it to a connection the router has answered and closed gets a broken pipe in place of the
/// answer (E2B's SDK sends a body with `connect`, and would see no `sandbox_lost`).
async fn drain(body: Body) {
    let _ = tokio::time::timeout(DRAIN_TIME, axum::body::to_bytes(body, DRAIN_MAX)).await;
}

/// A request whose declared body is small, with that body already read (see [`BUFFER_BODY`]).
async fn buffer_small(req: Request) -> Result<Request, Response> {
    let small = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0 && n <= BUFFER_BODY);
    if !small {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, BUFFER_BODY as usize).await {
        Ok(bytes) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Err(_) => Err(StatusCode::BAD_REQUEST.into_response()),
    }
}

enum Forward {
    /// The node could not be reached: nothing was sent.
    Unreachable,
    /// The node went away with the request in flight.
    Lost,
}

async fn handle(State(r): State<Arc<Router>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let st = style(&path, req.headers());
    let view = r.view.borrow().clone();
    let target = route::target(req.method(), &path, req.headers());
    // A router that has not heard from the cluster yet (just started) knows no node: "no such
    // sandbox" would then be a lie a client might act on (E2B's SDK raises not-found).
    if view.nodes.is_empty() && target != Target::Health {
        return fail(
            st,
            StatusCode::SERVICE_UNAVAILABLE,
            "cluster_unknown",
            "this router has not heard from the cluster yet; retry",
        );
    }
    match target {
        Target::Health => {
            let alive = view.alive().count();
            let status = if alive > 0 {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (
                status,
                axum::Json(
                    json!({"status": if alive > 0 {"ok"} else {"no_nodes"}, "nodes_alive": alive}),
                ),
            )
                .into_response()
        }
        Target::Sandbox(id) => {
            let Some(name) = route::node_of(&id) else {
                return fail(
                    st,
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("no sandbox {id}"),
                );
            };
            let Some(node) = view.node(name) else {
                if view.settling {
                    return fail(
                        st,
                        StatusCode::SERVICE_UNAVAILABLE,
                        "cluster_unknown",
                        "the cluster's control has just restarted and has not heard from every node yet; retry",
                    );
                }
                return fail(
                    st,
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("no sandbox {id}"),
                );
            };
            if !node.alive {
                drain(req.into_body()).await;
                return lost(st, &id, name);
            }
            let req = match buffer_small(req).await {
                Ok(req) => req,
                Err(refused) => return refused,
            };
            match r.forward(node, &view.secret, req).await {
                Ok(resp) => resp,
                Err(_) => lost(st, &id, name),
            }
        }
        Target::Place => {
            let slot = match r.reserve(st, &path, req.method(), req.headers()).await {
                Ok(slot) => slot,
                Err(refused) => return refused,
            };
            let mut resp = r.place(&view, st, req).await;
            let node = resp
                .headers_mut()
                .remove(NODE_HEADER)
                .and_then(|v| v.to_str().ok().map(str::to_string));
            match slot {
                Some(slot) => slot.settle(st, node, resp).await,
                None => resp,
            }
        }
        Target::Mcp => r.mcp(&view, st, req).await,
        Target::Any => {
            let Some(node) = r.any_node(&view) else {
                return no_nodes(st);
            };
            match r.forward(&node, &view.secret, req).await {
                Ok(resp) => resp,
                Err(_) => fail(
                    st,
                    StatusCode::BAD_GATEWAY,
                    "node_lost",
                    "the node serving this request left the cluster; retry",
                ),
            }
        }
        Target::All => r.list(&view, st, req).await,
    }
}

fn no_nodes(st: Style) -> Response {
    fail(
        st,
        StatusCode::SERVICE_UNAVAILABLE,
        "no_capacity",
        "no node of the cluster can take a sandbox now (none alive with free slots)",
    )
}

/// A key's sandbox slot, taken from the control actor for one create. Dropped unsettled (the
/// client went away mid-create), it is released.
struct Slot {
    control: Control,
    rid: String,
    settled: bool,
}

impl Slot {
    /// Keeps the slot for the sandbox a successful create made (naming it, so the control
    /// actor knows it when its node reports it), or releases it.
    async fn settle(mut self, st: Style, node: Option<String>, resp: Response) -> Response {
        self.settled = true;
        let (Some(node), true) = (node, resp.status().is_success()) else {
            self.release();
            return resp;
        };
        let (parts, body) = resp.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_CREATE_ANSWER).await else {
            // The sandbox exists but its answer was lost: the slot stays until its node's
            // reports settle it.
            self.confirm(node, None);
            return fail(
                st,
                StatusCode::BAD_GATEWAY,
                "node_lost",
                "the node's answer to the create was cut off",
            );
        };
        let id = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
            ["id", "sandboxID", "sandboxId"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str).map(str::to_string))
        });
        self.confirm(node, id);
        Response::from_parts(parts, Body::from(bytes))
    }

    fn confirm(&self, node: String, sandbox: Option<String>) {
        let (control, rid) = (self.control.clone(), self.rid.clone());
        tokio::spawn(async move {
            let args = json!({"rid": rid, "node": node, "sandbox": sandbox});
            let _ = control.call("confirm", args).await;
        });
    }

    fn release(&self) {
        let (control, rid) = (self.control.clone(), self.rid.clone());
        tokio::spawn(async move {
            let _ = control.call("release", json!({"rid": rid})).await;
        });
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.settled {
            self.release();
        }
    }
}

/// Set by [`Router::place`] on a create's answer: the node that made it (never sent on).
const NODE_HEADER: &str = "x-cordon-cluster-node";

/// The API key a request carries (the native API's bearer token, E2B's `X-API-KEY`).
fn api_key(h: &HeaderMap) -> Option<&str> {
    h.get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// Whether a placed request makes a sandbox (rather than a one-shot run).
fn makes_sandbox(method: &Method, path: &str) -> bool {
    *method == Method::POST
        && matches!(
            path.trim_end_matches('/'),
            "/v1/sandboxes" | "/sandboxes" | "/v2/sandboxes"
        )
}

impl Router {
    /// The node for a request that names none: placement's pick, or any alive node.
    fn any_node(&self, view: &View) -> Option<NodeView> {
        let salt = self.salt.fetch_add(1, Ordering::Relaxed);
        let pick = crate::place::pick(view, &HashMap::new(), &[], salt)
            .or_else(|| view.alive().next().map(|n| n.node.clone()));
        pick.and_then(|p| view.node(&p).cloned())
    }

    /// MCP over HTTP: a new session goes to placement's pick, and the session id the node
    /// answers is handed to the client prefixed with that node's name; every later request of
    /// the session goes to the node its id names, with the node's own id.
    async fn mcp(&self, view: &View, st: Style, mut req: Request) -> Response {
        let session = req
            .headers()
            .get(route::MCP_SESSION)
            .map(|v| v.to_str().map(str::to_string));
        let node = match session {
            None => match self.any_node(view) {
                Some(n) => n,
                None => return no_nodes(st),
            },
            Some(id) => {
                // Unknown sessions get 404, on which MCP clients start a new one.
                let gone = |code: &str, msg: &str| fail(st, StatusCode::NOT_FOUND, code, msg);
                let Some((name, inner)) = id.as_deref().ok().and_then(route::mcp_session) else {
                    return gone("not_found", "no such MCP session");
                };
                let Some(node) = view.node(name) else {
                    return gone("not_found", "no such MCP session");
                };
                if !node.alive {
                    return gone(
                        "session_lost",
                        &format!("the MCP session was on node {name}, which has left the cluster: start a new session"),
                    );
                }
                let Ok(v) = HeaderValue::from_str(inner) else {
                    return gone("not_found", "no such MCP session");
                };
                req.headers_mut().insert(route::MCP_SESSION, v);
                node.clone()
            }
        };
        match self.forward(&node, &view.secret, req).await {
            Ok(mut resp) => {
                let named = resp
                    .headers()
                    .get(route::MCP_SESSION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|inner| {
                        HeaderValue::from_str(&format!("{}.{inner}", node.node)).ok()
                    });
                if let Some(v) = named {
                    resp.headers_mut().insert(route::MCP_SESSION, v);
                }
                resp
            }
            Err(_) => fail(
                st,
                StatusCode::BAD_GATEWAY,
                "node_lost",
                "the node holding this MCP session left the cluster; start a new session",
            ),
        }
    }

    /// Takes a slot of the create's key, or answers the refusal: 429 `quota_exceeded` when
    /// the key's sandboxes fill its quota across the cluster, 503 when the control actor
    /// cannot be asked (failing closed). A request with no key, or a key the cluster does not
    /// know, takes no slot: its node refuses it.
    async fn reserve(
        &self,
        st: Style,
        path: &str,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Option<Slot>, Response> {
        if !makes_sandbox(method, path) {
            return Ok(None);
        }
        let Some(key) = api_key(headers) else {
            return Ok(None);
        };
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()));
        let answer = match self.control.call("reserve", json!({"hash": hash})).await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("cordon cluster: quota: {e}");
                return Err(fail(
                    st,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "quota_unavailable",
                    "the cluster cannot check this key's sandbox quota now; retry",
                ));
            }
        };
        if answer.get("unknown").and_then(Value::as_bool) == Some(true) {
            return Ok(None);
        }
        match answer.get("rid").and_then(Value::as_str) {
            Some(rid) if answer.get("ok").and_then(Value::as_bool) == Some(true) => {
                Ok(Some(Slot {
                    control: self.control.clone(),
                    rid: rid.to_string(),
                    settled: false,
                }))
            }
            _ => {
                let max = answer.get("max").and_then(Value::as_u64).unwrap_or(0);
                let mut resp = fail(
                    st,
                    StatusCode::TOO_MANY_REQUESTS,
                    "quota_exceeded",
                    &format!(
                        "this key may run at most {max} sandboxes at once in the cluster; delete one first"
                    ),
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Err(resp)
            }
        }
    }

    /// Sends `req` to `node`, cut short if membership reports the node dead meanwhile.
    async fn forward(
        &self,
        node: &NodeView,
        secret: &str,
        req: Request,
    ) -> Result<Response, Forward> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        parts.uri = Uri::try_from(format!("http://{}{}", node.addr, pq))
            .map_err(|_| Forward::Unreachable)?;
        node_headers(&mut parts.headers, secret);
        let call = self.client.request(Request::from_parts(parts, body));
        let mut rx = self.view.clone();
        rx.borrow_and_update();
        let name = node.node.clone();
        let died = async move {
            loop {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                let gone = !rx.borrow_and_update().node(&name).is_some_and(|n| n.alive);
                if gone {
                    return;
                }
            }
        };
        tokio::select! {
            r = call => match r {
                Ok(resp) => Ok(resp.map(Body::new)),
                Err(e) if e.is_connect() => Err(Forward::Unreachable),
                Err(_) => Err(Forward::Lost),
            },
            _ = died => Err(Forward::Lost),
        }
    }

    /// A create: to the node placement picks; to another when that one cannot be reached.
    async fn place(&self, view: &View, st: Style, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let Ok(body) = axum::body::to_bytes(body, MAX_CREATE_BODY).await else {
            return fail(
                st,
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "request body too large",
            );
        };
        let mut tried: Vec<String> = Vec::new();
        for _ in 0..CREATE_TRIES {
            let salt = self.salt.fetch_add(1, Ordering::Relaxed);
            let pick = {
                let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
                crate::place::pick(view, &inflight, &tried, salt)
            };
            let Some(name) = pick else { break };
            let Some(node) = view.node(&name).cloned() else {
                break;
            };
            tried.push(name.clone());
            self.count(&name, 1);
            let req = Request::from_parts(parts.clone(), Body::from(Bytes::clone(&body)));
            let out = self.forward(&node, &view.secret, req).await;
            self.count(&name, -1);
            match out {
                Ok(mut resp) => {
                    if let Ok(v) = HeaderValue::from_str(&name) {
                        resp.headers_mut().insert(NODE_HEADER, v);
                    }
                    return resp;
                }
                Err(Forward::Unreachable) => continue,
                Err(Forward::Lost) => {
                    return fail(
                        st,
                        StatusCode::BAD_GATEWAY,
                        "node_lost",
                        &format!("node {name} left the cluster while creating; retry"),
                    );
                }
            }
        }
        no_nodes(st)
    }

    fn count(&self, node: &str, delta: i32) {
        let mut m = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(node.to_string()).or_insert(0);
        *n = n.saturating_add_signed(delta);
    }

    /// A listing: every live node's, merged (a node that does not answer has lost its
    /// sandboxes, so it has none to list).
    async fn list(self: &Arc<Self>, view: &View, st: Style, req: Request) -> Response {
        let (parts, _) = req.into_parts();
        let mut calls = tokio::task::JoinSet::new();
        for node in view.alive() {
            let mut p = parts.clone();
            p.method = Method::GET;
            let req = Request::from_parts(p, Body::empty());
            let node = node.clone();
            let secret = view.secret.clone();
            let this = self.clone();
            calls.spawn(async move {
                let resp = this.forward(&node, &secret, req).await.ok()?;
                let status = resp.status();
                let headers = resp.headers().clone();
                let bytes = axum::body::to_bytes(resp.into_body(), MAX_LIST_BODY)
                    .await
                    .ok()?;
                Some((status, headers, bytes))
            });
        }
        let mut merged: Option<(HeaderMap, Value)> = None;
        while let Some(done) = calls.join_next().await {
            let Ok(Some((status, headers, bytes))) = done else {
                continue;
            };
            if !status.is_success() {
                let mut resp = (status, bytes).into_response();
                *resp.headers_mut() = headers;
                return resp;
            }
            let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                continue;
            };
            merged = Some(match merged {
                None => (headers, v),
                Some((h, acc)) => (h, merge(acc, v)),
            });
        }
        match merged {
            Some((mut h, v)) => {
                h.remove(header::CONTENT_LENGTH);
                let mut resp = (StatusCode::OK, v.to_string()).into_response();
                for (k, val) in h.iter() {
                    resp.headers_mut().insert(k, val.clone());
                }
                resp
            }
            None => no_nodes(st),
        }
    }
}

/// Two nodes' listings as one: arrays concatenated, and in objects each array field.
fn merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Array(mut x), Value::Array(y)) => {
            x.extend(y);
            Value::Array(x)
        }
        (Value::Object(mut x), Value::Object(y)) => {
            for (k, v) in y {
                match x.remove(&k) {
                    Some(Value::Array(mut xs)) => {
                        if let Value::Array(ys) = v {
                            xs.extend(ys);
                        }
                        x.insert(k, Value::Array(xs));
                    }
                    Some(other) => {
                        x.insert(k, other);
                    }
                    None => {
                        x.insert(k, v);
                    }
                }
            }
            Value::Object(x)
        }
        (a, _) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_of_two_nodes_merge_whatever_their_shape() {
        assert_eq!(merge(json!([1]), json!([2])), json!([1, 2]));
        assert_eq!(
            merge(
                json!({"sandboxes": [1], "n": 1}),
                json!({"sandboxes": [2], "n": 1})
            ),
            json!({"sandboxes": [1, 2], "n": 1})
        );
    }

    #[test]
    fn only_sandbox_creates_take_a_slot_and_the_key_is_read_from_either_door() {
        assert!(makes_sandbox(&Method::POST, "/v1/sandboxes"));
        assert!(makes_sandbox(&Method::POST, "/sandboxes/"));
        assert!(!makes_sandbox(&Method::POST, "/v1/run"));
        assert!(!makes_sandbox(&Method::GET, "/v1/sandboxes"));
        let mut h = HeaderMap::new();
        assert_eq!(api_key(&h), None);
        h.insert("x-api-key", HeaderValue::from_static("cdn_e2b"));
        assert_eq!(api_key(&h), Some("cdn_e2b"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer cdn_n"),
        );
        assert_eq!(api_key(&h), Some("cdn_n"));
    }

    #[test]
    fn a_client_cannot_send_its_own_cluster_secret() {
        let mut h = HeaderMap::new();
        h.insert(SECRET_HEADER, HeaderValue::from_static("forged"));
        h.insert("connection", HeaderValue::from_static("close"));
        node_headers(&mut h, "real");
        assert_eq!(h.get_all(SECRET_HEADER).iter().count(), 1);
        assert_eq!(
            h.get(SECRET_HEADER).map(|v| v.as_bytes()),
            Some(&b"real"[..])
        );
        assert!(h.get("connection").is_none());
    }
}
