//! How a run ended — decided in one place. Every door (the one-shot supervisor, persistent
//! commands, code cells, MCP) gathers the facts it saw into [`EndFacts`] and asks [`classify`]
//! for the `status`, `exit_code`, `signal`, `error` and `limits_hit` of the Outcome, so the same
//! program is described the same way whichever door it came through.

use serde::{Deserialize, Serialize};

use crate::outcome::{exit, Status};

/// A limit that ended the run or refused the program something while it ran.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitHit {
    /// The memory limit: a process was killed by the OOM killer.
    Memory,
    /// The process limit refused a fork or thread.
    Pids,
    /// The CPU-time limit ended the run.
    CpuTime,
    /// The wall-clock limit (timeout) ended the run.
    WallTime,
    /// Output past the per-stream cap was dropped.
    Output,
    /// A scratch filesystem (`/tmp`, the workspace tmpfs, `/dev/shm`) ran out of space.
    Disk,
    /// A scratch filesystem ran out of inodes (files and directories).
    Files,
}

impl LimitHit {
    /// The name in the Outcome's JSON.
    pub fn name(self) -> &'static str {
        match self {
            LimitHit::Memory => "memory",
            LimitHit::Pids => "pids",
            LimitHit::CpuTime => "cpu_time",
            LimitHit::WallTime => "wall_time",
            LimitHit::Output => "output",
            LimitHit::Disk => "disk",
            LimitHit::Files => "files",
        }
    }
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the payload itself ended, as whoever reaped it saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessEnd {
    Exited(i32),
    Signaled(i32),
}

/// Why the supervisor ended the run itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The wall-clock limit passed.
    Timeout,
    /// The CPU-time limit (measured by the supervisor) passed.
    CpuTime,
    /// cordon (or the server) was told to stop by this signal.
    Interrupted(i32),
    /// Setting the sandbox up failed (see `EndFacts::setup_error`).
    Setup,
}

/// The payload's command could not be started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecFailure {
    pub errno: i32,
    /// The command, or the working directory when `cwd` is set.
    pub path: String,
    /// It was the working directory that could not be entered.
    pub cwd: bool,
}

/// Everything a door saw about one run's end. `Default` is "nothing seen".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndFacts {
    pub end: Option<ProcessEnd>,
    pub stopped: Option<Stopped>,
    /// What failed while setting up (a required layer missing, the proxy not starting, …).
    pub setup_error: Option<String>,
    pub exec_failure: Option<ExecFailure>,
    /// The sandbox went away under the command (persistent sandboxes), and why.
    pub sandbox_ended: Option<String>,
    /// OOM kills seen in the run's memory domain.
    pub oom_kills: u64,
    /// Forks or threads the process limit refused (cgroup `pids.events` `max`). Where no
    /// cgroup counts refusals (RLIMIT_NPROC leaves no trace), 1 when the sandbox's task count
    /// was seen at the limit.
    pub pids_refused: u64,
    pub output_truncated: bool,
    /// A scratch filesystem was found full (no blocks left).
    pub disk_full: bool,
    /// A scratch filesystem was found out of inodes.
    pub inodes_exhausted: bool,
}

/// The verdict on one run: the Outcome's ending fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: Option<String>,
    /// Sorted, no duplicates.
    pub limits_hit: Vec<LimitHit>,
}

// Signal numbers and the one errno the verdict depends on, as Linux defines them on every
// architecture cordon builds for (x86_64, aarch64, riscv64, …: the asm-generic numbering).
const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const ENOENT: i32 = 2;

