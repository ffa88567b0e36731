//! The state rows: a snapshot of a sandbox holding `--state-mb` MB in 10,000 files next to
//! `cp -a` (+ `sync -f`) of the same tree from a tmpfs to the same disk; a create from a
//! snapshot next to a plain create; a fork of ten from a sandbox holding 100 MB; a pause to
//! disk and its resume, per GB, next to E2B's published figures (~4 s/GB pause, ~1 s resume).
//! All through a private `cordon serve` on loopback, as a user's program would call it.
//!
//! Threat model: none of its own — trusted commands, loopback only, its own scratch
//! directories (removed at the end).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{median, ms};

/// Files the big tree is made of (the 1 GB in 10k files).
const FILES: usize = 10_000;
/// The fork row's parent holds this many MB in 1,000 files.
const FORK_MB: usize = 100;
/// E2B's published pause and resume times (their documentation: ~4 s per GB of memory to
/// pause, ~1 s to resume).
const E2B_PAUSE_S_PER_GB: f64 = 4.0;
const E2B_RESUME_S: f64 = 1.0;

/// Writes `mb` MB in `files` files under `dir` (python, one process: the writing is not what
/// is measured).
fn tree_script(dir: &str, mb: usize, files: usize) -> String {
    format!(
        "import os\nos.makedirs('{dir}', exist_ok=True)\nb = b'x' * ({mb} * 1048576 // {files})\nfor i in range({files}):\n    d = '{dir}/d%d' % (i % 100)\n    os.makedirs(d, exist_ok=True)\n    open('%s/f%d' % (d, i), 'wb').write(b)\n"
    )
}

struct Api {
    url: String,
    agent: ureq::Agent,
}

impl Api {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let r = self.agent.request(method, &format!("{}{path}", self.url));
        let res = match body {
            Some(b) => r.send_json(b),
            None => r.call(),
        }
        .map_err(|e| match e {
            ureq::Error::Status(s, r) => {
                format!(
                    "{method} {path}: {s} {}",
                    r.into_string().unwrap_or_default()
                )
            }
            e => format!("{method} {path}: {e}"),
        })?;
        if res.status() == 204 {
            return Ok(Value::Null);
        }
        res.into_json().map_err(|e| e.to_string())
    }

    fn sandbox(&self, body: Value) -> Result<String, String> {
        let v = self.call("POST", "/v1/sandboxes", Some(body))?;
        v["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no id in {v}"))
    }

    fn sh(&self, id: &str, cmd: &[&str]) -> Result<(), String> {
        let v = self.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": cmd, "timeout": 600})),
        )?;
        if v["exit_code"] != 0 {
            return Err(format!("{cmd:?} in the sandbox: {v}"));
        }
        Ok(())
    }

    fn delete(&self, id: &str) {
        let _ = self.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    }
}

fn timed(f: impl FnOnce() -> Result<Value, String>) -> Result<(Duration, Value), String> {
    let t = Instant::now();
    let v = f()?;
    Ok((t.elapsed(), v))
}

