//! How Outcomes and code results are rendered as MCP content: text a person (or model)
//! reads, and the facts as structured content. No input is parsed here.

use cordon_policy::Outcome;
use rmcp::model::{CallToolResult, ContentBlock};

pub(super) fn text(s: impl Into<String>) -> ContentBlock {
    ContentBlock::text(s.into())
}

pub(super) fn tool_error(msg: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![text(msg)])
}

/// What a person (or model) needs of an Outcome, as text: how it ended, which limits were
/// hit (and how to raise them), what it cost, the network decisions, then the output.
pub(super) fn outcome_text(o: &Outcome) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let status = serde_json::to_value(o.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let _ = write!(s, "status: {status}");
    if let Some(c) = o.exit_code {
        let _ = write!(s, ", exit code {c}");
    }
    if let Some(sig) = o.signal {
        let _ = write!(s, ", killed by signal {sig}");
    }
    if let Some(e) = &o.error {
        let _ = write!(s, ", error: {e}");
    }
    s.push('\n');
    for l in &o.limits_hit {
        let line = cordon_policy::notices::limit_notice(*l, o, None);
        let _ = writeln!(s, "limit hit: {} — {line}", l.name());
    }
    let u = &o.usage;
    let _ = writeln!(
        s,
        "usage: wall {} ms, cpu {} ms user + {} ms system, peak memory {:.1} MiB, peak pids {}",
        u.wall_ms,
        u.cpu_user_ms,
        u.cpu_system_ms,
        u.peak_memory_bytes as f64 / (1 << 20) as f64,
        u.peak_pids
    );
    for ev in &o.network {
        let _ = writeln!(
            s,
            "network: {} {}:{} ({})",
            ev.verdict, ev.host, ev.port, ev.reason
        );
    }
    let cut = |t: bool| if t { "\n[truncated]" } else { "" };
    let _ = write!(
        s,
        "stdout:\n{}{}\nstderr:\n{}{}",
        o.stdout,
        cut(o.stdout_truncated),
        o.stderr,
        cut(o.stderr_truncated)
    );
    s
}

/// The Outcome as structured content: every fact, without the output streams (they are in
/// the text content; repeating them would double what the model reads).
pub(super) fn outcome_facts(o: &Outcome) -> Option<serde_json::Value> {
    let mut v = serde_json::to_value(o).ok()?;
    if let Some(m) = v.as_object_mut() {
        for k in ["stdout", "stderr", "stdout_b64", "stderr_b64"] {
            m.remove(k);
        }
    }
    Some(v)
}

/// A code cell's facts as structured content: everything the service reports about the
/// cell except what the content blocks already carry (output, results, images).
pub(super) fn code_facts(r: &cordon_service::interpreter::CodeResult) -> Option<serde_json::Value> {
    let mut v = serde_json::to_value(r).ok()?;
    if let Some(m) = v.as_object_mut() {
        for k in ["stdout", "stderr", "results"] {
            m.remove(k);
        }
    }
    Some(v)
}

/// An outcome as a tool's result: an error result unless the program exited 0, with the
/// outcome's facts as its structured content.
pub(super) fn outcome_result(o: &Outcome) -> CallToolResult {
    let ok = o.status == cordon_policy::Status::Exited && o.exit_code == Some(0);
    let content = vec![text(outcome_text(o))];
    let mut r = if ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    r.structured_content = outcome_facts(o);
    r
}
