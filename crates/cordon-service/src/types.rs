//! Request and response bodies of the service (shared by every front end), and the grammar of
//! the sizes, durations and signals they carry. No wire protocol here: the native door's
//! OpenAPI document (`cordon-server`'s `native/schema.rs`) states the same grammar (the
//! patterns below) that the service enforces, so a request the document calls valid is one
//! the service can parse, and the other way round.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_policy::network::NetworkPolicy;
use cordon_policy::units::{parse_duration, parse_size};
use cordon_policy::{Enforcement, NetworkEvent, Outcome};
use serde::{Deserialize, Serialize};

use crate::error::ServiceError;

/// A size (`"256M"`, or bytes), a duration (`"30s"`, or seconds) or a signal (`"TERM"`, or its
/// number) as JSON. Which one a field holds is in its name and in the doors' documents.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Amount {
    Number(f64),
    Text(String),
}

/// Sizes as text: a number (digits, optionally a fraction) and an optional unit: `B`, or `K`,
/// `M`, `G`, `T` with an optional `B` or `iB` (any case; all powers of 1024).
pub const SIZE_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?([bB]|[kKmMgGtT]([iI]?[bB])?)?$";
/// Durations as text: a number more than zero and a unit (`ms`, `s`, `sec`, `m`, `min`, `h`).
pub const DURATION_PATTERN: &str =
    r"^([0-9]*[1-9][0-9]*(\.[0-9]+)?|0+\.[0-9]*[1-9][0-9]*)(ms|s|sec|m|min|h)$";
/// Signal names the API takes (with or without `SIG`, any case).
pub const SIGNAL_NAMES: [(&str, i32); 9] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
];
/// Exclusive upper bound of a duration given as a number of seconds.
pub const MAX_SECONDS: f64 = 1e9;

/// Splits `[0-9]+(\.[0-9]+)?` off the front of `t`.
fn number_prefix(t: &str) -> Option<(&str, &str)> {
    let int = t.bytes().take_while(u8::is_ascii_digit).count();
    if int == 0 {
        return None;
    }
    let rest = &t[int..];
    let frac = match rest.strip_prefix('.') {
        Some(r) => {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return None;
            }
            1 + n
        }
        None => 0,
    };
    Some(t.split_at(int + frac))
}

/// True when `t` matches [`SIZE_PATTERN`].
pub fn is_size_text(t: &str) -> bool {
    let Some((_, unit)) = number_prefix(t) else {
        return false;
    };
    let u = unit.to_ascii_lowercase();
    match u.as_bytes() {
        [] | [b'b'] => true,
        [p, rest @ ..] if b"kmgt".contains(p) => matches!(rest, [] | [b'b'] | [b'i', b'b']),
        _ => false,
    }
}

/// True when `t` matches [`DURATION_PATTERN`].
pub fn is_duration_text(t: &str) -> bool {
    let Some((num, unit)) = number_prefix(t) else {
        return false;
    };
    num.bytes().any(|b| (b'1'..=b'9').contains(&b))
        && matches!(unit, "ms" | "s" | "sec" | "m" | "min" | "h")
}

/// The signal `t` names (see [`SIGNAL_NAMES`]), or a number 1-64 without leading zeros.
pub fn signal_from_text(t: &str) -> Option<i32> {
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i32>()
            .ok()
            .filter(|n| (1..=64).contains(n) && !t.starts_with('0'));
    }
    let upper = t.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNAL_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// The JSON Schema pattern equivalent of [`signal_from_text`] (the doors' documents state it).
