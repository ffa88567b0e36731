//! The `Outcome`: what a run did and what it cost. Its JSON form is a public contract: fields
//! may be added, never renamed.

use serde::{Deserialize, Serialize};

use crate::ending::{Ending, LimitHit};
use crate::output::CapturedText;

/// Why the run ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Exited,
    Signaled,
    Timeout,
    Oom,
    CpuTime,
    Error,
}

/// What the run consumed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub wall_ms: u64,
    pub cpu_user_ms: u64,
    pub cpu_system_ms: u64,
    pub peak_memory_bytes: u64,
    pub peak_pids: u64,
}

/// What ran the program: a confined process tree, or a WebAssembly runtime.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Process,
    Wasm,
}

/// Which layers actually held for this run. Never claims more than the host enforced.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The backend that ran the program; absent where a door does not say (the process
    /// backend, as in every Outcome written before wasm existed).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub backend: Option<Backend>,
    pub user_ns: bool,
    pub pid_ns: bool,
    pub net_ns: bool,
    pub mount_ns: bool,
    pub ipc_ns: bool,
    pub uts_ns: bool,
    pub cgroup_ns: bool,
    pub seccomp: bool,
    /// Landlock ABI in force, 0 when Landlock was not enforced.
    pub landlock_abi: u32,
    /// `"v1"`, `"v2"` or `"none"`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^(v1|v2|none)$"))]
    pub cgroup: String,
    pub rlimits: bool,
    /// Host uid the sandbox runs as (never 0).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host_uid: Option<u32>,
    /// Human notes on anything weaker than the profile asked for.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub notes: Vec<String>,
}

/// One egress decision of the proxy.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkEvent {
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub host: String,
    pub port: u16,
    /// `"allow"` or `"deny"`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^(allow|deny)$"))]
    pub verdict: String,
    pub reason: String,
    /// Bytes relayed in both directions.
    pub bytes: u64,
}

/// The result of one run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<String>,
    pub stdout: String,
    pub stderr: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stdout_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stderr_b64: Option<String>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub usage: Usage,
    pub enforcement: Enforcement,
    pub network: Vec<NetworkEvent>,
    /// Every limit that ended the run or refused it something while it ran (see
    /// [`crate::ending::classify`]); empty when none did. Absent in Outcomes written before
    /// it existed, hence the default.
    #[serde(default)]
    pub limits_hit: Vec<LimitHit>,
    /// The image the sandbox's root came from; absent for a run on the host's system dirs.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub image: Option<ImageRef>,
    /// Learn mode only: the programs the run executed (paths in the sandbox, a script's
    /// interpreter included). Not part of the JSON contract.
    #[serde(skip)]
    pub executed: Vec<std::path::PathBuf>,
    /// Learn mode only: the host files and directories the run asked for that its sandbox did
    /// not grant (see [`FileAccess`]). Not part of the JSON contract.
    #[serde(skip)]
    pub files: Vec<FileAccess>,
}

/// How a learning run used a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FileUse {
    Read,
    Write,
    Exec,
}

/// One path a learning run asked for beyond what its sandbox granted: a read or an exec of a
/// path missing in the sandbox but present on the host (`path`: that file or directory), or a
/// write where the sandbox had no such directory or only a read-only one (`path`: the nearest
/// directory the host has). The sandbox's path and the host's are the same name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileAccess {
    pub path: std::path::PathBuf,
    pub is_dir: bool,
    pub how: FileUse,
    /// The program that asked (its `comm`: chosen by the program, so hostile text).
    pub program: String,
}

/// The image a run used: the reference it was found by and the manifest digest it resolved
/// to (`None` for a plain directory used as a root).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    pub reference: String,
    pub digest: Option<String>,
}

/// Exit codes of the command-line contract.
pub mod exit {
    pub const TIMEOUT: i32 = 124;
    pub const CORDON_FAILED: i32 = 125;
    pub const NOT_EXECUTABLE: i32 = 126;
    pub const NOT_FOUND: i32 = 127;
}

