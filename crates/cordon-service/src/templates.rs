//! Named templates (`cordon serve --templates FILE`): an image, a profile and defaults (disk,
//! memory, CPUs, network allowlist, env) a create selects by name — the native API's
//! `template`, E2B's `templateID`. `base` and `code-interpreter-v1` are built in and the file
//! may redefine them.
//!
//! Threat model: the file is the operator's, read once at start and trusted as configuration,
//! but checked as strictly as a request (a template is the defaults of a request, not a way
//! around its rules: no image that is a host path, only built-in profiles). A request names a
//! template only by name; an unknown name is a 404 that lists the known ones, never a file.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use cordon_policy::network::NetworkPolicy;
use serde::Deserialize;

use crate::error::ServiceError;
use crate::types::{Amount, CreateSandbox};

/// The templates a server starts with whatever its file says: E2B's two well-known names,
/// each the `default` profile on the host's system directories with [`BUILTIN_DISK`] and
/// [`BUILTIN_MEMORY`].
pub const BUILTIN: [&str; 2] = ["base", "code-interpreter-v1"];
/// The built-in template that is E2B's code interpreter.
pub const CODE_INTERPRETER: &str = "code-interpreter-v1";
/// The image `scripts/code-interpreter-image.sh` builds: once the store has it, the built-in
/// `code-interpreter-v1` runs on it (Python with the data stack, Node, bash) instead of the
/// host's system directories.
pub const CODE_INTERPRETER_IMAGE: &str = "code-interpreter:latest";
/// What a `code-interpreter-v1` create answers while that image is not built.
pub const HOST_PYTHON_NOTE: &str = "code-interpreter-v1 runs on this host's system directories: its Python is the host's /usr/bin/python3, with whatever modules the host has; scripts/code-interpreter-image.sh builds the image with the data stack (numpy, pandas, matplotlib, scipy, scikit-learn, …) that it uses from then on";
/// Scratch of the built-in templates: a data-stack `pip install` (numpy, pandas, scipy,
/// scikit-learn, matplotlib and their dependencies: roughly 400-500 MB unpacked in `~/.local`,
/// the wheels, about 100 MB, in `/tmp` while it runs) fits with room to spare.
pub const BUILTIN_DISK: u64 = 2 << 30;
/// Memory of the built-in templates: the scratch tmpfs' pages count against the sandbox's
/// memory, so an install needs room for its files and for the interpreter that imports them.
pub const BUILTIN_MEMORY: u64 = 2 << 30;

/// One template: what a create that names it gets unless the request says otherwise.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    /// An image in the server's store; `None`: the host's system directories.
    pub image: Option<String>,
    /// A built-in profile (`default`, `strict`).
    pub profile: String,
    pub memory: Option<u64>,
    pub disk: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u32>,
    /// Time to live, in seconds.
    pub ttl: Option<f64>,
    /// The egress allowlist (`--allow-net` entries); `None`: no network unless the request
    /// (or, for E2B, the server's `--e2b-allow-net`) gives one.
    pub allow_net: Option<Vec<String>>,
    /// Names the egress proxy resolves to fixed addresses (the network policy's `hosts`).
    pub hosts: BTreeMap<String, IpAddr>,
    pub env: BTreeMap<String, String>,
    /// What it is for (shown by nothing but the file; kept so the file may say).
    pub description: Option<String>,
    /// One of [`BUILTIN`] as the server defines it (not replaced by the file).
    pub builtin: bool,
}

impl Template {
    fn builtin() -> Template {
        Template {
            profile: "default".into(),
            disk: Some(BUILTIN_DISK),
            memory: Some(BUILTIN_MEMORY),
            builtin: true,
            ..Default::default()
        }
    }

    /// The request with this template's defaults filled in where it left a field out; the
    /// request's env wins over the template's for the same variable.
    pub fn apply(&self, mut req: CreateSandbox) -> CreateSandbox {
        req.profile.get_or_insert_with(|| self.profile.clone());
        if req.image.is_none() {
            req.image = self.image.clone();
        }
        let num = |n: u64| Amount::Number(n as f64);
        if req.memory.is_none() {
            req.memory = self.memory.map(num);
        }
        if req.disk.is_none() {
            req.disk = self.disk.map(num);
        }
        req.cpus = req.cpus.or(self.cpus);
        req.pids = req.pids.or(self.pids);
        if req.ttl.is_none() {
            req.ttl = self.ttl.map(Amount::Number);
        }
        if req.network.is_none() && (self.allow_net.is_some() || !self.hosts.is_empty()) {
            req.network = Some(NetworkPolicy {
                allow: self.allow_net.clone().unwrap_or_default(),
                hosts: self.hosts.clone(),
            });
        }
        for (k, v) in &self.env {
            req.env.entry(k.clone()).or_insert_with(|| v.clone());
        }
        req
    }
}

