//! `cordon gateway`: an MCP proxy between an agent host and tool servers. Every call passes
//! the allowlist, the tool's own input schema and the rule's, the path rules, a rate limit
//! and, where a rule asks, a person's approval; tool definitions are pinned; every decision
//! goes to the hash-chained audit log. The rest of MCP passes too, under the same policy:
//! resources and prompts are allowlisted, checked, rate-limited and audited like tools, and
//! an upstream's requests to the client (sampling, elicitation) are calls like any other
//! (`relay` routes notifications and those requests between sessions and upstreams). The
//! policy itself is `cordon_gateway` (data, no syscalls); this module connects it to MCP and
//! to the upstream servers, each of which runs as a persistent cordon sandbox created through
//! the service layer.

// The gateway relays the 2025-11-25 protocol's sampling, roots, logging and subscriptions,
// which rmcp marks deprecated in favour of the 2026-07-28 forms its clients do not speak yet.
#![allow(deprecated)]

mod relay;
mod upstream;

/// The gateway's state directory (pins, held calls, their history): the service's, so the
/// server's console answers held calls as the gateway's own doors do.
pub use cordon_service::gateway_state as state;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_gateway::config::ScriptTool;
use cordon_gateway::{Config, Kind, Policy, Reason, Refusal};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, ClientResult,
    CompleteRequest, CompleteRequestParams, CompleteResult, ContentBlock, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorCode, GetPromptRequest, GetPromptRequestParams, GetPromptResponse,
    Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListRootsRequest, ListRootsResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequest, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerRequest, ServerResult, SetLevelRequestParams,
    SubscribeRequest, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{OriginatingRequestId, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use cordon_service::types::SandboxState;
use cordon_service::{Caller, Service};
use relay::{exposed_uri, ClientSession, Relay};
use state::{Answer, Approval, StateDir};
use upstream::{caps_key, Fail, Forward, Upstream, FULL};

/// The JSON-RPC error code of a call the gateway refused (policy, pin, approval, rate).
pub const REFUSED: i32 = -32003;
/// The JSON-RPC error code of a call an upstream could not answer (crashed, hung, garbage).
pub const UPSTREAM_FAILED: i32 = -32004;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Counters for `/metrics` (Prometheus text).
#[derive(Default)]
pub struct GatewayMetrics {
    calls: AtomicU64,
    allowed: AtomicU64,
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Latency of forwarded calls: sum (µs) and count, and a few buckets.
    latency_us_sum: AtomicU64,
    latency_buckets: [AtomicU64; 6],
}

const BUCKETS_MS: [f64; 6] = [1.0, 5.0, 25.0, 100.0, 1000.0, f64::INFINITY];

impl GatewayMetrics {
    fn refused(&self, r: Reason) {
        if let Ok(mut m) = self.refused.lock() {
            *m.entry(r.as_str()).or_default() += 1;
        }
    }

    fn observe(&self, d: Duration) {
        self.latency_us_sum
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        let ms = d.as_secs_f64() * 1000.0;
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            if ms <= *b {
                self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "# TYPE cordon_gateway_calls_total counter");
        let _ = writeln!(
            s,
            "cordon_gateway_calls_total {}",
            self.calls.load(Ordering::Relaxed)
        );
        let _ = writeln!(s, "# TYPE cordon_gateway_allowed_total counter");
        let _ = writeln!(
            s,
            "cordon_gateway_allowed_total {}",
            self.allowed.load(Ordering::Relaxed)
        );
        let _ = writeln!(s, "# TYPE cordon_gateway_refused_total counter");
        if let Ok(m) = self.refused.lock() {
            for (k, v) in m.iter() {
                let _ = writeln!(s, "cordon_gateway_refused_total{{reason=\"{k}\"}} {v}");
            }
        }
        let _ = writeln!(s, "# TYPE cordon_gateway_call_seconds histogram");
        let mut count = 0;
        for (i, b) in BUCKETS_MS.iter().enumerate() {
            count = self.latency_buckets[i].load(Ordering::Relaxed);
            let le = if b.is_infinite() {
                "+Inf".to_string()
            } else {
                format!("{}", b / 1000.0)
            };
            let _ = writeln!(
                s,
                "cordon_gateway_call_seconds_bucket{{le=\"{le}\"}} {count}"
            );
        }
        let _ = writeln!(
            s,
            "cordon_gateway_call_seconds_sum {}",
            self.latency_us_sum.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(s, "cordon_gateway_call_seconds_count {count}");
        s
    }
}

/// The audit log: hash-chained, one record per decision. Never argument values unless the
/// config opts in, and then with secret-looking fields masked.
struct AuditLog {
    w: Mutex<cordon_service::audit::ChainLog>,
}

impl AuditLog {
    fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        Ok(AuditLog {
            w: Mutex::new(cordon_service::audit::ChainLog::open(path)?),
        })
    }

    fn record(&self, event: &str, fields: Value) {
        let mut m = Map::new();
        m.insert("time_ms".into(), now_ms().into());
        m.insert("event".into(), event.into());
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        if let Ok(w) = self.w.lock() {
            if let Err(e) = w.append(m) {
                eprintln!("cordon gateway: audit log: {e}");
            }
        }
    }

    /// The last records to disk now (the gateway stopping).
    fn sync(&self) {
        let done = match self.w.lock() {
            Ok(w) => w.sync(),
            Err(_) => return,
        };
        if let Err(e) = done {
            eprintln!("cordon gateway: audit log: syncing to disk: {e}");
        }
    }
}

/// Keys whose values are masked even where argument values are logged.
fn secret_looking(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "secret",
        "token",
        "key",
        "auth",
        "credential",
        "cookie",
        "session",
        "private",
    ]
    .iter()
    .any(|s| k.contains(s))
}

fn masked(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    if secret_looking(k) {
                        (k.clone(), Value::from("***"))
                    } else {
                        (k.clone(), masked(v))
                    }
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(masked).collect()),
        other => other.clone(),
    }
}

pub struct GatewayOptions {
    pub config: Config,
    pub config_path: PathBuf,
    pub audit_path: PathBuf,
    pub state_dir: PathBuf,
}

/// Shared by every session of one gateway.
pub struct Gateway {
    /// Its config file's stem (what consoles call it) and the file.
    pub name: String,
    pub config_path: PathBuf,
    service: Arc<Service>,
    caller: Caller,
    policy: Policy,
    audit: AuditLog,
    state: StateDir,
    upstreams: BTreeMap<String, Arc<Upstream>>,
    scripts: BTreeMap<String, ScriptTool>,
    script_validators: BTreeMap<String, cordon_gateway::jsonschema::Validator>,
    /// A sandbox per script tool, created on first use.
    script_sandboxes: tokio::sync::Mutex<BTreeMap<String, String>>,
    base: PathBuf,
    pub metrics: GatewayMetrics,
    relay: Arc<Relay>,
    /// Names carry their server (`server.tool`, `server+uri`); `false` for a single server's
    /// gateway that shows them as the server does.
    prefix: bool,
    /// Items per page of the lists the gateway answers.
    page_size: usize,
}

