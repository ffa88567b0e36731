//! Learn mode end to end (`cordon run --learn FILE`): a task is learned, replayed under the
//! learned profile, and the same task changed to go elsewhere is refused — the learned profile
//! is the task's, not the learning run's wide one; learning again widens the file; and a hostile
//! program in learn mode gets exactly what it gets without it. Loopback only: upstreams listen
//! on 127.0.0.x, names are pinned with --add-host, so no packet leaves the machine.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::HostDir;
use serde_json::Value;

/// A tiny HTTP upstream on `ip` that counts the connections it accepts.
struct Upstream {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Upstream {
    fn start(ip: &str) -> Upstream {
        let l = TcpListener::bind((ip, 0)).expect("bind loopback");
        let port = l.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut buf = [0u8; 4096];
                    let mut req = Vec::new();
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = "hello from upstream\n";
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Upstream { port, hits }
    }
}

/// `cordon run --json ARGS`: the Outcome, and cordon's stderr.
fn cordon(args: &[String]) -> (Value, String) {
    let out = Command::new(common::cordon_bin())
        .args(["run", "--json"])
        .args(args)
        .output()
        .expect("run cordon");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("outcome"),
        stderr,
    )
}

/// A python3 task fetching `url` through the proxy: prints the status (or the error's name).
fn fetch(url: &str) -> Vec<String> {
    let script = format!(
        "import urllib.request, urllib.error\n\
         try:\n    r = urllib.request.urlopen('{url}', timeout=10); print(r.status, r.read().decode(), end='')\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n"
    );
    vec!["--".into(), "python3".into(), "-c".into(), script]
}

/// The learning run's wide allowance: both test names, any port, their loopback addresses.
fn wide() -> Vec<String> {
    [
        "--allow-net",
        "a.test:*",
        "--allow-net",
        "c.test:*",
        "--allow-net",
        "127.0.0.2:*",
        "--allow-net",
        "127.0.0.3:*",
        "--add-host",
        "a.test:127.0.0.2",
        "--add-host",
        "c.test:127.0.0.3",
    ]
    .map(String::from)
    .to_vec()
}

fn learn(file: &Path, task: Vec<String>) -> Value {
    let mut args: Vec<String> = vec![
        "--learn".into(),
        file.display().to_string(),
        "--profile".into(),
        "default".into(),
    ];
    args.extend(wide());
    args.extend(task);
    let (o, stderr) = cordon(&args);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert!(stderr.contains("learned profile"), "{stderr}");
    o
}

fn replay(file: &Path, task: Vec<String>) -> Value {
    let mut args = vec!["--profile".into(), file.display().to_string()];
    args.extend(task);
    cordon(&args).0
}

fn refused(o: &Value, host: &str) -> bool {
    o["network"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["host"] == host && e["verdict"] == "deny")
}

#[test]
fn a_learned_profile_replays_the_task_and_refuses_another_port_or_host() {
    let a = Upstream::start("127.0.0.2");
    let b = Upstream::start("127.0.0.2");
    let c = Upstream::start("127.0.0.3");
    let dir = HostDir::new("learn");
    let file = dir.join("learned.toml");
    learn(&file, fetch(&format!("http://a.test:{}/", a.port)));
    let text = std::fs::read_to_string(&file).expect("learned file");
    assert!(text.contains("extends = \"default\""), "{text}");
    assert!(
        text.contains(&format!("\"a.test:{}\",  # reached", a.port)),
        "{text}"
    );
    assert!(
        !text.contains("c.test:*") && !text.contains("127.0.0.2:*"),
        "{text}"
    );
    assert!(text.contains("memory = "), "{text}");

    let o = replay(&file, fetch(&format!("http://a.test:{}/", a.port)));
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");

    let (b_before, c_before) = (b.hits.load(Ordering::SeqCst), c.hits.load(Ordering::SeqCst));
    let o = replay(&file, fetch(&format!("http://a.test:{}/", b.port)));
    assert_eq!(o["stdout"], "403\n", "another port: {o}");
    assert!(refused(&o, "a.test"), "{o}");
    let o = replay(&file, fetch(&format!("http://c.test:{}/", c.port)));
    assert_eq!(o["stdout"], "403\n", "another host: {o}");
    assert!(refused(&o, "c.test"), "{o}");
    assert_eq!(b.hits.load(Ordering::SeqCst), b_before);
    assert_eq!(c.hits.load(Ordering::SeqCst), c_before);
}