/// Runs the state rows against a private server of `me`.
pub(crate) fn bench(me: &str, mb: usize, iterations: u32, quiet: bool) -> Result<Value, String> {
    let base = std::env::temp_dir().join(format!("cordon-bench-state-{}", std::process::id()));
    let data = base.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let server = crate::PrivateServer::start(me, &data)?;
    let shm = Path::new("/dev/shm").join(format!("cordon-bench-state-{}", std::process::id()));
    let result = (|| {
        let url = server.url.clone();
        let api = Api {
            url,
            agent: ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(900))
                .build(),
        };
        let n = iterations.clamp(1, 4) as usize;
        let room = format!("{}M", mb * 2 + 256);

        // Snapshot vs cp -a: the same tree, from a tmpfs to the data directory's disk.
        let big = api.sandbox(json!({"disk": room, "memory": room, "ttl": 3600}))?;
        api.sh(
            &big,
            &["python3", "-c", &tree_script("/workspace/t", mb, FILES)],
        )?;
        let host_tree = shm.join("t");
        let made = Command::new("python3")
            .args([
                "-c",
                &tree_script(&host_tree.display().to_string(), mb, FILES),
            ])
            .status()
            .map_err(|e| format!("python3: {e}"))?;
        if !made.success() {
            return Err("python3 could not write the tree in /dev/shm".into());
        }
        let (mut snap, mut cpa) = (Vec::new(), Vec::new());
        // Each timed alone: the disk flushed before it (so neither pays for what the other
        // left to write back), and the two take turns going first.
        let settle = || {
            let _ = Command::new("sync").status();
        };
        for i in 0..n {
            let name = format!("bench{i}");
            let snapshot = |snap: &mut Vec<Duration>| -> Result<(), String> {
                settle();
                let (d, _) = timed(|| {
                    api.call(
                        "POST",
                        &format!("/v1/sandboxes/{big}/snapshots"),
                        Some(json!({ "name": name })),
                    )
                })?;
                snap.push(d);
                api.call("DELETE", &format!("/v1/snapshots/{name}"), None)?;
                Ok(())
            };
            let copy = |cpa: &mut Vec<Duration>| -> Result<(), String> {
                let dst = data.join(format!("cp-{i}"));
                settle();
                let t = Instant::now();
                let ok = Command::new("cp")
                    .arg("-a")
                    .arg(&host_tree)
                    .arg(&dst)
                    .status()
                    .is_ok_and(|s| s.success())
                    && Command::new("sync")
                        .arg("-f")
                        .arg(&dst)
                        .status()
                        .is_ok_and(|s| s.success());
                cpa.push(t.elapsed());
                let _ = std::fs::remove_dir_all(&dst);
                if ok {
                    Ok(())
                } else {
                    Err(format!("cp -a {} {}", host_tree.display(), dst.display()))
                }
            };
            if i % 2 == 0 {
                snapshot(&mut snap)?;
                copy(&mut cpa)?;
            } else {
                copy(&mut cpa)?;
                snapshot(&mut snap)?;
            }
        }
        let (snap_ms, cpa_ms) = (ms(median(&mut snap)), ms(median(&mut cpa)));

        // Pause to disk and resume, per GB held.
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (d, _) = timed(|| {
                api.call(
                    "POST",
                    &format!("/v1/sandboxes/{big}/pause"),
                    Some(json!({"keep_memory": false})),
                )
            })?;
            pause.push(d);
            let (d, _) = timed(|| api.call("POST", &format!("/v1/sandboxes/{big}/resume"), None))?;
            resume.push(d);
        }
        api.delete(&big);
        let gb = mb as f64 / 1024.0;
        let (pause_ms, resume_ms) = (ms(median(&mut pause)), ms(median(&mut resume)));

        // Fork of ten from a sandbox holding 100 MB; create from its snapshot vs plain.
        let parent = api.sandbox(json!({"disk": "512M", "memory": "1G", "ttl": 3600}))?;
        api.sh(
            &parent,
            &["python3", "-c", &tree_script("/workspace/f", FORK_MB, 1000)],
        )?;
        let mut fork = Vec::new();
        for _ in 0..n {
            let (d, v) = timed(|| {
                api.call(
                    "POST",
                    &format!("/v1/sandboxes/{parent}/fork"),
                    Some(json!({"count": 10})),
                )
            })?;
            fork.push(d);
            for s in v["sandboxes"].as_array().into_iter().flatten() {
                if let Some(id) = s["id"].as_str() {
                    api.delete(id);
                }
            }
        }
        api.call(
            "POST",
            &format!("/v1/sandboxes/{parent}/snapshots"),
            Some(json!({"name": "bench-from"})),
        )?;
        api.delete(&parent);
        let (mut from, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..n.max(3) {
            let (d, v) = timed(|| {
                api.call(
                    "POST",
                    "/v1/sandboxes",
                    Some(json!({"from": "bench-from", "disk": "512M"})),
                )
            })?;
            from.push(d);
            api.delete(v["id"].as_str().unwrap_or_default());
            let (d, v) =
                timed(|| api.call("POST", "/v1/sandboxes", Some(json!({"disk": "512M"}))))?;
            plain.push(d);
            api.delete(v["id"].as_str().unwrap_or_default());
        }
        let _ = api.call("DELETE", "/v1/snapshots/bench-from", None);
        let (fork_ms, from_ms, plain_ms) = (
            ms(median(&mut fork)),
            ms(median(&mut from)),
            ms(median(&mut plain)),
        );
        let v = json!({
            "command": "state",
            "iterations": n,
            "tree_mb": mb,
            "tree_files": FILES,
            "median_ms": {
                "snapshot": snap_ms,
                "cp -a + sync -f": cpa_ms,
                "pause to disk": pause_ms,
                "resume from disk": resume_ms,
                "fork count=10 of 100 MB": fork_ms,
                "create from a 100 MB snapshot": from_ms,
                "create": plain_ms,
            },
            "snapshot_vs_cp_a": snap_ms / cpa_ms.max(1e-9),
            "pause_s_per_gb": pause_ms / 1000.0 / gb.max(1e-9),
            "e2b_pause_s_per_gb": E2B_PAUSE_S_PER_GB,
            "resume_s": resume_ms / 1000.0,
            "e2b_resume_s": E2B_RESUME_S,
            "fork10_s": fork_ms / 1000.0,
            "create_from_snapshot_vs_create": from_ms / plain_ms.max(1e-9),
        });
        if !quiet {
            println!("state: a sandbox holding {mb} MB in {FILES} files ({n} runs each, medians):");
            println!(
                "  snapshot {snap_ms:9.1} ms   cp -a + sync -f of the same tree {cpa_ms:9.1} ms   = {:.2}x (target <= 1.2x)",
                snap_ms / cpa_ms.max(1e-9)
            );
            println!(
                "  pause to disk {:6.2} s/GB (E2B: ~{E2B_PAUSE_S_PER_GB} s/GB)   resume {:6.2} s (E2B: ~{E2B_RESUME_S} s)",
                pause_ms / 1000.0 / gb.max(1e-9),
                resume_ms / 1000.0
            );
            println!(
                "  fork count=10 of a sandbox holding {FORK_MB} MB {:6.2} s (target <= 0.5 s)",
                fork_ms / 1000.0
            );
            println!(
                "  create from a {FORK_MB} MB snapshot {from_ms:8.1} ms   plain create {plain_ms:8.1} ms   = {:.2}x (target <= 1.5x)",
                from_ms / plain_ms.max(1e-9)
            );
        }
        Ok(v)
    })();
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&shm);
    result
}
