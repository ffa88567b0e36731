//! Request and response bodies of the API (shared by every front end).

use std::collections::BTreeMap;

use cordon_policy::network::NetworkPolicy;
use cordon_policy::Enforcement;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A size (`"256M"`, or bytes) or a duration (`"30s"`, or seconds) as JSON.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Amount {
    Number(f64),
    Text(String),
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Built-in profile: `default` or `strict`.
    pub profile: Option<String>,
    /// Memory limit, e.g. `"512M"`.
    pub memory: Option<Amount>,
    pub cpus: Option<f64>,
    pub pids: Option<u32>,
    /// Size of /tmp and /workspace, e.g. `"256M"`.
    pub disk: Option<Amount>,
    /// Time to live, e.g. `"10m"` or seconds.
    pub ttl: Option<Amount>,
    /// Environment variables every command gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels, filterable on list.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Egress allowlist; none means no network.
    #[schema(value_type = Option<Object>)]
    pub network: Option<NetworkPolicy>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LimitsView {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: u32,
    pub disk_bytes: u64,
    pub output_limit_bytes: u64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SandboxInfo {
    pub id: String,
    /// `running`, `deleted`, `expired`, `reaped` or `failed`.
    pub state: String,
    pub profile: String,
    pub created_at: u64,
    pub expires_at: u64,
    pub metadata: BTreeMap<String, String>,
    #[schema(value_type = Object)]
    pub enforcement: Option<Enforcement>,
    pub limits: Option<LimitsView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_reason: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendTtl {
    /// New time to live from now, e.g. `"30m"`.
    pub ttl: Amount,
}

/// An argv array, or a shell string run with `/bin/sh -c`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Cmd {
    Argv(Vec<String>),
    Shell(String),
}

impl Cmd {
    pub fn argv(&self) -> Vec<String> {
        match self {
            Cmd::Argv(v) => v.clone(),
            Cmd::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        }
    }
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub cmd: Cmd,
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Text fed to the command's stdin.
    pub stdin: Option<String>,
    /// Wall-clock limit for this command, e.g. `"30s"`.
    pub timeout: Option<Amount>,
    /// Start and return at once with a `command_id`.
    #[serde(default)]
    pub background: bool,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    pub cmd: Cmd,
    pub profile: Option<String>,
    pub memory: Option<Amount>,
    pub cpus: Option<f64>,
    pub pids: Option<u32>,
    pub disk: Option<Amount>,
    pub timeout: Option<Amount>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub stdin: Option<String>,
    pub cwd: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub network: Option<NetworkPolicy>,
    /// A WebAssembly module or component (WASI), base64: run by the wasm runtime inside the
    /// one-shot sandbox, with `cmd` as its argv (`cmd[0]` names it).
    pub wasm: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CommandInfo {
    pub command_id: String,
    pub cmd: Vec<String>,
    pub running: bool,
    pub started_at_ms: u64,
    pub stdout: String,
    pub stderr: String,
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<cordon_policy::Outcome>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CommandList {
    pub commands: Vec<CommandInfo>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub close: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A number or a name (`TERM`, `SIGKILL`, `INT`, …).
    pub signal: Amount,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    pub path: String,
    #[serde(default = "yes")]
    pub parents: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    pub id: String,
}
