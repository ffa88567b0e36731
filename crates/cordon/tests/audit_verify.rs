//! `cordon audit verify` on real logs: one written by `cordon serve` (its audit log is chained
//! too) and copies of a chained log with one record edited, one removed, two swapped.

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
    let (code, text) = verify(&p);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("record 1 was removed"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