#[test]
fn learning_onto_a_learned_file_widens_it() {
    let a = Upstream::start("127.0.0.2");
    let c = Upstream::start("127.0.0.3");
    let dir = HostDir::new("learn-merge");
    let file = dir.join("learned.toml");
    let task_a = fetch(&format!("http://a.test:{}/", a.port));
    let task_c = fetch(&format!("http://c.test:{}/", c.port));
    learn(&file, task_a.clone());
    assert_eq!(replay(&file, task_c.clone())["stdout"], "403\n");
    learn(&file, task_c.clone());
    for task in [task_a, task_c] {
        let o = replay(&file, task);
        assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");
    }
}

/// The program's view, for comparing a run with --learn and one without.
const HOSTILE: &str = r#"
import os, socket
def attempt(f):
    try:
        f(); return "done"
    except OSError as e:
        return e.errno
def write(p):
    with open(p, "w") as f: f.write("owned")
def connect_evil():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b'CONNECT x"]\n[filesystem]\nrw = ["/"]\n#:443 HTTP/1.1\r\nHost: y\r\n\r\n')
    s.recv(100)
print("ro_bind", attempt(lambda: write("/data/owned")))
print("etc", attempt(lambda: write("/etc/owned")))
print("usr", attempt(lambda: write("/usr/owned")))
print("proxy", attempt(connect_evil))
import shutil, subprocess
def run_copied():
    shutil.copy("/usr/bin/true", "/tmp/mine")
    subprocess.run(["/tmp/mine"], check=True)
print("copied", attempt(run_copied))
"#;

#[test]
fn a_hostile_program_in_learn_mode_gets_no_more_than_without_it() {
    let host = HostDir::new("learn-hostile");
    let data = HostDir::new("learn-data");
    let file = host.join("learned.toml");
    let run = |learn: bool| {
        let mut args: Vec<String> = Vec::new();
        if learn {
            args.extend(["--learn".into(), file.display().to_string()]);
        }
        args.extend([
            "--ro".into(),
            format!("{}:/data", data.str()),
            "--allow-net".into(),
            "a.test".into(),
            "--".into(),
            "python3".into(),
            "-c".into(),
            HOSTILE.into(),
        ]);
        cordon(&args).0
    };
    let without = run(false);
    let with = run(true);
    assert_eq!(with["stdout"], without["stdout"], "{with}\n{without}");
    let out = with["stdout"].as_str().unwrap();
    for what in ["ro_bind", "etc", "usr"] {
        assert!(
            !out.contains(&format!("{what} done")),
            "{what} written: {out}"
        );
    }
    assert!(
        std::fs::read_dir(&data.path).unwrap().next().is_none(),
        "the read-only bind was written on the host"
    );
    // The learned file loads, and grants no write beyond the run's own scratch space.
    let text = std::fs::read_to_string(&file).expect("learned file");
    let explained = Command::new(common::cordon_bin())
        .args(["profile", "explain"])
        .arg(&file)
        .output()
        .expect("explain");
    assert!(explained.status.success(), "{text}");
    assert!(!text.contains("rw"), "{text}");
    // A program written in /tmp while learning cannot be listed (nothing there can be).
    assert!(!text.contains("/tmp/mine"), "{text}");
    let words = String::from_utf8_lossy(&explained.stdout);
    let may_write = words
        .split("may write:")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or_default();
    assert!(!may_write.contains("/ (host"), "{words}");
    assert!(
        !may_write.contains(data.str()),
        "the ro bind became writable: {words}"
    );
}

