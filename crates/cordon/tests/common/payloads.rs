//! The four programs every door is tested with — the CLI, HTTP `exec`, MCP `run_command`, the
//! SDK — so that the same program is shown to get the same `status`, `limits_hit` and usage
//! whichever door it came through. Each is an argv (no shell needed) plus the limits it runs
//! under, in the CLI's spelling; other doors translate the limits into their own fields.
//!
//! The programs and limits live in `clients/payloads.json`, which the MCP and SDK suites
//! (Python) read too: all four doors run literally the same programs.

use std::sync::LazyLock;

use serde::Deserialize;

const JSON: &str = include_str!("../../../../clients/payloads.json");

/// A test program and the limits that make it hit one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub name: String,
    /// What runs in the sandbox: `python3 -c SCRIPT`.
    pub script: String,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub pids: Option<u32>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub output_limit: Option<String>,
}

impl Payload {
    pub fn argv(&self) -> Vec<String> {
        vec!["python3".into(), "-c".into(), self.script.clone()]
    }

    /// The limits as `cordon run` flags.
    pub fn cli_flags(&self) -> Vec<String> {
        let mut f = Vec::new();
        if let Some(m) = &self.memory {
            f.extend(["--memory".to_string(), m.clone()]);
        }
        if let Some(p) = self.pids {
            f.extend(["--pids".to_string(), p.to_string()]);
        }
        if let Some(t) = &self.timeout {
            f.extend(["--timeout".to_string(), t.clone()]);
        }
        if let Some(o) = &self.output_limit {
            f.extend(["--output-limit".to_string(), o.clone()]);
        }
        f
    }
}

/// Allocates (and touches) 1 MiB at a time past `--memory 64M`. With a cgroup the OOM killer
/// ends it: `oom`, signal 9, `limits_hit` has `memory`. Without one, RLIMIT_DATA refuses the
/// allocation inside the process: Python raises MemoryError and exits 1 — a refusal no one
/// outside the process can see, so `limits_hit` stays empty there.
pub static OOM: LazyLock<Payload> = LazyLock::new(|| load("oom"));

/// Forks children that wait until a fork is refused (EAGAIN) under `--pids 16`, keeps them a
/// moment longer (the program goes on after the refusal), prints how many it got and exits 0:
/// `exited` 0 with `limits_hit` `pids`. Its children outlive it: ending the run takes them.
pub static PIDS_BOMB: LazyLock<Payload> = LazyLock::new(|| load("pids_bomb"));

/// Spins on the CPU until `--timeout 2s` ends it: `timeout`, `limits_hit` `wall_time`, and the
/// CPU it burnt counted although it was killed.
pub static CPU_SPIN: LazyLock<Payload> = LazyLock::new(|| load("cpu_spin"));

/// Writes 1 MiB to stdout past `--output-limit 10K`, then exits 0: `exited` 0, stdout cut to
/// exactly 10 KiB, `stdout_truncated`, `limits_hit` `output`.
pub static OUTPUT_FLOOD: LazyLock<Payload> = LazyLock::new(|| load("output_flood"));

/// One payload of `clients/payloads.json`; a malformed file is the test suite's own bug.
fn load(key: &str) -> Payload {
    let all: serde_json::Value = serde_json::from_str(JSON).expect("clients/payloads.json is JSON");
    let one = all
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("no {key} in clients/payloads.json"));
    serde_json::from_value(one).unwrap_or_else(|e| panic!("{key} in clients/payloads.json: {e}"))
}

/// How [`CPU_SPIN`] must end through any door: stopped at its timeout, and the CPU it burnt
/// counted although it was killed — two seconds of spinning on a shared two-core machine,
/// well over a tenth of it ours.
pub fn assert_spin_ended_at_its_timeout(o: &super::Outcome) {
    assert_eq!(o.status(), "timeout", "{o}");
    assert_eq!(o.limits_hit(), ["wall_time"], "{o}");
    let cpu = o.usage("cpu_user_ms");
    assert!(cpu >= 200, "cpu_user_ms {cpu} for a 2 s spin:\n{o}");
    assert!(cpu <= o.usage("wall_ms") + 100, "{o}");
}
