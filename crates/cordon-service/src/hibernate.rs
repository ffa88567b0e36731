//! Pause to disk: a paused sandbox's files — what a snapshot holds: `/workspace`, its home,
//! `/tmp` — kept under the data directory, so that it comes back with the same id and files
//! (and a fresh boot: new processes, a new boot id) after its memory was given up, or after
//! the server restarted or was killed.
//!
//! Two kinds of pause keep files here. `keep_memory: false` (E2B's files-only pause) copies
//! the files with the processes frozen, then ends the sandbox: its memory and its slot in the
//! key's quota are released, and a resume starts it again from its profile and these files.
//! A pause that keeps memory (the default) freezes the sandbox as before and also copies its
//! files, so that a restart of the server — which ends every process — finds it paused to disk
//! rather than gone. A resume of a frozen sandbox removes the copy before it thaws it.
//!
//! Crash consistency: the copy is built in `.partial` and published by one rename (see
//! `volumes`); the registry row moves to `paused` only after. At start, a `running` row whose
//! files are here is a sandbox paused to disk; one without is gone, as before.
//!
//! Threat model: the files were written by hostile code; the copy and the restore are
//! snapshots' (`cordon_linux::treecopy`: no link followed, no other filesystem crossed,
//! setuid bits dropped, bounded). The record holds the sandbox's profile — secrets only as
//! names and placeholders, never values — 0600 in a 0700 directory per key. An id from a
//! request never becomes a path: only an id the registry holds for the caller's key does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cordon_linux::treecopy::Budget;
use cordon_policy::Profile;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::ServiceError;
use crate::registry::{now, SandboxRow};
use crate::snapshots::{MAX_SNAPSHOT_BYTES_PER_KEY, MAX_SNAPSHOT_ENTRIES};
use crate::types::{SandboxInfo, SandboxState};
use crate::volumes::{key_dir, new_partial, publish, read_meta, unpublish, write_meta};
use crate::{Caller, Live, Service};

/// What a sandbox paused to disk is started again from.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) id: String,
    pub(crate) key_id: String,
    pub(crate) profile: Profile,
    pub(crate) metadata: BTreeMap<String, String>,
    /// The key's volumes it mounts (its profile binds them).
    pub(crate) volumes: Vec<String>,
    pub(crate) pause_on_timeout: bool,
    pub(crate) pause_keep_memory: bool,
    /// Unix seconds.
    pub(crate) paused_at: u64,
    pub(crate) bytes: u64,
    pub(crate) files: u64,
    /// Who may reach its ports (its traffic access token, public or not).
    #[serde(default)]
    pub(crate) ports: Option<crate::ports::PortGrant>,
}

/// How a paused sandbox's `paused_by` reads once only its files are left.
pub const PAUSED_TO_DISK: &str = "disk";

/// What a resume from disk does not bring back, as the answers and the README say it.
pub const NOTE: &str = "paused to disk: its files (/workspace, the home, /tmp) are kept; memory and processes are not, and a resume starts it afresh with them";

impl Service {
    fn paused_root(&self, key_id: &str) -> Result<PathBuf, ServiceError> {
        key_dir(&self.cfg.data_dir.join("paused"), key_id)
    }

