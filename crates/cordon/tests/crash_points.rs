//! Crash points (a first slice): `kill -9` of `cordon serve` at random moments of a sandbox
//! create, an exec and a file upload, each driven over HTTP on loopback, then a restart on the
//! same data directory. Checked from outside after each point: the client got an answer or an
//! error, never a hang; no process of the sandbox is left, nor a cgroup of the killed server,
//! nor a mount under the data directory, nor an upload's temporary file; every sandbox the
//! restarted server lists answers with a state; and at the end the audit chain verifies.
//! Prints a table: points tried, recovered, leaks. The seed is printed (and taken from
//! `CORDON_CRASH_SEED` when set) so that a failing sequence can be replayed.

mod common;
mod serve;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// xorshift64: a small, seedable sequence of kill delays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What a client got: an HTTP status, or a transport error (the server died).
fn request(
    url: &str,
    key: &str,
    method: &str,
    body: Option<Value>,
    raw: Option<Vec<u8>>,
) -> String {
    let r = ureq::request(method, url)
        .set("Authorization", &format!("Bearer {key}"))
        .timeout(Duration::from_secs(30));
    let res = match (body, raw) {
        (Some(b), _) => r.send_json(b),
        (None, Some(bytes)) => r.send_bytes(&bytes),
        (None, None) => r.call(),
    };
    match res {
        Ok(r) => r.status().to_string(),
        Err(ureq::Error::Status(s, _)) => s.to_string(),
        Err(e) => format!("error: {}", e.kind()),
    }
}

/// Upload temporaries and other leftovers under `dir`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(t) = e.file_type() else { continue };
            if name.starts_with(".cordon-upload-") || name.ends_with(".tmp") {
                found.push(e.path());
            }
            if t.is_dir() {
                todo.push(e.path());
            }
        }
    }
    found
}

/// The sandbox ids (`vm-…`) an audit log names.
fn sandbox_ids(log: &Path) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ids = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("\"vm-") {
        let rest = &text[at + 1..];
        let id: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if id.len() > 3 {
            ids.insert(id);
        }
    }
    ids
}

/// Processes whose parent is `pid` (a server's sandbox helpers, `cordon __sandbox`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    let after = st.rsplit_once(')')?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn alive(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                st.rsplit_once(')')
                    .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
            })
        })
        .collect()
}

/// Mounts whose point lies under `dir` (in the test's mount namespace).
fn mounts_under(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&d)))
        .map(str::to_string)
        .collect()
}

