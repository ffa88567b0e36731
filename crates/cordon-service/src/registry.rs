//! The node's SQLite registry: API keys and the sandboxes this node owns.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::error::ServiceError;

/// Per-key limits.
#[derive(Debug, Clone, Serialize)]
pub struct KeyRecord {
    pub id: String,
    pub name: String,
    pub max_sandboxes: u32,
    pub requests_per_second: u32,
    pub created_at: u64,
    pub revoked: bool,
    /// May see and act on what is the host's rather than a tenant's: the keys, the host's
    /// enforcement, the gateways' held calls. A data directory's first key is one.
    pub admin: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxRow {
    pub id: String,
    pub key_id: String,
    pub state: String,
    pub profile: String,
    pub metadata: String,
    pub created_at: u64,
    pub expires_at: u64,
    pub helper_pid: i64,
    pub ended_reason: Option<String>,
}

pub struct Registry {
    conn: Mutex<Connection>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Registry {
    pub fn open(path: &Path) -> Result<Registry, ServiceError> {
        crate::datadir::prepare_db(path)
            .map_err(|e| ServiceError::internal(format!("registry {}: {e}", path.display())))?;
        let conn = Connection::open(path)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS api_keys (
                 id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,
                 max_sandboxes INTEGER NOT NULL, rps INTEGER NOT NULL,
                 created_at INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS sandboxes (
                 id TEXT PRIMARY KEY, key_id TEXT NOT NULL, state TEXT NOT NULL,
                 profile TEXT NOT NULL, metadata TEXT NOT NULL,
                 created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,
                 helper_pid INTEGER NOT NULL DEFAULT 0, ended_reason TEXT,
                 ended_at INTEGER);",
        )?;
        // Keys made before admin keys existed: the first one (the key `cordon serve` printed
        // at first start, the operator's) becomes the admin key.
        let has_admin = conn.prepare("SELECT admin FROM api_keys LIMIT 0").is_ok();
        if !has_admin {
            conn.execute_batch(
                "ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
                 UPDATE api_keys SET admin = 1 WHERE id =
                     (SELECT id FROM api_keys ORDER BY created_at, rowid LIMIT 1);",
            )?;
        }
        Ok(Registry {
            conn: Mutex::new(conn),
        })
    }

    /// Makes a key an admin key (or not).
    pub fn set_admin(&self, id: &str, admin: bool) -> Result<bool, ServiceError> {
        Ok(self.conn()?.execute(
            "UPDATE api_keys SET admin = ?2 WHERE id = ?1",
            params![id, admin as i64],
        )? > 0)
    }

    pub(crate) fn conn(&self) -> Result<std::sync::MutexGuard<'_, Connection>, ServiceError> {
        self.conn
            .lock()
            .map_err(|_| ServiceError::internal("registry lock poisoned"))
    }

    pub fn add_key(
        &self,
        id: &str,
        name: &str,
        hash: &str,
        max_sandboxes: u32,
        rps: u32,
    ) -> Result<(), ServiceError> {
        self.conn()?.execute(
            // A data directory's first key is its admin key.
            "INSERT INTO api_keys (id, name, hash, max_sandboxes, rps, created_at, admin) VALUES (?1, ?2, ?3, ?4, ?5, ?6, (SELECT COUNT(*) = 0 FROM api_keys))",
            params![id, name, hash, max_sandboxes, rps, now()],
        )?;
        Ok(())
    }

