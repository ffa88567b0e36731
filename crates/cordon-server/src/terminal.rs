//! A terminal into a running sandbox over WebSocket: `GET /v1/sandboxes/{id}/terminal`, what
//! `cordon exec -t` (and a browser) speaks. One command per connection, on a pty of the
//! sandbox's own (the service's background command with a terminal, as E2B's PTYs).
//!
//! The protocol: the client's first message is text, a JSON `TerminalStart`
//! (`{"cmd", "cwd"?, "env"?, "rows", "cols", "timeout"?}`); then binary messages are keystrokes
//! (bytes for the terminal), text messages are controls (`{"resize": {"rows", "cols"}}`,
//! `{"signal": "INT"}`). The server sends the terminal's output as binary messages and, when
//! the command has ended, one text message `{"exit": Outcome}` and a close.
//!
//! Threat model: the caller is authenticated by the API key like every protected route; the
//! command runs only in the caller's own sandbox (the service checks). A WebSocket is not
//! bound by the browser's same-origin rule, so a page elsewhere could open one with a
//! browser's ambient credentials: a request carrying an `Origin` that is not this server's own
//! is refused before the upgrade (clients that are not browsers send none). Closing the
//! connection ends the command: no terminal outlives the person at it. Sizes and the first
//! message are client input, bounded and checked; output is the sandbox's, relayed as bytes.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Extension;
use serde::Deserialize;
use serde_json::json;

use crate::app::AppState;
use crate::error::ApiError;
use crate::native::IdPath;
use cordon_service::types::{Amount, Cmd, ExecRequest, PtySize};
use cordon_service::{signal_number, Caller, ExecEvent, Service};

/// The first message: what to run and on what size of terminal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TerminalStart {
    cmd: Cmd,
    cwd: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    rows: u16,
    cols: u16,
    timeout: Option<Amount>,
}

/// A control message after the start.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
enum Control {
    Resize(PtySize),
    Signal(Amount),
}

/// The terminal's route, behind the API key (or a console session) like the native API's.
/// Its own router, outside the native API's OpenAPI document, which has no words for a
/// WebSocket upgrade.
pub(crate) fn router(st: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route("/v1/sandboxes/{id}/terminal", axum::routing::get(terminal))
        .route_layer(axum::middleware::from_fn_with_state(
            st.clone(),
            crate::auth::auth,
        ))
        .with_state(st)
}

/// How long the client has to send its first message.
const START_WITHIN: Duration = Duration::from_secs(10);

/// True when the request comes from a browser page of another origin: its `Origin` names a
/// host other than the one it asked (`Host`). No `Origin` (a CLI, an SDK) is not a browser.
fn foreign_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return headers.contains_key("origin");
    };
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    host.is_empty() || !origin_host.eq_ignore_ascii_case(host)
}

async fn terminal(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    if foreign_origin(&headers) {
        return Err(ApiError::new(
            crate::error::ErrorKind::Forbidden,
            "foreign_origin",
            "a terminal is opened only from this server's own pages (the Origin is another's)",
        ));
    }
    // An unknown sandbox is refused before the upgrade, as a plain 404.
    st.service.get_live(&c, &id)?;
    let svc = st.service.clone();
    Ok(ws
        .max_message_size(1 << 20)
        .on_upgrade(move |socket| async move { session(svc, c, id, socket).await }))
}

/// Sends a final `{"error": …}` and closes: the client reads why its terminal did not start.
async fn refuse(mut socket: WebSocket, message: String) {
    let _ = socket
        .send(Message::Text(
            json!({ "error": message }).to_string().into(),
        ))
        .await;
    let _ = socket.send(Message::Close(None)).await;
}

async fn session(svc: Arc<Service>, c: Caller, id: String, mut socket: WebSocket) {
    let start = match tokio::time::timeout(START_WITHIN, socket.recv()).await {
        Ok(Some(Ok(Message::Text(t)))) => match serde_json::from_str::<TerminalStart>(&t) {
            Ok(s) => s,
            Err(e) => return refuse(socket, format!("the first message: {e}")).await,
        },
        Ok(_) => {
            return refuse(
                socket,
                "the first message must be text: {\"cmd\", \"rows\", \"cols\", …}".into(),
            )
            .await
        }
        Err(_) => return refuse(socket, "no first message within 10 s".into()).await,
    };
    let size = PtySize {
        rows: start.rows,
        cols: start.cols,
    };
    if let Err(e) = size.check() {
        return refuse(socket, e.message).await;
    }
    let req = ExecRequest {
        cmd: start.cmd,
        cwd: start.cwd,
        env: start.env,
        stdin: None,
        timeout: start.timeout,
        background: true,
        pty: Some(size),
        tag: None,
    };
    let (cmd, mut events) = match svc.exec_attached(&c, &id, req, true).await {
        Ok(x) => x,
        Err(e) => return refuse(socket, e.message).await,
    };
    let (_, mut done) = cmd.subscribe();
    let cid = cmd.id.clone();
    let outcome = loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(ExecEvent::Stdout(d)) | Ok(ExecEvent::Stderr(d)) => {
                    if socket.send(Message::Binary(d.into())).await.is_err() {
                        break None;
                    }
                }
                Ok(ExecEvent::Exit(o)) => break Some(*o),
                // A slow client missed output; the terminal goes on.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    let _ = done.wait_for(|o| o.is_some()).await;
                    break done.borrow().clone();
                }
            },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Binary(b))) => {
                    let _ = svc.command_input(&c, &id, &cid, &b, false).await;
                }
                Some(Ok(Message::Text(t))) => {
                    let r = match serde_json::from_str::<Control>(&t) {
                        Ok(Control::Resize(s)) => svc.command_resize(&c, &id, &cid, s),
                        Ok(Control::Signal(s)) => signal_number(&s)
                            .and_then(|n| svc.command_signal(&c, &id, &cid, n)),
                        Err(e) => Err(cordon_service::error::ServiceError::bad_request(format!(
                            "a control message: {e}"
                        ))),
                    };
                    if let Err(e) = r {
                        let msg = json!({ "error": e.message }).to_string();
                        let _ = socket.send(Message::Text(msg.into())).await;
                    }
                }
                Some(Ok(_)) => {}
                // The person left: the command ends with the connection.
                None | Some(Err(_)) => break None,
            },
        }
    };
    let Some(outcome) = outcome else {
        let _ = svc.command_signal(&c, &id, &cid, 9);
        return;
    };
    let _ = socket
        .send(Message::Text(json!({ "exit": outcome }).to_string().into()))
        .await;
    let _ = socket.send(Message::Close(None)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, axum::http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_this_servers_own_pages_or_non_browsers_may_open_a_terminal() {
        assert!(!foreign_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(!foreign_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(foreign_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.test")
        ])));
        assert!(foreign_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
        assert!(foreign_origin(&headers(&[(
            "origin",
            "http://127.0.0.1:8080"
        )])));
    }
}