impl Gateway {
    /// Compiles the policy, opens the audit log and the state, and starts every upstream
    /// (each stdio server in its sandbox). A server that fails to start is reported and its
    /// tools stay unavailable; the others serve.
    pub async fn start(
        service: Arc<Service>,
        opts: GatewayOptions,
    ) -> Result<Arc<Gateway>, String> {
        let policy = Policy::compile(&opts.config).map_err(|e| e.to_string())?;
        let audit = AuditLog::open(&opts.audit_path)
            .map_err(|e| format!("audit log {}: {e}", opts.audit_path.display()))?;
        let state = StateDir::open(&opts.state_dir)
            .map_err(|e| format!("state dir {}: {e}", opts.state_dir.display()))?;
        let caller = Caller {
            key_id: "gateway".into(),
            max_sandboxes: (opts.config.servers.len() + opts.config.tools.len() + 8) as u32,
        };
        let mut script_validators = BTreeMap::new();
        for (name, t) in &opts.config.tools {
            let schema = t.input.clone().unwrap_or_else(|| json!({"type": "object"}));
            let v = cordon_gateway::policy::compile_schema(&schema)
                .map_err(|e| format!("{}: tools.{name}.input: {e}", opts.config.file))?;
            script_validators.insert(name.clone(), v);
        }
        let relay = Arc::new(Relay::default());
        let mut upstreams = BTreeMap::new();
        for (name, s) in &opts.config.servers {
            let denied = policy.denied_paths_for_server(name);
            let up = Upstream::new(name, s, &opts.config.base, denied, relay.clone())?;
            upstreams.insert(name.clone(), Arc::new(up));
        }
        let gw = Arc::new(Gateway {
            name: opts
                .config_path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "gateway".into()),
            config_path: opts.config_path.clone(),
            service,
            caller,
            policy,
            audit,
            state,
            upstreams,
            scripts: opts.config.tools.clone(),
            script_validators,
            script_sandboxes: Default::default(),
            base: opts.config.base.clone(),
            metrics: GatewayMetrics::default(),
            relay: relay.clone(),
            prefix: opts.config.gateway.prefix,
            page_size: opts.config.gateway.page_size,
        });
        let _ = relay.gw.set(Arc::downgrade(&gw));
        // All at once: one slow server must not hold the others (or the agent host) up.
        let starts = gw.upstreams.values().map(|up| {
            let gw = gw.clone();
            async move {
                if let Err(e) = up.ensure(&gw, FULL).await {
                    eprintln!("cordon gateway: server {}: {e}", up.name);
                }
            }
        });
        futures::future::join_all(starts).await;
        let idle = Arc::downgrade(&gw);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                match idle.upgrade() {
                    Some(g) => {
                        g.policy.forget_idle_clients();
                        let in_use = g
                            .relay
                            .sessions()
                            .into_iter()
                            .map(|(_, s)| s.key.clone())
                            .collect();
                        for up in g.upstreams.values() {
                            up.reap(&g, &in_use).await;
                        }
                    }
                    None => return,
                }
            }
        });
        Ok(gw)
    }

    /// Stops every upstream and deletes its sandbox.
    pub async fn stop(&self) {
        for up in self.upstreams.values() {
            up.stop(self).await;
        }
        let boxes: Vec<String> = self
            .script_sandboxes
            .lock()
            .await
            .values()
            .cloned()
            .collect();
        for id in boxes {
            let _ = self.service.delete(&self.caller, &id).await;
        }
        self.audit.sync();
    }

    fn refusal_error(&self, r: &Refusal) -> McpError {
        let mut data = json!({"reason": r.reason.as_str(), "rule": r.rule});
        if let Some(d) = r.retry_after {
            data["retry_after_ms"] = json!(d.as_millis() as u64);
        }
        McpError::new(ErrorCode(REFUSED), r.to_string(), Some(data))
    }

    /// Every tool the agent may see, named `server.tool` (script tools by their own name),
    /// as the upstream sessions of its capability set `key` show them.
    async fn list(&self, client: &str, key: &str) -> Vec<Tool> {
        let mut out = Vec::new();
        let pins = self.state.load_pins().unwrap_or_default();
        for up in self.upstreams.values() {
            for t in up.tools(self, &pins, key).await {
                let full = format!("{}.{}", up.name, t.name);
                if self.policy.allows(&full).is_ok() {
                    let mut t = t.clone();
                    if self.prefix {
                        t.name = full.into();
                    }
                    // The agent host can tell a confined tool from a remote one it must trust.
                    let mut meta = t.meta.take().unwrap_or_default();
                    meta.0
                        .insert("cordon/sandboxed".into(), json!(!up.is_remote()));
                    t.meta = Some(meta);
                    out.push(t);
                }
            }
        }
        for (name, s) in &self.scripts {
            if self.policy.allows(name).is_ok() {
                let schema = s.input.clone().unwrap_or_else(|| json!({"type": "object"}));
                let obj = match schema {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                out.push(Tool::new(
                    name.clone(),
                    s.description.clone(),
                    Arc::new(obj),
                ));
            }
        }
        self.audit.record(
            "tools/list",
            json!({"client": client, "shown": out.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()}),
        );
        out
    }

    /// The name a client's name stands for: `server.tool` (or a script tool's name).
    fn internal_tool(&self, name: &str) -> String {
        match (self.prefix, self.upstreams.keys().next()) {
            (false, Some(only)) if !self.scripts.contains_key(name) => format!("{only}.{name}"),
            _ => name.to_string(),
        }
    }

    async fn call(
        self: &Arc<Self>,
        client: &str,
        key: &str,
        req: CallToolRequestParams,
        fwd: Forward,
        mark: Option<(u64, rmcp::model::RequestId)>,
    ) -> Result<CallToolResponse, McpError> {
        let t0 = Instant::now();
        self.metrics.calls.fetch_add(1, Ordering::Relaxed);
        let name = self.internal_tool(&req.name);
        let args = Value::Object(req.arguments.clone().unwrap_or_default());
        let digest = cordon_gateway::pin::digest(&args);
        let result =
            Box::pin(self.decide_and_forward(client, key, &name, &args, req, fwd, mark)).await;
        let mut rec = json!({
            "client": client,
            "tool": name,
            "args_digest": digest,
            "duration_ms": t0.elapsed().as_secs_f64() * 1000.0,
        });
        let out = match result {
            Ok((admitted, resp, bytes, usage)) => {
                self.metrics.allowed.fetch_add(1, Ordering::Relaxed);
                self.metrics.observe(t0.elapsed());
                rec["verdict"] = "allowed".into();
                rec["rules"] = json!(admitted.rules);
                rec["result_bytes"] = bytes.into();
                if let Some(u) = usage {
                    rec["usage"] = u;
                }
                if admitted.log_args {
                    rec["args"] = masked(&admitted.arguments);
                }
                Ok(resp)
            }
            // The server's own error, as it answered it (as the specification asks of a
            // protocol error: an unknown tool's -32602 stays -32602): the gateway is no party.
            Err(Fail::Peer(e)) => {
                self.metrics.refused(Reason::Upstream);
                rec["verdict"] = "failed".into();
                rec["reason"] = Reason::Upstream.as_str().into();
                rec["rule"] = format!("servers.{}", name.split('.').next().unwrap_or("")).into();
                rec["message"] = format!(
                    "the server answered an error: {} (code {})",
                    e.message, e.code.0
                )
                .into();
                Err(e)
            }
            Err(Fail::Refused(r)) => {
                self.metrics.refused(r.reason);
                rec["verdict"] = if r.reason == Reason::Upstream {
                    "failed".into()
                } else {
                    "refused".into()
                };
                rec["reason"] = r.reason.as_str().into();
                rec["rule"] = r.rule.clone().into();
                rec["message"] = r.message.clone().into();
                match r.reason {
                    Reason::Upstream => Err(McpError::new(
                        ErrorCode(UPSTREAM_FAILED),
                        r.to_string(),
                        None,
                    )),
                    // As the 2025-11-25 specification asks: arguments the tool's own schema
                    // refuses are the tool's error, which the model can read and correct.
                    Reason::Schema => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                        ContentBlock::text(r.to_string()),
                    ]))),
                    // Unknown and hidden tools alike: invalid params, as for an unknown tool.
                    Reason::Unknown | Reason::NotAllowed | Reason::Denied => {
                        let mut e = self.refusal_error(&r);
                        e.code = ErrorCode::INVALID_PARAMS;
                        Err(e)
                    }
                    _ => Err(self.refusal_error(&r)),
                }
            }
        };
        self.audit.record("tools/call", rec);
        out
    }

    #[allow(clippy::too_many_arguments)]
    async fn decide_and_forward(
        self: &Arc<Self>,
        client: &str,
        key: &str,
        name: &str,
        args: &Value,
        mut req: CallToolRequestParams,
        fwd: Forward,
        mark: Option<(u64, rmcp::model::RequestId)>,
    ) -> Result<
        (
            cordon_gateway::Admitted,
            CallToolResponse,
            usize,
            Option<Value>,
        ),
        Fail,
    > {
        let unknown = || Refusal {
            reason: Reason::Unknown,
            rule: "the gateway".into(),
            message: format!("no tool named {name}"),
            retry_after: None,
        };
        // Hidden tools answer exactly like missing ones: the agent learns nothing of them.
        if self.policy.allows(name).is_err() {
            let r = self.policy.allows(name).err().unwrap_or_else(unknown);
            return Err(Refusal {
                message: format!("no tool named {name} is available ({})", r.message),
                ..r
            }
            .into());
        }
        if let Some(script) = self.scripts.get(name) {
            let admitted =
                self.policy
                    .check(client, name, self.script_validators.get(name), args)?;
            self.approval(client, name, &admitted).await?;
            // Boxed: the exec future is large, and so would be every future that holds it.
            // A cancelled call drops it, which kills the script's processes (as a timeout).
            let run = Box::pin(self.run_script(name, script, &admitted.arguments));
            let (result, usage) = tokio::select! {
                r = run => r?,
                _ = fwd.cancelled => {
                    return Err(Refusal {
                        reason: Reason::Cancelled,
                        rule: "the client".into(),
                        message: "the client cancelled the call; the script was ended".into(),
                        retry_after: None,
                    }
                    .into())
                }
            };
            let bytes = serde_json::to_vec(&result).map(|v| v.len()).unwrap_or(0);
            return Ok((
                admitted,
                CallToolResponse::Complete(result),
                bytes,
                Some(usage),
            ));
        }
        let (server, tool) = name.split_once('.').ok_or_else(unknown)?;
        let up = self.upstreams.get(server).ok_or_else(unknown)?;
        let pins = self.state.load_pins().unwrap_or_default();
        let def = up.definition(self, &pins, tool, key).await?;
        let admitted = self
            .policy
            .check(client, name, def.validator.as_deref(), args)?;
        self.approval(client, name, &admitted).await?;
        req.name = tool.to_string().into();
        req.arguments = match &admitted.arguments {
            Value::Object(m) => Some(m.clone()),
            _ => None,
        };
        let _mark = mark.map(|(session, id)| self.relay.in_flight(server, session, id));
        let (resp, usage) = up.call(self, req, fwd, key).await?;
        let bytes = match &resp {
            CallToolResponse::Complete(r) => serde_json::to_vec(r).map(|v| v.len()).unwrap_or(0),
            _ => 0,
        };
        // The process set is refreshed off the call's path (a scan of /proc): the next call
        // sees processes this one started.
        let gw = self.clone();
        let server = server.to_string();
        let key = key.to_string();
        tokio::spawn(async move {
            if let Some(up) = gw.upstreams.get(&server) {
                up.refresh_processes(&gw, &key).await;
            }
        });
        Ok((admitted, resp, bytes, usage))
    }

    /// Holds a call until a person answers it, when a rule asks for approval.
    async fn approval(
        &self,
        client: &str,
        tool: &str,
        admitted: &cordon_gateway::Admitted,
    ) -> Result<(), Refusal> {
        let Some((rule, timeout)) = &admitted.approve else {
            return Ok(());
        };
        let refuse = |message: String| Refusal {
            reason: Reason::Approval,
            rule: rule.clone(),
            message,
            retry_after: None,
        };
        let id = format!("call-{}", cordon_service::keys::random_hex(8));
        let digest = cordon_gateway::pin::digest(&admitted.arguments);
        let requested = now_ms();
        let a = Approval {
            id: id.clone(),
            tool: tool.to_string(),
            rule: rule.clone(),
            client: client.to_string(),
            args_digest: digest.clone(),
            requested_ms: requested,
            expires_ms: requested + timeout.as_millis() as u64,
            answer: Answer::Pending,
            answered_digest: None,
            // What the person decides on: the arguments as the tool will get them, with
            // secret-looking fields masked (as in the audit log).
            arguments: Some(masked(&admitted.arguments)),
            answered_by: None,
            answered_ms: None,
            reason: None,
            outcome: None,
        };
        self.state
            .save_approval(&a)
            .map_err(|e| refuse(format!("cannot hold the call for approval: {e}")))?;
        self.audit.record(
            "approval.requested",
            json!({"id": id, "tool": tool, "rule": rule, "client": client, "args_digest": digest, "expires_ms": a.expires_ms}),
        );
        eprintln!(
            "cordon gateway: {tool} is waiting for approval: cordon gateway approve {id} (or deny {id}); expires in {} s",
            timeout.as_secs()
        );
        let deadline = Instant::now() + *timeout;
        let mut last = a;
        let (verdict, outcome) = loop {
            if let Some(cur) = self.state.load_approval(&id) {
                last = cur.clone();
                match cur.answer {
                    Answer::Granted
                        if cur.answered_digest.as_deref() == Some(digest.as_str())
                            && cur.rule == *rule
                            && now_ms() <= cur.expires_ms =>
                    {
                        break (Ok(()), "granted");
                    }
                    Answer::Granted => break (Err(refuse(
                        "the approval does not match this call (other arguments, rule or expiry)"
                            .into(),
                    )), "mismatch"),
                    Answer::Refused => {
                        let why = cur
                            .reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default();
                        break (Err(refuse(format!("a person refused call {id}{why}"))), "refused");
                    }
                    Answer::Pending => {}
                }
            }
            if Instant::now() >= deadline {
                break (
                    Err(refuse(format!(
                        "nobody approved call {id} within {} s",
                        timeout.as_secs()
                    ))),
                    "expired",
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        last.outcome = Some(outcome.into());
        if let Err(e) = self.state.record_history(&last) {
            eprintln!("cordon gateway: approvals history: {e}");
        }
        self.state.remove_approval(&id);
        self.audit.record(
            "approval.answered",
            json!({"id": id, "tool": tool, "rule": rule, "verdict": if verdict.is_ok() { "granted" } else { "refused" },
                   "outcome": outcome, "by": last.answered_by, "reason": last.reason}),
        );
        verdict
    }

    /// A script tool: a fresh process in the tool's sandbox, arguments as JSON on stdin,
    /// stdout is the result.
    async fn run_script(
        &self,
        name: &str,
        s: &ScriptTool,
        args: &Value,
    ) -> Result<(CallToolResult, Value), Refusal> {
        let fail = |message: String| Refusal {
            reason: Reason::Upstream,
            rule: format!("tools.{name}"),
            message,
            retry_after: None,
        };
        let id = {
            let mut boxes = self.script_sandboxes.lock().await;
            let alive = boxes
                .get(name)
                .and_then(|id| self.service.get(&self.caller, id).ok())
                .filter(|i| i.state == SandboxState::Running);
            match alive {
                Some(info) => info.id,
                None => {
                    let profile = upstream::build_profile(
                        s.profile.as_deref(),
                        &s.ro,
                        &[],
                        &s.env,
                        &self.base,
                        &[],
                    )
                    .map_err(fail)?;
                    let info = self
                        .service
                        .create_with_profile(
                            &self.caller,
                            profile,
                            Some(cordon_service::types::Amount::Number(
                                self.service.config().max_ttl.as_secs_f64(),
                            )),
                            BTreeMap::from([("gateway_tool".to_string(), name.to_string())]),
                        )
                        .await
                        .map_err(|e| fail(format!("cannot create its sandbox: {}", e.message)))?;
                    boxes.insert(name.to_string(), info.id.clone());
                    info.id
                }
            }
        };
        let req = cordon_service::types::ExecRequest {
            cmd: cordon_service::types::Cmd::Argv(s.command.clone()),
            cwd: None,
            env: Default::default(),
            stdin: Some(args.to_string()),
            timeout: s.timeout.clone().map(cordon_service::types::Amount::Text),
            background: false,
            pty: None,
            tag: None,
        };
        let o = self
            .service
            .exec(&self.caller, &id, req, None)
            .await
            .map_err(|e| fail(e.message))?;
        let ok = o.status == cordon_policy::Status::Exited && o.exit_code == Some(0);
        let mut text = o.stdout.trim_end_matches('\n').to_string();
        if !ok {
            text = format!(
                "the tool failed ({}{}): {}",
                serde_json::to_value(o.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                o.exit_code
                    .map(|c| format!(", exit code {c}"))
                    .unwrap_or_default(),
                o.stderr.trim_end()
            );
        }
        let content = vec![ContentBlock::text(text)];
        // A one-shot run: the engine's own account of it (its cgroup where there is one).
        let usage = json!({
            "cpu_ms": o.usage.cpu_user_ms + o.usage.cpu_system_ms,
            "wall_ms": o.usage.wall_ms,
            "peak_memory_bytes": o.usage.peak_memory_bytes,
        });
        Ok((
            if ok {
                CallToolResult::success(content)
            } else {
                CallToolResult::error(content)
            },
            usage,
        ))
    }
}

/// A resource URI's path, for the path rules that name `uri`: `file:///a/b` and
/// `scheme://host/a/b` give `/a/b`; anything else the part after the scheme.
fn uri_path(uri: &str) -> String {
    match uri.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => uri
            .split_once(':')
            .map(|(_, r)| r)
            .unwrap_or(uri)
            .to_string(),
    }
}

/// Rewrites every `uri` (and `uriTemplate`) field in a result to the name the client sees.
fn rewrite_uris(v: &mut Value, f: &dyn Fn(&str) -> String) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), &*x) {
                    ("uri" | "uriTemplate", Value::String(u)) => *x = Value::String(f(u)),
                    _ => rewrite_uris(x, f),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite_uris(x, f)),
        _ => {}
    }
}

