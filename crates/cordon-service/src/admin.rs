//! What belongs to the host rather than to a tenant, for admin keys only: who is an admin, the
//! server's API keys (list, create, revoke) and the host's enforcement — what `cordon check`
//! reports, from the same code.
//!
//! Threat model: admin keys are a data directory's first key and those made with `cordon keys
//! create --admin` (or by an admin here); every other key gets 403 `admin_only` and learns
//! nothing. Secrets of keys are never listed (only their hashes are stored); a created key's
//! secret is answered once. An admin cannot revoke its own key (a console that locks its
//! operator out helps nobody). Request fields are client input, bounded here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorKind, ServiceError};
use crate::{Caller, Service};

/// The key id every local user of a server without keys acts as.
const OPEN_KEY: &str = "local";

/// A key as an admin sees it: never its secret.
#[derive(Debug, Clone, Serialize)]
pub struct KeyView {
    pub id: String,
    pub name: String,
    pub max_sandboxes: u32,
    pub requests_per_second: u32,
    /// Seconds since the epoch.
    pub created_at: u64,
    pub revoked: bool,
    pub admin: bool,
    /// Its sandboxes alive on this server now.
    pub sandboxes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// `POST /v1/keys`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    pub name: String,
    #[serde(default, deserialize_with = "whole")]
    pub max_sandboxes: Option<u32>,
    #[serde(default, deserialize_with = "whole")]
    pub requests_per_second: Option<u32>,
    #[serde(default)]
    pub admin: Option<bool>,
}

/// A whole number JSON may write as `5` or `5.0` (both are integers to JSON Schema).
fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let Some(v) = Option::<f64>::deserialize(d)? else {
        return Ok(None);
    };
    if v.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "{v}: a whole number from 0 to {}",
            u32::MAX
        )));
    }
    Ok(Some(v as u32))
}

/// A new key: its secret, shown this once.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedKey {
    pub secret: String,
    pub key: KeyView,
}

/// What `cordon check --json` reports of this host, and its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct HostEnforcement {
    /// `full` (every layer), `no_namespaces` (Landlock, seccomp, rlimits and a cgroup only), or
    /// `none` (cordon refuses to sandbox).
    pub mode: String,
    /// `cordon check --json`'s document: kernel, features (each `available`, its `detail`
    /// and `cost_if_missing`), environment, obstacles with their fixes, the wasm backend.
    pub report: Value,
}

/// `cordon check --json`'s document: the engine's probe of the host, and the wasm backend.
pub fn host_report() -> (String, Value) {
    let report = cordon_linux::detect::probe();
    let mode = report.mode.to_string();
    let mut v = serde_json::to_value(&report).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("wasm_backend".into(), wasm_backend());
    }
    (mode, v)
}

/// Whether the WebAssembly backend (the separate `cordon-wasm` binary) is installed, where,
/// and that it starts: `{available, path, detail}`.
fn wasm_backend() -> Value {
    let found = crate::runner::wasm::locate().and_then(|path| {
        let out = std::process::Command::new(&path)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("{}: does not start: {e}", path.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{}: --version failed ({})",
                path.display(),
                out.status
            ));
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((path, version))
    });
    match found {
        Ok((path, version)) => serde_json::json!({
            "available": true,
            "path": path,
            "detail": format!("{version} at {} (cordon run -- MODULE.wasm)", path.display()),
        }),
        Err(e) => serde_json::json!({"available": false, "path": null, "detail": e}),
    }
}

/// Longest key name accepted.
const MAX_KEY_NAME: usize = 64;
/// Bounds of a key's limits.
const MAX_SANDBOXES_CAP: u32 = 100_000;
const MAX_RPS_CAP: u32 = 1_000_000;

impl Service {
    /// Whether `caller` may see what is the host's (keys, enforcement, held calls).
    pub fn is_admin(&self, caller: &Caller) -> Result<bool, ServiceError> {
        match self.key(&caller.key_id)? {
            Some(k) => Ok(k.admin && !k.revoked),
            None => Ok(caller.key_id == OPEN_KEY),
        }
    }

