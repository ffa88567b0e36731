//! The service keeps its contract: a private data directory, an atomic quota, JSON errors for
//! every request it cannot use, an OpenAPI document generated from the router, and a README
//! walk-through that runs as written. Real `cordon serve` on loopback, real HTTP clients.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

mod serve;
use serve::{unique, Server};

fn scratch(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "cordon-http-{tag}-{}-{}",
        std::process::id(),
        unique()
    ))
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// Every entry of the data directory, with its mode.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = std::fs::read_dir(dir)
        .expect("data dir")
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    v.sort();
    v
}

fn cordon_under_umask(umask: &str, args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("/bin/sh")
        .args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
        .arg(env!("CARGO_BIN_EXE_cordon"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("run cordon")
}

/// The registry (key hashes), its WAL and shared-memory files, the audit log and the lock are
/// 0600 in a 0700 directory, whether the server and `cordon keys` run under umask 022 or 000.
#[test]
fn data_directory_is_private_whatever_the_umask() {
    for umask in ["022", "000"] {
        let parent = scratch(&format!("umask{umask}"));
        let dir = parent.join("data");
        // `cordon keys create` may be the first to touch the directory.
        let out = cordon_under_umask(umask, &["keys", "create", "--name", "k"], &dir);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(mode(&dir), 0o700, "umask {umask}: {:?}", modes(&dir));
        let mut s = Server::start_with(dir.clone(), &[], Some(umask));
        s.key = String::from_utf8(out.stdout)
            .expect("key")
            .trim()
            .to_string();
        // Write through every file: a sandbox (registry, WAL), an exec (audit).
        let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
        assert_eq!(st, 201, "{v}");
        let id = v["id"].as_str().expect("id").to_string();
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "true"})),
        );
        assert_eq!(st, 200, "{v}");
        let found = modes(&dir);
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        for f in [
            "audit.jsonl",
            "cordon.db",
            "cordon.db-wal",
            "cordon.db-shm",
            "lock",
        ] {
            assert!(names.contains(&f), "umask {umask}: no {f} in {found:?}");
        }
        for (name, m) in &found {
            assert_eq!(*m, 0o600, "umask {umask}: {name} is {m:o}: {found:?}");
        }
        assert_eq!(mode(&dir), 0o700);
        drop(s);
        let _ = std::fs::remove_dir_all(&parent);
    }
}

/// A data directory an older cordon left readable (0755, files 0644) is tightened at start; a
/// directory that is not cordon's own (other files in it) keeps its mode, with a warning, and
/// cordon's files in it are still 0600.
#[test]
fn data_directory_left_open_is_tightened_and_a_foreign_one_is_left_alone() {
    let dir = scratch("old");
    std::fs::create_dir_all(&dir).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (name, _) in modes(&dir) {
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "list", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode(&dir), 0o700);
    for (name, m) in modes(&dir) {
        assert_eq!(m, 0o600, "{name} is {m:o}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    let shared = scratch("shared");
    std::fs::create_dir_all(&shared).expect("dir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(shared.join("someone-elses.txt"), "x").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--data-dir"])
        .arg(&shared)
        .output()
        .expect("keys");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cordon: warning: data directory") && stderr.contains("755"),
        "{stderr}"
    );
    assert_eq!(
        mode(&shared),
        0o755,
        "a directory that is not cordon's is left as it is"
    );
    for (name, m) in modes(&shared) {
        if name != "someone-elses.txt" {
            assert_eq!(m, 0o600, "{name} is {m:o}");
        }
    }
    let _ = std::fs::remove_dir_all(&shared);
}

/// Direct children of `parent` whose command line contains `needle` (seen from the host).
fn children_with(parent: u32, needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // The parent pid is the second field after the command name's closing parenthesis.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&cmd).contains(needle) {
            n += 1;
        }
    }
    n
}

fn new_key(dir: &Path, max_sandboxes: u32, rps: u32) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--name", "quota", "--max-sandboxes"])
        .arg(max_sandboxes.to_string())
        .arg("--rps")
        .arg(rps.to_string())
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("keys create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("key")
        .trim()
        .to_string()
}