fn convert<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, McpError> {
    serde_json::from_value(v).map_err(|e| McpError::internal_error(e.to_string(), None))
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn forward_of(ctx: &RequestContext<RoleServer>) -> Forward {
    let ct = ctx.ct.clone();
    Forward {
        cancelled: Box::pin(async move { ct.cancelled().await }),
        progress: ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t)),
    }
}

impl Gateway {
    /// A client's resource URI → the server and the server's own URI.
    fn resolve_uri(&self, uri: &str) -> Option<(Arc<Upstream>, String)> {
        if self.prefix {
            if let Some((server, rest)) = uri.split_once('+') {
                if let Some(up) = self.upstreams.get(server) {
                    return Some((up.clone(), rest.to_string()));
                }
            }
        }
        // Unprefixed (or a URI a tool result carried as the server wrote it): one server.
        match self.upstreams.values().collect::<Vec<_>>().as_slice() {
            [only] => Some(((*only).clone(), uri.to_string())),
            _ => None,
        }
    }

    /// A client's prompt name → the server and the server's own name.
    fn resolve_prompt(&self, name: &str) -> Option<(Arc<Upstream>, String)> {
        let full = self.internal_tool(name);
        let (server, prompt) = full.split_once('.')?;
        Some((self.upstreams.get(server)?.clone(), prompt.to_string()))
    }

