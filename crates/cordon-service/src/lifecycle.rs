//! Sandboxes coming and going: create (under the key's quota), get, list, delete, TTL and
//! reaping.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cordon_linux::persistent::Sandbox;
use cordon_policy::Profile;
use serde_json::json;

use super::requests::{at_most, duration, profile_from, size};
use super::{Caller, Live, Service};
use crate::error::{ErrorKind, ServiceError};
use crate::registry::now;
use crate::types::*;

/// A sandbox's processes (see [`Service::process_list`]).
#[derive(Debug, serde::Serialize)]
pub struct ProcessList {
    pub processes: Vec<cordon_linux::snapshot::ProcessRow>,
}

/// A sandbox's resource use at one moment (see [`Service::sandbox_metrics`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SandboxMetrics {
    pub timestamp_ms: u64,
    pub cpu_count: u64,
    /// Of all its CPUs together, 0 to 100.
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub disk_used: u64,
    pub disk_total: u64,
    /// Its live processes now (its init included), against its limit.
    pub processes: u64,
    pub processes_max: u64,
}

fn already_paused(id: &str) -> ServiceError {
    ServiceError {
        code: "already_paused",
        ..ServiceError::conflict(format!("sandbox '{id}' is already paused"))
    }
}

/// How [`Service::while_frozen`] held the sandbox.
pub(crate) struct Frozen {
    pub(crate) frozen_ms: u64,
    /// `cgroup-freezer`, `sigstop`, or `already-paused`.
    pub(crate) method: String,
}

/// A sandbox's writable scratch filesystems (inside it), whose use its metrics report.
const SCRATCH: [&str; 4] = [
    "/tmp",
    "/workspace",
    cordon_policy::profile::HOME,
    "/dev/shm",
];

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

/// What a new sandbox starts with besides its profile: files copied from a stored tree (a
/// snapshot's, a fork's capture, its own when paused to disk), volumes its profile already
/// binds (a fork's parent's), and the id it had before it was paused to disk.
#[derive(Default)]
pub(crate) struct Seed {
    pub(crate) tree: Option<std::path::PathBuf>,
    pub(crate) volumes: Vec<String>,
    pub(crate) id: Option<String>,
    /// Its ports' grant from before it was paused to disk (the same traffic token).
    pub(crate) ports: Option<crate::ports::PortGrant>,
}

/// What makes a plain `pip install x` work in a server's sandbox (see the README's *pip inside
/// just works*): PEP 668's marker (Debian's `EXTERNALLY-MANAGED`) is waived because nothing
/// pip writes can reach the host — the host's system directories are read-only in the sandbox,
/// so pip falls back to a user install in the sandbox's own home tmpfs (`~/.local`), and an
/// image's root is the sandbox's own writable layer; no wheel cache, which would hold every
/// download a second time on the same size-capped tmpfs; and `~/.local/bin`, where installed
/// commands land, on `PATH`. Each only where neither the image's `Env` nor the request (nor
/// the template) sets it.
const PIP_DEFAULTS: [(&str, &str); 2] = [
    ("PIP_BREAK_SYSTEM_PACKAGES", "1"),
    ("PIP_NO_CACHE_DIR", "1"),
];

fn add_pip_defaults(profile: &mut Profile) {
    let image_sets = |k: &str| {
        profile.root_image.as_ref().is_some_and(|i| {
            i.env
                .iter()
                .any(|e| e.split_once('=').is_some_and(|(n, _)| n == k))
        })
    };
    let profile_sets = |k: &str| {
        profile.env.iter().any(|e| match e {
            cordon_policy::EnvEntry::Set(n, _) | cordon_policy::EnvEntry::Pass(n) => n == k,
        })
    };
    let mut add: Vec<cordon_policy::EnvEntry> = PIP_DEFAULTS
        .iter()
        .filter(|(k, _)| !image_sets(k) && !profile_sets(k))
        .map(|(k, v)| cordon_policy::EnvEntry::Set(k.to_string(), v.to_string()))
        .collect();
    // npm's global prefix on the host's system directories (`/usr`, `/usr/local`) is
    // read-only in the sandbox: `npm install -g` goes to `~/.local` instead, as pip's user
    // install does, its commands into `~/.local/bin` on `PATH`. An image's root is the
    // sandbox's own writable layer, where npm's own prefix works (and its `PATH` may not
    // have `~/.local/bin`): left alone there.
    if profile.root_image.is_none()
        && !profile_sets("NPM_CONFIG_PREFIX")
        && !profile_sets("npm_config_prefix")
    {
        add.push(cordon_policy::EnvEntry::Set(
            "NPM_CONFIG_PREFIX".into(),
            format!("{}/.local", cordon_policy::profile::HOME),
        ));
    }
    if !image_sets("PATH") && !profile_sets("PATH") {
        let base = cordon_policy::profile::BASE_ENV
            .iter()
            .find(|(k, _)| *k == "PATH")
            .map(|(_, v)| *v)
            .unwrap_or("/usr/local/bin:/usr/bin:/bin");
        add.push(cordon_policy::EnvEntry::Set(
            "PATH".into(),
            format!("{base}:{}/.local/bin", cordon_policy::profile::HOME),
        ));
    }
    // First, so that nothing the profile sets later is overridden.
    profile.env.splice(0..0, add);
}

