//! `cordon serve` end to end: a real server on loopback, real sandboxes, real HTTP.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::io::Read;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

mod serve;
use serve::{wait_until, Server};

impl Server {
    fn create(&self, body: Value) -> String {
        let (s, v) = self.call("POST", "/v1/sandboxes", Some(body));
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().expect("id").to_string()
    }

    fn exec(&self, id: &str, body: Value) -> Value {
        let (s, v) = self.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
        assert_eq!(s, 200, "{v}");
        v
    }
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(needle) && pid != std::process::id() {
            out.push(pid);
        }
    }
    out
}

#[test]
fn lifecycle_exec_and_state() {
    let s = Server::start();
    let id = s.create(json!({"metadata": {"agent": "a1"}, "env": {"GREETING": "hi"}}));
    let (st, info) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 200);
    assert_eq!(info["state"], "running");
    assert_eq!(info["enforcement"]["seccomp"], true);
    assert_eq!(info["metadata"]["agent"], "a1");

    let o = s.exec(
        &id,
        json!({"cmd": "echo $GREETING > /workspace/a.txt; echo out; echo err >&2; exit 3"}),
    );
    assert_eq!(o["status"], "exited");
    assert_eq!(o["exit_code"], 3);
    assert_eq!(o["stdout"], "out\n");
    assert_eq!(o["stderr"], "err\n");
    let o = s.exec(&id, json!({"cmd": ["cat", "/workspace/a.txt"]}));
    assert_eq!(o["stdout"], "hi\n", "state persists between commands");
    let o = s.exec(&id, json!({"cmd": ["pwd"], "cwd": "/tmp"}));
    assert_eq!(o["stdout"], "/tmp\n");
    let o = s.exec(&id, json!({"cmd": ["cat"], "stdin": "fed"}));
    assert_eq!(o["stdout"], "fed");
    let o = s.exec(&id, json!({"cmd": "echo $X", "env": {"X": "per-exec"}}));
    assert_eq!(o["stdout"], "per-exec\n");
    let o = s.exec(&id, json!({"cmd": ["sleep", "30"], "timeout": "300ms"}));
    assert_eq!(o["status"], "timeout");
    // The failing command reports before or after the init reports it started, as the two
    // processes happen to run; the answer must not depend on it (it once did).
    for _ in 0..20 {
        let o = s.exec(&id, json!({"cmd": ["definitely-not-a-command"]}));
        assert_eq!(o["status"], "error");
        assert_eq!(o["exit_code"], 127);
    }

    // List with a metadata filter.
    let other = s.create(json!({"metadata": {"agent": "a2"}}));
    let (_, l) = s.call("GET", "/v1/sandboxes?metadata.agent=a1", None);
    let ids: Vec<&str> = l["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);

    // TTL extension.
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/ttl"),
        Some(json!({"ttl": "2h"})),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v["expires_at"].as_u64().unwrap() > v["created_at"].as_u64().unwrap() + 7000);

    // Delete leaves nothing behind.
    let helper_marker = "__sandbox";
    let before = processes_with(helper_marker).len();
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 204);
    let (st, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 200);
    assert_eq!(v["state"], "deleted");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "true"})),
    );
    assert_eq!(st, 404, "{v}");
    wait_until("the helper to exit", || {
        processes_with(helper_marker).len() < before
    });
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{other}"), None);
    assert_eq!(st, 204);
}

