//! Stateful code interpreter: one driver process per (language, context) inside a persistent
//! sandbox, speaking JSON lines over its own stdin/stdout (see kernels/driver.py).
//!
//! Everything a driver says is untrusted: lines are size-capped, unparsable lines are ignored,
//! and a driver that dies or stops answering is replaced — the caller is told its state is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cordon_linux::persistent::{CommandUsage, ExecSpec, ExitInfo};
use cordon_policy::{classify, EndFacts, LimitHit, OutputCap, ProcessEnd, Status, Stopped};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Mutex};

use crate::error::{ErrorKind, ServiceError};
use crate::Live;

pub const PY_DRIVER: &str = include_str!("interpreters/driver.py");
pub const NODE_DRIVER: &str = include_str!("interpreters/node_driver.js");

/// Longest protocol line accepted (a PNG result travels base64 in one line).
const MAX_LINE: usize = 64 << 20;
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// After SIGINT, how long a kernel gets to report the interrupt before it is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

pub const LANGUAGES: &[&str] = &["python", "javascript", "bash"];

pub fn normalize_language(l: &str) -> Result<&'static str, ServiceError> {
    // No trimming: the API's schema names these spellings exactly.
    match l.to_ascii_lowercase().as_str() {
        "python" | "python3" | "py" => Ok("python"),
        "javascript" | "js" | "node" => Ok("javascript"),
        "bash" | "sh" | "shell" => Ok("bash"),
        other => Err(ServiceError::bad_request(format!(
            "language: '{other}' is not one of python, javascript, bash"
        ))),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeRequest {
    /// `python` (default; or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`,
    /// `shell`), any case.
    #[serde(default = "default_language")]
    pub language: String,
    pub code: String,
    /// Named context; each has its own state. Default: `default`.
    pub context: Option<String>,
    /// Per-cell limit, e.g. `"30s"`.
    pub timeout: Option<crate::types::Amount>,
    /// Environment variables for this cell only (its code and what it starts see them; the
    /// context's later cells do not).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Show a string result as the string itself rather than quoted (E2B's display; the
    /// native API keeps Jupyter's). Set by front ends, never read from a request.
    #[serde(skip)]
    pub plain_strings: bool,
}

fn default_language() -> String {
    "python".into()
}

#[derive(Debug, Clone, Serialize)]
pub struct CodeError {
    pub name: String,
    pub value: String,
    pub traceback: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CodeResult {
    pub stdout: String,
    pub stderr: String,
    /// MIME bundles; one has `is_main_result: true` (the last expression's value).
    pub results: Vec<Value>,
    pub error: Option<CodeError>,
    pub execution_count: u64,
    /// True when the kernel had to be restarted and earlier state was lost.
    pub state_lost: bool,
    /// Output past the profile's output limit was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Results past the first 100 were dropped.
    pub results_truncated: bool,
    /// How the cell ended, in the words of an exec's Outcome: `exited` when it ran to its
    /// end (`error` says whether it raised), `timeout`, `oom`, `signaled`, `cpu_time` when
    /// its kernel was killed so, `error` when the kernel failed otherwise.
    pub status: Status,
    /// Every limit that ended the cell or refused it something while it ran, as an exec's
    /// Outcome lists them (`memory`, `pids`, `cpu_time`, `wall_time`, `output`, `disk`,
    /// `files`).
    pub limits_hit: Vec<LimitHit>,
    /// The profile's output limit, applied per stream.
    #[serde(skip)]
    pub(crate) out: OutputCap,
    #[serde(skip)]
    pub(crate) err: OutputCap,
}

/// A result no kernel produced (a cell that could not run): status `error`.
impl Default for CodeResult {
    fn default() -> CodeResult {
        CodeResult {
            status: Status::Error,
            ..CodeResult::new(u64::MAX)
        }
    }
}

impl CodeResult {
    /// The result of a cell that could not run at all: `error` names why.
    pub fn failed(e: &ServiceError) -> CodeResult {
        CodeResult {
            error: Some(CodeError {
                name: e.code.to_string(),
                value: e.message.clone(),
                traceback: vec![],
            }),
            ..CodeResult::default()
        }
    }

    fn new(output_limit: u64) -> CodeResult {
        CodeResult {
            stdout: String::new(),
            stderr: String::new(),
            results: Vec::new(),
            error: None,
            execution_count: 0,
            state_lost: false,
            stdout_truncated: false,
            stderr_truncated: false,
            results_truncated: false,
            status: Status::Exited,
            limits_hit: Vec::new(),
            out: OutputCap::new(output_limit),
            err: OutputCap::new(output_limit),
        }
    }

    /// Takes a piece of the cell's stdout or stderr under the cap; returns what was kept.
    fn push_stream(&mut self, stderr: bool, text: &str) -> String {
        let (cap, buf, truncated) = if stderr {
            (&mut self.err, &mut self.stderr, &mut self.stderr_truncated)
        } else {
            (&mut self.out, &mut self.stdout, &mut self.stdout_truncated)
        };
        let kept = String::from_utf8_lossy(cap.push(text.as_bytes())).into_owned();
        buf.push_str(&kept);
        *truncated = cap.truncated();
        kept
    }

    /// Sets `status` and `limits_hit` from what was seen, through the classifier every door
    /// uses. `kernel_end`: how the kernel ended, if it did during the cell; a cell that ran
    /// to its end counts as a clean exit of the cell itself.
    fn classify(&mut self, mut facts: EndFacts, kernel_end: Option<ProcessEnd>) {
        facts.end = kernel_end.or(Some(ProcessEnd::Exited(0)));
        facts.output_truncated = self.stdout_truncated || self.stderr_truncated;
        let ending = classify(&facts);
        self.status = ending.status;
        self.limits_hit = ending.limits_hit;
    }
}

/// What changed in a kernel's usage counters over one cell: the limits the cell ran into.
fn cell_facts(before: &CommandUsage, after: &CommandUsage) -> EndFacts {
    EndFacts {
        oom_kills: after.oom_kills.saturating_sub(before.oom_kills),
        pids_refused: after.pids_refused.saturating_sub(before.pids_refused),
        disk_full: after.disk_full && !before.disk_full,
        inodes_exhausted: after.inodes_exhausted && !before.inodes_exhausted,
        ..EndFacts::default()
    }
}

const MAX_RESULTS: usize = 100;

/// A piece of a running cell, for streaming.
#[derive(Debug, Clone)]
pub enum CellEvent {
    Stdout(String),
    Stderr(String),
    Result(Value),
    Error(CodeError),
    Done(Box<CodeResult>),
}

#[derive(Debug, Clone, Serialize)]
pub struct ContextInfo {
    pub language: String,
    pub name: String,
    pub execution_count: u64,
    pub alive: bool,
    /// Where its kernel starts (not part of the API's JSON; the E2B door reports it).
    #[serde(skip)]
    pub cwd: String,
}

struct Kernel {
    exec_id: u64,
    stdin: tokio::net::unix::pipe::Sender,
    lines: mpsc::Receiver<Value>,
    exit: tokio::sync::oneshot::Receiver<ExitInfo>,
    next_id: u64,
    execution_count: u64,
    dead: bool,
    /// The kernel's usage counters after its last cell.
    usage: CommandUsage,
}

/// One context's slot; the Mutex serialises cells of one context.
pub struct Slot {
    kernel: Mutex<Option<Kernel>>,
    language: &'static str,
    name: String,
    count: std::sync::atomic::AtomicU64,
    /// Where its kernel starts (default: `/workspace`).
    cwd: Option<String>,
}

#[derive(Default)]
pub struct Contexts {
    slots: std::sync::Mutex<HashMap<(String, String), Arc<Slot>>>,
}

impl Contexts {
    pub fn slot(&self, language: &'static str, name: &str) -> Result<Arc<Slot>, ServiceError> {
        self.slot_in(language, name, None)
    }

    /// A context's slot; a new one's kernel starts in `cwd` (an existing one keeps its own).
    pub fn slot_in(
        &self,
        language: &'static str,
        name: &str,
        cwd: Option<&str>,
    ) -> Result<Arc<Slot>, ServiceError> {
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(ServiceError::bad_request(
                "context: use 1-64 letters, digits, '-' or '_'",
            ));
        }
        let mut s = self
            .slots
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        if s.len() >= 32 && !s.contains_key(&(language.to_string(), name.to_string())) {
            return Err(ServiceError::conflict(
                "at most 32 contexts per sandbox; delete one first",
            ));
        }
        Ok(s.entry((language.to_string(), name.to_string()))
            .or_insert_with(|| {
                Arc::new(Slot {
                    kernel: Mutex::new(None),
                    language,
                    name: name.to_string(),
                    count: Default::default(),
                    cwd: cwd.map(String::from),
                })
            })
            .clone())
    }

    pub fn list(&self) -> Vec<ContextInfo> {
        let slots: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        let mut out: Vec<ContextInfo> = slots
            .iter()
            .map(|s| ContextInfo {
                language: s.language.to_string(),
                name: s.name.clone(),
                execution_count: s.count.load(std::sync::atomic::Ordering::Relaxed),
                alive: s
                    .kernel
                    .try_lock()
                    .map(|k| k.as_ref().is_some_and(|k| !k.dead))
                    .unwrap_or(true),
                cwd: s.cwd.clone().unwrap_or_else(|| "/workspace".into()),
            })
            .collect();
        out.sort_by(|a, b| (&a.language, &a.name).cmp(&(&b.language, &b.name)));
        out
    }

    /// An existing context, without creating it.
    pub fn get(&self, language: &str, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .ok()?
            .get(&(language.to_string(), name.to_string()))
            .cloned()
    }

    pub fn remove(&self, language: &str, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .ok()?
            .remove(&(language.to_string(), name.to_string()))
    }
}

async fn start_kernel(live: &Arc<Live>, slot: &Slot) -> Result<Kernel, ServiceError> {
    let language = slot.language;
    let mut env = vec![
        ("MPLBACKEND".to_string(), "Agg".to_string()),
        ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
    ];
    if language == "javascript" {
        env.push(("CORDON_NODE_DRIVER".into(), NODE_DRIVER.into()));
    }
    let spec = ExecSpec {
        argv: vec![
            "python3".into(),
            "-u".into(),
            "-c".into(),
            PY_DRIVER.into(),
            language.into(),
        ],
        env,
        cwd: slot.cwd.clone(),
        pty: None,
    };
    let (started, exit) = crate::spawn_exec(live, spec).await?;
    let io = |e: std::io::Error| ServiceError::internal(format!("kernel pipes: {e}"));
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(started.stdin).map_err(io)?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(started.stdout).map_err(io)?;
    let mut stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(started.stderr).map_err(io)?;
    let (line_tx, mut lines) = mpsc::channel::<Value>(256);
    tokio::spawn(async move {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            // Bounded line read: a driver that floods without newlines is cut off.
            let n = match (&mut r)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut buf)
                .await
            {
                Ok(n) => n,
                Err(_) => break,
            };
            if n == 0 {
                break;
            }
            if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                if line_tx.send(v).await.is_err() {
                    break;
                }
            }
        }
    });
    // The driver's own stderr (not the cells': those are captured by the driver) is drained.
    tokio::spawn(async move {
        let mut sink = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    });
    let ready = tokio::time::timeout(START_TIMEOUT, async {
        while let Some(v) = lines.recv().await {
            if v["type"] == "ready" {
                return true;
            }
        }
        false
    })
    .await;
    if !matches!(ready, Ok(true)) {
        live.sandbox.signal(started.id, libc::SIGKILL);
        return Err(ServiceError::new(ErrorKind::Conflict,
            "kernel_failed",
            format!(
                "the {language} kernel did not start: its interpreter may be missing from the sandbox, or the sandbox reached its process limit (pids = {})",
                live.profile.limits.pids
            ),
        ));
    }
    Ok(Kernel {
        exec_id: started.id,
        stdin,
        lines,
        exit,
        next_id: 1,
        execution_count: 0,
        dead: false,
        usage: CommandUsage::default(),
    })
}

