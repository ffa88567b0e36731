//! Secrets bound to hosts (issue 30): what a `--secret` flag or a `[secrets.NAME]` table says.
//!
//! A secret here is only a *reference* — where cordon reads the value (`env:VAR` or
//! `file:PATH`, never an inline value) and the hosts it may go to. The value is read outside
//! the sandbox by the run's assembly (`cordon-service`), held by the egress proxy only, and
//! never enters the sandbox: the sandbox gets a per-run placeholder
//! (`cordon-secret:v1:<hex>`), which the proxy replaces in request headers of TLS requests to
//! the secret's hosts, once the upstream's certificate verified.
//!
//! Threat model: the profile and flags come from the user (trusted, but mistakes are caught
//! here, with the key or flag named); nothing in this module ever holds a value, so no error
//! or `Debug` output can print one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::network::{EgressRules, Host};
use crate::profile::ProfileError;

/// What every placeholder starts with; the rest is per-run random hex.
pub const PLACEHOLDER_PREFIX: &str = "cordon-secret:v1:";

/// The flag errors in `--secret` are reported under.
const FLAG: &str = "--secret";

/// Where the value of a secret is read, outside the sandbox, when the run starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// A variable of cordon's own environment.
    Env(String),
    /// A file on the host (its content, one trailing newline removed).
    File(PathBuf),
    /// A secret stored in `cordon serve` under the API key that makes the sandbox (only the
    /// server makes these: neither a flag nor a profile can name one).
    Stored(String),
}

impl SecretSource {
    /// `env:VAR` or `file:PATH`.
    pub fn parse(text: &str, field: &str) -> Result<SecretSource, ProfileError> {
        if let Some(var) = text.strip_prefix("env:") {
            if !is_var_name(var) {
                return Err(ProfileError::invalid(
                    field,
                    format!("'env:{var}': not a variable name (letters, digits, _)"),
                ));
            }
            return Ok(SecretSource::Env(var.to_string()));
        }
        if let Some(path) = text.strip_prefix("file:") {
            let path = PathBuf::from(path);
            if !path.is_absolute() || path.as_os_str().as_encoded_bytes().contains(&0) {
                return Err(ProfileError::invalid(
                    field,
                    "file:PATH needs an absolute path, e.g. file:/run/keys/github",
                ));
            }
            return Ok(SecretSource::File(path));
        }
        // Never echo what was given: it may be the value itself, typed inline by mistake.
        Err(ProfileError::invalid(
            field,
            "the value's source must be env:VAR or file:PATH (an inline value is not accepted, \
             so that it never lands in a shell history, a profile or a process list)",
        ))
    }

    /// How the source is shown in messages (the source, never the value).
    pub fn describe(&self) -> String {
        match self {
            SecretSource::Env(v) => format!("env:{v}"),
            SecretSource::File(p) => format!("file:{}", p.display()),
            SecretSource::Stored(n) => format!("stored:{n}"),
        }
    }
}

/// One secret: its source, its hosts, and optionally a header the proxy adds when the program
/// sent none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretSpec {
    /// The variable the sandbox gets the placeholder in.
    pub name: String,
    pub source: SecretSource,
    /// Host names (no IPs, no wildcards) the value may go to.
    pub hosts: Vec<String>,
    /// A header to inject with `format` when the request has none of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The injected header's value, with `{value}` standing for the secret (default
    /// `{value}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// A PEM file of extra CA certificates the upstream's certificate may chain to, besides
    /// the host's trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
}

impl SecretSpec {
    /// `NAME=SOURCE@HOST[,HOST…]`, the `--secret` flag.
    pub fn parse_flag(spec: &str) -> Result<SecretSpec, ProfileError> {
        let Some((name, rest)) = spec.split_once('=') else {
            return Err(ProfileError::invalid(
                FLAG,
                "use NAME=env:VAR@HOST or NAME=file:PATH@HOST[,HOST...], e.g. \
                 --secret OPENAI_API_KEY=env:OPENAI_API_KEY@api.openai.com",
            ));
        };
        let Some((source, hosts)) = rest.rsplit_once('@') else {
            return Err(ProfileError::invalid(
                FLAG,
                format!("{name}: name the hosts the value may go to: NAME=SOURCE@HOST[,HOST...]"),
            ));
        };
        let spec = SecretSpec {
            name: name.to_string(),
            source: SecretSource::parse(source, FLAG)?,
            hosts: hosts
                .split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect(),
            header: None,
            format: None,
            ca: None,
        };
        spec.validate_shape(FLAG)?;
        Ok(spec)
    }

