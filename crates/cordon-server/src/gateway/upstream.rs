//! One upstream MCP server: a command run as a persistent cordon sandbox (through the service
//! layer), spoken to over its stdin/stdout; started at launch, restarted after a crash or a
//! hang, its tool definitions compared with their pins. Requests are forwarded with the
//! client's progress routed back and its cancellation passed on; an error the server answers
//! itself goes back as it is, a server that breaks is restarted.
//!
//! A server gets one session per distinct set of client capabilities the gateway relays
//! (sampling, elicitation, roots), declaring upstream exactly what its clients declared: a
//! server that offers something only to capable clients shows each client what it would show
//! it directly. The session that declares everything the gateway can relay ([`FULL`]) starts
//! with the gateway and is the one pinned; another session's tool is approved only when the
//! full session shows it with the same definition and that definition is approved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cordon_gateway::carve::{carve, DeniedPath};
use cordon_gateway::config::ServerConfig;
use cordon_gateway::pin::{compare, tool_digest, PinFile, ServerPin};
use cordon_gateway::{Reason, Refusal};
use cordon_policy::profile::{Bind, EnvEntry};
use cordon_policy::Profile;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam,
    ClientRequest, ProgressToken, ServerCapabilities, ServerResult, Tool,
};
use rmcp::service::{Peer, RunningService};
use rmcp::{ErrorData as McpError, RoleClient, RoleServer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::relay::{Relay, UpstreamClient};
use super::Gateway;

/// Why a forwarded request has no result.
pub(super) enum Fail {
    /// The gateway refused it, or the server failed (crashed, hung, went away).
    Refused(Refusal),
    /// The server answered with an error of its own: passed to the client as it is.
    Peer(McpError),
}

impl From<Refusal> for Fail {
    fn from(r: Refusal) -> Fail {
        Fail::Refused(r)
    }
}

/// Where a forwarded request's progress goes, and what ends it early.
pub(super) struct Forward {
    /// Resolves when the client cancels the request.
    pub cancelled: futures::future::BoxFuture<'static, ()>,
    /// The client's peer and its progress token, when it sent one.
    pub progress: Option<(Peer<RoleServer>, ProgressToken)>,
}

const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a starting server may take to answer `initialize` and `tools/list`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed start, calls and listings do not wait for another attempt this long.
const RETRY_AFTER_FAILED_START: Duration = Duration::from_secs(30);
/// How often, at most, a server's sandbox processes are rescanned after calls.
const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// A sandbox profile from a server's or script tool's settings: the profile (file or
/// built-in) with the gateway's binds and env added, then carved for the path rules' denied
/// globs as a whole — binds the profile file brought in as much as the gateway's own, its
/// workspace and the system view. What the sandbox cannot see, no symlink can reach; a mount
/// that cannot be carved refuses the server, naming the mount and the rule.
pub(super) fn build_profile(
    name: Option<&str>,
    ro: &[String],
    rw: &[String],
    env: &[String],
    base: &Path,
    denied: &[DeniedPath],
) -> Result<Profile, String> {
    let name = name.unwrap_or("default");
    let mut p = if name.contains('/') || name.ends_with(".toml") {
        let path = if Path::new(name).is_absolute() {
            PathBuf::from(name)
        } else {
            base.join(name)
        };
        Profile::load(&path).map_err(|e| e.to_string())?
    } else {
        Profile::resolve(name).map_err(|e| e.to_string())?
    };
    for (list, writable) in [(ro, false), (rw, true)] {
        for spec in list {
            p.binds
                .push(Bind::parse(spec, writable).map_err(|e| e.to_string())?);
        }
    }
    for e in env {
        p.env.push(EnvEntry::parse(e).map_err(|e| e.to_string())?);
    }
    let system = cordon_service::host_system_paths(p.system);
    for note in carve(&mut p, denied, &system).map_err(|e| e.to_string())? {
        eprintln!("cordon gateway: {note}");
    }
    p.validate().map_err(|e| e.to_string())?;
    Ok(p)
}

fn file_digest(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
}

/// The digest of what a server runs: its command, the digest of every file its command line
/// names (the executable, found on the sandbox's PATH, and its script), and its profile.
fn runs_digest(argv: &[String], profile: &Profile) -> String {
    let mut files = BTreeMap::new();
    for (i, a) in argv.iter().enumerate() {
        let candidates: Vec<PathBuf> = if i == 0 && !a.contains('/') {
            [
                "/usr/local/bin",
                "/usr/bin",
                "/bin",
                "/usr/local/sbin",
                "/usr/sbin",
                "/sbin",
            ]
            .iter()
            .map(|d| Path::new(d).join(a))
            .collect()
        } else {
            vec![PathBuf::from(a)]
        };
        if let Some((p, d)) = candidates
            .iter()
            .find_map(|p| file_digest(p).map(|d| (p.clone(), d)))
        {
            files.insert(p.display().to_string(), d);
        }
    }
    cordon_gateway::pin::digest(&json!({
        "command": argv,
        "files": files,
        "profile": serde_json::to_value(profile).unwrap_or(Value::Null),
    }))
}

/// The client of `url` servers: rustls (ring) with the system's roots and, for a server with
/// `ca = "…"`, that file's certificates too. Redirects are not followed: a POST redirected
/// elsewhere would replay the session to another host.
fn http_client(ca: Option<&Path>) -> Result<reqwest::Client, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    // A system without a CA bundle still serves `ca` servers and plain http.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(ca) = ca {
        let certs = CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("cannot read {}: {e}", ca.display()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{} is not a PEM certificate file: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no PEM certificate", ca.display()));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("{}: a certificate is not usable: {e}", ca.display()))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| format!("HTTP client: {}", causes(&e)))
}

/// An error and its causes, each said once: a refused certificate sits several layers below
/// the transport's "initialize failed".
fn causes(e: &dyn std::error::Error) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !out.iter().any(|o| o.contains(&text)) {
            out.push(text);
        }
        cur = err.source();
    }
    out.join(": ")
}

