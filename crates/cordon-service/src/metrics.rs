//! Prometheus metrics, written by hand: a handful of counters, gauges and one histogram do
//! not justify a metrics framework.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const BUCKETS_MS: [f64; 12] = [
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0, 30000.0,
];

#[derive(Default)]
pub struct Metrics {
    pub sandboxes_created: AtomicU64,
    pub sandboxes_deleted: AtomicU64,
    pub sandboxes_expired: AtomicU64,
    pub execs: AtomicU64,
    pub file_ops: AtomicU64,
    denials: Mutex<BTreeMap<String, u64>>,
    exec_latency: Mutex<([u64; 12], u64, f64)>,
}

impl Metrics {
    pub fn deny(&self, reason: &str) {
        if let Ok(mut d) = self.denials.lock() {
            *d.entry(reason.to_string()).or_default() += 1;
        }
    }

    pub fn observe_exec(&self, ms: f64) {
        self.execs.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.exec_latency.lock() {
            for (i, b) in BUCKETS_MS.iter().enumerate() {
                if ms <= *b {
                    h.0[i] += 1;
                }
            }
            h.1 += 1;
            h.2 += ms / 1000.0;
        }
    }

    pub fn render(&self, by_state: &BTreeMap<String, u64>) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP cordon_sandboxes Sandboxes by state.\n# TYPE cordon_sandboxes gauge\n",
        );
        for (state, n) in by_state {
            out.push_str(&format!("cordon_sandboxes{{state=\"{state}\"}} {n}\n"));
        }
        for (name, help, v) in [
            (
                "cordon_sandboxes_created_total",
                "Sandboxes created.",
                &self.sandboxes_created,
            ),
            (
                "cordon_sandboxes_deleted_total",
                "Sandboxes deleted by request.",
                &self.sandboxes_deleted,
            ),
            (
                "cordon_sandboxes_expired_total",
                "Sandboxes reaped at the end of their TTL.",
                &self.sandboxes_expired,
            ),
            (
                "cordon_file_operations_total",
                "File API operations.",
                &self.file_ops,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}\n",
                v.load(Ordering::Relaxed)
            ));
        }
        out.push_str("# HELP cordon_denials_total Requests refused, by reason.\n# TYPE cordon_denials_total counter\n");
        if let Ok(d) = self.denials.lock() {
            for (reason, n) in d.iter() {
                out.push_str(&format!(
                    "cordon_denials_total{{reason=\"{reason}\"}} {n}\n"
                ));
            }
        }
        out.push_str("# HELP cordon_exec_duration_seconds Wall time of commands run in sandboxes.\n# TYPE cordon_exec_duration_seconds histogram\n");
        if let Ok(h) = self.exec_latency.lock() {
            for (i, b) in BUCKETS_MS.iter().enumerate() {
                out.push_str(&format!(
                    "cordon_exec_duration_seconds_bucket{{le=\"{}\"}} {}\n",
                    b / 1000.0,
                    h.0[i]
                ));
            }
            out.push_str(&format!(
                "cordon_exec_duration_seconds_bucket{{le=\"+Inf\"}} {}\n",
                h.1
            ));
            out.push_str(&format!(
                "cordon_exec_duration_seconds_sum {}\ncordon_exec_duration_seconds_count {}\n",
                h.2, h.1
            ));
        }
        out
    }
}