fn text_of(v: &Value) -> String {
    v.get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Resolves when a cell's events have a receiver no more; never without events.
async fn listener_gone(events: &Option<mpsc::Sender<CellEvent>>) {
    match events {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

/// Runs one cell in a context, starting (or restarting) its kernel as needed. A cell whose
/// `events` receiver goes away (its client left) is interrupted as at its deadline.
pub async fn run_cell(
    live: &Arc<Live>,
    slot: &Arc<Slot>,
    code: &str,
    env: &std::collections::BTreeMap<String, String>,
    timeout: Duration,
    plain_strings: bool,
    events: Option<mpsc::Sender<CellEvent>>,
) -> Result<CodeResult, ServiceError> {
    let mut guard = slot.kernel.lock().await;
    let mut state_lost = false;
    if guard.as_ref().is_some_and(|k| k.dead) {
        *guard = None;
        state_lost = true;
    }
    if guard.is_none() {
        *guard = Some(start_kernel(live, slot).await?);
    }
    let Some(k) = guard.as_mut() else {
        return Err(ServiceError::internal("kernel slot empty"));
    };
    let id = k.next_id;
    k.next_id += 1;
    let mut op = json!({"id": id, "op": "execute", "code": code});
    if !env.is_empty() {
        op["env"] = json!(env);
    }
    if plain_strings {
        op["plain_str"] = json!(true);
    }
    let mut req = serde_json::to_vec(&op).unwrap_or_default();
    req.push(b'\n');
    let mut result = CodeResult {
        state_lost,
        ..CodeResult::new(live.profile.limits.output_limit)
    };
    if k.stdin.write_all(&req).await.is_err() {
        // The kernel died while idle (a crash between cells): start a fresh one and say the
        // state is gone, rather than failing the cell.
        *guard = Some(start_kernel(live, slot).await?);
        result.state_lost = true;
        let Some(fresh) = guard.as_mut() else {
            return Err(ServiceError::internal("kernel slot empty"));
        };
        fresh.next_id = id + 1;
        if fresh.stdin.write_all(&req).await.is_err() {
            fresh.dead = true;
            return Err(died(&mut result, "the kernel stopped reading its input"));
        }
    }
    let Some(k) = guard.as_mut() else {
        return Err(ServiceError::internal("kernel slot empty"));
    };
    let mut deadline = tokio::time::Instant::now() + timeout;
    let mut timed_out = false;
    let mut abandoned = false;
    loop {
        let next = tokio::select! {
            v = k.lines.recv() => v,
            // The caller stopped listening (a client that timed out and left): the cell is
            // interrupted now, as at its deadline, so the context's next cell does not wait
            // behind it.
            _ = listener_gone(&events), if !abandoned => {
                abandoned = true;
                deadline = tokio::time::Instant::now();
                continue;
            }
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                // Python turns SIGINT into KeyboardInterrupt and keeps its state.
                live.sandbox.signal(k.exec_id, libc::SIGINT);
                match tokio::time::timeout(INTERRUPT_GRACE, wait_done(&mut k.lines, id, &mut result, &events)).await {
                    Ok(true) => break,
                    _ => {
                        end_kernel(live, k).await;
                        result.error = Some(CodeError {
                            name: "TimeoutError".into(),
                            value: format!("the cell ran past its {}ms limit and did not stop when interrupted; the kernel was restarted and its state is lost", timeout.as_millis()),
                            traceback: vec![],
                        });
                        result.state_lost = true;
                        break;
                    }
                }
            }
        };
        let Some(v) = next else {
            // The driver's stdout closed: it died (crash, os._exit, OOM kill, a fork bomb).
            k.dead = true;
            let exit = tokio::time::timeout(Duration::from_secs(2), &mut k.exit)
                .await
                .ok()
                .and_then(Result::ok);
            let why = match &exit {
                Some(e) => match (e.code, e.signal) {
                    (_, Some(9)) if e.usage.oom_kills > k.usage.oom_kills => {
                        "the kernel was killed: the sandbox's memory limit was hit".to_string()
                    }
                    (_, Some(9)) => "the kernel was killed (signal 9)".to_string(),
                    (_, Some(s)) => format!("the kernel died from signal {s}"),
                    (Some(c), _) => format!("the kernel exited with status {c}"),
                    _ => "the kernel died".to_string(),
                },
                None => "the kernel died".to_string(),
            };
            let end = exit.as_ref().and_then(|e| match (e.code, e.signal) {
                (_, Some(sig)) => Some(ProcessEnd::Signaled(sig)),
                (Some(code), None) => Some(ProcessEnd::Exited(code)),
                (None, None) => None,
            });
            let mut facts = exit
                .as_ref()
                .map(|e| cell_facts(&k.usage, &e.usage))
                .unwrap_or_default();
            if exit.as_ref().is_some_and(|e| e.usage.cpu_time_exceeded) {
                facts.stopped = Some(Stopped::CpuTime);
            }
            if timed_out {
                facts.stopped = Some(Stopped::Timeout);
            }
            result.classify(facts, end);
            return Ok(died_result(result, &why, &events).await);
        };
        if handle_line(&v, id, &mut result, &events).await {
            break;
        }
    }
    // What the cell ran into: the change in the kernel's counters over the cell.
    let usage = if k.dead {
        None
    } else {
        let sb = live.sandbox.clone();
        let exec_id = k.exec_id;
        tokio::task::spawn_blocking(move || sb.usage(exec_id))
            .await
            .ok()
            .flatten()
    };
    let mut facts = usage
        .as_ref()
        .map(|u| cell_facts(&k.usage, u))
        .unwrap_or_default();
    if let Some(u) = usage {
        k.usage = u;
    }
    if timed_out {
        facts.stopped = Some(Stopped::Timeout);
    }
    if facts.pids_refused > 0 && !k.dead {
        // A fork bomb in a cell leaves copies of the kernel (or their children) holding every
        // process slot of the sandbox, and a forked copy of the driver would read the next
        // cell: the kernel and everything it started go, and the next cell starts afresh.
        end_kernel(live, k).await;
        result.state_lost = true;
    }
    result.classify(facts, None);
    k.execution_count = result.execution_count.max(k.execution_count);
    slot.count
        .store(k.execution_count, std::sync::atomic::Ordering::Relaxed);
    if let Some(tx) = &events {
        let _ = tx.send(CellEvent::Done(Box::new(result.clone()))).await;
    }
    Ok(result)
}

async fn wait_done(
    lines: &mut mpsc::Receiver<Value>,
    id: u64,
    result: &mut CodeResult,
    events: &Option<mpsc::Sender<CellEvent>>,
) -> bool {
    while let Some(v) = lines.recv().await {
        if handle_line(&v, id, result, events).await {
            return true;
        }
    }
    false
}

/// Folds one protocol line into the result; true when the cell is done.
async fn handle_line(
    v: &Value,
    id: u64,
    r: &mut CodeResult,
    events: &Option<mpsc::Sender<CellEvent>>,
) -> bool {
    if v["id"].as_u64() != Some(id) {
        return false;
    }
    match v["type"].as_str() {
        Some("stream") => {
            let t = text_of(v);
            let stderr = v["name"] == "stderr";
            let kept = r.push_stream(stderr, &t);
            if let (Some(tx), false) = (events, kept.is_empty()) {
                let ev = if stderr {
                    CellEvent::Stderr(kept)
                } else {
                    CellEvent::Stdout(kept)
                };
                let _ = tx.send(ev).await;
            }
        }
        Some("result") if r.results.len() >= MAX_RESULTS => r.results_truncated = true,
        Some("result") => {
            let mut bundle = v.get("data").cloned().unwrap_or(json!({}));
            if let Some(obj) = bundle.as_object_mut() {
                obj.insert(
                    "is_main_result".into(),
                    json!(v["is_main_result"].as_bool().unwrap_or(false)),
                );
            }
            if let Some(tx) = events {
                let _ = tx.send(CellEvent::Result(bundle.clone())).await;
            }
            r.results.push(bundle);
        }
        Some("error") => {
            let e = CodeError {
                name: v["name"].as_str().unwrap_or("Error").to_string(),
                value: v["value"].as_str().unwrap_or_default().to_string(),
                traceback: v["traceback"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            if let Some(tx) = events {
                let _ = tx.send(CellEvent::Error(e.clone())).await;
            }
            r.error = Some(e);
        }
        Some("done") => {
            r.execution_count = v["execution_count"].as_u64().unwrap_or(0);
            return true;
        }
        _ => {}
    }
    false
}

fn died(r: &mut CodeResult, why: &str) -> ServiceError {
    r.state_lost = true;
    ServiceError::new(
        ErrorKind::Internal,
        "kernel_died",
        format!("{why}; the kernel will restart on the next cell and its state is lost"),
    )
}

async fn died_result(
    mut r: CodeResult,
    why: &str,
    events: &Option<mpsc::Sender<CellEvent>>,
) -> CodeResult {
    r.state_lost = true;
    r.error = Some(CodeError {
        name: "KernelDied".into(),
        value: format!("{why}; its state is lost and it restarts on the next cell"),
        traceback: vec![],
    });
    if let Some(tx) = events {
        let _ = tx.send(CellEvent::Done(Box::new(r.clone()))).await;
    }
    r
}

/// Kills a running kernel and everything it started, and waits (a few seconds at most) until
/// they are gone: a fresh kernel started right after must find their process slots free.
async fn end_kernel(live: &Arc<Live>, k: &mut Kernel) {
    live.sandbox.signal(k.exec_id, libc::SIGKILL);
    k.dead = true;
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut k.exit).await;
}

/// Kills a context's kernel (restart = kill now, start fresh on the next cell).
pub async fn stop(live: &Arc<Live>, slot: &Arc<Slot>) {
    let mut guard = slot.kernel.lock().await;
    if let Some(mut k) = guard.take() {
        live.sandbox.signal(k.exec_id, libc::SIGKILL);
        // Keep the driver's stdin open until it is dead: if it saw EOF first it could exit
        // and be reaped before the signal, and the group (its children) would survive.
        let _ = tokio::time::timeout(Duration::from_secs(3), &mut k.exit).await;
    }
    slot.count.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// Starts a context's kernel now (so the first cell does not pay for it).
pub async fn ensure_started(live: &Arc<Live>, slot: &Arc<Slot>) -> Result<(), ServiceError> {
    let mut guard = slot.kernel.lock().await;
    if guard.as_ref().is_none_or(|k| k.dead) {
        *guard = Some(start_kernel(live, slot).await?);
    }
    Ok(())
}