/// The message and exit code (125, 126 or 127) for a command that could not be started.
pub fn exec_failure_message(errno: i32, path: &str, cwd: bool) -> (String, i32) {
    let e = std::io::Error::from_raw_os_error(errno);
    if cwd {
        (
            format!("--cwd {path}: {e} (the working directory must exist inside the sandbox)"),
            exit::CORDON_FAILED,
        )
    } else if errno == ENOENT && path.contains('/') {
        // A path is not looked up in PATH: it names a file, relative to the working directory.
        (
            format!("command not found: {path} (no such file in the sandbox)"),
            exit::NOT_FOUND,
        )
    } else if errno == ENOENT {
        (
            format!("command not found: {path} (looked in the sandbox's PATH)"),
            exit::NOT_FOUND,
        )
    } else {
        (format!("cannot execute {path}: {e}"), exit::NOT_EXECUTABLE)
    }
}

/// Decides how a run ended. The supervisor's own reason to stop it comes first (a run killed
/// at its timeout is a timeout whatever signal the kill showed), then a command that never
/// started, then the payload's own end; limits that refused something along the way are
/// listed whatever the status.
pub fn classify(f: &EndFacts) -> Ending {
    let oom = f.oom_kills > 0;
    let mut e = Ending {
        status: Status::Error,
        exit_code: None,
        signal: None,
        error: None,
        limits_hit: Vec::new(),
    };
    match (f.stopped, f.end) {
        (Some(Stopped::Timeout), _) => e.status = Status::Timeout,
        (Some(Stopped::CpuTime), _) => {
            e.status = Status::CpuTime;
            e.signal = Some(SIGKILL);
        }
        (Some(Stopped::Interrupted(sig)), _) => {
            e.error = Some(f.setup_error.clone().unwrap_or_else(|| {
                format!("cordon was interrupted by signal {sig}; the sandbox was killed")
            }));
            e.exit_code = Some(if sig > 0 {
                128 + sig
            } else {
                exit::CORDON_FAILED
            });
        }
        (Some(Stopped::Setup), _) => {
            e.error = Some(
                f.setup_error
                    .clone()
                    .unwrap_or_else(|| "setting up the sandbox failed".into()),
            );
            e.exit_code = Some(exit::CORDON_FAILED);
        }
        (None, _) if f.exec_failure.is_some() => {
            if let Some(x) = &f.exec_failure {
                let (message, code) = exec_failure_message(x.errno, &x.path, x.cwd);
                e.error = Some(message);
                e.exit_code = Some(code);
            }
        }
        (None, Some(ProcessEnd::Exited(code))) => {
            e.status = Status::Exited;
            e.exit_code = Some(code);
        }
        (None, Some(ProcessEnd::Signaled(s))) => {
            e.signal = Some(s);
            e.status = if oom && s == SIGKILL {
                Status::Oom
            } else if s == SIGXCPU {
                // RLIMIT_CPU's soft limit.
                Status::CpuTime
            } else {
                Status::Signaled
            };
        }
        (None, None) if oom => {
            // The OOM killer took the init (or the whole tree) before the payload's end could
            // be reported.
            e.status = Status::Oom;
            e.signal = Some(SIGKILL);
        }
        (None, None) => {
            e.exit_code = Some(exit::CORDON_FAILED);
            e.error = Some(match (&f.sandbox_ended, &f.setup_error) {
                (Some(why), _) => format!("the sandbox ended: {why}"),
                (None, Some(setup)) => setup.clone(),
                (None, None) => "the sandbox ended before reporting the payload's exit".into(),
            });
        }
    }

    let hits = &mut e.limits_hit;
    if oom || e.status == Status::Oom {
        hits.push(LimitHit::Memory);
    }
    if f.pids_refused > 0 {
        hits.push(LimitHit::Pids);
    }
    if e.status == Status::CpuTime {
        hits.push(LimitHit::CpuTime);
    }
    if e.status == Status::Timeout {
        hits.push(LimitHit::WallTime);
    }
    if f.output_truncated {
        hits.push(LimitHit::Output);
    }
    if f.disk_full {
        hits.push(LimitHit::Disk);
    }
    if f.inodes_exhausted {
        hits.push(LimitHit::Files);
    }
    hits.sort();
    hits.dedup();
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use LimitHit::*;

    fn exited(code: i32) -> EndFacts {
        EndFacts {
            end: Some(ProcessEnd::Exited(code)),
            ..EndFacts::default()
        }
    }

    fn signaled(sig: i32) -> EndFacts {
        EndFacts {
            end: Some(ProcessEnd::Signaled(sig)),
            ..EndFacts::default()
        }
    }

    struct Row {
        name: &'static str,
        facts: EndFacts,
        status: Status,
        exit_code: Option<i32>,
        signal: Option<i32>,
        error_contains: Option<&'static str>,
        limits: &'static [LimitHit],
    }

    /// A row whose run ends as an error with no signal and no limit hit.
    fn error_row(
        name: &'static str,
        facts: EndFacts,
        exit_code: i32,
        error_contains: &'static str,
    ) -> Row {
        Row {
            name,
            facts,
            status: Status::Error,
            exit_code: Some(exit_code),
            signal: None,
            error_contains: Some(error_contains),
            limits: &[],
        }
    }

    fn table() -> Vec<Row> {
        vec![
            Row {
                name: "clean exit",
                facts: exited(0),
                status: Status::Exited,
                exit_code: Some(0),
                signal: None,
                error_contains: None,
                limits: &[],
            },
            Row {
                name: "exit 3",
                facts: exited(3),
                status: Status::Exited,
                exit_code: Some(3),
                signal: None,
                error_contains: None,
                limits: &[],
            },
            Row {
                name: "fork bomb contained, program went on to exit 0",
                facts: EndFacts {
                    pids_refused: 4711,
                    ..exited(0)
                },
                status: Status::Exited,
                exit_code: Some(0),
                signal: None,
                error_contains: None,
                limits: &[Pids],
            },
            Row {
                name: "OOM kill of the payload",
                facts: EndFacts {
                    oom_kills: 1,
                    ..signaled(9)
                },
                status: Status::Oom,
                exit_code: None,
                signal: Some(9),
                error_contains: None,
                limits: &[Memory],
            },
            Row {
                name: "SIGKILL from elsewhere is not an OOM",
                facts: signaled(9),
                status: Status::Signaled,
                exit_code: None,
                signal: Some(9),
                error_contains: None,
                limits: &[],
            },
            Row {
                name: "a child OOM-killed, the shell reports 137",
                facts: EndFacts {
                    oom_kills: 1,
                    ..exited(137)
                },
                status: Status::Exited,
                exit_code: Some(137),
                signal: None,
                error_contains: None,
                limits: &[Memory],
            },
            Row {
                name: "OOM took the tree before the payload's end was reported",
                facts: EndFacts {
                    oom_kills: 2,
                    ..EndFacts::default()
                },
                status: Status::Oom,
                exit_code: None,
                signal: Some(9),
                error_contains: None,
                limits: &[Memory],
            },
            Row {
                name: "RLIMIT_CPU soft limit",
                facts: signaled(24),
                status: Status::CpuTime,
                exit_code: None,
                signal: Some(24),
                error_contains: None,
                limits: &[CpuTime],
            },
            Row {
                name: "supervisor's CPU-time limit",
                facts: EndFacts {
                    stopped: Some(Stopped::CpuTime),
                    ..signaled(9)
                },
                status: Status::CpuTime,
                exit_code: None,
                signal: Some(9),
                error_contains: None,
                limits: &[CpuTime],
            },
            Row {
                name: "timeout wins over the kill's signal",
                facts: EndFacts {
                    stopped: Some(Stopped::Timeout),
                    ..signaled(9)
                },
                status: Status::Timeout,
                exit_code: None,
                signal: None,
                error_contains: None,
                limits: &[WallTime],
            },
            Row {
                name: "fork bomb that ran into the timeout",
                facts: EndFacts {
                    stopped: Some(Stopped::Timeout),
                    pids_refused: 10,
                    ..EndFacts::default()
                },
                status: Status::Timeout,
                exit_code: None,
                signal: None,
                error_contains: None,
                limits: &[Pids, WallTime],
            },
            error_row(
                "interrupted by SIGTERM",
                EndFacts {
                    stopped: Some(Stopped::Interrupted(15)),
                    ..EndFacts::default()
                },
                143,
                "interrupted by signal 15",
            ),
            error_row(
                "setup failure",
                EndFacts {
                    stopped: Some(Stopped::Setup),
                    setup_error: Some("Landlock was required but is not enforced".into()),
                    ..EndFacts::default()
                },
                125,
                "Landlock was required",
            ),
            error_row(
                "setup failure reported by the init, no stop",
                EndFacts {
                    setup_error: Some("mounting /proc: EPERM".into()),
                    ..EndFacts::default()
                },
                125,
                "mounting /proc",
            ),
            error_row(
                "command not found",
                EndFacts {
                    exec_failure: Some(ExecFailure {
                        errno: ENOENT,
                        path: "nope".into(),
                        cwd: false,
                    }),
                    ..exited(127)
                },
                127,
                "command not found: nope",
            ),
            error_row(
                "not executable",
                EndFacts {
                    exec_failure: Some(ExecFailure {
                        errno: 13,
                        path: "/tmp/x".into(),
                        cwd: false,
                    }),
                    ..exited(126)
                },
                126,
                "cannot execute /tmp/x",
            ),
            error_row(
                "bad working directory",
                EndFacts {
                    exec_failure: Some(ExecFailure {
                        errno: ENOENT,
                        path: "/nowhere".into(),
                        cwd: true,
                    }),
                    ..EndFacts::default()
                },
                125,
                "--cwd /nowhere",
            ),
            error_row(
                "the sandbox went away under a command",
                EndFacts {
                    sandbox_ended: Some("it was deleted".into()),
                    ..EndFacts::default()
                },
                125,
                "the sandbox ended: it was deleted",
            ),
            error_row(
                "nothing reported at all",
                EndFacts::default(),
                125,
                "before reporting",
            ),
            Row {
                name: "output cut, disk and inodes full, program exited 1",
                facts: EndFacts {
                    output_truncated: true,
                    disk_full: true,
                    inodes_exhausted: true,
                    ..exited(1)
                },
                status: Status::Exited,
                exit_code: Some(1),
                signal: None,
                error_contains: None,
                limits: &[Output, Disk, Files],
            },
            Row {
                name: "everything at once stays sorted and unique",
                facts: EndFacts {
                    stopped: Some(Stopped::Timeout),
                    oom_kills: 3,
                    pids_refused: 1,
                    output_truncated: true,
                    disk_full: true,
                    inodes_exhausted: true,
                    ..signaled(9)
                },
                status: Status::Timeout,
                exit_code: None,
                signal: None,
                error_contains: None,
                limits: &[Memory, Pids, WallTime, Output, Disk, Files],
            },
        ]
    }

    #[test]
    fn classification_table() {
        for row in table() {
            let e = classify(&row.facts);
            assert_eq!(e.status, row.status, "{}: status", row.name);
            assert_eq!(e.exit_code, row.exit_code, "{}: exit_code", row.name);
            assert_eq!(e.signal, row.signal, "{}: signal", row.name);
            match row.error_contains {
                Some(want) => {
                    let got = e.error.as_deref().unwrap_or("");
                    assert!(got.contains(want), "{}: error {got:?}", row.name);
                }
                None => assert_eq!(e.error, None, "{}: error", row.name),
            }
            assert_eq!(e.limits_hit, row.limits, "{}: limits_hit", row.name);
        }
    }

    #[test]
    fn limit_names_are_the_json_strings() {
        for hit in [Memory, Pids, CpuTime, WallTime, Output, Disk, Files] {
            let json = serde_json::to_value(hit).unwrap();
            assert_eq!(json, hit.name());
            let back: LimitHit = serde_json::from_value(json).unwrap();
            assert_eq!(back, hit);
        }
    }
}