#[test]
fn isolation_between_sandboxes() {
    let s = Server::start();
    let a = s.create(json!({}));
    let b = s.create(json!({}));
    // A background process in A.
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        Some(json!({"cmd": "sleep 60 # isolation-marker", "background": true})),
    );
    assert_eq!(st, 202);
    s.exec(
        &a,
        json!({"cmd": "echo secret-of-a > /tmp/s; echo x > /workspace/w"}),
    );
    let o = s.exec(&b, json!({"cmd": "ls /tmp /workspace; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"}));
    let seen = o["stdout"].as_str().unwrap();
    assert!(!seen.contains("sleep 60"), "B sees A's process: {o}");
    assert!(
        !seen.lines().any(|l| l == "s" || l == "w"),
        "B sees A's files: {o}"
    );
    let o = s.exec(&b, json!({"cmd": ["cat", "/tmp/s"]}));
    assert_ne!(o["exit_code"], 0);
    // Signalling every pid B can see cannot reach A's process.
    s.exec(&b, json!({"cmd": "kill -9 -1; true"}));
    let o = s.exec(
        &a,
        json!({"cmd": "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"}),
    );
    assert!(
        o["stdout"].as_str().unwrap().contains("sleep 60"),
        "A's process survived: {o}"
    );
}

#[test]
fn background_commands_and_streaming() {
    let s = Server::start();
    let id = s.create(json!({}));
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "read line; echo got:$line; sleep 0.2; echo done", "background": true})),
    );
    assert_eq!(st, 202, "{v}");
    let cid = v["command_id"].as_str().unwrap().to_string();
    let (st, l) = s.call("GET", &format!("/v1/sandboxes/{id}/commands"), None);
    assert_eq!(st, 200);
    assert_eq!(l["commands"][0]["running"], true);
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/stdin"),
        Some(json!({"data": "hello\n", "close": true})),
    );
    assert_eq!(st, 204);
    let (_, w) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/wait?timeout=10s"),
        None,
    );
    assert_eq!(w["running"], false, "{w}");
    assert_eq!(w["outcome"]["stdout"], "got:hello\ndone\n");

    // A long one, signalled.
    let (_, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sleep", "100"], "background": true})),
    );
    let cid = v["command_id"].as_str().unwrap().to_string();
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/signal"),
        Some(json!({"signal": "TERM"})),
    );
    assert_eq!(st, 204);
    let (_, w) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/wait?timeout=10s"),
        None,
    );
    assert_eq!(w["outcome"]["status"], "signaled", "{w}");
    assert_eq!(w["outcome"]["signal"], 15);

    // Server-sent events: chunks then the exit.
    let resp = s
        .req("POST", &format!("/v1/sandboxes/{id}/exec"))
        .set("Accept", "text/event-stream")
        .send_json(
            json!({"cmd": "for i in 1 2 3; do echo line$i; sleep 0.05; done; echo oops >&2"}),
        )
        .expect("stream");
    assert!(resp.content_type().contains("text/event-stream"));
    let mut body = String::new();
    resp.into_reader()
        .read_to_string(&mut body)
        .expect("read stream");
    let events: Vec<(String, Value)> = body
        .split("\n\n")
        .filter_map(|block| {
            let ev = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))?
                .to_string();
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((ev, serde_json::from_str(data).ok()?))
        })
        .collect();
    let stdout: String = events
        .iter()
        .filter(|(e, _)| e == "stdout")
        .map(|(_, d)| d["data"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(stdout, "line1\nline2\nline3\n");
    assert!(events
        .iter()
        .any(|(e, d)| e == "stderr" && d["data"] == "oops\n"));
    let (last, exit) = events.last().expect("events");
    assert_eq!(last, "exit");
    assert_eq!(exit["exit_code"], 0);
}

#[test]
fn files_api_and_traversal_attacks() {
    let s = Server::start();
    let id = s.create(json!({"disk": "2M"}));
    let host_secret_dir =
        std::env::temp_dir().join(format!("cordon-host-secret-{}", std::process::id()));
    std::fs::create_dir_all(&host_secret_dir).unwrap();
    let secret = host_secret_dir.join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();

    let put = |path: &str, data: &[u8]| -> (u16, Value) {
        let res = s
            .req("PUT", &format!("/v1/sandboxes/{id}/files?path={path}"))
            .send_bytes(data);
        let r = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{e}"),
        };
        let st = r.status();
        (
            st,
            serde_json::from_str(&r.into_string().unwrap_or_default()).unwrap_or(Value::Null),
        )
    };
    let get = |path: &str| -> (u16, Vec<u8>) {
        let res = s
            .req("GET", &format!("/v1/sandboxes/{id}/files?path={path}"))
            .call();
        let r = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{e}"),
        };
        let st = r.status();
        let mut v = Vec::new();
        r.into_reader().read_to_end(&mut v).unwrap();
        (st, v)
    };
    assert_eq!(put("/workspace/dir/hello.txt", b"hello").0, 201);
    assert_eq!(get("/workspace/dir/hello.txt"), (200, b"hello".to_vec()));
    let o = s.exec(
        &id,
        json!({"cmd": "cat /workspace/dir/hello.txt && echo more >> /workspace/dir/hello.txt"}),
    );
    assert_eq!(
        o["stdout"], "hello",
        "uploaded file visible and writable inside: {o}"
    );
    assert_eq!(
        get("dir/hello.txt").1,
        b"hellomore\n".to_vec(),
        "relative paths are under /workspace"
    );
    // Written as the sandbox's own user: the file and the directories made for it belong to
    // uid/gid 1000 inside, not to root (the server's identity) or to nobody.
    let o = s.exec(
        &id,
        json!({"cmd": "stat -c '%u:%g' /workspace/dir /workspace/dir/hello.txt"}),
    );
    assert_eq!(o["stdout"], "1000:1000\n1000:1000\n", "owners: {o}");
    let (st, l) = s.call(
        "GET",
        &format!("/v1/sandboxes/{id}/files/list?path=/workspace/dir"),
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(l["entries"][0]["name"], "hello.txt");
    assert_eq!(l["entries"][0]["type"], "file");
    assert_eq!(
        s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/files/mkdir"),
            Some(json!({"path": "/workspace/m/n"}))
        )
        .0,
        201
    );
    assert_eq!(
        s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/files/move"),
            Some(json!({"from": "/workspace/dir/hello.txt", "to": "/workspace/m/n/h.txt"}))
        )
        .0,
        204
    );
    assert_eq!(
        s.call(
            "GET",
            &format!("/v1/sandboxes/{id}/files/stat?path=/workspace/m/n/h.txt"),
            None
        )
        .1["size"],
        10
    );

    // Traversal and absolute host paths stay inside.
    for p in [
        "../../../../etc/shadow",
        "/../../etc/shadow",
        &secret.display().to_string(),
    ] {
        let (st, body) = get(p);
        assert_ne!(st, 200, "{p} returned {:?}", String::from_utf8_lossy(&body));
    }
    // A symlink the sandbox plants, pointing at the host secret, leads nowhere.
    s.exec(&id, json!({"cmd": format!("ln -s {} /workspace/link; ln -s / /workspace/rootlink; ln -s {} /workspace/dirlink", secret.display(), host_secret_dir.display())}));
    assert_ne!(get("/workspace/link").0, 200);
    assert_ne!(put("/workspace/dirlink/secret.txt", b"pwned").0, 201);
    let _ = put("/workspace/link", b"pwned");
    let (st, _) = s.call(
        "DELETE",
        &format!("/v1/sandboxes/{id}/files?path=/workspace/dirlink/secret.txt"),
        None,
    );
    assert_ne!(st, 204);
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "host secret",
        "host file untouched"
    );
    // Symlink-swap race: the sandbox flips a dir and a symlink to the host while we write.
    let (_, v) = s.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(json!({"cmd": format!("cd /workspace; for i in $(seq 3000); do rm -rf race; mkdir race; rm -rf race; ln -s {} race; done", host_secret_dir.display()), "background": true})));
    let race_cmd = v["command_id"].as_str().unwrap().to_string();
    for _ in 0..200 {
        let _ = put("/workspace/race/secret.txt", b"pwned");
        let _ = s.call(
            "DELETE",
            &format!("/v1/sandboxes/{id}/files?path=/workspace/race&recursive=true"),
            None,
        );
    }
    s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{race_cmd}/signal"),
        Some(json!({"signal": 9})),
    );
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "host secret",
        "race did not reach the host"
    );
    assert_eq!(std::fs::read_dir(&host_secret_dir).unwrap().count(), 1);

    // The race loop spent this key's request budget (100/s); let the bucket refill, or the
    // next upload is answered 429 before its body is read.
    std::thread::sleep(Duration::from_millis(1500));
    // Disk full answers 507; oversized upload 413 (server limit) is tested separately.
    let big = vec![b'x'; 3 << 20];
    let (st, v) = put("/workspace/big.bin", &big);
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "no_space");
    let _ = std::fs::remove_dir_all(&host_secret_dir);
}

