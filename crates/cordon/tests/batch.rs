//! `POST /v1/batch` end to end: a real server, real one-shot sandboxes. Lines stream as items
//! finish, at most `concurrency` items run at once, a failing item does not stop the others,
//! and no item reaches another's files or the host's (checked from outside).
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod serve;
use serve::Server;

/// Posts a batch; returns each line with the time it arrived (since the request was sent).
fn batch(s: &Server, body: Value) -> Vec<(Duration, Value)> {
    let t0 = Instant::now();
    let resp = s
        .req("POST", "/v1/batch")
        .send_json(body)
        .unwrap_or_else(|e| panic!("batch: {e}"));
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_type(), "application/x-ndjson");
    let mut out = Vec::new();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.expect("line");
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        out.push((t0.elapsed(), v));
    }
    out
}

fn by_index(lines: &[(Duration, Value)], i: u64) -> &Value {
    &lines
        .iter()
        .find(|(_, v)| v["index"] == i)
        .unwrap_or_else(|| panic!("no line for item {i}: {lines:?}"))
        .1
}

#[test]
fn batch_lines_arrive_as_items_finish_each_with_its_index() {
    let s = Server::start();
    let lines = batch(
        &s,
        json!({"concurrency": 2, "items": [
            {"cmd": "sleep 1.5; echo slow"},
            {"cmd": "echo fast"},
        ]}),
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    let (first_at, first) = &lines[0];
    assert_eq!(
        first["index"], 1,
        "the fast item's line comes first: {lines:?}"
    );
    assert_eq!(first["outcome"]["stdout"], "fast\n");
    assert!(
        *first_at < Duration::from_millis(1400),
        "the fast item's line waited for the slow one: {first_at:?}"
    );
    assert_eq!(lines[1].1["index"], 0);
    assert_eq!(lines[1].1["outcome"]["stdout"], "slow\n");
    assert_eq!(lines[1].1["passed"], true);
}

#[test]
fn batch_runs_at_most_concurrency_items_at_once() {
    let s = Server::start();
    let items: Vec<Value> = (0..4).map(|_| json!({"cmd": "sleep 0.6"})).collect();
    let t = Instant::now();
    let lines = batch(&s, json!({"concurrency": 1, "items": items}));
    let serial = t.elapsed();
    assert_eq!(lines.len(), 4);
    assert!(
        serial >= Duration::from_millis(2400),
        "4 x 0.6 s one at a time took only {serial:?}"
    );
    let t = Instant::now();
    let lines = batch(&s, json!({"concurrency": 4, "items": items}));
    let parallel = t.elapsed();
    assert_eq!(lines.len(), 4);
    assert!(
        parallel < Duration::from_millis(2400),
        "4 x 0.6 s four at a time took {parallel:?}"
    );
    let (st, v) = s.call(
        "POST",
        "/v1/batch",
        Some(json!({"concurrency": 0, "items": []})),
    );
    assert_eq!(st, 400, "{v}");
}

#[test]
fn a_failing_item_does_not_stop_the_others() {
    let s = Server::start();
    let lines = batch(
        &s,
        json!({"items": [
            {"language": "cobol", "code": "x"},
            {"cmd": "exit 3"},
            {"language": "python", "code": "def f(x):\n    return x + 1\nassert f(1) == 3\n"},
            {"language": "python", "code": "def f(x):\n    return x + 1\nassert f(1) == 2\n"},
            {"cmd": "sleep 5", "timeout": "300ms"},
            {"cmd": "true", "fetch_files": ["/etc/shadow"]},
            {"language": "python", "code": "print(int(input()) * 2)",
             "tests": [{"stdin": "2", "expected_stdout": "4"}, {"stdin": "3", "expected_stdout": "7"}]},
        ]}),
    );
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(by_index(&lines, 0)["error"]["code"], "unknown_language");
    let l = by_index(&lines, 1);
    assert_eq!(
        (&l["passed"], &l["outcome"]["exit_code"]),
        (&json!(false), &json!(3))
    );
    let l = by_index(&lines, 2);
    assert_eq!(l["passed"], false);
    assert!(
        l["outcome"]["stderr"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{l}"
    );
    assert_eq!(by_index(&lines, 3)["passed"], true);
    assert_eq!(by_index(&lines, 4)["outcome"]["status"], "timeout");
    assert_eq!(by_index(&lines, 5)["error"]["code"], "outside_workspace");
    let l = by_index(&lines, 6);
    assert_eq!(l["passed"], false);
    assert_eq!(l["tests"][0]["passed"], true, "{l}");
    assert_eq!(l["tests"][1]["passed"], false, "{l}");
}

/// Hostile items: one leaves a secret in its workspace while another looks for it, and items
/// plant links out of their workspace for `fetch_files` to follow. Checked from outside: the
/// answers carry neither the other item's secret nor a host file, and no workspace is left.
#[test]
fn batch_items_reach_neither_each_others_files_nor_the_hosts() {
    let s = Server::start();
    let secret = format!("item-secret-{}", serve::unique());
    let host_file = std::env::temp_dir().join(format!("cordon-batch-host-{}", serve::unique()));
    std::fs::write(&host_file, "host-only").unwrap();
    let lines = batch(
        &s,
        json!({"concurrency": 2, "items": [
            {"cmd": format!("echo {secret} > mine.txt; sleep 1.5")},
            {"cmd": "sleep 0.5; ls -a /workspace; cat /workspace/mine.txt; \
                     find / -name mine.txt 2>/dev/null; cat ../runs/*/mine.txt 2>&1; true"},
            {"cmd": format!("ln -s /etc/shadow shadow; ln -s ../../../../../../{} up; \
                             ln -s {} abs; mkfifo fifo; true",
                            host_file.display(), host_file.display()),
             "fetch_files": ["shadow", "up", "abs", "fifo"]},
        ]}),
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    let looker = by_index(&lines, 1);
    let seen = format!(
        "{}{}",
        looker["outcome"]["stdout"], looker["outcome"]["stderr"]
    );
    assert!(
        !seen.contains(&secret),
        "an item read another item's file: {seen}"
    );
    let planter = by_index(&lines, 2);
    let files = planter.get("files").cloned().unwrap_or(json!({}));
    assert_eq!(
        files,
        json!({}),
        "fetch_files followed a link out: {planter}"
    );
    let runs = s.data_dir.join("runs");
    let left: Vec<_> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "workspaces left behind: {left:?}");
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "host-only");
    let _ = std::fs::remove_file(&host_file);
}
