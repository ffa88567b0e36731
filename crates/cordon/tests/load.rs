//! A bounded load test on loopback: 50 concurrent clients each create a sandbox, run 20
//! commands in it and delete it. No errors, bounded server memory, nothing left behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CLIENTS: usize = 50;
const COMMANDS: usize = 20;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Processes whose parent is `ppid`.
fn children(ppid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(") ")
                        .map(|(_, rest)| rest.split(' ').nth(1).map(str::to_string))
                })
                .flatten()
                .is_some_and(|p| p == ppid.to_string())
        })
        .collect()
}

/// cordon cgroups under our own memory cgroup (v1) or unified cgroup (v2).
fn cordon_cgroups() -> Vec<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let base = match ctrl {
            "memory" => format!("/sys/fs/cgroup/memory{path}"),
            "" => format!("/sys/fs/cgroup{path}"),
            _ => continue,
        };
        if let Ok(rd) = std::fs::read_dir(&base) {
            dirs.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("cordon-")),
            );
        }
    }
    dirs
}

#[test]
fn fifty_clients_twenty_commands_each() {
    let dir = std::env::temp_dir().join(format!("cordon-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "keys",
            "create",
            "--name",
            "load",
            "--max-sandboxes",
            "60",
            "--rps",
            "100000",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(key_out.status.success());
    let key = String::from_utf8(key_out.stdout)
        .unwrap()
        .trim()
        .to_string();
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut server = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let server = KillOnDrop(server);
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("server output").unwrap();
        if let Some(u) = line.strip_prefix("cordon serving on ") {
            break u.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let server_pid = server.0.id();
    let cgroups_before = cordon_cgroups();
    let rss_before = rss_kb(server_pid);

    let t0 = Instant::now();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (url, key) = (url.clone(), key.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(120))
                    .build();
                let auth = format!("Bearer {key}");
                let created: Value = agent
                    .post(&format!("{url}/v1/sandboxes"))
                    .set("Authorization", &auth)
                    .send_json(json!({"metadata": {"client": c.to_string()}}))
                    .map_err(|e| format!("create: {e}"))?
                    .into_json()
                    .map_err(|e| e.to_string())?;
                let id = created["id"].as_str().ok_or("no id")?.to_string();
                for i in 0..COMMANDS {
                    let o: Value = agent
                        .post(&format!("{url}/v1/sandboxes/{id}/exec"))
                        .set("Authorization", &auth)
                        .send_json(json!({"cmd": ["sh", "-c", format!("echo {c}-{i}")]}))
                        .map_err(|e| format!("exec: {e}"))?
                        .into_json()
                        .map_err(|e| e.to_string())?;
                    if o["stdout"] != format!("{c}-{i}\n") || o["exit_code"] != 0 {
                        return Err(format!("client {c} command {i}: {o}"));
                    }
                }
                agent
                    .delete(&format!("{url}/v1/sandboxes/{id}"))
                    .set("Authorization", &auth)
                    .call()
                    .map_err(|e| format!("delete: {e}"))?;
                Ok(())
            })
        })
        .collect();
    let mut peak_rss = 0;
    let mut errors = Vec::new();
    for h in handles {
        while !h.is_finished() {
            peak_rss = peak_rss.max(rss_kb(server_pid));
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Err(e) = h.join().unwrap() {
            errors.push(e);
        }
    }
    let elapsed = t0.elapsed();
    eprintln!(
        "load: {CLIENTS} clients x {COMMANDS} commands in {:.1}s ({:.0} commands/s); server RSS {} kB before, {} kB peak, {} kB after",
        elapsed.as_secs_f64(),
        (CLIENTS * COMMANDS) as f64 / elapsed.as_secs_f64(),
        rss_before,
        peak_rss,
        rss_kb(server_pid)
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    // Server memory stays bounded: well under 200 MB of growth for 50 sandboxes.
    assert!(
        peak_rss < rss_before + 200 * 1024,
        "server RSS grew from {rss_before} kB to {peak_rss} kB"
    );
    // Nothing left behind: no helper processes, no cgroups.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !children(server_pid).is_empty() {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        children(server_pid),
        Vec::<u32>::new(),
        "sandbox helpers left behind"
    );
    let left: Vec<String> = cordon_cgroups()
        .into_iter()
        .filter(|c| !cgroups_before.contains(c))
        .collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
