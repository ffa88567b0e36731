//! The Model Context Protocol front end: the same service as HTTP, as MCP tools. Served over
//! stdio (`cordon mcp`) and streamable HTTP (`/mcp` on `cordon serve`, behind the API key).
//!
//! Each MCP session gets one sandbox, created on the first tool call and deleted when the
//! session ends (stdio: when the process exits; HTTP: when the session closes). Clients that
//! speak the sessionless protocol share one sandbox per API key, reaped by its TTL.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeResult, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::{
    schemars, tool, tool_handler, tool_router, ErrorData as McpError, RoleServer, ServerHandler,
};
use serde::Deserialize;

use crate::kernel::CodeRequest;
use crate::service::{Caller, Service};
use crate::types::{Amount, Cmd, CreateSandbox, ExecRequest};

/// Shared by every MCP handler of one process.
pub struct McpState {
    service: Arc<Service>,
    /// Caller for transports without HTTP authentication (stdio).
    local_caller: Option<Caller>,
    /// Built-in profile of the sandboxes this front end creates.
    profile: Option<String>,
    /// session key → sandbox id
    sandboxes: tokio::sync::Mutex<HashMap<String, String>>,
}

impl McpState {
    pub fn new(
        service: Arc<Service>,
        local_caller: Option<Caller>,
        profile: Option<String>,
    ) -> Arc<McpState> {
        Arc::new(McpState {
            service,
            local_caller,
            profile,
            sandboxes: Default::default(),
        })
    }
}

/// Deletes a session's sandbox when the last handler of that session goes away.
struct SessionGuard {
    state: Arc<McpState>,
    key: std::sync::Mutex<Option<(String, Caller)>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let Some((key, caller)) = self.key.lock().ok().and_then(|mut k| k.take()) else {
            return;
        };
        let state = self.state.clone();
        let cleanup = async move {
            let id = state.sandboxes.lock().await.remove(&key);
            if let Some(id) = id {
                let _ = state.service.delete(&caller, &id).await;
            }
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(cleanup);
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
    /// Seconds before the cell is interrupted. Default: 30.
    pub timeout_seconds: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunCommandParams {
    /// A shell command line, run with /bin/sh -c in the sandbox (no network, Linux userland: python3, node, bash and coreutils are available).
    pub command: String,
    /// Working directory. Default: /workspace.
    pub cwd: Option<String>,
    /// Seconds before the command is killed. Default: 30.
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

impl CordonMcp {
    pub fn new(state: Arc<McpState>) -> CordonMcp {
        CordonMcp {
            guard: Arc::new(SessionGuard {
                state: state.clone(),
                key: std::sync::Mutex::new(None),
            }),
            state,
            tool_router: Self::tool_router(),
        }
    }

    /// Who is calling and which session this is.
    fn identity(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Caller, String, bool), McpError> {
        if let Some(c) = &self.state.local_caller {
            return Ok((c.clone(), "stdio".into(), true));
        }
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
            Some(sid) => Ok((caller.clone(), format!("{}:{sid}", caller.key_id), true)),
            None => Ok((caller.clone(), format!("{}:shared", caller.key_id), false)),
        }
    }

    /// The session's sandbox, created on first use.
    async fn sandbox(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(Caller, String), McpError> {
        let (caller, key, owned) = self.identity(ctx)?;
        let mut map = self.state.sandboxes.lock().await;
        if let Some(id) = map.get(&key) {
            if self
                .state
                .service
                .get(&caller, id)
                .map(|i| i.state == "running")
                .unwrap_or(false)
            {
                return Ok((caller, id.clone()));
            }
        }
        let info = self
            .state
            .service
            .create(
                &caller,
                CreateSandbox {
                    profile: self.state.profile.clone(),
                    ttl: Some(Amount::Text("2h".into())),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| McpError::internal_error(format!("creating the sandbox: {e}"), None))?;
        map.insert(key.clone(), info.id.clone());
        if owned {
            if let Ok(mut g) = self.guard.key.lock() {
                *g = Some((key, caller.clone()));
            }
        }
        Ok((caller, info.id))
    }
}

#[tool_router]
impl CordonMcp {
    #[tool(
        description = "Run code in a persistent, isolated interpreter (Python by default; also javascript or bash). Variables, imports and files persist between calls, like notebook cells. Returns stdout, stderr, the value of the last expression, errors with tracebacks, and any matplotlib charts as images. No network access."
    )]
    async fn run_code(
        &self,
        Parameters(p): Parameters<RunCodeParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, id) = self.sandbox(&ctx).await?;
        let req = CodeRequest {
            language: p.language.unwrap_or_else(|| "python".into()),
            code: p.code,
            context: p.context,
            timeout: p.timeout_seconds.map(Amount::Number),
        };
        let r = match self.state.service.run_code(&caller, &id, req, None).await {
            Ok(r) => r,
            Err(e) => return Ok(tool_error(e.message)),
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
        if content.is_empty() {
            content.push(text("(no output)"));
        }
        Ok(if r.error.is_some() {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        })
    }

    #[tool(
        description = "Run a shell command in the sandbox (a Linux environment with python3, node, bash and coreutils; no network). Files persist between calls. Returns the exit code, stdout and stderr."
    )]
    async fn run_command(
        &self,
        Parameters(p): Parameters<RunCommandParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, id) = self.sandbox(&ctx).await?;
        let req = ExecRequest {
            cmd: Cmd::Shell(p.command),
            cwd: p.cwd,
            env: Default::default(),
            stdin: None,
            timeout: p.timeout_seconds.map(Amount::Number),
            background: false,
        };
        let o = match self.state.service.exec(&caller, &id, req, None).await {
            Ok(o) => o,
            Err(e) => return Ok(tool_error(e.message)),
        };
        let status = match (o.exit_code, o.signal, &o.error) {
            (_, _, Some(err)) => format!("error: {err}"),
            (Some(c), _, _) => format!("exit code {c}"),
            (_, Some(s), _) => format!("killed by signal {s} ({:?})", o.status),
            _ => format!("{:?}", o.status),
        };
        let body = format!(
            "{status}\nstdout:\n{}{}\nstderr:\n{}{}",
            o.stdout,
            if o.stdout_truncated {
                "\n[truncated]"
            } else {
                ""
            },
            o.stderr,
            if o.stderr_truncated {
                "\n[truncated]"
            } else {
                ""
            }
        );
        let ok = o.exit_code == Some(0);
        Ok(if ok {
            CallToolResult::success(vec![text(body)])
        } else {
            CallToolResult::error(vec![text(body)])
        })
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
        let (caller, id) = self.sandbox(&ctx).await?;
        let data = match crate::files::read(&self.state.service, &caller, &id, &p.path).await {
            Ok(d) => d,
            Err(e) => return Ok(tool_error(e.message)),
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
        Ok(CallToolResult::success(vec![
            match (mime, std::str::from_utf8(&data)) {
                (Some(m), _) => ContentBlock::image(b64(), m),
                (None, Ok(t)) => text(t.to_string()),
                (None, Err(_)) => text(format!(
                    "(binary file, {} bytes, base64)\n{}",
                    data.len(),
                    b64()
                )),
            },
        ]))
    }