impl Outcome {
    /// An outcome for a run that never started.
    pub fn error(message: impl Into<String>, enforcement: Enforcement) -> Outcome {
        Outcome {
            status: Status::Error,
            exit_code: None,
            signal: None,
            error: Some(message.into()),
            stdout: String::new(),
            stderr: String::new(),
            stdout_b64: None,
            stderr_b64: None,
            stdout_truncated: false,
            stderr_truncated: false,
            usage: Usage::default(),
            enforcement,
            network: Vec::new(),
            limits_hit: Vec::new(),
            image: None,
            executed: Vec::new(),
            files: Vec::new(),
        }
    }

    /// An outcome from the classifier's verdict and what the run printed and cost.
    pub fn from_ending(
        ending: Ending,
        stdout: CapturedText,
        stderr: CapturedText,
        usage: Usage,
        enforcement: Enforcement,
        network: Vec<NetworkEvent>,
    ) -> Outcome {
        Outcome {
            status: ending.status,
            exit_code: ending.exit_code,
            signal: ending.signal,
            error: ending.error,
            stdout: stdout.text,
            stderr: stderr.text,
            stdout_b64: stdout.b64,
            stderr_b64: stderr.b64,
            stdout_truncated: stdout.truncated,
            stderr_truncated: stderr.truncated,
            usage,
            enforcement,
            network,
            limits_hit: ending.limits_hit,
            image: None,
            executed: Vec::new(),
            files: Vec::new(),
        }
    }

    /// The process exit code `cordon run` uses without `--json`.
    pub fn cli_exit_code(&self) -> i32 {
        match self.status {
            Status::Exited => self.exit_code.unwrap_or(exit::CORDON_FAILED),
            Status::Timeout => exit::TIMEOUT,
            Status::Signaled | Status::Oom | Status::CpuTime => {
                self.signal.map(|s| 128 + s).unwrap_or(128 + 9)
            }
            Status::Error => self.exit_code.unwrap_or(exit::CORDON_FAILED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_field_names_are_the_contract() {
        let o = Outcome::error("x", Enforcement::default());
        let v = serde_json::to_value(&o).unwrap();
        for key in [
            "status",
            "exit_code",
            "signal",
            "error",
            "stdout",
            "stderr",
            "stdout_truncated",
            "stderr_truncated",
            "usage",
            "enforcement",
            "network",
            "limits_hit",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["status"], "error");
        for key in [
            "wall_ms",
            "cpu_user_ms",
            "cpu_system_ms",
            "peak_memory_bytes",
            "peak_pids",
        ] {
            assert!(v["usage"].get(key).is_some(), "missing usage.{key}");
        }
        for key in [
            "user_ns",
            "pid_ns",
            "net_ns",
            "mount_ns",
            "seccomp",
            "landlock_abi",
            "cgroup",
            "rlimits",
        ] {
            assert!(
                v["enforcement"].get(key).is_some(),
                "missing enforcement.{key}"
            );
        }
    }

    #[test]
    fn older_json_without_limits_hit_still_parses() {
        let o = Outcome::error("x", Enforcement::default());
        let mut v = serde_json::to_value(&o).unwrap();
        v.as_object_mut().unwrap().remove("limits_hit");
        let back: Outcome = serde_json::from_value(v).unwrap();
        assert!(back.limits_hit.is_empty());
    }

    #[test]
    fn backend_is_named_only_when_known() {
        let mut o = Outcome::error("x", Enforcement::default());
        let v = serde_json::to_value(&o).unwrap();
        assert!(v["enforcement"].get("backend").is_none());
        o.enforcement.backend = Some(Backend::Wasm);
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["enforcement"]["backend"], "wasm");
        let back: Outcome = serde_json::from_value(v).unwrap();
        assert_eq!(back.enforcement.backend, Some(Backend::Wasm));
    }

    #[test]
    fn limits_hit_are_strings() {
        let mut o = Outcome::error("x", Enforcement::default());
        o.limits_hit = vec![LimitHit::Pids, LimitHit::WallTime];
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["limits_hit"], serde_json::json!(["pids", "wall_time"]));
    }

    #[test]
    fn exit_codes() {
        let mut o = Outcome::error("x", Enforcement::default());
        assert_eq!(o.cli_exit_code(), 125);
        o.status = Status::Signaled;
        o.signal = Some(9);
        assert_eq!(o.cli_exit_code(), 137);
        o.status = Status::Timeout;
        assert_eq!(o.cli_exit_code(), 124);
    }
}