impl Service {
    /// What this server's freezer cgroups are named after (see [`cordon_linux::freeze`]): a
    /// digest of its data directory, so that servers on different data directories never
    /// touch each other's paused sandboxes, and the next server on this one finds them.
    pub(crate) fn pause_scope(&self) -> String {
        use sha2::{Digest, Sha256};
        use std::os::unix::ffi::OsStrExt;
        let dir =
            std::fs::canonicalize(&self.cfg.data_dir).unwrap_or_else(|_| self.cfg.data_dir.clone());
        let digest = Sha256::digest(dir.as_os_str().as_bytes());
        format!("d{}", &hex::encode(digest)[..16])
    }

    /// Sandboxes a previous server process left in the registry: their helpers exit when the
    /// server's control socket closes, so they are gone or going; make sure, and record it.
    /// Paused ones first: their freezer cgroups are ended (a frozen process ignores SIGKILL).
    pub(super) fn reap_previous_run(&self) -> Result<(), ServiceError> {
        self.forget_lost_sleepers();
        let rows = self.registry.running()?;
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        cordon_linux::freeze::end_leftovers(&self.pause_scope(), &ids);
        for row in rows {
            let adopted = self.adopt_after_restart(&row);
            if let Some(pid) = rustix::process::Pid::from_raw(row.helper_pid as i32)
                .filter(|p| p.as_raw_nonzero().get() > 0)
            {
                let is_helper = || {
                    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero()))
                        .unwrap_or_default();
                    String::from_utf8_lossy(&cmdline).contains("__sandbox")
                };
                // A helper still ending its sandbox is given a moment to remove its cgroups.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while is_helper() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                if is_helper() {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            if adopted {
                continue;
            }
            self.registry.mark_ended(
                &row.id,
                SandboxState::Reaped.as_str(),
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

    /// Takes one of the caller's sandbox slots, or answers 429 when live sandboxes and creates
    /// under way already fill its quota. Check and take happen under one lock; the slot is
    /// released when the reservation drops, after a successful create has made the sandbox
    /// live, so at no moment is a sandbox counted by neither.
    fn reserve(&self, caller: &Caller) -> Result<Reservation<'_>, ServiceError> {
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let creating = pending.get(&caller.key_id).copied().unwrap_or(0);
        if self.count_for(&caller.key_id) + creating >= caller.max_sandboxes as usize {
            self.metrics.deny("sandbox_quota");
            return Err(ServiceError {
                code: "quota_exceeded",
                ..ServiceError::too_many(
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
                *m.entry(s.state().as_str().to_string()).or_insert(0) += 1;
            }
        }
        m.entry("running".to_string()).or_insert(0);
        m
    }

    pub(crate) async fn create_seeded(
        self: &Arc<Self>,
        caller: &Caller,
        req: CreateSandbox,
        trusted: Option<Profile>,
        seed: Seed,
    ) -> Result<SandboxInfo, ServiceError> {
        let req = match &req.template {
            Some(name) => match self.cfg.templates.get(name) {
                Some(t) => t.apply(req),
                None => match self.built_template(&caller.key_id, name) {
                    Some((t, _, _)) => t.apply(req),
                    None => return Err(self.cfg.templates.not_found(name)),
                },
            },
            None => req,
        };
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
        profile.image = req.image.clone();
        // A front end's own profile (create_with_profile) replaces the built-in.
        let trusted_profile = trusted.is_some();
        let mut profile = trusted.unwrap_or(profile);
        if let Some(list) = &req.exec_allow {
            profile.exec_allow = Some(list.iter().map(std::path::PathBuf::from).collect());
        }
        // Only the request asks to learn (a fork's copy of a learning parent's profile does
        // not).
        profile.learn_exec = req.learn;
        self.add_required(&mut profile);
        // Volumes become binds before the profile is checked; held as in use from here on.
        let mut volumes = self.mount_volumes(caller, &req.volumes, &mut profile)?;
        volumes.hold(&seed.volumes);
        crate::binds::add(&self.cfg.bind_roots, &req.host_binds, &mut profile, "binds")?;
        for s in &req.secrets {
            profile.secrets.push(cordon_policy::secrets::SecretSpec {
                name: s.var(),
                source: cordon_policy::secrets::SecretSource::Stored(s.name.clone()),
                hosts: s.hosts.clone(),
                header: s.header.clone(),
                format: s.format.clone(),
                ca: self.cfg.secret_ca.clone(),
            });
        }
        let tree = match (&seed.tree, &req.from) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(name)) => Some(self.snapshot_tree(caller, name)?),
            (None, None) => None,
        };
        profile
            .validate()
            .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        let image = self.attach_image(&mut profile, trusted_profile).await?;
        if req.read_only_root {
            match profile.root_image.as_mut() {
                Some(r) => r.read_only = true,
                None => {
                    return Err(ServiceError::bad_request(
                        "read_only_root: only a sandbox made from an image has a root of its own to make read-only",
                    ))
                }
            }
        }
        if let Some(ids) = req.run_as {
            match profile.root_image.as_mut() {
                Some(r) => r.run_as = Some(ids),
                None => {
                    return Err(ServiceError::bad_request(
                        "user: only a sandbox made from an image runs as a user of its own",
                    ))
                }
            }
        }
        add_pip_defaults(&mut profile);
        // The values are read here, outside the sandbox: stored ones from the caller's key; a
        // front end's own (trusted) profile may also name env:/file: sources, as `cordon run`.
        let key_id = caller.key_id.clone();
        let secrets =
            crate::runner::secrets::prepare_with(&mut profile, |spec| match &spec.source {
                cordon_policy::secrets::SecretSource::Stored(name) => {
                    self.secret_value(&key_id, name)
                }
                other if trusted_profile => crate::runner::secrets::read_value(&spec.name, other),
                other => Err(format!(
                    "secrets: {}: {} cannot be read for a sandbox of this server",
                    spec.name,
                    other.describe()
                )),
            })
            .map_err(ServiceError::bad_request)?;
        if let Some(p) = &secrets {
            // A fork's profile carries its parent's placeholders: the new ones replace them.
            profile.env.retain(
                |e| !matches!(e, cordon_policy::EnvEntry::Set(k, _) if p.env.contains_key(k)),
            );
            for (k, v) in &p.env {
                profile
                    .env
                    .push(cordon_policy::EnvEntry::Set(k.clone(), v.clone()));
            }
        }
        let ttl = match &req.ttl {
            Some(t) => duration(t, "ttl")?,
            None => self.cfg.default_ttl,
        };
        at_most(ttl, self.cfg.max_ttl, "ttl")?;
        for (k, v) in &req.metadata {
            if k.chars().count() > METADATA_MAX_KEY || v.chars().count() > METADATA_MAX_VALUE {
                return Err(ServiceError::bad_request(format!(
                    "metadata: keys up to {METADATA_MAX_KEY} characters, values up to {METADATA_MAX_VALUE}"
                )));
            }
        }
        // The slot is taken before the first await and given back if anything below fails (or
        // the request is dropped): concurrent creates cannot overshoot the key's quota.
        let slot = self.reserve(caller)?;
        let id = seed
            .id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.cfg.node, crate::keys::random_hex(8)));
        let egress: Arc<Mutex<Option<cordon_net::EgressProxy>>> = Arc::new(Mutex::new(None));
        let on_proxy = self.egress_starter(
            &id,
            &caller.key_id,
            &profile.network,
            egress.clone(),
            secrets.as_ref().map(|p| p.interception.clone()),
        )?;
        let helper = self.cfg.helper_exe.clone();
        let prof = profile.clone();
        let sandbox = tokio::task::spawn_blocking(move || {
            Sandbox::create(&helper, &prof, &BTreeMap::new(), Some(on_proxy))
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?
        .map_err(|e| ServiceError::new(ErrorKind::Internal, "sandbox_failed", e.to_string()))?;
        let sandbox = Arc::new(sandbox);
        if let Some(tree) = tree {
            // Its files before anyone can reach it: nothing runs in it yet but its init.
            let sb = sandbox.clone();
            let restored =
                tokio::task::spawn_blocking(move || crate::snapshots::restore(&sb, &tree))
                    .await
                    .map_err(|e| ServiceError::internal(e.to_string()))
                    .and_then(|r| r);
            if let Err(e) = restored {
                let sb = sandbox.clone();
                let _ = tokio::task::spawn_blocking(move || sb.shutdown()).await;
                return Err(e);
            }
        }
        let names = volumes.names.clone();
        let ports = seed
            .ports
            .clone()
            .unwrap_or_else(|| crate::ports::PortGrant::new(&req.ports));
        let info = self.make_live(
            caller, req, profile, sandbox, image, ttl, egress, id, names, secrets, ports,
        )?;
        // Only now that the sandbox counts as live (see `reserve`), and its volumes as in use.
        drop(slot);
        drop(volumes);
        Ok(info)
    }

    /// Records a created sandbox and makes it live.
    #[allow(clippy::too_many_arguments)]
    fn make_live(
        &self,
        caller: &Caller,
        req: CreateSandbox,
        profile: Profile,
        sandbox: Arc<Sandbox>,
        image: Option<cordon_image::ImageRoot>,
        ttl: std::time::Duration,
        egress: Arc<Mutex<Option<cordon_net::EgressProxy>>>,
        id: String,
        volumes: Vec<String>,
        secrets: Option<crate::runner::secrets::Prepared>,
        ports: crate::ports::PortGrant,
    ) -> Result<SandboxInfo, ServiceError> {
        let created_ms = crate::registry::now_ms();
        let created_at = created_ms / 1000;
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
        let learning = req.learn.then(|| crate::learning::Learning::new(&profile));
        let live = Arc::new(Live {
            id: id.clone(),
            key_id: caller.key_id.clone(),
            sandbox,
            profile,
            volumes,
            metadata: req.metadata,
            created_at,
            created_ms,
            expires_at: AtomicU64::new(expires_at),
            pause_on_timeout: std::sync::atomic::AtomicBool::new(req.pause_on_timeout),
            pause_keep_memory: req.pause_keep_memory.unwrap_or(true),
            paused_by_timeout: std::sync::atomic::AtomicBool::new(false),
            commands: Mutex::new(HashMap::new()),
            contexts: Default::default(),
            egress,
            network: Mutex::new(live_network),
            ports,
            image,
            cpu_seen: Mutex::new((std::time::Instant::now(), 0)),
            usage: Default::default(),
            history: Default::default(),
            secrets,
            learning,
        });
        if let Ok(mut l) = self.live.write() {
            l.insert(id.clone(), live.clone());
        }
        self.metrics
            .sandboxes_created
            .fetch_add(1, Ordering::Relaxed);
        self.audit.record(
            "sandbox.create",
            &caller.key_id,
            Some(&id),
            json!({"profile": live.profile.name, "image": live.profile.image, "ttl_s": ttl.as_secs(), "env_keys": req.env.keys().collect::<Vec<_>>(), "network": live.profile.network.allow, "secrets": req.secrets.iter().map(|s| &s.name).collect::<Vec<_>>(), "learn": req.learn, "exec_allow": live.profile.exec_allow}),
        );
        Ok(live.info())
    }

    /// A sandbox of a built-in profile with the request's overrides.
    pub async fn create(
        self: &Arc<Self>,
        caller: &Caller,
        req: CreateSandbox,
    ) -> Result<SandboxInfo, ServiceError> {
        // A template built through a door: its start command started, its ready command
        // waited for, before the sandbox is handed out.
        let built = req
            .template
            .as_ref()
            .filter(|n| self.cfg.templates.get(n).is_none())
            .and_then(|n| {
                self.built_template(&caller.key_id, n)
                    .map(|b| (n.clone(), b))
            });
        let (req, note) = self.code_interpreter_image(req);
        let mut info = self
            .create_seeded(caller, req, None, Seed::default())
            .await?;
        info.note = note;
        if let Some((name, (_, start, ready))) = built {
            if start.is_some() || ready.is_some() {
                if let Err(e) = self.start_template(caller, &info.id, start, ready).await {
                    let _ = self.delete(caller, &info.id).await;
                    return Err(e);
                }
            }
            self.template_spawned(&caller.key_id, &name);
        }
        Ok(info)
    }

    /// The built-in `code-interpreter-v1` on the data-stack image once the store has it (see
    /// `scripts/code-interpreter-image.sh`); until then on the host's system directories, and
    /// the answer says so. A template file's own `code-interpreter-v1`, or a request naming an
    /// image, is left as it is.
    fn code_interpreter_image(&self, mut req: CreateSandbox) -> (CreateSandbox, Option<String>) {
        use crate::templates::{CODE_INTERPRETER, CODE_INTERPRETER_IMAGE, HOST_PYTHON_NOTE};
        let builtin = req.template.as_deref() == Some(CODE_INTERPRETER)
            && self
                .cfg
                .templates
                .get(CODE_INTERPRETER)
                .is_some_and(|t| t.builtin);
        if !builtin || req.image.is_some() {
            return (req, None);
        }
        let built = self
            .image_store()
            .is_ok_and(|s| s.find(CODE_INTERPRETER_IMAGE).is_ok());
        if built {
            req.image = Some(CODE_INTERPRETER_IMAGE.to_string());
            (req, None)
        } else {
            (req, Some(HOST_PYTHON_NOTE.to_string()))
        }
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
    ) -> Result<SandboxInfo, ServiceError> {
        self.create_with_profile_from(caller, profile, ttl, metadata, None)
            .await
    }

    /// [`Service::create_with_profile`], starting with the files of the caller's snapshot
    /// `from` (`cordon mcp`'s `restore_snapshot`).
    pub async fn create_with_profile_from(
        self: &Arc<Self>,
        caller: &Caller,
        profile: Profile,
        ttl: Option<Amount>,
        metadata: BTreeMap<String, String>,
        from: Option<String>,
    ) -> Result<SandboxInfo, ServiceError> {
        let req = CreateSandbox {
            ttl,
            metadata,
            from,
            ..Default::default()
        };
        self.create_seeded(caller, req, Some(profile), Seed::default())
            .await
    }

    pub fn get(&self, caller: &Caller, id: &str) -> Result<SandboxInfo, ServiceError> {
        if let Ok(l) = self.get_live(caller, id) {
            return Ok(l.info());
        }
        // Ended sandboxes stay visible in the registry, so callers can see why they ended.
        match self.registry.sandbox(id)? {
            Some(row)
                if row.key_id == caller.key_id && row.state == SandboxState::Paused.as_str() =>
            {
                Ok(Service::sleeping_info(row))
            }
            Some(row) if row.key_id == caller.key_id => {
                // The registry writes only these words; anything else is a damaged row.
                let state = SandboxState::parse(&row.state).unwrap_or(SandboxState::Failed);
                Ok(Service::row_info(row, state, None))
            }
            _ => Err(ServiceError::not_found(format!("no sandbox '{id}'"))),
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
        out.extend(
            self.sleeping_list(caller)
                .into_iter()
                .filter(|s| filter.iter().all(|(k, v)| s.metadata.get(k) == Some(v))),
        );
        out.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        SandboxList { sandboxes: out }
    }

    pub async fn delete(&self, caller: &Caller, id: &str) -> Result<(), ServiceError> {
        let live = match self.get_live(caller, id) {
            Ok(l) => l,
            Err(_) if self.delete_sleeping(caller, id, SandboxState::Deleted) => {
                self.audit
                    .record("sandbox.delete", &caller.key_id, Some(id), json!({}));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.destroy(&live, SandboxState::Deleted, "deleted by request")
            .await;
        self.metrics
            .sandboxes_deleted
            .fetch_add(1, Ordering::Relaxed);
        self.audit
            .record("sandbox.delete", &caller.key_id, Some(id), json!({}));
        Ok(())
    }

    /// Ends `live`. Its files kept on disk by a pause go too, unless it is being paused to
    /// disk (`state` paused): then they are what it comes back from.
    pub(crate) async fn destroy(&self, live: &Arc<Live>, state: SandboxState, reason: &str) {
        if let Ok(mut l) = self.live.write() {
            l.remove(&live.id);
        }
        if state != SandboxState::Paused {
            self.drop_files(&live.key_id, &live.id);
        }
        // While its helper and proxy still answer.
        self.keep_learned(live).await;
        let sb = live.sandbox.clone();
        let egress = live.egress.clone();
        let _ = tokio::task::spawn_blocking(move || {
            sb.shutdown();
            if let Some(p) = egress.lock().ok().and_then(|mut e| e.take()) {
                p.shutdown();
            }
        })
        .await;
        let _ = self.registry.mark_ended(&live.id, state.as_str(), reason);
    }

    /// Pauses the sandbox. Keeping memory (the default): every process frozen, memory and
    /// files stay, it still counts against the key's quota and its TTL keeps running; its files
    /// are also copied to disk, so a restart of the server finds it paused to disk instead of
    /// gone. Without (`keep_memory` false): paused to disk now — its files kept, its memory,
    /// processes and quota slot released (see [`crate::hibernate`]). Pausing twice is a
    /// conflict.
    pub async fn pause(
        &self,
        caller: &Caller,
        id: &str,
        keep_memory: bool,
    ) -> Result<SandboxInfo, ServiceError> {
        let live = match self.get_live(caller, id) {
            Ok(l) => l,
            Err(_) if self.is_paused_to_disk(caller, id) => return Err(already_paused(id)),
            Err(e) => return Err(e),
        };
        if !keep_memory && live.sandbox.paused().is_none() {
            return self.pause_to_disk(&live, "paused by request").await;
        }
        if live.sandbox.paused().is_some() {
            return Err(already_paused(id));
        }
        let sb = live.sandbox.clone();
        let name = format!("{}-{}", self.pause_scope(), live.id);
        let method = tokio::task::spawn_blocking(move || sb.pause(&name))
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?
            .map_err(|e| {
                ServiceError::new(ErrorKind::Conflict, "sandbox_unavailable", e.to_string())
            })?;
        // For a restart: what is lost then is its memory, not its files.
        let kept = self.keep_files(&live).await;
        self.audit.record(
            "sandbox.pause",
            &caller.key_id,
            Some(id),
            json!({"method": method.name(), "files_on_disk": kept.is_ok(), "error": kept.as_ref().err().map(|e| e.message.clone())}),
        );
        Ok(live.info())
    }

    /// Runs `read` (off the async runtime) with the sandbox's processes frozen — unless it is
    /// paused already: then it stays paused — and thaws them after, whatever `read` did:
    /// what snapshots, pauses to disk and commits read is the files as they stood at one
    /// moment. Also says how long they were frozen (0 if paused already) and how.
    pub(crate) async fn while_frozen<T: Send + 'static>(
        &self,
        live: &Arc<Live>,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<(T, Frozen), ServiceError> {
        let sb = live.sandbox.clone();
        let was_paused = sb.paused().is_some();
        let started = std::time::Instant::now();
        let method = if was_paused {
            "already-paused".to_string()
        } else {
            let sb = sb.clone();
            let name = format!("{}-{}", self.pause_scope(), live.id);
            tokio::task::spawn_blocking(move || sb.pause(&name))
                .await
                .map_err(|e| ServiceError::internal(e.to_string()))?
                .map_err(|e| {
                    ServiceError::new(ErrorKind::Conflict, "sandbox_unavailable", e.to_string())
                })?
                .name()
                .to_string()
        };
        let done = tokio::task::spawn_blocking(read).await;
        if !was_paused {
            let _ = tokio::task::spawn_blocking(move || sb.resume()).await;
        }
        let frozen_ms = if was_paused {
            0
        } else {
            started.elapsed().as_millis() as u64
        };
        let out = done.map_err(|e| ServiceError::internal(e.to_string()))?;
        Ok((out, Frozen { frozen_ms, method }))
    }

    /// What the sandbox uses now: its processes' CPU since the previous request (or since it
    /// started), their resident memory, and its scratch filesystems' use, against its limits.
    pub async fn sandbox_metrics(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<SandboxMetrics, ServiceError> {
        let live = self.get_live(caller, id)?;
        let l = live.clone();
        let root = live
            .sandbox
            .root_dir()
            .map_err(|e| ServiceError::internal(format!("sandbox root: {e}")))?;
        tokio::task::spawn_blocking(move || {
            use std::os::fd::AsFd;
            let scratch = SCRATCH;
            // Without a mount namespace the scratch paths are directories on a host
            // filesystem, whose totals are not the sandbox's.
            let unmounted = (!l.sandbox.enforcement.mount_ns).then_some(l.profile.limits.disk);
            let take = || {
                cordon_linux::snapshot::take(l.sandbox.init_pid, root.as_fd(), &scratch, unmounted)
            };
            let (since, before) = l
                .cpu_seen
                .lock()
                .map(|g| *g)
                .unwrap_or((std::time::Instant::now(), 0));
            let mut snap = take();
            // A window too short says nothing about the rate: look again a little later.
            if since.elapsed() < std::time::Duration::from_millis(100) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                snap = take();
            }
            let wall = since.elapsed().as_nanos().max(1) as f64;
            let cpus = l.profile.limits.cpus.ceil().max(1.0);
            // Processes that ended since take their CPU time with them: never below zero.
            let used = snap.cpu_ns.saturating_sub(before) as f64;
            if let Ok(mut g) = l.cpu_seen.lock() {
                *g = (std::time::Instant::now(), snap.cpu_ns);
            }
            SandboxMetrics {
                timestamp_ms: super::unix_ms(),
                cpu_count: cpus as u64,
                cpu_used_pct: (used / wall / cpus * 100.0).clamp(0.0, 100.0),
                mem_used: snap.memory_bytes,
                mem_total: l.profile.limits.memory,
                disk_used: snap.disk_used_bytes,
                disk_total: snap.disk_total_bytes,
                processes: snap.processes,
                processes_max: u64::from(l.profile.limits.pids),
            }
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))
    }

    /// Samples every running sandbox's CPU and memory from its cgroup (see [`crate::usage`]);
    /// the server calls it every [`crate::usage::INTERVAL`].
    pub async fn sample_usage(&self) {
        let lives: Vec<Arc<Live>> = match self.live.read() {
            Ok(l) => l.values().cloned().collect(),
            Err(_) => return,
        };
        let _ = tokio::task::spawn_blocking(move || {
            let now = super::unix_ms();
            for l in lives {
                if !l.sandbox.is_alive() {
                    continue;
                }
                // Its scratch filesystems: a few `fstatvfs` (never the walk a sandbox without
                // a mount namespace would need: that one's disk is on its own page).
                let disk = || {
                    use std::os::fd::AsFd;
                    if !l.sandbox.enforcement.mount_ns {
                        return None;
                    }
                    let root = l.sandbox.root_dir().ok()?;
                    Some(cordon_linux::snapshot::disk(root.as_fd(), &SCRATCH, None))
                };
                if let Ok(mut s) = l.usage.lock() {
                    s.sample(l.sandbox.init_pid, l.profile.limits.cpus.ceil(), now, disk);
                }
            }
        })
        .await;
    }

    /// The caller's running sandboxes' use at their last sample: the console's live table in
    /// one request, read from memory (the sampler did the reading).
    pub fn usage_now(&self, caller: &Caller) -> Result<crate::usage::UsageList, ServiceError> {
        let lives: Vec<Arc<Live>> = self
            .live
            .read()
            .map_err(|_| ServiceError::internal("lock"))?
            .values()
            .filter(|l| l.key_id == caller.key_id)
            .cloned()
            .collect();
        let mut sandboxes: Vec<crate::usage::UsageNow> = lives
            .iter()
            .filter_map(|l| {
                let n = l.usage.lock().ok()?.latest?;
                Some(crate::usage::UsageNow {
                    id: l.id.clone(),
                    t_ms: n.t_ms,
                    cpu_pct: n.cpu_pct,
                    mem_bytes: n.mem_bytes,
                    mem_total: l.profile.limits.memory,
                    processes: n.processes,
                    processes_max: u64::from(l.profile.limits.pids),
                    disk_used: n.disk.map(|d| d.0),
                    disk_total: n.disk.map(|d| d.1),
                })
            })
            .collect();
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(crate::usage::UsageList { sandboxes })
    }

    /// A sandbox's CPU and memory over its whole life, as the server sampled them.
    pub fn usage_history(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<crate::usage::UsageHistory, ServiceError> {
        let live = self.get_live(caller, id)?;
        let s = live
            .usage
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        Ok(s.history(live.profile.limits.memory))
    }

    /// The host pids of the sandbox's processes now (a scan of `/proc`): what
    /// [`cordon_linux::snapshot::usage`] then reads cheaply around each gateway call.
    pub async fn sandbox_processes(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Vec<i32>, ServiceError> {
        let live = self.get_live(caller, id)?;
        let init = live.sandbox.init_pid;
        tokio::task::spawn_blocking(move || cordon_linux::snapshot::processes(init))
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))
    }

    /// A sandbox's processes as a person listing them sees them: pids inside the sandbox,
    /// command lines (the sandbox's own words: show them as text), CPU and memory.
    pub async fn process_list(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<ProcessList, ServiceError> {
        let live = self.get_live(caller, id)?;
        let init = live.sandbox.init_pid;
        let mut processes = tokio::task::spawn_blocking(move || {
            cordon_linux::snapshot::process_rows(&cordon_linux::snapshot::processes(init))
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?;
        processes.sort_by_key(|p| p.pid);
        Ok(ProcessList { processes })
    }

    /// What the processes [`Service::sandbox_processes`] named have used so far: a few small
    /// `/proc` reads per process, cheap enough around every call.
    pub fn process_usage(&self, pids: &[i32], peak: bool) -> cordon_linux::snapshot::ProcessUsage {
        cordon_linux::snapshot::usage(pids, peak)
    }

    /// Lets a paused sandbox run again; a running one is left as it is. True if it was paused.
    /// One paused to disk starts again from its files, under its id (a new boot: no process
    /// of before runs); the key needs a free slot for it.
    pub async fn resume(self: &Arc<Self>, caller: &Caller, id: &str) -> Result<bool, ServiceError> {
        match self.get_live(caller, id) {
            Ok(live) => self.resume_live(&live).await,
            Err(e) => match self.wake(caller, id).await {
                Some(woken) => woken.map(|_| true),
                None => Err(e),
            },
        }
    }

    /// Resumes `live` if it is paused (the caller's right to is checked); a sandbox paused by
    /// its timeout gets the server's default time to live again.
    pub(crate) async fn resume_live(&self, live: &Arc<Live>) -> Result<bool, ServiceError> {
        let (id, key_id) = (&live.id, &live.key_id);
        if live.sandbox.paused().is_some() {
            // Before it runs: a copy of files it is about to change must not outlive it.
            self.drop_files(key_id, id);
        }
        let sb = live.sandbox.clone();
        let was = tokio::task::spawn_blocking(move || sb.resume())
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?;
        if was {
            if live.paused_by_timeout.swap(false, Ordering::SeqCst) {
                let exp = now() + self.cfg.default_ttl.as_secs();
                live.expires_at.store(exp, Ordering::SeqCst);
                self.registry.set_expiry(id, exp)?;
            }
            self.audit
                .record("sandbox.resume", key_id, Some(id), json!({}));
        }
        Ok(was)
    }

    pub fn extend(
        &self,
        caller: &Caller,
        id: &str,
        ttl: &Amount,
    ) -> Result<SandboxInfo, ServiceError> {
        let live = self.get_live(caller, id)?;
        let ttl = duration(ttl, "ttl")?;
        at_most(ttl, self.cfg.max_ttl, "ttl")?;
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

    /// Ends the sandbox's time to live now: what its timeout does (end it, or pause it when it
    /// asked for that) happens at the reaper's next look (within a second). E2B's
    /// `set_timeout(0)`.
    pub fn expire_now(&self, caller: &Caller, id: &str) -> Result<(), ServiceError> {
        let live = self.get_live(caller, id)?;
        let t = now();
        live.expires_at.store(t, Ordering::SeqCst);
        self.registry.set_expiry(id, t)?;
        self.audit
            .record("sandbox.ttl", &caller.key_id, Some(id), json!({"ttl_s": 0}));
        Ok(())
    }

    /// Reaps sandboxes past their TTL or whose sandbox died. Called periodically.
    pub async fn reap(&self) {
        self.reap_sleeping();
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
            if live.pause_on_timeout.load(Ordering::SeqCst)
                && live.sandbox.is_alive()
                && live.sandbox.paused().is_none()
            {
                if !live.pause_keep_memory {
                    match self.pause_to_disk(&live, "its time to live ran out").await {
                        Ok(_) => continue,
                        // Not paused: it ends as any other whose time ran out.
                        Err(_) => live.pause_on_timeout.store(false, Ordering::SeqCst),
                    }
                } else {
                    self.pause_at_timeout(&live).await;
                    continue;
                }
            }
            let (state, reason) = if live.sandbox.is_alive() {
                (
                    SandboxState::Expired,
                    "its time to live ran out".to_string(),
                )
            } else {
                (
                    SandboxState::Failed,
                    live.sandbox
                        .ended()
                        .unwrap_or_else(|| "the sandbox died".into()),
                )
            };
            self.destroy(&live, state, &reason).await;
            if state == SandboxState::Expired {
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

    /// A sandbox that asked to be paused when its time ran out: paused, and kept until the
    /// server's `--max-ttl` from now (a resume sets a new time to live). If it cannot be
    /// paused it ends as any other whose time ran out, at the next look.
    async fn pause_at_timeout(&self, live: &Arc<Live>) {
        let sb = live.sandbox.clone();
        let name = format!("{}-{}", self.pause_scope(), live.id);
        let paused = tokio::task::spawn_blocking(move || sb.pause(&name)).await;
        let method = match paused {
            Ok(Ok(method)) => method,
            Ok(Err(_)) | Err(_) => {
                // Not paused: it ends at the next look, like any other.
                live.pause_on_timeout.store(false, Ordering::SeqCst);
                return;
            }
        };
        // Seen paused from here on: its bookkeeping first, so that a connect while its files
        // are copied below finds it paused by its timeout.
        let exp = now() + self.cfg.max_ttl.as_secs();
        live.paused_by_timeout.store(true, Ordering::SeqCst);
        live.expires_at.store(exp, Ordering::SeqCst);
        let _ = self.registry.set_expiry(&live.id, exp);
        let kept = self.keep_files(live).await;
        self.audit.record(
            "sandbox.pause_on_timeout",
            &live.key_id,
            Some(&live.id),
            json!({"method": method.name(), "files_on_disk": kept.is_ok()}),
        );
    }

    /// Kills every sandbox (server shutdown).
    pub async fn shutdown_all(&self) {
        let all: Vec<Arc<Live>> = self
            .live
            .read()
            .map(|l| l.values().cloned().collect())
            .unwrap_or_default();
        for live in all {
            // A paused sandbox whose files are on disk waits there for the next server.
            if live.sandbox.paused().is_some() && self.has_files(&live.key_id, &live.id) {
                let _ = self
                    .registry
                    .set_expiry(&live.id, now() + self.cfg.max_ttl.as_secs());
                self.destroy(
                    &live,
                    SandboxState::Paused,
                    &format!(
                        "the server shut down while it was paused; {}",
                        crate::hibernate::NOTE
                    ),
                )
                .await;
                continue;
            }
            self.destroy(&live, SandboxState::Reaped, "the server shut down")
                .await;
        }
        // Each paused sandbox was thawed and ended above; whatever freezer cgroup of this data
        // directory is still there (a pause under way) is ended too.
        let scope = self.pause_scope();
        let _ = tokio::task::spawn_blocking(move || {
            cordon_linux::freeze::end_leftovers(&scope, &[]);
        })
        .await;
        // The last records reach the disk before the process exits.
        if let Err(e) = self.audit.sync() {
            eprintln!("cordon: audit log: syncing to disk: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_defaults_yield_to_the_image_and_the_request() {
        let env = |p: &Profile| p.environment(|_| None);
        let mut p = Profile::builtin("default").expect("default");
        add_pip_defaults(&mut p);
        let e = env(&p);
        assert_eq!(e["PIP_BREAK_SYSTEM_PACKAGES"], "1");
        assert_eq!(e["NPM_CONFIG_PREFIX"], "/home/sandbox/.local");
        assert!(
            e["PATH"].ends_with(":/home/sandbox/.local/bin"),
            "{}",
            e["PATH"]
        );

        let mut p = Profile::builtin("default").expect("default");
        p.env.push(cordon_policy::EnvEntry::Set(
            "PIP_NO_CACHE_DIR".into(),
            "0".into(),
        ));
        p.root_image = Some(cordon_policy::RootImage {
            env: vec![
                "PATH=/opt/venv/bin:/usr/bin".into(),
                "PIP_BREAK_SYSTEM_PACKAGES=0".into(),
            ],
            ..Default::default()
        });
        add_pip_defaults(&mut p);
        let e = env(&p);
        assert_eq!(e["PATH"], "/opt/venv/bin:/usr/bin");
        assert_eq!(e["PIP_BREAK_SYSTEM_PACKAGES"], "0");
        assert_eq!(e["PIP_NO_CACHE_DIR"], "0");
        // An image's own prefix is writable in its sandbox: npm's is left to it.
        assert!(!e.contains_key("NPM_CONFIG_PREFIX"), "{e:?}");

        let mut p = Profile::builtin("default").expect("default");
        p.env.push(cordon_policy::EnvEntry::Set(
            "npm_config_prefix".into(),
            "/workspace/npm".into(),
        ));
        add_pip_defaults(&mut p);
        let e = env(&p);
        assert!(!e.contains_key("NPM_CONFIG_PREFIX"), "{e:?}");
        assert_eq!(e["npm_config_prefix"], "/workspace/npm");
    }
}
