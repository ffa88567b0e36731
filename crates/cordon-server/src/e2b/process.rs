//! envd's `process.Process` Connect service: start, connect, list, send input (also as a
//! client stream), signal, update a terminal, close stdin, for commands run through the
//! service in the sandbox the request names.
//!
//! Threat model: the request's messages are client input, decoded into typed requests; a
//! command runs only in a sandbox whose access token the request carries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine;
use cordon_policy::{Outcome, Status};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, watch};

use super::connect::{
    answer, decode, frame, keepalive_of, kind, one_message, pre_read, stream_response, take_frames,
    timeout_of, unary_ok, Kind, RpcError, B64, FLAG_END,
};
use super::{check_user, sandbox_path, St, HOME};
use crate::error::{ApiError, ErrorKind};
use cordon_service::types::{Amount, Cmd, ExecRequest, PtySize};
use cordon_service::{BgCommand, Caller, ExecEvent};
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
            .find(|c| u64::try_from(c.pid).is_ok_and(|p| p == pid))
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
                        cmd.pid
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

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "killed".into(),
        libc::SIGTERM => "terminated".into(),
        libc::SIGINT => "interrupt".into(),
        libc::SIGHUP => "hangup".into(),
        n => format!("signal {n}"),
    }
}

/// Whether the sandbox has ended (killed, or its time ran out), asked when a command ends.
fn sandbox_gone(e2b: &St, caller: Caller, id: String) -> impl Fn() -> bool + Send + 'static {
    let e2b = e2b.clone();
    move || e2b.st.service.get_live(&caller, &id).is_err()
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
///
/// A command that ran out of time, or whose sandbox ended under it (`gone` says), ends the
/// stream with envd's error instead of an `end` event (`deadline_exceeded`; `unavailable`,
/// "killed or reached its end of life"): the SDKs raise their `TimeoutException` for those.
fn follow(
    cmd: Arc<BgCommand>,
    mut events: broadcast::Receiver<ExecEvent>,
    mut done: watch::Receiver<Option<Outcome>>,
    keepalive: Duration,
    from_start: bool,
    gone: impl Fn() -> bool + Send + 'static,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move { tx.send(frame(0, &v)).await.is_ok() }
        };
        if !send(json!({"event": {"start": {"pid": cmd.pid}}})).await {
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
            let failed = if gone() {
                Some(RpcError::new(
                    "unavailable",
                    "the sandbox was killed or reached its end of life while the command ran",
                ))
            } else if o.status == Status::Timeout {
                Some(RpcError::new(
                    "deadline_exceeded",
                    "the command ran out of time and was killed",
                ))
            } else {
                None
            };
            if let Some(e) = failed {
                let _ = tx.send(frame(FLAG_END, &json!({"error": e.body()}))).await;
                return;
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
            let gone = sandbox_gone(e2b, caller, id);
            Ok(follow(cmd, first, done, keepalive_of(h), true, gone))
        }
        "Connect" => {
            let req: SelReq = decode(&msg)?;
            let cmd = find(e2b, &caller, &id, &req.process)?;
            let (events, done) = cmd.subscribe();
            let gone = sandbox_gone(e2b, caller, id);
            Ok(follow(cmd, events, done, keepalive_of(h), false, gone))
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
                        "pid": c.pid,
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
                    format!("process with pid {} has already ended", cmd.pid),
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
