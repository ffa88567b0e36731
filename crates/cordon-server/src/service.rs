//! The service layer: sandboxes, commands, files and one-shot runs, independent of any wire
//! protocol. HTTP (and MCP) are thin front ends over it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cordon_linux::persistent::{ExecSpec, ExitInfo, Sandbox};
use cordon_policy::{
    classify, EndFacts, EnvEntry, ExecFailure, Outcome, OutputCap, ProcessEnd, Profile, Stopped,
    Usage,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use crate::audit::Audit;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::registry::{now, Registry};
use crate::types::*;

/// Who is calling (after authentication).
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub max_sandboxes: u32,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The cordon binary, re-executed as the per-sandbox helper.
    pub helper_exe: PathBuf,
    pub data_dir: PathBuf,
    /// This node's name; sandbox ids carry it so a front door can route.
    pub node: String,
    pub default_ttl: Duration,
    pub max_ttl: Duration,
    pub max_upload: u64,
    pub max_download: u64,
    pub default_exec_timeout: Duration,
    pub max_exec_timeout: Duration,
}

/// A streamed piece of a running command.
#[derive(Debug, Clone)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(Box<Outcome>),
}

/// A command started with `background: true`.
pub struct BgCommand {
    pub id: String,
    pub exec_id: u64,
    pub argv: Vec<String>,
    pub started_at_ms: u64,
    stdin: tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>,
    output: Mutex<(OutputCap, OutputCap)>,
    done: watch::Receiver<Option<Outcome>>,
}

impl BgCommand {
    pub fn info(&self) -> CommandInfo {
        let (out, err) = self
            .output
            .lock()
            .map(|o| (o.0.text().text, o.1.text().text))
            .unwrap_or_default();
        let outcome = self.done.borrow().clone();
        CommandInfo {
            command_id: self.id.clone(),
            cmd: self.argv.clone(),
            running: outcome.is_none(),
            started_at_ms: self.started_at_ms,
            stdout: out,
            stderr: err,
            outcome,
        }
    }
}

/// A sandbox this node is running.
pub struct Live {
    pub id: String,
    pub key_id: String,
    pub sandbox: Arc<Sandbox>,
    pub profile: Profile,
    pub metadata: BTreeMap<String, String>,
    pub created_at: u64,
    pub expires_at: AtomicU64,
    pub commands: Mutex<HashMap<String, Arc<BgCommand>>>,
    pub contexts: crate::kernel::Contexts,
    /// The sandbox's egress proxy (every persistent sandbox has one; it denies everything
    /// until the policy allows something).
    pub egress: Arc<Mutex<Option<cordon_net::EgressProxy>>>,
    pub network: Mutex<cordon_policy::network::NetworkPolicy>,
}

impl Live {
    pub fn info(&self) -> SandboxInfo {
        let l = &self.profile.limits;
        SandboxInfo {
            id: self.id.clone(),
            state: if self.sandbox.is_alive() {
                "running".into()
            } else {
                "failed".into()
            },
            profile: self.profile.name.clone(),
            created_at: self.created_at,
            expires_at: self.expires_at.load(Ordering::SeqCst),
            metadata: self.metadata.clone(),
            enforcement: Some(self.sandbox.enforcement.clone()),
            limits: Some(LimitsView {
                memory_bytes: l.memory,
                cpus: l.cpus,
                pids: l.pids,
                disk_bytes: l.disk,
                output_limit_bytes: l.output_limit,
            }),
            ended_reason: self.sandbox.ended(),
        }
    }
}

pub struct Service {
    pub cfg: Config,
    /// Held for the life of the service: one server per data directory.
    _lock: std::fs::File,
    pub registry: Registry,
    pub audit: Audit,
    pub metrics: Metrics,
    live: RwLock<HashMap<String, Arc<Live>>>,
    /// Creates under way per key id: slots taken but not yet live (see `reserve`).
    pending: Mutex<HashMap<String, usize>>,
}

/// A sandbox slot held by a create under way; given back on drop.
struct Reservation<'a> {
    pending: &'a Mutex<HashMap<String, usize>>,
    key_id: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            if let Some(n) = p.get_mut(&self.key_id) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    p.remove(&self.key_id);
                }
            }
        }
    }
}

fn size(a: &Amount, field: &str) -> Result<u64, ApiError> {
    a.size(field)
}

fn duration(a: &Amount, field: &str) -> Result<Duration, ApiError> {
    a.duration(field)
}

/// A signal by number or name.
pub fn signal_number(a: &Amount) -> Result<i32, ApiError> {
    a.signal()
}