    /// Policy, approval, audit and metrics for a request that is not a tool call.
    async fn admit(
        &self,
        event: &str,
        kind: Kind,
        client: &str,
        name: &str,
        args: &Value,
    ) -> Result<cordon_gateway::Admitted, Refusal> {
        self.metrics.calls.fetch_add(1, Ordering::Relaxed);
        let decided = match self.policy.check_kind(kind, client, name, None, args) {
            Ok(a) => match self.approval(client, name, &a).await {
                Ok(()) => Ok(a),
                Err(r) => Err(r),
            },
            Err(r) => Err(r),
        };
        let mut rec = json!({
            "client": client,
            kind.as_str(): name,
            "args_digest": cordon_gateway::pin::digest(args),
        });
        match &decided {
            Ok(a) => {
                self.metrics.allowed.fetch_add(1, Ordering::Relaxed);
                rec["verdict"] = "allowed".into();
                rec["rules"] = json!(a.rules);
                if a.log_args {
                    rec["args"] = masked(&a.arguments);
                }
            }
            Err(r) => {
                self.metrics.refused(r.reason);
                rec["verdict"] = "refused".into();
                rec["reason"] = r.reason.as_str().into();
                rec["rule"] = r.rule.clone().into();
                rec["message"] = r.message.clone().into();
            }
        }
        self.audit.record(event, rec);
        decided
    }

