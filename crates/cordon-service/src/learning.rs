//! Learn mode for persistent sandboxes (`POST /v1/sandboxes` with `learn: true`): what the
//! sandbox used across all its commands — the destinations its egress proxy decided on, the
//! programs executed and the host files asked for beyond the sandbox (recorded by its helper,
//! see `cordon_linux::persistent` and `cordon_linux::exec_learn`), each command's
//! peaks (from its cgroup) and output — made into a learned profile by
//! [`cordon_policy::learn`], on request while it lives, and once more as it ends: that last one
//! is kept (the last [`KEPT_ENDED`] of them, in memory and in the data directory's `learned/`,
//! one 0600 file per key and sandbox, so that a server restart keeps them) to be fetched after
//! a delete or an expiry.
//!
//! Threat model: everything recorded is the sandboxed program's doing, so hostile; the profile
//! writer escapes and checks every value it writes. A caller gets only its own key's
//! sandboxes' profiles (another key's answers 404, as for every sandbox route); on disk each
//! key has a directory of its own, named by the key's id, and only ids and sandbox ids made of
//! `[A-Za-z0-9_-]` name a file (a name from a request is never a path). Learning never
//! changes what the sandbox may do: the exec filter only notifies, the proxy only logs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cordon_linux::persistent::LearnedSoFar;
use cordon_policy::outcome::{FileAccess, FileUse};
use cordon_policy::{LimitHit, Outcome, Profile, Usage};

use super::{Caller, Live, Service};
use crate::error::ServiceError;
use crate::types::LearnedProfile;

/// Learned profiles of ended sandboxes kept for fetching.
pub const KEPT_ENDED: usize = 256;

/// What a learning sandbox's commands used, kept as they end.
pub(crate) struct Learning {
    /// The built-in the learned profile extends.
    base: String,
    seen: Mutex<Seen>,
}

/// The peaks over the commands so far (each command's own, not their sum).
#[derive(Default)]
struct Seen {
    commands: u64,
    usage: Usage,
    limits_hit: Vec<LimitHit>,
    /// The most output one command wrote on one stream (as kept: up to the output limit).
    output: u64,
    /// The programs its helper said were executed, over every answer: what a helper that died
    /// since had recorded is not lost.
    executed: BTreeSet<PathBuf>,
    /// The file needs its helper said it saw, likewise (the first program to have each).
    files: BTreeMap<(PathBuf, FileUse), FileAccess>,
}

/// Most file needs kept for one sandbox (as its helper keeps).
const MAX_FILES: usize = 4096;

