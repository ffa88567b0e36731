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
        clip(&o.stdout),
        cut(o.stdout_truncated),
        clip(&o.stderr),
        cut(o.stderr_truncated)
    );
    s
}

/// Most of one output stream a tool result carries: its head and its tail. A result is one
/// JSON-RPC message (one SSE event over HTTP), which clients cap — the official Python SDK
/// at 1 MiB, and a stream's bytes can grow six-fold escaped — and a model reads no more
/// than this usefully anyway.
const MAX_STREAM_TEXT: usize = 64 * 1024;

/// `t` whole if it fits [`MAX_STREAM_TEXT`], else its first and last halves of it around a
/// line that says how much was left out and how to get it.
fn clip(t: &str) -> std::borrow::Cow<'_, str> {
    if t.len() <= MAX_STREAM_TEXT {
        return t.into();
    }
    let half = MAX_STREAM_TEXT / 2;
    let mut head = half;
    while !t.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = t.len() - half;
    while !t.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[… {} bytes left out: a tool result carries {} KiB of a stream; write the output \
         to a file and read it with read_file …]\n{}",
        &t[..head],
        tail - head,
        MAX_STREAM_TEXT / 1024,
        &t[tail..]
    )
    .into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_over_the_cap_keeps_its_head_and_tail_and_says_what_was_left_out() {
        let small = "x".repeat(MAX_STREAM_TEXT);
        assert_eq!(clip(&small), small.as_str());
        let big = format!("HEAD{}é{}TAIL", "a".repeat(40 << 20), "b".repeat(1 << 20));
        let c = clip(&big);
        assert!(c.len() < MAX_STREAM_TEXT + 256, "{}", c.len());
        assert!(c.starts_with("HEAD") && c.ends_with("TAIL"));
        assert!(
            c.contains("bytes left out"),
            "{}",
            &c[MAX_STREAM_TEXT / 2..MAX_STREAM_TEXT / 2 + 200]
        );
        // A multi-byte character on the cut is never split.
        let wide = "é".repeat(MAX_STREAM_TEXT);
        assert!(clip(&wide).is_char_boundary(0));
    }
}