    fn fail_error(&self, f: Fail) -> McpError {
        match f {
            Fail::Peer(e) => e,
            Fail::Refused(r) if r.reason == Reason::Upstream => {
                McpError::new(ErrorCode(UPSTREAM_FAILED), r.to_string(), None)
            }
            Fail::Refused(r) => self.refusal_error(&r),
        }
    }

    /// Servers that declared `what` in their capabilities, with their peers.
    async fn offering(
        &self,
        what: fn(&ServerCapabilities) -> bool,
        key: &str,
    ) -> Vec<(Arc<Upstream>, rmcp::service::Peer<rmcp::RoleClient>)> {
        let mut out = Vec::new();
        for up in self.upstreams.values() {
            match up.peer(self, key).await {
                Ok((peer, caps)) if what(&caps) => out.push((up.clone(), peer)),
                Ok(_) => {}
                Err(r) => eprintln!("cordon gateway: server {}: {}", up.name, r.message),
            }
        }
        out
    }

    async fn list_resources(&self, client: &str, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for (up, peer) in self.offering(|c| c.resources.is_some(), key).await {
            let Ok(Ok(list)) =
                tokio::time::timeout(Duration::from_secs(30), peer.list_all_resources()).await
            else {
                continue;
            };
            for r in list {
                let mut v = to_value(&r);
                let uri = v["uri"].as_str().unwrap_or("").to_string();
                let full = exposed_uri(true, &up.name, &uri);
                if self.policy.allows_kind(Kind::Resource, &full).is_ok() {
                    v["uri"] = exposed_uri(self.prefix, &up.name, &uri).into();
                    out.push(v);
                }
            }
        }
        self.audit.record(
            "resources/list",
            json!({"client": client, "shown": out.len()}),
        );
        out
    }

    async fn list_templates(&self, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for (up, peer) in self.offering(|c| c.resources.is_some(), key).await {
            let Ok(Ok(list)) =
                tokio::time::timeout(Duration::from_secs(30), peer.list_all_resource_templates())
                    .await
            else {
                continue;
            };
            for t in list {
                let mut v = to_value(&t);
                let tpl = v["uriTemplate"].as_str().unwrap_or("").to_string();
                if self
                    .policy
                    .allows_kind(Kind::Resource, &exposed_uri(true, &up.name, &tpl))
                    .is_ok()
                {
                    v["uriTemplate"] = exposed_uri(self.prefix, &up.name, &tpl).into();
                    out.push(v);
                }
            }
        }
        out
    }