    #[tool(
        description = "Write a text file in the sandbox (creating parent directories), replacing it if it exists."
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, id) = self.sandbox(&ctx).await?;
        match crate::files::write(
            &self.state.service,
            &caller,
            &id,
            &p.path,
            p.content.into_bytes(),
        )
        .await
        {
            Ok(n) => Ok(CallToolResult::success(vec![text(format!(
                "wrote {n} bytes to {}",
                p.path
            ))])),
            Err(e) => Ok(tool_error(e.message)),
        }
    }

    #[tool(
        description = "List a directory in the sandbox: name, type, size and modification time of each entry."
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, id) = self.sandbox(&ctx).await?;
        let path = p.path.unwrap_or_else(|| "/workspace".into());
        match crate::files::list(&self.state.service, &caller, &id, &path).await {
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
                Ok(CallToolResult::success(vec![text(if lines.is_empty() {
                    format!("{path} is empty")
                } else {
                    lines.join("\n")
                })]))
            }
            Err(e) => Ok(tool_error(e.message)),
        }
    }

    #[tool(
        description = "Throw the sandbox away and start over: all files, processes and interpreter state are deleted. The next call gets a fresh sandbox."
    )]
    async fn reset_sandbox(
        &self,
        Parameters(_p): Parameters<NoParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let (caller, key, _) = self.identity(&ctx)?;
        let id = self.state.sandboxes.lock().await.remove(&key);
        if let Some(id) = id {
            let _ = self.state.service.delete(&caller, &id).await;
        }
        Ok(CallToolResult::success(vec![text(
            "the sandbox was reset; the next call starts fresh",
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CordonMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "cordon gives you an isolated Linux sandbox with no network: run code (run_code keeps state like a notebook), run shell commands, and read or write files under /workspace. Nothing you do can affect the host.",
            )
    }
}

/// The `/mcp` endpoint for `cordon serve`.
pub fn http_service(
    state: Arc<McpState>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    CordonMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(CordonMcp::new(state.clone())),
        Default::default(),
        Default::default(),
    )
}

/// Serves MCP on stdin/stdout until the client goes away, then deletes the sandbox.
pub async fn serve_stdio(state: Arc<McpState>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let handler = CordonMcp::new(state.clone());
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| e.to_string())?;
    let _ = running.waiting().await;
    // The session is over: make sure its sandbox is gone before we exit.
    let all: Vec<String> = state
        .sandboxes
        .lock()
        .await
        .drain()
        .map(|(_, id)| id)
        .collect();
    if let Some(caller) = &state.local_caller {
        for id in all {
            let _ = state.service.delete(caller, &id).await;
        }
    }
    Ok(())
}