/// The server's templates by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Templates {
    by_name: BTreeMap<String, Template>,
}

impl Default for Templates {
    /// The built-in ones only.
    fn default() -> Self {
        Templates {
            by_name: BUILTIN
                .iter()
                .map(|n| (n.to_string(), Template::builtin()))
                .collect(),
        }
    }
}

/// A template file's error: which file, which template, which key, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {place}{message}")]
pub struct TemplateError {
    file: String,
    place: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    templates: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    image: Option<String>,
    profile: Option<String>,
    memory: Option<Amount>,
    disk: Option<Amount>,
    cpus: Option<f64>,
    pids: Option<u32>,
    ttl: Option<Amount>,
    allow_net: Option<Vec<String>>,
    #[serde(default)]
    hosts: BTreeMap<String, String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    description: Option<String>,
}

/// Template names: what E2B's SDKs send as `templateID` and a URL path segment can carry.
fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Templates {
    /// Reads a template file (see [`Templates::parse`]).
    pub fn load(path: &Path) -> Result<Templates, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|e| TemplateError {
            file: path.display().to_string(),
            place: String::new(),
            message: e.to_string(),
        })?;
        Templates::parse(&text, path)
    }

    /// The built-in templates, then the file's `[templates.NAME]` tables (a built-in name
    /// redefines that one). Every key is checked now, so a server never starts with a
    /// template it would refuse to create.
    pub fn parse(text: &str, origin: &Path) -> Result<Templates, TemplateError> {
        let file = origin.display().to_string();
        let err = |place: String, message: String| TemplateError {
            file: file.clone(),
            place,
            message,
        };
        let parsed: File = toml::from_str(text).map_err(|e| {
            err(
                String::new(),
                format!("{} (the file holds [templates.NAME] tables)", e.message()),
            )
        })?;
        let mut out = Templates::default();
        for (name, value) in parsed.templates {
            let place = format!("[templates.{name}] ");
            if !valid_name(&name) {
                return Err(err(
                    place,
                    "the name must be 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit".into(),
                ));
            }
            let raw: Raw = value
                .try_into()
                .map_err(|e: toml::de::Error| err(place.clone(), e.message().to_string()))?;
            let t = Template::from_raw(raw).map_err(|m| err(place.clone(), m))?;
            out.by_name.insert(name, t);
        }
        Ok(out)
    }

    /// The template of that name.
    pub fn get(&self, name: &str) -> Option<&Template> {
        self.by_name.get(name)
    }

    /// Every template, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Template)> {
        self.by_name.iter()
    }

    /// The names, comma-separated.
    pub fn names(&self) -> String {
        self.by_name.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// The 404 for a name that is none of these.
    pub fn not_found(&self, name: &str) -> ServiceError {
        ServiceError::new(
            crate::error::ErrorKind::NotFound,
            "template_not_found",
            format!(
                "template: '{name}' is not one of this server's templates ({}); an operator adds templates with cordon serve --templates FILE",
                self.names()
            ),
        )
    }
}

