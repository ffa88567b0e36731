//! Registry credentials: cordon's own (`cordon image login`, in `<data-dir>/images/auth.json`)
//! first, then Docker's (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`: inline
//! `auths`, `credHelpers` and `credsStore` helpers). Secrets stay in memory and in those
//! files; they are never printed, logged or put in an error.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{ImageError, IoContext};
use crate::fsutil;
use crate::reference::DOCKER_HUB;

/// A user name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Credentials {{ username: {:?}, password: <redacted> }}",
            self.username
        )
    }
}

impl Credentials {
    /// `Authorization: Basic …`.
    pub(crate) fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(
        default,
        rename = "credHelpers",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    cred_helpers: BTreeMap<String, String>,
    #[serde(
        default,
        rename = "credsStore",
        skip_serializing_if = "Option::is_none"
    )]
    creds_store: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AuthEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    password: Option<String>,
}

impl AuthEntry {
    fn credentials(&self) -> Option<Credentials> {
        if let (Some(u), Some(p)) = (&self.username, &self.password) {
            return Some(Credentials {
                username: u.clone(),
                password: p.clone(),
            });
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(self.auth.as_deref()?.trim())
            .ok()?;
        let s = String::from_utf8(raw).ok()?;
        let (u, p) = s.split_once(':')?;
        Some(Credentials {
            username: u.to_string(),
            password: p.to_string(),
        })
    }
}

/// The keys a registry may be filed under in a Docker config.
fn keys_for(registry: &str) -> Vec<String> {
    let mut keys = vec![
        registry.to_string(),
        format!("https://{registry}"),
        format!("http://{registry}"),
        format!("https://{registry}/v1/"),
        format!("https://{registry}/v2/"),
    ];
    if registry == DOCKER_HUB {
        keys.insert(0, "https://index.docker.io/v1/".to_string());
        keys.push("index.docker.io".to_string());
        keys.push("registry-1.docker.io".to_string());
    }
    keys
}

/// Where credentials are looked up.
#[derive(Debug, Clone)]
pub struct CredentialStore {
    /// cordon's own file (`<data-dir>/images/auth.json`).
    pub own: PathBuf,
    /// Docker's `config.json`, if any.
    pub docker: Option<PathBuf>,
}

impl CredentialStore {
    /// cordon's file in `images_dir`, and Docker's where `DOCKER_CONFIG` or `HOME` say.
    pub fn new(images_dir: &Path) -> CredentialStore {
        let docker = std::env::var_os("DOCKER_CONFIG")
            .map(|d| PathBuf::from(d).join("config.json"))
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
            });
        CredentialStore {
            own: images_dir.join("auth.json"),
            docker,
        }
    }

    fn read(path: &Path) -> Option<ConfigFile> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Credentials for `registry` (`host[:port]`, `docker.io` for Docker Hub), if any.
    pub fn get(&self, registry: &str) -> Option<Credentials> {
        let keys = keys_for(registry);
        if let Some(c) = Self::read(&self.own) {
            if let Some(found) = keys.iter().find_map(|k| c.auths.get(k)?.credentials()) {
                return Some(found);
            }
        }
        let c = Self::read(self.docker.as_deref()?)?;
        let helper = keys
            .iter()
            .find_map(|k| c.cred_helpers.get(k))
            .or(c.creds_store.as_ref());
        if let Some(h) = helper {
            for k in &keys {
                if let Some(found) = run_helper(h, k) {
                    return Some(found);
                }
            }
        }
        keys.iter().find_map(|k| c.auths.get(k)?.credentials())
    }

    /// Stores credentials in cordon's own file (mode 0600, replaced atomically).
    pub fn store(&self, registry: &str, creds: &Credentials) -> Result<(), ImageError> {
        let mut c = Self::read(&self.own).unwrap_or_default();
        let raw = format!("{}:{}", creds.username, creds.password);
        c.auths.insert(
            registry.to_string(),
            AuthEntry {
                auth: Some(base64::engine::general_purpose::STANDARD.encode(raw)),
                ..AuthEntry::default()
            },
        );
        self.write(&c)
    }

    /// Forgets cordon's own credentials for `registry`; whether there were any.
    pub fn remove(&self, registry: &str) -> Result<bool, ImageError> {
        let Some(mut c) = Self::read(&self.own) else {
            return Ok(false);
        };
        let had = c.auths.remove(registry).is_some();
        if had {
            self.write(&c)?;
        }
        Ok(had)
    }

    fn write(&self, c: &ConfigFile) -> Result<(), ImageError> {
        let bytes = serde_json::to_vec_pretty(c)
            .map_err(|e| ImageError::format("credentials", e.to_string()))?;
        fsutil::write_atomic(&self.own, &bytes).ctx(|| format!("writing {}", self.own.display()))
    }
}

/// `docker-credential-NAME get`: the server URL on stdin, `{"Username", "Secret"}` out.
fn run_helper(name: &str, server: &str) -> Option<Credentials> {
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return None;
    }
    let mut child = Command::new(format!("docker-credential-{name}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(server.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(&out.stdout).ok()?;
    // An identity token (`<token>`) needs Docker's OAuth exchange, which cordon does not do.
    if a.username == "<token>" || a.secret.is_empty() {
        return None;
    }
    Some(Credentials {
        username: a.username,
        password: a.secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_cordon_then_docker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let docker = dir.path().join("config.json");
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        std::fs::write(
            &docker,
            format!(r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{b64}"}}, "r.example:5000": {{"username": "u", "password": "p"}}}}}}"#),
        )
        .expect("write");
        let s = CredentialStore {
            own: dir.path().join("auth.json"),
            docker: Some(docker),
        };
        let hub = s.get(DOCKER_HUB).expect("hub");
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("alice", "s3cret")
        );
        assert_eq!(
            s.get("r.example:5000").map(|c| c.username),
            Some("u".into())
        );
        assert!(s.get("other.example").is_none());
        let mine = Credentials {
            username: "bob".into(),
            password: "pw".into(),
        };
        s.store(DOCKER_HUB, &mine).expect("store");
        assert_eq!(s.get(DOCKER_HUB), Some(mine.clone()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&s.own).expect("own").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!format!("{mine:?}").contains("pw"), "Debug shows no secret");
        assert!(s.remove(DOCKER_HUB).expect("remove"));
        assert_eq!(s.get(DOCKER_HUB).map(|c| c.username), Some("alice".into()));
    }
}