/// Builds a profile from a built-in and the request's overrides.
#[allow(clippy::too_many_arguments)]
pub fn profile_from(
    name: Option<&str>,
    memory: Option<&Amount>,
    cpus: Option<f64>,
    pids: Option<u32>,
    disk: Option<&Amount>,
    timeout: Option<&Amount>,
    env: &BTreeMap<String, String>,
    network: Option<&cordon_policy::network::NetworkPolicy>,
) -> Result<Profile, ApiError> {
    let name = name.unwrap_or("default");
    // Only built-ins: a client must never make the server read a file of its choosing.
    let mut p =
        Profile::builtin(name).map_err(|e| ApiError::bad_request(format!("profile: {e}")))?;
    if let Some(m) = memory {
        p.limits.memory = size(m, "memory")?;
    }
    if let Some(c) = cpus {
        p.limits.cpus = c;
    }
    if let Some(n) = pids {
        p.limits.pids = n;
    }
    if let Some(d) = disk {
        p.limits.disk = size(d, "disk")?;
    }
    if let Some(t) = timeout {
        p.limits.timeout = duration(t, "timeout")?;
    }
    check_env(env)?;
    for (k, v) in env {
        p.env.push(EnvEntry::Set(k.clone(), v.clone()));
    }
    if let Some(n) = network {
        p.network = n.clone();
    }
    p.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(p)
}

