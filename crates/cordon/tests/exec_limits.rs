//! A persistent sandbox's command owns its process tree, and its Outcome tells the same truth
//! as `cordon run`: a real `cordon serve` on loopback, real sandboxes, the four shared payloads
//! (`common::payloads`) through `POST /v1/sandboxes/{id}/exec` and through the CLI, compared;
//! what a command leaves behind is checked from the host through /proc. Code cells say which
//! limit ended them the same way. Every test runs as root (a cgroup per command) and rootless
//! (no cgroup on a v1 host: a sub-init per command, the init's samples).
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

mod common;
mod serve;

use std::time::{Duration, Instant};

use common::payloads::{self, Payload};
use common::{assert_no_process_with, procs_with, unique, Cmd, Outcome};
use serde_json::{json, Value};
use serve::Server;

fn create(s: &Server, body: Value) -> String {
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(body));
    assert_eq!(st, 201, "{v}");
    v["id"].as_str().expect("id").to_string()
}

fn exec(s: &Server, id: &str, body: Value) -> Outcome {
    let t0 = Instant::now();
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
    assert_eq!(st, 200, "{v}");
    Outcome {
        v,
        cordon_pid: 0,
        elapsed: t0.elapsed(),
    }
}

/// A sandbox with the payload's limits (those that belong to the sandbox).
fn sandbox_for(s: &Server, p: &Payload) -> String {
    let mut body = json!({});
    if let Some(m) = &p.memory {
        body["memory"] = json!(m);
    }
    if let Some(n) = p.pids {
        body["pids"] = json!(n);
    }
    if let Some(o) = &p.output_limit {
        body["output_limit"] = json!(o);
    }
    create(s, body)
}

/// The payload's argv with `marker` after it (visible in every process's /proc cmdline,
/// forked children's too).
fn argv(p: &Payload, marker: &str) -> Vec<String> {
    let mut a = p.argv();
    a.push(marker.to_string());
    a
}

/// The payload through `exec` in a fresh sandbox; nothing of it may be left once the answer
/// is in.
fn through_exec(s: &Server, p: &Payload) -> Outcome {
    let id = sandbox_for(s, p);
    let marker = unique("exec");
    let mut body = json!({"cmd": argv(p, &marker)});
    if let Some(t) = &p.timeout {
        body["timeout"] = json!(t);
    }
    let o = exec(s, &id, body);
    assert_no_process_with(&marker, Duration::from_millis(500));
    o
}

/// The payload through `cordon run --json`.
fn through_run(p: &Payload) -> Outcome {
    let marker = unique("run");
    let mut args: Vec<String> = vec!["run".into(), "--json".into()];
    args.extend(p.cli_flags());
    args.push("--".into());
    args.extend(argv(p, &marker));
    let o = Cmd::cordon().args(&args).run().outcome();
    assert_no_process_with(&marker, Duration::from_secs(3));
    o
}

/// The same ending through both doors: status, exit code, signal, limits hit, what was cut.
fn assert_same_ending(p: &Payload, run: &Outcome, exec: &Outcome) {
    let what = format!("{}: cordon run\n{run}\nexec\n{exec}", p.name);
    assert_eq!(run.status(), exec.status(), "{what}");
    assert_eq!(run.exit_code(), exec.exit_code(), "{what}");
    assert_eq!(run.signal(), exec.signal(), "{what}");
    assert_eq!(run.limits_hit(), exec.limits_hit(), "{what}");
    for k in ["stdout_truncated", "stderr_truncated"] {
        assert_eq!(run.v[k], exec.v[k], "{k}: {what}");
    }
    assert_eq!(run.cgroup(), exec.cgroup(), "{what}");
}

#[test]
fn oom_ends_the_same_through_exec_as_through_run() {
    let s = Server::start();
    let p = &payloads::OOM;
    let (run, exec) = (through_run(p), through_exec(&s, p));
    assert_same_ending(p, &run, &exec);
    for o in [&run, &exec] {
        if o.has_cgroup() {
            assert_eq!(o.status(), "oom", "{o}");
            assert_eq!(o.limits_hit(), ["memory"], "{o}");
            let peak = o.usage("peak_memory_bytes");
            assert!(
                ((32 << 20)..=(64 << 20)).contains(&peak),
                "peak {peak}:\n{o}"
            );
        } else {
            // RLIMIT_DATA refuses the allocation inside Python (see the payload).
            o.assert_exited(1);
            assert!(o.stderr().contains("MemoryError"), "{o}");
            assert!(o.usage("peak_memory_bytes") >= 32 << 20, "{o}");
        }
        assert!(o.usage("cpu_user_ms") + o.usage("cpu_system_ms") > 0, "{o}");
    }
}

