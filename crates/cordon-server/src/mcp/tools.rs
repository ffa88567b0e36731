//! The MCP tools (run_code, run_command, run_wasm, read_file, write_file, list_files,
//! reset_sandbox, and the snapshots of the session's sandbox: save_snapshot, list_snapshots,
//! restore_snapshot, delete_snapshot) and the server handler that dispatches calls to them, in the order the
//! session's transport received them. A call the client cancels is dropped (its command's
//! process tree killed, as at a timeout); a client that asks for progress hears it.
//!
//! Threat model: tool arguments are client input, parsed by rmcp against each tool's schema
//! into the params types below, then into the service's types; every call runs in the
//! session's own sandbox.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_policy::Profile;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ProgressNotificationParam, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData as McpError, RoleServer, ServerHandler,
};
use serde::Deserialize;

use super::order;
use super::render::{code_facts, outcome_result, text, tool_error};
use super::session::{Bound, McpState, SessionGuard};
use cordon_service::error::ServiceError;
use cordon_service::interpreter::CodeRequest;
use cordon_service::types::{Amount, Cmd, ExecRequest};

#[derive(Clone)]
pub struct CordonMcp {
    pub(super) state: Arc<McpState>,
    pub(super) guard: Arc<SessionGuard>,
    pub(super) tool_router: ToolRouter<Self>,
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

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SnapshotParams {
    /// The snapshot's name: 1 to 63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit; unique per API key.
    pub name: String,
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

    /// Runs `call` in the session's sandbox (created on first use): not getting one is the
    /// tool's result, a service error becomes a tool error, and either way the result says
    /// first when the sandbox is a fresh one (see `Bound::annotate`).
    async fn in_sandbox(
        &self,
        ctx: &RequestContext<RoleServer>,
        call: impl AsyncFnOnce(&Bound) -> Result<CallToolResult, ServiceError>,
    ) -> Result<CallToolResult, McpError> {
        let sb = match self.sandbox(ctx).await {
            Ok(sb) => sb,
            Err(r) => return Ok(r),
        };
        let r = call(&sb).await.unwrap_or_else(|e| tool_error(e.message));
        Ok(sb.annotate(r))
    }
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
        let req = CodeRequest {
            language: p.language.unwrap_or_else(|| "python".into()),
            code: p.code,
            context: p.context,
            timeout: p.timeout_seconds.map(Amount::Number),
            env: Default::default(),
            plain_strings: false,
        };
        self.in_sandbox(&ctx, async |sb| {
            let r = self
                .state
                .service
                .run_code(&sb.caller, &sb.id, req, None)
                .await?;
            Ok(code_result(&r))
        })
        .await
    }