pub fn signal_pattern() -> String {
    let ci = |w: &str| -> String {
        w.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    let names: Vec<String> = SIGNAL_NAMES.iter().map(|(n, _)| ci(n)).collect();
    format!(
        "^(({})?({})|[1-9]|[1-5][0-9]|6[0-4])$",
        ci("SIG"),
        names.join("|")
    )
}

impl Amount {
    /// A size in bytes.
    pub fn size(&self, field: &str) -> Result<u64, ServiceError> {
        match self {
            Amount::Number(n) if *n >= 0.0 => Ok(*n as u64),
            Amount::Number(_) => Err(ServiceError::bad_request(format!(
                "{field}: must not be negative"
            ))),
            Amount::Text(t) if is_size_text(t) => {
                parse_size(t).map_err(|e| ServiceError::bad_request(format!("{field}: {e}")))
            }
            Amount::Text(t) => Err(ServiceError::bad_request(format!(
                "{field}: '{t}' is not a size: give bytes as a number, or text such as 512K, 256M, 1G"
            ))),
        }
    }

    /// A duration more than zero.
    pub fn duration(&self, field: &str) -> Result<Duration, ServiceError> {
        match self {
            Amount::Number(n) if n.is_finite() && *n > 0.0 && *n < MAX_SECONDS => {
                Ok(Duration::from_secs_f64(*n))
            }
            Amount::Number(_) => Err(ServiceError::bad_request(format!(
                "{field}: must be a positive number of seconds"
            ))),
            Amount::Text(t) if is_duration_text(t) => {
                parse_duration(t).map_err(|e| ServiceError::bad_request(format!("{field}: {e}")))
            }
            Amount::Text(t) => Err(ServiceError::bad_request(format!(
                "{field}: '{t}' is not a duration: give seconds as a number, or text such as 500ms, 30s, 5m, 2h"
            ))),
        }
    }

    /// A signal number (1-64).
    pub fn signal(&self) -> Result<i32, ServiceError> {
        let n = match self {
            Amount::Number(n) if n.fract() == 0.0 && (1.0..=64.0).contains(n) => Some(*n as i32),
            Amount::Number(_) => None,
            Amount::Text(t) => signal_from_text(t),
        };
        n.ok_or_else(|| {
            ServiceError::bad_request(format!(
                "signal: give a number 1-64 or a name ({})",
                SIGNAL_NAMES.map(|(n, _)| n).join(", ")
            ))
        })
    }
}

/// Environment variable names the sandbox takes.
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// Checks an environment map: variable names ([`ENV_NAME_PATTERN`]), values without NUL.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    for (k, v) in env {
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(ServiceError::bad_request(format!(
                "env: '{k}' is not a variable name (letters, digits, _)"
            )));
        }
        if v.contains('\0') {
            return Err(ServiceError::bad_request(format!(
                "env: the value of {k} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

/// A stored secret given to a sandbox being made: the proxy puts its value into requests to
/// `hosts` only (in place of the placeholder the sandbox holds in `env`, and in `header`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSecret {
    /// The secret's name under the caller's key.
    pub name: String,
    /// The variable that holds the placeholder in the sandbox (default
    /// `CORDON_SECRET_<NAME>`, the name upper-cased with `_` for anything not a letter or
    /// digit).
    #[serde(default)]
    pub env: Option<String>,
    pub hosts: Vec<String>,
    /// A header the proxy adds, as `format` (with `{value}` the value), to requests to
    /// `hosts` that have none of that name.
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub format: Option<String>,
}

impl SandboxSecret {
    /// The variable the sandbox holds the placeholder in.
    pub fn var(&self) -> String {
        self.env.clone().unwrap_or_else(|| {
            let mut v = String::from("CORDON_SECRET_");
            v.extend(self.name.chars().map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            }));
            v
        })
    }
}

/// Metadata bounds, in characters.
pub const METADATA_MAX_KEY: usize = 128;
pub const METADATA_MAX_VALUE: usize = 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// A template of the server's (`cordon serve --templates`; `base` and
    /// `code-interpreter-v1` are built in): its image, profile and defaults apply to every
    /// field this request leaves out (env: variable by variable). Unknown names are a 404
    /// listing the known ones.
    pub template: Option<String>,
    /// Built-in profile: `default` or `strict`.
    pub profile: Option<String>,
    /// Memory limit (at least 8M), e.g. `"512M"`.
    pub memory: Option<Amount>,
    /// CPU quota in cores.
    pub cpus: Option<f64>,
    /// Processes and threads at once.
    pub pids: Option<u32>,
    /// Size of /tmp and /workspace (at least 1M), e.g. `"256M"`.
    pub disk: Option<Amount>,
    /// Bytes of each command's stdout and stderr kept, e.g. `"64K"`; the rest is dropped
    /// (`limits_hit: ["output"]`).
    pub output_limit: Option<Amount>,
    /// CPU time each command may use (at least 1s), e.g. `"5s"` (`status: "cpu_time"` when it
    /// runs out).
    pub cpu_time: Option<Amount>,
    /// Time to live, e.g. `"10m"` or seconds; at most the server's `--max-ttl`.
    pub ttl: Option<Amount>,
    /// Environment variables every command gets.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Free-form labels, filterable on list.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Egress allowlist; none means no network.
    pub network: Option<NetworkPolicy>,
    /// An image in the server's store (e.g. `python:3.12-slim`, or a manifest digest) whose
    /// root replaces the host's system directories; its `Env` and `WorkingDir` apply to every
    /// command. Unknown images are refused (400) unless the server pulls on demand.
    pub image: Option<String>,
    /// The caller's volumes to mount: `[{name, path, readonly}]` (see `/v1/volumes`).
    #[serde(default)]
    pub volumes: Vec<crate::volumes::VolumeMount>,
    /// A snapshot of the caller's (see `/v1/snapshots`) whose files the sandbox starts with;
    /// its profile, limits and volumes are this request's.
    pub from: Option<String>,
    /// When its time to live runs out, pause it (its processes frozen, its memory kept) instead
    /// of ending it; a resume brings it back with a new time to live. A paused sandbox is kept
    /// for at most the server's `--max-ttl`, then ended.
    #[serde(default)]
    pub pause_on_timeout: bool,
    /// With `pause_on_timeout`: `false` pauses it to disk instead — its files kept, its
    /// memory, processes and quota slot released; a resume starts it afresh with its files
    /// (E2B's `keep_memory: false`). Absent or `true`: frozen, memory kept.
    #[serde(default)]
    pub pause_keep_memory: Option<bool>,
    /// Host directories to bind, each checked against the server's bind roots (see
    /// [`crate::binds`]); the Docker door's `Binds`, not part of the HTTP API.
    #[serde(skip)]
    pub host_binds: Vec<crate::binds::HostBind>,
    /// The image's root mounted read-only (Docker's `ReadonlyRootfs`); only with an image.
    /// The Docker door's, not part of the HTTP API.
    #[serde(skip)]
    pub read_only_root: bool,
    /// Who may reach the sandbox's ports through the server, and with which `Host` header
    /// (see [`crate::ports`]). The E2B door's (`network.allowPublicTraffic`,
    /// `maskRequestHost`), not part of the native HTTP API: its sandboxes' ports need their
    /// traffic access token.
    #[serde(skip)]
    pub ports: crate::ports::PortsOptions,
    /// The uid and gid the sandbox's one user has inside (Docker's `User`, resolved by
    /// [`crate::Service::image_user`]); only with an image. Outside it is the same
    /// unprivileged host id whatever is asked. The Docker door's, not part of the HTTP API.
    #[serde(skip)]
    pub run_as: Option<(u32, u32)>,
    /// Stored secrets of the caller's key (see `/v1/secrets`) the sandbox is given as
    /// placeholders: the proxy puts each value into requests to its `hosts` only (which the
    /// network allowlist must also allow).
    #[serde(default)]
    pub secrets: Vec<SandboxSecret>,
    /// Learn mode: the sandbox runs exactly as without it, and records what its commands
    /// use — the network destinations (its egress proxy's decisions), the programs executed,
    /// each command's peaks — for its learned profile (`GET /v1/sandboxes/{id}/learned-profile`).
    #[serde(default)]
    pub learn: bool,
    /// The programs allowlist (`[exec] allow`): only these files may be executed (absolute
    /// paths in the sandbox, `*` and `?` allowed in the last component; a script's `#!`
    /// interpreter must be listed too). Needs Landlock. Absent: any file it can read.
    #[serde(default)]
    pub exec_allow: Option<Vec<String>>,
}