/// Takes an exclusive lock on the data directory: a second server on the same registry would
/// reap the first one's sandboxes at start-up.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, ApiError> {
    let f = crate::datadir::open_private(
        &dir.join("lock"),
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true),
    )
    .map_err(|e| ApiError::internal(format!("{}: {e}", dir.join("lock").display())))?;
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(ApiError::conflict(format!(
            "another cordon server is using {}; give each server its own --data-dir",
            dir.display()
        )));
    }
    Ok(f)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Service {
    pub fn new(cfg: Config) -> Result<Arc<Service>, ApiError> {
        if let Some(warning) = crate::datadir::prepare(&cfg.data_dir)
            .map_err(|e| ApiError::internal(format!("data dir {}: {e}", cfg.data_dir.display())))?
        {
            eprintln!("cordon: warning: {warning}");
        }
        let lock = lock_data_dir(&cfg.data_dir)?;
        let registry = Registry::open(&cfg.data_dir.join("cordon.db"))?;
        let audit = Audit::open(&cfg.data_dir.join("audit.jsonl"))
            .map_err(|e| ApiError::internal(format!("audit log: {e}")))?;
        let svc = Arc::new(Service {
            _lock: lock,
            cfg,
            registry,
            audit,
            metrics: Metrics::default(),
            live: RwLock::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        });
        svc.reap_previous_run()?;
        Ok(svc)
    }

    /// Sandboxes a previous server process left in the registry: their helpers exit when the
    /// server's control socket closes, so they are gone or going; make sure, and record it.
    fn reap_previous_run(&self) -> Result<(), ApiError> {
        for row in self.registry.running()? {
            if let Some(pid) = rustix::process::Pid::from_raw(row.helper_pid as i32)
                .filter(|p| p.as_raw_nonzero().get() > 0)
            {
                let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero()))
                    .unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("__sandbox") {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            self.registry.mark_ended(
                &row.id,
                "reaped",
                "the server restarted; the sandbox was killed",
            )?;
            self.audit.record(
                "sandbox.reaped",
                &row.key_id,
                Some(&row.id),
                json!({"reason": "server restart"}),
            );
        }
        Ok(())
    }

    pub fn get_live(&self, caller: &Caller, id: &str) -> Result<Arc<Live>, ApiError> {
        let live = self.live.read().map_err(|_| ApiError::internal("lock"))?;
        match live.get(id) {
            // Another key's sandbox answers 404, so ids cannot be probed.
            Some(l) if l.key_id == caller.key_id => Ok(l.clone()),
            _ => Err(ApiError::not_found(format!("no sandbox '{id}'"))),
        }
    }

    /// Takes one of the caller's sandbox slots, or answers 429 when live sandboxes and creates
    /// under way already fill its quota. Check and take happen under one lock; the slot is
    /// released when the reservation drops, after a successful create has made the sandbox
    /// live, so at no moment is a sandbox counted by neither.
    fn reserve(&self, caller: &Caller) -> Result<Reservation<'_>, ApiError> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| ApiError::internal("lock"))?;
        let creating = pending.get(&caller.key_id).copied().unwrap_or(0);
        if self.count_for(&caller.key_id) + creating >= caller.max_sandboxes as usize {
            self.metrics.deny("sandbox_quota");
            return Err(ApiError {
                code: "quota_exceeded",
                ..ApiError::too_many(
                    format!(
                        "this key may run at most {} sandboxes at once; delete one first",
                        caller.max_sandboxes
                    ),
                    5,
                )
            });
        }
        *pending.entry(caller.key_id.clone()).or_insert(0) += 1;
        Ok(Reservation {
            pending: &self.pending,
            key_id: caller.key_id.clone(),
        })
    }

    pub fn count_for(&self, key_id: &str) -> usize {
        self.live
            .read()
            .map(|l| l.values().filter(|s| s.key_id == key_id).count())
            .unwrap_or(0)
    }

    pub fn by_state(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        if let Ok(l) = self.live.read() {
            for s in l.values() {
                *m.entry(
                    if s.sandbox.is_alive() {
                        "running"
                    } else {
                        "failed"
                    }
                    .to_string(),
                )
                .or_insert(0) += 1;
            }
        }
        m.entry("running".to_string()).or_insert(0);
        m
    }

    async fn create_from(
        self: &Arc<Self>,
        caller: &Caller,
        req: CreateSandbox,
        trusted: Option<Profile>,
    ) -> Result<SandboxInfo, ApiError> {
        let mut profile = profile_from(
            req.profile.as_deref(),
            req.memory.as_ref(),
            req.cpus,
            req.pids,
            req.disk.as_ref(),
            None,
            &req.env,
            req.network.as_ref(),
        )?;
        if let Some(o) = &req.output_limit {
            profile.limits.output_limit = size(o, "output_limit")?;
        }
        if let Some(c) = &req.cpu_time {
            profile.limits.cpu_time = Some(duration(c, "cpu_time")?);
        }
        // A front end's own profile (create_with_profile) replaces the built-in.
        let profile = trusted.unwrap_or(profile);
        profile
            .validate()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let ttl = match &req.ttl {
            Some(t) => duration(t, "ttl")?,
            None => self.cfg.default_ttl,
        };
        if ttl > self.cfg.max_ttl {
            return Err(ApiError::bad_request(format!(
                "ttl: at most {}s",
                self.cfg.max_ttl.as_secs()
            )));
        }
        for (k, v) in &req.metadata {
            if k.chars().count() > METADATA_MAX_KEY || v.chars().count() > METADATA_MAX_VALUE {
                return Err(ApiError::bad_request(format!(
                    "metadata: keys up to {METADATA_MAX_KEY} characters, values up to {METADATA_MAX_VALUE}"
                )));
            }
        }
        // The slot is taken before the first await and given back if anything below fails (or
        // the request is dropped): concurrent creates cannot overshoot the key's quota.
        let slot = self.reserve(caller)?;
        let id = format!("{}-{}", self.cfg.node, crate::keys::random_hex(8));
        let egress: Arc<Mutex<Option<cordon_net::EgressProxy>>> = Arc::new(Mutex::new(None));
        let on_proxy =
            self.egress_starter(&id, &caller.key_id, &profile.network, egress.clone())?;
        let helper = self.cfg.helper_exe.clone();
        let prof = profile.clone();
        let sandbox = tokio::task::spawn_blocking(move || {
            Sandbox::create(&helper, &prof, &BTreeMap::new(), Some(on_proxy))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::new(500, "sandbox_failed", e.to_string()))?;
        let created_at = now();
        let expires_at = created_at + ttl.as_secs();
        let metadata_json = serde_json::to_string(&req.metadata).unwrap_or_default();
        self.registry.insert_sandbox(
            &id,
            &caller.key_id,
            &profile.name,
            &metadata_json,
            created_at,
            expires_at,
            sandbox.helper_pid(),
        )?;
        let live_network = profile.network.clone();
        let live = Arc::new(Live {
            id: id.clone(),
            key_id: caller.key_id.clone(),
            sandbox: Arc::new(sandbox),
            profile,
            metadata: req.metadata,
            created_at,
            expires_at: AtomicU64::new(expires_at),
            commands: Mutex::new(HashMap::new()),
            contexts: Default::default(),
            egress,
            network: Mutex::new(live_network),
        });
        if let Ok(mut l) = self.live.write() {
            l.insert(id.clone(), live.clone());
        }
        // Only now that the sandbox counts as live (see `reserve`).
        drop(slot);
        self.metrics
            .sandboxes_created
            .fetch_add(1, Ordering::Relaxed);
        self.audit.record(
            "sandbox.create",
            &caller.key_id,
            Some(&id),
            json!({"profile": live.profile.name, "ttl_s": ttl.as_secs(), "env_keys": req.env.keys().collect::<Vec<_>>(), "network": live.profile.network.allow}),
        );
        Ok(live.info())
    }

    /// A sandbox of a built-in profile with the request's overrides.
    pub async fn create(
        self: &Arc<Self>,
        caller: &Caller,
        req: CreateSandbox,
    ) -> Result<SandboxInfo, ApiError> {
        self.create_from(caller, req, None).await
    }

    /// A sandbox of a profile the front end built itself from its own trusted configuration
    /// (`cordon mcp`'s command line: a profile file, host mounts, a workspace) — never from a
    /// request, which could name any file. Only the lifetime and labels come from `req`.
    pub async fn create_with_profile(
        self: &Arc<Self>,
        caller: &Caller,
        profile: Profile,
        ttl: Option<Amount>,
        metadata: BTreeMap<String, String>,
    ) -> Result<SandboxInfo, ApiError> {
        let req = CreateSandbox {
            ttl,
            metadata,
            ..Default::default()
        };
        self.create_from(caller, req, Some(profile)).await
    }

    /// The callback that starts a sandbox's egress proxy on the listener its init created;
    /// every decision also goes to the audit log.
    fn egress_starter(
        self: &Arc<Self>,
        id: &str,
        key_id: &str,
        policy: &cordon_policy::network::NetworkPolicy,
        slot: Arc<Mutex<Option<cordon_net::EgressProxy>>>,
    ) -> Result<cordon_linux::persistent::OnProxyListener, ApiError> {
        let mut config = cordon_net::ProxyConfig::from_policy(policy)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let weak = Arc::downgrade(self);
        let (id, key_id) = (id.to_string(), key_id.to_string());
        config.on_event = Some(Arc::new(move |ev: &cordon_policy::NetworkEvent| {
            if let Some(svc) = weak.upgrade() {
                if ev.verdict == "deny" {
                    svc.metrics.deny("egress");
                }
                svc.audit.record("network", &key_id, Some(&id), json!({"host": ev.host, "port": ev.port, "verdict": ev.verdict, "reason": ev.reason, "bytes": ev.bytes}));
            }
        }));
        Ok(Box::new(move |listener| {
            if let Ok(p) = cordon_net::EgressProxy::start(listener, config) {
                if let Ok(mut s) = slot.lock() {
                    *s = Some(p);
                }
            }
        }))
    }

    /// The sandbox's egress policy and every decision its proxy made so far.
    pub fn network(&self, caller: &Caller, id: &str) -> Result<NetworkInfo, ApiError> {
        let live = self.get_live(caller, id)?;
        let policy = live.network.lock().map(|p| p.clone()).unwrap_or_default();
        let events = live
            .egress
            .lock()
            .ok()
            .and_then(|e| e.as_ref().map(|p| p.events()))
            .unwrap_or_default();
        Ok(NetworkInfo { policy, events })
    }

    /// Replaces the sandbox's egress policy while it runs.
    pub fn set_network(
        &self,
        caller: &Caller,
        id: &str,
        policy: cordon_policy::network::NetworkPolicy,
    ) -> Result<NetworkSet, ApiError> {
        let live = self.get_live(caller, id)?;
        let rules = policy
            .compile()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let hosts = policy
            .static_hosts()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        {
            let guard = live.egress.lock().map_err(|_| ApiError::internal("lock"))?;
            let proxy = guard
                .as_ref()
                .ok_or_else(|| ApiError::conflict("this sandbox has no egress proxy"))?;
            proxy
                .set_policy(rules, &hosts)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        if let Ok(mut p) = live.network.lock() {
            *p = policy.clone();
        }
        self.audit.record(
            "sandbox.network",
            &caller.key_id,
            Some(id),
            json!({"allow": policy.allow}),
        );
        Ok(NetworkSet { policy })
    }

    pub fn get(&self, caller: &Caller, id: &str) -> Result<SandboxInfo, ApiError> {
        if let Ok(l) = self.get_live(caller, id) {
            return Ok(l.info());
        }
        // Ended sandboxes stay visible in the registry, so callers can see why they ended.
        match self.registry.sandbox(id)? {
            Some(row) if row.key_id == caller.key_id => Ok(SandboxInfo {
                id: row.id,
                state: row.state,
                profile: row.profile,
                created_at: row.created_at,
                expires_at: row.expires_at,
                metadata: serde_json::from_str(&row.metadata).unwrap_or_default(),
                enforcement: None,
                limits: None,
                ended_reason: row.ended_reason,
            }),
            _ => Err(ApiError::not_found(format!("no sandbox '{id}'"))),
        }
    }

    pub fn list(&self, caller: &Caller, filter: &BTreeMap<String, String>) -> SandboxList {
        let mut out: Vec<SandboxInfo> = self
            .live
            .read()
            .map(|l| {
                l.values()
                    .filter(|s| s.key_id == caller.key_id)
                    .filter(|s| filter.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
                    .map(|s| s.info())
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        SandboxList { sandboxes: out }
    }

    pub async fn delete(&self, caller: &Caller, id: &str) -> Result<(), ApiError> {
        let live = self.get_live(caller, id)?;
        self.destroy(&live, "deleted", "deleted by request").await;
        self.metrics
            .sandboxes_deleted
            .fetch_add(1, Ordering::Relaxed);
        self.audit
            .record("sandbox.delete", &caller.key_id, Some(id), json!({}));
        Ok(())
    }

    async fn destroy(&self, live: &Arc<Live>, state: &str, reason: &str) {
        if let Ok(mut l) = self.live.write() {
            l.remove(&live.id);
        }
        let sb = live.sandbox.clone();
        let egress = live.egress.clone();
        let _ = tokio::task::spawn_blocking(move || {
            sb.shutdown();
            if let Some(p) = egress.lock().ok().and_then(|mut e| e.take()) {
                p.shutdown();
            }
        })
        .await;
        let _ = self.registry.mark_ended(&live.id, state, reason);
    }

    pub fn extend(&self, caller: &Caller, id: &str, ttl: &Amount) -> Result<SandboxInfo, ApiError> {
        let live = self.get_live(caller, id)?;
        let ttl = duration(ttl, "ttl")?;
        if ttl > self.cfg.max_ttl {
            return Err(ApiError::bad_request(format!(
                "ttl: at most {}s",
                self.cfg.max_ttl.as_secs()
            )));
        }
        let exp = now() + ttl.as_secs();
        live.expires_at.store(exp, Ordering::SeqCst);
        self.registry.set_expiry(id, exp)?;
        self.audit.record(
            "sandbox.ttl",
            &caller.key_id,
            Some(id),
            json!({"ttl_s": ttl.as_secs()}),
        );
        Ok(live.info())
    }

    /// Reaps sandboxes past their TTL or whose sandbox died. Called periodically.
    pub async fn reap(&self) {
        let t = now();
        let due: Vec<Arc<Live>> = self
            .live
            .read()
            .map(|l| {
                l.values()
                    .filter(|s| s.expires_at.load(Ordering::SeqCst) <= t || !s.sandbox.is_alive())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for live in due {
            let (state, reason) = if live.sandbox.is_alive() {
                ("expired", "its time to live ran out".to_string())
            } else {
                (
                    "failed",
                    live.sandbox
                        .ended()
                        .unwrap_or_else(|| "the sandbox died".into()),
                )
            };
            self.destroy(&live, state, &reason).await;
            if state == "expired" {
                self.metrics
                    .sandboxes_expired
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.audit.record(
                &format!("sandbox.{state}"),
                &live.key_id,
                Some(&live.id),
                json!({"reason": reason}),
            );
        }
    }

    /// Kills every sandbox (server shutdown).
    pub async fn shutdown_all(&self) {
        let all: Vec<Arc<Live>> = self
            .live
            .read()
            .map(|l| l.values().cloned().collect())
            .unwrap_or_default();
        for live in all {
            self.destroy(&live, "reaped", "the server shut down").await;
        }
    }

    fn exec_parts(&self, live: &Live, req: &ExecRequest) -> Result<(ExecSpec, Duration), ApiError> {
        let argv = req.cmd.checked_argv()?;
        check_cwd(req.cwd.as_deref())?;
        check_env(&req.env)?;
        let timeout = match &req.timeout {
            Some(t) => duration(t, "timeout")?,
            None => live.profile.limits.timeout.min(
                self.cfg
                    .default_exec_timeout
                    .max(live.profile.limits.timeout),
            ),
        };
        if timeout > self.cfg.max_exec_timeout {
            return Err(ApiError::bad_request(format!(
                "timeout: at most {}s",
                self.cfg.max_exec_timeout.as_secs()
            )));
        }
        Ok((
            ExecSpec {
                argv,
                env: req.env.clone().into_iter().collect(),
                cwd: req.cwd.clone(),
            },
            timeout,
        ))
    }

    /// Runs a command to completion; with `events`, streams its output as it comes.
    pub async fn exec(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
        events: Option<mpsc::Sender<ExecEvent>>,
    ) -> Result<Outcome, ApiError> {
        let live = self.get_live(caller, id)?;
        let (spec, timeout) = self.exec_parts(&live, &req)?;
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(id),
            json!({"argv0": spec.argv.first(), "args": spec.argv.len(), "env_keys": req.env.keys().collect::<Vec<_>>(), "timeout_ms": timeout.as_millis() as u64}),
        );
        let outcome = run_in(
            &live,
            spec,
            req.stdin.map(String::into_bytes),
            timeout,
            events,
        )
        .await?;
        self.metrics.observe_exec(outcome.usage.wall_ms as f64);
        Ok(outcome)
    }

    pub async fn exec_background(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
    ) -> Result<CommandInfo, ApiError> {
        let live = self.get_live(caller, id)?;
        let (spec, timeout) = self.exec_parts(&live, &req)?;
        let argv = spec.argv.clone();
        let (done_tx, done_rx) = watch::channel(None);
        let cid = format!("cmd-{}", crate::keys::random_hex(6));
        let (stdin, output) = split(start(&live, spec).await?)?;
        let limit = live.profile.limits.output_limit;
        let cmd = Arc::new(BgCommand {
            id: cid.clone(),
            exec_id: output.exec_id,
            argv,
            started_at_ms: unix_ms(),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            output: Mutex::new((OutputCap::new(limit), OutputCap::new(limit))),
            done: done_rx,
        });
        if let Ok(mut c) = live.commands.lock() {
            // Keep the table bounded: forget finished commands beyond 100.
            if c.len() >= 100 {
                let finished: Vec<String> = c
                    .iter()
                    .filter(|(_, v)| v.done.borrow().is_some())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in finished {
                    c.remove(&k);
                }
            }
            c.insert(cid.clone(), cmd.clone());
        }
        self.audit.record(
            "sandbox.exec",
            &caller.key_id,
            Some(id),
            json!({"argv0": cmd.argv.first(), "background": true, "command_id": cid}),
        );
        let svc = self.clone();
        let live2 = live.clone();
        let cmd2 = cmd.clone();
        tokio::spawn(async move {
            let outcome = pump(&live2, output, timeout, None, Some(&cmd2)).await;
            let outcome = outcome
                .unwrap_or_else(|e| Outcome::error(e.message, live2.sandbox.enforcement.clone()));
            svc.metrics.observe_exec(outcome.usage.wall_ms as f64);
            let _ = done_tx.send(Some(outcome));
        });
        Ok(cmd.info())
    }

    fn command(&self, caller: &Caller, id: &str, cid: &str) -> Result<Arc<BgCommand>, ApiError> {
        let live = self.get_live(caller, id)?;
        let c = live
            .commands
            .lock()
            .map_err(|_| ApiError::internal("lock"))?;
        c.get(cid)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("no command '{cid}' in sandbox '{id}'")))
    }

    pub fn list_commands(&self, caller: &Caller, id: &str) -> Result<CommandList, ApiError> {
        let live = self.get_live(caller, id)?;
        let c = live
            .commands
            .lock()
            .map_err(|_| ApiError::internal("lock"))?;
        let mut commands: Vec<CommandInfo> = c.values().map(|c| c.info()).collect();
        commands.sort_by_key(|c| c.started_at_ms);
        Ok(CommandList { commands })
    }

    pub fn get_command(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
    ) -> Result<CommandInfo, ApiError> {
        Ok(self.command(caller, id, cid)?.info())
    }

    pub async fn wait_command(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        timeout: Duration,
    ) -> Result<CommandInfo, ApiError> {
        let cmd = self.command(caller, id, cid)?;
        let mut rx = cmd.done.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|o| o.is_some())).await;
        Ok(cmd.info())
    }

    pub async fn command_stdin(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        req: StdinRequest,
    ) -> Result<(), ApiError> {
        let cmd = self.command(caller, id, cid)?;
        let mut guard = cmd.stdin.lock().await;
        if let Some(w) = guard.as_mut() {
            if !req.data.is_empty() {
                w.write_all(req.data.as_bytes())
                    .await
                    .map_err(|e| ApiError::conflict(format!("stdin: {e}")))?;
            }
        } else if !req.data.is_empty() {
            return Err(ApiError::conflict("stdin of this command is closed"));
        }
        if req.close {
            *guard = None;
        }
        Ok(())
    }

    pub fn command_signal(
        &self,
        caller: &Caller,
        id: &str,
        cid: &str,
        signal: i32,
    ) -> Result<(), ApiError> {
        let live = self.get_live(caller, id)?;
        let cmd = self.command(caller, id, cid)?;
        live.sandbox.signal(cmd.exec_id, signal);
        self.audit.record(
            "sandbox.signal",
            &caller.key_id,
            Some(id),
            json!({"command_id": cid, "signal": signal}),
        );
        Ok(())
    }

    /// Runs a code cell in a stateful context (see [`crate::kernel`]).
    pub async fn run_code(
        &self,
        caller: &Caller,
        id: &str,
        req: crate::kernel::CodeRequest,
        events: Option<mpsc::Sender<crate::kernel::CellEvent>>,
    ) -> Result<crate::kernel::CodeResult, ApiError> {
        let live = self.get_live(caller, id)?;
        let language = crate::kernel::normalize_language(&req.language)?;
        let context = req.context.clone().unwrap_or_else(|| "default".into());
        let timeout = match &req.timeout {
            Some(t) => duration(t, "timeout")?,
            None => live.profile.limits.timeout,
        };
        if timeout > self.cfg.max_exec_timeout {
            return Err(ApiError::bad_request(format!(
                "timeout: at most {}s",
                self.cfg.max_exec_timeout.as_secs()
            )));
        }
        let slot = live.contexts.slot(language, &context)?;
        self.audit.record(
            "sandbox.code",
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": context, "bytes": req.code.len()}),
        );
        let t0 = Instant::now();
        let r = crate::kernel::run_cell(&live, &slot, &req.code, timeout, events).await;
        self.metrics
            .observe_exec(t0.elapsed().as_secs_f64() * 1000.0);
        r
    }

    pub fn list_contexts(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Vec<crate::kernel::ContextInfo>, ApiError> {
        Ok(self.get_live(caller, id)?.contexts.list())
    }

    pub async fn create_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
    ) -> Result<crate::kernel::ContextInfo, ApiError> {
        let live = self.get_live(caller, id)?;
        let language = crate::kernel::normalize_language(language)?;
        let slot = live.contexts.slot(language, name)?;
        crate::kernel::ensure_started(&live, &slot).await?;
        self.audit.record(
            "sandbox.context.create",
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": name}),
        );
        Ok(crate::kernel::ContextInfo {
            language: language.into(),
            name: name.into(),
            execution_count: 0,
            alive: true,
        })
    }

    pub async fn restart_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        self.end_context(caller, id, language, name, false).await
    }

    pub async fn delete_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        self.end_context(caller, id, language, name, true).await
    }

    /// Stops a context's kernel; `remove` also forgets the context (delete), otherwise its
    /// next cell starts a fresh kernel (restart).
    async fn end_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
        remove: bool,
    ) -> Result<(), ApiError> {
        let live = self.get_live(caller, id)?;
        let language = crate::kernel::normalize_language(language)?;
        let slot = if remove {
            live.contexts.remove(language, name)
        } else {
            live.contexts.get(language, name)
        }
        .ok_or_else(|| ApiError::not_found(format!("no {language} context '{name}'")))?;
        crate::kernel::stop(&live, &slot).await;
        let event = if remove {
            "sandbox.context.delete"
        } else {
            "sandbox.context.restart"
        };
        self.audit.record(
            event,
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": name}),
        );
        Ok(())
    }

    /// A handle for file operations inside the sandbox.
    pub fn sandbox_for_files(&self, caller: &Caller, id: &str) -> Result<Arc<Live>, ApiError> {
        self.metrics.file_ops.fetch_add(1, Ordering::Relaxed);
        self.get_live(caller, id)
    }
}

