//! Volumes: named, size-capped directories of one key, kept under the data directory across
//! server restarts and mounted into that key's sandboxes at a path, read-write or read-only.
//! Also the crash-consistent store both volumes and snapshots live in: every object is built
//! in `<data>/.partial/<random>`, flushed, and renamed into place in one step; a deletion is a
//! rename into `.partial` first. A server start removes whatever `.partial` holds, and says so.
//!
//! Threat model: names, sizes and mount paths are client input, validated before any path is
//! made of them (a name is one path component of a small alphabet; a key id likewise); a
//! volume's contents are whatever its sandboxes wrote — hostile — and are only ever walked
//! with `cordon_linux::treecopy`'s no-follow, no-cross walk. One key never sees, lists, mounts
//! or deletes another key's volume: every path includes the caller's key id.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{ErrorKind, ServiceError};
use crate::types::Amount;
use crate::{Caller, Service};

/// Volumes one key may have.
pub const MAX_VOLUMES_PER_KEY: usize = 32;
/// The largest cap a volume may ask for.
pub const MAX_VOLUME_SIZE: u64 = 1 << 40;
/// Volumes one sandbox may mount.
pub const MAX_MOUNTS: usize = 8;
/// What a volume token starts with (then `KEY_ID:VOLUME:SECRET`).
const TOKEN_PREFIX: &str = "cdnv:";
/// The one caller of a server without keys (the doors' `local`).
const OPEN_KEY: &str = "local";

/// `POST /v1/volumes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// 1 to 63 characters: lower-case letters, digits, `-`, `_`, `.`; starting with a letter
    /// or digit.
    pub name: String,
    /// Its cap, e.g. `"10G"` (see the README's *State* section for where it is enforced);
    /// 1G when absent.
    pub size: Option<Amount>,
}

/// A volume as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub name: String,
    /// The cap, in bytes.
    pub size_bytes: u64,
    /// Bytes its files take now (each hard-linked file once); absent when the tree is too
    /// large to walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
    /// The key's running sandboxes that mount it.
    #[serde(default)]
    pub mounted_by: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct VolumeList {
    pub volumes: Vec<VolumeInfo>,
}

/// One volume of a sandbox create: `volumes: [{name, path, readonly}]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    /// A volume of the caller's key.
    pub name: String,
    /// Where it appears inside the sandbox: an absolute path, not `/` and not in `/proc`,
    /// `/sys`, `/dev`, `/etc`, `/usr`, `/bin`, `/sbin`, `/lib*`.
    pub path: String,
    #[serde(default)]
    pub readonly: bool,
}

/// A volume (or snapshot) name: one path component of a small alphabet.
pub(crate) fn valid_name(what: &str, name: &str) -> Result<(), ServiceError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(ServiceError::bad_request(format!(
            "{what} name '{}': 1 to 63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit",
            name.chars().take(80).collect::<String>()
        )))
    }
}

/// A key id as a path component (ids are generated, but a path is never made of anything
/// unchecked).
pub(crate) fn key_dir(base: &Path, key_id: &str) -> Result<PathBuf, ServiceError> {
    if key_id.is_empty()
        || key_id.len() > 128
        || !key_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ServiceError::internal("a key id unfit for a path"));
    }
    Ok(base.join(key_id))
}

/// Where a mount may go: absolute, plain components only, nowhere the system lives.
pub(crate) fn valid_mount_path(p: &str) -> Result<PathBuf, ServiceError> {
    use std::path::Component;
    let path = Path::new(p);
    let plain = path.is_absolute()
        && p.len() <= 1024
        && path
            .components()
            .skip(1)
            .all(|c| matches!(c, Component::Normal(_)))
        && path.components().count() > 1;
    let first = path
        .components()
        .nth(1)
        .and_then(|c| c.as_os_str().to_str())
        .unwrap_or("");
    let system = matches!(
        first,
        "proc" | "sys" | "dev" | "etc" | "usr" | "bin" | "sbin"
    ) || first.starts_with("lib");
    if !plain || system {
        return Err(ServiceError::bad_request(format!(
            "volumes: path '{}' must be an absolute path of plain components, not / and not in /proc, /sys, /dev, /etc, /usr, /bin, /sbin or /lib*",
            p.chars().take(80).collect::<String>()
        )));
    }
    Ok(path.to_path_buf())
}