#[test]
fn auth_quota_rate_limit_and_body_limit() {
    let dir = std::env::temp_dir().join(format!("cordon-serve-quota-{}", std::process::id()));
    let s = Server::start_in(dir.clone(), &["--max-upload", "1M"]);
    // No key, wrong key.
    let r = ureq::get(&format!("{}/v1/sandboxes", s.url)).call();
    assert!(matches!(r, Err(ureq::Error::Status(401, _))));
    let r = ureq::get(&format!("{}/v1/sandboxes", s.url))
        .set("Authorization", "Bearer cdn_wrong")
        .call();
    match r {
        Err(ureq::Error::Status(401, resp)) => {
            let v: Value = resp.into_json().unwrap();
            assert_eq!(v["error"]["code"], "unauthorized");
        }
        other => panic!("expected 401, got {other:?}"),
    }
    // healthz, metrics and openapi need no key.
    assert_eq!(
        ureq::get(&format!("{}/healthz", s.url))
            .call()
            .unwrap()
            .status(),
        200
    );
    let openapi: Value = ureq::get(&format!("{}/openapi.json", s.url))
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert!(openapi["paths"]["/v1/sandboxes/{id}/exec"].is_object());

    // A key limited to 1 sandbox and 5 requests/s, created with the CLI.
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "keys",
            "create",
            "--name",
            "tight",
            "--max-sandboxes",
            "1",
            "--rps",
            "5",
            "--data-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let tight = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let post = |body: Value| {
        ureq::post(&format!("{}/v1/sandboxes", s.url))
            .set("Authorization", &format!("Bearer {tight}"))
            .send_json(body)
    };
    let first = post(json!({})).expect("first sandbox");
    let sid = first.into_json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    match post(json!({})) {
        Err(ureq::Error::Status(429, resp)) => {
            assert!(resp.header("Retry-After").is_some());
            let v: Value = resp.into_json().unwrap();
            assert_eq!(v["error"]["code"], "quota_exceeded");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    // The other key cannot see this sandbox.
    assert_eq!(s.call("GET", &format!("/v1/sandboxes/{sid}"), None).0, 404);
    let mut limited = 0;
    for _ in 0..20 {
        let r = ureq::get(&format!("{}/v1/sandboxes", s.url))
            .set("Authorization", &format!("Bearer {tight}"))
            .call();
        if let Err(ureq::Error::Status(429, resp)) = r {
            assert!(resp.header("Retry-After").is_some());
            limited += 1;
        }
    }
    assert!(limited > 0, "rate limit never hit");
    // Upload over --max-upload.
    let id = s.create(json!({}));
    let r = s
        .req(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=/workspace/x"),
        )
        .send_bytes(&vec![0u8; 2 << 20]);
    assert!(matches!(r, Err(ureq::Error::Status(413, _))), "{r:?}");
    // Audit log has events with key ids and never the key or env values.
    s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "true", "env": {"TOKEN": "super-secret-value"}})),
    );
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    assert!(audit.contains("sandbox.create") && audit.contains("sandbox.exec"));
    assert!(
        !audit.contains("super-secret-value") && !audit.contains(&tight) && !audit.contains(&s.key)
    );
    // Metrics.
    let m = ureq::get(&format!("{}/metrics", s.url))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        m.contains("cordon_sandboxes{state=\"running\"}")
            && m.contains("cordon_exec_duration_seconds_bucket")
            && m.contains("cordon_denials_total{reason=\"rate_limit\"}"),
        "{m}"
    );
}