/// A learning sandbox's learned profile (`GET /v1/sandboxes/{id}/learned-profile`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LearnedProfile {
    pub sandbox_id: String,
    /// The sandbox has ended: this is what it used in all (else what it used so far).
    pub ended: bool,
    /// Commands that ended while it learned (their peaks are the learned limits).
    pub commands: u64,
    /// The profile, as the TOML file `cordon run --profile` takes: it `extends` the
    /// sandbox's built-in, each entry with a comment saying why.
    pub toml: String,
    /// The same profile as JSON (the TOML's tables and keys).
    pub profile: serde_json::Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct LimitsView {
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids: u32,
    pub disk_bytes: u64,
    pub output_limit_bytes: u64,
}

/// The states a sandbox passes through: `running` and `paused` while it lives, then how it
/// ended (kept in the registry as the same lower-case word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Running,
    Paused,
    Deleted,
    Expired,
    Reaped,
    Failed,
}

impl SandboxState {
    pub const ALL: [SandboxState; 6] = [
        SandboxState::Running,
        SandboxState::Paused,
        SandboxState::Deleted,
        SandboxState::Expired,
        SandboxState::Reaped,
        SandboxState::Failed,
    ];

    /// The word the API and the registry use.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Deleted => "deleted",
            SandboxState::Expired => "expired",
            SandboxState::Reaped => "reaped",
            SandboxState::Failed => "failed",
        }
    }

    /// The state a word names, if any.
    pub fn parse(word: &str) -> Option<SandboxState> {
        SandboxState::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// A sandbox that still lives: running or paused.
    pub fn is_live(self) -> bool {
        matches!(self, SandboxState::Running | SandboxState::Paused)
    }
}

