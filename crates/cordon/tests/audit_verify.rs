//! `cordon audit verify` on real logs: one written by `cordon serve` (its audit log is chained
//! too, keyed, with a head) and copies of a chained log with one record edited, one removed,
//! two swapped. The serve log is attacked in place, as whoever can write the log file but not
//! its key and head would: its first records deleted, the rest re-numbered and re-hashed,
//! records cut off the end.

mod common;

use std::process::Command;

use common::HostDir;
use serde_json::{json, Value};

fn verify(path: &std::path::Path) -> (i32, String) {
    let out = Command::new(common::cordon_bin())
        .args(["audit", "verify"])
        .arg(path)
        .output()
        .expect("run cordon audit verify");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn chained_log(n: usize) -> Vec<String> {
    let mut buf = Vec::new();
    let mut w = cordon_gateway::audit::ChainWriter::new(
        &mut buf,
        cordon_gateway::audit::ChainHead::default(),
    );
    for i in 0..n {
        let Value::Object(m) =
            json!({"event": "tools/call", "tool": format!("mail.t{i}"), "verdict": "allowed"})
        else {
            unreachable!()
        };
        w.append(m).expect("append");
    }
    String::from_utf8(buf)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn audit_verify_names_each_break() {
    let dir = HostDir::new("auditverify");
    let write = |name: &str, lines: &[String]| {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n") + "\n").expect("write log");
        p
    };
    let intact = chained_log(6);
    let (code, text) = verify(&write("intact.jsonl", &intact));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("intact, 6 records"), "{text}");

    let mut edited = intact.clone();
    edited[2] = edited[2].replace("\"allowed\"", "\"refused\"");
    let (code, text) = verify(&write("edited.jsonl", &edited));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("line 3: record 2 was altered"), "{text}");

    let mut removed = intact.clone();
    removed.remove(4);
    let (code, text) = verify(&write("removed.jsonl", &removed));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("record 4 was removed"), "{text}");

    let mut swapped = intact.clone();
    swapped.swap(1, 2);
    let (code, text) = verify(&write("swapped.jsonl", &swapped));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("reordered") && text.contains("record 2 stands where record 1 belongs"),
        "{text}"
    );

    let (code, text) = verify(&dir.join("missing.jsonl"));
    assert_eq!(code, 125, "{text}");
}

mod serve;

/// `cordon serve`'s own audit log is chained, across a restart of the server too.
#[test]
fn serve_audit_log_is_chained_across_restarts() {
    let dir = std::env::temp_dir().join(common::unique("auditserve"));
    for _ in 0..2 {
        // No keys: the second start would not print the first start's key again.
        let s = serve::Server::start_in(dir.clone(), &["--no-auth"]);
        let (code, body) = s.call("POST", "/v1/sandboxes", Some(json!({})));
        assert_eq!(code, 201, "{body}");
        let id = body["id"].as_str().expect("id").to_string();
        let (code, body) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
        assert!(code == 204 || code == 200, "{code} {body}");
        drop(s);
    }
    let log = dir.join("audit.jsonl");
    let (code, text) = verify(&log);
    assert_eq!(code, 0, "{text}");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .expect("read log")
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() >= 4, "{lines:?}");
    let mut cut = lines.clone();
    cut.remove(1);
    let p = dir.join("cut.jsonl");
    std::fs::write(&p, cut.join("\n")).expect("write");
    let out = Command::new(common::cordon_bin())
        .args(["audit", "verify"])
        .arg(&p)
        .arg("--key")
        .arg(dir.join("audit.jsonl.key"))
        .output()
        .expect("run cordon audit verify");
    let (code, text) = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    );
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("record 1 was removed"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Re-seals records from number 0 with plain hashes, as whoever lacks the key would after
/// deleting the first ones: a chain that holds by itself.
fn renumbered(lines: &[String]) -> Vec<String> {
    let mut head = cordon_gateway::audit::ChainHead::default();
    lines
        .iter()
        .map(|l| {
            let Ok(Value::Object(m)) = serde_json::from_str::<Value>(l) else {
                panic!("not a record: {l}")
            };
            head.seal(m)
        })
        .collect()
}

/// A log written by `cordon serve` (three sandboxes created and deleted), its key and head
/// beside it where serve keeps them: the data dir and the log's lines.
fn serve_log(tag: &str) -> (std::path::PathBuf, Vec<String>) {
    let dir = std::env::temp_dir().join(common::unique(tag));
    {
        let s = serve::Server::start_in(dir.clone(), &["--no-auth"]);
        for _ in 0..3 {
            let (code, body) = s.call("POST", "/v1/sandboxes", Some(json!({})));
            assert_eq!(code, 201, "{body}");
            let id = body["id"].as_str().expect("id").to_string();
            let (code, body) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
            assert!(code == 204 || code == 200, "{code} {body}");
        }
    }
    let lines: Vec<String> = std::fs::read_to_string(dir.join("audit.jsonl"))
        .expect("read log")
        .lines()
        .map(str::to_string)
        .collect();
    assert!(lines.len() >= 6, "{lines:?}");
    (dir, lines)
}

/// Replaces the log in place, as whoever can write it (but not its key and head) would.
fn put(dir: &std::path::Path, lines: &[String]) -> std::path::PathBuf {
    let log = dir.join("audit.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").expect("write");
    log
}

// Each attack below is one the chain alone let through; `verify` is given nothing but the
// log, as an operator would run it.

#[test]
fn serve_audit_log_with_its_first_records_deleted_is_broken() {
    let (dir, original) = serve_log("auditfirst");
    let (code, text) = verify(&put(&dir, &original[2..]));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("starts at record 2"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_audit_log_renumbered_and_rehashed_is_broken() {
    let (dir, original) = serve_log("auditrehash");
    let (code, text) = verify(&put(&dir, &renumbered(&original[2..])));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("line 1: record 0") && text.contains("without the key"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_audit_log_cut_at_its_end_is_broken_and_not_continued() {
    let (dir, original) = serve_log("auditcut");
    let (code, text) = verify(&put(&dir, &original[..original.len() - 2]));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("cut off the end"), "{text}");
    // Serve does not continue a cut log (fresh records would bury the cut).
    let out = Command::new(common::cordon_bin())
        .args([
            "serve",
            "--no-auth",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run cordon serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cut off or rewritten"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_audit_log_intact_verifies_against_its_key_and_head() {
    let (dir, original) = serve_log("auditintact");
    let (code, text) = verify(&put(&dir, &original));
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("audit.jsonl.key: ") && text.contains("head ") && !text.contains("unkeyed"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
