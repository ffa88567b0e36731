//! Secrets stored per API key in `cordon serve` (issue 30): write-only values a sandbox is
//! given by name at create — as a placeholder, never the value — which its egress proxy puts
//! into requests to the hosts the secret is bound to. E2B's `Secret` API is a door onto this.
//!
//! Threat model: the caller is an authenticated key and sees only its own secrets; no route,
//! error, audit record or log carries a value (an update answers the new version, not the
//! value). At rest each value is sealed with AES-256-GCM under a key kept in the data directory
//! beside the database, not in it (`secrets.key`, 0600): a copy of `cordon.db` alone — a
//! backup, the cluster's node actor reading its registry — holds no value. Whoever can read the
//! data directory as the server's user can read both, as they could read the server's memory;
//! that is said in the README. The AEAD's associated data binds each sealed value to its secret
//! id and version, so rows cannot be swapped between secrets unnoticed.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;
use serde_json::json;

use crate::error::{ErrorKind, ServiceError};
use crate::registry::{now_ms, Registry};
use crate::{Caller, Service};

/// A secret's name: up to this many characters.
pub const NAME_MAX: usize = 128;
/// A value: up to this many characters (it travels in a request header).
pub const VALUE_MAX: usize = 16 << 10;
/// Secrets per key.
pub const PER_KEY_MAX: usize = 1000;
/// A list's page: at most this many.
pub const PAGE_MAX: usize = 100;

/// What a secret is, without its value.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SecretInfo {
    pub id: String,
    pub name: String,
    /// 1 when created; each update adds one.
    pub version: u32,
    pub metadata: BTreeMap<String, String>,
    /// Milliseconds since the epoch.
    pub created_at: u64,
    pub updated_at: u64,
}

/// A page of secrets: `next`, when set, is the `after` of the next page.
#[derive(Debug, Clone, Serialize)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
    pub next: Option<String>,
}

/// The key values are sealed with, read from (or made at) `secrets.key` in the data directory.
pub(crate) struct Sealer {
    key: LessSafeKey,
}

impl Sealer {
    pub(crate) fn open(path: &Path) -> Result<Sealer, ServiceError> {
        let fail = |e: std::io::Error| {
            ServiceError::internal(format!("secrets key {}: {e}", path.display()))
        };
        let mut bytes = Vec::new();
        match crate::datadir::open_private(path, std::fs::OpenOptions::new().read(true)) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes).map_err(fail)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bytes = vec![0u8; 32];
                getrandom::getrandom(&mut bytes)
                    .map_err(|e| ServiceError::internal(format!("no randomness: {e}")))?;
                let mut f = crate::datadir::open_private(
                    path,
                    std::fs::OpenOptions::new().write(true).create_new(true),
                )
                .map_err(fail)?;
                f.write_all(&bytes).map_err(fail)?;
                f.sync_all().map_err(fail)?;
            }
            Err(e) => return Err(fail(e)),
        }
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| {
            ServiceError::internal(format!(
                "secrets key {}: not a 32-byte key; the stored secrets cannot be read without the file this server made",
                path.display()
            ))
        })?;
        Ok(Sealer {
            key: LessSafeKey::new(key),
        })
    }

    fn aad(id: &str, version: u32) -> String {
        format!("cordon-secret:{id}:{version}")
    }

    /// nonce ‖ ciphertext ‖ tag.
    fn seal(&self, id: &str, version: u32, value: &str) -> Result<Vec<u8>, ServiceError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::getrandom(&mut nonce)
            .map_err(|e| ServiceError::internal(format!("no randomness: {e}")))?;
        let mut data = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::aad(id, version)),
                &mut data,
            )
            .map_err(|_| ServiceError::internal("sealing a secret failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(out)
    }

    fn unseal(&self, id: &str, version: u32, sealed: &[u8]) -> Result<String, ServiceError> {
        let corrupt = || {
            ServiceError::internal(format!(
                "stored secret {id} cannot be unsealed (a changed secrets.key, or a changed row)"
            ))
        };
        if sealed.len() < NONCE_LEN {
            return Err(corrupt());
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| corrupt())?;
        let mut data = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(Self::aad(id, version)), &mut data)
            .map_err(|_| corrupt())?;
        String::from_utf8(plain.to_vec()).map_err(|_| corrupt())
    }
}

