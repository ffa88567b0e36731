//! The compiled rules and the one question the front end asks of each call: may this client
//! call this tool with these arguments, and under which conditions?

use std::time::Duration;

use globset::{Glob, GlobMatcher};
use serde_json::Value;

use crate::config::{Config, ConfigError, Default_};
use crate::paths::{normalise, PathGlob};
use crate::rate::{Limiter, Rate};

/// Why a call was refused; the names are the `reason` label of the metrics and the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// No rule allows the tool (default = deny).
    NotAllowed,
    /// A `deny = true` rule names it.
    Denied,
    /// The arguments break the upstream tool's own inputSchema.
    Schema,
    /// The arguments break a rule's `args` schema.
    Args,
    /// A path argument is outside what a rule's `paths` allow.
    Path,
    /// A rule's `when` condition is false (or cannot be evaluated).
    When,
    Rate,
    /// A person refused, or nobody answered in time.
    Approval,
    /// The tool's definition changed and is not approved yet.
    Pinned,
    /// The tool does not exist upstream.
    Unknown,
    /// The upstream failed (crashed, hung, answered garbage).
    Upstream,
    /// The client cancelled the request (the upstream was told).
    Cancelled,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllowed => "not_allowed",
            Reason::Denied => "denied",
            Reason::Schema => "schema",
            Reason::Args => "args",
            Reason::Path => "path",
            Reason::When => "when",
            Reason::Rate => "rate",
            Reason::Approval => "approval",
            Reason::Pinned => "pinned",
            Reason::Unknown => "unknown_tool",
            Reason::Upstream => "upstream",
            Reason::Cancelled => "cancelled",
        }
    }
}

/// A refused call: which rule refused and why, fit to show the agent (argument values are
/// never quoted: they may be secrets, and the agent has them anyway).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: Reason,
    /// `rules[1] (tool = "files.delete_file")`, or what else decided.
    pub rule: String,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused by {}: {}", self.rule, self.message)?;
        if let Some(d) = self.retry_after {
            write!(f, " (retry after {:.3} s)", d.as_secs_f64())?;
        }
        Ok(())
    }
}

/// An admitted call.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The arguments to send upstream: path arguments replaced by their normalised form, so
    /// the upstream acts on exactly what was checked.
    pub arguments: Value,
    /// The rules that applied (for the audit log).
    pub rules: Vec<String>,
    /// Held for approval: by which rule, for how long at most.
    pub approve: Option<(String, Duration)>,
    pub log_args: bool,
}

struct PathSet {
    arg: String,
    allow: Vec<PathGlob>,
    deny: Vec<PathGlob>,
}

/// What a rule governs: the gateway checks each kind of request against its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `tools/call`, named `server.tool` (a script tool by its own name).
    Tool,
    /// `resources/read` and `resources/subscribe`, named `server+uri`.
    Resource,
    /// `prompts/get`, named `server.prompt`.
    Prompt,
    /// An upstream's `sampling/createMessage`, named by its server.
    Sampling,
    /// An upstream's `elicitation/create`, named by its server.
    Elicitation,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Resource => "resource",
            Kind::Prompt => "prompt",
            Kind::Sampling => "sampling",
            Kind::Elicitation => "elicitation",
        }
    }
}

struct Rule {
    label: String,
    kind: Kind,
    pattern: String,
    tool: GlobMatcher,
    deny: bool,
    args: Option<jsonschema::Validator>,
    when: Option<(String, cel::Program)>,
    rate: Option<Limiter>,
    approve: Option<Duration>,
    paths: Vec<PathSet>,
    log_args: bool,
}

pub struct Policy {
    default: Default_,
    rules: Vec<Rule>,
    log_args: bool,
}

/// Compiles a JSON Schema (an upstream's inputSchema or a rule's args).
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// The first few ways `instance` breaks `schema`, with values masked.
fn schema_errors(v: &jsonschema::Validator, instance: &Value) -> Option<String> {
    let errs: Vec<String> = v
        .iter_errors(instance)
        .take(3)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("at {at}: {}", e.masked_with("the value"))
        })
        .collect();
    if errs.is_empty() {
        None
    } else {
        Some(errs.join("; "))
    }
}

pub const DEFAULT_APPROVE_TIMEOUT: Duration = Duration::from_secs(300);