    async fn read_resource(
        &self,
        client: &str,
        key: &str,
        mut req: ReadResourceRequestParams,
        fwd: Forward,
    ) -> Result<ReadResourceResponse, McpError> {
        let not_found = |uri: &str| {
            McpError::new(
                ErrorCode(-32002),
                format!("no resource {uri}"),
                Some(json!({"uri": uri})),
            )
        };
        let (up, uri) = self
            .resolve_uri(&req.uri)
            .ok_or_else(|| not_found(&req.uri))?;
        let full = exposed_uri(true, &up.name, &uri);
        let admitted = self
            .admit(
                "resources/read",
                Kind::Resource,
                client,
                &full,
                &json!({ "uri": uri_path(&uri) }),
            )
            .await
            .map_err(|r| self.resource_refusal(&req.uri, r))?;
        req.uri = checked_uri(&uri, &admitted.arguments);
        let r = up
            .request(
                self,
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(req)),
                fwd,
                key,
            )
            .await
            .map_err(|f| self.fail_error(f))?;
        let mut v = match r {
            ServerResult::ReadResourceResult(r) => to_value(&r),
            ServerResult::InputRequiredResult(r) => {
                return Ok(ReadResourceResponse::InputRequired(r))
            }
            _ => return Err(McpError::internal_error("unexpected answer", None)),
        };
        let (prefix, server) = (self.prefix, up.name.clone());
        rewrite_uris(&mut v, &|u| exposed_uri(prefix, &server, u));
        Ok(ReadResourceResponse::Complete(convert(v)?))
    }

    /// A refused resource: hidden ones answer like missing ones (-32002).
    fn resource_refusal(&self, uri: &str, r: Refusal) -> McpError {
        match r.reason {
            Reason::NotAllowed | Reason::Denied | Reason::Unknown => {
                let mut e = self.refusal_error(&r);
                e.code = ErrorCode(-32002);
                e.message = format!("no resource {uri} is available ({})", r.message).into();
                e
            }
            _ => self.refusal_error(&r),
        }
    }

    async fn subscribe(
        &self,
        client: &str,
        key: &str,
        session: Option<Arc<ClientSession>>,
        uri: &str,
        on: bool,
    ) -> Result<(), McpError> {
        let (up, inner) = self
            .resolve_uri(uri)
            .ok_or_else(|| McpError::new(ErrorCode(-32002), format!("no resource {uri}"), None))?;
        let full = exposed_uri(true, &up.name, &inner);
        let event = if on {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        self.admit(
            event,
            Kind::Resource,
            client,
            &full,
            &json!({ "uri": uri_path(&inner) }),
        )
        .await
        .map_err(|r| self.resource_refusal(uri, r))?;
        let req = if on {
            ClientRequest::SubscribeRequest(SubscribeRequest::new(SubscribeRequestParams::new(
                inner.clone(),
            )))
        } else {
            ClientRequest::UnsubscribeRequest(rmcp::model::UnsubscribeRequest::new(
                UnsubscribeRequestParams::new(inner.clone()),
            ))
        };
        let never = Forward {
            cancelled: Box::pin(std::future::pending()),
            progress: None,
        };
        up.request(self, req, never, key)
            .await
            .map_err(|f| self.fail_error(f))?;
        if let Some(s) = session {
            if let Ok(mut m) = s.subscribed.lock() {
                if on {
                    m.insert((up.name.clone(), inner));
                } else {
                    m.remove(&(up.name.clone(), inner));
                }
            }
        }
        Ok(())
    }

    async fn list_prompts(&self, client: &str, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for (up, peer) in self.offering(|c| c.prompts.is_some(), key).await {
            let Ok(Ok(list)) =
                tokio::time::timeout(Duration::from_secs(30), peer.list_all_prompts()).await
            else {
                continue;
            };
            for p in list {
                let full = format!("{}.{}", up.name, p.name);
                if self.policy.allows_kind(Kind::Prompt, &full).is_ok() {
                    let mut v = to_value(&p);
                    if self.prefix {
                        v["name"] = full.into();
                    }
                    out.push(v);
                }
            }
        }
        self.audit.record(
            "prompts/list",
            json!({"client": client, "shown": out.len()}),
        );
        out
    }

    async fn get_prompt(
        &self,
        client: &str,
        key: &str,
        mut req: GetPromptRequestParams,
        fwd: Forward,
    ) -> Result<GetPromptResponse, McpError> {
        let unknown =
            |name: &str| McpError::invalid_params(format!("no prompt named {name}"), None);
        let (up, prompt) = self
            .resolve_prompt(&req.name)
            .ok_or_else(|| unknown(&req.name))?;
        let full = format!("{}.{prompt}", up.name);
        let args = Value::Object(req.arguments.clone().unwrap_or_default());
        let admitted = self
            .admit("prompts/get", Kind::Prompt, client, &full, &args)
            .await
            .map_err(|r| match r.reason {
                Reason::NotAllowed | Reason::Denied | Reason::Unknown => {
                    let mut e = self.refusal_error(&r);
                    e.code = ErrorCode::INVALID_PARAMS;
                    e.message =
                        format!("no prompt named {} is available ({})", req.name, r.message).into();
                    e
                }
                _ => self.refusal_error(&r),
            })?;
        req.name = prompt;
        if let Value::Object(m) = admitted.arguments {
            if req.arguments.is_some() {
                req.arguments = Some(m);
            }
        }
        let r = up
            .request(
                self,
                ClientRequest::GetPromptRequest(GetPromptRequest::new(req)),
                fwd,
                key,
            )
            .await
            .map_err(|f| self.fail_error(f))?;
        let mut v = match r {
            ServerResult::GetPromptResult(r) => to_value(&r),
            ServerResult::InputRequiredResult(r) => return Ok(GetPromptResponse::InputRequired(r)),
            _ => return Err(McpError::internal_error("unexpected answer", None)),
        };
        let (prefix, server) = (self.prefix, up.name.clone());
        rewrite_uris(&mut v, &|u| exposed_uri(prefix, &server, u));
        Ok(GetPromptResponse::Complete(convert(v)?))
    }

    async fn complete(
        &self,
        client: &str,
        key: &str,
        req: CompleteRequestParams,
    ) -> Result<CompleteResult, McpError> {
        let mut v = to_value(&req);
        let (up, kind, full) = match v["ref"]["type"].as_str() {
            Some("ref/prompt") => {
                let name = v["ref"]["name"].as_str().unwrap_or("").to_string();
                let (up, p) = self.resolve_prompt(&name).ok_or_else(|| {
                    McpError::invalid_params(format!("no prompt named {name}"), None)
                })?;
                v["ref"]["name"] = p.clone().into();
                let full = format!("{}.{p}", up.name);
                (up, Kind::Prompt, full)
            }
            _ => {
                let uri = v["ref"]["uri"].as_str().unwrap_or("").to_string();
                let (up, inner) = self.resolve_uri(&uri).ok_or_else(|| {
                    McpError::invalid_params(format!("no resource template {uri}"), None)
                })?;
                v["ref"]["uri"] = inner.clone().into();
                let full = exposed_uri(true, &up.name, &inner);
                (up, Kind::Resource, full)
            }
        };
        // Completion reveals names, not contents: the allowlist and the audit, no arguments.
        if let Err(r) = self.policy.allows_kind(kind, &full) {
            self.audit.record(
                "completion/complete",
                json!({"client": client, kind.as_str(): full, "verdict": "refused", "reason": r.reason.as_str(), "rule": r.rule}),
            );
            let mut e = self.refusal_error(&r);
            e.code = ErrorCode::INVALID_PARAMS;
            return Err(e);
        }
        self.audit.record(
            "completion/complete",
            json!({"client": client, kind.as_str(): full, "verdict": "allowed"}),
        );
        let never = Forward {
            cancelled: Box::pin(std::future::pending()),
            progress: None,
        };
        let req: CompleteRequestParams = convert(v)?;
        match up
            .request(
                self,
                ClientRequest::CompleteRequest(CompleteRequest::new(req)),
                never,
                key,
            )
            .await
            .map_err(|f| self.fail_error(f))?
        {
            ServerResult::CompleteResult(r) => Ok(r),
            _ => Err(McpError::internal_error("unexpected answer", None)),
        }
    }

    /// `logging/setLevel`: the session's own level, which the gateway applies to the
    /// messages it passes to that session; upstream, each server that logs gets the most
    /// verbose level a session it serves asked for, so every session gets what it asked for
    /// and no more.
    async fn set_level(
        &self,
        client: &str,
        session: Option<Arc<ClientSession>>,
        req: SetLevelRequestParams,
    ) {
        self.audit.record(
            "logging/setLevel",
            json!({"client": client, "level": to_value(&req.level)}),
        );
        let key = match &session {
            Some(s) => {
                if let Ok(mut l) = s.level.lock() {
                    *l = Some(req.level);
                }
                s.key.clone()
            }
            None => FULL.to_string(),
        };
        let mut req = req;
        for (_, s) in self.relay.sessions_of(&key) {
            if let Some(l) = s.level.lock().ok().and_then(|l| *l) {
                if (l as u8) < (req.level as u8) {
                    req.level = l;
                }
            }
        }
        for (up, _) in self.offering(|c| c.logging.is_some(), &key).await {
            let never = Forward {
                cancelled: Box::pin(std::future::pending()),
                progress: None,
            };
            #[allow(deprecated)]
            let r = ClientRequest::SetLevelRequest(rmcp::model::SetLevelRequest::new(req.clone()));
            if let Err(Fail::Refused(r)) = up.request(self, r, never, &key).await {
                eprintln!(
                    "cordon gateway: server {}: logging/setLevel: {}",
                    up.name, r.message
                );
            }
        }
    }

    /// A server's request to the client, after the policy: to the session with a call in
    /// flight at that server (or any) that declared the capability.
    #[allow(clippy::too_many_arguments)]
    async fn to_client(
        &self,
        server: &str,
        key: &str,
        event: &str,
        kind: Option<Kind>,
        declared: fn(&rmcp::model::ClientCapabilities) -> bool,
        args: Value,
        req: ServerRequest,
    ) -> Result<ClientResult, McpError> {
        let Some((session, origin)) = self.relay.target(server, key, declared) else {
            self.audit.record(
                event,
                json!({"server": server, "verdict": "refused", "reason": "no_client", "message": "no client of the gateway declared the capability"}),
            );
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("{event}: no client of the gateway declared this capability"),
                None,
            ));
        };
        if let Some(kind) = kind {
            self.admit(event, kind, &session.client, server, &args)
                .await
                .map_err(|r| self.refusal_error(&r))?;
        } else {
            self.audit.record(
                event,
                json!({"server": server, "client": session.client, "verdict": "allowed"}),
            );
        }
        let mut req = req;
        if let Some(id) = origin {
            use rmcp::model::GetExtensions;
            req.extensions_mut().insert(OriginatingRequestId(id));
        }
        session.peer.send_request(req).await.map_err(|e| match e {
            rmcp::ServiceError::McpError(e) => e,
            e => McpError::internal_error(format!("the client did not answer: {e}"), None),
        })
    }

    async fn relay_sampling(
        &self,
        server: &str,
        key: &str,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, McpError> {
        let args = to_value(&params);
        let req = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self
            .to_client(
                server,
                key,
                "sampling/createMessage",
                Some(Kind::Sampling),
                |c| c.sampling.is_some(),
                args,
                req,
            )
            .await?
        {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => Err(McpError::internal_error(
                "the client answered something else",
                None,
            )),
        }
    }

    async fn relay_elicitation(
        &self,
        server: &str,
        key: &str,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, McpError> {
        let args = to_value(&params);
        let req = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self
            .to_client(
                server,
                key,
                "elicitation/create",
                Some(Kind::Elicitation),
                |c| c.elicitation.is_some(),
                args,
                req,
            )
            .await?
        {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => Err(McpError::internal_error(
                "the client answered something else",
                None,
            )),
        }
    }

    async fn relay_roots(&self, server: &str, key: &str) -> Result<ListRootsResult, McpError> {
        #[allow(deprecated)]
        let req = ServerRequest::ListRootsRequest(ListRootsRequest {
            method: Default::default(),
            extensions: Default::default(),
        });
        match self
            .to_client(
                server,
                key,
                "roots/list",
                None,
                |c| c.roots.is_some(),
                Value::Null,
                req,
            )
            .await?
        {
            ClientResult::ListRootsResult(r) => Ok(r),
            _ => Err(McpError::internal_error(
                "the client answered something else",
                None,
            )),
        }
    }
}

/// A `file://` URI whose path a rule normalised is forwarded in that form: the server reads
/// exactly what was checked.
fn checked_uri(uri: &str, admitted: &Value) -> String {
    match (uri.strip_prefix("file://"), admitted["uri"].as_str()) {
        (Some(_), Some(path)) => format!("file://{path}"),
        _ => uri.to_string(),
    }
}

/// Forgets a session's relay entry when its handler goes away.
struct SessionSlot {
    relay: Arc<Relay>,
    id: std::sync::OnceLock<u64>,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if let Some(id) = self.id.get() {
            self.relay.remove(*id);
        }
    }
}