/// The capabilities of every relayable kind, as the gateway declares them when it declares
/// all (the pinned session's key; see [`caps_key`]).
pub(super) const FULL: &str =
    r#"{"elicitation":{"form":{}},"roots":{"listChanged":true},"sampling":{}}"#;

/// The key of a session upstream: the part of a client's capabilities the gateway relays
/// (sampling, elicitation, roots), as JSON. Clients with equal keys share a session.
pub(super) fn caps_key(caps: &rmcp::model::ClientCapabilities) -> String {
    let all = serde_json::to_value(caps).unwrap_or(Value::Null);
    let mut keep = serde_json::Map::new();
    for k in ["elicitation", "roots", "sampling"] {
        if let Some(v) = all.get(k).filter(|v| !v.is_null()) {
            keep.insert(k.to_string(), v.clone());
        }
    }
    Value::Object(keep).to_string()
}

pub(super) struct Def {
    pub validator: Option<Arc<cordon_gateway::jsonschema::Validator>>,
}

struct Conn {
    client: RunningService<RoleClient, UpstreamClient>,
    /// `None`: a remote `url` server (not sandboxed by cordon).
    sandbox: Option<String>,
    seen: ServerPin,
    tools: BTreeMap<String, (Tool, Option<Arc<cordon_gateway::jsonschema::Validator>>)>,
    /// The host pids of its sandbox's processes, as last scanned: read around each call.
    processes: Arc<std::sync::Mutex<Vec<i32>>>,
}

pub(super) struct Upstream {
    pub name: String,
    /// A remote streamable-HTTP server instead of a command.
    url: Option<String>,
    /// The HTTP(S) client of a `url` server.
    http: Option<reqwest::Client>,
    argv: Vec<String>,
    cwd: Option<String>,
    profile: Profile,
    runs: String,
    pin: Option<String>,
    call_timeout: Duration,
    /// Its sessions, by the key of the capabilities they declared ([`caps_key`]).
    conns: tokio::sync::Mutex<BTreeMap<String, Conn>>,
    /// When the sandbox's processes were last scanned.
    scanned: std::sync::Mutex<Option<std::time::Instant>>,
    /// The last failed start: when, and why.
    failed: std::sync::Mutex<Option<(std::time::Instant, String)>>,
    relay: Arc<Relay>,
}