/// The crash-consistent store's scratch: everything in it is partial work.
pub(crate) fn partial_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(".partial")
}

/// A fresh directory in `.partial` to build an object in.
pub(crate) fn new_partial(data_dir: &Path, what: &str) -> Result<PathBuf, ServiceError> {
    let base = partial_dir(data_dir);
    mkdir_private(&base)?;
    let dir = base.join(format!("{what}-{}", crate::keys::random_hex(8)));
    std::fs::create_dir(&dir).map_err(|e| internal_io(&dir, e))?;
    Ok(dir)
}

pub(crate) fn mkdir_private(dir: &Path) -> Result<(), ServiceError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(internal_io(dir, e)),
    }
}

pub(crate) fn internal_io(path: &Path, e: std::io::Error) -> ServiceError {
    ServiceError::internal(format!("{}: {e}", path.display()))
}

/// Flushes a directory's entries (after a rename into or out of it).
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), ServiceError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| internal_io(dir, e))
}

/// Writes a small JSON file of an object being built, flushed.
pub(crate) fn write_meta(path: &Path, value: &impl Serialize) -> Result<(), ServiceError> {
    use std::io::Write;
    let mut f = crate::datadir::open_private(
        path,
        std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .truncate(true),
    )
    .map_err(|e| internal_io(path, e))?;
    let text =
        serde_json::to_vec_pretty(value).map_err(|e| ServiceError::internal(e.to_string()))?;
    f.write_all(&text)
        .and_then(|_| f.sync_all())
        .map_err(|e| internal_io(path, e))
}

pub(crate) fn read_meta<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let bytes = cordon_linux::treecopy::read_small(path, 1 << 20).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Moves a finished object from `.partial` to `dest` in one step (refused if `dest` exists)
/// and flushes the parent, so after a crash it is either whole there or absent.
pub(crate) fn publish(partial: &Path, dest: &Path) -> Result<(), ServiceError> {
    let parent = dest.parent().unwrap_or(Path::new("/"));
    mkdir_private(parent)?;
    fsync_dir(partial)?;
    match rustix::fs::renameat_with(
        rustix::fs::CWD,
        partial,
        rustix::fs::CWD,
        dest,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => {
            let _ = std::fs::remove_dir_all(partial);
            return Err(ServiceError {
                code: "already_exists",
                ..ServiceError::conflict(format!(
                    "'{}' exists already",
                    dest.file_name().unwrap_or_default().to_string_lossy()
                ))
            });
        }
        Err(e) => return Err(internal_io(dest, e.into())),
    }
    fsync_dir(parent)
}

/// Removes an object: renamed into `.partial` first (one step), then deleted; a crash in
/// between leaves only partial work, which the next start removes.
pub(crate) fn unpublish(data_dir: &Path, dir: &Path) -> Result<(), ServiceError> {
    let base = partial_dir(data_dir);
    mkdir_private(&base)?;
    let doomed = base.join(format!("deleted-{}", crate::keys::random_hex(8)));
    std::fs::rename(dir, &doomed).map_err(|e| internal_io(dir, e))?;
    if let Some(parent) = dir.parent() {
        fsync_dir(parent)?;
    }
    std::fs::remove_dir_all(&doomed).map_err(|e| internal_io(&doomed, e))
}

impl Service {
    fn volumes_dir(&self, caller: &Caller) -> Result<PathBuf, ServiceError> {
        key_dir(&self.cfg.data_dir.join("volumes"), &caller.key_id)
    }