#[test]
fn ttl_expiry_and_restart_reaps() {
    let dir = std::env::temp_dir().join(format!("cordon-serve-restart-{}", std::process::id()));
    let mut s = Server::start_in(dir.clone(), &[]);
    let short = s.create(json!({"ttl": 1}));
    wait_until("the TTL reaper", || {
        s.call("GET", &format!("/v1/sandboxes/{short}"), None).1["state"] == "expired"
    });

    let live = s.create(json!({"ttl": "1h"}));
    s.exec(&live, json!({"cmd": "sleep 300 # restart-marker &"}));
    let (_, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{live}/exec"),
        Some(json!({"cmd": "sleep 300 # restart-marker-2", "background": true})),
    );
    assert!(v["command_id"].is_string());
    wait_until("the background command to start", || {
        !processes_with("restart-marker-2").is_empty()
    });
    let key = s.key.clone();
    s.kill9();
    // Nothing of the sandbox outlives the server.
    wait_until("sandbox processes to die", || {
        processes_with("restart-marker").is_empty()
    });
    let mut s2 = Server::start_in(dir.clone(), &[]);
    s2.key = key;
    let (st, v) = s2.call("GET", &format!("/v1/sandboxes/{live}"), None);
    assert_eq!(st, 200);
    assert_eq!(v["state"], "reaped", "{v}");
    assert!(v["ended_reason"].as_str().unwrap().contains("restart"));
}

