//! Exec instances: `POST /containers/{id}/exec` records what to run, `POST /exec/{id}/start`
//! runs it in the container's sandbox (its output on the hijacked connection, multiplexed
//! or, with `Tty`, from a terminal; its stdin from that connection with `AttachStdin`; or
//! detached), `GET /exec/{id}/json` says how it ended, `resize` sizes its terminal.
//!
//! Threat model: the command runs inside the sandbox, confined like every command there;
//! `Privileged` is refused, and a `User` other than the container's one user is refused
//! naming the field (a sandbox maps a single id; it is never host root).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::to_bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_service::types::{Cmd, ExecRequest};
use cordon_service::{Caller, ExecEvent};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::containers::exit_of;
use super::{stream, DResult, DockerError, St};

/// One exec instance.
pub(crate) struct ExecInstance {
    pub id: String,
    pub container: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    tty: bool,
    /// `AttachStdin`: the client's input on the hijacked connection is the command's stdin.
    stdin: bool,
    /// `DetachKeys`: typed on that input, they end the attachment (the command runs on).
    detach_keys: Vec<u8>,
    state: Mutex<ExecState>,
}

#[derive(Clone, Default)]
struct ExecState {
    running: bool,
    started: bool,
    exit_code: Option<i64>,
    cid: Option<String>,
}

