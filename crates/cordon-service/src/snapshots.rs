//! Snapshots and forks: a sandbox's files — everything it may write: `/workspace`, its home,
//! `/tmp` — copied, with its processes frozen, into the data directory (per key, under a
//! quota), listed, deleted, and copied into new sandboxes (`from`, and `fork`, which is a
//! snapshot and `count` creates at once). Memory and processes are never carried: the
//! answers say so.
//!
//! Threat model: what is copied was written by hostile code. The copy is
//! `cordon_linux::treecopy`'s: it never follows a symlink or crosses into another filesystem
//! (a volume mounted inside is not copied), carries only directories, regular files and
//! symlinks (as text), drops setuid/setgid/sticky bits, and is bounded in bytes (the key's
//! quota) and entries. Restoring writes only inside the new sandbox's own scratch tmpfs, as
//! that sandbox's host ids, so the sandbox's own disk cap holds. Every object is built in
//! `.partial` and renamed into place (see `volumes`): complete or absent after a crash.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_linux::treecopy::{self, Budget, CopyError, CopyStats};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{ErrorKind, ServiceError};
use crate::types::{Amount, SandboxInfo};
use crate::volumes::{key_dir, new_partial, publish, read_meta, unpublish, valid_name, write_meta};
use crate::{Caller, Live, Service};

/// Snapshots one key may keep.
pub const MAX_SNAPSHOTS_PER_KEY: usize = 64;
/// Bytes one key's snapshots may take together.
pub const MAX_SNAPSHOT_BYTES_PER_KEY: u64 = 20 << 30;
/// Entries (files, directories, symlinks) one snapshot may hold.
pub const MAX_SNAPSHOT_ENTRIES: u64 = 1_000_000;
/// Sandboxes one fork may make.
pub const MAX_FORK: u32 = 16;

/// The scratch filesystems a snapshot carries: (path inside the sandbox, name in the store).
const SCRATCH: [(&str, &str); 3] = [
    ("/workspace", "workspace"),
    (cordon_policy::profile::HOME, "home"),
    ("/tmp", "tmp"),
];

/// Where a stored tree keeps an image sandbox's root changes (its overlay's writable layer,
/// whiteouts left out) and the list of what it deleted of the image.
const ROOT_LAYER: &str = "root";
const ROOT_DELETED: &str = "root-deleted.json";
/// Deletions of image files one snapshot records at most.
const MAX_DELETIONS: usize = 100_000;

/// What a snapshot or fork never carries, as every answer states it.
const NOT_CARRIED: [&str; 5] = [
    "memory",
    "processes",
    "/dev/shm",
    "volumes (they are shared, not copied)",
    "an image directory the sandbox removed and made again keeps the image's other files in it (its root changes are carried to sandboxes of the same image; a sandbox without an image takes none)",
];