#[test]
fn one_shot_run_endpoint() {
    let s = Server::start();
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": ["python3", "-c", "import os; print(os.getuid())"], "timeout": "10s"})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["status"], "exited");
    assert_eq!(o["stdout"], "1000\n");
    assert_eq!(o["enforcement"]["net_ns"], true);
    let (_, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": "sleep 5", "timeout": "200ms"})),
    );
    assert_eq!(o["status"], "timeout");
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": "true", "memory": "lots"})),
    );
    assert_eq!(st, 400);
    assert_eq!(o["error"]["code"], "invalid_request");
}

/// The one-shot runner reads its request (profile, env values) on its own stdin; the payload
/// gets only the request's `stdin`, never the request itself, nor a stdin left open.
#[test]
fn one_shot_run_stdin_is_the_requests_not_the_runners() {
    let s = Server::start();
    let secret = format!("secret-{}", serve::unique());
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": "cat; echo; cat", "stdin": "hello", "env": {"TOKEN": secret}})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["status"], "exited", "{o}");
    assert_eq!(o["stdout"], "hello\n", "{o}");
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": "cat", "timeout": "5s"})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(
        (&o["status"], &o["stdout"]),
        (&json!("exited"), &json!("")),
        "{o}"
    );
}

#[test]
fn per_sandbox_egress_policy_changes_at_runtime() {
    // An upstream on loopback, reached by name through the sandbox's proxy.
    let l = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 2048];
                let _ = std::io::Read::read(&mut s, &mut buf);
                let _ = std::io::Write::write_all(
                    &mut s,
                    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n",
                );
            });
        }
    });
    let s = Server::start();
    let id = s.create(json!({"network": {"allow": [format!("api.test:{port}"), "127.0.0.2:*"], "hosts": {"api.test": "127.0.0.2"}}}));
    let fetch = json!({"cmd": format!("python3 -c \"import urllib.request as u\ntry: print(u.urlopen('http://api.test:{port}/').read().decode(), end='')\nexcept Exception as e: print(getattr(e, 'code', e))\"")});
    assert_eq!(s.exec(&id, fetch.clone())["stdout"], "ok\n");
    // The owner closes the network while the sandbox runs.
    let (st, v) = s.call(
        "PUT",
        &format!("/v1/sandboxes/{id}/network"),
        Some(json!({"allow": []})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.exec(&id, fetch.clone())["stdout"], "403\n");
    let (_, net) = s.call("GET", &format!("/v1/sandboxes/{id}/network"), None);
    let verdicts: Vec<&str> = net["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, vec!["allow", "deny"], "{net}");
    // A sandbox created without a policy has no network at all, but can be opened later.
    let closed = s.create(json!({}));
    assert_eq!(s.exec(&closed, fetch.clone())["stdout"], "403\n");
    let (st, v) = s.call(
        "PUT",
        &format!("/v1/sandboxes/{closed}/network"),
        Some(json!({"allow": ["nonsense entry"]})),
    );
    assert_eq!(st, 400, "{v}");
}

/// A client may write to a background command's stdin the moment it has the command's id. In a
/// single-threaded runtime nothing else runs between the two calls below, so this fails if the
/// service installs the stdin writer later, from the task that pumps the command's output (as
/// it did: a loaded server answered such a write 409 "stdin of this command is closed").
#[test]
fn background_stdin_is_writable_as_soon_as_the_command_exists() {
    use cordon_server::{Config, Service};
    use cordon_service::Caller;
    let dir = std::env::temp_dir().join(format!(
        "cordon-test-bg-stdin-{}-{}",
        std::process::id(),
        line!()
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(async {
        let svc = Service::new(Config {
            helper_exe: env!("CARGO_BIN_EXE_cordon").into(),
            data_dir: dir.clone(),
            node: "node".into(),
            default_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(60),
            max_upload: 1 << 20,
            max_download: 1 << 20,
            default_exec_timeout: Duration::from_secs(30),
            max_exec_timeout: Duration::from_secs(60),
            ..Default::default()
        })
        .map_err(|e| format!("service: {}", e.message))?;
        let caller = Caller {
            key_id: "test".into(),
            max_sandboxes: 2,
        };
        let sb = svc
            .create(&caller, serde_json::from_value(json!({})).expect("request"))
            .await
            .map_err(|e| format!("create: {}", e.message))?;
        let steps = async {
            let cmd = svc
                .exec_background(
                    &caller,
                    &sb.id,
                    serde_json::from_value(
                        json!({"cmd": "read line; echo got:$line", "background": true}),
                    )
                    .expect("request"),
                )
                .await
                .map_err(|e| format!("exec: {}", e.message))?;
            svc.command_stdin(
                &caller,
                &sb.id,
                &cmd.command_id,
                serde_json::from_value(json!({"data": "hello\n", "close": true})).expect("request"),
            )
            .await
            .map_err(|e| format!("stdin right after the command was listed: {}", e.message))?;
            let done = svc
                .wait_command(&caller, &sb.id, &cmd.command_id, Duration::from_secs(10))
                .await
                .map_err(|e| format!("wait: {}", e.message))?;
            if done.stdout != "got:hello\n" {
                return Err(format!("the command read something else: {done:?}"));
            }
            Ok(())
        }
        .await;
        let _ = svc.delete(&caller, &sb.id).await;
        svc.shutdown_all().await;
        steps
    });
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// State letter of a host process (`/proc/PID/stat`, after the command name).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[test]
fn pause_freezes_every_process_and_resume_thaws() {
    let s = Server::start();
    let id = s.create(json!({}));
    let marker = format!("pause-marker-{}", serve::unique());
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({
            "cmd": format!("i=0; while :; do i=$((i+1)); echo $i > /workspace/n; sleep 0.05; done # {marker}"),
            "background": true
        })),
    );
    assert_eq!(st, 202, "{v}");
    let count = || -> u64 {
        match s
            .req(
                "GET",
                &format!("/v1/sandboxes/{id}/files?path=/workspace/n"),
            )
            .call()
        {
            Ok(r) => r
                .into_string()
                .unwrap_or_default()
                .trim()
                .parse()
                .unwrap_or(0),
            Err(_) => 0,
        }
    };
    wait_until("the counter to run", || count() >= 3);

    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "paused");
    let root = rustix::process::geteuid().is_root();
    let method = v["paused_by"].as_str().unwrap_or_default().to_string();
    if !root {
        assert_eq!(method, "sigstop", "rootless has no freezer cgroup to make");
    } else if std::path::Path::new("/sys/fs/cgroup/freezer").is_dir() {
        assert_eq!(method, "cgroup-freezer");
    }
    // From the host: every process of the counter is held.
    let pids = processes_with(&marker);
    assert!(!pids.is_empty());
    for p in &pids {
        match method.as_str() {
            "sigstop" => assert_eq!(proc_state(*p), Some('T'), "pid {p} runs on"),
            _ => {
                let cg = std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
                assert!(cg.contains("cordon-pause-"), "pid {p} is not frozen: {cg}");
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let frozen = count();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(count(), frozen, "a paused sandbox went on counting");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "true"})),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("sandbox_paused")),
        "{v}"
    );
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("already_paused")),
        "{v}"
    );

    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "running");
    assert!(v.get("paused_by").is_none());
    // It counts on from where it stood: the shell's memory was kept.
    wait_until("the counter to go on", || count() > frozen + 2);
    assert!(count() < frozen + 200);
    assert_eq!(s.exec(&id, json!({"cmd": "echo back"}))["stdout"], "back\n");

    // Deleting a paused sandbox ends every process (a frozen one would ignore SIGKILL).
    let (st, _) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert_eq!(st, 200);
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 204);
    wait_until("the paused processes to end", || {
        processes_with(&marker).is_empty()
    });
    if method == "cgroup-freezer" {
        let left = std::fs::read_dir("/sys/fs/cgroup/freezer")
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().contains(&id))
            })
            .unwrap_or(false);
        assert!(!left, "the freezer cgroup was left behind");
    }
}

