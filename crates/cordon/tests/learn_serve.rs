//! Learn mode for persistent sandboxes, against a real `cordon serve`: a sandbox created with
//! `learn: true` records what its commands use across all its execs; its learned profile
//! (`GET /v1/sandboxes/{id}/learned-profile`, while it runs and after its delete) replays the
//! task under `cordon run --profile`, and the task changed to reach another host or run another
//! program is refused; another key's caller gets none of it. Loopback only: upstreams listen on 127.0.0.x, names are pinned in the
//! sandbox's `network.hosts`, so no packet leaves the machine.

mod common;
mod serve;

use std::process::Command;
use std::sync::atomic::Ordering;

use common::upstream::Upstream;
use common::HostDir;
use serde_json::{json, Value};
use serve::Server;

/// python3 fetching `url` through the proxy: prints the status (or the HTTP error's code).
fn fetch(url: &str) -> String {
    format!(
        "import urllib.request, urllib.error\n\
         try:\n    r = urllib.request.urlopen('{url}', timeout=10); print(r.status, r.read().decode(), end='')\n\
         except urllib.error.HTTPError as e:\n    print(e.code)\n"
    )
}

/// `cordon run --json --profile FILE -- ARGV`: the Outcome.
fn replay(file: &std::path::Path, argv: &[&str]) -> Value {
    let out = Command::new(common::cordon_bin())
        .args(["run", "--json", "--profile"])
        .arg(file)
        .arg("--")
        .args(argv)
        .output()
        .expect("run cordon");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("outcome")
}

fn exec(s: &Server, id: &str, cmd: &[&str]) -> Value {
    let (st, o) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({ "cmd": cmd })),
    );
    assert_eq!(st, 200, "{o}");
    o
}