/// `POST /v1/sandboxes/{id}/snapshots`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// 1 to 63 characters: lower-case letters, digits, `-`, `_`, `.`; unique per key.
    pub name: String,
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub name: String,
    /// The sandbox it was taken of.
    pub sandbox: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Bytes of its files (each hard link counted, and stored, as a file of its own).
    pub bytes: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Entries not carried (FIFOs, sockets, device nodes, files their owner cannot read,
    /// mount points), the first 50 named with why.
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    /// How long the sandbox's processes were frozen for the copy, in milliseconds (0 if it
    /// was paused already: it stays paused).
    pub frozen_ms: u64,
    /// `cgroup-freezer`, `sigstop`, or `already-paused`.
    pub freeze_method: String,
    /// The paths it holds.
    pub carried: Vec<String>,
    /// What it does not hold.
    pub not_carried: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotInfo>,
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many sandboxes (1 when absent).
    pub count: Option<u32>,
    /// Each fork's time to live; the server's default when absent.
    pub ttl: Option<Amount>,
    /// Labels of the forks; the parent's when absent.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// What a fork made.
#[derive(Debug, Serialize)]
pub struct ForkResult {
    /// The new sandboxes: the parent's files, profile, limits, environment, network policy
    /// and volumes; the parent runs on untouched.
    pub sandboxes: Vec<SandboxInfo>,
    pub frozen_ms: u64,
    pub freeze_method: String,
    pub carried: Vec<String>,
    pub not_carried: Vec<String>,
    /// Said in words: memory and processes are not carried on this host.
    pub note: String,
    pub skipped: Vec<String>,
}

fn copy_error(e: CopyError, what: &str) -> ServiceError {
    match e {
        CopyError::TooLarge { limit } => ServiceError::new(
            ErrorKind::NoSpace,
            "quota_exceeded",
            format!("{what} would take more than the {limit} bytes left of this key's snapshot quota ({MAX_SNAPSHOT_BYTES_PER_KEY} bytes); delete snapshots, or files in the sandbox"),
        ),
        CopyError::TooMany { limit } => ServiceError::new(
            ErrorKind::NoSpace,
            "quota_exceeded",
            format!("{what}: the sandbox holds more than {limit} files, directories and symlinks, the most a snapshot may"),
        ),
        CopyError::NoSpace { path } => ServiceError::new(
            ErrorKind::NoSpace,
            "no_space",
            format!("{what}: no space left at {path} (a new sandbox's disk is its `disk` limit: ask for more)"),
        ),
        CopyError::Io { path, source } => {
            ServiceError::internal(format!("{what}: {path}: {source}"))
        }
    }
}

/// What a capture did.
pub(crate) struct Captured {
    pub(crate) stats: CopyStats,
    pub(crate) frozen_ms: u64,
    pub(crate) method: String,
    pub(crate) carried: Vec<String>,
}

impl Service {
    fn snapshots_dir(&self, caller: &Caller) -> Result<PathBuf, ServiceError> {
        key_dir(&self.cfg.data_dir.join("snapshots"), &caller.key_id)
    }

    fn snapshot_infos(&self, caller: &Caller) -> Result<Vec<SnapshotInfo>, ServiceError> {
        let dir = self.snapshots_dir(caller)?;
        let mut v: Vec<SnapshotInfo> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| read_meta(&e.path().join("snapshot.json")))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.name.cmp(&b.name)));
        Ok(v)
    }

    /// Copies `live`'s scratch filesystems into `tree/<name>` with its processes frozen
    /// (unless it is paused already), and thaws them after.
    pub(crate) async fn capture(
        &self,
        live: &Arc<Live>,
        tree: PathBuf,
        budget: Budget,
        what: &'static str,
    ) -> Result<Captured, ServiceError> {
        let copy_sb = live.sandbox.clone();
        let (copied, frozen) = self
            .while_frozen(live, move || -> Result<_, ServiceError> {
                let root = copy_sb
                    .root_dir()
                    .map_err(|e| ServiceError::internal(format!("sandbox root: {e}")))?;
                let mut total = CopyStats::default();
                let mut carried = Vec::new();
                for (inside, stored) in SCRATCH {
                    let dst = tree.join(stored);
                    std::fs::create_dir(&dst).map_err(|e| crate::volumes::internal_io(&dst, e))?;
                    // A volume or host directory mounted over it is not the sandbox's own.
                    let Some(src) = treecopy::open_scratch(root.as_fd(), inside) else {
                        total.skipped_count += 1;
                        total
                            .skipped
                            .push(format!("{inside}: not a scratch filesystem of the sandbox"));
                        continue;
                    };
                    let dfd = treecopy::open_dir(&dst)
                        .map_err(|e| crate::volumes::internal_io(&dst, e))?;
                    let left = Budget {
                        max_bytes: budget.max_bytes.saturating_sub(total.bytes),
                        max_entries: budget
                            .max_entries
                            .saturating_sub(total.files + total.dirs + total.symlinks),
                    };
                    let s = treecopy::copy_tree(src.as_fd(), dfd.as_fd(), None, left)
                        .map_err(|e| copy_error(e, what))?;
                    total.files += s.files;
                    total.dirs += s.dirs;
                    total.symlinks += s.symlinks;
                    total.bytes += s.bytes;
                    total.skipped_count += s.skipped_count;
                    for p in s.skipped {
                        if total.skipped.len() < treecopy::SKIPPED_NAMED {
                            total
                                .skipped
                                .push(format!("{}/{p}", inside.trim_end_matches('/')));
                        }
                    }
                    carried.push(inside.to_string());
                }
                // An image sandbox's root: what it changed there (its overlay's writable layer),
                // and what it deleted of the image (the layer's whiteouts).
                if let Some(upper) = copy_sb.writable_layer() {
                    let upper = upper
                        .map_err(|e| ServiceError::internal(format!("the writable layer: {e}")))?;
                    let dst = tree.join(ROOT_LAYER);
                    std::fs::create_dir(&dst).map_err(|e| crate::volumes::internal_io(&dst, e))?;
                    let dfd = treecopy::open_dir(&dst)
                        .map_err(|e| crate::volumes::internal_io(&dst, e))?;
                    let left = Budget {
                        max_bytes: budget.max_bytes.saturating_sub(total.bytes),
                        max_entries: budget
                            .max_entries
                            .saturating_sub(total.files + total.dirs + total.symlinks),
                    };
                    let deleted = treecopy::whiteouts(upper.as_fd(), MAX_DELETIONS)
                        .map_err(|e| copy_error(e, what))?;
                    let s = treecopy::copy_tree(upper.as_fd(), dfd.as_fd(), None, left)
                        .map_err(|e| copy_error(e, what))?;
                    total.files += s.files;
                    total.dirs += s.dirs;
                    total.symlinks += s.symlinks;
                    total.bytes += s.bytes;
                    // Whiteouts are how the layer records deletions, not skipped files.
                    total.skipped_count += s.skipped_count.saturating_sub(deleted.len() as u64);
                    total.skipped.extend(
                        s.skipped
                            .into_iter()
                            .filter(|p| !p.ends_with(": a device node"))
                            .map(|p| format!("/{p}")),
                    );
                    total.skipped.truncate(treecopy::SKIPPED_NAMED);
                    let (names, odd): (Vec<_>, Vec<_>) = deleted
                        .into_iter()
                        .map(String::from_utf8)
                        .partition(Result::is_ok);
                    let names: Vec<String> = names.into_iter().flatten().collect();
                    if !odd.is_empty() {
                        total.skipped_count += odd.len() as u64;
                        total.skipped.push(format!(
                            "{} deletions of files whose names are not UTF-8",
                            odd.len()
                        ));
                    }
                    crate::volumes::write_meta(&tree.join(ROOT_DELETED), &names)?;
                    carried.push("/ (the image root's changes)".to_string());
                }
                Ok((total, carried))
            })
            .await?;
        let (stats, carried) = copied?;
        Ok(Captured {
            stats,
            frozen_ms: frozen.frozen_ms,
            method: frozen.method,
            carried,
        })
    }

    pub async fn create_snapshot(
        &self,
        caller: &Caller,
        id: &str,
        req: CreateSnapshot,
    ) -> Result<SnapshotInfo, ServiceError> {
        valid_name("snapshot", &req.name)?;
        let live = self.get_live(caller, id)?;
        if !live.sandbox.is_alive() {
            return Err(ServiceError {
                code: "sandbox_ended",
                ..ServiceError::conflict(format!("sandbox '{id}' has ended"))
            });
        }
        let dest = self.snapshots_dir(caller)?.join(&req.name);
        if dest.exists() {
            return Err(ServiceError {
                code: "already_exists",
                ..ServiceError::conflict(format!("snapshot '{}' exists already", req.name))
            });
        }
        let existing = self.snapshot_infos(caller)?;
        if existing.len() >= MAX_SNAPSHOTS_PER_KEY {
            return Err(ServiceError::new(
                ErrorKind::NoSpace,
                "quota_exceeded",
                format!("this key has {} snapshots, the most it may keep ({MAX_SNAPSHOTS_PER_KEY}); delete one first", existing.len()),
            ));
        }
        let used: u64 = existing.iter().map(|s| s.bytes).sum();
        let budget = Budget {
            max_bytes: MAX_SNAPSHOT_BYTES_PER_KEY.saturating_sub(used),
            max_entries: MAX_SNAPSHOT_ENTRIES,
        };
        let partial = new_partial(&self.cfg.data_dir, "snapshot")?;
        let made = async {
            let tree = partial.join("tree");
            std::fs::create_dir(&tree).map_err(|e| crate::volumes::internal_io(&tree, e))?;
            let c = self
                .capture(&live, tree.clone(), budget, "the snapshot")
                .await?;
            let info = SnapshotInfo {
                name: req.name.clone(),
                sandbox: id.to_string(),
                created_at: crate::registry::now(),
                bytes: c.stats.bytes,
                files: c.stats.files,
                dirs: c.stats.dirs,
                symlinks: c.stats.symlinks,
                skipped: c.stats.skipped,
                skipped_count: c.stats.skipped_count,
                frozen_ms: c.frozen_ms,
                freeze_method: c.method,
                carried: c.carried,
                not_carried: NOT_CARRIED.iter().map(|s| s.to_string()).collect(),
            };
            let t = tree.clone();
            tokio::task::spawn_blocking(move || {
                treecopy::open_dir(&t).and_then(|fd| treecopy::sync_fs(fd.as_fd()))
            })
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?
            .map_err(|e| crate::volumes::internal_io(&tree, e))?;
            write_meta(&partial.join("snapshot.json"), &info)?;
            publish(&partial, &dest)?;
            Ok::<_, ServiceError>(info)
        }
        .await;
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
        let info = made?;
        self.audit.record(
            "snapshot.create",
            &caller.key_id,
            Some(id),
            json!({"snapshot": info.name, "bytes": info.bytes, "files": info.files, "frozen_ms": info.frozen_ms}),
        );
        Ok(info)
    }

    pub async fn list_snapshots(&self, caller: &Caller) -> Result<SnapshotList, ServiceError> {
        Ok(SnapshotList {
            snapshots: self.snapshot_infos(caller)?,
        })
    }

    pub async fn delete_snapshot(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        valid_name("snapshot", name)?;
        let dir = self.snapshots_dir(caller)?.join(name);
        if !dir.join("snapshot.json").exists() {
            return Err(ServiceError::not_found(format!("no snapshot '{name}'")));
        }
        unpublish(&self.cfg.data_dir, &dir)?;
        self.audit.record(
            "snapshot.delete",
            &caller.key_id,
            None,
            json!({"snapshot": name}),
        );
        Ok(())
    }

    /// The stored tree of the caller's snapshot `name`, for a create `from` it.
    pub(crate) fn snapshot_tree(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<PathBuf, ServiceError> {
        valid_name("snapshot", name)?;
        let dir = self.snapshots_dir(caller)?.join(name);
        if !dir.join("snapshot.json").exists() {
            return Err(ServiceError::not_found(format!("no snapshot '{name}'")));
        }
        Ok(dir.join("tree"))
    }

    /// `count` new sandboxes with `id`'s files, profile, environment, network policy and
    /// volumes: one capture (processes frozen once), then the creates.
    pub async fn fork(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ForkRequest,
    ) -> Result<ForkResult, ServiceError> {
        let count = req.count.unwrap_or(1);
        if count == 0 || count > MAX_FORK {
            return Err(ServiceError::bad_request(format!(
                "count: from 1 to {MAX_FORK}"
            )));
        }
        let parent = self.get_live(caller, id)?;
        if !parent.sandbox.is_alive() {
            return Err(ServiceError {
                code: "sandbox_ended",
                ..ServiceError::conflict(format!("sandbox '{id}' has ended"))
            });
        }
        let mut profile = parent.profile.clone();
        if let Ok(n) = parent.network.lock() {
            profile.network = n.clone();
        }
        let partial = new_partial(&self.cfg.data_dir, "fork")?;
        let budget = Budget {
            max_bytes: MAX_SNAPSHOT_BYTES_PER_KEY,
            max_entries: MAX_SNAPSHOT_ENTRIES,
        };
        let result = async {
            let c = self
                .capture(&parent, partial.clone(), budget, "the fork")
                .await?;
            let mut sandboxes = Vec::new();
            for _ in 0..count {
                let r = crate::types::CreateSandbox {
                    ttl: req.ttl.clone(),
                    metadata: req
                        .metadata
                        .clone()
                        .unwrap_or_else(|| parent.metadata.clone()),
                    ..Default::default()
                };
                let seed = crate::lifecycle::Seed {
                    tree: Some(partial.clone()),
                    volumes: parent.volumes.clone(),
                    id: None,
                    ports: None,
                };
                match self
                    .create_seeded(caller, r, Some(profile.clone()), seed)
                    .await
                {
                    Ok(info) => sandboxes.push(info),
                    Err(e) if sandboxes.is_empty() => return Err(e),
                    // Some made, then a refusal (the key's sandbox quota): what was made
                    // is answered, and the message says why there are fewer.
                    Err(e) => {
                        return Ok((c, sandboxes, Some(e.message)));
                    }
                }
            }
            Ok((c, sandboxes, None))
        }
        .await;
        let _ = std::fs::remove_dir_all(&partial);
        let (c, sandboxes, short) = result?;
        self.audit.record(
            "sandbox.fork",
            &caller.key_id,
            Some(id),
            json!({"count": sandboxes.len(), "frozen_ms": c.frozen_ms, "bytes": c.stats.bytes}),
        );
        let mut note = "files only: memory and processes are not carried (no checkpoint/restore on this host); each fork starts with the parent's files and no running process".to_string();
        if let Some(why) = short {
            note.push_str(&format!("; {} of {count} made: {why}", sandboxes.len()));
        }
        Ok(ForkResult {
            sandboxes,
            frozen_ms: c.frozen_ms,
            freeze_method: c.method,
            carried: c.carried,
            not_carried: NOT_CARRIED.iter().map(|s| s.to_string()).collect(),
            note,
            skipped: c.stats.skipped,
        })
    }
}