/// 50 creates at once on a key allowed 5 sandboxes: exactly 5 are created, the other 45 answer
/// 429 `quota_exceeded` with `Retry-After`, and afterwards the server runs exactly 5 (its list,
/// its metrics and the helper processes on the host agree). A deleted sandbox frees its slot.
#[test]
fn concurrent_creates_never_overshoot_the_quota() {
    let dir = scratch("quota");
    let mut s = Server::start_with(dir.clone(), &[], None);
    s.scratch = true;
    s.key = new_key(&dir, 5, 10_000);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let results: Vec<(u16, Value, bool)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let b = barrier.clone();
                let s = &s;
                sc.spawn(move || {
                    b.wait();
                    match s.req("POST", "/v1/sandboxes").send_json(json!({})) {
                        Ok(r) => (r.status(), r.into_json().unwrap_or(Value::Null), false),
                        Err(ureq::Error::Status(st, r)) => {
                            let retry = r.header("Retry-After").is_some();
                            (st, r.into_json().unwrap_or(Value::Null), retry)
                        }
                        Err(e) => panic!("create: {e}"),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let created: Vec<&Value> = results
        .iter()
        .filter(|r| r.0 == 201)
        .map(|r| &r.1)
        .collect();
    let refused = results
        .iter()
        .filter(|r| r.0 == 429 && r.1["error"]["code"] == "quota_exceeded" && r.2)
        .count();
    let summary: Vec<(u16, &Value)> = results
        .iter()
        .map(|r| (r.0, r.1.get("error").unwrap_or(&r.1["id"])))
        .collect();
    assert_eq!(created.len(), 5, "{summary:?}");
    assert_eq!(refused, 45, "{summary:?}");

    let (_, list) = s.call("GET", "/v1/sandboxes", None);
    assert_eq!(
        list["sandboxes"].as_array().map(Vec::len),
        Some(5),
        "{list}"
    );
    let metrics = ureq::get(&format!("{}/metrics", s.url))
        .call()
        .expect("metrics")
        .into_string()
        .expect("metrics text");
    assert!(
        metrics.contains("cordon_sandboxes{state=\"running\"} 5"),
        "{metrics}"
    );
    assert_eq!(children_with(s.child.id(), "__sandbox"), 5);

    // A deleted sandbox gives its slot back; the quota still holds after.
    let first = created[0]["id"].as_str().expect("id");
    assert_eq!(
        s.call("DELETE", &format!("/v1/sandboxes/{first}"), None).0,
        204
    );
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(
        (st, &v["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{v}"
    );
}

/// A create that fails after taking its slot gives the slot back: with a helper that cannot
/// start sandboxes, every create on a one-sandbox key fails for that reason, never for quota.
#[test]
fn a_failed_create_releases_its_quota_slot() {
    use cordon_server::service::Caller;
    use cordon_server::{Config, Service};
    let dir = scratch("failed-create");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let errors: Vec<(u16, String)> = rt.block_on(async {
        let svc = Service::new(Config {
            // Not cordon: the sandbox helper never comes up.
            helper_exe: "/bin/false".into(),
            data_dir: dir.clone(),
            node: "node".into(),
            default_ttl: std::time::Duration::from_secs(60),
            max_ttl: std::time::Duration::from_secs(60),
            max_upload: 1 << 20,
            max_download: 1 << 20,
            default_exec_timeout: std::time::Duration::from_secs(30),
            max_exec_timeout: std::time::Duration::from_secs(60),
        })
        .expect("service");
        let caller = Caller {
            key_id: "k".into(),
            max_sandboxes: 1,
        };
        let mut errors = Vec::new();
        for _ in 0..3 {
            match svc
                .create(&caller, serde_json::from_value(json!({})).expect("request"))
                .await
            {
                Ok(info) => panic!("created with /bin/false as the helper: {info:?}"),
                Err(e) => errors.push((e.status, e.code.to_string())),
            }
        }
        errors
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(errors.len(), 3);
    for (status, code) in errors {
        assert_eq!((status, code.as_str()), (500, "sandbox_failed"));
    }
}
