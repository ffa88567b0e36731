//! The Model Context Protocol front end: the same service as HTTP, as MCP tools. Served over
//! stdio (`cordon mcp`) and streamable HTTP (`/mcp` on `cordon serve`, behind the API key).
//!
//! Each MCP session gets one sandbox, created on its first tool call and deleted when the
//! session ends (stdio: when the process exits; HTTP: when the session closes). Clients that
//! speak the sessionless protocol share one sandbox per API key, reaped by its TTL.
//!
//! Three things keep a session's calls from being lost or mixed up:
//! - a session's sandbox is created under that session's own lock, never one shared by all
//!   sessions, so a slow create stalls nobody else, and concurrent first calls of one session
//!   find one sandbox;
//! - the session's tool calls run one at a time in the order they were received ([`order`]);
//! - every message that cannot be used is answered with the JSON-RPC error it deserves
//!   ([`framing`]), on stdio and over HTTP.

pub(crate) mod framing;
mod order;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_policy::{Outcome, Profile};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData as McpError, RoleServer, ServerHandler,
};
use serde::Deserialize;

pub use framing::MAX_MESSAGE;

use cordon_service::interpreter::CodeRequest;
use cordon_service::types::{Amount, Cmd, CreateSandbox, ExecRequest, SandboxInfo};
use cordon_service::{Caller, Service};

/// How long an HTTP session's sandbox lives without a call (each call extends it).
const HTTP_IDLE_TTL: Duration = Duration::from_secs(2 * 3600);

/// Shared by every MCP handler of one process.
pub struct McpState {
    service: Arc<Service>,
    /// Caller for transports without HTTP authentication (stdio).
    local_caller: Option<Caller>,
    /// The profile of the sandboxes this front end creates; `None`: the built-in default.
    profile: Option<Profile>,
    /// A session's sandbox lives this long after its last call.
    idle_ttl: Duration,
    /// Session key → session. A std lock, held only to look up or insert: its guard cannot
    /// live across an await (it is not Send, and rmcp's handlers must be), so no create or
    /// call of one session can ever wait on another's.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// One MCP session (or, sessionless, one API key).
struct Session {
    caller: Caller,
    /// A label for the registry's metadata (not the session id itself: that is a credential).
    label: String,
    /// Serialises the session's calls where no [`order::Turn`] orders them (sessionless
    /// requests each come with a transport of their own).
    busy: tokio::sync::Mutex<()>,
    /// The session's sandbox; locked while it is created, so there is only ever one.
    sandbox: tokio::sync::Mutex<Option<String>>,
}

impl McpState {
    /// `profile` comes from the operator (the `cordon mcp` command line), never from a client.
    pub fn new(
        service: Arc<Service>,
        local_caller: Option<Caller>,
        profile: Option<Profile>,
    ) -> Arc<McpState> {
        let idle_ttl = if local_caller.is_some() {
            // stdio: the session is the process; its sandbox lives as long as the service lets.
            service.config().max_ttl
        } else {
            HTTP_IDLE_TTL.min(service.config().max_ttl)
        };
        Arc::new(McpState {
            service,
            local_caller,
            profile,
            idle_ttl,
            sessions: Default::default(),
        })
    }

    fn session(&self, key: &str, caller: &Caller, label: &str) -> Arc<Session> {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Session {
                    caller: caller.clone(),
                    label: label.to_string(),
                    busy: Default::default(),
                    sandbox: Default::default(),
                })
            })
            .clone()
    }

    /// Forgets a session and deletes its sandbox.
    async fn end_session(&self, key: &str) {
        let session = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(s) = session {
            if let Some(id) = s.sandbox.lock().await.take() {
                let _ = self.service.delete(&s.caller, &id).await;
            }
        }
    }

    async fn end_all(&self) {
        let keys: Vec<String> = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for k in keys {
            self.end_session(&k).await;
        }
    }

    fn network_note(&self) -> String {
        match &self.profile {
            Some(p) if p.network.is_enabled() => format!(
                "Network: HTTP(S) only, through a proxy, to {}",
                p.network.allow.join(", ")
            ),
            _ => "No network access".to_string(),
        }
    }

    fn has_workspace(&self) -> bool {
        self.profile.as_ref().is_some_and(|p| p.workspace.is_some())
    }
}

