//! `gateway.toml`: what the operator writes. Parsing names the key of every mistake and says
//! what is expected there; [`crate::policy::Policy::compile`] then checks what serde cannot
//! (globs, schemas, rates).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    /// Where in the file, e.g. `rules[1].rate` (empty for the file as a whole).
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(file: &str, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_string(),
            key: key.into(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Default_ {
    #[default]
    Deny,
    Allow,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// What happens to a tool no rule names.
    #[serde(default)]
    pub default: Default_,
    /// The hash-chained audit log; relative to the config file. Default: in the data dir.
    pub audit: Option<PathBuf>,
    /// Where pins and pending approvals live; relative to the config file. Default: next to
    /// the config file, `<config stem>.state/`.
    pub state: Option<PathBuf>,
    /// Record argument values (secret-looking fields masked) in the audit log, for every rule.
    #[serde(default)]
    pub log_args: bool,
    /// `false`: a gateway of one server shows its tools, prompts and resources under their own
    /// names (no `server.` / `server+` prefix), so clients written against it work unchanged.
    /// Rules still name them with the prefix.
    #[serde(default = "yes")]
    pub prefix: bool,
    /// Items per page of the lists the gateway answers (tools, resources, templates, prompts).
    #[serde(default = "page_size")]
    pub page_size: usize,
}

fn yes() -> bool {
    true
}

fn page_size() -> usize {
    100
}

impl Default for GatewaySection {
    fn default() -> GatewaySection {
        GatewaySection {
            default: Default_::default(),
            audit: None,
            state: None,
            log_args: false,
            prefix: true,
            page_size: page_size(),
        }
    }
}

/// An upstream MCP server: a command run in a cordon sandbox, or a remote URL.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub command: Option<Vec<String>>,
    pub url: Option<String>,
    /// For an `https://` url: a PEM file of certificates trusted besides the system's roots
    /// (e.g. a private CA, or the server's own self-signed certificate). Relative to the
    /// config file.
    pub ca: Option<PathBuf>,
    /// A built-in profile name or a profile file (relative to the config file).
    pub profile: Option<String>,
    #[serde(default)]
    pub ro: Vec<String>,
    #[serde(default)]
    pub rw: Vec<String>,
    /// `KEY=VALUE` or `KEY` (passed from the gateway's environment), like `cordon run --env`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Working directory inside the sandbox.
    pub cwd: Option<String>,
    /// Pins this server's definitions to a hash (`cordon gateway pins` shows it): a change is
    /// withheld even on the first start.
    pub pin: Option<String>,
    /// How long one call may take before the server is treated as hung. Default 60s.
    pub call_timeout: Option<String>,
}

/// A plain script as a tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTool {
    #[serde(default)]
    pub description: String,
    /// The tool's input schema (JSON Schema, as TOML). Default: any object.
    pub input: Option<Value>,
    pub command: Vec<String>,
    pub profile: Option<String>,
    #[serde(default)]
    pub ro: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    /// Default: the profile's timeout.
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// `server.tool`, globs allowed; a script tool by its own name. A rule names exactly one
    /// of tool, resource, prompt, sampling and elicitation.
    pub tool: Option<String>,
    /// A resource (or resource template) as the gateway shows it: `server+uri`, globs allowed
    /// (`files+file:///data/**`). Its path rules name the argument `uri`.
    pub resource: Option<String>,
    /// A prompt, `server.prompt`, globs allowed; its arguments are the call's arguments.
    pub prompt: Option<String>,
    /// The servers (a glob over server names) whose sampling requests (`sampling/createMessage`,
    /// an upstream asking the agent's model) the rule governs.
    pub sampling: Option<String>,
    /// The servers whose elicitation requests (`elicitation/create`) the rule governs.
    pub elicitation: Option<String>,
    /// An explicit refusal: wins over every allowing rule.
    #[serde(default)]
    pub deny: bool,
    /// A JSON Schema the arguments must also satisfy.
    pub args: Option<Value>,
    /// A condition across fields (CEL) over `args`, `tool` and `client`, e.g.
    /// `size(args.to) < 5 || args.urgent == true`; false or an error refuses the call.
    pub when: Option<String>,
    /// `N/second|minute|hour|day`, per client.
    pub rate: Option<String>,
    /// Hold each call for a person's approval.
    #[serde(default)]
    pub approve: bool,
    /// How long a held call waits for an answer. Default 5m.
    pub approve_timeout: Option<String>,
    /// Argument name → allow/deny path globs.
    #[serde(default)]
    pub paths: BTreeMap<String, PathRule>,
    /// Record this tool's argument values (secret-looking fields masked).
    #[serde(default)]
    pub log_args: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub gateway: GatewaySection,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    #[serde(default)]
    pub tools: BTreeMap<String, ScriptTool>,
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// The directory relative paths in the file are resolved against.
    #[serde(skip)]
    pub base: PathBuf,
    #[serde(skip)]
    pub file: String,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&file, "", format!("cannot read it: {e}")))?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Config::parse(&text, &file, &base)
    }

    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let mut cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            // toml's own message carries the line and a caret; the key path says where in
            // the structure.
            let msg = inner.message().to_string();
            let at = inner
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError::new(
                file,
                if key == "." { String::new() } else { key },
                format!("{msg}{at}"),
            )
        })?;
        cfg.base = base.to_path_buf();
        cfg.file = file.to_string();
        cfg.check_shape()?;
        Ok(cfg)
    }

    fn err(&self, key: impl Into<String>, msg: impl Into<String>) -> ConfigError {
        ConfigError::new(&self.file, key, msg)
    }

    /// What serde cannot say: exactly one of command/url, names that can be addressed.
    fn check_shape(&self) -> Result<(), ConfigError> {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        for (name, s) in &self.servers {
            let key = format!("servers.{name}");
            if !name_ok(name) {
                return Err(self.err(
                    key,
                    "a server name is letters, digits, _ and - (it prefixes its tools: NAME.tool)",
                ));
            }
            match (&s.command, &s.url) {
                (Some(_), Some(_)) => {
                    return Err(self.err(key, "give either command (a stdio server run in a sandbox) or url (a remote server), not both"))
                }
                (None, None) => {
                    return Err(self.err(
                        key,
                        "needs command = [\"prog\", \"arg\"…] or url = \"http://…/mcp\"",
                    ))
                }
                (Some(c), None) if c.is_empty() || c[0].is_empty() => {
                    return Err(self.err(
                        format!("{key}.command"),
                        "is empty: expected [\"program\", \"arg\"…]",
                    ))
                }
                (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    return Err(self.err(
                        format!("{key}.url"),
                        format!("'{u}' is not an http:// or https:// URL"),
                    ))
                }
                (_, _) if s.ca.is_some() && !s.url.as_deref().is_some_and(|u| u.starts_with("https://")) => {
                    return Err(self.err(format!("{key}.ca"), "applies to an https:// url only (it names the certificates that url's server may present)"))
                }
                (None, Some(_)) if s.profile.is_some() || !s.ro.is_empty() || !s.rw.is_empty() => {
                    return Err(self.err(key, "profile, ro and rw apply to a command run in a sandbox; a url server runs elsewhere and is not sandboxed by cordon"))
                }
                _ => {}
            }
        }
        for (name, t) in &self.tools {
            let key = format!("tools.{name}");
            if !name_ok(name) {
                return Err(self.err(
                    key,
                    "a tool name is letters, digits, _ and - (no dot: dots separate server and tool)",
                ));
            }
            if t.command.is_empty() || t.command[0].is_empty() {
                return Err(self.err(
                    format!("{key}.command"),
                    "is empty: expected [\"program\", \"arg\"…]",
                ));
            }
            if let Some(input) = &t.input {
                if input.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(self.err(
                        format!("{key}.input"),
                        "must be a JSON Schema with type = \"object\" (MCP tools take an object of arguments)",
                    ));
                }
            }
        }
        if self.gateway.page_size == 0 {
            return Err(self.err("gateway.page_size", "a page holds at least one item"));
        }
        if !self.gateway.prefix && self.servers.len() != 1 {
            return Err(self.err(
                "gateway.prefix",
                "false needs exactly one server: the prefix is what tells servers' names apart",
            ));
        }
        for (i, r) in self.rules.iter().enumerate() {
            let key = format!("rules[{i}]");
            let named = [&r.tool, &r.resource, &r.prompt, &r.sampling, &r.elicitation]
                .iter()
                .filter(|n| n.is_some())
                .count();
            if named != 1 {
                return Err(self.err(
                    key,
                    "names exactly one of tool, resource, prompt, sampling and elicitation",
                ));
            }
            if r.tool.as_deref() == Some("") {
                return Err(self.err(
                    format!("{key}.tool"),
                    "is empty: expected server.tool, a glob like files.*, or a script tool's name",
                ));
            }
            if r.deny && (r.args.is_some() || r.rate.is_some() || r.approve || !r.paths.is_empty())
            {
                return Err(self.err(key, "a deny rule refuses the tool outright; args, rate, approve and paths have no meaning on it"));
            }
        }
        Ok(())
    }

    /// A path of the config, resolved against its directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// The state directory (pins, pending approvals).
    pub fn state_dir(&self, config_path: &Path) -> PathBuf {
        match &self.gateway.state {
            Some(s) => self.resolve(s),
            None => {
                let stem = config_path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "gateway".into());
                self.base.join(format!("{stem}.state"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config, ConfigError> {
        Config::parse(t, "gateway.toml", Path::new("/etc/cordon"))
    }

    #[test]
    fn the_issue_example_parses() {
        let c = parse(
            r#"
[gateway]
default = "deny"
audit = "gateway-audit.jsonl"

[servers.mail]
command = ["python3", "/srv/mail_server.py"]
profile = "default"
ro = ["/srv"]

[tools.word_count]
description = "Count words"
input = { type = "object", properties = { text = { type = "string" } }, required = ["text"] }
command = ["python3", "-c", "import json,sys; print(len(json.load(sys.stdin)['text'].split()))"]

[[rules]]
tool = "mail.send_email"
args = { properties = { to = { type = "string", pattern = "@company\\.com$" } }, required = ["to"] }
rate = "10/minute"
approve = false

[[rules]]
tool = "files.delete_file"
paths = { path = { deny = ["/system/**"] } }
"#,
        )
        .unwrap();
        assert_eq!(c.gateway.default, Default_::Deny);
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.rules[1].paths["path"].deny, vec!["/system/**"]);
        assert_eq!(
            c.resolve(c.gateway.audit.as_deref().unwrap()),
            Path::new("/etc/cordon/gateway-audit.jsonl")
        );
    }

    #[test]
    fn errors_name_the_key_and_what_is_expected() {
        let e = parse("[[rules]]\ntool = \"a.b\"\nrat = \"1/second\"\n").unwrap_err();
        assert_eq!(e.key, "rules[0].rat");
        assert!(e.message.contains("unknown field `rat`"), "{e}");
        assert!(e.message.contains("line 3"), "{e}");
        let e = parse("[gateway]\ndefault = \"maybe\"\n").unwrap_err();
        assert_eq!(e.key, "gateway.default");
        assert!(
            e.message.contains("deny") && e.message.contains("allow"),
            "{e}"
        );
        let e = parse("[servers.x]\nprofile = \"default\"\n").unwrap_err();
        assert_eq!(e.key, "servers.x");
        assert!(e.message.contains("command"), "{e}");
        let e = parse("[servers.x]\nurl = \"ftp://a\"\n").unwrap_err();
        assert_eq!(e.key, "servers.x.url");
        let e = parse("[servers.x]\ncommand = [\"x\"]\nca = \"ca.pem\"\n").unwrap_err();
        assert_eq!(e.key, "servers.x.ca");
        let e =
            parse("[servers.x]\nurl = \"http://127.0.0.1:1/mcp\"\nca = \"ca.pem\"\n").unwrap_err();
        assert_eq!(e.key, "servers.x.ca");
        let c = parse("[servers.x]\nurl = \"https://127.0.0.1:1/mcp\"\nca = \"ca.pem\"\n").unwrap();
        assert_eq!(
            c.resolve(c.servers["x"].ca.as_deref().unwrap()),
            Path::new("/etc/cordon/ca.pem")
        );
        let e = parse("[servers.\"a.b\"]\ncommand = [\"x\"]\n").unwrap_err();
        assert_eq!(e.key, "servers.a.b");
        let e = parse("[tools.t]\ncommand = [\"x\"]\ninput = { type = \"string\" }\n").unwrap_err();
        assert_eq!(e.key, "tools.t.input");
        let e = parse("[[rules]]\ntool = \"a.b\"\ndeny = true\nrate = \"1/second\"\n").unwrap_err();
        assert_eq!(e.key, "rules[0]");
        let e = parse("[[rules]]\ntool = \"a.b\"\nprompt = \"a.p\"\n").unwrap_err();
        assert!(
            e.key == "rules[0]" && e.message.contains("exactly one"),
            "{e}"
        );
        let e = parse("[gateway]\nprefix = false\n").unwrap_err();
        assert_eq!(e.key, "gateway.prefix");
        assert!(parse("").unwrap().gateway.prefix);
    }
}