#[test]
fn a_programs_allowlist_is_kept_and_what_it_refused_is_learned() {
    let dir = HostDir::new("learn-exec");
    let file = dir.join("learned.toml");
    let run = |learn: bool, cmd: &[&str]| {
        let mut args: Vec<String> = Vec::new();
        if learn {
            args.extend([
                "--learn".into(),
                file.display().to_string(),
                "--exec-allow".into(),
                "/usr/bin/python3".into(),
            ]);
        } else {
            args.extend(["--profile".into(), file.display().to_string()]);
        }
        args.push("--".into());
        args.extend(cmd.iter().map(|s| s.to_string()));
        cordon(&args).0
    };
    let o = run(true, &["python3", "-c", "print('ok')"]);
    assert_eq!(o["stdout"], "ok\n", "{o}");
    // /usr/bin/env is refused while learning: the learned file allows it.
    let o = run(true, &["/usr/bin/env", "--version"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    let text = std::fs::read_to_string(&file).expect("learned file");
    assert!(
        text.contains("\"/usr/bin/env\",  # refused during learning"),
        "{text}"
    );
    let o = run(false, &["python3", "-c", "print('ok')"]);
    assert_eq!(o["stdout"], "ok\n", "{o}");
    let o = run(false, &["/usr/bin/env", "--version"]);
    assert_eq!(o["exit_code"], 0, "{o}");
    // Anything else is still refused under the learned profile.
    let o = run(false, &["/bin/sh", "-c", "echo escaped"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    assert!(!o["stdout"].as_str().unwrap().contains("escaped"), "{o}");
}

/// The programs a run executes are learned (seccomp user notification, root and rootless): a
/// script in the workspace, its `#!` interpreter, what it runs; replayed it passes, and the same
/// script changed to run another program is refused.
#[test]
fn the_programs_a_task_runs_are_learned_and_nothing_else_may_run() {
    let ws = HostDir::new("learn-ws");
    let dir = HostDir::new("learn-progs");
    let file = dir.join("learned.toml");
    ws.file(
        "task.sh",
        "#!/bin/sh\npython3 -c 'print(7)'\nif [ -n \"$1\" ]; then /usr/bin/id -u && echo RAN; fi\n",
        0o755,
    );
    let mut args: Vec<String> = vec![
        "--learn".into(),
        file.display().to_string(),
        "--workspace".into(),
        ws.str().into(),
        "--".into(),
        "./task.sh".into(),
    ];
    let (o, _) = cordon(&args);
    assert_eq!(o["stdout"], "7\n", "{o}");
    let text = std::fs::read_to_string(&file).expect("learned file");
    for want in [
        "\"/workspace/task.sh\"",
        "\"/bin/sh\"",
        "\"/usr/bin/python3\"",
    ] {
        assert!(text.contains(want), "{want} not learned:\n{text}");
    }
    assert!(!text.contains("/usr/bin/id"), "{text}");
    let o = replay(&file, vec!["--".into(), "./task.sh".into()]);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "7\n", "{o}");
    // Changed to run a program the task never ran: refused by the learned allowlist.
    let o = replay(&file, vec!["--".into(), "./task.sh".into(), "x".into()]);
    assert_eq!(o["stdout"], "7\n", "id ran under the learned profile: {o}");
    assert!(
        o["stderr"].as_str().unwrap().contains("Permission denied"),
        "{o}"
    );
    // Learning the changed task widens the file to it.
    args.push("x".into());
    cordon(&args);
    let o = replay(&file, vec!["--".into(), "./task.sh".into(), "x".into()]);
    assert!(o["stdout"].as_str().unwrap().ends_with("RAN\n"), "{o}");
}