    /// The host names, normalised (lowercase, no trailing dot, IDNA).
    pub fn host_names(&self) -> Vec<String> {
        self.hosts
            .iter()
            .filter_map(|h| match Host::parse(h) {
                Ok(Host::Name(n)) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// Checks that need nothing but the spec; `field` is the flag or profile key.
    fn validate_shape(&self, field: &str) -> Result<(), ProfileError> {
        if !is_var_name(&self.name) {
            return Err(ProfileError::invalid(
                field,
                format!(
                    "{:?} is not a variable name (letters, digits, _)",
                    self.name
                ),
            ));
        }
        let name = &self.name;
        if self.hosts.is_empty() {
            return Err(ProfileError::invalid(
                field,
                format!("{name}: name at least one host the value may go to"),
            ));
        }
        for h in &self.hosts {
            match Host::parse(h) {
                Ok(Host::Name(n)) if !n.starts_with("*.") && !n.contains('*') => {}
                Ok(Host::Name(_)) => {
                    return Err(ProfileError::invalid(
                        field,
                        format!("{name}: host '{h}': a wildcard is not allowed; list each host"),
                    ))
                }
                Ok(Host::Ip(_)) => {
                    return Err(ProfileError::invalid(
                        field,
                        format!(
                            "{name}: host '{h}' is an IP address: a secret is bound to names \
                             (the upstream's certificate is checked for that name)"
                        ),
                    ))
                }
                Err(e) => {
                    return Err(ProfileError::invalid(
                        field,
                        format!("{name}: host '{h}': {e}"),
                    ))
                }
            }
        }
        if let Some(header) = &self.header {
            let token = !header.is_empty()
                && header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(ProfileError::invalid(
                    field,
                    format!("{name}: header '{header}' is not a header name"),
                ));
            }
        }
        if let Some(format) = &self.format {
            if !format.contains("{value}") {
                return Err(ProfileError::invalid(
                    field,
                    format!("{name}: format must contain {{value}}, e.g. \"Bearer {{value}}\""),
                ));
            }
            if format.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(ProfileError::invalid(
                    field,
                    format!("{name}: format must be one line"),
                ));
            }
            if self.header.is_none() {
                return Err(ProfileError::invalid(
                    field,
                    format!("{name}: format needs a header to put it in"),
                ));
            }
        }
        if let Some(ca) = &self.ca {
            if !ca.is_absolute() {
                return Err(ProfileError::invalid(
                    field,
                    format!("{name}: ca must be an absolute path"),
                ));
            }
        }
        Ok(())
    }
}

/// Checks a profile's secrets: each well formed, names unique, and every host also admitted
/// by the network allowlist (a secret cannot open a way out by itself).
pub fn validate(
    secrets: &[SecretSpec],
    rules: &EgressRules,
    field: &str,
) -> Result<(), ProfileError> {
    let mut seen = BTreeMap::new();
    for s in secrets {
        s.validate_shape(field)?;
        if seen.insert(s.name.as_str(), ()).is_some() {
            return Err(ProfileError::invalid(
                field,
                format!("{}: named twice", s.name),
            ));
        }
        for h in s.host_names() {
            let host = Host::Name(h.clone());
            // Any port an entry names for the host will do (a test upstream on 8443): `check`
            // says "port N not allowed" when the name matched with other ports.
            let decision = rules.check(&host, 443);
            if !decision.is_allowed() && !decision.reason.starts_with("port ") {
                return Err(ProfileError::invalid(
                    field,
                    format!(
                        "{}: host {h} is not allowed by the network allowlist: add \
                         --allow-net {h} (a secret's hosts must also be allowed)",
                        s.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `[secrets.NAME]` table of a profile file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SecretFile {
    value: String,
    hosts: Vec<String>,
    header: Option<String>,
    format: Option<String>,
    ca: Option<PathBuf>,
}

impl SecretFile {
    pub(crate) fn into_spec(self, name: String) -> Result<SecretSpec, ProfileError> {
        let field = format!("secrets.{name}");
        let spec = SecretSpec {
            source: SecretSource::parse(&self.value, &format!("{field}.value"))?,
            name,
            hosts: self.hosts,
            header: self.header,
            format: self.format,
            ca: self.ca,
        };
        spec.validate_shape(&field)?;
        Ok(spec)
    }
}

/// A placeholder for the given random bytes.
pub fn placeholder(random: &[u8]) -> String {
    let mut out = String::from(PLACEHOLDER_PREFIX);
    for b in random {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn is_var_name(key: &str) -> bool {
    !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkPolicy;

    fn rules(allow: &[&str]) -> EgressRules {
        NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
        .compile()
        .unwrap()
    }

    fn err(spec: &str) -> String {
        SecretSpec::parse_flag(spec).unwrap_err().to_string()
    }

    #[test]
    fn flag_parses_env_and_file_sources_and_hosts() {
        let s = SecretSpec::parse_flag("KEY=env:MY_KEY@api.example.test,Other.Test.").unwrap();
        assert_eq!(s.name, "KEY");
        assert_eq!(s.source, SecretSource::Env("MY_KEY".into()));
        assert_eq!(s.host_names(), vec!["api.example.test", "other.test"]);
        let s = SecretSpec::parse_flag("K=file:/run/keys/a@a.test").unwrap();
        assert_eq!(s.source, SecretSource::File("/run/keys/a".into()));
    }

    #[test]
    fn an_inline_value_is_refused_without_being_echoed() {
        let e = err("KEY=sk-live-abcdef@api.test");
        assert!(e.starts_with("--secret:"), "{e}");
        assert!(e.contains("env:VAR or file:PATH"), "{e}");
        assert!(!e.contains("sk-live-abcdef"), "{e}");
    }

    #[test]
    fn malformed_flags_name_the_flag() {
        for bad in [
            "KEY",
            "KEY=env:X",
            "KEY=env:X@",
            "1KEY=env:X@a.test",
            "KEY=env:X-Y@a.test",
            "KEY=file:rel/path@a.test",
            "KEY=env:X@127.0.0.1",
            "KEY=env:X@*.a.test",
            "KEY=env:X@a b",
        ] {
            let e = err(bad);
            assert!(e.starts_with("--secret:"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_host_must_also_be_allowed_by_the_allowlist() {
        let s = SecretSpec::parse_flag("K=env:X@api.test").unwrap();
        let e = validate(std::slice::from_ref(&s), &rules(&["other.test"]), FLAG)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not allowed by the network allowlist"), "{e}");
        assert!(e.contains("--allow-net api.test"), "{e}");
        validate(std::slice::from_ref(&s), &rules(&["api.test"]), FLAG).unwrap();
        validate(std::slice::from_ref(&s), &rules(&["*.test"]), FLAG).unwrap();
        validate(&[s], &rules(&["api.test:8443"]), FLAG).unwrap();
    }

    #[test]
    fn a_name_bound_twice_is_refused() {
        let s = SecretSpec::parse_flag("K=env:X@api.test").unwrap();
        let e = validate(&[s.clone(), s], &rules(&["api.test"]), FLAG).unwrap_err();
        assert!(e.to_string().contains("named twice"));
    }

    #[test]
    fn placeholders_are_prefixed_hex() {
        assert_eq!(placeholder(&[0, 0xab, 0x10]), "cordon-secret:v1:00ab10");
    }

    #[test]
    fn file_table_checks_format_and_header() {
        let f = |header: Option<&str>, format: Option<&str>| SecretFile {
            value: "env:X".into(),
            hosts: vec!["a.test".into()],
            header: header.map(String::from),
            format: format.map(String::from),
            ca: None,
        };
        f(Some("Authorization"), Some("Bearer {value}"))
            .into_spec("gh".into())
            .unwrap();
        let e = f(Some("Authorization"), Some("Bearer"))
            .into_spec("gh".into())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("secrets.gh:"), "{e}");
        assert!(f(Some("Bad Header"), None).into_spec("gh".into()).is_err());
        assert!(f(None, Some("{value}")).into_spec("gh".into()).is_err());
        let inline = SecretFile {
            value: "hunter2".into(),
            ..f(None, None)
        }
        .into_spec("gh".into())
        .unwrap_err()
        .to_string();
        assert!(inline.starts_with("secrets.gh.value:"), "{inline}");
        assert!(!inline.contains("hunter2"));
    }
}

#[cfg(test)]
mod profile_tests {
    use crate::Profile;
    use std::path::Path;

    #[test]
    fn profile_secrets_table_is_read_and_checked_against_the_allowlist() {
        let ok = r#"
[network]
allow = ["api.github.test"]
[secrets.GITHUB_TOKEN]
value = "file:/run/keys/github"
hosts = ["api.github.test"]
header = "Authorization"
format = "Bearer {value}"
"#;
        let p = Profile::from_toml(ok, Path::new("p.toml")).unwrap();
        assert_eq!(p.secrets.len(), 1);
        assert_eq!(p.secrets[0].name, "GITHUB_TOKEN");
        assert_eq!(p.secrets[0].header.as_deref(), Some("Authorization"));
        let not_allowed = ok.replace("allow = [\"api.github.test\"]", "allow = [\"x.test\"]");
        let e = Profile::from_toml(&not_allowed, Path::new("p.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("secrets: GITHUB_TOKEN"), "{e}");
        assert!(e.contains("network allowlist"), "{e}");
        let inline = ok.replace("file:/run/keys/github", "ghp_inlinevalue");
        let e = Profile::from_toml(&inline, Path::new("p.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("GITHUB_TOKEN"), "{e}");
        assert!(!e.contains("ghp_inlinevalue"), "{e}");
        let unknown = ok.replace("header =", "heder =");
        assert!(Profile::from_toml(&unknown, Path::new("p.toml")).is_err());
    }
}