impl Template {
    /// Checks a file's table; the error names the key.
    fn from_raw(raw: Raw) -> Result<Template, String> {
        let msg = |e: ServiceError| e.message;
        if let Some(i) = &raw.image {
            if i.is_empty() || cordon_image::store::names_directory(i) {
                return Err(format!(
                    "image: '{i}' is not an image name: name an image in the server's store (cordon image build/pull), or leave image out for the host's system directories"
                ));
            }
        }
        let mut hosts = BTreeMap::new();
        for (h, ip) in &raw.hosts {
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| format!("hosts: '{ip}' (for {h}) is not an IP address"))?;
            hosts.insert(h.clone(), ip);
        }
        let network = NetworkPolicy {
            allow: raw.allow_net.clone().unwrap_or_default(),
            hosts: hosts.clone(),
        };
        network
            .validate()
            .map_err(|e| format!("allow_net/hosts: {e}"))?;
        let ttl = match &raw.ttl {
            Some(t) => Some(t.duration("ttl").map_err(msg)?.as_secs_f64()),
            None => None,
        };
        let profile = raw.profile.unwrap_or_else(|| "default".into());
        // The same check a request with these values gets: a profile name, sizes, env names.
        let built = crate::requests::profile_from(
            Some(&profile),
            raw.memory.as_ref(),
            raw.cpus,
            raw.pids,
            raw.disk.as_ref(),
            None,
            &raw.env,
            Some(&network),
        )
        .map_err(msg)?;
        Ok(Template {
            image: raw.image,
            memory: raw.memory.as_ref().map(|_| built.limits.memory),
            disk: raw.disk.as_ref().map(|_| built.limits.disk),
            cpus: raw.cpus,
            pids: raw.pids,
            profile,
            ttl,
            allow_net: raw.allow_net,
            hosts,
            env: raw.env,
            description: raw.description,
            builtin: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Templates, String> {
        Templates::parse(text, Path::new("t.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_adds_templates_and_may_redefine_the_builtin_ones() {
        let t = parse(
            r#"
            [templates.data-science]
            image = "code-interpreter"
            profile = "default"
            disk = "2G"
            memory = "2G"
            cpus = 2
            allow_net = ["pypi.org", "files.pythonhosted.org"]
            env = { MPLBACKEND = "Agg" }

            [templates.base]
            memory = 1073741824
            "#,
        )
        .expect("parses");
        let ds = t.get("data-science").expect("data-science");
        assert_eq!(ds.image.as_deref(), Some("code-interpreter"));
        assert_eq!(ds.disk, Some(2 << 30));
        assert_eq!(ds.cpus, Some(2.0));
        assert_eq!(ds.env.get("MPLBACKEND").map(String::as_str), Some("Agg"));
        assert_eq!(t.get("base").and_then(|b| b.memory), Some(1 << 30));
        assert!(t.get("code-interpreter-v1").is_some(), "built-in kept");
        let req = ds.apply(CreateSandbox {
            memory: Some(Amount::Text("1G".into())),
            env: [("MPLBACKEND".to_string(), "svg".to_string())].into(),
            ..Default::default()
        });
        assert!(matches!(req.memory, Some(Amount::Text(ref m)) if m == "1G"));
        assert_eq!(req.env.get("MPLBACKEND").map(String::as_str), Some("svg"));
        assert!(matches!(req.disk, Some(Amount::Number(n)) if n == (2u64 << 30) as f64));
        assert_eq!(req.network.map(|n| n.allow.len()), Some(2));
    }

    #[test]
    fn errors_name_the_file_the_template_and_the_key() {
        for (text, want) in [
            (
                "[templates.a]\ndisk = \"2X\"",
                "t.toml: [templates.a] disk: '2X'",
            ),
            ("[templates.a]\nmemory = \"1K\"", "t.toml: [templates.a] "),
            (
                "[templates.a]\nprofile = \"/etc/x\"",
                "[templates.a] profile: '/etc/x'",
            ),
            (
                "[templates.a]\nimage = \"/srv/root\"",
                "[templates.a] image: '/srv/root'",
            ),
            (
                "[templates.a]\nallow_net = [\"not a host\"]",
                "[templates.a] allow_net",
            ),
            (
                "[templates.a]\nenv = { \"A-B\" = \"1\" }",
                "[templates.a] env: 'A-B'",
            ),
            (
                "[templates.a]\nimag = \"x\"",
                "[templates.a] unknown field `imag`",
            ),
            ("[templates.a]\nttl = \"0s\"", "[templates.a] ttl"),
            ("[templates.\"a/b\"]\n", "[templates.a/b] the name"),
            ("[template.a]\n", "t.toml: unknown field `template`"),
        ] {
            let e = parse(text).expect_err(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert!(parse("[templates.a]\nmemory = \"1K\"")
            .expect_err("small")
            .contains("memory"));
    }

    #[test]
    fn an_unknown_name_is_a_404_listing_the_known_ones() {
        let t = parse("[templates.mine]\n").expect("parses");
        let e = t.not_found("nope");
        assert_eq!(e.kind, crate::error::ErrorKind::NotFound);
        assert!(
            e.message.contains("base, code-interpreter-v1, mine"),
            "{}",
            e.message
        );
    }
}
