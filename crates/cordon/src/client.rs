//! How the CLI's client commands (`ps`, `exec`, `logs`, `top`, `kill`, `cp`, `volume`,
//! `snapshot`, `sandbox`) reach a running `cordon serve`: which server, which API key, and one
//! HTTP call with the server's errors turned into sentences.
//!
//! Where from, first found wins: the flag (`--server`, `--key`), the environment
//! (`CORDON_SERVER`, `CORDON_API_KEY`), the client config file (`$CORDON_CONFIG`, else
//! `$XDG_CONFIG_HOME/cordon/client.toml`, else `~/.config/cordon/client.toml`), then
//! `http://127.0.0.1:8080` with no key.
//!
//! Threat model: the key is a bearer credential. It is sent only to the server named, in the
//! Authorization header (never in a URL), and never printed — errors name the server and the
//! file, not the key. A config file holding a key that other users may read is refused, as ssh
//! refuses such a private key: the key would already be theirs.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

/// Where the server is and which key to use.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// The server's URL [env: CORDON_SERVER; then `server` in the client config file; default
    /// http://127.0.0.1:8080].
    #[arg(long, global = true)]
    server: Option<String>,
    /// An API key of that server (`cordon keys create`) [env: CORDON_API_KEY; then `key` in the
    /// client config file]; not needed with `--no-auth`.
    #[arg(long, global = true)]
    key: Option<String>,
}

/// The client config file's keys (`client.toml`).
#[derive(serde::Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct ClientConfig {
    server: Option<String>,
    key: Option<String>,
}

/// The client config file's path, if there is a place for one.
fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CORDON_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("cordon").join("client.toml"))
}

/// Reads the client config file; a missing file is an empty config.
fn read_config() -> Result<ClientConfig, String> {
    use std::os::unix::fs::MetadataExt;
    let Some(path) = config_path() else {
        return Ok(ClientConfig::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ClientConfig::default()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let cfg: ClientConfig =
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
    if cfg.key.is_some() {
        let mode = std::fs::metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "{} holds an API key and others may read it (mode {:o}): \
                 `chmod 600 {}`, or keep the key in CORDON_API_KEY",
                path.display(),
                mode & 0o777,
                path.display()
            ));
        }
    }
    Ok(cfg)
}

/// A server resolved from flags, environment and config: its base URL and key.
pub struct Server {
    pub base: String,
    key: Option<String>,
}

impl ServerArgs {
    /// Resolves where to go; an unreadable or unsafe config file is an error.
    pub fn resolve(&self) -> Result<Server, String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (mut server, mut key) = (
            self.server.clone().or_else(|| env("CORDON_SERVER")),
            self.key.clone().or_else(|| env("CORDON_API_KEY")),
        );
        if server.is_none() || key.is_none() {
            let cfg = read_config()?;
            server = server.or(cfg.server);
            key = key.or(cfg.key);
        }
        Ok(Server {
            base: server
                .unwrap_or_else(|| "http://127.0.0.1:8080".to_string())
                .trim_end_matches('/')
                .to_string(),
            key: key.filter(|k| !k.is_empty()),
        })
    }
}

/// A sandbox path or id as it may appear in a URL's path or query.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Server {
    /// A request to `path` (which starts with `/`), with the key.
    pub fn request(&self, method: &str, path: &str) -> ureq::Request {
        let mut req = ureq::request(method, &format!("{}{path}", self.base));
        if let Some(a) = self.authorization() {
            req = req.set("Authorization", &a);
        }
        req
    }

    /// The Authorization header's value, if there is a key.
    pub fn authorization(&self) -> Option<String> {
        self.key.as_ref().map(|k| format!("Bearer {k}"))
    }

    /// Sends `req` (with `body` as JSON, if any) and turns a refusal into a sentence.
    pub fn send(&self, req: ureq::Request, body: Option<Value>) -> Result<ureq::Response, String> {
        let resp = match body {
            Some(b) => req.send_json(b),
            None => req.call(),
        };
        resp.map_err(|e| self.explain(e))
    }

    /// Sends raw bytes.
    pub fn send_bytes(&self, req: ureq::Request, data: &[u8]) -> Result<ureq::Response, String> {
        req.set("Content-Type", "application/octet-stream")
            .send_bytes(data)
            .map_err(|e| self.explain(e))
    }

    /// A JSON call: the answer's body, or `null` when it has none (204, 201 of a mkdir).
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let r = self.send(self.request(method, path), body)?;
        let text = r
            .into_string()
            .map_err(|e| format!("{}{path}: {e}", self.base))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| format!("{}{path}: an answer that is not JSON: {e}", self.base))
    }

    /// A GET whose answer is bytes.
    pub fn get_bytes(&self, path: &str) -> Result<Vec<u8>, String> {
        let r = self.send(self.request("GET", path), None)?;
        let mut data = Vec::new();
        r.into_reader()
            .read_to_end(&mut data)
            .map_err(|e| format!("{}{path}: {e}", self.base))?;
        Ok(data)
    }

    fn explain(&self, e: ureq::Error) -> String {
        match e {
            ureq::Error::Status(code, r) => {
                let v: Value = r.into_json().unwrap_or(Value::Null);
                let msg = v["error"]["message"].as_str().unwrap_or("no message");
                let hint = match code {
                    401 => " (give an API key: --key, CORDON_API_KEY or the client config file)",
                    _ => "",
                };
                format!("the server answered {code}: {msg}{hint}")
            }
            e => format!(
                "cannot reach cordon serve at {}: {e} (start it, or name it with --server)",
                self.base
            ),
        }
    }
}

/// Prints a value as indented JSON.
pub fn pretty(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Exit 0 after printing the answer, or 1 with the error: the request was refused or the
/// server was out of reach (125 stays for cordon's own failures).
pub fn finish(r: Result<Value, String>, print: impl FnOnce(&Value)) -> i32 {
    match r {
        Ok(v) => {
            print(&v);
            0
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_percent_encoded_but_slashes_kept() {
        assert_eq!(enc("/workspace/a b&c?.txt"), "/workspace/a%20b%26c%3F.txt");
        assert_eq!(enc("é"), "%C3%A9");
    }
}