/// A second key of the server (the registry takes keys while it runs).
fn second_key(s: &Server) -> String {
    let out = Command::new(common::cordon_bin())
        .args(["keys", "create", "--name", "other", "--data-dir"])
        .arg(&s.data_dir)
        .output()
        .expect("cordon keys create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `GET path` with `key`: its status.
fn status_as(s: &Server, key: &str, path: &str) -> u16 {
    match ureq::get(&format!("{}{path}", s.url))
        .set("Authorization", &format!("Bearer {key}"))
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(st, _)) => st,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

#[test]
fn a_learning_sandbox_learns_its_commands_and_its_profile_replays_them_and_nothing_else() {
    let a = Upstream::start("127.0.0.2");
    let c = Upstream::start("127.0.0.3");
    let s = Server::start();
    // The learning sandbox's own allowance is wide: both names, any port.
    let (st, info) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({
            "learn": true,
            "network": {
                "allow": ["a.test:*", "c.test:*", "127.0.0.2:*", "127.0.0.3:*"],
                "hosts": {"a.test": "127.0.0.2", "c.test": "127.0.0.3"}
            }
        })),
    );
    assert_eq!(st, 201, "{info}");
    let id = info["id"].as_str().unwrap().to_string();
    let task = fetch(&format!("http://a.test:{}/", a.port));
    let o = exec(&s, &id, &["python3", "-c", &task]);
    assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");
    let o = exec(&s, &id, &["/bin/sh", "-c", "echo from-sh"]);
    assert_eq!(o["stdout"], "from-sh\n", "{o}");

    // While it runs: what it used so far.
    let (st, learned) = s.call("GET", &format!("/v1/sandboxes/{id}/learned-profile"), None);
    assert_eq!(st, 200, "{learned}");
    assert_eq!(learned["ended"], false, "{learned}");
    assert_eq!(learned["commands"], 2, "{learned}");
    let text = learned["toml"].as_str().unwrap();
    assert!(text.contains("extends = \"default\""), "{text}");
    assert!(
        text.contains(&format!("\"a.test:{}\",  # reached", a.port)),
        "{text}"
    );
    for program in ["/usr/bin/python3", "/bin/sh"] {
        assert!(
            text.contains(&format!("\"{program}\"")),
            "{program}:\n{text}"
        );
    }
    assert!(!text.contains("c.test") && !text.contains(":*"), "{text}");
    assert!(text.contains("memory = "), "{text}");
    // The JSON form is the same profile.
    let allow = learned["profile"]["exec"]["allow"].as_array().unwrap();
    assert!(allow.iter().any(|p| p == "/usr/bin/python3"), "{learned}");
    assert_eq!(learned["profile"]["extends"], "default", "{learned}");
    // Another key's caller learns nothing of it, running or ended.
    let other = second_key(&s);
    let route = format!("/v1/sandboxes/{id}/learned-profile");
    assert_eq!(status_as(&s, &other, &route), 404);

    // After its delete: the profile of everything it did, kept.
    let o = exec(&s, &id, &["/usr/bin/env", "true"]);
    assert_eq!(o["exit_code"], 0, "{o}");
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 204);
    let (st, learned) = s.call("GET", &format!("/v1/sandboxes/{id}/learned-profile"), None);
    assert_eq!(st, 200, "{learned}");
    assert_eq!(learned["ended"], true, "{learned}");
    assert_eq!(learned["commands"], 3, "{learned}");
    let text = learned["toml"].as_str().unwrap();
    assert!(text.contains("\"/usr/bin/env\""), "{text}");
    assert_eq!(status_as(&s, &other, &route), 404);

    let dir = HostDir::new("learn-serve");
    let file = dir.join("learned.toml");
    std::fs::write(&file, text).unwrap();
    // The task replays under the learned profile.
    let o = replay(&file, &["python3", "-c", &task]);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "200 hello from upstream\n", "{o}");
    // Changed to reach the other host: refused by the proxy, which never connects.
    let before = c.hits.load(Ordering::SeqCst);
    let other = fetch(&format!("http://c.test:{}/", c.port));
    let o = replay(&file, &["python3", "-c", &other]);
    assert_eq!(o["stdout"], "403\n", "another host: {o}");
    assert!(
        o["network"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["host"] == "c.test" && e["verdict"] == "deny"),
        "{o}"
    );
    assert_eq!(c.hits.load(Ordering::SeqCst), before);
    // Changed to run a program it never ran: refused by the learned programs allowlist.
    let o = replay(&file, &["/usr/bin/id", "-u"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    assert_eq!(o["stdout"], "", "{o}");
}

#[test]
fn a_sandbox_made_without_learn_has_no_learned_profile() {
    let s = Server::start();
    let (st, info) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(st, 201, "{info}");
    let id = info["id"].as_str().unwrap();
    let (st, e) = s.call("GET", &format!("/v1/sandboxes/{id}/learned-profile"), None);
    assert_eq!(st, 409, "{e}");
    let (st, e) = s.call("GET", "/v1/sandboxes/nope/learned-profile", None);
    assert_eq!(st, 404, "{e}");
}

#[test]
fn exec_allow_on_create_is_enforced_across_commands() {
    let s = Server::start();
    let (st, info) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"exec_allow": ["/usr/bin/python3"]})),
    );
    assert_eq!(st, 201, "{info}");
    let id = info["id"].as_str().unwrap();
    let o = exec(&s, id, &["python3", "-c", "print(6*7)"]);
    assert_eq!(o["stdout"], "42\n", "{o}");
    // A program not listed, and the same copied to /tmp: both refused by the kernel.
    let o = exec(&s, id, &["/bin/sh", "-c", "echo escaped"]);
    assert_eq!(o["exit_code"], 126, "{o}");
    let o = exec(
        &s,
        id,
        &[
            "python3",
            "-c",
            "import shutil, subprocess\nshutil.copy('/usr/bin/python3', '/tmp/p')\n\
             import os; os.chmod('/tmp/p', 0o755)\n\
             try:\n    subprocess.run(['/tmp/p', '-c', 'print(1)']); print('ran')\n\
             except PermissionError:\n    print('refused')\n",
        ],
    );
    assert_eq!(o["stdout"], "refused\n", "{o}");
    let (st, e) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"exec_allow": ["relative/path"]})),
    );
    assert_eq!(st, 400, "{e}");
}

