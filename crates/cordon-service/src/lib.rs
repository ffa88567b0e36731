//! cordon's service: the one core every door (native HTTP, E2B, MCP, the gateway runtime)
//! and the CLI call — sandboxes, commands, code cells, files, images, network policy,
//! one-shot runs, the registry of sandboxes and keys, audit and metrics. It knows no wire
//! protocol: no axum, no MCP; its errors are kinds ([`error::ErrorKind`]) each door maps to
//! its own protocol. OpenAPI schemas of its request/response types are the native door's
//! (`cordon-server/src/native/schema.rs`).
//!
//! Threat model: every request is from an authenticated but untrusted caller, and everything
//! a sandbox says (its files, its processes' output) is hostile input; paths are resolved
//! inside the sandbox by the engine, never walked here.

pub mod archive;
pub mod audit;
mod auth;
pub mod binds;
pub mod datadir;
pub mod error;
pub mod files;
pub mod gateway_state;
pub mod hibernate;
pub mod interpreter;
pub mod keys;
pub mod metrics;
pub mod oneshot;
pub mod ports;
pub mod programs;
pub mod registry;
pub mod runner;
pub mod types;
pub mod usage;

pub mod admin;
mod approvals;
mod code;
pub mod commit;
mod exec;
mod images;
mod learning;
mod lifecycle;
mod network;
mod requests;
pub mod snapshots;
pub mod stored_secrets;
pub mod template_builds;
mod template_store;
pub mod templates;
pub mod volumes;
mod wasm;

pub use code::ContextEnd;
/// The host directories a sandbox sees as its system (for the gateway's carve-outs).
pub use cordon_linux::host_system_paths;
pub(crate) use exec::spawn_exec;
pub use exec::{BgCommand, ExecEvent, PipedProcess};
pub use images::{
    image_error, validate as validate_pull, ImageDetail, ImageList, ImageRemoved, ImageView,
    ImagesConfig, PullEvent, PullRequest, PullResult,
};
pub use lifecycle::{ProcessList, SandboxMetrics};
pub use requests::{profile_from, signal_number};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cordon_linux::persistent::Sandbox;
use cordon_policy::Profile;

use crate::audit::Audit;
use crate::error::ServiceError;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::types::*;

/// Default limits of a new key.
pub const DEFAULT_MAX_SANDBOXES: u32 = 50;
pub const DEFAULT_RPS: u32 = 100;

/// Creates a key and returns (secret, id). The secret is shown once and stored hashed.
pub fn create_key(
    registry: &registry::Registry,
    name: &str,
    max_sandboxes: u32,
    rps: u32,
) -> Result<(String, String), ServiceError> {
    let (secret, id) = keys::generate().map_err(|e| ServiceError::internal(e.to_string()))?;
    registry.add_key(&id, name, &keys::hash(&secret), max_sandboxes, rps)?;
    Ok((secret, id))
}

/// Who is calling (after authentication).
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub max_sandboxes: u32,
}

#[derive(Debug, Clone, Default)]
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
    /// Layers every sandbox of this server must have (`cordon serve --require`): added to
    /// each sandbox's profile, so a host without them refuses each sandbox (and, checked at
    /// start, the server itself).
    pub require: Vec<cordon_policy::Layer>,
    /// Where images may be pulled from.
    pub images: ImagesConfig,
    /// What a request naming an image this node's store (`<data_dir>/images`) lacks gets.
    pub image_pull: ImagePull,
    /// The egress allowlist an E2B sandbox gets when its create asks for internet access
    /// (`allow_internet_access`, true by default in E2B's SDKs) without naming hosts
    /// (`cordon serve --e2b-allow-net`); empty: no network.
    pub e2b_allow_net: Vec<String>,
    /// Extra CA certificates (a PEM file) the hosts of stored secrets may chain to
    /// (`cordon serve --secret-ca`).
    pub secret_ca: Option<PathBuf>,
    /// Named templates a create may select (`cordon serve --templates`): the built-in ones
    /// and the operator's file.
    pub templates: templates::Templates,
    /// Host directories under which a create may bind host paths (`cordon serve
    /// --docker-bind-root`); empty: no host binds at all.
    pub bind_roots: Vec<PathBuf>,
    /// What RUN steps of a template built through a door may reach (`cordon serve
    /// --template-allow-net`); empty: no network.
    pub template_build_allow_net: Vec<String>,
}

/// What `cordon serve` does with a request for an image its store does not have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImagePull {
    /// Refuse it (400), saying how to pull it: what a client runs is the operator's choice.
    #[default]
    Never,
    /// Pull it from its registry first (credentials from the store's login or
    /// `~/.docker/config.json`).
    Missing,
}