impl Learning {
    pub(crate) fn new(profile: &Profile) -> Learning {
        let base = if cordon_policy::profile::BUILTINS.contains(&profile.name.as_str()) {
            profile.name.clone()
        } else {
            "default".to_string()
        };
        Learning {
            base,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// One command's end.
    pub(crate) fn observe(&self, o: &Outcome) {
        let Ok(mut s) = self.seen.lock() else { return };
        s.commands += 1;
        let u = &o.usage;
        s.usage.wall_ms = s.usage.wall_ms.max(u.wall_ms);
        // The learned `cpu_time` is per command: the largest command's, user and system.
        let cpu = u.cpu_user_ms.saturating_add(u.cpu_system_ms);
        s.usage.cpu_user_ms = s.usage.cpu_user_ms.max(cpu);
        s.usage.peak_memory_bytes = s.usage.peak_memory_bytes.max(u.peak_memory_bytes);
        s.usage.peak_pids = s.usage.peak_pids.max(u.peak_pids);
        for h in &o.limits_hit {
            if !s.limits_hit.contains(h) {
                s.limits_hit.push(*h);
            }
        }
        let len = |text: &str, b64: &Option<String>| {
            b64.as_ref()
                .map_or(text.len() as u64, |b| (b.len() as u64 / 4) * 3)
        };
        s.output = s
            .output
            .max(len(&o.stdout, &o.stdout_b64))
            .max(len(&o.stderr, &o.stderr_b64));
    }
}

/// The learned profile of `live` now: `recorded` is what its helper recorded.
fn render(
    live: &Live,
    learning: &Learning,
    recorded: LearnedSoFar,
    ended: bool,
) -> Result<LearnedProfile, ServiceError> {
    let mut o = Outcome::error(String::new(), live.sandbox.enforcement.clone());
    o.error = None;
    let commands = {
        let mut s = learning
            .seen
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        o.usage = s.usage.clone();
        o.limits_hit = s.limits_hit.clone();
        // Only the size counts (see `cordon_policy::learn`), bounded by the output limit.
        o.stdout = " ".repeat(s.output.min(live.profile.limits.output_limit) as usize);
        s.executed.extend(recorded.executed);
        o.executed = s.executed.iter().cloned().collect();
        for f in recorded.files {
            if s.files.len() < MAX_FILES {
                s.files.entry((f.path.clone(), f.how)).or_insert(f);
            }
        }
        o.files = s.files.values().cloned().collect();
        s.commands
    };
    o.network = super::network::egress_events(live);
    let command = vec![format!("the commands of sandbox {}", live.id)];
    let toml = cordon_policy::learn::learn(
        &cordon_policy::learn::Run {
            base: &learning.base,
            profile: &live.profile,
            outcome: &o,
            command: &command,
            output_captured: true,
        },
        None,
    )
    .map_err(|e| ServiceError::internal(e.to_string()))?;
    let profile = toml::from_str::<toml::Table>(&toml)
        .ok()
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_default();
    Ok(LearnedProfile {
        sandbox_id: live.id.clone(),
        ended,
        commands,
        toml,
        profile,
    })
}

/// The learned profiles of ended sandboxes: (key id, profile), oldest first.
#[derive(Default)]
pub(crate) struct Ended(Mutex<VecDeque<(String, LearnedProfile)>>);

impl Service {
    /// The learned profile of a sandbox created with `learn: true`: while it runs, what it
    /// used so far (each call sees more); once it ended, what it used in all.
    pub async fn learned_profile(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<LearnedProfile, ServiceError> {
        let live = match self.get_live(caller, id) {
            Ok(l) => l,
            Err(e) => {
                let kept = self.learned.0.lock().ok().and_then(|k| {
                    k.iter()
                        .rev()
                        .find(|(key, p)| *key == caller.key_id && p.sandbox_id == id)
                        .map(|(_, p)| p.clone())
                });
                return kept
                    .or_else(|| stored(&self.cfg.data_dir, &caller.key_id, id))
                    .ok_or(e);
            }
        };
        self.learn_now(&live, false).await
    }

    async fn learn_now(
        &self,
        live: &std::sync::Arc<Live>,
        ended: bool,
    ) -> Result<LearnedProfile, ServiceError> {
        if live.learning.is_none() {
            return Err(ServiceError::conflict(format!(
                "sandbox '{}' was not created with learn: true",
                live.id
            )));
        }
        let sb = live.sandbox.clone();
        let recorded = tokio::task::spawn_blocking(move || sb.learned())
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?
            .unwrap_or_default();
        let learning = live
            .learning
            .as_ref()
            .ok_or_else(|| ServiceError::internal("learning"))?;
        render(live, learning, recorded, ended)
    }

    /// As a learning sandbox ends (before its helper goes): its learned profile, kept.
    pub(crate) async fn keep_learned(&self, live: &std::sync::Arc<Live>) {
        if live.learning.is_none() {
            return;
        }
        if let Ok(p) = self.learn_now(live, true).await {
            if let Ok(mut k) = self.learned.0.lock() {
                if k.len() >= KEPT_ENDED {
                    k.pop_front();
                }
                k.push_back((live.key_id.clone(), p.clone()));
            }
            let dir = self.cfg.data_dir.clone();
            let key = live.key_id.clone();
            let _ = tokio::task::spawn_blocking(move || store(&dir, &key, &p)).await;
        }
    }
}

/// A name that may be a file name under `learned/`: a key id or a sandbox id as cordon makes
/// them. Anything else names no file.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `<data_dir>/learned/<key>/<sandbox>.json`, if both are plain names.
fn stored_path(data_dir: &Path, key: &str, sandbox: &str) -> Option<PathBuf> {
    (plain_name(key) && plain_name(sandbox)).then(|| {
        data_dir
            .join("learned")
            .join(key)
            .join(format!("{sandbox}.json"))
    })
}

/// The learned profile an earlier run of the server (or this one) kept for `key`.
fn stored(data_dir: &Path, key: &str, sandbox: &str) -> Option<LearnedProfile> {
    let text = std::fs::read(stored_path(data_dir, key, sandbox)?).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Keeps `p` on disk (0600 in 0700 directories, written whole then renamed), then forgets the
/// oldest beyond [`KEPT_ENDED`] over all keys. A failure loses only what a restart would lose.
fn store(data_dir: &Path, key: &str, p: &LearnedProfile) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::DirBuilderExt;
    let Some(file) = stored_path(data_dir, key, &p.sandbox_id) else {
        return Ok(());
    };
    let root = data_dir.join("learned");
    let mut dirs = std::fs::DirBuilder::new();
    dirs.recursive(true).mode(crate::datadir::DIR_MODE);
    if let Some(dir) = file.parent() {
        dirs.create(dir)?;
    }
    let partial = file.with_extension("partial");
    {
        let mut f = crate::datadir::open_private(
            &partial,
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true),
        )?;
        f.write_all(&serde_json::to_vec(p).map_err(std::io::Error::other)?)?;
    }
    std::fs::rename(&partial, &file)?;
    let mut all = Vec::new();
    for k in std::fs::read_dir(&root)?.flatten() {
        for f in std::fs::read_dir(k.path()).into_iter().flatten().flatten() {
            let modified = f.metadata().and_then(|m| m.modified()).ok();
            all.push((modified, f.path()));
        }
    }
    if all.len() > KEPT_ENDED {
        all.sort();
        for (_, old) in &all[..all.len() - KEPT_ENDED] {
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(())
}
