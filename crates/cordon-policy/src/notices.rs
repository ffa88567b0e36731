//! What a person is told about a run beyond its own output — written once for every door
//! (`cordon run`'s `cordon:` lines, MCP's text results): why cordon failed, each limit that
//! ended the run or refused it something (with the limit's value when the door knows it, and
//! the flag that raises it), and each egress request the proxy refused (with the
//! `--allow-net` entry that would allow it). One line each.

use crate::network::{entry_to_allow, NETWORK_OFF};
use crate::units::{format_duration, format_size};
use crate::{LimitHit, Limits, Outcome};

/// The lines for `o`, in order: the error, the limits hit, the refused egress.
pub fn notices(o: &Outcome, limits: Option<&Limits>) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(err) = &o.error {
        lines.push(err.clone());
    }
    lines.extend(o.limits_hit.iter().map(|hit| limit_notice(*hit, o, limits)));
    for e in o.network.iter().filter(|e| e.verdict == "deny") {
        let mut line = if e.reason == NETWORK_OFF {
            format!("network is off: {}:{} was refused", e.host, e.port)
        } else {
            format!("egress refused: {}:{}: {}", e.host, e.port, e.reason)
        };
        if let Some(entry) = entry_to_allow(&e.host, e.port, &e.reason) {
            line.push_str(&format!("; allow it with --allow-net {entry}"));
        }
        lines.push(line);
    }
    lines
}

/// One limit hit, said for a person.
pub fn limit_notice(hit: LimitHit, o: &Outcome, limits: Option<&Limits>) -> String {
    let scratch = "a scratch filesystem (/tmp, /workspace or /dev/shm)";
    // "(512M)" where the door knows the value, nothing where it does not.
    let value = |v: Option<String>| v.map(|v| format!(" ({v})")).unwrap_or_default();
    match hit {
        LimitHit::WallTime => match limits {
            Some(l) => format!(
                "timed out after {} (raise --timeout)",
                format_duration(l.timeout)
            ),
            None => "the wall-clock limit was hit (raise --timeout)".into(),
        },
        LimitHit::Memory => format!(
            "out of memory: the memory limit{} was hit and a process was killed (raise --memory)",
            value(limits.map(|l| format_size(l.memory)))
        ),
        LimitHit::Pids if o.enforcement.cgroup == "none" => format!(
            "the process limit{} was reached: further forks and threads fail (raise --pids)",
            value(limits.map(|l| l.pids.to_string()))
        ),
        LimitHit::Pids => format!(
            "the process limit{} refused a fork or thread (raise --pids)",
            value(limits.map(|l| l.pids.to_string()))
        ),
        LimitHit::CpuTime => format!(
            "the CPU-time limit{} was hit (raise --cpu-time)",
            value(limits.and_then(|l| l.cpu_time).map(format_duration))
        ),
        LimitHit::Output => {
            let cut = match (o.stdout_truncated, o.stderr_truncated) {
                (true, true) => "stdout and stderr were",
                (false, true) => "stderr was",
                _ => "stdout was",
            };
            match limits {
                Some(l) => format!(
                    "output was cut: {cut} kept only up to {} (raise --output-limit)",
                    format_size(l.output_limit)
                ),
                None => format!(
                    "output was cut: {cut} kept only up to the output limit (raise --output-limit)"
                ),
            }
        }
        LimitHit::Disk => match limits {
            Some(l) => format!(
                "{scratch} filled up: {} each (raise --disk)",
                format_size(l.disk)
            ),
            None => format!("{scratch} filled up (raise --disk)"),
        },
        LimitHit::Files => match limits {
            Some(l) => format!(
                "{scratch} ran out of inodes: {} files and directories each (raise --disk)",
                l.scratch_inodes()
            ),
            None => format!("{scratch} ran out of inodes (raise --disk)"),
        },
    }
}
