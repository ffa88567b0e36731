//! The four programs every door is tested with — the CLI, HTTP `exec`, MCP `run_command`, the
//! SDK — so that the same program is shown to get the same `status`, `limits_hit` and usage
//! whichever door it came through. Each is an argv (no shell needed) plus the limits it runs
//! under, in the CLI's spelling; other doors translate the limits into their own fields.

/// A test program and the limits that make it hit one.
pub struct Payload {
    pub name: &'static str,
    /// What runs in the sandbox: `python3 -c SCRIPT`.
    pub script: &'static str,
    pub memory: Option<&'static str>,
    pub pids: Option<u32>,
    pub timeout: Option<&'static str>,
    pub output_limit: Option<&'static str>,
}

impl Payload {
    pub fn argv(&self) -> Vec<String> {
        vec!["python3".into(), "-c".into(), self.script.into()]
    }

    /// The limits as `cordon run` flags.
    pub fn cli_flags(&self) -> Vec<String> {
        let mut f = Vec::new();
        if let Some(m) = self.memory {
            f.extend(["--memory".to_string(), m.to_string()]);
        }
        if let Some(p) = self.pids {
            f.extend(["--pids".to_string(), p.to_string()]);
        }
        if let Some(t) = self.timeout {
            f.extend(["--timeout".to_string(), t.to_string()]);
        }
        if let Some(o) = self.output_limit {
            f.extend(["--output-limit".to_string(), o.to_string()]);
        }
        f
    }
}

/// Allocates (and touches) 1 MiB at a time past `--memory 64M`. With a cgroup the OOM killer
/// ends it: `oom`, signal 9, `limits_hit` has `memory`. Without one, RLIMIT_DATA refuses the
/// allocation inside the process: Python raises MemoryError and exits 1 — a refusal no one
/// outside the process can see, so `limits_hit` stays empty there.
pub const OOM: Payload = Payload {
    name: "oom",
    script: r#"
chunks = []
while True:
    chunks.append(b"x" * (1 << 20))
"#,
    memory: Some("64M"),
    pids: None,
    timeout: Some("30s"),
    output_limit: None,
};

/// Forks children that wait until a fork is refused (EAGAIN) under `--pids 16`, keeps them a
/// moment longer (the program goes on after the refusal), prints how many it got and exits 0:
/// `exited` 0 with `limits_hit` `pids`. Its children outlive it: ending the run takes them.
pub const PIDS_BOMB: Payload = Payload {
    name: "pids bomb",
    script: r#"
import os, sys, time, errno
n = 0
while n < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        print("refused after", n, "errno", e.errno, flush=True)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
time.sleep(0.5)
print(n, flush=True)
"#,
    memory: None,
    pids: Some(16),
    timeout: Some("30s"),
    output_limit: None,
};

/// Spins on the CPU until `--timeout 2s` ends it: `timeout`, `limits_hit` `wall_time`, and the
/// CPU it burnt counted although it was killed.
pub const CPU_SPIN: Payload = Payload {
    name: "cpu spin",
    script: "while True:\n    pass\n",
    memory: None,
    pids: None,
    timeout: Some("2s"),
    output_limit: None,
};

/// Writes 1 MiB to stdout past `--output-limit 10K`, then exits 0: `exited` 0, stdout cut to
/// exactly 10 KiB, `stdout_truncated`, `limits_hit` `output`.
pub const OUTPUT_FLOOD: Payload = Payload {
    name: "output flood",
    script: r#"
import sys
sys.stdout.write("y" * (1 << 20))
sys.stdout.flush()
"#,
    memory: None,
    pids: None,
    timeout: Some("30s"),
    output_limit: Some("10K"),
};

pub const ALL: [&Payload; 4] = [&OOM, &PIDS_BOMB, &CPU_SPIN, &OUTPUT_FLOOD];