/// A name E2B's placeholder `${e2b.secrets.NAME}` can carry: no braces, no control characters.
fn check_name(name: &str) -> Result<(), ServiceError> {
    if name.is_empty()
        || name.chars().count() > NAME_MAX
        || name.chars().any(|c| c == '{' || c == '}' || c.is_control())
    {
        return Err(ServiceError::bad_request(format!(
            "a secret's name is 1-{NAME_MAX} characters without '{{', '}}' or control characters"
        )));
    }
    Ok(())
}

/// Never echoes the value: the message says what is wrong with it only.
fn check_value(value: &str) -> Result<(), ServiceError> {
    if value.is_empty()
        || value.chars().count() > VALUE_MAX
        || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
    {
        return Err(ServiceError::bad_request(format!(
            "a secret's value is 1-{VALUE_MAX} characters on one line (no CR, LF or NUL: it travels in a request header)"
        )));
    }
    Ok(())
}

fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    use crate::types::{METADATA_MAX_KEY, METADATA_MAX_VALUE};
    if metadata.iter().any(|(k, v)| {
        k.chars().count() > METADATA_MAX_KEY || v.chars().count() > METADATA_MAX_VALUE
    }) {
        return Err(ServiceError::bad_request(format!(
            "metadata: keys up to {METADATA_MAX_KEY} characters, values up to {METADATA_MAX_VALUE}"
        )));
    }
    Ok(())
}

const COLUMNS: &str = "id, name, version, metadata, created_at, updated_at";

fn row_info(r: &rusqlite::Row<'_>) -> rusqlite::Result<SecretInfo> {
    let metadata: String = r.get(3)?;
    Ok(SecretInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        version: r.get(2)?,
        metadata: serde_json::from_str(&metadata).unwrap_or_default(),
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
    })
}

impl Registry {
    pub(crate) fn create_secrets_table(&self) -> Result<(), ServiceError> {
        self.conn()?.execute_batch(
            "CREATE TABLE IF NOT EXISTS secrets (
                 id TEXT PRIMARY KEY, key_id TEXT NOT NULL, name TEXT NOT NULL,
                 version INTEGER NOT NULL, metadata TEXT NOT NULL, sealed BLOB NOT NULL,
                 created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                 UNIQUE (key_id, name));",
        )?;
        Ok(())
    }

    /// The key's secret named by id or name.
    fn secret_row(
        &self,
        key_id: &str,
        id_or_name: &str,
    ) -> Result<Option<(SecretInfo, Vec<u8>)>, ServiceError> {
        let conn = self.conn()?;
        let row = conn
            .query_row(
                &format!("SELECT {COLUMNS}, sealed FROM secrets WHERE key_id = ?1 AND (id = ?2 OR name = ?2) ORDER BY id = ?2 DESC LIMIT 1"),
                params![key_id, id_or_name],
                |r| Ok((row_info(r)?, r.get::<_, Vec<u8>>(6)?)),
            )
            .optional()?;
        Ok(row)
    }
}

impl Service {
    fn secret_not_found(id_or_name: &str) -> ServiceError {
        ServiceError::new(
            ErrorKind::NotFound,
            "secret_not_found",
            format!("no secret '{id_or_name}' under this key"),
        )
    }