#[test]
fn a_pids_bomb_ends_the_same_through_exec_as_through_run() {
    let s = Server::start();
    let p = &payloads::PIDS_BOMB;
    let (run, exec) = (through_run(p), through_exec(&s, p));
    assert_same_ending(p, &run, &exec);
    for o in [&run, &exec] {
        o.assert_ok();
        assert_eq!(o.limits_hit(), ["pids"], "{o}");
        assert!(
            o.stdout().contains(&format!("errno {}", libc::EAGAIN)),
            "no fork was refused:\n{o}"
        );
        // The payload is one of the 16; its children are the rest.
        assert_eq!(o.stdout().lines().last(), Some("15"), "{o}");
        assert_eq!(o.usage("peak_pids"), 16, "{o}");
    }
}

#[test]
fn a_cpu_spin_to_the_timeout_ends_the_same_through_exec_as_through_run() {
    let s = Server::start();
    let p = &payloads::CPU_SPIN;
    let (run, exec) = (through_run(p), through_exec(&s, p));
    assert_same_ending(p, &run, &exec);
    for o in [&run, &exec] {
        payloads::assert_spin_ended_at_its_timeout(o);
    }
    assert!(exec.elapsed < Duration::from_secs(10), "{exec}");
}

#[test]
fn an_output_flood_ends_the_same_through_exec_as_through_run() {
    let s = Server::start();
    let p = &payloads::OUTPUT_FLOOD;
    let (run, exec) = (through_run(p), through_exec(&s, p));
    assert_same_ending(p, &run, &exec);
    assert_eq!(run.stdout(), exec.stdout());
    for o in [&run, &exec] {
        o.assert_ok();
        assert_eq!(o.stdout().len(), 10 << 10, "{o}");
        assert_eq!(o.limits_hit(), ["output"], "{o}");
    }
}

/// The bomb of the shared payloads, and bash's classic one, whose command ends at once while
/// its forks go on: each is reported in its own command's Outcome, nothing of it is left on the
/// host, and the next command in the same sandbox runs — while a background command started
/// before them lives on.
#[test]
fn after_a_fork_bomb_in_exec_nothing_is_left_and_the_next_exec_runs() {
    let s = Server::start();
    let id = create(&s, json!({"pids": 16}));
    let bg = unique("bg");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sh", "-c", "sleep 60; :", &bg], "background": true})),
    );
    assert_eq!(st, 202, "{v}");
    let bg_id = v["command_id"].as_str().expect("command id").to_string();
    serve::wait_until("the background command", || !procs_with(&bg).is_empty());

    let marker = unique("bomb");
    let o = exec(
        &s,
        &id,
        json!({"cmd": argv(&payloads::PIDS_BOMB, &marker), "timeout": "30s"}),
    );
    o.assert_ok();
    assert_eq!(o.limits_hit(), ["pids"], "{o}");
    assert!(procs_with(&marker).is_empty(), "{:?}", procs_with(&marker));
    let next = exec(&s, &id, json!({"cmd": ["echo", "next"]}));
    next.assert_ok();
    assert_eq!(next.stdout(), "next\n", "{next}");
    assert!(next.limits_hit().is_empty(), "{next}");

    // bash's bomb: `:` puts two copies of itself in the background and returns, so the
    // command is over in milliseconds while its copies fork on. They end with it. (Now and
    // then the copies fill the sandbox between bash's two forks of the pipeline, and bash
    // retries the second for seconds: then the timeout ends it.)
    let marker = unique("bashbomb");
    let o = exec(
        &s,
        &id,
        json!({"cmd": ["bash", "-c", ":(){ :|:& };:", &marker], "timeout": "3s"}),
    );
    assert!(["exited", "timeout"].contains(&o.status()), "{o}");
    assert!(procs_with(&marker).is_empty(), "{:?}", procs_with(&marker));
    let next = exec(&s, &id, json!({"cmd": ["echo", "next"]}));
    next.assert_ok();
    assert_eq!(next.stdout(), "next\n", "{next}");

    // The background command was never part of either.
    assert_eq!(procs_with(&bg).len(), 1, "{:?}", procs_with(&bg));
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{bg_id}/signal"),
        Some(json!({"signal": "KILL"})),
    );
    assert!(st < 300, "{v}");
    assert_no_process_with(&bg, Duration::from_secs(5));
}