/// One MCP session's handler.
#[derive(Clone)]
pub struct GatewayMcp {
    gw: Arc<Gateway>,
    /// stdio: the one local client.
    local: bool,
    session: Arc<SessionSlot>,
}

impl GatewayMcp {
    pub fn new(gw: Arc<Gateway>, local: bool) -> GatewayMcp {
        let session = Arc::new(SessionSlot {
            relay: gw.relay.clone(),
            id: Default::default(),
        });
        GatewayMcp { gw, local, session }
    }

    fn client(&self, ctx: &RequestContext<RoleServer>) -> Result<String, McpError> {
        if self.local {
            return Ok("stdio".into());
        }
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .map(|c| c.key_id.clone())
            .ok_or_else(|| McpError::invalid_request("unauthenticated", None))
    }

    fn this_session(&self) -> Option<Arc<ClientSession>> {
        self.gw.relay.get(*self.session.id.get()?)
    }

    /// The key of the upstream sessions this session uses (its declared capabilities).
    fn key(&self) -> String {
        self.this_session()
            .map(|s| s.key.clone())
            .unwrap_or_else(|| FULL.to_string())
    }
}

impl ServerHandler for GatewayMcp {
    fn get_info(&self) -> InitializeResult {
        let caps: ServerCapabilities = serde_json::from_value(json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "completions": {},
            "logging": {},
        }))
        .unwrap_or_default();
        InitializeResult::new(caps)
            .with_server_info(Implementation::new("cordon-gateway", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "cordon gateway: tools, prompts and resources of several servers, named server.tool, \
                 server.prompt and server+uri. Each call is checked against the operator's rules; \
                 a refused call's error says which rule refused it and why.",
            )
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let client = self.client(&context)?;
        if self.session.id.get().is_none() {
            let id = self.gw.relay.add(ClientSession {
                client,
                peer: context.peer.clone(),
                caps: request.capabilities.clone(),
                key: caps_key(&request.capabilities),
                level: Default::default(),
                subscribed: Default::default(),
            });
            let _ = self.session.id.set(id);
            // The upstream sessions of its capability set start now, not at its first call.
            let (gw, key) = (self.gw.clone(), caps_key(&request.capabilities));
            tokio::spawn(async move {
                for up in gw.upstreams.values() {
                    if let Err(e) = up.ensure(&gw, &key).await {
                        eprintln!("cordon gateway: server {}: {e}", up.name);
                    }
                }
            });
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let client = self.client(&context)?;
        let cursor = cursor_of(&request)?;
        let all = self.gw.list(&client, &self.key()).await;
        let (page, next) = page(all, cursor, self.gw.page_size)?;
        let mut r = ListToolsResult::with_all_items(page);
        r.next_cursor = next;
        Ok(r)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let client = self.client(&context)?;
        let fwd = forward_of(&context);
        let mark = self.session.id.get().map(|s| (*s, context.id.clone()));
        self.gw.call(&client, &self.key(), request, fwd, mark).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let client = self.client(&context)?;
        let cursor = cursor_of(&request)?;
        let all = self.gw.list_resources(&client, &self.key()).await;
        let (page, next) = page(all, cursor, self.gw.page_size)?;
        convert(json!({ "resources": page, "nextCursor": next }))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.client(&context)?;
        let cursor = cursor_of(&request)?;
        let all = self.gw.list_templates(&self.key()).await;
        let (page, next) = page(all, cursor, self.gw.page_size)?;
        convert(json!({ "resourceTemplates": page, "nextCursor": next }))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let client = self.client(&context)?;
        let fwd = forward_of(&context);
        self.gw
            .read_resource(&client, &self.key(), request, fwd)
            .await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let client = self.client(&context)?;
        self.gw
            .subscribe(
                &client,
                &self.key(),
                self.this_session(),
                &request.uri,
                true,
            )
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let client = self.client(&context)?;
        self.gw
            .subscribe(
                &client,
                &self.key(),
                self.this_session(),
                &request.uri,
                false,
            )
            .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let client = self.client(&context)?;
        let cursor = cursor_of(&request)?;
        let all = self.gw.list_prompts(&client, &self.key()).await;
        let (page, next) = page(all, cursor, self.gw.page_size)?;
        convert(json!({ "prompts": page, "nextCursor": next }))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let client = self.client(&context)?;
        let fwd = forward_of(&context);
        self.gw.get_prompt(&client, &self.key(), request, fwd).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let client = self.client(&context)?;
        self.gw.complete(&client, &self.key(), request).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let client = self.client(&context)?;
        self.gw
            .set_level(&client, self.this_session(), request)
            .await;
        Ok(())
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        // The upstream sessions of this capability set declared `roots` as this client did.
        let key = self.key();
        for up in self.gw.upstreams.values() {
            if let Ok((peer, _)) = up.peer(&self.gw, &key).await {
                let _ = peer.notify_roots_list_changed().await;
            }
        }
    }
}

/// A list request's cursor: one the gateway issued (`page_size`-sized pages of the merged,
/// allowlisted list across its servers; each server's own pages are followed to the end).
fn cursor_of(request: &Option<PaginatedRequestParams>) -> Result<usize, McpError> {
    let Some(c) = request.as_ref().and_then(|r| r.cursor.as_deref()) else {
        return Ok(0);
    };
    c.strip_prefix("cordon-gw:")
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| McpError::invalid_params(format!("invalid cursor {c:?}"), None))
}

