//! The temporary data directory of a `cordon mcp` session started without `--data-dir`: made
//! private (mode 0700, under a fresh name `mkdir` refuses to reuse), locked for the session's
//! life, removed at its end. An agent host may SIGKILL a session that is slow to end (the MCP
//! Python SDK does, 2 s after its SIGTERM), and a killed process removes nothing; so each new
//! session first removes the directories whose session is gone — their lock is free.
//!
//! Threat model: the temporary directory may be shared with other users, who can plant entries
//! named like ours. A name is never reused (`mkdir` fails on anything already there, a link
//! included), and the sweep removes only real directories (never links) owned by our uid whose
//! lock file is free and not brand new; `std::fs::remove_dir_all` does not follow links.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const PREFIX: &str = "cordon-mcp-";
const LOCK: &str = ".session.lock";
/// A lock file younger than this may belong to a session that made it and is about to lock it.
const SETTLE: Duration = Duration::from_secs(10);

/// A session's directory, held (its lock taken) until [`SessionDir::remove`] or the process's end.
pub struct SessionDir {
    path: PathBuf,
    _lock: File,
}

impl SessionDir {
    /// A new private directory `cordon-mcp-<pid>-<n>` under `parent`, its lock taken.
    pub fn create(parent: &Path) -> io::Result<Self> {
        let pid = std::process::id();
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for n in 0..100u32 {
            let path = parent.join(format!("{PREFIX}{pid}-{:x}", nanos.wrapping_add(n)));
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let lock = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                        .open(path.join(LOCK))?;
                    lock.try_lock().map_err(|e| {
                        io::Error::other(format!("cannot lock {}: {e}", path.display()))
                    })?;
                    return Ok(Self { path, _lock: lock });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other(format!(
            "no free name for a session directory under {}",
            parent.display()
        )))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory (the lock goes with the process's file). A sandbox's last
    /// processes may still be writing as they end: "not empty" is tried again for a while.
    pub fn remove(self) -> io::Result<()> {
        let mut tries = 0;
        loop {
            match remove_keeping_the_lock_last(&self.path) {
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => return Ok(()),
            }
        }
    }
}

/// Removes `dir` with its lock file last: a removal cut short leaves a directory the next
/// session's sweep still recognises (and removes) as a session's.
fn remove_keeping_the_lock_last(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == LOCK {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    match std::fs::remove_file(dir.join(LOCK)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::remove_dir(dir)
}

/// Removes the session directories under `parent` that no live session holds; returns them.
/// Errors on single entries are skipped: the sweep is housekeeping, never a reason to fail.
pub fn sweep_stale(parent: &Path) -> Vec<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(PREFIX) {
            continue;
        }
        let path = entry.path();
        // symlink_metadata: a link planted under our name is not followed, and not ours.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        if is_stale(&path) && remove_keeping_the_lock_last(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

fn is_stale(dir: &Path) -> bool {
    let Ok(lock) = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(dir.join(LOCK))
    else {
        // No lock file: a session that has just made its directory, or someone else's.
        return false;
    };
    let settled = lock
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= SETTLE);
    // The lock is released with our file when this returns; a free lock means no session.
    settled && lock.try_lock().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(60);
        let f = File::options().write(true).open(path).expect("open");
        f.set_modified(old).expect("set mtime");
    }

    #[test]
    fn a_held_directory_is_kept_and_a_released_one_is_swept() {
        let parent = std::env::temp_dir().join(format!("sd-test-{}", std::process::id()));
        std::fs::create_dir_all(&parent).expect("parent");
        let held = SessionDir::create(&parent).expect("held");
        let gone = SessionDir::create(&parent).expect("gone");
        age(&held.path().join(LOCK));
        age(&gone.path().join(LOCK));
        let gone_path = gone.path().to_path_buf();
        // A session killed without cleaning: its directory stays, its lock is released.
        drop(gone);
        assert!(gone_path.exists());
        let removed = sweep_stale(&parent);
        assert_eq!(removed, vec![gone_path.clone()]);
        assert!(
            held.path().exists(),
            "a live session's directory was removed"
        );
        assert!(!gone_path.exists());
        held.remove().expect("remove");
        std::fs::remove_dir_all(&parent).expect("cleanup");
    }

    #[test]
    fn a_fresh_lock_a_missing_lock_and_a_planted_link_are_left_alone() {
        let parent = std::env::temp_dir().join(format!("sd-test2-{}", std::process::id()));
        std::fs::create_dir_all(&parent).expect("parent");
        let victim = parent.join("victim");
        std::fs::create_dir_all(&victim).expect("victim");
        std::fs::write(victim.join(LOCK), b"").expect("victim lock");
        age(&victim.join(LOCK));
        std::os::unix::fs::symlink(&victim, parent.join(format!("{PREFIX}link"))).expect("link");
        std::fs::create_dir(parent.join(format!("{PREFIX}nolock"))).expect("nolock");
        let fresh = SessionDir::create(&parent).expect("fresh");
        let fresh_path = fresh.path().to_path_buf();
        drop(fresh); // released, but its lock is younger than SETTLE
        assert!(sweep_stale(&parent).is_empty());
        assert!(
            victim.join(LOCK).exists(),
            "the sweep followed a planted link"
        );
        assert!(fresh_path.exists());
        assert!(parent.join(format!("{PREFIX}nolock")).exists());
        std::fs::remove_dir_all(&parent).expect("cleanup");
    }

    #[test]
    fn a_name_already_taken_is_never_reused() {
        let parent = std::env::temp_dir().join(format!("sd-test3-{}", std::process::id()));
        std::fs::create_dir_all(&parent).expect("parent");
        let a = SessionDir::create(&parent).expect("a");
        let b = SessionDir::create(&parent).expect("b");
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o700);
        a.remove().expect("a");
        b.remove().expect("b");
        std::fs::remove_dir_all(&parent).expect("cleanup");
    }
}