impl Upstream {
    pub fn new(
        name: &str,
        cfg: &ServerConfig,
        base: &Path,
        denied: Vec<DeniedPath>,
        relay: Arc<Relay>,
    ) -> Result<Upstream, String> {
        let http = match &cfg.url {
            Some(u) => {
                eprintln!(
                    "cordon gateway: server {name} ({u}) is remote: its calls are checked and recorded, but cordon does not sandbox it"
                );
                let ca = cfg.ca.as_ref().map(|c| {
                    if c.is_absolute() {
                        c.clone()
                    } else {
                        base.join(c)
                    }
                });
                Some(http_client(ca.as_deref()).map_err(|e| format!("servers.{name}.ca: {e}"))?)
            }
            None => None,
        };
        let argv = cfg.command.clone().unwrap_or_default();
        let profile = build_profile(
            cfg.profile.as_deref(),
            &cfg.ro,
            &cfg.rw,
            &cfg.env,
            base,
            &denied,
        )
        .map_err(|e| format!("servers.{name}: {e}"))?;
        let call_timeout = match &cfg.call_timeout {
            Some(t) => cordon_policy::units::parse_duration(t)
                .map_err(|e| format!("servers.{name}.call_timeout: {e}"))?,
            None => DEFAULT_CALL_TIMEOUT,
        };
        Ok(Upstream {
            name: name.to_string(),
            url: cfg.url.clone(),
            http,
            runs: match &cfg.url {
                Some(u) => cordon_gateway::pin::digest(&json!({ "url": u })),
                None => runs_digest(&argv, &profile),
            },
            argv,
            cwd: cfg.cwd.clone(),
            profile,
            pin: cfg.pin.clone(),
            call_timeout,
            conns: Default::default(),
            scanned: Default::default(),
            failed: Default::default(),
            relay,
        })
    }

    /// A `url` server: checked and recorded, but not sandboxed by cordon.
    pub fn is_remote(&self) -> bool {
        self.url.is_some()
    }

    fn fail(&self, message: String) -> Refusal {
        Refusal {
            reason: Reason::Upstream,
            rule: format!("servers.{}", self.name),
            message,
            retry_after: None,
        }
    }

    /// Starts the server's session for the capability set `key` if it is not running (and
    /// the pinned one first: another session's tools are approved against it).
    pub async fn ensure(&self, gw: &Gateway, key: &str) -> Result<(), String> {
        if key != FULL {
            Box::pin(self.ensure(gw, FULL)).await?;
        }
        let mut conns = self.conns.lock().await;
        if conns.get(key).is_some_and(|c| !c.client.is_closed()) {
            return Ok(());
        }
        if let Some(old) = conns.remove(key) {
            if let Some(id) = &old.sandbox {
                let _ = gw.service.delete(&gw.caller, id).await;
            }
        }
        if let Ok(f) = self.failed.lock() {
            if let Some((at, why)) = f.as_ref() {
                let left = RETRY_AFTER_FAILED_START.saturating_sub(at.elapsed());
                if !left.is_zero() {
                    return Err(format!(
                        "{why} (next start attempt in {} s)",
                        left.as_secs() + 1
                    ));
                }
            }
        }
        let t0 = std::time::Instant::now();
        let conn = match self.start(gw, key).await {
            Ok(c) => c,
            Err(e) => {
                // Its stderr stays on the operator's console: it may hold anything.
                let brief = e.split("; its stderr:").next().unwrap_or("");
                gw.audit.record(
                    "server.failed",
                    json!({"server": self.name, "error": brief}),
                );
                if let Ok(mut f) = self.failed.lock() {
                    *f = Some((std::time::Instant::now(), e.clone()));
                }
                return Err(e);
            }
        };
        if let Ok(mut f) = self.failed.lock() {
            *f = None;
        }
        gw.audit.record(
            "server.started",
            json!({"server": self.name, "sandbox": conn.sandbox, "start_ms": t0.elapsed().as_secs_f64() * 1000.0, "tools": conn.tools.len(), "client_capabilities": key}),
        );
        if key == FULL {
            self.check_pins(gw, &conn.seen);
        }
        conns.insert(key.to_string(), conn);
        Ok(())
    }

