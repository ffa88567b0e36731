//! The compiled-code cache: only the first run of a module pays for compiling it.
//!
//! - **Content-addressed**: an entry's name is the SHA-256 of the module's bytes, its kind,
//!   wasmtime's version, cordon's engine settings and the target, so a changed module or a new
//!   wasmtime never meets an old artifact (and one compiled for another CPU's features is
//!   refused by wasmtime's check on load, then recompiled).
//! - **Safe against concurrent processes**: an entry is written to a temporary file in the
//!   same directory and renamed into place, so a reader sees a whole entry or none; two
//!   processes compiling the same module both rename, and either result is correct.
//! - **Safe against a tampered file**: `Module::deserialize` turns bytes into native code
//!   without validating them, so every entry carries an HMAC-SHA256 of its name and artifact
//!   under a key kept beside the cache (mode 0600, created once from the OS's random source).
//!   An entry whose tag does not verify — edited, truncated, copied from another entry — is
//!   a miss, and is recompiled and replaced. The key never enters a sandbox (the confined
//!   runtime gets artifacts through the supervisor that checked them), so code inside one
//!   cannot forge an entry even where it can write the cache's files.
//!
//! Entries are never evicted: each is the size of the module's native code, and the directory
//! may be removed at any time (the next run recompiles).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::engine::Kind;
use crate::WasmError;

/// First bytes of every entry; a new layout gets a new magic.
const MAGIC: &[u8; 8] = b"CORDONW1";
const TAG_LEN: usize = 32;
const KEY_LEN: usize = 32;
/// Entries larger than this are not read (no module's native code comes near it).
const MAX_ENTRY: u64 = 1 << 30;
const KEY_FILE: &str = "key";

type HmacSha256 = Hmac<Sha256>;

/// A cache directory and its key.
pub struct Cache {
    dir: PathBuf,
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Cache").field("dir", &self.dir).finish()
    }
}

/// The cache key of `bytes`: hex SHA-256 of the module, its kind, wasmtime's version, the
/// engine's settings and the target — computed without building an `Engine`.
pub fn key(kind: Kind, bytes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"\0cordon-wasm cache v2\0");
    for part in [
        wasmtime_environ::VERSION,
        &crate::engine::settings(),
        std::env::consts::ARCH,
        std::env::consts::OS,
        kind.name(),
    ] {
        h.update(part.as_bytes());
        h.update(b"\0");
    }
    h.update(bytes);
    hex::encode(h.finalize())
}

/// Where the cache lives unless told otherwise: `$CORDON_WASM_CACHE`, else
/// `$XDG_CACHE_HOME/cordon/wasm`, else `/var/cache/cordon/wasm` for root and
/// `~/.cache/cordon/wasm` for everyone else.
pub fn default_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = env("CORDON_WASM_CACHE") {
        return Some(d);
    }
    if let Some(d) = env("XDG_CACHE_HOME") {
        return Some(d.join("cordon/wasm"));
    }
    if rustix::process::geteuid().is_root() {
        return Some(PathBuf::from("/var/cache/cordon/wasm"));
    }
    env("HOME").map(|h| h.join(".cache/cordon/wasm"))
}

impl Cache {
    /// Opens the cache at `dir`, creating it (mode 0700) and its key (mode 0600) when missing.
    /// Refuses a key file that others may read or write: whoever reads the key can forge
    /// entries.
    pub fn open(dir: &Path) -> Result<Cache, WasmError> {
        let fail = |message: String| WasmError::Cache {
            path: dir.to_path_buf(),
            message,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(format!("cannot create it: {e}")))?;
        let key_path = dir.join(KEY_FILE);
        if !key_path.exists() {
            create_key(dir, &key_path).map_err(|e| fail(format!("cannot create its key: {e}")))?;
        }
        let mut f = File::open(&key_path).map_err(|e| fail(format!("cannot read its key: {e}")))?;
        let meta = f
            .metadata()
            .map_err(|e| fail(format!("cannot read its key: {e}")))?;
        if meta.mode() & 0o077 != 0 {
            return Err(fail(format!(
                "its key file is open to other users (mode {:o}); remove the directory and \
                 let cordon create it again",
                meta.mode() & 0o777
            )));
        }
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(fail(
                "its key file belongs to another user; use a cache of your own \
                 (CORDON_WASM_CACHE)"
                    .into(),
            ));
        }
        let mut key = [0u8; KEY_LEN];
        let mut extra = [0u8; 1];
        f.read_exact(&mut key)
            .map_err(|_| fail("its key file is damaged (too short)".into()))?;
        if f.read(&mut extra).unwrap_or(0) != 0 {
            return Err(fail("its key file is damaged (too long)".into()));
        }
        Ok(Cache {
            dir: dir.to_path_buf(),
            key,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry_path(&self, name: &str) -> Option<PathBuf> {
        // Names are hex digests; anything else never becomes a path.
        let ok = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
        ok.then(|| self.dir.join(format!("{name}.cwasm")))
    }

    fn tag(&self, name: &str, artifact: &[u8]) -> HmacSha256 {
        // A key of any length is accepted by HMAC; this cannot fail.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(name.as_bytes());
        mac.update(b"\0");
        mac.update(artifact);
        mac
    }

    /// The verified artifact stored under `name`, or `None` (missing, unreadable, or its tag
    /// does not verify).
    pub fn lookup(&self, name: &str) -> Option<Vec<u8>> {
        let path = self.entry_path(name)?;
        let f = File::open(&path).ok()?;
        let mut data = Vec::new();
        f.take(MAX_ENTRY).read_to_end(&mut data).ok()?;
        self.verify(name, data)
    }

    fn verify(&self, name: &str, mut data: Vec<u8>) -> Option<Vec<u8>> {
        let head = MAGIC.len() + TAG_LEN;
        if data.len() < head || &data[..MAGIC.len()] != MAGIC {
            return None;
        }
        let tag = data[MAGIC.len()..head].to_vec();
        // Constant-time comparison.
        self.tag(name, &data[head..]).verify_slice(&tag).ok()?;
        data.drain(..head);
        Some(data)
    }

    /// Stores `artifact` under `name`: a temporary file in the cache directory, renamed into
    /// place.
    pub fn store(&self, name: &str, artifact: &[u8]) -> Result<(), WasmError> {
        let fail = |message: String| WasmError::Cache {
            path: self.dir.clone(),
            message,
        };
        let path = self
            .entry_path(name)
            .ok_or_else(|| fail(format!("'{name}' is not an entry name")))?;
        let tag = self.tag(name, artifact).finalize().into_bytes();
        let tmp = self.dir.join(temp_name("entry"));
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&tag)?;
            f.write_all(artifact)?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(format!("cannot write an entry: {e}")));
        }
        Ok(())
    }
}