pub(crate) async fn create(
    State(d): State<St>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> DResult<Response> {
    let caller = d.caller(&headers)?;
    let c = d.find(&caller, &id)?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| DockerError::bad(format!("the exec body is not JSON: {e}")))?;
    if body["Privileged"].as_bool() == Some(true) {
        return Err(DockerError::refused(
            "Privileged",
            "privileged exec is never granted",
        ));
    }
    if !c.running() {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is not running", c.id),
        ));
    }
    if let Some(user) = body["User"].as_str().filter(|u| !u.is_empty()) {
        let ids = super::containers::user_ids(&d, &c.caller, &c.image_id, user).await?;
        if ids != c.run_as {
            return Err(DockerError::bad(format!(
                "User: '{user}' is {}:{} in this container's image, but the container runs as \
                 {}:{}; cordon maps one user into each sandbox, so an exec runs as the \
                 container's (create the container with this user instead)",
                ids.0, ids.1, c.run_as.0, c.run_as.1
            )));
        }
    }
    let argv: Vec<String> = match &body["Cmd"] {
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        Value::String(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        _ => Vec::new(),
    };
    if argv.is_empty() {
        return Err(DockerError::bad("Cmd: No exec command specified"));
    }
    let mut env = BTreeMap::new();
    if let Some(list) = body["Env"].as_array() {
        for e in list.iter().filter_map(|v| v.as_str()) {
            if let Some((k, v)) = e.split_once('=') {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    // docker-py writes `detachKeys`; Docker's daemon reads JSON keys case-blind.
    let keys = body["DetachKeys"].as_str().or(body["detachKeys"].as_str());
    let detach_keys = stream::detach_keys(keys).map_err(DockerError::bad)?;
    let exec_id = cordon_service::keys::random_hex(32);
    let inst = Arc::new(ExecInstance {
        id: exec_id.clone(),
        container: c.id.clone(),
        argv,
        env,
        // Docker's default: the container's working directory.
        cwd: body["WorkingDir"]
            .as_str()
            .filter(|w| !w.is_empty())
            .map(String::from)
            .or_else(|| c.cwd.clone()),
        tty: body["Tty"].as_bool() == Some(true),
        stdin: body["AttachStdin"].as_bool() == Some(true),
        detach_keys,
        state: Mutex::new(ExecState::default()),
    });
    if let Ok(mut m) = d.execs.lock() {
        // Bounded: forget finished instances beyond a thousand.
        if m.len() >= 1000 {
            m.retain(|_, e| e.state.lock().map(|s| s.running).unwrap_or(false));
        }
        m.insert(exec_id.clone(), inst);
    }
    Ok((StatusCode::CREATED, Json(json!({"Id": exec_id}))).into_response())
}

/// An exec instance of one of the caller's containers (another caller's is not found).
fn find(d: &St, caller: &Caller, id: &str) -> DResult<Arc<ExecInstance>> {
    d.execs
        .lock()
        .ok()
        .and_then(|m| m.get(id).cloned())
        .filter(|e| d.find(caller, &e.container).is_ok())
        .ok_or_else(|| {
            DockerError::new(
                StatusCode::NOT_FOUND,
                format!("No such exec instance: {id}"),
            )
        })
}

pub(crate) async fn start(
    State(d): State<St>,
    Path(id): Path<String>,
    mut req: Request,
) -> DResult<Response> {
    let caller = d.caller(req.headers())?;
    let inst = find(&d, &caller, &id)?;
    let upgrade = stream::take_upgrade(&mut req);
    let body = to_bytes(req.into_body(), 1 << 20)
        .await
        .map_err(|e| DockerError::bad(e.to_string()))?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let detach = body["Detach"].as_bool() == Some(true);
    let c = d.find(&caller, &inst.container)?;
    {
        let mut s = inst.state.lock().map_err(|_| DockerError::bad("lock"))?;
        if s.started {
            return Err(DockerError::new(
                StatusCode::CONFLICT,
                format!("exec {id} has already been started"),
            ));
        }
        s.started = true;
        s.running = true;
    }
    let svc = d.st.service.clone();
    let req = ExecRequest {
        cmd: Cmd::Argv(inst.argv.clone()),
        cwd: inst.cwd.clone(),
        env: inst.env.clone(),
        stdin: None,
        timeout: Some(cordon_service::types::Amount::Number(
            svc.config().max_exec_timeout.as_secs().max(1) as f64,
        )),
        background: true,
        pty: inst.tty.then_some(super::containers::TERMINAL),
        tag: Some("docker-exec".into()),
    };
    let stdin = inst.stdin && !detach && upgrade.is_some();
    let started = svc.exec_attached(&c.caller, &c.id, req, stdin).await;
    let (cmd, mut rx) = match started {
        Ok(x) => x,
        Err(e) => {
            if let Ok(mut s) = inst.state.lock() {
                s.running = false;
                s.exit_code = Some(126);
            }
            return Err(e.into());
        }
    };
    if let Ok(mut s) = inst.state.lock() {
        s.cid = Some(cmd.id.clone());
    }
    let input = stdin.then(|| {
        let cid = cmd.id.clone();
        super::containers::feed_stdin(
            &d,
            c.caller.clone(),
            c.id.clone(),
            async move { Some(cid) },
            true,
        )
    });
    let (tx, out) = mpsc::channel::<Vec<u8>>(16);
    // The framing follows the start request's `Tty`, as Docker's daemon does (docker-py's
    // `exec_start` sends `Tty: false` unless told): a terminal's output, multiplexed as stdout.
    let tty = body["Tty"].as_bool() == Some(true);
    let inst2 = inst.clone();
    let caller = c.caller.clone();
    let sid = c.id.clone();
    tokio::spawn(async move {
        let mut outcome = None;
        loop {
            match rx.recv().await {
                Ok(ExecEvent::Stdout(b)) if !detach => {
                    let _ = tx.send(stream::frame(1, &b, tty)).await;
                }
                Ok(ExecEvent::Stderr(b)) if !detach => {
                    let _ = tx.send(stream::frame(2, &b, tty)).await;
                }
                Ok(ExecEvent::Exit(o)) => {
                    outcome = Some(*o);
                    break;
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
        if outcome.is_none() {
            outcome = svc
                .wait_command(
                    &caller,
                    &sid,
                    &cmd.id,
                    std::time::Duration::from_secs(u32::MAX as u64),
                )
                .await
                .ok()
                .and_then(|i| i.outcome);
        }
        if let Ok(mut s) = inst2.state.lock() {
            s.running = false;
            s.exit_code = Some(outcome.as_ref().map_or(137, |o| exit_of(o).0));
        }
        drop(tx);
    });
    if detach {
        return Ok(StatusCode::OK.into_response());
    }
    Ok(stream::respond_duplex(
        upgrade,
        out,
        tty,
        input,
        inst.detach_keys.clone(),
    ))
}

/// `POST /exec/{id}/resize?h=…&w=…`: the terminal of an exec started with `Tty`.
pub(crate) async fn resize(
    State(d): State<St>,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> DResult<Response> {
    let caller = d.caller(&headers)?;
    let inst = find(&d, &caller, &id)?;
    let size = super::containers::size_of(&q)?;
    let cid = inst.state.lock().ok().and_then(|s| s.cid.clone());
    if let (Some(cid), true) = (cid, inst.tty) {
        let c = d.find(&caller, &inst.container)?;
        d.st.service.command_resize(&c.caller, &c.id, &cid, size)?;
    }
    Ok(StatusCode::OK.into_response())
}

pub(crate) async fn inspect(
    State(d): State<St>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let inst = find(&d, &caller, &id)?;
    let s = inst.state.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(Json(json!({
        "ID": inst.id,
        "ContainerID": inst.container,
        "Running": s.running,
        "ExitCode": s.exit_code,
        "OpenStdin": inst.stdin,
        "OpenStderr": true,
        "OpenStdout": true,
        "CanRemove": false,
        "Pid": 0,
        "ProcessConfig": {
            "entrypoint": inst.argv.first(),
            "arguments": inst.argv.iter().skip(1).collect::<Vec<_>>(),
            "tty": inst.tty,
            "privileged": false,
        },
    })))
}