impl std::fmt::Display for SandboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxInfo {
    pub id: String,
    pub state: SandboxState,
    pub profile: String,
    pub created_at: u64,
    /// `created_at` in milliseconds, for front ends that show or order by finer times.
    #[serde(skip)]
    pub created_ms: u64,
    pub expires_at: u64,
    pub metadata: BTreeMap<String, String>,
    /// What the host enforces for this sandbox; null once it has ended.
    pub enforcement: Option<Enforcement>,
    /// Its limits; null once it has ended.
    pub limits: Option<LimitsView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_reason: Option<String>,
    /// While paused: how its processes are held, `cgroup-freezer` (the kernel's freezer) or
    /// `sigstop` (no freezer cgroup this server may create, e.g. rootless); `disk` when it is
    /// paused to disk (files kept, no process left: a resume starts it afresh).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<String>,
    /// It is paused, not ended, when its time to live runs out (see `CreateSandbox`).
    #[serde(default)]
    pub pause_on_timeout: bool,
    /// Something a create's caller should know (e.g. that `code-interpreter-v1` runs the
    /// host's Python until its image is built); only in a create's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
}

/// `POST /v1/sandboxes/{id}/pause` (an empty body keeps memory).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    /// `false`: pause to disk — its files kept, its memory, processes and quota slot released;
    /// a resume starts it afresh with its files. Absent or `true`: every process frozen, memory
    /// kept (its files are copied to disk too, for a restart of the server).
    pub keep_memory: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendTtl {
    /// New time to live from now, e.g. `"30m"`; at most the server's `--max-ttl`.
    pub ttl: Amount,
}