/// A name no other process or thread uses at the same time.
fn temp_name(what: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        ".{what}.{}.{}.{nanos}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes a fresh random key to a temporary file and links it into place: of two processes
/// creating the key at once, one link wins and both read the winner's key.
fn create_key(dir: &Path, key_path: &Path) -> std::io::Result<()> {
    let mut key = [0u8; KEY_LEN];
    getrandom::getrandom(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(temp_name("key"));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(&key)?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, key_path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cordon-wasm-cache-{name}-{}-{}",
            std::process::id(),
            temp_name("t")
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    const NAME: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OTHER: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    #[test]
    fn stored_entries_come_back_and_tampered_ones_do_not() {
        let dir = scratch("tamper");
        let c = Cache::open(&dir).unwrap();
        assert_eq!(c.lookup(NAME), None);
        c.store(NAME, b"native code").unwrap();
        assert_eq!(c.lookup(NAME).as_deref(), Some(&b"native code"[..]));
        let path = c.entry_path(NAME).unwrap();
        let good = std::fs::read(&path).unwrap();

        // One flipped bit in the artifact.
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(c.lookup(NAME), None, "flipped bit");

        // Truncated, down to nothing.
        for len in [good.len() - 1, MAGIC.len() + TAG_LEN, 10, 0] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert_eq!(c.lookup(NAME), None, "truncated to {len}");
        }

        // A valid entry of another module copied over this one.
        c.store(OTHER, b"other code").unwrap();
        std::fs::copy(c.entry_path(OTHER).unwrap(), &path).unwrap();
        assert_eq!(c.lookup(NAME), None, "entry moved between names");

        // Forged with a key of the attacker's own.
        let mut forger = Cache::open(&scratch("forger")).unwrap();
        forger.dir = dir.clone();
        forger.store(NAME, b"evil code").unwrap();
        assert_eq!(c.lookup(NAME), None, "forged with another key");

        // The same cache opened again (another process) reads what this one wrote.
        c.store(NAME, b"native code").unwrap();
        let again = Cache::open(&dir).unwrap();
        assert_eq!(again.lookup(NAME).as_deref(), Some(&b"native code"[..]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_are_never_paths() {
        let dir = scratch("names");
        let c = Cache::open(&dir).unwrap();
        for bad in ["../key", "key", "", "0123/../../etc/passwd"] {
            assert!(c.store(bad, b"x").is_err(), "{bad}");
            assert_eq!(c.lookup(bad), None);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_key_open_to_others_is_refused() {
        let dir = scratch("mode");
        drop(Cache::open(&dir).unwrap());
        let key = dir.join(KEY_FILE);
        assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Cache::open(&dir).unwrap_err().to_string();
        assert!(err.contains("open to other users"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_writers_and_readers_see_whole_entries() {
        let dir = scratch("race");
        // Each thread opens the cache itself, as separate processes would (the first ones
        // race to create the key).
        let threads: Vec<_> = (0..8u8)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let c = Cache::open(&dir).unwrap();
                    let artifact = vec![i; 256 << 10];
                    for _ in 0..20 {
                        c.store(NAME, &artifact).unwrap();
                        if let Some(got) = c.lookup(NAME) {
                            assert_eq!(got.len(), 256 << 10);
                            assert!(got.iter().all(|b| *b == got[0]), "a torn entry");
                        } else {
                            panic!("a whole entry failed to verify");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