#[test]
fn kill_9_mid_create_exec_and_upload_leaves_nothing_behind() {
    let seed = std::env::var("CORDON_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(1)
        });
    eprintln!("CORDON_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = std::env::temp_dir().join(unique("crash"));
    let mut key: Option<String> = None;
    let ops = ["create", "exec", "upload"];
    // At least 20 points each.
    let points = 21 * ops.len();
    let mut rows = Vec::new();
    let mut states = std::collections::BTreeMap::new();
    for i in 0..points {
        let op = ops[i % ops.len()];
        let mut s = serve::Server::start_in(dir.clone(), &[]);
        match &key {
            Some(k) => s.key = k.clone(),
            None => key = Some(s.key.clone()),
        }
        let pid = s.child.id();
        let marker = unique("crash");
        let sandbox = if op == "create" {
            None
        } else {
            let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
            assert_eq!(st, 201, "{v}");
            Some(v["id"].as_str().expect("id").to_string())
        };
        let (url, k) = (s.url.clone(), s.key.clone());
        let m = marker.clone();
        let client = std::thread::spawn(move || {
            let start = Instant::now();
            let got = match (op, sandbox) {
                ("create", _) => request(
                    &format!("{url}/v1/sandboxes"),
                    &k,
                    "POST",
                    Some(json!({"ttl": "5m", "metadata": {"marker": m}})),
                    None,
                ),
                ("exec", Some(id)) => request(
                    &format!("{url}/v1/sandboxes/{id}/exec"),
                    &k,
                    "POST",
                    Some(json!({"cmd": ["python3", "-c", "import time; time.sleep(0.4)", m]})),
                    None,
                ),
                (_, Some(id)) => request(
                    &format!("{url}/v1/sandboxes/{id}/files?path=big-{m}.bin"),
                    &k,
                    "PUT",
                    None,
                    Some(vec![7u8; 16 << 20]),
                ),
                _ => unreachable!(),
            };
            (got, start.elapsed())
        });
        let delay = rng.below(if op == "create" { 150 } else { 500 });
        std::thread::sleep(Duration::from_millis(delay));
        let helpers = children_of(pid);
        s.kill9();
        let (got, took) = client.join().expect("client thread");
        let mut leaks = Vec::new();
        if took > Duration::from_secs(20) {
            leaks.push(format!("client hung {took:?}"));
        }
        // The sandboxes die with their server.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10)
            && (!procs_with(&marker).is_empty()
                || !cgroups_of(pid).is_empty()
                || !alive(&helpers).is_empty())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !procs_with(&marker).is_empty() {
            leaks.push(format!("processes {:?}", procs_with(&marker)));
        }
        if !alive(&helpers).is_empty() {
            leaks.push(format!("orphaned helpers {:?}", alive(&helpers)));
        }
        if !cgroups_of(pid).is_empty() {
            leaks.push(format!("cgroups {:?}", cgroups_of(pid)));
        }
        // The next server on the data directory.
        let mut s2 = serve::Server::start_in(dir.clone(), &[]);
        s2.key = key.clone().expect("key");
        let (st, list) = s2.call("GET", "/v1/sandboxes", None);
        let mut recovered = st == 200 && list["sandboxes"].is_array();
        // Every sandbox the audit log names — the one a killed create was making too, if it
        // got that far — is a whole record with a state; none is left running after a restart
        // (its processes died with the server).
        for id in sandbox_ids(&dir.join("audit.jsonl")) {
            let (st, v) = s2.call("GET", &format!("/v1/sandboxes/{id}"), None);
            if let Some(state) = v["state"].as_str() {
                *states.entry(state.to_string()).or_insert(0) += 1;
            }
            if st != 200 || !v["state"].is_string() || v["state"] == "running" {
                recovered = false;
                leaks.push(format!("sandbox {id} half there: {st} {v}"));
            }
        }
        drop(s2);
        let m = mounts_under(&dir);
        if !m.is_empty() {
            leaks.push(format!("mounts {m:?}"));
        }
        let t = temp_files(&dir);
        if !t.is_empty() {
            leaks.push(format!("temp files {t:?}"));
        }
        rows.push((i, op, delay, got, recovered, leaks));
    }
    let out = std::process::Command::new(cordon_bin())
        .args(["audit", "verify"])
        .arg(dir.join("audit.jsonl"))
        .output()
        .expect("cordon audit verify");
    let audit_ok = out.status.success();
    eprintln!(
        "{:>5} {:>7} {:>8}  {:<28} {:>9}  leaks",
        "point", "op", "kill ms", "client got", "recovered"
    );
    for (i, op, delay, got, rec, leaks) in &rows {
        eprintln!(
            "{i:>5} {op:>7} {delay:>8}  {got:<28} {rec:>9}  {}",
            leaks.len()
        );
    }
    eprintln!("sandbox states seen after restarts: {states:?}");
    let recovered = rows.iter().filter(|r| r.4).count();
    let leaked: Vec<_> = rows.iter().filter(|r| !r.5.is_empty()).collect();
    eprintln!(
        "points tried: {}, recovered: {recovered}, leaks: {}, audit verify: {}",
        rows.len(),
        leaked.len(),
        if audit_ok { "ok" } else { "FAILED" }
    );
    assert!(
        audit_ok,
        "audit verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(recovered, rows.len(), "not every point recovered");
    assert!(
        leaked.is_empty(),
        "leaks: {:?}",
        leaked.iter().map(|r| (r.0, r.1, &r.5)).collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