    /// Where `id`'s files are kept; `id` must be one the registry gave (never a request's).
    fn paused_dir(&self, key_id: &str, id: &str) -> Result<PathBuf, ServiceError> {
        if id.is_empty()
            || id.len() > 128
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ServiceError::internal("a sandbox id unfit for a path"));
        }
        Ok(self.paused_root(key_id)?.join(id))
    }

    fn record(&self, key_id: &str, id: &str) -> Option<Record> {
        let dir = self.paused_dir(key_id, id).ok()?;
        read_meta(&dir.join("paused.json"))
    }

    /// Copies `live`'s files to disk (its processes frozen for the copy; a paused one stays
    /// paused), replacing an older copy.
    pub(crate) async fn keep_files(&self, live: &Arc<Live>) -> Result<Record, ServiceError> {
        let dest = self.paused_dir(&live.key_id, &live.id)?;
        let partial = new_partial(&self.cfg.data_dir, "paused")?;
        let made = async {
            let tree = partial.join("tree");
            std::fs::create_dir(&tree).map_err(|e| crate::volumes::internal_io(&tree, e))?;
            let budget = Budget {
                max_bytes: MAX_SNAPSHOT_BYTES_PER_KEY,
                max_entries: MAX_SNAPSHOT_ENTRIES,
            };
            let c = self
                .capture(live, tree.clone(), budget, "pausing to disk")
                .await?;
            let t = tree.clone();
            tokio::task::spawn_blocking(move || {
                use std::os::fd::AsFd;
                cordon_linux::treecopy::open_dir(&t)
                    .and_then(|fd| cordon_linux::treecopy::sync_fs(fd.as_fd()))
            })
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?
            .map_err(|e| crate::volumes::internal_io(&tree, e))?;
            let mut profile = live.profile.clone();
            if let Ok(n) = live.network.lock() {
                profile.network = n.clone();
            }
            let record = Record {
                id: live.id.clone(),
                key_id: live.key_id.clone(),
                profile,
                metadata: live.metadata.clone(),
                volumes: live.volumes.clone(),
                pause_on_timeout: live.pause_on_timeout.load(Ordering::SeqCst),
                pause_keep_memory: live.pause_keep_memory,
                paused_at: now(),
                bytes: c.stats.bytes,
                files: c.stats.files,
                ports: Some(live.ports.clone()),
            };
            write_meta(&partial.join("paused.json"), &record)?;
            if dest.exists() {
                unpublish(&self.cfg.data_dir, &dest)?;
            }
            publish(&partial, &dest)?;
            Ok::<_, ServiceError>(record)
        }
        .await;
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&partial);
        }
        // Resumed while its files were copied (a connect racing a pause at the timeout): the
        // copy is stale already, and must not bring back an older sandbox after a restart.
        if made.is_ok() && live.sandbox.paused().is_none() {
            self.drop_files(&live.key_id, &live.id);
        }
        made
    }

    /// Removes `id`'s files kept on disk, if any (a resume, a delete, an expiry).
    pub(crate) fn drop_files(&self, key_id: &str, id: &str) {
        if let Ok(dir) = self.paused_dir(key_id, id) {
            if dir.exists() {
                if let Err(e) = unpublish(&self.cfg.data_dir, &dir) {
                    eprintln!("cordon: removing {}'s paused files: {}", id, e.message);
                }
            }
        }
    }

    /// Whether `id` has a copy of its files on disk.
    pub(crate) fn has_files(&self, key_id: &str, id: &str) -> bool {
        self.paused_dir(key_id, id)
            .is_ok_and(|d| d.join("paused.json").exists())
    }

    /// The caller's sandbox `id` if it is paused to disk.
    fn sleeping(&self, caller: &Caller, id: &str) -> Option<(SandboxRow, Record)> {
        let row = self.registry.sandbox(id).ok()??;
        if row.key_id != caller.key_id || row.state != SandboxState::Paused.as_str() {
            return None;
        }
        let rec = self.record(&row.key_id, &row.id)?;
        Some((row, rec))
    }

    /// A sandbox paused to disk as the API shows it.
    pub(crate) fn sleeping_info(row: SandboxRow) -> SandboxInfo {
        Service::row_info(row, SandboxState::Paused, Some(PAUSED_TO_DISK.into()))
    }

    /// A sandbox that is not live (ended, or paused to disk) as its registry row has it.
    pub(crate) fn row_info(
        row: SandboxRow,
        state: SandboxState,
        paused_by: Option<String>,
    ) -> SandboxInfo {
        SandboxInfo {
            id: row.id,
            state,
            profile: row.profile,
            created_at: row.created_at,
            created_ms: row.created_at.saturating_mul(1000),
            expires_at: row.expires_at,
            metadata: serde_json::from_str(&row.metadata).unwrap_or_default(),
            enforcement: None,
            limits: None,
            ended_reason: row.ended_reason,
            paused_by,
            pause_on_timeout: false,
            note: None,
        }
    }

    /// The caller's sandboxes paused to disk, for a list.
    pub(crate) fn sleeping_list(&self, caller: &Caller) -> Vec<SandboxInfo> {
        self.registry
            .paused(Some(&caller.key_id))
            .unwrap_or_default()
            .into_iter()
            .map(Service::sleeping_info)
            .collect()
    }

    /// Whether the caller's `id` is paused to disk (a resume can bring it back).
    pub fn is_paused_to_disk(&self, caller: &Caller, id: &str) -> bool {
        self.sleeping(caller, id).is_some()
    }

    /// Pauses `live` to disk: its files kept, then the sandbox ended (its memory and quota
    /// slot released), its row `paused`. Frozen first, so nothing is written after the copy.
    pub(crate) async fn pause_to_disk(
        &self,
        live: &Arc<Live>,
        why: &str,
    ) -> Result<SandboxInfo, ServiceError> {
        if live.sandbox.paused().is_none() {
            let sb = live.sandbox.clone();
            let name = format!("{}-{}", self.pause_scope(), live.id);
            tokio::task::spawn_blocking(move || sb.pause(&name))
                .await
                .map_err(|e| ServiceError::internal(e.to_string()))?
                .map_err(|e| ServiceError {
                    code: "sandbox_unavailable",
                    ..ServiceError::conflict(e.to_string())
                })?;
        }
        let rec = match self.keep_files(live).await {
            Ok(r) => r,
            Err(e) => {
                // Not paused after all: it runs on as it was.
                let sb = live.sandbox.clone();
                let _ = tokio::task::spawn_blocking(move || sb.resume()).await;
                return Err(e);
            }
        };
        let keep = now() + self.cfg.max_ttl.as_secs();
        live.expires_at.store(keep, Ordering::SeqCst);
        self.registry.set_expiry(&live.id, keep)?;
        self.destroy(live, SandboxState::Paused, &format!("{why}; {NOTE}"))
            .await;
        self.audit.record(
            "sandbox.pause_to_disk",
            &live.key_id,
            Some(&live.id),
            json!({"why": why, "bytes": rec.bytes, "files": rec.files}),
        );
        let mut info = live.info();
        info.state = SandboxState::Paused;
        info.paused_by = Some(PAUSED_TO_DISK.into());
        info.enforcement = None;
        info.limits = None;
        info.expires_at = keep;
        info.ended_reason = Some(NOTE.into());
        Ok(info)
    }

    /// Starts the caller's sandbox paused to disk again: same id, profile, labels and
    /// volumes, its files copied in before anyone can reach it. `None` if `id` is not one.
    pub(crate) async fn wake(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
    ) -> Option<Result<SandboxInfo, ServiceError>> {
        let (row, rec) = self.sleeping(caller, id)?;
        let dir = match self.paused_dir(&row.key_id, &row.id) {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let req = crate::types::CreateSandbox {
            metadata: rec.metadata.clone(),
            pause_on_timeout: rec.pause_on_timeout,
            pause_keep_memory: Some(rec.pause_keep_memory),
            ..Default::default()
        };
        let seed = crate::lifecycle::Seed {
            tree: Some(dir.join("tree")),
            volumes: rec.volumes.clone(),
            id: Some(row.id.clone()),
            ports: rec.ports.clone(),
        };
        let made = self
            .create_seeded(caller, req, Some(rec.profile), seed)
            .await;
        if made.is_ok() {
            // Running again with these files: the copy is stale from now on.
            self.drop_files(&row.key_id, &row.id);
            self.audit.record(
                "sandbox.resume_from_disk",
                &caller.key_id,
                Some(&row.id),
                json!({"bytes": rec.bytes, "files": rec.files}),
            );
        }
        Some(made)
    }

    /// Deletes the caller's sandbox paused to disk. False if `id` is not one.
    pub(crate) fn delete_sleeping(&self, caller: &Caller, id: &str, state: SandboxState) -> bool {
        let Some((row, _)) = self.sleeping(caller, id) else {
            return false;
        };
        self.drop_files(&row.key_id, &row.id);
        let _ = self
            .registry
            .mark_ended(&row.id, state.as_str(), "deleted while paused to disk");
        true
    }

    /// Ends sandboxes paused to disk past the time they are kept (the server's `--max-ttl`
    /// from their pause, or from a resume's new time to live).
    pub(crate) fn reap_sleeping(&self) {
        let t = now();
        for row in self.registry.paused(None).unwrap_or_default() {
            if row.expires_at > t {
                continue;
            }
            self.drop_files(&row.key_id, &row.id);
            let _ = self.registry.mark_ended(
                &row.id,
                SandboxState::Expired.as_str(),
                "kept paused to disk for the longest this server keeps a sandbox (--max-ttl)",
            );
            self.audit.record(
                "sandbox.expired",
                &row.key_id,
                Some(&row.id),
                json!({"reason": "paused to disk past --max-ttl"}),
            );
        }
    }

    /// At start: a sandbox the previous server left `running` with its files on disk (a pause
    /// that kept memory, or a pause to disk cut before its row moved) is paused to disk now.
    /// True if `row` was one.
    pub(crate) fn adopt_after_restart(&self, row: &SandboxRow) -> bool {
        if !self.has_files(&row.key_id, &row.id) {
            return false;
        }
        let keep = now() + self.cfg.max_ttl.as_secs();
        let _ = self.registry.set_expiry(&row.id, keep);
        let _ = self.registry.mark_ended(
            &row.id,
            SandboxState::Paused.as_str(),
            &format!("the server restarted while it was paused; {NOTE}"),
        );
        self.audit.record(
            "sandbox.pause_to_disk",
            &row.key_id,
            Some(&row.id),
            json!({"why": "server restart"}),
        );
        true
    }

    /// At start: a row `paused` whose files are gone (removed by hand, or a damaged store)
    /// cannot come back; it is recorded as reaped, not listed as paused.
    pub(crate) fn forget_lost_sleepers(&self) {
        for row in self.registry.paused(None).unwrap_or_default() {
            if !self.has_files(&row.key_id, &row.id) {
                let _ = self.registry.mark_ended(
                    &row.id,
                    SandboxState::Reaped.as_str(),
                    "paused to disk, but its files are no longer in the data directory",
                );
            }
        }
    }
}