    /// Refuses a caller that is not an admin (403 `admin_only`).
    pub fn require_admin(&self, caller: &Caller) -> Result<(), ServiceError> {
        if self.is_admin(caller)? {
            return Ok(());
        }
        Err(ServiceError::new(
            ErrorKind::Forbidden,
            "admin_only",
            "only an admin key may do this (the data directory's first key, or one made with `cordon keys create --admin`)",
        ))
    }

    fn key_view(&self, k: crate::registry::KeyRecord) -> KeyView {
        let sandboxes = self.count_for(&k.id);
        KeyView {
            id: k.id,
            name: k.name,
            max_sandboxes: k.max_sandboxes,
            requests_per_second: k.requests_per_second,
            created_at: k.created_at,
            revoked: k.revoked,
            admin: k.admin,
            sandboxes,
        }
    }

    /// Every key of this server (admin keys only).
    pub fn list_keys(&self, caller: &Caller) -> Result<KeyList, ServiceError> {
        self.require_admin(caller)?;
        let keys = self.registry.list_keys()?;
        Ok(KeyList {
            keys: keys.into_iter().map(|k| self.key_view(k)).collect(),
        })
    }

    /// A new key (admin keys only); its secret is in the answer and nowhere else.
    pub fn create_key_as(
        &self,
        caller: &Caller,
        req: CreateKey,
    ) -> Result<CreatedKey, ServiceError> {
        self.require_admin(caller)?;
        let name = req.name.trim();
        if name.is_empty()
            || name.chars().count() > MAX_KEY_NAME
            || name.chars().any(char::is_control)
        {
            return Err(ServiceError::bad_request(format!(
                "name: 1 to {MAX_KEY_NAME} characters, no control characters"
            )));
        }
        let max_sandboxes = req.max_sandboxes.unwrap_or(crate::DEFAULT_MAX_SANDBOXES);
        let rps = req.requests_per_second.unwrap_or(crate::DEFAULT_RPS);
        if !(1..=MAX_SANDBOXES_CAP).contains(&max_sandboxes) {
            return Err(ServiceError::bad_request(format!(
                "max_sandboxes: 1 to {MAX_SANDBOXES_CAP}"
            )));
        }
        if !(1..=MAX_RPS_CAP).contains(&rps) {
            return Err(ServiceError::bad_request(format!(
                "requests_per_second: 1 to {MAX_RPS_CAP}"
            )));
        }
        let (secret, id) = crate::create_key(&self.registry, name, max_sandboxes, rps)?;
        if req.admin == Some(true) {
            self.registry.set_admin(&id, true)?;
        }
        let rec = self
            .registry
            .key_by_id(&id)?
            .ok_or_else(|| ServiceError::internal("the new key is not in the registry"))?;
        self.audit(
            "key.created",
            &caller.key_id,
            None,
            serde_json::json!({"id": id, "name": name, "admin": rec.admin}),
        );
        Ok(CreatedKey {
            secret,
            key: self.key_view(rec),
        })
    }

    /// Revokes a key (admin keys only; not the caller's own). Its sandboxes stay until they
    /// end; its requests are refused from now on.
    pub fn revoke_key_as(&self, caller: &Caller, id: &str) -> Result<(), ServiceError> {
        self.require_admin(caller)?;
        if id == caller.key_id {
            return Err(ServiceError::conflict(
                "an admin key cannot revoke itself (revoke it with another admin key, or `cordon keys revoke`)",
            ));
        }
        if self.registry.key_by_id(id)?.is_none() {
            return Err(ServiceError::not_found(format!("no key {id}")));
        }
        self.registry.revoke_key(id)?;
        self.audit(
            "key.revoked",
            &caller.key_id,
            None,
            serde_json::json!({ "id": id }),
        );
        Ok(())
    }

    /// What this host enforces, as `cordon check` reports it (admin keys only).
    pub fn host_enforcement(&self, caller: &Caller) -> Result<HostEnforcement, ServiceError> {
        self.require_admin(caller)?;
        let (mode, report) = host_report();
        Ok(HostEnforcement { mode, report })
    }
}