/// One chunk of a command's output: kept under the cap (in the background command's copy
/// too), and streamed as far as it is kept — a stream never shows more than the Outcome.
async fn take_output(
    d: &[u8],
    keep: &mut OutputCap,
    bg: Option<&Mutex<(OutputCap, OutputCap)>>,
    is_stdout: bool,
    events: &Option<mpsc::Sender<ExecEvent>>,
) {
    let kept = keep.push(d);
    if let Some(Ok(mut o)) = bg.map(|m| m.lock()) {
        let _ = if is_stdout { o.0.push(d) } else { o.1.push(d) };
    }
    if let (Some(tx), false) = (events, kept.is_empty()) {
        let ev = if is_stdout {
            ExecEvent::Stdout(kept.to_vec())
        } else {
            ExecEvent::Stderr(kept.to_vec())
        };
        let _ = tx.send(ev).await;
    }
}

/// Reads what a pipe holds right now, without waiting for more.
async fn drain_now(
    pipe: &tokio::net::unix::pipe::Receiver,
    keep: &mut OutputCap,
    bg: Option<&Mutex<(OutputCap, OutputCap)>>,
    is_stdout: bool,
    events: &Option<mpsc::Sender<ExecEvent>>,
) {
    let mut buf = [0u8; 32 * 1024];
    // Bounded: a writer that never stops must not keep us here.
    for _ in 0..64 {
        match pipe.try_read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => take_output(&buf[..n], keep, bg, is_stdout, events).await,
        }
    }
}

