//! The router: an HTTP door in front of the cluster's nodes. Each request goes, byte for byte
//! and streamed both ways, to the node its sandbox id names ([`crate::route`]); a create to the
//! node placement picks ([`crate::place`]), tried on another when its node cannot be reached;
//! a listing to every live node, merged. The router keeps no table of its own, so any number
//! of replicas may run and one restarted loses nothing.
//!
//! Failure is said, never waited out: a sandbox whose node Ray reports gone (or whose node
//! cannot be reached) answers `sandbox_lost` (404, in the shape of the door the client speaks:
//! the E2B SDK raises its not-found exception); a call in flight to a node that membership
//! then reports dead is cut short the same way; connecting to a node gives up after 2 s.
//!
//! Threat model: requests are hostile client input and pass through unread except for the
//! route; the cluster secret header is stripped from every incoming request and set by the
//! router alone, so a client can neither learn nor forge it. Hop-by-hop headers are dropped.

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

use crate::membership::{self, NodeView, View};
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
    let router = Arc::new(Router {
        view: membership::follow(opts.membership),
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
    match route::target(req.method(), &path, req.headers()) {
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
                return fail(
                    st,
                    StatusCode::NOT_FOUND,
                    "not_found",
                    &format!("no sandbox {id}"),
                );
            };
            if !node.alive {
                return lost(st, &id, name);
            }
            match r.forward(node, &view.secret, req).await {
                Ok(resp) => resp,
                Err(_) => lost(st, &id, name),
            }
        }
        Target::Place => r.place(&view, st, req).await,
        Target::Any => {
            let salt = r.salt.fetch_add(1, Ordering::Relaxed);
            let pick = crate::place::pick(&view, &HashMap::new(), &[], salt)
                .or_else(|| view.alive().next().map(|n| n.node.clone()));
            let Some(node) = pick.and_then(|p| view.node(&p).cloned()) else {
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

impl Router {
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
                Ok(resp) => return resp,
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
