//! envd's surface: the `process.Process` and `filesystem.Filesystem` Connect services (JSON
//! codec, as the SDKs send it) and plain-HTTP `/files` and `/health`.
//!
//! The Connect framing is written here: it is five bytes (a flag byte and a big-endian length)
//! before each JSON message, and the Rust Connect crates bring their own server stack and
//! code generation for what is a handful of JSON messages over the axum router we already
//! run.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use cordon_policy::{Outcome, Status};
use cordon_service::files::{self, Entry, EntryType};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};

use super::{check_user, rfc3339, sandbox_path, E2bError, St, HOME};
use crate::error::{ApiError, ErrorKind};
use cordon_service::types::{Amount, Cmd, ExecRequest, PtySize};
use cordon_service::{BgCommand, Caller, ExecEvent};

/// The largest Connect message taken (a request is a command, a path or a chunk of stdin).
const MAX_MESSAGE: usize = 8 << 20;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const FLAG_COMPRESSED: u8 = 0x01;
const FLAG_END: u8 = 0x02;

/// envd's health: with `E2b-Sandbox-Id`, whether that sandbox runs (502 "was not found" when
/// it does not, as E2B's proxy says it); without, the server's.
pub(super) async fn health(State(e2b): State<St>, h: HeaderMap) -> Result<StatusCode, E2bError> {
    if h.contains_key("e2b-sandbox-id") {
        e2b.sandbox(&h)?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// A Connect error: its code names the status (`not_found`, …).
struct RpcError {
    code: &'static str,
    message: String,
}

impl RpcError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    fn http_status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }

    /// A unary call's error answer.
    fn unary(self) -> Response {
        (
            self.http_status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
        )
            .into_response()
    }
}

impl From<cordon_service::error::ServiceError> for RpcError {
    fn from(e: cordon_service::error::ServiceError) -> Self {
        ApiError(e).into()
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = match (e.kind, e.code) {
            (_, "already_exists") => "already_exists",
            (ErrorKind::Invalid | ErrorKind::Unprocessable | ErrorKind::UnsupportedMedia, _) => {
                "invalid_argument"
            }
            (ErrorKind::Unauthenticated, _) => "unauthenticated",
            (ErrorKind::Forbidden, _) => "permission_denied",
            (ErrorKind::NotFound, _) => "not_found",
            (ErrorKind::Conflict, _) => "failed_precondition",
            (
                ErrorKind::TooLarge
                | ErrorKind::RateLimited
                | ErrorKind::Quota
                | ErrorKind::NoSpace,
                _,
            ) => "resource_exhausted",
            (ErrorKind::Unsupported, _) => "unimplemented",
            (ErrorKind::Upstream | ErrorKind::Unavailable, _) => "unavailable",
            (ErrorKind::Internal, _) => "internal",
        };
        RpcError::new(code, e.0.message)
    }
}

/// One Connect envelope.
fn frame(flags: u8, msg: &Value) -> Bytes {
    let body = msg.to_string().into_bytes();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// Splits whole envelopes off the front of `buf`; what is left is an incomplete one.
fn take_frames(buf: &mut Vec<u8>) -> Result<Vec<(u8, Vec<u8>)>, RpcError> {
    let mut out = Vec::new();
    loop {
        if buf.len() < 5 {
            return Ok(out);
        }
        let flags = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(RpcError::new(
                "resource_exhausted",
                format!("message of {len} bytes is over the limit of {MAX_MESSAGE}"),
            ));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(RpcError::new(
                "internal",
                "compressed messages are not accepted (send them uncompressed)",
            ));
        }
        if buf.len() < 5 + len {
            return Ok(out);
        }
        let msg = buf[5..5 + len].to_vec();
        buf.drain(..5 + len);
        out.push((flags, msg));
    }
}

/// How a request is encoded, from its content type.
#[derive(PartialEq)]
enum Kind {
    Unary,
    Stream,
}

fn kind(h: &HeaderMap) -> Result<Kind, RpcError> {
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/json" => Ok(Kind::Unary),
        "application/connect+json" => Ok(Kind::Stream),
        other => Err(RpcError::new(
            "unimplemented",
            format!(
                "content type '{other}' is not served: use the JSON codec (application/json, application/connect+json)"
            ),
        )),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(data: &[u8]) -> Result<T, RpcError> {
    let data = if data.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        data
    };
    serde_json::from_slice(data)
        .map_err(|e| RpcError::new("invalid_argument", format!("request message: {e}")))
}

