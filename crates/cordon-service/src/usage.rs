//! Each sandbox's CPU and memory over its whole life, sampled by the server (not by whoever
//! watches): every [`INTERVAL`] the sampler reads each running sandbox's cgroup counters (two
//! small files, found once from its init; no scan of `/proc`) into a bounded series per
//! sandbox. When the series is full, neighbouring points are merged (CPU averaged, memory's
//! peak kept) and the stride doubles, so the series always spans the sandbox's whole life in at
//! most [`CAPACITY`] points: memory per sandbox is fixed, however long it lives.
//!
//! Threat model: the counters are the kernel's, read from the host's cgroup files of the
//! sandbox (not from anything the sandbox writes); a sandbox cannot grow its series.

use std::time::Instant;

use serde::Serialize;

/// How often the sampler reads each sandbox's counters.
pub const INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
/// Points kept per sandbox.
pub const CAPACITY: usize = 512;

/// One point of a sandbox's use.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UsageSample {
    /// When (the point's first sample), in milliseconds since the epoch.
    pub t_ms: u64,
    /// CPU used over the point's span, of all its CPUs together, 0 to 100.
    pub cpu_pct: f64,
    /// Memory in use (the point's highest sample), in bytes.
    pub mem_bytes: u64,
}

/// `GET /v1/sandboxes/{id}/metrics/history`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageHistory {
    /// The span of one point, in milliseconds (doubles as the series is merged).
    pub interval_ms: u64,
    /// `cgroup` (the sandbox's cgroup counters) or `none` (this host gives the sandbox no
    /// cgroup to read: no series).
    pub source: String,
    /// The sandbox's memory limit, in bytes.
    pub mem_total: u64,
    /// Oldest first.
    pub samples: Vec<UsageSample>,
}

/// A running sandbox's use at the last sample: what the console's live table shows, for every
/// sandbox in one request (`GET /v1/usage`).
#[derive(Debug, Clone, Serialize)]
pub struct UsageNow {
    pub id: String,
    /// When it was sampled, in milliseconds since the epoch.
    pub t_ms: u64,
    /// CPU over the last interval, of all its CPUs together, 0 to 100.
    pub cpu_pct: f64,
    pub mem_bytes: u64,
    pub mem_total: u64,
    /// Its processes (its cgroup's count).
    pub processes: Option<u64>,
    pub processes_max: u64,
    /// Its scratch filesystems' use (absent where the sandbox has no filesystems of its own).
    pub disk_used: Option<u64>,
    pub disk_total: Option<u64>,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageList {
    /// The key's running sandboxes sampled so far (a sandbox whose host gives it no cgroup is
    /// not among them: ask its `/metrics`).
    pub sandboxes: Vec<UsageNow>,
}

/// The last sample's figures beyond the series.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Latest {
    pub(crate) t_ms: u64,
    pub(crate) cpu_pct: f64,
    pub(crate) mem_bytes: u64,
    pub(crate) processes: Option<u64>,
    pub(crate) disk: Option<(u64, u64)>,
}

/// A sandbox's series and what the next sample needs.
#[derive(Default)]
pub(crate) struct Series {
    /// Found at the first sample: `Some(None)` when the sandbox has no cgroup to read.
    probe: Option<Option<cordon_linux::cgroup::UsageProbe>>,
    last_cpu: Option<(Instant, u64)>,
    /// Raw samples per point.
    stride: u64,
    /// The point being filled: (samples, CPU sum, memory peak, first time).
    filling: Option<(u64, f64, u64, u64)>,
    samples: Vec<UsageSample>,
    pub(crate) latest: Option<Latest>,
}

impl Series {
    /// Reads the sandbox's counters once and adds the sample; `disk` is asked only when the
    /// sandbox has a cgroup (its scratch filesystems' use).
    pub(crate) fn sample(
        &mut self,
        init_pid: i32,
        cpus: f64,
        now_ms: u64,
        disk: impl FnOnce() -> Option<(u64, u64)>,
    ) {
        let probe = self
            .probe
            .get_or_insert_with(|| cordon_linux::cgroup::UsageProbe::of_init(init_pid));
        let Some(probe) = probe else {
            return;
        };
        let (cpu, mem) = probe.read();
        let now = Instant::now();
        let pct = match (cpu, self.last_cpu) {
            (Some(c), Some((t, before))) => {
                let wall = now.duration_since(t).as_nanos().max(1) as f64;
                (c.saturating_sub(before) as f64 / wall / cpus.max(1.0) * 100.0).clamp(0.0, 100.0)
            }
            _ => 0.0,
        };
        if let Some(c) = cpu {
            self.last_cpu = Some((now, c));
        } else if mem.is_none() {
            return; // the cgroup is gone: the sandbox ended
        }
        self.latest = Some(Latest {
            t_ms: now_ms,
            cpu_pct: pct,
            mem_bytes: mem.unwrap_or(0),
            processes: probe.processes(),
            disk: disk(),
        });
        self.push(now_ms, pct, mem.unwrap_or(0));
    }

    fn push(&mut self, t_ms: u64, cpu_pct: f64, mem: u64) {
        let stride = self.stride.max(1);
        let (n, sum, peak, first) = self.filling.unwrap_or((0, 0.0, 0, t_ms));
        let (n, sum, peak) = (n + 1, sum + cpu_pct, peak.max(mem));
        if n < stride {
            self.filling = Some((n, sum, peak, first));
            return;
        }
        self.filling = None;
        self.samples.push(UsageSample {
            t_ms: first,
            cpu_pct: sum / n as f64,
            mem_bytes: peak,
        });
        if self.samples.len() >= CAPACITY {
            self.samples = self
                .samples
                .chunks(2)
                .map(|p| UsageSample {
                    t_ms: p[0].t_ms,
                    cpu_pct: p.iter().map(|s| s.cpu_pct).sum::<f64>() / p.len() as f64,
                    mem_bytes: p.iter().map(|s| s.mem_bytes).max().unwrap_or(0),
                })
                .collect();
            self.stride = stride * 2;
        }
    }

    pub(crate) fn history(&self, mem_total: u64) -> UsageHistory {
        UsageHistory {
            interval_ms: INTERVAL.as_millis() as u64 * self.stride.max(1),
            source: match &self.probe {
                Some(None) => "none".into(),
                _ => "cgroup".into(),
            },
            mem_total,
            samples: self.samples.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_series_is_merged_so_that_it_still_spans_the_whole_life() {
        let mut s = Series::default();
        for i in 0..(CAPACITY as u64 * 3) {
            s.push(i * 2000, if i < 10 { 100.0 } else { 0.0 }, i);
        }
        let h = s.history(1);
        assert!(h.samples.len() < CAPACITY, "bounded: {}", h.samples.len());
        assert_eq!(
            h.samples[0].t_ms, 0,
            "the first point is still the sandbox's start"
        );
        assert!(
            h.samples[0].cpu_pct > 0.0,
            "the busy start is still visible"
        );
        assert!(
            h.interval_ms >= 4 * 2000,
            "the stride grew: {}",
            h.interval_ms
        );
        let last = h.samples.last().map(|x| x.mem_bytes).unwrap_or(0);
        assert!(
            last >= CAPACITY as u64 * 3 - h.interval_ms / 2000 - 1,
            "memory keeps its peak: {last}"
        );
    }
}