/// One page of `all` from `offset`, and the cursor of the next when there is more.
fn page<T>(all: Vec<T>, offset: usize, size: usize) -> Result<(Vec<T>, Option<String>), McpError> {
    if offset > all.len() {
        return Err(McpError::invalid_params(
            "invalid cursor (past the end of the list)",
            None,
        ));
    }
    let size = size.max(1);
    let end = offset.saturating_add(size).min(all.len());
    let next = (end < all.len()).then(|| format!("cordon-gw:{end}"));
    Ok((all.into_iter().skip(offset).take(size).collect(), next))
}

/// Serves the gateway on stdin/stdout until the client goes away.
pub async fn serve_stdio(gw: Arc<Gateway>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let (input, output) = rmcp::transport::stdio_pipes();
    let transport = crate::mcp::framing::LineTransport::new(input, output);
    let running = GatewayMcp::new(gw, true)
        .serve(transport)
        .await
        .map_err(|e| e.to_string())?;
    let _ = running.waiting().await;
    Ok(())
}

/// `GET /approvals`: the calls waiting for a person.
async fn list_approvals(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
) -> axum::Json<Value> {
    let waiting: Vec<Approval> = gw
        .state
        .approvals()
        .into_iter()
        .filter(|a| a.answer == Answer::Pending)
        .collect();
    axum::Json(json!({ "approvals": waiting }))
}

/// `POST /approvals/{id}` (and `/v1/gateway/approvals/{id}`) `{"approve": bool,
/// "args_digest": "…", "reason": "…"}`: answers a held call.
async fn answer_approval(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    caller: Option<axum::Extension<Caller>>,
    body: Result<axum::Json<state::ApprovalAnswer>, axum::extract::rejection::JsonRejection>,
) -> Result<axum::Json<Value>, crate::ApiError> {
    let axum::Json(body) = body.map_err(|e| crate::ApiError::bad_request(format!("body: {e}")))?;
    if body.approve && body.args_digest.is_none() {
        return Err(crate::ApiError::bad_request(
            "args_digest: a grant names the digest of the arguments it approves",
        ));
    }
    let by = caller.map(|c| c.0.key_id).unwrap_or_default();
    let a = gw.state.answer(&id, &body, &by)?;
    gw.audit.record(
        "approval.http",
        json!({"id": id, "by": by, "approve": body.approve, "reason": a.reason}),
    );
    Ok(axum::Json(json!({ "id": id, "answer": a.answer })))
}

/// `GET /v1/gateway/approvals`: this gateway's held calls and history, in the shape the
/// server's `GET /v1/gateway/approvals` gives for every gateway registered with it.
async fn approvals_view(
    axum::extract::State(gw): axum::extract::State<Arc<Gateway>>,
) -> axum::Json<state::ApprovalsView> {
    let reg = state::Registration {
        name: gw.name.clone(),
        config: gw.config_path.display().to_string(),
        state_dir: gw.state.dir.clone(),
        pid: std::process::id(),
    };
    axum::Json(state::ApprovalsView {
        gateways: vec![gw.state.view(reg, true, 50)],
    })
}

/// Checks `Authorization: Bearer KEY` against `cordon serve`'s keys (the same registry).
async fn gateway_auth(
    axum::extract::State(registry): axum::extract::State<Arc<cordon_service::registry::Registry>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let token = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        return crate::ApiError::unauthorized(
            "missing API key: send 'Authorization: Bearer <key>' (a key of `cordon keys create`)",
        )
        .into_response();
    };
    match registry.key_by_hash(&cordon_service::keys::hash(token)) {
        Ok(Some(r)) if !r.revoked => {
            req.extensions_mut().insert(Caller {
                key_id: r.id,
                max_sandboxes: r.max_sandboxes,
            });
            next.run(req).await
        }
        Ok(_) => crate::ApiError::unauthorized("invalid or revoked API key").into_response(),
        Err(e) => crate::ApiError(e).into_response(),
    }
}

/// The gateway over streamable HTTP: `/mcp` behind the API keys of `cordon serve`,
/// `/metrics` and `/healthz` open.
pub fn http_router(
    gw: Arc<Gateway>,
    registry: Arc<cordon_service::registry::Registry>,
) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let g = gw.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(GatewayMcp::new(g.clone(), false)),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_max_request_body_bytes(crate::mcp::MAX_MESSAGE),
    );
    let mcp = axum::Router::new()
        .fallback_service(mcp)
        .layer(axum::middleware::from_fn(crate::mcp::guard_json_rpc))
        .layer(axum::middleware::from_fn_with_state(
            registry.clone(),
            gateway_auth,
        ));
    let console = Arc::new(crate::console::GatewayConsole::new(registry.clone()));
    let approvals = axum::Router::new()
        .route("/approvals", axum::routing::get(list_approvals))
        .route("/approvals/{id}", axum::routing::post(answer_approval))
        .route("/v1/gateway/approvals", axum::routing::get(approvals_view))
        .route(
            "/v1/gateway/approvals/{id}",
            axum::routing::post(answer_approval),
        )
        .with_state(gw.clone())
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            crate::console::gateway_admin_auth,
        ));
    let m = gw.clone();
    axum::Router::new()
        .merge(approvals)
        .merge(crate::console::gateway_router(console))
        .nest_service("/mcp", mcp)
        .route(
            "/metrics",
            axum::routing::get(move || {
                let m = m.clone();
                async move { m.metrics.render() }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
}

/// Serves the gateway over HTTP until SIGINT/SIGTERM.
pub async fn serve_http(
    gw: Arc<Gateway>,
    registry: Arc<cordon_service::registry::Registry>,
    listen: std::net::SocketAddr,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    ready(addr);
    crate::http_serve::serve(
        listener,
        http_router(gw, registry),
        crate::http_serve::terminate_or_interrupt(),
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: Value) -> rmcp::model::ClientCapabilities {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn clients_that_declared_the_same_relayed_capabilities_share_an_upstream_session() {
        let a = caps(json!({"elicitation": {"form": {}}, "experimental": {"x": {}}}));
        let b = caps(json!({"elicitation": {"form": {}}}));
        let none = caps(json!({}));
        assert_eq!(caps_key(&a), caps_key(&b));
        assert_ne!(caps_key(&a), caps_key(&none));
        assert_eq!(caps_key(&none), "{}");
        let all = caps(
            json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {"listChanged": true}}),
        );
        assert_eq!(caps_key(&all), FULL);
    }

    #[test]
    fn lists_come_in_pages_with_cursors_only_the_gateway_issues() {
        let (p, next) = page((0..11).collect::<Vec<_>>(), 0, 5).unwrap_or_default();
        assert_eq!(
            (p, next.as_deref()),
            (vec![0, 1, 2, 3, 4], Some("cordon-gw:5"))
        );
        let req = |c: &str| Some(PaginatedRequestParams::default().with_cursor(Some(c.into())));
        let off = cursor_of(&req("cordon-gw:10")).unwrap_or_default();
        assert_eq!(
            page((0..11).collect::<Vec<_>>(), off, 5).ok(),
            Some((vec![10], None))
        );
        for forged in ["4", "cordon-gw:x", "cordon-gw:-1"] {
            assert!(cursor_of(&req(forged)).is_err(), "{forged}");
        }
        assert!(page((0..11).collect::<Vec<_>>(), 12, 5).is_err());
    }
}