    /// At start: removes what a previous server left half made or half deleted in `.partial`
    /// (a crash, `kill -9`), and says what it removed, on stderr and in the audit log.
    pub(crate) fn remove_partial_state(&self) {
        let base = partial_dir(&self.cfg.data_dir);
        let Ok(entries) = std::fs::read_dir(&base) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let r = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            let name = e.file_name().to_string_lossy().into_owned();
            match r {
                Ok(()) => {
                    eprintln!(
                        "cordon: removed partial state left by a previous run: {}",
                        path.display()
                    );
                    self.audit
                        .record("state.partial_removed", "-", None, json!({"entry": name}));
                }
                Err(err) => eprintln!(
                    "cordon: warning: could not remove partial state {}: {err}",
                    path.display()
                ),
            }
        }
    }

    pub async fn create_volume(
        &self,
        caller: &Caller,
        req: CreateVolume,
    ) -> Result<VolumeInfo, ServiceError> {
        valid_name("volume", &req.name)?;
        let size = match &req.size {
            Some(s) => s.size("size")?,
            None => 1 << 30,
        };
        if size == 0 || size > MAX_VOLUME_SIZE {
            return Err(ServiceError::bad_request(format!(
                "size: from 1 byte to {MAX_VOLUME_SIZE} bytes (1T)"
            )));
        }
        let dir = self.volumes_dir(caller)?;
        let dest = dir.join(&req.name);
        if dest.exists() {
            return Err(ServiceError {
                code: "already_exists",
                ..ServiceError::conflict(format!("volume '{}' exists already", req.name))
            });
        }
        let count = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        if count >= MAX_VOLUMES_PER_KEY {
            return Err(ServiceError::new(
                ErrorKind::NoSpace,
                "quota_exceeded",
                format!(
                    "this key has {count} volumes, the most it may have ({MAX_VOLUMES_PER_KEY}); delete one first"
                ),
            ));
        }
        let info = VolumeInfo {
            name: req.name.clone(),
            size_bytes: size,
            used_bytes: Some(0),
            created_at: crate::registry::now(),
            mounted_by: Vec::new(),
        };
        let partial = new_partial(&self.cfg.data_dir, "volume")?;
        let made = (|| {
            // The files inside belong to the server's user; as root, sandboxes see them as
            // their own through an idmapped mount.
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(partial.join("data"))
                .map_err(|e| internal_io(&partial, e))?;
            write_meta(&partial.join("volume.json"), &info)?;
            publish(&partial, &dest)
        })();
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
        made?;
        self.audit.record(
            "volume.create",
            &caller.key_id,
            None,
            json!({"volume": info.name, "size_bytes": size}),
        );
        Ok(info)
    }

    fn volume_info(&self, caller: &Caller, dir: &Path) -> Option<VolumeInfo> {
        let mut info: VolumeInfo = read_meta(&dir.join("volume.json"))?;
        info.used_bytes = cordon_linux::treecopy::usage(&dir.join("data"));
        info.mounted_by = self.mounted_by(caller, &info.name);
        Some(info)
    }

    pub async fn list_volumes(&self, caller: &Caller) -> Result<VolumeList, ServiceError> {
        let dir = self.volumes_dir(caller)?;
        let mut volumes: Vec<VolumeInfo> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| self.volume_info(caller, &e.path()))
                    .collect()
            })
            .unwrap_or_default();
        volumes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(VolumeList { volumes })
    }

    pub async fn get_volume(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<VolumeInfo, ServiceError> {
        valid_name("volume", name)?;
        self.volume_info(caller, &self.volumes_dir(caller)?.join(name))
            .ok_or_else(|| ServiceError::not_found(format!("no volume '{name}'")))
    }

    /// The caller's sandboxes (running, or being created) that mount `name`.
    fn mounted_by(&self, caller: &Caller, name: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .live
            .read()
            .map(|l| {
                l.values()
                    .filter(|s| s.key_id == caller.key_id && s.volumes.iter().any(|v| v == name))
                    .map(|s| s.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        let creating = self
            .volume_uses
            .lock()
            .map(|u| {
                u.get(&(caller.key_id.clone(), name.to_string()))
                    .copied()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        if creating > 0 {
            ids.push(format!("({creating} being created)"));
        }
        ids
    }

    /// The directory holding the caller's volume `name`'s files.
    pub(crate) fn volume_data(&self, caller: &Caller, name: &str) -> Result<PathBuf, ServiceError> {
        valid_name("volume", name)?;
        let dir = self.volumes_dir(caller)?.join(name);
        if !dir.join("volume.json").exists() {
            return Err(ServiceError::not_found(format!("no volume '{name}'")));
        }
        Ok(dir.join("data"))
    }

    /// Refuses a write of `adding` bytes that would take volume `name` past its cap. Checked
    /// before the write, so writers at the same moment can pass it together (as in a mounted
    /// volume, whose cap is watched, not enforced by the file system: see the README).
    pub(crate) fn volume_room(
        &self,
        caller: &Caller,
        name: &str,
        adding: u64,
    ) -> Result<(), ServiceError> {
        let data = self.volume_data(caller, name)?;
        let info: VolumeInfo = read_meta(&data.with_file_name("volume.json"))
            .ok_or_else(|| ServiceError::not_found(format!("no volume '{name}'")))?;
        let used = cordon_linux::treecopy::usage(&data).unwrap_or(u64::MAX);
        if used.saturating_add(adding) > info.size_bytes {
            return Err(ServiceError::new(
                ErrorKind::NoSpace,
                "volume_full",
                format!(
                    "volume '{name}' holds {used} of its {} bytes: {adding} more do not fit",
                    info.size_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The token that opens volume `name`'s files without the key (E2B's volume content API:
    /// `Authorization: Bearer TOKEN`): made at first use, kept beside the volume (0600), and
    /// valid as long as the volume and its key are. It names both, so that checking it needs
    /// no index.
    pub fn volume_token(&self, caller: &Caller, name: &str) -> Result<String, ServiceError> {
        let data = self.volume_data(caller, name)?;
        let file = data.with_file_name("token");
        if let Ok(t) = std::fs::read_to_string(&file) {
            return Ok(t.trim().to_string());
        }
        let token = format!(
            "{TOKEN_PREFIX}{}:{name}:{}",
            caller.key_id,
            crate::keys::random_hex(24)
        );
        let partial = file.with_file_name(".token.partial");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&partial)
                .map_err(|e| internal_io(&partial, e))?;
            f.write_all(token.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| internal_io(&partial, e))?;
        }
        // Two first uses at once: one rename wins and both read the winner's back.
        std::fs::rename(&partial, &file).map_err(|e| internal_io(&file, e))?;
        std::fs::read_to_string(&file)
            .map(|t| t.trim().to_string())
            .map_err(|e| internal_io(&file, e))
    }

    /// Which key and volume a volume token opens: the key must still be valid (not revoked;
    /// the request is charged to its rate limit) and the token the one kept beside the
    /// volume. `open`: the server runs without keys (its one caller is `local`).
    pub fn volume_by_token(
        &self,
        token: Option<&str>,
        open: bool,
    ) -> Result<(Caller, String), ServiceError> {
        let bad = || {
            self.metrics.deny("bad_volume_token");
            ServiceError::unauthorized("invalid volume token: use the token create or get gave")
        };
        let token = token.ok_or_else(bad)?;
        let rest = token.strip_prefix(TOKEN_PREFIX).ok_or_else(bad)?;
        let mut parts = rest.splitn(3, ':');
        let (Some(key_id), Some(name), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        if valid_name("volume", name).is_err() || key_id.is_empty() {
            return Err(bad());
        }
        let caller = if open {
            if key_id != OPEN_KEY {
                return Err(bad());
            }
            Caller {
                key_id: OPEN_KEY.into(),
                max_sandboxes: 1000,
            }
        } else {
            match self.key(key_id)? {
                Some(rec) if !rec.revoked => {
                    self.charge(&rec)?;
                    Caller {
                        key_id: rec.id,
                        max_sandboxes: rec.max_sandboxes,
                    }
                }
                _ => return Err(bad()),
            }
        };
        let kept = self
            .volume_data(&caller, name)
            .ok()
            .and_then(|d| std::fs::read_to_string(d.with_file_name("token")).ok())
            .ok_or_else(bad)?;
        if !crate::keys::constant_time_eq(kept.trim(), token) {
            return Err(bad());
        }
        Ok((caller, name.to_string()))
    }

    pub async fn delete_volume(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        valid_name("volume", name)?;
        let dir = self.volumes_dir(caller)?.join(name);
        // Held across check and removal: a create cannot take the volume in between.
        let uses = self
            .volume_uses
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        if !dir.join("volume.json").exists() {
            return Err(ServiceError::not_found(format!("no volume '{name}'")));
        }
        let mut users: Vec<String> = self
            .live
            .read()
            .map(|l| {
                l.values()
                    .filter(|s| {
                        s.key_id == caller.key_id
                            && s.sandbox.is_alive()
                            && s.volumes.iter().any(|v| v == name)
                    })
                    .map(|s| s.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        if uses
            .get(&(caller.key_id.clone(), name.to_string()))
            .is_some_and(|n| *n > 0)
        {
            users.push("a sandbox being created".into());
        }
        if !users.is_empty() {
            users.sort();
            return Err(ServiceError {
                code: "volume_in_use",
                ..ServiceError::conflict(format!(
                    "volume '{name}' is mounted by {}; delete those sandboxes first",
                    users.join(", ")
                ))
            });
        }
        unpublish(&self.cfg.data_dir, &dir)?;
        self.audit.record(
            "volume.delete",
            &caller.key_id,
            None,
            json!({"volume": name}),
        );
        Ok(())
    }

    /// Checks a create's volumes and turns them into binds of the profile; the returned guard
    /// counts them as in use until the sandbox is live (or the create failed).
    pub(crate) fn mount_volumes(
        &self,
        caller: &Caller,
        mounts: &[VolumeMount],
        profile: &mut cordon_policy::Profile,
    ) -> Result<VolumeUse<'_>, ServiceError> {
        if mounts.len() > MAX_MOUNTS {
            return Err(ServiceError::bad_request(format!(
                "volumes: at most {MAX_MOUNTS} per sandbox"
            )));
        }
        let mut names = Vec::new();
        let mut paths = Vec::new();
        let uses = self
            .volume_uses
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        for m in mounts {
            valid_name("volume", &m.name)?;
            let dest = valid_mount_path(&m.path)?;
            if paths
                .iter()
                .any(|p: &PathBuf| p.starts_with(&dest) || dest.starts_with(p))
            {
                return Err(ServiceError::bad_request(format!(
                    "volumes: path '{}' overlaps another volume's",
                    m.path
                )));
            }
            let dir = self.volumes_dir(caller)?.join(&m.name);
            let info: VolumeInfo = read_meta(&dir.join("volume.json"))
                .ok_or_else(|| ServiceError::not_found(format!("no volume '{}'", m.name)))?;
            if !m.readonly {
                let used = cordon_linux::treecopy::usage(&dir.join("data")).unwrap_or(u64::MAX);
                if used >= info.size_bytes {
                    return Err(ServiceError::new(
                        ErrorKind::NoSpace,
                        "volume_full",
                        format!(
                            "volume '{}' is full ({used} of its {} bytes): mount it readonly, or delete files from it",
                            m.name, info.size_bytes
                        ),
                    ));
                }
            }
            // Resolved here (the data directory is the server's; no sandbox writes above a
            // volume's `data`): the engine opens a volume's path without following links.
            let source = std::fs::canonicalize(dir.join("data")).unwrap_or(dir.join("data"));
            profile.binds.push(cordon_policy::profile::Bind {
                source,
                dest: dest.clone(),
                writable: !m.readonly,
                idmap: true,
                limit: (!m.readonly).then_some(info.size_bytes),
            });
            paths.push(dest);
            names.push(m.name.clone());
        }
        drop(uses);
        let mut held = VolumeUse {
            svc: self,
            key_id: caller.key_id.clone(),
            names: Vec::new(),
        };
        held.hold(&names);
        Ok(held)
    }
}

/// Volumes a create under way mounts: counted as in use until dropped.
pub(crate) struct VolumeUse<'a> {
    svc: &'a Service,
    key_id: String,
    pub(crate) names: Vec<String>,
}

impl VolumeUse<'_> {
    /// Counts `names` as in use too, until this drops.
    pub(crate) fn hold(&mut self, names: &[String]) {
        if let Ok(mut u) = self.svc.volume_uses.lock() {
            for n in names {
                *u.entry((self.key_id.clone(), n.clone())).or_insert(0) += 1;
                self.names.push(n.clone());
            }
        }
    }
}

impl Drop for VolumeUse<'_> {
    fn drop(&mut self) {
        if let Ok(mut u) = self.svc.volume_uses.lock() {
            for n in &self.names {
                let k = (self.key_id.clone(), n.clone());
                if let Some(c) = u.get_mut(&k) {
                    *c = c.saturating_sub(1);
                    if *c == 0 {
                        u.remove(&k);
                    }
                }
            }
        }
    }
}