/// An argv array, or a shell string run with `/bin/sh -c`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Cmd {
    Argv(Vec<String>),
    Shell(String),
}

/// Text that can become a C string: no NUL byte.
pub const NO_NUL_PATTERN: &str = r"^[^\x00]*$";

impl Cmd {
    pub fn argv(&self) -> Vec<String> {
        match self {
            Cmd::Argv(v) => v.clone(),
            Cmd::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        }
    }

    /// The argv, checked against the schema: a program to run, no NUL bytes.
    pub fn checked_argv(&self) -> Result<Vec<String>, ServiceError> {
        let empty = match self {
            Cmd::Argv(v) => v.first().is_none_or(|a| a.is_empty()),
            Cmd::Shell(s) => s.is_empty(),
        };
        if empty {
            return Err(ServiceError::bad_request(
                "cmd: give an argv array (its first element the program) or a shell string",
            ));
        }
        let argv = self.argv();
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(ServiceError::bad_request(
                "cmd: arguments cannot contain NUL bytes",
            ));
        }
        Ok(argv)
    }
}

/// Checks an optional working directory against [`CWD_PATTERN`].
pub fn check_cwd(cwd: Option<&str>) -> Result<(), ServiceError> {
    if cwd.is_some_and(|c| !c.starts_with('/') || c.contains('\0')) {
        return Err(ServiceError::bad_request(
            "cwd: give an absolute path inside the sandbox, e.g. /workspace/src",
        ));
    }
    Ok(())
}

/// A working directory: absolute, no NUL bytes.
pub const CWD_PATTERN: &str = r"^/[^\x00]*$";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub cmd: Cmd,
    /// Working directory inside the sandbox, absolute (default `/workspace`).
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
    /// Run the command on a terminal of this size (a pty of the sandbox's own): its stdout is
    /// the terminal's output (stderr stays empty), stdin is typed into the terminal, and a
    /// background command can be resized. The service layer's option (E2B's PTYs use it); not
    /// yet part of the HTTP API, whose SDKs and routes would follow with it.
    #[serde(skip)]
    pub pty: Option<PtySize>,
    /// A front end's name for the command (E2B's process tag); not part of the HTTP API.
    #[serde(skip)]
    pub tag: Option<String>,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    /// 1 to 1000.
    pub rows: u16,
    /// 1 to 1000.
    pub cols: u16,
}

