//! The service keeps its contract: a private data directory, an atomic quota, JSON errors for
//! every request it cannot use, an OpenAPI document generated from the router, and a README
//! walk-through that runs as written. Real `cordon serve` on loopback, real HTTP clients.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

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