/// A sandbox this node is running.
pub struct Live {
    pub(crate) id: String,
    pub(crate) key_id: String,
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) profile: Profile,
    /// Names of the key's volumes it mounts (see `volumes`).
    pub(crate) volumes: Vec<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) created_at: u64,
    /// When it was created, in milliseconds since the epoch: lists order by it (several
    /// sandboxes are made within one second).
    pub(crate) created_ms: u64,
    pub(crate) expires_at: AtomicU64,
    /// Paused, not ended, when `expires_at` passes (see `CreateSandbox::pause_on_timeout`);
    /// cleared when that pause fails, so that the sandbox ends instead.
    pub(crate) pause_on_timeout: std::sync::atomic::AtomicBool,
    /// Paused by its timeout (not by a caller): a resume gives it the server's default time
    /// to live again, instead of the longest it was kept for while paused.
    pub(crate) paused_by_timeout: std::sync::atomic::AtomicBool,
    /// Whether a pause at its timeout keeps memory (freezes) or goes to disk
    /// (`CreateSandbox::pause_keep_memory`).
    pub(crate) pause_keep_memory: bool,
    pub(crate) commands: Mutex<HashMap<String, Arc<BgCommand>>>,
    pub(crate) contexts: crate::interpreter::Contexts,
    /// The sandbox's egress proxy (every persistent sandbox has one; it denies everything
    /// until the policy allows something).
    pub(crate) egress: Arc<Mutex<Option<cordon_net::EgressProxy>>>,
    pub(crate) network: Mutex<cordon_policy::network::NetworkPolicy>,
    /// Who may reach its ports (see [`ports`]).
    pub(crate) ports: ports::PortGrant,
    /// The image the sandbox's root is made of: held (its layers safe from prune) for as long
    /// as the sandbox lives.
    /// Also what a commit starts from (its manifest digest).
    pub(crate) image: Option<cordon_image::ImageRoot>,
    /// The last CPU reading (when, CPU ns), for the use since the previous metrics request.
    pub(crate) cpu_seen: Mutex<(std::time::Instant, u64)>,
    /// Its CPU and memory over its whole life, sampled by the server (`usage`).
    pub(crate) usage: Mutex<usage::Series>,
    /// The last foreground commands and how they ended (see [`exec::History`]): what
    /// `cordon logs` shows beside the background commands.
    pub(crate) history: Mutex<exec::History>,
    /// Its stored secrets as its proxy holds them (rotated by `secret_update`), and the CA
    /// directory it sees: held for as long as it lives.
    pub(crate) secrets: Option<runner::secrets::Prepared>,
    /// Learn mode (`CreateSandbox::learn`): what its commands used so far.
    pub(crate) learning: Option<learning::Learning>,
}

impl Live {
    /// Running, paused, or failed (its processes are gone but it is not yet reaped).
    pub fn state(&self) -> SandboxState {
        if !self.sandbox.is_alive() {
            SandboxState::Failed
        } else if self.sandbox.paused().is_some() {
            SandboxState::Paused
        } else {
            SandboxState::Running
        }
    }

    pub fn info(&self) -> SandboxInfo {
        let l = &self.profile.limits;
        SandboxInfo {
            id: self.id.clone(),
            state: self.state(),
            profile: self.profile.name.clone(),
            created_at: self.created_at,
            created_ms: self.created_ms,
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
            paused_by: self.sandbox.paused().map(|m| m.name().to_string()),
            pause_on_timeout: self.pause_on_timeout.load(Ordering::SeqCst),
            note: None,
        }
    }
}

pub struct Service {
    cfg: Config,
    /// Held for the life of the service: one server per data directory.
    _lock: std::fs::File,
    registry: Registry,
    /// Seals stored secrets' values at rest (see `stored_secrets`).
    sealer: stored_secrets::Sealer,
    audit: Audit,
    metrics: Metrics,
    limiter: auth::KeyLimiter,
    live: RwLock<HashMap<String, Arc<Live>>>,
    /// Creates under way per key id: slots taken but not yet live (see `reserve`).
    pending: Mutex<HashMap<String, usize>>,
    /// Volumes (key id, name) creates under way mount (see `volumes::VolumeUse`).
    volume_uses: Mutex<HashMap<(String, String), usize>>,
    /// The learned profiles of ended learning sandboxes (see `learning`).
    learned: learning::Ended,
    /// Templates built through a door (see `template_builds`).
    template_builds: template_builds::Builds,
}