    async fn start(&self, gw: &Gateway, key: &str) -> Result<Conn, String> {
        use rmcp::ServiceExt;
        if let (Some(url), Some(http)) = (&self.url, &self.http) {
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                http.clone(),
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                ),
            );
            let client = match tokio::time::timeout(
                START_TIMEOUT,
                self.handler(key).serve(transport),
            )
            .await
            {
                Err(_) => return Err(format!("{url} did not answer initialize in time")),
                Ok(Err(e)) => {
                    // The transport's error keeps no source chain: a request of our own says
                    // why the connection failed (a refused certificate, a refused port).
                    return Err(match http.get(url.as_str()).send().await {
                        Err(probe) => {
                            let why = causes(&probe);
                            let hint = if why.contains("UnknownIssuer") {
                                " (no CA of the system's roots or of the server's ca file signed it)"
                            } else {
                                ""
                            };
                            format!("{url}: cannot connect: {why}{hint}")
                        }
                        Ok(_) => format!("{url}: initialize failed: {}", causes(&e)),
                    });
                }
                Ok(Ok(c)) => c,
            };
            let tools = tokio::time::timeout(START_TIMEOUT, client.list_all_tools())
                .await
                .map_err(|_| format!("{url} did not answer tools/list in time"))?
                .map_err(|e| format!("{url}: tools/list failed: {}", causes(&e)))?;
            return Ok(self.conn_from(client, None, tools));
        }
        let info = gw
            .service
            .create_with_profile(
                &gw.caller,
                self.profile.clone(),
                Some(cordon_service::types::Amount::Number(
                    gw.service.config().max_ttl.as_secs_f64(),
                )),
                BTreeMap::from([("gateway_server".to_string(), self.name.clone())]),
            )
            .await
            .map_err(|e| format!("cannot create its sandbox: {}", e.message))?;
        let started = async {
            let p = gw
                .service
                .exec_piped(
                    &gw.caller,
                    &info.id,
                    self.argv.clone(),
                    Default::default(),
                    self.cwd.clone(),
                )
                .await
                .map_err(|e| format!("cannot start {}: {}", self.argv[0], e.message))?;
            let stderr = p.stderr.clone();
            let why = |e: String| {
                let tail = stderr.lock().map(|s| s.text().text).unwrap_or_default();
                let tail = tail.trim();
                if tail.is_empty() {
                    e
                } else {
                    format!(
                        "{e}; its stderr: {}",
                        tail.chars()
                            .rev()
                            .take(2000)
                            .collect::<String>()
                            .chars()
                            .rev()
                            .collect::<String>()
                    )
                }
            };
            let client =
                tokio::time::timeout(START_TIMEOUT, self.handler(key).serve((p.stdout, p.stdin)))
                    .await
                    .map_err(|_| why("it did not answer initialize in time".into()))?
                    .map_err(|e| why(format!("initialize failed: {e}")))?;
            let tools = tokio::time::timeout(START_TIMEOUT, client.list_all_tools())
                .await
                .map_err(|_| why("it did not answer tools/list in time".into()))?
                .map_err(|e| why(format!("tools/list failed: {e}")))?;
            Ok::<_, String>((client, tools))
        }
        .await;
        let (client, tools) = match started {
            Ok(x) => x,
            Err(e) => {
                let _ = gw.service.delete(&gw.caller, &info.id).await;
                return Err(e);
            }
        };
        let conn = self.conn_from(client, Some(info.id.clone()), tools);
        if let Ok(pids) = gw.service.sandbox_processes(&gw.caller, &info.id).await {
            if let Ok(mut p) = conn.processes.lock() {
                *p = pids;
            }
        }
        Ok(conn)
    }

    fn handler(&self, key: &str) -> UpstreamClient {
        UpstreamClient {
            server: self.name.clone(),
            key: key.to_string(),
            relay: self.relay.clone(),
        }
    }

    fn conn_from(
        &self,
        client: RunningService<RoleClient, UpstreamClient>,
        sandbox: Option<String>,
        tools: Vec<Tool>,
    ) -> Conn {
        let (seen, defs) = self.defs(tools);
        Conn {
            client,
            sandbox,
            seen,
            tools: defs,
            processes: Default::default(),
        }
    }

    #[allow(clippy::type_complexity)]
    fn defs(
        &self,
        tools: Vec<Tool>,
    ) -> (
        ServerPin,
        BTreeMap<String, (Tool, Option<Arc<cordon_gateway::jsonschema::Validator>>)>,
    ) {
        let mut seen = ServerPin {
            runs: self.runs.clone(),
            tools: BTreeMap::new(),
        };
        let mut defs = BTreeMap::new();
        for t in tools {
            let schema = Value::Object((*t.input_schema).clone());
            seen.tools.insert(
                t.name.to_string(),
                tool_digest(&t.name, t.description.as_deref(), &schema),
            );
            // A schema the validator cannot compile refuses every call (fail closed).
            let v = cordon_gateway::policy::compile_schema(&schema)
                .ok()
                .map(Arc::new);
            if v.is_none() {
                eprintln!(
                    "cordon gateway: server {}: tool {} has an input schema that cannot be compiled; its calls are refused",
                    self.name, t.name
                );
            }
            defs.insert(t.name.to_string(), (t, v));
        }
        (seen, defs)
    }

    /// First sight: recorded. A change: withheld, and written as pending for `approve`.
    fn check_pins(&self, gw: &Gateway, seen: &ServerPin) {
        let mut pins = gw.state.load_pins().unwrap_or_default();
        let before = pins.clone();
        if let Some(p) = &self.pin {
            if seen.digest() != *p {
                pins.pending.insert(self.name.clone(), seen.clone());
                gw.audit.record(
                    "pin.mismatch",
                    json!({"server": self.name, "pinned": p, "seen": seen.digest()}),
                );
                eprintln!(
                    "cordon gateway: server {}: its definitions have digest {}, not the pinned {p}; its tools are withheld",
                    self.name,
                    seen.digest()
                );
            } else {
                pins.pending.remove(&self.name);
            }
        } else {
            match pins.approved.get(&self.name) {
                None => {
                    pins.approved.insert(self.name.clone(), seen.clone());
                    gw.audit.record(
                        "pin.recorded",
                        json!({"server": self.name, "digest": seen.digest(), "tools": seen.tools}),
                    );
                }
                Some(old) => {
                    let c = compare(old, seen);
                    if c.withheld.is_empty() {
                        pins.pending.remove(&self.name);
                    } else {
                        pins.pending.insert(self.name.clone(), seen.clone());
                        gw.audit.record(
                            "pin.changed",
                            json!({"server": self.name, "withheld": c.withheld, "runs_changed": c.runs_changed, "digest": seen.digest()}),
                        );
                        eprintln!(
                            "cordon gateway: server {}: the definitions of {} changed; withheld until `cordon gateway approve {}`",
                            self.name,
                            c.withheld.join(", "),
                            self.name
                        );
                    }
                }
            }
        }
        if pins != before {
            if let Err(e) = gw.state.save_pins(&pins) {
                eprintln!("cordon gateway: pins: {e}");
            }
        }
    }

    fn approved(&self, pins: &PinFile, seen: &ServerPin) -> Vec<String> {
        if let Some(p) = &self.pin {
            let ok =
                seen.digest() == *p || pins.approved.get(&self.name).is_some_and(|a| a == seen);
            return if ok {
                seen.tools.keys().cloned().collect()
            } else {
                Vec::new()
            };
        }
        match pins.approved.get(&self.name) {
            Some(old) => compare(old, seen).approved,
            None => Vec::new(),
        }
    }

    /// The approved tools of the session `key`: in the pinned session, those its pins
    /// approve; in another, those the pinned session shows with the same definition, approved.
    fn approved_in(
        &self,
        pins: &PinFile,
        conns: &BTreeMap<String, Conn>,
        key: &str,
    ) -> Vec<String> {
        let (Some(full), Some(c)) = (conns.get(FULL), conns.get(key)) else {
            return Vec::new();
        };
        let ok = self.approved(pins, &full.seen);
        if key == FULL {
            return ok;
        }
        c.seen
            .tools
            .iter()
            .filter(|(n, d)| ok.contains(n) && full.seen.tools.get(*n) == Some(*d))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The server's approved tools as the session `key` shows them (starting it if it is down).
    pub async fn tools(&self, gw: &Gateway, pins: &PinFile, key: &str) -> Vec<Tool> {
        if let Err(e) = self.ensure(gw, key).await {
            eprintln!("cordon gateway: server {}: {e}", self.name);
            return Vec::new();
        }
        let conns = self.conns.lock().await;
        let Some(c) = conns.get(key) else {
            return Vec::new();
        };
        self.approved_in(pins, &conns, key)
            .iter()
            .filter_map(|n| c.tools.get(n).map(|(t, _)| t.clone()))
            .collect()
    }

    pub async fn definition(
        &self,
        gw: &Gateway,
        pins: &PinFile,
        tool: &str,
        key: &str,
    ) -> Result<Def, Refusal> {
        self.ensure(gw, key)
            .await
            .map_err(|e| self.fail(format!("the server is not running: {e}")))?;
        let conns = self.conns.lock().await;
        let c = conns
            .get(key)
            .ok_or_else(|| self.fail("the server is not running".into()))?;
        let Some((_, v)) = c.tools.get(tool) else {
            return Err(Refusal {
                reason: Reason::Unknown,
                rule: "the gateway".into(),
                message: format!("server {} has no tool {tool}", self.name),
                retry_after: None,
            });
        };
        if !self
            .approved_in(pins, &conns, key)
            .iter()
            .any(|n| n == tool)
        {
            if let Some(p) = &self.pin {
                return Err(Refusal {
                    reason: Reason::Pinned,
                    rule: format!("servers.{}.pin", self.name),
                    message: format!(
                        "server {} runs definitions with digest {}, not the pinned {p}; change the pin or run `cordon gateway approve {}`",
                        self.name,
                        c.seen.digest(),
                        self.name
                    ),
                    retry_after: None,
                });
            }
            return Err(Refusal {
                reason: Reason::Pinned,
                rule: format!("the pin of server {}", self.name),
                message: format!(
                    "the definition of {}.{tool} changed since it was approved; a person must run `cordon gateway approve {}`",
                    self.name, self.name
                ),
                retry_after: None,
            });
        }
        if v.is_none() {
            return Err(Refusal {
                reason: Reason::Schema,
                rule: format!("{}.{tool}'s inputSchema", self.name),
                message: "the tool's input schema cannot be compiled, so no call can be checked"
                    .into(),
                retry_after: None,
            });
        }
        Ok(Def {
            validator: v.clone(),
        })
    }

    /// Forwards one call; a crash or a hang ends the server (it is restarted at the next use)
    /// and this call gets the error.
    ///
    /// With the response comes what the server's sandbox used meanwhile (its processes' CPU,
    /// and the children they reaped; resident memory after the call, its change, and the
    /// processes' peak) — `None` for a remote server, which cordon cannot see. Concurrent
    /// calls to one server share its processes: each sees the others' use too.
    pub async fn call(
        &self,
        gw: &Gateway,
        req: CallToolRequestParams,
        fwd: Forward,
        key: &str,
    ) -> Result<(CallToolResponse, Option<Value>), Fail> {
        let processes = {
            let conns = self.conns.lock().await;
            conns
                .get(key)
                .and_then(|c| c.sandbox.as_ref().map(|_| c.processes.clone()))
        };
        let pids = processes
            .as_ref()
            .and_then(|p| p.lock().ok().map(|g| g.clone()));
        let before = pids.as_deref().map(|p| gw.service.process_usage(p, false));
        let r = self
            .request(
                gw,
                ClientRequest::CallToolRequest(CallToolRequest::new(req)),
                fwd,
                key,
            )
            .await;
        let r = match r {
            Ok(ServerResult::CallToolResult(r)) => CallToolResponse::Complete(r),
            Ok(ServerResult::InputRequiredResult(r)) => CallToolResponse::InputRequired(r),
            Ok(ServerResult::CreateTaskResult(r)) => CallToolResponse::Task(r),
            Ok(_) => {
                return Err(self
                    .fail("the server answered tools/call with another result".into())
                    .into())
            }
            Err(f) => return Err(f),
        };
        let usage = pids.as_deref().zip(before).map(|(pids, before)| {
            let after = gw.service.process_usage(pids, true);
            json!({
                "cpu_ms": after.cpu_ns.saturating_sub(before.cpu_ns) / 1_000_000,
                "rss_bytes": after.rss_bytes,
                "rss_delta_bytes": after.rss_bytes as i64 - before.rss_bytes as i64,
                "peak_rss_bytes": after.peak_rss_bytes,
                "processes": pids.len(),
            })
        });
        Ok((r, usage))
    }

    /// The running server's peer and what it declared (starting it if it is down).
    pub async fn peer(
        &self,
        gw: &Gateway,
        key: &str,
    ) -> Result<(Peer<RoleClient>, ServerCapabilities), Refusal> {
        self.ensure(gw, key)
            .await
            .map_err(|e| self.fail(format!("the server is not running: {e}")))?;
        let conns = self.conns.lock().await;
        let c = conns
            .get(key)
            .ok_or_else(|| self.fail("the server is not running".into()))?;
        let caps = c
            .client
            .peer_info()
            .map(|i| i.capabilities.clone())
            .unwrap_or_default();
        Ok((c.client.peer().clone(), caps))
    }

    /// Forwards one request: its progress goes to the client that asked (under the client's
    /// own token), the client's cancellation is passed on (`notifications/cancelled`, and the
    /// call's answer no longer awaited), an error of the server's own comes back as it is,
    /// and a crash or a hang ends the server (it is restarted at the next use).
    pub async fn request(
        &self,
        gw: &Gateway,
        req: ClientRequest,
        fwd: Forward,
        key: &str,
    ) -> Result<ServerResult, Fail> {
        self.ensure(gw, key)
            .await
            .map_err(|e| self.fail(format!("the server is not running: {e}")))?;
        let peer = {
            let conns = self.conns.lock().await;
            let c = conns
                .get(key)
                .ok_or_else(|| self.fail("the server is not running".into()))?;
            c.client.peer().clone()
        };
        let handle = match peer
            .send_request_with_option(req, rmcp::service::PeerRequestOptions::no_options())
            .await
        {
            Ok(h) => h,
            Err(e) => {
                self.restart(gw, key).await;
                return Err(self
                    .fail(format!("the server failed ({e}); it was restarted"))
                    .into());
            }
        };
        let id = handle.id.clone();
        let _route = fwd.progress.map(|to| {
            self.relay
                .route_progress(&self.name, key, handle.progress_token.clone(), to)
        });
        let answer = tokio::select! {
            r = tokio::time::timeout(self.call_timeout, handle.await_response()) => Some(r),
            _ = fwd.cancelled => None,
        };
        if _route.is_some() {
            // rmcp hands each notification to a task of its own but the answer straight back:
            // progress sent before the answer must reach the client before it, or the client
            // drops it as late. Those tasks already exist; give them a moment to run.
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        match answer {
            Some(Ok(Ok(r))) => Ok(r),
            Some(Ok(Err(rmcp::ServiceError::McpError(e)))) => Err(Fail::Peer(e)),
            None => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the gateway's client".into()),
                    ))
                    .await;
                Err(Refusal {
                    reason: Reason::Cancelled,
                    rule: "the client".into(),
                    message: "the client cancelled the request; the server was told".into(),
                    retry_after: None,
                }
                .into())
            }
            Some(Ok(Err(e))) => {
                self.restart(gw, key).await;
                Err(self
                    .fail(format!(
                        "the server failed during the call ({e}); it was restarted"
                    ))
                    .into())
            }
            Some(Err(_)) => {
                self.restart(gw, key).await;
                Err(self
                    .fail(format!(
                        "the server did not answer within {} s; it was restarted",
                        self.call_timeout.as_secs()
                    ))
                    .into())
            }
        }
    }

    /// Re-reads the server's tools after it said they changed; changed definitions are
    /// withheld until approved, as at a start.
    pub async fn refresh_tools(&self, gw: &Gateway, key: &str) {
        let peer = {
            let conns = self.conns.lock().await;
            match conns.get(key) {
                Some(c) => c.client.peer().clone(),
                None => return,
            }
        };
        let Ok(Ok(tools)) = tokio::time::timeout(START_TIMEOUT, peer.list_all_tools()).await else {
            return;
        };
        let seen = {
            let mut conns = self.conns.lock().await;
            let Some(c) = conns.get_mut(key) else { return };
            let fresh = self.defs(tools);
            c.seen = fresh.0;
            c.tools = fresh.1;
            c.seen.clone()
        };
        if key == FULL {
            self.check_pins(gw, &seen);
        }
    }

    /// Rescans the sandbox's processes (the server may have started some), at most once per
    /// [`RESCAN_EVERY`]: a scan reads every process of the host, and calls come faster.
    pub async fn refresh_processes(&self, gw: &Gateway, key: &str) {
        if let Ok(mut last) = self.scanned.lock() {
            if last.is_some_and(|t| t.elapsed() < RESCAN_EVERY) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let (id, slot) = {
            let conns = self.conns.lock().await;
            match conns.get(key) {
                Some(Conn {
                    sandbox: Some(id),
                    processes,
                    ..
                }) => (id.clone(), processes.clone()),
                _ => return,
            }
        };
        if let Ok(pids) = gw.service.sandbox_processes(&gw.caller, &id).await {
            if let Ok(mut p) = slot.lock() {
                *p = pids;
            }
        }
    }

    async fn restart(&self, gw: &Gateway, key: &str) {
        let old = self.conns.lock().await.remove(key);
        if let Some(c) = old {
            gw.audit.record(
                "server.ended",
                json!({"server": self.name, "sandbox": c.sandbox, "client_capabilities": key}),
            );
            c.client.cancellation_token().cancel();
            if let Some(id) = &c.sandbox {
                let _ = gw.service.delete(&gw.caller, id).await;
            }
        }
        if let Err(e) = self.ensure(gw, key).await {
            eprintln!("cordon gateway: server {}: restart failed: {e}", self.name);
        }
    }

    /// Ends the sessions no client uses any more (but the pinned one): a stdio server's
    /// sandbox each.
    pub async fn reap(&self, gw: &Gateway, in_use: &std::collections::BTreeSet<String>) {
        let idle: Vec<Conn> = {
            let mut conns = self.conns.lock().await;
            let keys: Vec<String> = conns
                .keys()
                .filter(|k| k.as_str() != FULL && !in_use.contains(*k))
                .cloned()
                .collect();
            keys.iter().filter_map(|k| conns.remove(k)).collect()
        };
        for c in idle {
            gw.audit.record(
                "server.ended",
                json!({"server": self.name, "sandbox": c.sandbox, "reason": "no client uses the session"}),
            );
            c.client.cancellation_token().cancel();
            if let Some(id) = &c.sandbox {
                let _ = gw.service.delete(&gw.caller, id).await;
            }
        }
    }

    pub async fn stop(&self, gw: &Gateway) {
        let conns = std::mem::take(&mut *self.conns.lock().await);
        for c in conns.into_values() {
            c.client.cancellation_token().cancel();
            if let Some(id) = &c.sandbox {
                let _ = gw.service.delete(&gw.caller, id).await;
            }
        }
    }
}