impl Policy {
    pub fn compile(cfg: &Config) -> Result<Policy, ConfigError> {
        let err = |k: String, m: String| ConfigError::new(&cfg.file, k, m);
        let mut rules = Vec::new();
        for (i, r) in cfg.rules.iter().enumerate() {
            let key = format!("rules[{i}]");
            let (kind, pattern) = match (&r.tool, &r.resource, &r.prompt, &r.sampling) {
                (Some(t), ..) => (Kind::Tool, t),
                (_, Some(t), ..) => (Kind::Resource, t),
                (_, _, Some(t), _) => (Kind::Prompt, t),
                (_, _, _, Some(t)) => (Kind::Sampling, t),
                _ => match &r.elicitation {
                    Some(t) => (Kind::Elicitation, t),
                    None => {
                        return Err(err(
                            key,
                            "names none of tool, resource, prompt, sampling and elicitation".into(),
                        ))
                    }
                },
            };
            let tool = Glob::new(pattern)
                .map_err(|e| {
                    err(
                        format!("{key}.{}", kind.as_str()),
                        format!("'{pattern}' is not a glob: {e}"),
                    )
                })?
                .compile_matcher();
            let args = match &r.args {
                Some(s) => Some(compile_schema(s).map_err(|e| {
                    err(format!("{key}.args"), format!("is not a JSON Schema: {e}"))
                })?),
                None => None,
            };
            let when = match &r.when {
                Some(text) => Some((
                    text.clone(),
                    cel::Program::compile(text).map_err(|e| {
                        err(
                            format!("{key}.when"),
                            format!("is not a CEL expression: {e}"),
                        )
                    })?,
                )),
                None => None,
            };
            let rate = match &r.rate {
                Some(t) => Some(Limiter::new(
                    Rate::parse(t).map_err(|e| err(format!("{key}.rate"), e))?,
                )),
                None => None,
            };
            let approve = if r.approve {
                Some(match &r.approve_timeout {
                    Some(t) => cordon_policy::units::parse_duration(t).map_err(|e| {
                        err(
                            format!("{key}.approve_timeout"),
                            format!("{e} (e.g. \"90s\", \"5m\")"),
                        )
                    })?,
                    None => DEFAULT_APPROVE_TIMEOUT,
                })
            } else {
                if r.approve_timeout.is_some() {
                    return Err(err(
                        format!("{key}.approve_timeout"),
                        "has no meaning without approve = true".into(),
                    ));
                }
                None
            };
            let mut paths = Vec::new();
            for (arg, set) in &r.paths {
                let globs = |list: &[String], what: &str| {
                    list.iter()
                        .map(|g| {
                            PathGlob::new(g)
                                .map_err(|e| err(format!("{key}.paths.{arg}.{what}"), e))
                        })
                        .collect::<Result<Vec<_>, _>>()
                };
                if set.allow.is_empty() && set.deny.is_empty() {
                    return Err(err(
                        format!("{key}.paths.{arg}"),
                        "needs allow = [globs] and/or deny = [globs]".into(),
                    ));
                }
                paths.push(PathSet {
                    arg: arg.clone(),
                    allow: globs(&set.allow, "allow")?,
                    deny: globs(&set.deny, "deny")?,
                });
            }
            rules.push(Rule {
                label: format!("{key} ({} = \"{pattern}\")", kind.as_str()),
                kind,
                pattern: pattern.clone(),
                tool,
                deny: r.deny,
                args,
                when,
                rate,
                approve,
                paths,
                log_args: r.log_args,
            });
        }
        Ok(Policy {
            default: cfg.gateway.default,
            rules,
            log_args: cfg.gateway.log_args,
        })
    }