    /// Stores a new secret of the caller's key (version 1).
    pub fn secret_create(
        &self,
        caller: &Caller,
        name: &str,
        value: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<SecretInfo, ServiceError> {
        check_name(name)?;
        check_value(value)?;
        check_metadata(&metadata)?;
        let id = format!("sec_{}", crate::keys::random_hex(8));
        let sealed = self.sealer.seal(&id, 1, value)?;
        let now = now_ms();
        {
            let conn = self.registry.conn()?;
            let count: i64 = conn.query_row(
                "SELECT COUNT(*) FROM secrets WHERE key_id = ?1",
                params![caller.key_id],
                |r| r.get(0),
            )?;
            if count as usize >= PER_KEY_MAX {
                return Err(ServiceError::new(
                    ErrorKind::Conflict,
                    "too_many_secrets",
                    format!("a key holds at most {PER_KEY_MAX} secrets; destroy one first"),
                ));
            }
            let inserted = conn.execute(
                "INSERT OR IGNORE INTO secrets (id, key_id, name, version, metadata, sealed, created_at, updated_at)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?6)",
                params![id, caller.key_id, name, json!(metadata).to_string(), sealed, now],
            )?;
            if inserted == 0 {
                return Err(ServiceError::new(
                    ErrorKind::Conflict,
                    "secret_exists",
                    format!("a secret named '{name}' exists under this key: update it instead"),
                ));
            }
        }
        self.audit.record(
            "secret.create",
            &caller.key_id,
            None,
            json!({"secret": id, "name": name, "version": 1}),
        );
        Ok(SecretInfo {
            id,
            name: name.to_string(),
            version: 1,
            metadata,
            created_at: now,
            updated_at: now,
        })
    }

    /// Stores a new version of a secret (by id or name); `metadata`, when given, replaces the
    /// stored one. Running sandboxes given this secret send the new value from their next
    /// request on.
    pub fn secret_update(
        &self,
        caller: &Caller,
        id_or_name: &str,
        value: &str,
        metadata: Option<BTreeMap<String, String>>,
    ) -> Result<SecretInfo, ServiceError> {
        check_value(value)?;
        if let Some(m) = &metadata {
            check_metadata(m)?;
        }
        let (mut info, _) = self
            .registry
            .secret_row(&caller.key_id, id_or_name)?
            .ok_or_else(|| Self::secret_not_found(id_or_name))?;
        info.version += 1;
        info.updated_at = now_ms();
        if let Some(m) = metadata {
            info.metadata = m;
        }
        let sealed = self.sealer.seal(&info.id, info.version, value)?;
        let changed = self.registry.conn()?.execute(
            "UPDATE secrets SET version = ?1, metadata = ?2, sealed = ?3, updated_at = ?4
             WHERE id = ?5 AND key_id = ?6 AND version = ?7",
            params![
                info.version,
                json!(info.metadata).to_string(),
                sealed,
                info.updated_at,
                info.id,
                caller.key_id,
                info.version - 1
            ],
        )?;
        if changed == 0 {
            return Err(ServiceError::conflict(
                "the secret changed meanwhile (another update or a destroy): try again",
            ));
        }
        let rotated = self.rotate_live(&caller.key_id, &info.name, value);
        self.audit.record(
            "secret.update",
            &caller.key_id,
            None,
            json!({"secret": info.id, "name": info.name, "version": info.version, "sandboxes_rotated": rotated}),
        );
        Ok(info)
    }

    /// A secret of the caller's key, by id or name (never its value).
    pub fn secret_info(
        &self,
        caller: &Caller,
        id_or_name: &str,
    ) -> Result<SecretInfo, ServiceError> {
        self.registry
            .secret_row(&caller.key_id, id_or_name)?
            .map(|(info, _)| info)
            .ok_or_else(|| Self::secret_not_found(id_or_name))
    }

    /// The caller's secrets by name, `limit` at a time (default and most [`PAGE_MAX`]) after
    /// the name `after`; the second value is where the next page starts, if there is one.
    pub fn secret_list(
        &self,
        caller: &Caller,
        limit: Option<usize>,
        after: Option<&str>,
    ) -> Result<(Vec<SecretInfo>, Option<String>), ServiceError> {
        let limit = limit.unwrap_or(PAGE_MAX).clamp(1, PAGE_MAX);
        let conn = self.registry.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM secrets WHERE key_id = ?1 AND name > ?2 ORDER BY name LIMIT ?3"
        ))?;
        let mut items = stmt
            .query_map(
                params![caller.key_id, after.unwrap_or(""), (limit + 1) as i64],
                row_info,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|s| s.name.clone())
        } else {
            None
        };
        Ok((items, next))
    }

    /// Removes a secret (by id or name); `false` when the key has none such. Running
    /// sandboxes keep the value they were given until they end.
    pub fn secret_destroy(&self, caller: &Caller, id_or_name: &str) -> Result<bool, ServiceError> {
        let Some((info, _)) = self.registry.secret_row(&caller.key_id, id_or_name)? else {
            return Ok(false);
        };
        self.registry.conn()?.execute(
            "DELETE FROM secrets WHERE id = ?1 AND key_id = ?2",
            params![info.id, caller.key_id],
        )?;
        self.audit.record(
            "secret.destroy",
            &caller.key_id,
            None,
            json!({"secret": info.id, "name": info.name}),
        );
        Ok(true)
    }

    /// The value of the caller's secret `name`, for a sandbox being made (see `lifecycle`).
    pub(crate) fn secret_value(&self, key_id: &str, name: &str) -> Result<String, String> {
        let row = self
            .registry
            .secret_row(key_id, name)
            .map_err(|e| format!("secret '{name}': {e}"))?;
        let Some((info, sealed)) = row else {
            return Err(format!(
                "secrets: no secret '{name}' under this key (create it first)"
            ));
        };
        self.sealer
            .unseal(&info.id, info.version, &sealed)
            .map_err(|e| e.to_string())
    }

    /// Gives running sandboxes of `key_id` bound to secret `name` its new value; how many.
    fn rotate_live(&self, key_id: &str, name: &str, value: &str) -> usize {
        let Ok(live) = self.live.read() else { return 0 };
        let mut n = 0;
        for l in live.values().filter(|l| l.key_id == key_id) {
            let Some(prepared) = &l.secrets else { continue };
            for (source, v) in &prepared.values {
                if matches!(source, cordon_policy::secrets::SecretSource::Stored(s) if s == name)
                    && v.set(value.to_string()).is_ok()
                {
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_as_the_secret_and_version_it_was_sealed_for() {
        let dir =
            std::env::temp_dir().join(format!("cordon-sealer-{}", crate::keys::random_hex(6)));
        std::fs::create_dir_all(&dir).unwrap();
        let sealer = Sealer::open(&dir.join("secrets.key")).unwrap();
        let sealed = sealer.seal("sec_a", 2, "hunter2").unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(sealer.unseal("sec_a", 2, &sealed).unwrap(), "hunter2");
        assert!(sealer.unseal("sec_b", 2, &sealed).is_err());
        assert!(sealer.unseal("sec_a", 1, &sealed).is_err());
        // The same file gives the same key; another file another.
        let again = Sealer::open(&dir.join("secrets.key")).unwrap();
        assert_eq!(again.unseal("sec_a", 2, &sealed).unwrap(), "hunter2");
        let other = Sealer::open(&dir.join("other.key")).unwrap();
        assert!(other.unseal("sec_a", 2, &sealed).is_err());
        let mode = std::os::unix::fs::MetadataExt::mode(
            &std::fs::metadata(dir.join("secrets.key")).unwrap(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_and_values_that_cannot_travel_are_refused_without_echoing_the_value() {
        assert!(check_name("openai-api-key").is_ok());
        for bad in ["", "a{b", "a}b", "a\nb"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let e = check_value("sk-live-123\r\nX-Evil: 1")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("sk-live"), "{e}");
        assert!(check_value("").is_err());
        assert!(check_value("ok").is_ok());
    }
}