/// A body of at most `max` bytes, or `None`. Past the limit the rest is read and dropped (up
/// to a bound), so the client reads the error instead of meeting a closed connection.
async fn read_limited(body: Body, max: usize) -> Option<Vec<u8>> {
    const DRAIN_LIMIT: usize = 64 << 20;
    let mut stream = body.into_data_stream();
    let mut data = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.ok()?;
        seen += chunk.len();
        if seen > max {
            data = Vec::new();
            if seen > max + DRAIN_LIMIT {
                return None;
            }
            continue;
        }
        data.extend_from_slice(&chunk);
    }
    (seen <= max).then_some(data)
}

/// Reads a whole request body up front (all but a client stream's), so that an answer given
/// before the body is looked at — an unknown method, a wrong token — still leaves the
/// connection clean for the client's next request.
async fn pre_read(body: Body, whole: bool) -> Result<Body, RpcError> {
    if !whole {
        return Ok(body);
    }
    read_limited(body, MAX_MESSAGE + 5)
        .await
        .map(Body::from)
        .ok_or_else(|| {
            RpcError::new(
                "resource_exhausted",
                format!("request over the limit of {MAX_MESSAGE} bytes"),
            )
        })
}

/// The single message of a unary or server-stream request.
async fn one_message(body: Body, k: &Kind) -> Result<Vec<u8>, RpcError> {
    let data = read_limited(body, MAX_MESSAGE + 5).await.ok_or_else(|| {
        RpcError::new(
            "resource_exhausted",
            format!("request over the limit of {MAX_MESSAGE} bytes"),
        )
    })?;
    if *k == Kind::Unary {
        return Ok(data);
    }
    let mut buf = data;
    let mut frames = take_frames(&mut buf)?;
    if !buf.is_empty() || frames.len() != 1 {
        return Err(RpcError::new(
            "invalid_argument",
            "a server-streaming request is exactly one whole envelope",
        ));
    }
    let (flags, msg) = frames.remove(0);
    if flags & FLAG_END != 0 {
        return Err(RpcError::new(
            "invalid_argument",
            "the request envelope is marked end-of-stream",
        ));
    }
    Ok(msg)
}

/// A server-stream answer: the messages `rx` yields, then the end envelope.
fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/connect+json")],
        Body::from_stream(body),
    )
        .into_response()
}

/// A streaming call that fails before it starts: a 200 with only the end envelope.
fn stream_error(e: RpcError) -> Response {
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(frame(FLAG_END, &json!({"error": e.body()})));
    stream_response(rx)
}

fn answer(k: &Kind, r: Result<Response, RpcError>) -> Response {
    match (r, k) {
        (Ok(resp), _) => resp,
        (Err(e), Kind::Stream) => stream_error(e),
        (Err(e), Kind::Unary) => e.unary(),
    }
}

fn unary_ok(v: Value) -> Result<Response, RpcError> {
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response())
}