/// Deletes a session's sandbox when the last handler of that session goes away.
struct SessionGuard {
    state: Arc<McpState>,
    key: Mutex<Option<String>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let Some(key) = self.key.lock().ok().and_then(|mut k| k.take()) else {
            return;
        };
        let state = self.state.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { state.end_session(&key).await });
        }
    }
}

#[derive(Clone)]
pub struct CordonMcp {
    state: Arc<McpState>,
    guard: Arc<SessionGuard>,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunCodeParams {
    /// The code to run. State (variables, imports, functions, the working directory) persists between calls in the same context, like notebook cells. The value of the last expression is returned; charts drawn with matplotlib come back as images.
    pub code: String,
    /// "python" (default), "javascript" (Node.js, top-level await allowed) or "bash".
    pub language: Option<String>,
    /// Name of an independent context with its own state. Default: "default".
    pub context: Option<String>,
    /// Seconds before the cell is interrupted. Default: the sandbox's timeout (30 unless the server was started with another).
    pub timeout_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunCommandParams {
    /// A shell command line, run with /bin/sh -c in the sandbox (Linux userland: python3, node, bash and coreutils are available).
    pub command: String,
    /// Working directory. Default: /workspace.
    pub cwd: Option<String>,
    /// Seconds before the command is killed. Default: the sandbox's timeout (30 unless the server was started with another).
    pub timeout_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunWasmParams {
    /// Path of the WebAssembly module in the sandbox (e.g. /workspace/tool.wasm; relative paths are under /workspace). Give this or module_base64.
    pub path: Option<String>,
    /// The module itself, base64 (a WASI preview 1 module or preview 2 component).
    pub module_base64: Option<String>,
    /// Its arguments (after its name).
    #[serde(default)]
    pub args: Vec<String>,
    /// What it reads on stdin. Default: nothing.
    pub stdin: Option<String>,
    /// Seconds before it is stopped. Default: the sandbox's timeout.
    pub timeout_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PathParams {
    /// A path inside the sandbox; relative paths are under /workspace.
    pub path: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListParams {
    /// Directory to list; default /workspace.
    pub path: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteParams {
    /// Where to write; parent directories are created. Relative paths are under /workspace.
    pub path: String,
    /// The text to write (replaces the file).
    pub content: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NoParams {}

fn text(s: impl Into<String>) -> ContentBlock {
    ContentBlock::text(s.into())
}

fn tool_error(msg: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![text(msg)])
}

/// The session's sandbox for one call.
struct Bound {
    caller: Caller,
    id: String,
    /// Said to the agent when its earlier sandbox is gone and this one is fresh.
    note: Option<String>,
}

impl Bound {
    /// Puts the note (if any) first in a result.
    fn annotate(&self, mut r: CallToolResult) -> CallToolResult {
        if let Some(n) = &self.note {
            r.content.insert(0, text(n.clone()));
        }
        r
    }
}

fn seconds(d: Duration) -> Amount {
    Amount::Number(d.as_secs_f64())
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl CordonMcp {
    pub fn new(state: Arc<McpState>) -> CordonMcp {
        CordonMcp {
            guard: Arc::new(SessionGuard {
                state: state.clone(),
                key: Mutex::new(None),
            }),
            state,
            tool_router: Self::tool_router(),
        }
    }

    /// This call's session: who calls, and which session it is.
    fn session(&self, ctx: &RequestContext<RoleServer>) -> Result<Arc<Session>, McpError> {
        let (caller, key, label, owned) = if let Some(c) = &self.state.local_caller {
            (c.clone(), "stdio".to_string(), "stdio".to_string(), true)
        } else {
            let parts = ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .ok_or_else(|| McpError::internal_error("no HTTP request context", None))?;
            let caller = parts
                .extensions
                .get::<Caller>()
                .cloned()
                .ok_or_else(|| McpError::invalid_request("unauthenticated", None))?;
            match parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                Some(sid) => {
                    let key = format!("{}:{sid}", caller.key_id);
                    let label = cordon_service::keys::hash(sid).chars().take(16).collect();
                    (caller, key, label, true)
                }
                None => {
                    let key = format!("{}:shared", caller.key_id);
                    (caller, key, "shared".to_string(), false)
                }
            }
        };
        if owned {
            if let Ok(mut g) = self.guard.key.lock() {
                g.get_or_insert_with(|| key.clone());
            }
        }
        Ok(self.state.session(&key, &caller, &label))
    }

    /// The session's sandbox, created on first use (or when the previous one is gone).
    async fn sandbox(&self, ctx: &RequestContext<RoleServer>) -> Result<Bound, CallToolResult> {
        let session = self.session(ctx).map_err(|e| tool_error(e.message))?;
        let caller = session.caller.clone();
        let svc = &self.state.service;
        let mut slot = session.sandbox.lock().await;
        let mut note = None;
        if let Some(id) = slot.take() {
            match svc.get(&caller, &id) {
                Ok(info) if info.state == "running" => {
                    self.keep_alive(&caller, &info);
                    *slot = Some(id.clone());
                    return Ok(Bound {
                        caller,
                        id,
                        note: None,
                    });
                }
                Ok(info) => {
                    note = Some(format!(
                        "note: this session's sandbox ended ({}{}); this call runs in a fresh one, \
                         and interpreter state{} from before is gone",
                        info.state,
                        info.ended_reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default(),
                        if self.state.has_workspace() {
                            " and files outside /workspace"
                        } else {
                            " and files"
                        },
                    ));
                    // A dead sandbox not reaped yet still counts against the key's quota.
                    let _ = svc.delete(&caller, &id).await;
                }
                Err(_) => {
                    note = Some(
                        "note: this session's sandbox is gone; this call runs in a fresh one"
                            .to_string(),
                    );
                }
            }
        }
        let ttl = Some(seconds(self.state.idle_ttl));
        let metadata = BTreeMap::from([
            ("origin".to_string(), "mcp".to_string()),
            ("mcp_session".to_string(), session.label.clone()),
        ]);
        let created = match &self.state.profile {
            Some(p) => {
                svc.create_with_profile(&caller, p.clone(), ttl, metadata)
                    .await
            }
            None => {
                svc.create(
                    &caller,
                    CreateSandbox {
                        ttl,
                        metadata,
                        ..Default::default()
                    },
                )
                .await
            }
        };
        let info = created.map_err(|e| {
            tool_error(format!(
                "cordon could not create the sandbox: {}",
                e.message
            ))
        })?;
        *slot = Some(info.id.clone());
        Ok(Bound {
            caller,
            id: info.id,
            note,
        })
    }

    /// Keeps a used sandbox from expiring under an active session (extends at half its TTL,
    /// so the registry is written at most a few times per TTL).
    fn keep_alive(&self, caller: &Caller, info: &SandboxInfo) {
        let ttl = self.state.idle_ttl.as_secs();
        if info.expires_at.saturating_sub(now_s()) < ttl / 2 {
            let _ = self
                .state
                .service
                .extend(caller, &info.id, &seconds(self.state.idle_ttl));
        }
    }
}

/// What a person (or model) needs of an Outcome, as text: how it ended, which limits were
/// hit (and how to raise them), what it cost, the network decisions, then the output.
fn outcome_text(o: &Outcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let status = serde_json::to_value(o.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let _ = write!(s, "status: {status}");
    if let Some(c) = o.exit_code {
        let _ = write!(s, ", exit code {c}");
    }
    if let Some(sig) = o.signal {
        let _ = write!(s, ", killed by signal {sig}");
    }
    if let Some(e) = &o.error {
        let _ = write!(s, ", error: {e}");
    }
    s.push('\n');
    for l in &o.limits_hit {
        let line = cordon_policy::notices::limit_notice(*l, o, None);
        let _ = writeln!(s, "limit hit: {} — {line}", l.name());
    }
    let u = &o.usage;
    let _ = writeln!(
        s,
        "usage: wall {} ms, cpu {} ms user + {} ms system, peak memory {:.1} MiB, peak pids {}",
        u.wall_ms,
        u.cpu_user_ms,
        u.cpu_system_ms,
        u.peak_memory_bytes as f64 / (1 << 20) as f64,
        u.peak_pids
    );
    for ev in &o.network {
        let _ = writeln!(
            s,
            "network: {} {}:{} ({})",
            ev.verdict, ev.host, ev.port, ev.reason
        );
    }
    let cut = |t: bool| if t { "\n[truncated]" } else { "" };
    let _ = write!(
        s,
        "stdout:\n{}{}\nstderr:\n{}{}",
        o.stdout,
        cut(o.stdout_truncated),
        o.stderr,
        cut(o.stderr_truncated)
    );
    s
}

/// The Outcome as structured content: every fact, without the output streams (they are in
/// the text content; repeating them would double what the model reads).
fn outcome_facts(o: &Outcome) -> Option<serde_json::Value> {
    let mut v = serde_json::to_value(o).ok()?;
    if let Some(m) = v.as_object_mut() {
        for k in ["stdout", "stderr", "stdout_b64", "stderr_b64"] {
            m.remove(k);
        }
    }
    Some(v)
}

/// A code cell's facts as structured content: everything the service reports about the
/// cell except what the content blocks already carry (output, results, images).
fn code_facts(r: &cordon_service::interpreter::CodeResult) -> Option<serde_json::Value> {
    let mut v = serde_json::to_value(r).ok()?;
    if let Some(m) = v.as_object_mut() {
        for k in ["stdout", "stderr", "results"] {
            m.remove(k);
        }
    }
    Some(v)
}

#[tool_router]
impl CordonMcp {
    #[tool(
        description = "Run code in a persistent, isolated interpreter (Python by default; also javascript or bash). Variables, imports and files persist between calls, like notebook cells. Returns stdout, stderr, the value of the last expression, errors with tracebacks, and any matplotlib charts as images."
    )]
    async fn run_code(
        &self,
        Parameters(p): Parameters<RunCodeParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let sb = match self.sandbox(&ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let req = CodeRequest {
            language: p.language.unwrap_or_else(|| "python".into()),
            code: p.code,
            context: p.context,
            timeout: p.timeout_seconds.map(Amount::Number),
            env: Default::default(),
        };
        let r = match self
            .state
            .service
            .run_code(&sb.caller, &sb.id, req, None)
            .await
        {
            Ok(r) => r,
            Err(e) => return Ok(sb.annotate(tool_error(e.message))),
        };
        let mut content = Vec::new();
        if !r.stdout.is_empty() {
            content.push(text(format!("stdout:\n{}", r.stdout)));
        }
        if !r.stderr.is_empty() {
            content.push(text(format!("stderr:\n{}", r.stderr)));
        }
        for res in &r.results {
            if let Some(png) = res.get("image/png").and_then(|v| v.as_str()) {
                content.push(ContentBlock::image(png.to_string(), "image/png"));
            } else if let Some(t) = res.get("text/plain").and_then(|v| v.as_str()) {
                let label = if res["is_main_result"] == true {
                    "result"
                } else {
                    "display"
                };
                content.push(text(format!("{label}: {t}")));
            }
        }
        if let Some(e) = &r.error {
            content.push(text(format!(
                "error: {}: {}\n{}",
                e.name,
                e.value,
                e.traceback.join("\n")
            )));
        }
        if r.state_lost {
            content.push(text(
                "note: the interpreter restarted; earlier variables are gone",
            ));
        }
        if r.stdout_truncated || r.stderr_truncated {
            content.push(text(
                "note: output past the sandbox's output limit was dropped",
            ));
        }
        if content.is_empty() {
            content.push(text("(no output)"));
        }
        let mut result = if r.error.is_some() {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = code_facts(&r);
        Ok(sb.annotate(result))
    }

    #[tool(
        description = "Run a shell command in the sandbox (a Linux environment with python3, node, bash and coreutils). Files persist between calls. Returns how it ended (status, exit code, limits hit), what it used (time, CPU, memory, processes), stdout and stderr."
    )]
    async fn run_command(
        &self,
        Parameters(p): Parameters<RunCommandParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let sb = match self.sandbox(&ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let req = ExecRequest {
            cmd: Cmd::Shell(p.command),
            cwd: p.cwd,
            env: Default::default(),
            stdin: None,
            timeout: p.timeout_seconds.map(Amount::Number),
            background: false,
            pty: None,
            tag: None,
        };
        let o = match self.state.service.exec(&sb.caller, &sb.id, req, None).await {
            Ok(o) => o,
            Err(e) => return Ok(sb.annotate(tool_error(e.message))),
        };
        let ok = o.status == cordon_policy::Status::Exited && o.exit_code == Some(0);
        let mut r = if ok {
            CallToolResult::success(vec![text(outcome_text(&o))])
        } else {
            CallToolResult::error(vec![text(outcome_text(&o))])
        };
        r.structured_content = outcome_facts(&o);
        Ok(sb.annotate(r))
    }

    #[tool(
        description = "Run a WebAssembly module (WASI preview 1 module or preview 2 component) in a fresh WebAssembly runtime of its own: no network, no files but /workspace — the session's /workspace only when the server was started with one (cordon mcp --workspace), else an empty one. Give the module's path in the sandbox or the module as base64. Returns how it ended (status, exit code, limits hit), stdout and stderr."
    )]
    async fn run_wasm(
        &self,
        Parameters(p): Parameters<RunWasmParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        use base64::Engine;
        let svc = &self.state.service;
        let (b64, name, bound) = match (p.path, p.module_base64) {
            (Some(path), None) => {
                let sb = match self.sandbox(&ctx).await {
                    Ok(sb) => sb,
                    Err(r) => return Ok(r),
                };
                let data = match cordon_service::files::read(svc, &sb.caller, &sb.id, &path).await {
                    Ok(d) => d,
                    Err(e) => return Ok(sb.annotate(tool_error(e.message))),
                };
                let b64 = base64::engine::general_purpose::STANDARD.encode(data);
                (b64, path, Some(sb))
            }
            (None, Some(b64)) => (b64, "module.wasm".to_string(), None),
            _ => return Ok(tool_error("give either path or module_base64")),
        };
        let caller = match &bound {
            Some(sb) => sb.caller.clone(),
            None => self.session(&ctx)?.caller.clone(),
        };
        let annotate = |r: CallToolResult| match &bound {
            Some(sb) => sb.annotate(r),
            None => r,
        };
        let mut profile = match self.state.profile.clone() {
            Some(pr) => pr,
            None => match Profile::builtin("default") {
                Ok(pr) => pr,
                Err(e) => return Ok(annotate(tool_error(e.to_string()))),
            },
        };
        // A module has no sockets: the session's egress policy has nothing to apply to.
        profile.network = Default::default();
        if let Some(t) = p.timeout_seconds {
            if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
                return Ok(annotate(tool_error(
                    "timeout_seconds: give a number of seconds between 0 and 86400",
                )));
            }
            profile.limits.timeout = Duration::from_secs_f64(t);
        }
        let size = match cordon_service::oneshot::check_wasm(&b64, false) {
            Ok(n) => n,
            Err(e) => return Ok(annotate(tool_error(e.message))),
        };
        svc.audit(
            "run_wasm",
            &caller.key_id,
            bound.as_ref().map(|sb| sb.id.as_str()),
            serde_json::json!({"module": name, "bytes": size, "args": p.args.len()}),
        );
        let req = cordon_service::oneshot::OneShot {
            profile,
            argv: std::iter::once(name).chain(p.args).collect(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: p.stdin,
            wasm: Some(b64),
        };
        let o = match cordon_service::oneshot::execute(svc, req).await {
            Ok(o) => o,
            Err(e) => return Ok(annotate(tool_error(e.message))),
        };
        let ok = o.status == cordon_policy::Status::Exited && o.exit_code == Some(0);
        let mut r = if ok {
            CallToolResult::success(vec![text(outcome_text(&o))])
        } else {
            CallToolResult::error(vec![text(outcome_text(&o))])
        };
        r.structured_content = outcome_facts(&o);
        Ok(annotate(r))
    }

    #[tool(
        description = "Read a file from the sandbox. Text comes back as text; PNG/JPEG/GIF images as images; other binary files as base64."
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<PathParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        use base64::Engine;
        let sb = match self.sandbox(&ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let data =
            match cordon_service::files::read(&self.state.service, &sb.caller, &sb.id, &p.path)
                .await
            {
                Ok(d) => d,
                Err(e) => return Ok(sb.annotate(tool_error(e.message))),
            };
        let b64 = || base64::engine::general_purpose::STANDARD.encode(&data);
        let mime = if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some("image/png")
        } else if data.starts_with(&[0xff, 0xd8, 0xff]) {
            Some("image/jpeg")
        } else if data.starts_with(b"GIF8") {
            Some("image/gif")
        } else {
            None
        };
        Ok(sb.annotate(CallToolResult::success(vec![
            match (mime, std::str::from_utf8(&data)) {
                (Some(m), _) => ContentBlock::image(b64(), m),
                (None, Ok(t)) => text(t.to_string()),
                (None, Err(_)) => text(format!(
                    "(binary file, {} bytes, base64)\n{}",
                    data.len(),
                    b64()
                )),
            },
        ])))
    }

    #[tool(
        description = "Write a text file in the sandbox (creating parent directories), replacing it if it exists."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let sb = match self.sandbox(&ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let r = match cordon_service::files::write(
            &self.state.service,
            &sb.caller,
            &sb.id,
            &p.path,
            p.content.into_bytes(),
        )
        .await
        {
            Ok(n) => CallToolResult::success(vec![text(format!("wrote {n} bytes to {}", p.path))]),
            Err(e) => tool_error(e.message),
        };
        Ok(sb.annotate(r))
    }

    #[tool(
        description = "List a directory in the sandbox: name, type, size and modification time of each entry."
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let sb = match self.sandbox(&ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let path = p.path.unwrap_or_else(|| "/workspace".into());
        let r = match cordon_service::files::list(
            &self.state.service,
            &sb.caller,
            &sb.id,
            &path,
            1,
            usize::MAX,
        )
        .await
        {
            Ok(entries) => {
                let lines: Vec<String> = entries
                    .iter()
                    .map(|e| {
                        let v = serde_json::to_value(e).unwrap_or_default();
                        format!(
                            "{}\t{}\t{} bytes",
                            v["type"].as_str().unwrap_or("?"),
                            v["path"].as_str().unwrap_or("?"),
                            v["size"]
                        )
                    })
                    .collect();
                CallToolResult::success(vec![text(if lines.is_empty() {
                    format!("{path} is empty")
                } else {
                    lines.join("\n")
                })])
            }
            Err(e) => tool_error(e.message),
        };
        Ok(sb.annotate(r))
    }

    #[tool(
        description = "Throw the sandbox away and start over: all processes and interpreter state, and the files of the sandbox, are deleted. The next call gets a fresh sandbox."
    )]
    async fn reset_sandbox(
        &self,
        Parameters(_p): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let session = match self.session(&ctx) {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e.message)),
        };
        let id = session.sandbox.lock().await.take();
        if let Some(id) = id {
            let _ = self.state.service.delete(&session.caller, &id).await;
        }
        Ok(CallToolResult::success(vec![text(
            if self.state.has_workspace() {
                "the sandbox was reset; the next call starts fresh (files in /workspace stay: \
                 it is a directory of the host, shared with the user)"
            } else {
                "the sandbox was reset; the next call starts fresh"
            },
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CordonMcp {
    fn get_info(&self) -> InitializeResult {
        let workspace = if self.state.has_workspace() {
            " /workspace is a directory of the user's machine: what you write there stays after the session."
        } else {
            ""
        };
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "cordon gives you an isolated Linux sandbox: run code (run_code keeps state like a notebook), run shell commands, and read or write files under /workspace. {}.{workspace} Calls run one at a time, in the order you send them. Nothing you do can affect the host.",
                self.state.network_note()
            ))
    }

    /// Every tool touches the session's sandbox: wait for the calls received before this one,
    /// and hold the session while this one runs.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let turn = context.extensions.get::<order::Turn>().cloned();
        let session = self.session(&context)?;
        let ready = async {
            let running = match &turn {
                Some(t) => Some(t.wait().await),
                None => None,
            };
            (running, session.busy.lock().await)
        };
        // A call the client gave up on while it waited never runs; its place in the order is
        // kept until the calls before it are done (see order::Turn).
        let _ready = tokio::select! {
            r = ready => r,
            _ = context.ct.cancelled() => {
                return Err(McpError::invalid_request("cancelled by the client before it ran", None));
            }
        };
        let tcc = ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }
}

/// Sessions of `/mcp`: rmcp's own, with each session's transport ordering its tool calls.
#[derive(Default)]
pub struct OrderedSessions(
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
);

mod http_sessions {
    use std::future::Future;

    use futures::Stream;
    use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::session::{
        EventStore, ServerSseMessage, SessionId, SessionManager,
    };

    use super::order::Ordered;
    use super::OrderedSessions;

    type Inner = LocalSessionManager;

    impl SessionManager for OrderedSessions {
        type Error = <Inner as SessionManager>::Error;
        type Transport = Ordered<<Inner as SessionManager>::Transport>;

        async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
            let (id, t) = self.0.create_session().await?;
            Ok((id, Ordered::new(t, true)))
        }

        fn initialize_session(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
            self.0.initialize_session(id, message)
        }

        fn has_session(
            &self,
            id: &SessionId,
        ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
            self.0.has_session(id)
        }

        fn close_session(
            &self,
            id: &SessionId,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send {
            self.0.close_session(id)
        }

        fn create_stream(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.create_stream(id, message)
        }

        fn accept_message(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send {
            self.0.accept_message(id, message)
        }

        fn create_standalone_stream(
            &self,
            id: &SessionId,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.create_standalone_stream(id)
        }

        fn resume(
            &self,
            id: &SessionId,
            last_event_id: String,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.resume(id, last_event_id)
        }

        fn event_store(&self) -> Option<std::sync::Arc<dyn EventStore>> {
            self.0.event_store()
        }
    }
}

/// How much of an over-long HTTP body is read (and dropped) before the answer.
const DRAIN_AT_MOST: usize = 256 << 20;

/// Answers a POST that is not a usable JSON-RPC message with the JSON-RPC error for it (rmcp
/// would answer garbage with a plain-text 415 and a too-large body with a plain-text 413).
pub(crate) async fn guard_json_rpc(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use futures::StreamExt;
    if req.method() == axum::http::Method::DELETE {
        // rmcp confirms a closed session with 202 Accepted; the close is done, not queued, and
        // clients (the official Python SDK) log anything but 200/204 as a failed termination.
        let mut resp = next.run(req).await;
        if resp.status() == axum::http::StatusCode::ACCEPTED {
            *resp.status_mut() = axum::http::StatusCode::NO_CONTENT;
        }
        return resp;
    }
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let rpc_error = |status: axum::http::StatusCode, body: serde_json::Value| {
        (status, axum::Json(body)).into_response()
    };
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut bytes: Vec<u8> = Vec::new();
    // Past the limit the body is still read (and dropped, up to a bound) so that a client
    // still sending gets the answer instead of a connection reset.
    let mut size = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                return rpc_error(
                    axum::http::StatusCode::BAD_REQUEST,
                    framing::error_response(
                        None,
                        framing::PARSE_ERROR,
                        format!("Parse error: reading the request body: {e}"),
                    ),
                )
            }
        };
        size = size.saturating_add(chunk.len());
        if size <= MAX_MESSAGE {
            bytes.extend_from_slice(&chunk);
        } else if size > DRAIN_AT_MOST {
            break;
        }
    }
    if size > MAX_MESSAGE {
        return rpc_error(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            framing::too_large(&bytes, declared.unwrap_or(size).max(size), MAX_MESSAGE),
        );
    }
    let error = match framing::classify(&bytes) {
        framing::Verdict::Pass(_) => {
            let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            return next.run(req).await;
        }
        framing::Verdict::Reject { error, .. } => error,
        framing::Verdict::Blank => framing::error_response(
            None,
            framing::PARSE_ERROR,
            "Parse error: the request body is empty",
        ),
    };
    rpc_error(axum::http::StatusCode::BAD_REQUEST, error)
}

/// The `/mcp` endpoint for `cordon serve`.
pub fn http_service(state: Arc<McpState>) -> axum::Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(CordonMcp::new(state.clone())),
        Arc::new(OrderedSessions::default()),
        StreamableHttpServerConfig::default().with_max_request_body_bytes(MAX_MESSAGE),
    );
    axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn(guard_json_rpc))
}

/// Serves MCP on stdin/stdout until the client goes away, then deletes the sandbox.
pub async fn serve_stdio(state: Arc<McpState>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let (input, output) = rmcp::transport::stdio_pipes();
    let transport = order::Ordered::new(framing::LineTransport::new(input, output), false);
    let handler = CordonMcp::new(state.clone());
    let running = handler.serve(transport).await.map_err(|e| e.to_string())?;
    let _ = running.waiting().await;
    // The session is over: make sure its sandbox is gone before we exit.
    state.end_all().await;
    Ok(())
}