impl PtySize {
    /// Checks the size is one a terminal can have.
    pub fn check(&self) -> Result<(), ServiceError> {
        if !(1..=1000).contains(&self.rows) || !(1..=1000).contains(&self.cols) {
            return Err(ServiceError::bad_request(format!(
                "pty: rows and cols must each be 1 to 1000 (got {}x{})",
                self.rows, self.cols
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
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
    /// Working directory inside the sandbox, absolute (default `/workspace`).
    pub cwd: Option<String>,
    pub network: Option<NetworkPolicy>,
    /// A WebAssembly module or component (WASI), base64: run by the wasm runtime inside the
    /// one-shot sandbox, with `cmd` as its argv (`cmd[0]` names it).
    pub wasm: Option<String>,
    /// An image in the server's store whose root replaces the host's system directories
    /// (its `Env`, `WorkingDir` and `Entrypoint` apply; `cmd` replaces its `Cmd`).
    pub image: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandInfo {
    pub command_id: String,
    pub cmd: Vec<String>,
    pub running: bool,
    pub started_at_ms: u64,
    pub stdout: String,
    pub stderr: String,
    /// How it ended; null while it runs.
    pub outcome: Option<Outcome>,
}

#[derive(Debug, Serialize)]
pub struct CommandList {
    pub commands: Vec<CommandInfo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    #[serde(default)]
    pub data: String,
    #[serde(default)]
    pub close: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A number or a name (`TERM`, `SIGKILL`, `INT`, …).
    pub signal: Amount,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    pub path: String,
    #[serde(default = "yes")]
    pub parents: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub from: String,
    pub to: String,
}

/// A sandbox's egress policy and every decision its proxy made so far.
#[derive(Debug, Serialize)]
pub struct NetworkInfo {
    pub policy: NetworkPolicy,
    pub events: Vec<NetworkEvent>,
}

/// The egress policy now in force.
#[derive(Debug, Serialize)]
pub struct NetworkSet {
    pub policy: NetworkPolicy,
}

/// Kinds of file system entries.
#[derive(Serialize)]
#[allow(dead_code)] // schema only: the engine's `Entry` is serialized
#[serde(rename_all = "lowercase")]
pub enum FileType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One file system entry (the engine's `fsview::Entry`, as it serializes).
#[derive(Serialize)]
#[allow(dead_code)] // schema only
pub struct FileEntry {
    /// Last component (`/` for the sandbox root).
    name: String,
    /// Absolute path inside the sandbox.
    path: String,
    r#type: FileType,
    /// Bytes (for a symlink: the length of its target).
    size: u64,
    /// Permission bits.
    mode: u32,
    /// Last modification, seconds since the Unix epoch.
    modified: u64,
    /// For a symlink, its target as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
}

#[derive(Serialize)]
#[allow(dead_code)] // schema only
pub struct FileList {
    entries: Vec<FileEntry>,
}

/// What an upload wrote.
#[derive(Debug, Serialize)]
pub struct Written {
    pub path: String,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct ContextList {
    pub contexts: Vec<crate::interpreter::ContextInfo>,
}

#[derive(Debug, Serialize)]
pub struct Health {
    /// Always `ok` while the server answers.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's matchers accept exactly what the document's patterns accept (checked with
    /// a real regex engine on a table of near misses).
    #[test]
    fn matchers_agree_with_the_documented_patterns() {
        let size = regex::Regex::new(SIZE_PATTERN).expect("size pattern");
        let duration = regex::Regex::new(DURATION_PATTERN).expect("duration pattern");
        let signal = regex::Regex::new(&signal_pattern()).expect("signal pattern");
        let inputs = [
            "", "0", "1", "12", "1.5", "1.", ".5", "1..2", "1.2.3", "256M", "256m", "256MB",
            "256MiB", "256mib", "256Mi", "1b", "1B", "1kb", "1KIB", "1t", "1TB", "1x", "1 M",
            " 1M", "1M ", "M", "-1", "+1", "1e3", "0s", "0.0s", "00s", "0.01s", "1s", "1sec",
            "1min", "5m", "2h", "500ms", "1.5h", "1d", "1S", "10 s", "s", ".5s", "0.s", "007s",
            "TERM", "term", "SIGTERM", "sigkill", "SigHup", "SIG", "KILL9", "USR1", "usr2", "CONT",
            "STOP", "WINCH", "9", "09", "64", "65", "0", "1", "100", "١", "９", "1M\n", "1\u{0}M",
        ];
        for t in inputs {
            assert_eq!(is_size_text(t), size.is_match(t), "size {t:?}");
            assert_eq!(is_duration_text(t), duration.is_match(t), "duration {t:?}");
            assert_eq!(
                signal_from_text(t).is_some(),
                signal.is_match(t),
                "signal {t:?}"
            );
        }
        assert_eq!(signal_from_text("sigterm"), Some(libc::SIGTERM));
        assert_eq!(signal_from_text("9"), Some(9));
        let d = Amount::Text("1.5h".into()).duration("t").expect("1.5h");
        assert_eq!(d, Duration::from_secs(5400));
        assert!(Amount::Text("0.0s".into()).duration("t").is_err());
        assert!(Amount::Number(0.0).duration("t").is_err());
        assert_eq!(Amount::Text("2K".into()).size("s").expect("2K"), 2048);
        assert!(Amount::Number(9.5).signal().is_err());
    }
}