/// Copies a stored tree (`workspace`, `home`, `tmp`) into a new sandbox's scratch
/// filesystems, as its host ids. Runs before the sandbox is handed to anyone: nothing in it
/// runs but its init.
pub(crate) fn restore(
    sandbox: &cordon_linux::persistent::Sandbox,
    tree: &Path,
) -> Result<CopyStats, ServiceError> {
    let root = sandbox
        .root_dir()
        .map_err(|e| ServiceError::internal(format!("sandbox root: {e}")))?;
    let owner =
        (rustix::process::geteuid().is_root()).then_some((sandbox.host_uid, sandbox.host_gid));
    let mut total = CopyStats::default();
    for (inside, stored) in SCRATCH {
        let src_path = tree.join(stored);
        let Ok(src) = treecopy::open_dir(&src_path) else {
            continue;
        };
        let Some(dst) = treecopy::open_scratch(root.as_fd(), inside) else {
            continue;
        };
        let s = treecopy::copy_tree(
            src.as_fd(),
            dst.as_fd(),
            owner,
            Budget {
                max_bytes: u64::MAX,
                max_entries: MAX_SNAPSHOT_ENTRIES,
            },
        )
        .map_err(|e| copy_error(e, "restoring the snapshot"))?;
        total.files += s.files;
        total.bytes += s.bytes;
    }
    // An image root's changes, into the new sandbox's own root (through its overlay, which
    // records them in its own writable layer): deletions first, then what was written.
    let layer = tree.join(ROOT_LAYER);
    if let (Ok(src), Some(Ok(_))) = (treecopy::open_dir(&layer), sandbox.writable_layer()) {
        let deleted: Vec<String> =
            crate::volumes::read_meta(&tree.join(ROOT_DELETED)).unwrap_or_default();
        for d in &deleted {
            treecopy::remove_beneath(root.as_fd(), d.as_bytes()).map_err(|e| {
                ServiceError::internal(format!("restoring the deletion of /{d}: {e}"))
            })?;
        }
        let s = treecopy::copy_tree(
            src.as_fd(),
            root.as_fd(),
            owner,
            Budget {
                max_bytes: u64::MAX,
                max_entries: MAX_SNAPSHOT_ENTRIES,
            },
        )
        .map_err(|e| copy_error(e, "restoring the image root's changes"))?;
        total.files += s.files;
        total.bytes += s.bytes;
    }
    Ok(total)
}