// ---- process.Process ----

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
    cwd: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartReq {
    process: ProcessConfig,
    stdin: Option<bool>,
    pty: Option<PtyReq>,
    tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PtyReq {
    size: Option<PtySize>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateReq {
    process: Selector,
    pty: Option<PtyReq>,
}

/// A PTY's size from a request: both fields required, as the SDKs always send them.
fn pty_size(p: &PtyReq) -> Result<PtySize, RpcError> {
    let size = p
        .size
        .ok_or_else(|| RpcError::new("invalid_argument", "pty.size: required"))?;
    size.check()?;
    Ok(size)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Selector {
    pid: Option<u64>,
    tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SelReq {
    process: Selector,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Input {
    stdin: Option<String>,
    pty: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SendInputReq {
    process: Selector,
    input: Input,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SignalReq {
    process: Selector,
    signal: Value,
}

/// The process a selector names: by pid, or by tag (the newest running one with that tag,
/// else the newest that ended).
fn find(e2b: &St, caller: &Caller, id: &str, sel: &Selector) -> Result<Arc<BgCommand>, RpcError> {
    let all = e2b.st.service.background_commands(caller, id)?;
    match (sel.pid, sel.tag.as_deref()) {
        (Some(pid), _) => all
            .into_iter()
            .find(|c| c.exec_id == pid)
            .ok_or_else(|| RpcError::new("not_found", format!("process with pid {pid} not found"))),
        (None, Some(tag)) => {
            let tagged: Vec<Arc<BgCommand>> = all
                .into_iter()
                .filter(|c| c.tag.as_deref() == Some(tag))
                .collect();
            tagged
                .iter()
                .rev()
                .find(|c| c.running())
                .or(tagged.last())
                .cloned()
                .ok_or_else(|| {
                    RpcError::new("not_found", format!("process with tag '{tag}' not found"))
                })
        }
        (None, None) => Err(RpcError::new(
            "invalid_argument",
            "process: give a pid or a tag",
        )),
    }
}

/// Input for a process, from either field of `ProcessInput` (a terminal takes stdin too: it
/// is typed into it).
fn input_bytes(cmd: &BgCommand, input: Input) -> Result<Vec<u8>, RpcError> {
    let (field, data) = match (input.pty, input.stdin) {
        (Some(p), _) => {
            if !cmd.is_pty() {
                return Err(RpcError::new(
                    "failed_precondition",
                    format!(
                        "process with pid {} has no PTY (send its input as stdin)",
                        cmd.exec_id
                    ),
                ));
            }
            ("input.pty", p)
        }
        (None, s) => ("input.stdin", s.unwrap_or_default()),
    };
    B64.decode(data)
        .map_err(|e| RpcError::new("invalid_argument", format!("{field}: {e}")))
}

fn timeout_of(h: &HeaderMap) -> Option<Duration> {
    h.get("connect-timeout-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

fn keepalive_of(h: &HeaderMap) -> Duration {
    h.get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| (1..=3600).contains(s))
        .map_or(Duration::from_secs(50), Duration::from_secs)
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "killed".into(),
        libc::SIGTERM => "terminated".into(),
        libc::SIGINT => "interrupt".into(),
        libc::SIGHUP => "hangup".into(),
        n => format!("signal {n}"),
    }
}

/// The `end` event for a command's outcome, as envd words it (Go's process state).
fn end_event(o: &Outcome) -> Value {
    let mut end = serde_json::Map::new();
    match (o.status, o.exit_code, o.signal) {
        (Status::Exited, Some(code), _) => {
            end.insert("exitCode".into(), json!(code));
            end.insert("exited".into(), json!(true));
            end.insert("status".into(), json!(format!("exit status {code}")));
        }
        (_, _, sig) => {
            end.insert("exitCode".into(), json!(-1));
            end.insert("exited".into(), json!(false));
            let sig = sig.unwrap_or(libc::SIGKILL);
            end.insert(
                "status".into(),
                json!(format!("signal: {}", signal_name(sig))),
            );
            let why = match o.status {
                Status::Timeout => Some("the command ran out of time and was killed".to_string()),
                Status::Oom => Some("the command ran out of memory and was killed".to_string()),
                Status::CpuTime => {
                    Some("the command ran out of CPU time and was killed".to_string())
                }
                _ => o.error.clone(),
            };
            if let Some(w) = why {
                end.insert("error".into(), json!(w));
            }
        }
    }
    json!({"event": {"end": Value::Object(end)}})
}

fn data_event(stream: &str, d: &[u8]) -> Value {
    json!({"event": {"data": {stream: B64.encode(d)}}})
}

/// A stream's exact bytes in an outcome.
fn outcome_bytes(o: &Outcome, stdout: bool) -> Vec<u8> {
    let (text, b64) = if stdout {
        (&o.stdout, &o.stdout_b64)
    } else {
        (&o.stderr, &o.stderr_b64)
    };
    b64.as_deref()
        .and_then(|b| B64.decode(b).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

/// Streams a command's events to the client: `start`, its output, `end`, then the end
/// envelope. The command goes on if the client leaves. `from_start`: the subscription was
/// taken before the command's first output, so the outcome's output, as kept, is what the
/// client must have seen by the end (anything the stream missed is sent before `end`); for
/// a command that had already ended, its whole kept output is sent.
fn follow(
    cmd: Arc<BgCommand>,
    mut events: broadcast::Receiver<ExecEvent>,
    mut done: watch::Receiver<Option<Outcome>>,
    keepalive: Duration,
    from_start: bool,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move { tx.send(frame(0, &v)).await.is_ok() }
        };
        if !send(json!({"event": {"start": {"pid": cmd.exec_id}}})).await {
            return;
        }
        // A terminal's output (stdout of a command on a pty) is `data.pty`.
        let out_name = if cmd.is_pty() { "pty" } else { "stdout" };
        let ended_before = done.borrow().is_some();
        let whole = from_start || ended_before;
        let mut sent = [0usize; 2];
        let mut outcome: Option<Outcome> = None;
        let mut ticker = tokio::time::interval(keepalive);
        ticker.tick().await;
        // Set when the outcome is known but the output fan-out may still hold the last
        // chunks: they are taken until then.
        let mut grace: Option<tokio::time::Instant> =
            ended_before.then(|| tokio::time::Instant::now() + Duration::from_millis(300));
        while outcome.is_none() {
            let until = grace.unwrap_or_else(|| tokio::time::Instant::now() + keepalive * 2);
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ExecEvent::Stdout(d)) => {
                        sent[0] += d.len();
                        if !send(data_event(out_name, &d)).await { return; }
                    }
                    Ok(ExecEvent::Stderr(d)) => {
                        sent[1] += d.len();
                        if !send(data_event("stderr", &d)).await { return; }
                    }
                    Ok(ExecEvent::Exit(o)) => outcome = Some(*o),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        if done.borrow().is_none() {
                            // The fan-out is gone before the outcome: wait for it.
                            let _ = done.changed().await;
                        }
                        outcome = Some(done.borrow().clone().unwrap_or_else(|| Outcome::error("the command ended without an outcome", Default::default())));
                    }
                },
                r = done.changed(), if grace.is_none() => {
                    if r.is_err() || done.borrow().is_some() {
                        grace = Some(tokio::time::Instant::now() + Duration::from_millis(300));
                    }
                },
                _ = tokio::time::sleep_until(until), if grace.is_some() => {
                    outcome = Some(done.borrow().clone().unwrap_or_else(|| Outcome::error("the command ended without an outcome", Default::default())));
                },
                _ = ticker.tick() => {
                    if !send(json!({"event": {"keepalive": {}}})).await { return; }
                },
            }
        }
        if let Some(o) = outcome {
            if whole {
                for (i, name) in [(0, out_name), (1, "stderr")] {
                    let all = outcome_bytes(&o, i == 0);
                    if all.len() > sent[i] && !send(data_event(name, &all[sent[i]..])).await {
                        return;
                    }
                }
            }
            if !send(end_event(&o)).await {
                return;
            }
        }
        let _ = tx.send(frame(FLAG_END, &json!({}))).await;
    });
    stream_response(rx)
}

pub(super) async fn process(
    State(e2b): State<St>,
    Path(method): Path<String>,
    h: HeaderMap,
    body: Body,
) -> Response {
    let body = pre_read(body, method != "StreamInput").await;
    let k = match kind(&h) {
        Ok(k) => k,
        Err(e) => return e.unary(),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return answer(&k, Err(e)),
    };
    let r = process_call(&e2b, &method, &h, body, &k).await;
    answer(&k, r)
}

async fn process_call(
    e2b: &St,
    method: &str,
    h: &HeaderMap,
    body: Body,
    k: &Kind,
) -> Result<Response, RpcError> {
    let streaming = matches!(method, "Start" | "Connect" | "StreamInput");
    let known = streaming
        || matches!(
            method,
            "List" | "SendInput" | "SendSignal" | "CloseStdin" | "Update"
        );
    if !known {
        return Err(RpcError::new(
            "unimplemented",
            format!("process.Process/{method} is not a method of this server"),
        ));
    }
    if streaming != (*k == Kind::Stream) {
        return Err(RpcError::new(
            "invalid_argument",
            format!(
                "process.Process/{method} is {} (content type application/{})",
                if streaming {
                    "a streaming call"
                } else {
                    "a unary call"
                },
                if streaming { "connect+json" } else { "json" }
            ),
        ));
    }
    let (caller, id) = e2b.sandbox(h)?;
    check_user(h, None)?;
    if method == "StreamInput" {
        return stream_input(e2b, &caller, &id, body).await;
    }
    let msg = one_message(body, k).await?;
    match method {
        "Start" => {
            let req: StartReq = decode(&msg)?;
            let pty = req.pty.as_ref().map(pty_size).transpose()?;
            if req.process.cmd.is_empty() {
                return Err(RpcError::new("invalid_argument", "process.cmd: required"));
            }
            let mut argv = vec![req.process.cmd];
            argv.extend(req.process.args);
            let cwd = match req.process.cwd.as_deref() {
                None | Some("") => HOME.to_string(),
                Some(c) => sandbox_path(c)?,
            };
            // The shell then says /home/user rather than the link's target.
            let mut env = req.process.envs;
            env.entry("PWD".into()).or_insert_with(|| cwd.clone());
            let max = e2b.st.service.config().max_exec_timeout;
            let timeout = timeout_of(h).unwrap_or(max).min(max);
            let (cmd, first) = e2b
                .st
                .service
                .exec_attached(
                    &caller,
                    &id,
                    ExecRequest {
                        cmd: Cmd::Argv(argv),
                        cwd: Some(cwd),
                        env,
                        stdin: None,
                        timeout: Some(Amount::Number(timeout.as_secs_f64())),
                        background: true,
                        pty,
                        tag: req.tag.filter(|t| !t.is_empty()),
                    },
                    req.stdin.unwrap_or(false),
                )
                .await?;
            let (_, done) = cmd.subscribe();
            Ok(follow(cmd, first, done, keepalive_of(h), true))
        }
        "Connect" => {
            let req: SelReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            let (events, done) = cmd.subscribe();
            Ok(follow(cmd, events, done, keepalive_of(h), false))
        }
        "List" => {
            let procs: Vec<Value> = e2b
                .st
                .service
                .background_commands(&caller, &id)?
                .into_iter()
                .filter(|c| c.running())
                .map(|c| {
                    let mut p = json!({
                        "pid": c.exec_id,
                        "config": {
                            "cmd": c.argv.first().cloned().unwrap_or_default(),
                            "args": c.argv.iter().skip(1).collect::<Vec<_>>(),
                            "envs": c.env,
                            "cwd": c.cwd,
                        }
                    });
                    if let (Some(tag), Some(o)) = (&c.tag, p.as_object_mut()) {
                        o.insert("tag".into(), json!(tag));
                    }
                    p
                })
                .collect();
            unary_ok(json!({ "processes": procs }))
        }
        "SendInput" => {
            let req: SendInputReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            let data = input_bytes(&cmd, req.input)?;
            e2b.st
                .service
                .command_input(&caller, &id, &cmd.id, &data, false)
                .await?;
            unary_ok(json!({}))
        }
        "CloseStdin" => {
            let req: SelReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            e2b.st
                .service
                .command_input(&caller, &id, &cmd.id, &[], true)
                .await?;
            unary_ok(json!({}))
        }
        "SendSignal" => {
            let req: SignalReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            let sig = match &req.signal {
                Value::String(s) if s == "SIGNAL_SIGKILL" => libc::SIGKILL,
                Value::String(s) if s == "SIGNAL_SIGTERM" => libc::SIGTERM,
                Value::Number(n) if n.as_i64() == Some(9) => libc::SIGKILL,
                Value::Number(n) if n.as_i64() == Some(15) => libc::SIGTERM,
                other => {
                    return Err(RpcError::new(
                        "invalid_argument",
                        format!("signal: {other} is not SIGNAL_SIGKILL or SIGNAL_SIGTERM"),
                    ))
                }
            };
            if !cmd.running() {
                return Err(RpcError::new(
                    "not_found",
                    format!("process with pid {} has already ended", cmd.exec_id),
                ));
            }
            e2b.st.service.command_signal(&caller, &id, &cmd.id, sig)?;
            unary_ok(json!({}))
        }
        // "Update": what can change of a running process is its terminal's size.
        _ => {
            let req: UpdateReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            if let Some(p) = &req.pty {
                let size = pty_size(p)?;
                e2b.st
                    .service
                    .command_resize(&caller, &id, &cmd.id, size)
                    .map_err(|e| match e.kind {
                        ErrorKind::Conflict => RpcError::new("failed_precondition", e.message),
                        _ => ApiError::from(e).into(),
                    })?;
            }
            unary_ok(json!({}))
        }
    }
}

/// `StreamInput`: a client stream of `start{process}`, then `data{input}` and `keepalive`
/// messages; stdin goes to the process as it arrives.
async fn stream_input(
    e2b: &St,
    caller: &Caller,
    id: &str,
    body: Body,
) -> Result<Response, RpcError> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut target: Option<Arc<BgCommand>> = None;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| RpcError::new("canceled", format!("reading the stream: {e}")))?;
        buf.extend_from_slice(&chunk);
        for (flags, msg) in take_frames(&mut buf)? {
            if flags & FLAG_END != 0 {
                continue;
            }
            let v: Value = decode(&msg)?;
            if let Some(start) = v.get("start") {
                let sel: SelReq = serde_json::from_value(start.clone())
                    .map_err(|e| RpcError::new("invalid_argument", format!("start: {e}")))?;
                target = Some(find(e2b, caller, id, &sel.process)?);
            } else if let Some(data) = v.get("data") {
                let Some(cmd) = &target else {
                    return Err(RpcError::new(
                        "failed_precondition",
                        "the stream must start with a start message",
                    ));
                };
                let input: Input =
                    serde_json::from_value(data.get("input").cloned().unwrap_or(Value::Null))
                        .unwrap_or_default();
                let bytes = input_bytes(cmd, input)?;
                e2b.st
                    .service
                    .command_input(caller, id, &cmd.id, &bytes, false)
                    .await?;
            }
        }
    }
    if !buf.is_empty() {
        return Err(RpcError::new(
            "invalid_argument",
            "the stream ended inside an envelope",
        ));
    }
    let (tx, rx) = mpsc::channel(2);
    let _ = tx.try_send(frame(0, &json!({})));
    let _ = tx.try_send(frame(FLAG_END, &json!({})));
    Ok(stream_response(rx))
}