type StartedParts = (
    cordon_linux::persistent::Started,
    tokio::sync::oneshot::Receiver<ExitInfo>,
    Instant,
);

async fn start(live: &Arc<Live>, spec: ExecSpec) -> Result<StartedParts, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sb = live.sandbox.clone();
    let t0 = Instant::now();
    let started = tokio::task::spawn_blocking(move || {
        sb.exec(
            spec,
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::new(409, "sandbox_unavailable", e.to_string()))?;
    Ok((started, rx, t0))
}

async fn run_in(
    live: &Arc<Live>,
    spec: ExecSpec,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    events: Option<mpsc::Sender<ExecEvent>>,
) -> Result<Outcome, ApiError> {
    let (stdin_pipe, output) = split(start(live, spec).await?)?;
    match stdin {
        Some(data) => {
            let mut w = stdin_pipe;
            tokio::spawn(async move {
                let _ = w.write_all(&data).await;
            });
        }
        None => drop(stdin_pipe),
    }
    pump(live, output, timeout, events, None).await
}

/// A started command's output side and exit, for `pump`.
struct Output {
    exec_id: u64,
    stdout: tokio::net::unix::pipe::Receiver,
    stderr: tokio::net::unix::pipe::Receiver,
    exit_rx: tokio::sync::oneshot::Receiver<ExitInfo>,
    t0: Instant,
    /// When it started, for the proxy's log (milliseconds since the epoch).
    started_ms: u64,
}

/// Splits a started command into the writer of its stdin, which the caller settles before
/// anything else sees the command (a background command's must be in place before its id is
/// handed out: a client may write to it at once), and the rest, for `pump`.
fn split(started: StartedParts) -> Result<(tokio::net::unix::pipe::Sender, Output), ApiError> {
    let (st, exit_rx, t0) = started;
    let started_ms = unix_ms().saturating_sub(t0.elapsed().as_millis() as u64);
    let io = |e: std::io::Error| ApiError::internal(format!("command pipes: {e}"));
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(st.stdin).map_err(io)?;
    let output = Output {
        exec_id: st.id,
        stdout: tokio::net::unix::pipe::Receiver::from_owned_fd(st.stdout).map_err(io)?,
        stderr: tokio::net::unix::pipe::Receiver::from_owned_fd(st.stderr).map_err(io)?,
        exit_rx,
        t0,
        started_ms,
    };
    Ok((stdin, output))
}

/// The decisions the sandbox's egress proxy made between `from_ms` and `to_ms`: a command's
/// share of the log (commands running side by side share theirs).
fn egress_during(live: &Live, from_ms: u64, to_ms: u64) -> Vec<cordon_policy::NetworkEvent> {
    let events = live
        .egress
        .lock()
        .ok()
        .and_then(|e| e.as_ref().map(|p| p.events()))
        .unwrap_or_default();
    events
        .into_iter()
        .filter(|e| (from_ms..=to_ms).contains(&e.time_ms))
        .collect()
}

/// Drains stdout/stderr under the cap, enforces the timeout, builds the Outcome.
async fn pump(
    live: &Arc<Live>,
    output: Output,
    timeout: Duration,
    events: Option<mpsc::Sender<ExecEvent>>,
    bg: Option<&BgCommand>,
) -> Result<Outcome, ApiError> {
    let Output {
        exec_id,
        stdout: mut out,
        stderr: mut err,
        exit_rx,
        t0,
        started_ms,
    } = output;
    let limit = live.profile.limits.output_limit;
    let mut so = OutputCap::new(limit);
    let mut se = OutputCap::new(limit);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut timed_out = false;
    let (mut out_open, mut err_open) = (true, true);
    let mut bo = [0u8; 32 * 1024];
    let mut be = [0u8; 32 * 1024];
    let mut exit_rx = exit_rx;
    let mut exit: Option<ExitInfo> = None;
    let mut grace = deadline;
    // Read until both streams close and the command has exited (or time runs out).
    while out_open || err_open || exit.is_none() {
        tokio::select! {
            r = out.read(&mut bo), if out_open => match r {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => {
                    take_output(&bo[..n], &mut so, bg.map(|b| &b.output), true, &events).await;
                }
            },
            r = err.read(&mut be), if err_open => match r {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => {
                    take_output(&be[..n], &mut se, bg.map(|b| &b.output), false, &events).await;
                }
            },
            r = &mut exit_rx, if exit.is_none() => {
                exit = Some(r.unwrap_or_else(|_| ExitInfo { sandbox_ended: Some("the sandbox ended".into()), ..ExitInfo::default() }));
                // Background children may keep the pipes open: give output a moment, then stop.
                grace = (tokio::time::Instant::now() + Duration::from_millis(200)).min(deadline);
            },
            _ = tokio::time::sleep_until(grace), if exit.is_some() => {
                // Whatever is already in the pipes belongs to the command: take it without
                // waiting (under load the timer can win the race against ready pipes).
                if out_open {
                    drain_now(&out, &mut so, bg.map(|b| &b.output), true, &events).await;
                }
                if err_open {
                    drain_now(&err, &mut se, bg.map(|b| &b.output), false, &events).await;
                }
                out_open = false;
                err_open = false;
            },
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                live.sandbox.signal(exec_id, libc::SIGKILL);
                // Wait briefly for the exit report, then give up on the streams.
                if exit.is_none() {
                    if let Ok(r) = tokio::time::timeout(Duration::from_secs(5), &mut exit_rx).await {
                        exit = Some(r.unwrap_or_default());
                    } else {
                        exit = Some(ExitInfo { signal: Some(libc::SIGKILL), ..ExitInfo::default() });
                    }
                }
                out_open = false;
                err_open = false;
            },
        }
    }
    let wall = t0.elapsed();
    let exit = exit.unwrap_or_default();
    let facts = EndFacts {
        end: match (exit.code, exit.signal) {
            (_, Some(sig)) => Some(ProcessEnd::Signaled(sig)),
            (Some(code), None) => Some(ProcessEnd::Exited(code)),
            (None, None) => None,
        },
        stopped: if timed_out {
            Some(Stopped::Timeout)
        } else if exit.usage.cpu_time_exceeded {
            Some(Stopped::CpuTime)
        } else {
            None
        },
        exec_failure: exit
            .exec_error
            .clone()
            .map(|(errno, path, cwd)| ExecFailure { errno, path, cwd }),
        sandbox_ended: exit.sandbox_ended.clone(),
        oom_kills: exit.usage.oom_kills,
        pids_refused: exit.usage.pids_refused,
        output_truncated: so.truncated() || se.truncated(),
        disk_full: exit.usage.disk_full,
        inodes_exhausted: exit.usage.inodes_exhausted,
        ..EndFacts::default()
    };
    let usage = Usage {
        wall_ms: wall.as_millis() as u64,
        cpu_user_ms: exit.cpu_user_us / 1000,
        cpu_system_ms: exit.cpu_system_us / 1000,
        // The command's cgroup counts all of its processes together; without one, the
        // largest single process is what is known.
        peak_memory_bytes: match exit.usage.peak_memory_bytes {
            0 => exit.max_rss_kb * 1024,
            n => n,
        },
        peak_pids: exit.usage.peak_pids,
    };
    let network = egress_during(live, started_ms, unix_ms());
    let outcome = Outcome::from_ending(
        classify(&facts),
        so.finish(),
        se.finish(),
        usage,
        live.sandbox.enforcement.clone(),
        network,
    );
    if let Some(tx) = &events {
        let _ = tx.send(ExecEvent::Exit(Box::new(outcome.clone()))).await;
    }
    Ok(outcome)
}