    #[tool(
        description = "Run a shell command in the sandbox (a Linux environment with python3, node, bash and coreutils). Files persist between calls. Returns how it ended (status, exit code, limits hit), what it used (time, CPU, memory, processes), stdout and stderr."
    )]
    async fn run_command(
        &self,
        Parameters(p): Parameters<RunCommandParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
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
        self.in_sandbox(&ctx, async |sb| {
            let o = self
                .state
                .service
                .exec(&sb.caller, &sb.id, req, None)
                .await?;
            Ok(outcome_result(&o))
        })
        .await
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
        Ok(annotate(
            match cordon_service::oneshot::execute(svc, req).await {
                Ok(o) => outcome_result(&o),
                Err(e) => tool_error(e.message),
            },
        ))
    }

    #[tool(
        description = "Read a file from the sandbox. Text comes back as text; PNG/JPEG/GIF images as images; other binary files as base64."
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<PathParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        self.in_sandbox(&ctx, async |sb| {
            let svc = &self.state.service;
            let data = cordon_service::files::read(svc, &sb.caller, &sb.id, &p.path).await?;
            Ok(CallToolResult::success(vec![file_content(&data)]))
        })
        .await
    }

    #[tool(
        description = "Write a text file in the sandbox (creating parent directories), replacing it if it exists."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        self.in_sandbox(&ctx, async |sb| {
            let svc = &self.state.service;
            let n = cordon_service::files::write(
                svc,
                &sb.caller,
                &sb.id,
                &p.path,
                p.content.into_bytes(),
            )
            .await?;
            Ok(CallToolResult::success(vec![text(format!(
                "wrote {n} bytes to {}",
                p.path
            ))]))
        })
        .await
    }

    #[tool(
        description = "List a directory in the sandbox: name, type, size and modification time of each entry."
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let path = p.path.unwrap_or_else(|| "/workspace".into());
        self.in_sandbox(&ctx, async |sb| {
            let svc = &self.state.service;
            let entries =
                cordon_service::files::list(svc, &sb.caller, &sb.id, &path, 1, usize::MAX).await?;
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
            Ok(CallToolResult::success(vec![text(if lines.is_empty() {
                format!("{path} is empty")
            } else {
                lines.join("\n")
            })]))
        })
        .await
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

    #[tool(
        description = "Save the sandbox's files (/workspace, the home directory, /tmp) as a named snapshot, to come back to later with restore_snapshot (also from another session of the same API key). Running processes, memory and interpreter state are not saved."
    )]
    async fn save_snapshot(
        &self,
        Parameters(p): Parameters<SnapshotParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        self.in_sandbox(&ctx, async |sb| {
            let req = cordon_service::snapshots::CreateSnapshot { name: p.name };
            let s = self
                .state
                .service
                .create_snapshot(&sb.caller, &sb.id, req)
                .await?;
            Ok(CallToolResult::success(vec![text(format!(
                "saved snapshot '{}': {} files, {} directories, {} bytes (processes were frozen for {} ms){}",
                s.name,
                s.files,
                s.dirs,
                s.bytes,
                s.frozen_ms,
                if s.skipped_count > 0 {
                    format!("; {} entries not carried: {}", s.skipped_count, s.skipped.join(", "))
                } else {
                    String::new()
                }
            ))]))
        })
        .await
    }

    #[tool(description = "List the snapshots this API key has saved: name, size, when.")]
    async fn list_snapshots(
        &self,
        Parameters(_p): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let session = match self.session(&ctx) {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e.message)),
        };
        match self.state.service.list_snapshots(&session.caller).await {
            Ok(l) if l.snapshots.is_empty() => Ok(CallToolResult::success(vec![text(
                "no snapshots yet (save one with save_snapshot)",
            )])),
            Ok(l) => Ok(CallToolResult::success(vec![text(
                l.snapshots
                    .iter()
                    .map(|s| {
                        format!(
                            "{}\t{} files\t{} bytes\tcreated at {} (unix seconds)",
                            s.name, s.files, s.bytes, s.created_at
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            )])),
            Err(e) => Ok(tool_error(e.message)),
        }
    }

    #[tool(
        description = "Replace the sandbox with a fresh one that starts with a snapshot's files. Everything the current sandbox has that is not in the snapshot — its files, processes and interpreter state — is discarded."
    )]
    async fn restore_snapshot(
        &self,
        Parameters(p): Parameters<SnapshotParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let session = match self.session(&ctx) {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e.message)),
        };
        let svc = &self.state.service;
        // Checked before anything is thrown away.
        match svc.list_snapshots(&session.caller).await {
            Ok(l) if l.snapshots.iter().any(|s| s.name == p.name) => {}
            Ok(_) => {
                return Ok(tool_error(format!(
                    "no snapshot '{}' (list_snapshots shows the ones there are)",
                    p.name
                )))
            }
            Err(e) => return Ok(tool_error(e.message)),
        }
        let old = session.sandbox.lock().await.take();
        if let Some(id) = old {
            let _ = svc.delete(&session.caller, &id).await;
        }
        *session.next_from.lock().unwrap_or_else(|e| e.into_inner()) = Some(p.name.clone());
        match self.sandbox(&ctx).await {
            Ok(_) => Ok(CallToolResult::success(vec![text(format!(
                "the sandbox now holds snapshot '{}''s files; processes and interpreter state start fresh",
                p.name
            ))])),
            Err(r) => Ok(r),
        }
    }

    #[tool(description = "Delete a snapshot this API key saved.")]
    async fn delete_snapshot(
        &self,
        Parameters(p): Parameters<SnapshotParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let session = match self.session(&ctx) {
            Ok(s) => s,
            Err(e) => return Ok(tool_error(e.message)),
        };
        match self
            .state
            .service
            .delete_snapshot(&session.caller, &p.name)
            .await
        {
            Ok(()) => Ok(CallToolResult::success(vec![text(format!(
                "deleted snapshot '{}'",
                p.name
            ))])),
            Err(e) => Ok(tool_error(e.message)),
        }
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
        let ct = context.ct.clone();
        // A client that asked for progress hears, each second, how long the call has run.
        let progress = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let t0 = std::time::Instant::now();
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let secs = t0.elapsed().as_secs();
                    let p = ProgressNotificationParam::new(token.clone(), secs as f64)
                        .with_message(format!("running for {secs} s"));
                    if peer.notify_progress(p).await.is_err() {
                        return;
                    }
                }
            })
        });
        let tcc = ToolCallContext::new(self, request, context);
        // A cancelled call is dropped: its command's process tree is killed as at a timeout
        // (the service's exec does that when dropped), and the session's next call starts.
        let r = tokio::select! {
            r = self.tool_router.call(tcc) => r,
            _ = ct.cancelled() => Err(McpError::invalid_request("cancelled by the client", None)),
        };
        if let Some(p) = progress {
            p.abort();
        }
        r
    }
}

/// A cell's result as a tool's result: each stream, result and error as content (charts as
/// images), an error result when the cell raised, its facts as structured content.
fn code_result(r: &cordon_service::interpreter::CodeResult) -> CallToolResult {
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
    result.structured_content = code_facts(r);
    result
}

/// A file's bytes as content: PNG, JPEG and GIF as images, UTF-8 as text, anything else as
/// base64 text that says so.
fn file_content(data: &[u8]) -> ContentBlock {
    use base64::Engine;
    let b64 = || base64::engine::general_purpose::STANDARD.encode(data);
    let mime = if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if data.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if data.starts_with(b"GIF8") {
        Some("image/gif")
    } else {
        None
    };
    match (mime, std::str::from_utf8(data)) {
        (Some(m), _) => ContentBlock::image(b64(), m),
        (None, Ok(t)) => text(t.to_string()),
        (None, Err(_)) => text(format!(
            "(binary file, {} bytes, base64)\n{}",
            data.len(),
            b64()
        )),
    }
}