/// A foreground command's children, daemonized or not, end with it; a background command keeps
/// its own until it ends, and then they go too.
#[test]
fn a_command_takes_what_it_started_along_when_it_ends() {
    let s = Server::start();
    let id = create(&s, json!({}));
    let fg = unique("fg");
    // One child left running in the background, one double-forked into a session of its own.
    let o = exec(
        &s,
        &id,
        json!({"cmd": ["sh", "-c", "sleep 60 & (setsid sleep 61 &) ; echo started", &fg]}),
    );
    o.assert_ok();
    assert_eq!(o.stdout(), "started\n", "{o}");
    // The sleeps do not carry the marker (only sh's $0 does): look for them by name.
    let sleeps = || {
        procs_with("sleep 6")
            .into_iter()
            .filter(|(pid, cmd)| cmd.starts_with("sleep 6") && in_sandbox_of(*pid, &s))
            .count()
    };
    assert_eq!(sleeps(), 0, "children outlived their command");

    let bg = unique("bgtree");
    // In sessions of their own, so that no signal to the command's process group reaches
    // them: only the end of their command's tree does.
    let script = format!("setsid sleep 62 & setsid sleep 63 & echo {bg}; wait");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sh", "-c", script, &bg], "background": true})),
    );
    assert_eq!(st, 202, "{v}");
    let cid = v["command_id"].as_str().expect("command id").to_string();
    serve::wait_until("the background tree", || sleeps() == 2);
    // A foreground command meanwhile takes nothing of it.
    exec(&s, &id, json!({"cmd": ["true"]})).assert_ok();
    assert_eq!(sleeps(), 2);
    // When the background command's own process ends, its tree ends with it.
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/signal"),
        Some(json!({"signal": "KILL"})),
    );
    assert!(st < 300, "{v}");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/wait"),
        Some(json!({})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["running"], false, "{v}");
    serve::wait_until("the background tree to end", || sleeps() == 0);
}

/// Whether host process `pid` belongs to a sandbox of server `s`: its ancestors include one
/// of the server's helpers.
fn in_sandbox_of(pid: u32, s: &Server) -> bool {
    let server = s.child.id();
    let mut at = pid;
    for _ in 0..64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{at}/stat")) else {
            return false;
        };
        let Some(ppid) = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            return false;
        };
        if ppid == server {
            return true;
        }
        if ppid <= 1 {
            return false;
        }
        at = ppid;
    }
    false
}

/// The profile's CPU-time limit applies to each command: two spins in a row each get their
/// own budget and are each stopped by it, as `cordon run --cpu-time` stops one.
#[test]
fn cpu_time_applies_to_each_command() {
    let s = Server::start();
    let id = create(&s, json!({"cpu_time": "1s"}));
    let spin = payloads::CPU_SPIN.argv();
    let run = {
        let mut args: Vec<String> = [
            "run",
            "--json",
            "--cpu-time",
            "1s",
            "--timeout",
            "20s",
            "--",
        ]
        .map(String::from)
        .to_vec();
        args.extend(spin.clone());
        Cmd::cordon().args(&args).run().outcome()
    };
    for _ in 0..2 {
        let o = exec(&s, &id, json!({"cmd": spin, "timeout": "20s"}));
        assert_eq!(o.status(), "cpu_time", "{o}");
        assert_eq!(o.status(), run.status(), "cordon run:\n{run}\nexec:\n{o}");
        assert_eq!(o.limits_hit(), ["cpu_time"], "{o}");
        assert_eq!(o.limits_hit(), run.limits_hit(), "{run}");
        let cpu = o.usage("cpu_user_ms") + o.usage("cpu_system_ms");
        // The limit is checked every 20 ms against the cgroup's count, or by the kernel's
        // RLIMIT_CPU; rusage rounds differently: near 1 s, not far past it.
        assert!((800..5000).contains(&cpu), "cpu {cpu}:\n{o}");
        assert!(o.elapsed < Duration::from_secs(15), "{o}");
    }
}