// ---- filesystem.Filesystem ----

fn permissions(mode: u32, t: EntryType) -> String {
    let mut s = String::with_capacity(10);
    s.push(match t {
        EntryType::Dir => 'd',
        EntryType::Symlink => 'l',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn entry_info(e: &Entry) -> Value {
    let t = match e.r#type {
        EntryType::File => "FILE_TYPE_FILE",
        EntryType::Dir => "FILE_TYPE_DIRECTORY",
        EntryType::Symlink => "FILE_TYPE_SYMLINK",
        EntryType::Other => "FILE_TYPE_UNSPECIFIED",
    };
    let mut v = json!({
        "name": e.name,
        "type": t,
        "path": e.path,
        "size": e.size.to_string(),
        "mode": e.mode,
        "permissions": permissions(e.mode, e.r#type),
        "owner": "user",
        "group": "user",
        "modifiedTime": rfc3339(e.modified),
    });
    if let (Some(target), Some(o)) = (&e.target, v.as_object_mut()) {
        o.insert("symlinkTarget".into(), json!(target));
    }
    v
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PathReq {
    path: String,
    depth: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchReq {
    path: String,
    recursive: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct WatcherReq {
    watcher_id: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MoveReq {
    source: String,
    destination: String,
}

/// Deepest listing taken (E2B's own cap is on the client side; this bounds the server's work).
const MAX_DEPTH: u32 = 16;
/// Most entries one listing returns.
const MAX_ENTRIES: usize = 100_000;

pub(super) async fn filesystem(
    State(e2b): State<St>,
    Path(method): Path<String>,
    h: HeaderMap,
    body: Body,
) -> Response {
    let body = pre_read(body, true).await;
    let k = match kind(&h) {
        Ok(k) => k,
        Err(e) => return e.unary(),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return answer(&k, Err(e)),
    };
    let r = fs_call(&e2b, &method, &h, body, &k).await;
    answer(&k, r)
}

/// How often a streamed watch looks at its directory again.
const WATCH_POLL: Duration = Duration::from_millis(200);

/// The async SDKs' `watch_dir`: a `start` event, then each change as the poller sees it, with
/// keepalives while nothing happens, until the client leaves or the sandbox ends.
async fn watch_stream(e2b: &St, h: &HeaderMap, body: Body, k: &Kind) -> Result<Response, RpcError> {
    if *k != Kind::Stream {
        return Err(RpcError::new(
            "invalid_argument",
            "filesystem.Filesystem/WatchDir is a server-stream call (content type application/connect+json)",
        ));
    }
    let (caller, id) = e2b.sandbox(h)?;
    check_user(h, None)?;
    let msg = one_message(body, k).await?;
    let req: WatchReq = decode(&msg)?;
    let p = sandbox_path(&req.path)?;
    let svc = e2b.st.service.clone();
    svc.audit(
        "file.watch",
        &caller.key_id,
        Some(&id),
        json!({"path": p, "recursive": req.recursive}),
    );
    let wid = e2b
        .watchers
        .create(&svc, &caller, &id, p, req.recursive)
        .await?;
    let keepalive = keepalive_of(h);
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let e2b = e2b.clone();
    tokio::spawn(async move {
        let mut last_sent = tokio::time::Instant::now();
        let mut end = json!({});
        if tx.send(frame(0, &json!({"start": {}}))).await.is_ok() {
            loop {
                tokio::time::sleep(WATCH_POLL).await;
                if tx.is_closed() {
                    break;
                }
                match e2b.watchers.events(&svc, &caller, &id, &wid).await {
                    Ok(evs) => {
                        for ev in evs {
                            if tx
                                .send(frame(0, &json!({ "filesystem": ev })))
                                .await
                                .is_err()
                            {
                                break;
                            }
                            last_sent = tokio::time::Instant::now();
                        }
                    }
                    Err(e) => {
                        end = json!({"error": RpcError::from(e).body()});
                        break;
                    }
                }
                if last_sent.elapsed() >= keepalive {
                    if tx.send(frame(0, &json!({"keepalive": {}}))).await.is_err() {
                        break;
                    }
                    last_sent = tokio::time::Instant::now();
                }
            }
        }
        let _ = e2b.watchers.remove(&caller, &id, &wid);
        let _ = tx.send(frame(FLAG_END, &end)).await;
    });
    Ok(stream_response(rx))
}

async fn fs_call(
    e2b: &St,
    method: &str,
    h: &HeaderMap,
    body: Body,
    k: &Kind,
) -> Result<Response, RpcError> {
    let unary = matches!(method, "Stat" | "ListDir" | "MakeDir" | "Move" | "Remove");
    if method == "WatchDir" {
        return watch_stream(e2b, h, body, k).await;
    }
    let polled = matches!(
        method,
        "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher"
    );
    if !unary && !polled {
        return Err(RpcError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{method} is not a method of this server"),
        ));
    }
    if *k != Kind::Unary {
        return Err(RpcError::new(
            "invalid_argument",
            format!(
                "filesystem.Filesystem/{method} is a unary call (content type application/json)"
            ),
        ));
    }
    let (caller, id) = e2b.sandbox(h)?;
    check_user(h, None)?;
    let msg = one_message(body, k).await?;
    let svc = &e2b.st.service;
    match method {
        "CreateWatcher" => {
            let req: WatchReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            svc.audit(
                "file.watch",
                &caller.key_id,
                Some(&id),
                json!({"path": p, "recursive": req.recursive}),
            );
            let wid = e2b
                .watchers
                .create(svc, &caller, &id, p, req.recursive)
                .await?;
            return unary_ok(json!({ "watcherId": wid }));
        }
        "GetWatcherEvents" => {
            let req: WatcherReq = decode(&msg)?;
            let ev = e2b
                .watchers
                .events(svc, &caller, &id, &req.watcher_id)
                .await?;
            return unary_ok(json!({ "events": ev }));
        }
        "RemoveWatcher" => {
            let req: WatcherReq = decode(&msg)?;
            e2b.watchers.remove(&caller, &id, &req.watcher_id)?;
            return unary_ok(json!({}));
        }
        _ => {}
    }
    match method {
        "Stat" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            let e = files::stat(svc, &caller, &id, &p).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        "ListDir" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            let depth = req.depth.unwrap_or(1).clamp(1, MAX_DEPTH);
            let entries = files::list(svc, &caller, &id, &p, depth, MAX_ENTRIES).await?;
            let entries: Vec<Value> = entries.iter().map(entry_info).collect();
            unary_ok(json!({ "entries": entries }))
        }
        "MakeDir" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            let e = files::mkdir_new(svc, &caller, &id, &p).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        "Move" => {
            let req: MoveReq = decode(&msg)?;
            let (from, to) = (sandbox_path(&req.source)?, sandbox_path(&req.destination)?);
            let e = files::rename(svc, &caller, &id, &from, &to).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        _ => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            files::remove(svc, &caller, &id, &p, true).await?;
            unary_ok(json!({}))
        }
    }
}

// ---- /files ----

#[derive(Deserialize)]
pub(super) struct FilesQuery {
    path: Option<String>,
    username: Option<String>,
}

pub(super) async fn download(
    State(e2b): State<St>,
    h: HeaderMap,
    Query(q): Query<FilesQuery>,
) -> Result<Response, E2bError> {
    let (caller, id) = e2b.sandbox(&h)?;
    check_user(&h, q.username.as_deref())?;
    let path = sandbox_path(
        q.path
            .as_deref()
            .ok_or_else(|| ApiError::bad_request("path: required"))?,
    )?;
    let data = files::read(&e2b.st.service, &caller, &id, &path).await?;
    if super::gzip::accepts_gzip(&h) {
        let packed = tokio::task::spawn_blocking(move || super::gzip::gzip(&data))
            .await
            .map_err(|_| ApiError::internal("gzip task"))??;
        return Ok((
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            Body::from(packed),
        )
            .into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::VARY, "accept-encoding"),
        ],
        Body::from(data),
    )
        .into_response())
}

fn written(path: &str) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    json!({"name": name, "type": "file", "path": path})
}

pub(super) async fn upload(
    State(e2b): State<St>,
    Query(q): Query<FilesQuery>,
    req: Request,
) -> Result<Response, E2bError> {
    let h = req.headers().clone();
    let (caller, id) = e2b.sandbox(&h)?;
    check_user(&h, q.username.as_deref())?;
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let max = e2b.st.service.config().max_upload as usize;
    let too_large = || ApiError::too_large("the upload", max as u64);
    let req = if super::gzip::upload_is_gzip(&h)? {
        // The body limit held for the packed bytes; the unpacked ones get the same cap.
        let (mut parts, body) = req.into_parts();
        let packed = axum::body::to_bytes(body, max)
            .await
            .map_err(|_| too_large())?;
        let unpacked = tokio::task::spawn_blocking(move || super::gzip::gunzip(&packed, max))
            .await
            .map_err(|_| ApiError::internal("gunzip task"))??;
        parts.headers.remove(header::CONTENT_ENCODING);
        parts.headers.remove(header::CONTENT_LENGTH);
        Request::from_parts(parts, Body::from(unpacked))
    } else {
        req
    };
    let mut out = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart body: {e}")))?;
        while let Some(field) = mp
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart body: {e}")))?
        {
            if field.name() != Some("file") {
                continue;
            }
            let dest = match (&q.path, field.file_name()) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) => f.to_string(),
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "each file part needs a filename (its path) or ?path=",
                    )
                    .into())
                }
            };
            let path = sandbox_path(&dest)?;
            let data = field.bytes().await.map_err(|e| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    too_large()
                } else {
                    ApiError::bad_request(format!("multipart body: {e}"))
                }
            })?;
            files::write(&e2b.st.service, &caller, &id, &path, data.to_vec()).await?;
            out.push(written(&path));
        }
        if out.is_empty() {
            return Err(ApiError::bad_request("no part named 'file' in the upload").into());
        }
    } else {
        let path =
            sandbox_path(q.path.as_deref().ok_or_else(|| {
                ApiError::bad_request("path: required for an octet-stream upload")
            })?)?;
        let data = axum::body::to_bytes(req.into_body(), max)
            .await
            .map_err(|_| too_large())?;
        files::write(&e2b.st.service, &caller, &id, &path, data.to_vec()).await?;
        out.push(written(&path));
    }
    Ok(axum::Json(out).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_and_refuse() {
        let mut buf = frame(0, &json!({"a": 1})).to_vec();
        buf.extend_from_slice(&frame(FLAG_END, &json!({}))[..3]);
        let got = take_frames(&mut buf).ok().unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, br#"{"a":1}"#);
        assert_eq!(buf.len(), 3, "the partial envelope stays");
        let mut big = vec![0u8, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(take_frames(&mut big), Err(e) if e.code == "resource_exhausted"));
        let mut gz = vec![FLAG_COMPRESSED, 0, 0, 0, 0];
        assert!(take_frames(&mut gz).is_err());
    }

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(0o755, EntryType::Dir), "drwxr-xr-x");
        assert_eq!(permissions(0o640, EntryType::File), "-rw-r-----");
    }
}