    pub fn key_by_hash(&self, hash: &str) -> Result<Option<KeyRecord>, ServiceError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT id, name, max_sandboxes, rps, created_at, revoked, admin FROM api_keys WHERE hash = ?1",
                params![hash],
                key_row,
            )
            .optional()?)
    }

    pub fn key_by_id(&self, id: &str) -> Result<Option<KeyRecord>, ServiceError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT id, name, max_sandboxes, rps, created_at, revoked, admin FROM api_keys WHERE id = ?1",
                params![id],
                key_row,
            )
            .optional()?)
    }

    pub fn list_keys(&self) -> Result<Vec<KeyRecord>, ServiceError> {
        let conn = self.conn()?;
        let mut st = conn.prepare("SELECT id, name, max_sandboxes, rps, created_at, revoked, admin FROM api_keys ORDER BY created_at")?;
        let rows = st.query_map([], key_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    pub fn revoke_key(&self, id: &str) -> Result<bool, ServiceError> {
        Ok(self
            .conn()?
            .execute("UPDATE api_keys SET revoked = 1 WHERE id = ?1", params![id])?
            > 0)
    }

    pub fn active_keys(&self) -> Result<usize, ServiceError> {
        let n: i64 =
            self.conn()?
                .query_row("SELECT COUNT(*) FROM api_keys WHERE revoked = 0", [], |r| {
                    r.get(0)
                })?;
        Ok(n as usize)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn insert_sandbox(
        &self,
        id: &str,
        key_id: &str,
        profile: &str,
        metadata: &str,
        created_at: u64,
        expires_at: u64,
        helper_pid: u32,
    ) -> Result<(), ServiceError> {
        let changed = self.conn()?.execute(
            // A sandbox paused to disk comes back under its own id: its row runs again.
            "INSERT INTO sandboxes (id, key_id, state, profile, metadata, created_at, expires_at, helper_pid) VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(id) DO UPDATE SET state = 'running', expires_at = excluded.expires_at,
                 helper_pid = excluded.helper_pid, ended_reason = NULL, ended_at = NULL
             WHERE sandboxes.key_id = excluded.key_id AND sandboxes.state = 'paused'",
            params![id, key_id, profile, metadata, created_at, expires_at, helper_pid],
        )?;
        if changed != 1 {
            return Err(ServiceError::internal(format!(
                "sandbox id '{id}' is taken already"
            )));
        }
        Ok(())
    }

    pub fn set_expiry(&self, id: &str, expires_at: u64) -> Result<(), ServiceError> {
        self.conn()?.execute(
            "UPDATE sandboxes SET expires_at = ?2 WHERE id = ?1",
            params![id, expires_at],
        )?;
        Ok(())
    }

    pub fn mark_ended(&self, id: &str, state: &str, reason: &str) -> Result<(), ServiceError> {
        self.conn()?.execute(
            "UPDATE sandboxes SET state = ?2, ended_reason = ?3, ended_at = ?4 WHERE id = ?1 AND state IN ('running', 'paused')",
            params![id, state, reason, now()],
        )?;
        Ok(())
    }

    pub fn sandbox(&self, id: &str) -> Result<Option<SandboxRow>, ServiceError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT id, key_id, state, profile, metadata, created_at, expires_at, helper_pid, ended_reason FROM sandboxes WHERE id = ?1",
                params![id],
                row,
            )
            .optional()?)
    }

    /// Sandboxes paused to disk (their processes gone, their files kept; see `hibernate`):
    /// all of them, or one key's.
    pub fn paused(&self, key_id: Option<&str>) -> Result<Vec<SandboxRow>, ServiceError> {
        let conn = self.conn()?;
        let mut st = conn.prepare("SELECT id, key_id, state, profile, metadata, created_at, expires_at, helper_pid, ended_reason FROM sandboxes WHERE state = 'paused' AND (?1 IS NULL OR key_id = ?1) ORDER BY created_at, id")?;
        let rows = st.query_map(params![key_id], row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Sandboxes in state `running` (used at start-up to reap what a previous run left).
    pub fn running(&self) -> Result<Vec<SandboxRow>, ServiceError> {
        let conn = self.conn()?;
        let mut st = conn.prepare("SELECT id, key_id, state, profile, metadata, created_at, expires_at, helper_pid, ended_reason FROM sandboxes WHERE state = 'running'")?;
        let rows = st.query_map([], row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }
}

fn key_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRecord> {
    Ok(KeyRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        max_sandboxes: r.get(2)?,
        requests_per_second: r.get(3)?,
        created_at: r.get(4)?,
        revoked: r.get::<_, i64>(5)? != 0,
        admin: r.get::<_, i64>(6)? != 0,
    })
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SandboxRow> {
    Ok(SandboxRow {
        id: r.get(0)?,
        key_id: r.get(1)?,
        state: r.get(2)?,
        profile: r.get(3)?,
        metadata: r.get(4)?,
        created_at: r.get(5)?,
        expires_at: r.get(6)?,
        helper_pid: r.get(7)?,
        ended_reason: r.get(8)?,
    })
}

#[cfg(test)]
mod admin_tests {
    use super::*;

    #[test]
    fn a_data_directorys_first_key_is_its_admin_key_and_later_ones_are_not() {
        let dir = std::env::temp_dir().join(format!("cordon-reg-{}", crate::keys::random_hex(6)));
        std::fs::create_dir_all(&dir).expect("dir");
        let r = Registry::open(&dir.join("cordon.db")).expect("open");
        r.add_key("key_a", "first", "h1", 1, 1).expect("add");
        r.add_key("key_b", "second", "h2", 1, 1).expect("add");
        assert!(r.key_by_id("key_a").ok().flatten().is_some_and(|k| k.admin));
        assert!(!r.key_by_id("key_b").ok().flatten().is_some_and(|k| k.admin));
        assert!(r.set_admin("key_b", true).unwrap_or(false));
        assert!(r.key_by_hash("h2").ok().flatten().is_some_and(|k| k.admin));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn keys_made_before_admin_keys_existed_make_the_oldest_the_admin() {
        let dir = std::env::temp_dir().join(format!("cordon-reg-{}", crate::keys::random_hex(6)));
        std::fs::create_dir_all(&dir).expect("dir");
        let db = dir.join("cordon.db");
        {
            let c = Connection::open(&db).expect("db");
            c.execute_batch(
                "CREATE TABLE api_keys (
                 id TEXT PRIMARY KEY, name TEXT NOT NULL, hash TEXT NOT NULL UNIQUE,
                 max_sandboxes INTEGER NOT NULL, rps INTEGER NOT NULL,
                 created_at INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
                 INSERT INTO api_keys VALUES ('key_new', 'n', 'h2', 1, 1, 200, 0);
                 INSERT INTO api_keys VALUES ('key_old', 'o', 'h1', 1, 1, 100, 0);",
            )
            .expect("old schema");
        }
        let r = Registry::open(&db).expect("open");
        assert!(r
            .key_by_id("key_old")
            .ok()
            .flatten()
            .is_some_and(|k| k.admin));
        assert!(!r
            .key_by_id("key_new")
            .ok()
            .flatten()
            .is_some_and(|k| k.admin));
        let _ = std::fs::remove_dir_all(dir);
    }
}