/// A command's Outcome lists the egress decisions made while it ran, and only those. The
/// request goes to the sandbox's own proxy, which refuses an IP literal (a loopback one)
/// without connecting anywhere.
#[test]
fn a_command_reports_the_egress_decisions_of_its_time() {
    let s = Server::start();
    let id = create(&s, json!({}));
    // 127.0.0.2: the sandbox's NO_PROXY sends 127.0.0.1 around the proxy.
    let fetch = r#"
import urllib.request
try:
    urllib.request.urlopen("http://127.0.0.2:9/", timeout=10)
except Exception as e:
    print("refused:", e)
"#;
    let o = exec(&s, &id, json!({"cmd": ["python3", "-c", fetch]}));
    o.assert_ok();
    assert!(o.stdout().contains("refused: HTTP Error 403"), "{o}");
    let net = o.v["network"].as_array().expect("network");
    assert_eq!(net.len(), 1, "{o}");
    assert_eq!(net[0]["host"], "127.0.0.2", "{o}");
    assert_eq!(net[0]["port"], 9, "{o}");
    assert_eq!(net[0]["verdict"], "deny", "{o}");
    // The next command made no request: its Outcome has none of the earlier one's.
    let o = exec(&s, &id, json!({"cmd": ["true"]}));
    assert_eq!(o.v["network"], json!([]), "{o}");
    // The sandbox's log keeps them all.
    let (st, v) = s.call("GET", &format!("/v1/sandboxes/{id}/network"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(1), "{v}");
}

// ---------------------------------------------------------------------------------------------
// Code cells

fn cell(s: &Server, id: &str, code: &str, timeout: &str) -> Value {
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/code"),
        Some(json!({"language": "python", "code": code, "timeout": timeout})),
    );
    assert_eq!(st, 200, "{v}");
    v
}

fn hits(v: &Value) -> Vec<&str> {
    v["limits_hit"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A cell says which limit ended it, in the words of an exec's Outcome; a kernel the limit
/// took is restarted with `state_lost`.
#[test]
fn a_cell_says_which_limit_ended_it() {
    let s = Server::start();
    let id = create(
        &s,
        json!({"memory": "64M", "pids": 16, "output_limit": "10K"}),
    );
    let ok = cell(&s, &id, "x = 41\nx + 1", "30s");
    assert_eq!(ok["status"], "exited", "{ok}");
    assert_eq!(hits(&ok), Vec::<&str>::new(), "{ok}");

    // Output past the cap.
    let v = cell(&s, &id, &payloads::OUTPUT_FLOOD.script, "30s");
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(hits(&v), ["output"], "{v}");
    assert_eq!(v["stdout_truncated"], true, "{v}");
    assert_eq!(v["stdout"].as_str().map(str::len), Some(10 << 10), "{v}");

    // The timeout: Python takes the interrupt and keeps its state.
    let v = cell(&s, &id, &payloads::CPU_SPIN.script, "2s");
    assert_eq!(v["status"], "timeout", "{v}");
    assert_eq!(hits(&v), ["wall_time"], "{v}");
    assert_eq!(v["error"]["name"], "KeyboardInterrupt", "{v}");
    let v = cell(&s, &id, "x", "30s");
    assert_eq!(v["state_lost"], false, "{v}");

    // A fork bomb: the cell goes on after the refusal and reports it; the kernel, and every
    // copy of it the bomb made, ends, and the next cell starts afresh.
    let v = cell(&s, &id, &payloads::PIDS_BOMB.script, "30s");
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(hits(&v), ["pids"], "{v}");
    assert_eq!(v["state_lost"], true, "{v}");
    let v = cell(&s, &id, "x", "30s");
    assert_eq!(v["state_lost"], true, "{v}");
    assert_eq!(v["error"]["name"], "NameError", "{v}");
    let count_python = r"for f in /proc/[0-9]*/cmdline; do tr '\0' '\n' < $f | head -n1; done | grep -c '^python3$'";
    let o = exec(&s, &id, json!({"cmd": count_python}));
    o.assert_ok();
    // The fresh kernel, and nothing else.
    assert_eq!(o.stdout().trim(), "1", "{o}");

    // Memory: with a cgroup, the OOM killer ends the kernel and the cell says so; without one
    // the allocation fails inside Python (as under `cordon run`) and the kernel lives on.
    let v = cell(&s, &id, &payloads::OOM.script, "30s");
    if o.has_cgroup() {
        assert_eq!(v["status"], "oom", "{v}");
        assert_eq!(hits(&v), ["memory"], "{v}");
        assert_eq!(v["state_lost"], true, "{v}");
        assert_eq!(v["error"]["name"], "KernelDied", "{v}");
    } else {
        assert_eq!(v["status"], "exited", "{v}");
        assert_eq!(hits(&v), Vec::<&str>::new(), "{v}");
        assert_eq!(v["error"]["name"], "MemoryError", "{v}");
    }
    let v = cell(&s, &id, "'alive'", "30s");
    assert_eq!(v["status"], "exited", "{v}");
    assert_eq!(v["results"][0]["text/plain"], "'alive'", "{v}");
}