/// Freezer cgroups (v1) whose name holds `id`: what is left of a paused sandbox's freeze.
fn freezer_cgroups_of(id: &str) -> Vec<String> {
    std::fs::read_dir("/sys/fs/cgroup/freezer")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("cordon-pause-") && n.contains(id))
                .collect()
        })
        .unwrap_or_default()
}

/// Creates a sandbox running two long sleeps (a foreground one and one detached from it),
/// whose shells' command lines carry `marker`, and pauses it; answers its id and how it was
/// paused.
fn paused_sandbox(s: &Server, marker: &str) -> (String, String) {
    let id = s.create(json!({"ttl": "1h"}));
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({
            "cmd": format!("sh -c 'sleep 1000; :' {marker}-detached & sleep 1000; : {marker}"),
            "background": true
        })),
    );
    assert_eq!(st, 202, "{v}");
    wait_until("both shells to run", || processes_with(marker).len() >= 2);
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert_eq!(st, 200, "{v}");
    let method = v["paused_by"].as_str().unwrap_or_default().to_string();
    if !rustix::process::geteuid().is_root() {
        assert_eq!(method, "sigstop", "rootless has no freezer cgroup to make");
    } else if std::path::Path::new("/sys/fs/cgroup/freezer").is_dir() {
        assert_eq!(method, "cgroup-freezer");
    }
    if method == "cgroup-freezer" {
        assert!(
            !freezer_cgroups_of(&id).is_empty(),
            "no freezer cgroup made"
        );
    }
    for p in processes_with(marker) {
        if method == "sigstop" {
            assert_eq!(proc_state(p), Some('T'), "pid {p} runs on");
        }
    }
    (id, method)
}