/// Takes an exclusive lock on the data directory: a second server on the same registry would
/// reap the first one's sandboxes at start-up.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, ServiceError> {
    let f = crate::datadir::open_private(
        &dir.join("lock"),
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true),
    )
    .map_err(|e| ServiceError::internal(format!("{}: {e}", dir.join("lock").display())))?;
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(ServiceError::conflict(format!(
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
    /// Adds the server's required layers (see [`Config::require`]) to a sandbox's profile.
    pub fn add_required(&self, profile: &mut Profile) {
        for layer in &self.cfg.require {
            if !profile.require.contains(layer) {
                profile.require.push(*layer);
            }
        }
    }

    pub fn new(cfg: Config) -> Result<Arc<Service>, ServiceError> {
        if let Some(warning) = crate::datadir::prepare(&cfg.data_dir).map_err(|e| {
            ServiceError::internal(format!("data dir {}: {e}", cfg.data_dir.display()))
        })? {
            eprintln!("cordon: warning: {warning}");
        }
        let lock = lock_data_dir(&cfg.data_dir)?;
        let registry = Registry::open(&cfg.data_dir.join("cordon.db"))?;
        registry.create_secrets_table()?;
        let sealer = stored_secrets::Sealer::open(&cfg.data_dir.join("secrets.key"))?;
        let audit_path = cfg.data_dir.join("audit.jsonl");
        let audit = Audit::open(&audit_path).map_err(|e| {
            ServiceError::internal(format!("audit log {}: {e}", audit_path.display()))
        })?;
        let svc = Arc::new(Service {
            _lock: lock,
            cfg,
            registry,
            sealer,
            audit,
            metrics: Metrics::default(),
            limiter: auth::KeyLimiter::default(),
            live: RwLock::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            volume_uses: Mutex::new(HashMap::new()),
            learned: Default::default(),
            template_builds: Default::default(),
        });
        svc.reap_previous_run()?;
        svc.remove_partial_state();
        svc.load_built_templates();
        programs::clean_runs(&svc.cfg.data_dir);
        Ok(svc)
    }

    /// How this service was configured.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counts a refused request by its reason (`origin`, `unauthenticated`, `bad_key`, …).
    pub fn deny(&self, reason: &str) {
        self.metrics.deny(reason);
    }

    /// The Prometheus metrics, as text.
    pub fn metrics_text(&self) -> String {
        self.metrics.render(&self.by_state())
    }

    /// Records an event in the audit log: never a key, an environment value or file contents.
    pub fn audit(
        &self,
        event: &str,
        key_id: &str,
        sandbox: Option<&str>,
        fields: serde_json::Value,
    ) {
        self.audit.record(event, key_id, sandbox, fields);
    }

    /// The caller's audit records (newest first, those holding `query` when it is not
    /// empty, at most `limit` ≤ 1000) and whether the log's chain holds.
    pub fn audit_view(
        &self,
        caller: &Caller,
        query: &str,
        limit: usize,
    ) -> Result<audit::AuditView, ServiceError> {
        self.audit
            .view(&caller.key_id, query, limit.clamp(1, 1000))
            .map_err(|e| ServiceError::internal(format!("reading the audit log: {e}")))
    }

    /// A key by its id (revoked keys included: callers check).
    pub fn key(&self, id: &str) -> Result<Option<registry::KeyRecord>, ServiceError> {
        self.registry.key_by_id(id)
    }

    /// Keys not revoked.
    pub fn active_keys(&self) -> Result<usize, ServiceError> {
        self.registry.active_keys()
    }

    /// A new key: (secret, id); the secret is shown once and stored hashed.
    pub fn create_key(
        &self,
        name: &str,
        max_sandboxes: u32,
        rps: u32,
    ) -> Result<(String, String), ServiceError> {
        create_key(&self.registry, name, max_sandboxes, rps)
    }

    pub fn get_live(&self, caller: &Caller, id: &str) -> Result<Arc<Live>, ServiceError> {
        let live = self
            .live
            .read()
            .map_err(|_| ServiceError::internal("lock"))?;
        match live.get(id) {
            // Another key's sandbox answers 404, so ids cannot be probed.
            Some(l) if l.key_id == caller.key_id => Ok(l.clone()),
            _ => Err(ServiceError::not_found(format!("no sandbox '{id}'"))),
        }
    }

    /// A handle for file operations inside the sandbox.
    pub fn sandbox_for_files(&self, caller: &Caller, id: &str) -> Result<Arc<Live>, ServiceError> {
        self.metrics.file_ops.fetch_add(1, Ordering::Relaxed);
        self.get_live(caller, id)
    }
}