    fn matching<'a>(&'a self, kind: Kind, tool: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules
            .iter()
            .filter(move |r| r.kind == kind && r.tool.is_match(tool))
    }

    /// Whether the tool may be called at all (shown in tools/list, not refused outright).
    pub fn allows(&self, tool: &str) -> Result<(), Refusal> {
        self.allows_kind(Kind::Tool, tool)
    }

    /// Whether a tool, resource, prompt or server's request may pass at all (shown in its
    /// list, not refused outright).
    pub fn allows_kind(&self, kind: Kind, tool: &str) -> Result<(), Refusal> {
        if let Some(r) = self.matching(kind, tool).find(|r| r.deny) {
            return Err(Refusal {
                reason: Reason::Denied,
                rule: r.label.clone(),
                message: format!("{tool} is denied"),
                retry_after: None,
            });
        }
        if self.default == Default_::Deny && self.matching(kind, tool).next().is_none() {
            return Err(Refusal {
                reason: Reason::NotAllowed,
                rule: "gateway.default = \"deny\"".into(),
                message: format!("no rule allows {tool}"),
                retry_after: None,
            });
        }
        Ok(())
    }

    /// Checks one call: allowlist, the tool's own schema, each rule's args and paths, then the
    /// rate limits (last, so that a refused call costs no allowance).
    pub fn check(
        &self,
        client: &str,
        tool: &str,
        input_schema: Option<&jsonschema::Validator>,
        arguments: &Value,
    ) -> Result<Admitted, Refusal> {
        self.check_kind(Kind::Tool, client, tool, input_schema, arguments)
    }

    /// [`Policy::check`] for any kind: a resource's arguments are `{"uri": …}` (its path for
    /// path rules), a prompt's its arguments, a sampling or elicitation request's its params.
    pub fn check_kind(
        &self,
        kind: Kind,
        client: &str,
        tool: &str,
        input_schema: Option<&jsonschema::Validator>,
        arguments: &Value,
    ) -> Result<Admitted, Refusal> {
        self.allows_kind(kind, tool)?;
        let refuse = |reason, rule: &str, message: String| Refusal {
            reason,
            rule: rule.to_string(),
            message,
            retry_after: None,
        };
        if !arguments.is_object() {
            return Err(refuse(
                Reason::Schema,
                "the MCP protocol",
                "arguments must be an object".into(),
            ));
        }
        if let Some(v) = input_schema {
            if let Some(e) = schema_errors(v, arguments) {
                return Err(refuse(
                    Reason::Schema,
                    &format!("{tool}'s inputSchema"),
                    format!("the arguments do not match the tool's input schema: {e}"),
                ));
            }
        }
        let mut args = arguments.clone();
        let mut applied = Vec::new();
        let mut approve: Option<(String, Duration)> = None;
        let mut log_args = self.log_args;
        let rules: Vec<&Rule> = self.matching(kind, tool).collect();
        for r in &rules {
            if let Some(v) = &r.args {
                if let Some(e) = schema_errors(v, &args) {
                    return Err(refuse(
                        Reason::Args,
                        &r.label,
                        format!("the arguments break the rule's args schema: {e}"),
                    ));
                }
            }
            if let Some((text, program)) = &r.when {
                check_when(text, program, &args, tool, client, &r.label)?;
            }
            for set in &r.paths {
                let Some(slot) = args.get_mut(&set.arg) else {
                    continue;
                };
                check_path_value(slot, set, &r.label)?;
            }
            applied.push(r.label.clone());
            log_args |= r.log_args;
            if let Some(t) = r.approve {
                // The shortest timeout of the rules that ask wins.
                if approve.as_ref().is_none_or(|(_, old)| t < *old) {
                    approve = Some((r.label.clone(), t));
                }
            }
        }
        for r in &rules {
            if let Some(l) = &r.rate {
                if let Err(wait) = l.check(client) {
                    let rate = l.rate();
                    return Err(Refusal {
                        reason: Reason::Rate,
                        rule: r.label.clone(),
                        message: format!(
                            "rate limit of {} calls per {} s for this client reached",
                            rate.count,
                            rate.per.as_secs()
                        ),
                        retry_after: Some(wait),
                    });
                }
            }
        }
        Ok(Admitted {
            arguments: args,
            rules: applied,
            approve,
            log_args,
        })
    }

    /// Every deny glob of every path rule that may apply to a server's tools (`server.*`
    /// patterns and exact names alike): what the server's sandbox must not see.
    pub fn denied_paths_for_server(&self, server: &str) -> Vec<crate::carve::DeniedPath> {
        self.rules
            .iter()
            .filter(|r| {
                let probe = match r.kind {
                    Kind::Resource => format!("{server}+"),
                    Kind::Tool | Kind::Prompt => format!("{server}."),
                    Kind::Sampling | Kind::Elicitation => return false,
                };
                // A rule may name any tool of the server: test the glob on the server prefix
                // by its literal start (globs on server names are rare; when unsure, include).
                let text = r.pattern.as_str();
                // `f*.delete_file` may name `files.delete_file`: a glob counts when its
                // literal start could begin `server.`.
                let literal = text.split(['*', '?', '[', '{']).next().unwrap_or("");
                text.starts_with(&probe)
                    || !text.contains('.')
                    || (literal.len() < text.len() && probe.starts_with(literal))
            })
            .flat_map(|r| {
                r.paths.iter().flat_map(move |s| {
                    s.deny.iter().map(move |g| crate::carve::DeniedPath {
                        rule: format!("{}: paths.{}.deny", r.label, s.arg),
                        glob: g.clone(),
                    })
                })
            })
            .collect()
    }

    pub fn forget_idle_clients(&self) {
        for r in &self.rules {
            if let Some(l) = &r.rate {
                l.forget_idle();
            }
        }
    }
}

