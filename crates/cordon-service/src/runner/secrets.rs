//! The secrets of one run (issue 30), made ready before the sandbox exists: each value read
//! here, outside the sandbox, and handed to the egress proxy only; the sandbox gets a per-run
//! placeholder in the secret's variable, and the per-run CA's certificate (not its key) in a
//! read-only directory with the variables common clients read pointed at it.
//!
//! Threat model: the payload is hostile and knows everything in its environment and files;
//! none of that is a value. Errors name the secret and its source (`env:VAR`, `file:PATH`),
//! never a value.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_net::{Interception, SecretBinding, SecretValue};
use cordon_policy::secrets::{placeholder, SecretSource, SecretSpec};
use cordon_policy::{Bind, Layer, Profile};

/// Where the sandbox finds the CA certificate and the combined bundle.
pub const SANDBOX_DIR: &str = "/run/cordon-secrets";

/// The host's CA bundle, the first of these that exists, goes into the combined bundle.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// A run's secrets, ready: the proxy's part, the sandbox's variables, and the host directory
/// (removed on drop) the sandbox sees at [`SANDBOX_DIR`].
pub struct Prepared {
    pub interception: Arc<Interception>,
    /// Placeholders and trust variables, set on top of the profile's environment.
    pub env: BTreeMap<String, String>,
    /// Each secret's value as the proxy holds it, by source: setting one rotates it for the
    /// requests that start after.
    pub values: Vec<(SecretSource, SecretValue)>,
    dir: PathBuf,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The value `source` names, read from cordon's own environment or a host file.
pub fn read_value(name: &str, source: &SecretSource) -> Result<String, String> {
    let mut value = match source {
        SecretSource::Stored(stored) => {
            return Err(format!(
            "--secret {name}: stored:{stored} is a server's secret; only cordon serve reads those"
        ))
        }
        SecretSource::Env(var) => std::env::var(var).map_err(|_| {
            format!("--secret {name}: env:{var} is not set (or not UTF-8) in cordon's environment")
        })?,
        SecretSource::File(path) => std::fs::read_to_string(path).map_err(|e| {
            // The io error says why (missing, permission, not UTF-8), never the content.
            format!("--secret {name}: cannot read file:{}: {e}", path.display())
        })?,
    };
    // A file written with `echo` ends in a newline that is no part of the key.
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    Ok(value)
}

fn random_hex(bytes: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).map_err(|e| format!("no randomness for placeholders: {e}"))?;
    Ok(buf)
}

fn write_file(path: &Path, data: &[u8]) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(|e| format!("--secret: cannot write {}: {e}", path.display()))?;
    f.write_all(data)
        .map_err(|e| format!("--secret: cannot write {}: {e}", path.display()))
}

/// Reads every secret of `profile`, makes the proxy's interception, writes the CA for the
/// sandbox and adds its read-only bind to `profile`. `None` when the profile has no secrets.
pub fn prepare(profile: &mut Profile) -> Result<Option<Prepared>, String> {
    prepare_with(profile, |spec| read_value(&spec.name, &spec.source))
}

/// [`prepare`], with each value got by `value_of` (`cordon serve` reads its stored secrets).
pub fn prepare_with(
    profile: &mut Profile,
    value_of: impl Fn(&SecretSpec) -> Result<String, String>,
) -> Result<Option<Prepared>, String> {
    if profile.secrets.is_empty() {
        return Ok(None);
    }
    let mut bindings = Vec::new();
    let mut env = BTreeMap::new();
    let mut values = Vec::new();
    for spec in &profile.secrets {
        let value = SecretValue::new(value_of(spec)?);
        values.push((spec.source.clone(), value.clone()));
        let extra_ca_pem = match &spec.ca {
            Some(path) => vec![std::fs::read(path)
                .map_err(|e| format!("--secret {}: ca {}: {e}", spec.name, path.display()))?],
            None => Vec::new(),
        };
        let ph = placeholder(&random_hex(16)?);
        env.insert(spec.name.clone(), ph.clone());
        bindings.push(SecretBinding {
            name: spec.name.clone(),
            placeholder: ph,
            value,
            hosts: spec.host_names(),
            header: spec.header.clone(),
            format: spec.format.clone(),
            extra_ca_pem,
        });
    }
    let interception = Interception::new(bindings).map_err(|e| format!("--secret: {e}"))?;
    let dir = std::env::temp_dir().join(format!("cordon-secrets-{}", hex::encode(random_hex(8)?)));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(|e| format!("--secret: cannot create {}: {e}", dir.display()))?;
    let prepared = Prepared {
        interception: Arc::new(interception),
        env,
        values,
        dir: dir.clone(),
    };
    let ca = prepared.interception.ca_pem().as_bytes().to_vec();
    write_file(&dir.join("ca.pem"), &ca)?;
    let mut bundle = SYSTEM_BUNDLES
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(&ca);
    write_file(&dir.join("bundle.pem"), &bundle)?;
    let mut prepared = prepared;
    let bundle_path = format!("{SANDBOX_DIR}/bundle.pem");
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "GIT_SSL_CAINFO",
    ] {
        prepared.env.insert(var.to_string(), bundle_path.clone());
    }
    prepared.env.insert(
        "NODE_EXTRA_CA_CERTS".into(),
        format!("{SANDBOX_DIR}/ca.pem"),
    );
    // Without its own pid and network namespaces the payload could read cordon's
    // /proc/PID/environ (where an env: value is) and would have no proxy to reach anyway: a
    // host that refuses namespaces makes the run fail instead of running without them.
    for layer in [Layer::PidNs, Layer::NetNs, Layer::MountNs] {
        if !profile.require.contains(&layer) {
            profile.require.push(layer);
        }
    }
    // A fork's profile (its parent's) still holds the parent's directory: this run's replaces it.
    profile.binds.retain(|b| b.dest != Path::new(SANDBOX_DIR));
    profile.binds.push(Bind {
        source: dir,
        dest: PathBuf::from(SANDBOX_DIR),
        writable: false,
        idmap: false,
        limit: None,
    });
    Ok(Some(prepared))
}