/// Checks from the host that nothing of a paused sandbox is left: no process with its marker,
/// no freezer cgroup of its.
fn assert_gone(id: &str, marker: &str, when: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && !(processes_with(marker).is_empty() && freezer_cgroups_of(id).is_empty())
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<String> = processes_with(marker)
        .into_iter()
        .map(|p| format!("{p} ({:?})", proc_state(p)))
        .collect();
    let cgroups = freezer_cgroups_of(id);
    // Leave nothing running on the host for the next test, whatever the verdict.
    for c in &cgroups {
        let dir = std::path::Path::new("/sys/fs/cgroup/freezer").join(c);
        for p in std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            if let Ok(p) = p.trim().parse::<i32>() {
                kill_on_host(p);
            }
        }
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        for _ in 0..100 {
            if std::fs::remove_dir(&dir).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for p in processes_with(marker) {
        kill_on_host(p as i32);
    }
    assert!(
        left.is_empty() && cgroups.is_empty(),
        "{when}: a paused sandbox outlived its server: processes {left:?}, freezer cgroups {cgroups:?}"
    );
}

fn kill_on_host(pid: i32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        let _ = rustix::process::kill_process(p, rustix::process::Signal::CONT);
    }
}

#[test]
fn a_paused_sandbox_ends_with_its_server_killed_and_with_a_clean_stop() {
    let dir = std::env::temp_dir().join(format!(
        "cordon-serve-pause-kill-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    let mut s = Server::start_in(dir.clone(), &[]);
    let marker = format!("paused-kill-marker-{}", serve::unique());
    let (id, _) = paused_sandbox(&s, &marker);
    // The server dies with the sandbox frozen: its helper must still end it.
    s.kill9();
    assert_gone(&id, &marker, "after kill -9 of the server");

    // The next server on the data dir, and its clean stop, leave nothing either; a sandbox
    // paused under it ends with its clean stop.
    let key = s.key.clone();
    let mut s2 = Server::start_in(dir.clone(), &[]);
    s2.key = key;
    let marker2 = format!("paused-stop-marker-{}", serve::unique());
    let (id2, _) = paused_sandbox(&s2, &marker2);
    drop(s2);
    assert_gone(&id, &marker, "after the next server's clean stop");
    assert_gone(&id2, &marker2, "after a clean stop with a sandbox paused");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server's children running `cordon __sandbox` (the sandboxes' helpers).
fn helpers_of(server: u32) -> Vec<u32> {
    processes_with("__sandbox")
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    let rest = st[st.rfind(')')? + 1..].to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(server)
        })
        .collect()
}

#[test]
fn the_next_server_ends_a_paused_sandbox_whose_server_and_helper_were_killed() {
    let dir = std::env::temp_dir().join(format!(
        "cordon-serve-pause-leftover-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    let mut s = Server::start_in(dir.clone(), &[]);
    let marker = format!("paused-leftover-marker-{}", serve::unique());
    let (id, method) = paused_sandbox(&s, &marker);
    // The server and its helper die at once (the OOM killer, a kill of the process group):
    // nobody is left to thaw the sandbox, and a frozen process ignores SIGKILL.
    let helpers = helpers_of(s.child.id());
    assert_eq!(helpers.len(), 1, "one helper per sandbox");
    for h in helpers {
        kill_on_host(h as i32);
    }
    s.kill9();
    if method == "cgroup-freezer" {
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !processes_with(&marker).is_empty(),
            "the frozen sandbox was expected to be held until someone thaws it"
        );
    }
    // The next server on the same data dir ends it as it starts.
    let s2 = Server::start_in(dir.clone(), &[]);
    assert_gone(&id, &marker, "after the next server started");
    drop(s2);
    assert_gone(&id, &marker, "after the next server's clean stop");
    let _ = std::fs::remove_dir_all(&dir);
}