/// Evaluates a rule's CEL condition; anything but `true` refuses (fail closed).
fn check_when(
    text: &str,
    program: &cel::Program,
    args: &Value,
    tool: &str,
    client: &str,
    rule: &str,
) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal {
        reason: Reason::When,
        rule: rule.to_string(),
        message,
        retry_after: None,
    };
    let mut ctx = cel::Context::default();
    let value = cel::to_value(args)
        .map_err(|e| refuse(format!("the arguments cannot be given to `when`: {e}")))?;
    ctx.add_variable_from_value("args", value);
    ctx.add_variable_from_value("tool", tool.to_string());
    ctx.add_variable_from_value("client", client.to_string());
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(true)) => Ok(()),
        Ok(cel::Value::Bool(false)) => Err(refuse(format!("the condition `{text}` is false"))),
        Ok(other) => Err(refuse(format!(
            "the condition `{text}` gave {:?}, not true or false",
            other.type_of()
        ))),
        Err(e) => Err(refuse(format!(
            "the condition `{text}` cannot be evaluated: {e}"
        ))),
    }
}

/// Normalises a path argument (a string, or an array of strings) in place and checks it.
fn check_path_value(slot: &mut Value, set: &PathSet, rule: &str) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal {
        reason: Reason::Path,
        rule: rule.to_string(),
        message,
        retry_after: None,
    };
    match slot {
        Value::String(s) => {
            let normal = normalise(s).map_err(|e| refuse(format!("argument `{}` {e}", set.arg)))?;
            if let Some(g) = set.deny.iter().find(|g| g.matches(&normal)) {
                return Err(refuse(format!(
                    "argument `{}` resolves to {normal}, which is under a denied path ({})",
                    set.arg,
                    g.text()
                )));
            }
            if !set.allow.is_empty() && !set.allow.iter().any(|g| g.matches(&normal)) {
                let allowed: Vec<&str> = set.allow.iter().map(PathGlob::text).collect();
                return Err(refuse(format!(
                    "argument `{}` resolves to {normal}, which is outside the allowed paths ({})",
                    set.arg,
                    allowed.join(", ")
                )));
            }
            *s = normal;
            Ok(())
        }
        Value::Array(items) => items
            .iter_mut()
            .try_for_each(|i| check_path_value(i, set, rule)),
        Value::Null => Ok(()),
        _ => Err(refuse(format!(
            "argument `{}` is a path rule's argument and must be a string or a list of strings",
            set.arg
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn policy(t: &str) -> Policy {
        Policy::compile(&Config::parse(t, "g.toml", Path::new("/")).unwrap()).unwrap()
    }

    const EXAMPLE: &str = r#"
[[rules]]
tool = "mail.send_email"
args = { properties = { to = { type = "string", pattern = "@company\\.com$" } }, required = ["to"] }
rate = "2/minute"

[[rules]]
tool = "files.*"
paths = { path = { deny = ["/system/**"] } }

[[rules]]
tool = "files.format_disk"
deny = true
"#;

    #[test]
    fn allowlist_hides_unlisted_and_denied_tools() {
        let p = policy(EXAMPLE);
        assert!(p.allows("mail.send_email").is_ok());
        assert!(p.allows("files.delete_file").is_ok());
        let r = p.allows("mail.read_inbox").unwrap_err();
        assert_eq!(r.reason, Reason::NotAllowed);
        assert!(r.to_string().contains("gateway.default"), "{r}");
        let r = p.allows("files.format_disk").unwrap_err();
        assert_eq!(r.reason, Reason::Denied);
        assert!(r.rule.starts_with("rules[2]"), "{r}");
        let open =
            policy("[gateway]\ndefault = \"allow\"\n[[rules]]\ntool = \"x.rm\"\ndeny = true\n");
        assert!(open.allows("anything.at_all").is_ok());
        assert_eq!(open.allows("x.rm").unwrap_err().reason, Reason::Denied);
    }

    #[test]
    fn resources_prompts_and_sampling_are_allowlisted_by_their_own_rules() {
        let p = policy(
            r#"
[[rules]]
tool = "feat.*"

[[rules]]
resource = "feat+file:///public/**"
paths = { uri = { deny = ["/public/private/**"] } }

[[rules]]
prompt = "feat.summarize"
paths = { path = { deny = ["/secret/**"] } }

[[rules]]
sampling = "feat"
deny = true
"#,
        );
        // A tool rule does not open the server's resources, prompts or requests.
        assert!(p.allows_kind(Kind::Tool, "feat.x").is_ok());
        let r = p
            .allows_kind(Kind::Resource, "feat+file:///secret/k")
            .unwrap_err();
        assert_eq!(r.reason, Reason::NotAllowed);
        assert!(p.allows_kind(Kind::Prompt, "feat.x").is_err());
        assert!(p.allows_kind(Kind::Elicitation, "feat").is_err());
        assert_eq!(
            p.allows_kind(Kind::Sampling, "feat").unwrap_err().reason,
            Reason::Denied
        );
        // Path rules hold for a resource's URI and a prompt's arguments.
        let ok = json!({"uri": "/public/readme.txt"});
        assert!(p
            .check_kind(
                Kind::Resource,
                "c",
                "feat+file:///public/readme.txt",
                None,
                &ok
            )
            .is_ok());
        let bad = json!({"uri": "/public/x/../private/k"});
        let r = p
            .check_kind(
                Kind::Resource,
                "c",
                "feat+file:///public/private/k",
                None,
                &bad,
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::Path);
        let r = p
            .check_kind(
                Kind::Prompt,
                "c",
                "feat.summarize",
                None,
                &json!({"path": "/public/../secret/keys"}),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::Path);
        assert!(r.rule.starts_with("rules[2] (prompt"), "{r}");
    }

    #[test]
    fn args_schema_refuses_other_domains_without_quoting_the_value() {
        let p = policy(EXAMPLE);
        let r = p
            .check(
                "c",
                "mail.send_email",
                None,
                &json!({"to": "boss@evil.example"}),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::Args);
        assert!(r.rule.starts_with("rules[0]"), "{r}");
        assert!(r.message.contains("/to"), "{r}");
        assert!(!r.to_string().contains("evil"), "{r}");
        let r = p
            .check("c", "mail.send_email", None, &json!({}))
            .unwrap_err();
        assert!(r.message.contains("required"), "{r}");
        assert!(p
            .check(
                "c",
                "mail.send_email",
                None,
                &json!({"to": "ann@company.com"})
            )
            .is_ok());
    }

    #[test]
    fn upstream_schema_is_checked_too() {
        let p = policy(EXAMPLE);
        let schema = compile_schema(&json!({"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string", "maxLength": 5}}})).unwrap();
        let r = p
            .check(
                "c",
                "mail.send_email",
                Some(&schema),
                &json!({"to": "a@company.com", "body": "far too long"}),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::Schema);
        assert!(r.message.contains("/body"), "{r}");
    }

    #[test]
    fn hostile_paths_are_refused_and_sane_ones_normalised() {
        let p = policy(EXAMPLE);
        for path in [
            "/system/x",
            "/system/../system/x",
            "//system/x",
            "/tmp/../system/x",
            "/tmp/%2e%2e/system/x",
            "/tmp/%252E%252E/system/x",
            "/system",
            "relative/x",
        ] {
            let r = p
                .check("c", "files.delete_file", None, &json!({"path": path}))
                .unwrap_err();
            assert_eq!(r.reason, Reason::Path, "{path}");
            assert!(r.rule.starts_with("rules[1]"), "{path}: {r}");
        }
        let r = p
            .check(
                "c",
                "files.delete_file",
                None,
                &json!({"path": ["/tmp/a", "/tmp/../system/b"]}),
            )
            .unwrap_err();
        assert!(r.message.contains("/system/b"), "{r}");
        let ok = p
            .check(
                "c",
                "files.delete_file",
                None,
                &json!({"path": "/tmp//a/./b"}),
            )
            .unwrap();
        assert_eq!(ok.arguments, json!({"path": "/tmp/a/b"}));
        let r = p
            .check("c", "files.delete_file", None, &json!({"path": 7}))
            .unwrap_err();
        assert_eq!(r.reason, Reason::Path);
    }

    #[test]
    fn when_conditions_across_fields() {
        let p = policy("[[rules]]\ntool = \"pay.send\"\nwhen = \"args.amount <= 100 || args.approved_by == 'cfo'\"\n");
        assert!(p
            .check("c", "pay.send", None, &json!({"amount": 50}))
            .is_ok());
        assert!(p
            .check(
                "c",
                "pay.send",
                None,
                &json!({"amount": 500, "approved_by": "cfo"})
            )
            .is_ok());
        let r = p
            .check(
                "c",
                "pay.send",
                None,
                &json!({"amount": 500, "approved_by": "intern"}),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::When);
        assert!(
            r.message.contains("is false") && r.rule.starts_with("rules[0]"),
            "{r}"
        );
        // A field that is missing cannot make the condition true: refused, not let through.
        let r = p.check("c", "pay.send", None, &json!({})).unwrap_err();
        assert_eq!(r.reason, Reason::When, "{r}");
        let e = Policy::compile(
            &Config::parse(
                "[[rules]]\ntool = \"a.b\"\nwhen = \"args.x >\"\n",
                "g.toml",
                Path::new("/"),
            )
            .unwrap(),
        )
        .err()
        .unwrap();
        assert_eq!(e.key, "rules[0].when");
    }

    #[test]
    fn allow_sets_refuse_everything_else() {
        let p =
            policy("[[rules]]\ntool = \"f.read\"\npaths = { p = { allow = [\"/data/**\"] } }\n");
        assert!(p
            .check("c", "f.read", None, &json!({"p": "/data/a"}))
            .is_ok());
        let r = p
            .check("c", "f.read", None, &json!({"p": "/data/../etc/passwd"}))
            .unwrap_err();
        assert!(
            r.message.contains("/etc/passwd") && r.message.contains("outside"),
            "{r}"
        );
    }

    #[test]
    fn rate_limit_counts_admitted_calls_only_and_says_when() {
        let p = policy(EXAMPLE);
        let ok = json!({"to": "a@company.com"});
        let bad = json!({"to": "a@evil.example"});
        assert!(p.check("c", "mail.send_email", None, &bad).is_err());
        assert!(p.check("c", "mail.send_email", None, &ok).is_ok());
        assert!(p.check("c", "mail.send_email", None, &ok).is_ok());
        let r = p.check("c", "mail.send_email", None, &ok).unwrap_err();
        assert_eq!(r.reason, Reason::Rate);
        let wait = r.retry_after.unwrap();
        assert!(
            wait > Duration::from_secs(20) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert!(r.to_string().contains("retry after"), "{r}");
        assert!(p.check("other", "mail.send_email", None, &ok).is_ok());
    }

    #[test]
    fn compile_errors_name_the_key() {
        let e = |t: &str| {
            Policy::compile(&Config::parse(t, "g.toml", Path::new("/")).unwrap())
                .err()
                .unwrap()
        };
        assert_eq!(
            e("[[rules]]\ntool = \"a.b\"\nrate = \"lots\"\n").key,
            "rules[0].rate"
        );
        assert_eq!(e("[[rules]]\ntool = \"a.[\"\n").key, "rules[0].tool");
        assert_eq!(
            e("[[rules]]\ntool = \"a.b\"\nargs = { type = 5 }\n").key,
            "rules[0].args"
        );
        assert_eq!(
            e("[[rules]]\ntool = \"a.b\"\npaths = { p = { deny = [\"rel/**\"] } }\n").key,
            "rules[0].paths.p.deny"
        );
        assert_eq!(
            e("[[rules]]\ntool = \"a.b\"\napprove = true\napprove_timeout = \"soon\"\n").key,
            "rules[0].approve_timeout"
        );
    }
}

#[cfg(test)]
mod readme {
    use super::*;
    use std::path::Path;

    /// The README's gateway.toml is a working configuration.
    #[test]
    fn readme_example_compiles() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("# gateway.toml\n")
            .expect("README has the example");
        let body = &readme[start..];
        let end = body.find("```").expect("the example's block ends");
        let cfg = Config::parse(&body[..end], "README.md", Path::new("/")).unwrap();
        let p = Policy::compile(&cfg).unwrap();
        assert!(p.allows("mail.send_email").is_ok());
        assert!(p.allows("mail.read_inbox").is_err());
        let r = p
            .check(
                "c",
                "files.delete_file",
                None,
                &serde_json::json!({"path": "/tmp/../system/x"}),
            )
            .unwrap_err();
        assert_eq!(r.reason, Reason::Path);
    }
}