/// A learning sandbox learns the host files its commands ask for, as `cordon run --learn`
/// does: a command reading a host file outside the sandbox's view (it fails there) shows up in
/// the learned profile as a read-only bind naming the program, and the profile replays it; a
/// host path whose name would write TOML of its own (a newline and a table header), and one
/// that is not UTF-8 (which the helper's message cannot carry as it is), are left out, with a
/// note, and do not cost the rest of what was learned.
#[test]
fn a_learning_sandbox_learns_the_host_files_its_commands_read_and_leaves_out_hostile_names() {
    let data = HostDir::new("learn-serve-data");
    data.file("input.txt", "INPUT FROM THE HOST\n", 0o644);
    let hostile = HostDir::new("learn-serve-hostile");
    let evil = "evil\n[exec]\nallow = [\"sh\"]";
    hostile.file(evil, "x\n", 0o644);
    let s = Server::start();
    let (st, info) = s.call("POST", "/v1/sandboxes", Some(json!({ "learn": true })));
    assert_eq!(st, 201, "{info}");
    let id = info["id"].as_str().unwrap().to_string();
    let input = data.join("input.txt");
    let input = input.to_str().unwrap();
    let o = exec(&s, &id, &["/bin/cat", input]);
    assert_ne!(o["exit_code"], 0, "the sandbox has no such file: {o}");
    let evil_path = hostile.join(evil);
    let o = exec(&s, &id, &["/bin/cat", evil_path.to_str().unwrap()]);
    assert_ne!(o["exit_code"], 0, "{o}");
    {
        use std::os::unix::ffi::OsStrExt;
        let bad = hostile.path.join(std::ffi::OsStr::from_bytes(b"bad\xff"));
        std::fs::write(bad, "x\n").unwrap();
    }
    let cat_bad = format!("/bin/cat \"{}/$(printf 'bad\\377')\"", hostile.str());
    let o = exec(&s, &id, &["/bin/sh", "-c", &cat_bad]);
    assert_ne!(o["exit_code"], 0, "{o}");

    let (st, learned) = s.call("GET", &format!("/v1/sandboxes/{id}/learned-profile"), None);
    assert_eq!(st, 200, "{learned}");
    let text = learned["toml"].as_str().unwrap();
    assert!(
        text.contains(&format!("\"{input}\",  # read during learning by cat")),
        "{text}"
    );
    assert!(
        text.contains("2 path(s) the run asked for were not learned"),
        "{text}"
    );
    assert!(!text.contains("evil"), "{text}");
    let ro = learned["profile"]["filesystem"]["ro"].as_array().unwrap();
    assert_eq!(ro, &vec![json!(input)], "{learned}");
    assert_eq!(
        learned["profile"]["exec"]["allow"],
        json!(["/bin/cat", "/bin/sh"]),
        "{learned}"
    );

    // Kept after its delete, and the learned profile replays the command.
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 204);
    let (st, learned) = s.call("GET", &format!("/v1/sandboxes/{id}/learned-profile"), None);
    assert_eq!(st, 200, "{learned}");
    let text = learned["toml"].as_str().unwrap();
    assert!(text.contains(&format!("\"{input}\"")), "{text}");
    let dir = HostDir::new("learn-serve-files");
    let file = dir.join("learned.toml");
    std::fs::write(&file, text).unwrap();
    let o = replay(&file, &["/bin/cat", input]);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "INPUT FROM THE HOST\n", "{o}");
}

/// The learned profile of an ended sandbox survives a restart of `cordon serve` on the same
/// data directory: the same profile for its key (kept in a 0600 file), 404 for another key.
#[test]
fn an_ended_sandboxs_learned_profile_survives_a_server_restart_for_its_key_only() {
    use std::os::unix::fs::MetadataExt;
    let data = HostDir::new("learn-serve-restart-data");
    data.file("input.txt", "kept\n", 0o644);
    let input = data.join("input.txt");
    let input = input.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!(
        "cordon-learn-restart-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    let s = Server::start_in(dir.clone(), &[]);
    let (st, info) = s.call("POST", "/v1/sandboxes", Some(json!({ "learn": true })));
    assert_eq!(st, 201, "{info}");
    let id = info["id"].as_str().unwrap().to_string();
    exec(&s, &id, &["/bin/cat", input]);
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 204);
    let route = format!("/v1/sandboxes/{id}/learned-profile");
    let (st, before) = s.call("GET", &route, None);
    assert_eq!(st, 200, "{before}");
    assert!(before["toml"].as_str().unwrap().contains(input), "{before}");
    let other = second_key(&s);
    let key = s.key.clone();
    drop(s);

    let mut s = Server::start_in(dir.clone(), &[]);
    s.key = key;
    s.scratch = true;
    let (st, after) = s.call("GET", &route, None);
    assert_eq!(st, 200, "{after}");
    assert_eq!(after, before);
    assert_eq!(after["ended"], true, "{after}");
    assert_eq!(status_as(&s, &other, &route), 404);
    // On disk: private to the server's user.
    let mut files = Vec::new();
    for k in std::fs::read_dir(dir.join("learned")).unwrap().flatten() {
        assert_eq!(k.metadata().unwrap().mode() & 0o777, 0o700);
        for f in std::fs::read_dir(k.path()).unwrap().flatten() {
            files.push(f.metadata().unwrap().mode() & 0o777);
        }
    }
    assert_eq!(files, vec![0o600]);
}
