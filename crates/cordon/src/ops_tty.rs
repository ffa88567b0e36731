//! `cordon exec -t`: a terminal into a running sandbox, over the server's WebSocket
//! (`GET /v1/sandboxes/{id}/terminal`, see `cordon-server/src/terminal.rs` for the protocol).
//! This terminal is put in raw mode for the session and restored on every way out; keystrokes
//! go to the sandbox's own pty as bytes, its output comes back as bytes, and this terminal's
//! size follows along.
//!
//! Threat model: this terminal never enters the sandbox (no TIOCSTI into the host shell: the
//! command has a pty of the sandbox's own); what comes back is the sandbox's output, written to
//! this terminal as `cordon run -t` does. The key goes in the upgrade request's Authorization
//! header only.

use std::io::Write;
use std::os::fd::AsFd;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{enc, Server};
use crate::run_tty::{size_of, RawMode};

/// Runs the command of `body` (an exec request's JSON) on a terminal in sandbox `id`; returns
/// the exit status `cordon exec` gives.
pub fn exec_tty(s: &Server, id: &str, mut body: Value) -> Result<i32, String> {
    let stdin = std::io::stdin();
    let host = stdin.as_fd();
    if !rustix::termios::isatty(host) {
        return Err("-t needs a terminal on stdin; drop -t, or pass input with -i".into());
    }
    let url = match s.base.strip_prefix("http://") {
        Some(rest) => format!("ws://{rest}/v1/sandboxes/{}/terminal", enc(id)),
        None => {
            return Err(format!(
                "{}: a terminal needs a plain http:// server URL",
                s.base
            ))
        }
    };
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("{url}: {e}"))?;
    if let Some(auth) = s.authorization() {
        let v = auth
            .parse()
            .map_err(|_| "the API key is not a valid header value".to_string())?;
        req.headers_mut().insert("authorization", v);
    }
    let size = size_of(host);
    body["rows"] = json!(size.rows);
    body["cols"] = json!(size.cols);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the relay: {e}"))?;
    rt.block_on(async move {
        let (ws, _) = tokio_tungstenite::connect_async(req)
            .await
            .map_err(|e| match e {
                tokio_tungstenite::tungstenite::Error::Http(r) => {
                    let body = r
                        .body()
                        .as_ref()
                        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
                        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    format!("the server answered {}: {body}", r.status().as_u16())
                }
                e => format!("cannot open a terminal at {}: {e}", s.base),
            })?;
        let raw = RawMode::enter(host).map_err(|e| e.to_string())?;
        let r = relay(ws, body, host).await;
        drop(raw);
        r
    })
}

async fn relay(
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    start: Value,
    host: std::os::fd::BorrowedFd<'_>,
) -> Result<i32, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut tx, mut rx) = ws.split();
    tx.send(Message::Text(start.to_string().into()))
        .await
        .map_err(|e| format!("starting the command: {e}"))?;
    // Stdin is read on a thread of its own: making it non-blocking would change the shell's
    // terminal too (one open file), and a blocked read ends with the process.
    let (in_tx, mut in_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let host_in = host
        .try_clone_to_owned()
        .map_err(|e| format!("stdin: {e}"))?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match rustix::io::read(&host_in, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if in_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut winch = signal(SignalKind::window_change()).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    let mut in_open = true;
    loop {
        tokio::select! {
            m = rx.next() => match m {
                Some(Ok(Message::Binary(b))) => {
                    let _ = out.write_all(&b).and_then(|_| out.flush());
                }
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                    if let Some(o) = v.get("exit") {
                        let o: cordon_policy::Outcome = serde_json::from_value(o.clone())
                            .map_err(|e| format!("the server's Outcome: {e}"))?;
                        return Ok(o.cli_exit_code());
                    }
                    if let Some(e) = v["error"].as_str() {
                        return Err(format!("the server: {e}"));
                    }
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => {
                    return Err("the server closed the terminal before the command's Outcome".into())
                }
            },
            d = in_rx.recv(), if in_open => match d {
                Some(d) => {
                    if tx.send(Message::Binary(d.into())).await.is_err() {
                        return Err("the server closed the terminal".into());
                    }
                }
                None => in_open = false,
            },
            _ = winch.recv() => {
                let s = size_of(host);
                let msg = json!({"resize": {"rows": s.rows, "cols": s.cols}}).to_string();
                let _ = tx.send(Message::Text(msg.into())).await;
            },
        }
    }
}
