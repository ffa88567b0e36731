//! Egress end to end: sandboxes reach only what the allowlist names, through the proxy, and
//! every decision is recorded. Loopback only: upstreams listen on 127.0.0.x, names are mapped
//! with --add-host, so no DNS query and no packet ever leaves the machine.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::upstream::Upstream;

fn cordon(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["run", "--json", "--timeout", "20s"])
        .args(args)
        .output()
        .expect("run cordon");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("outcome")
}

fn allow_args(port: u16) -> Vec<String> {
    vec![
        "--allow-net".into(),
        format!("allowed.test:{port}"),
        // The test upstream is on loopback, which the proxy refuses unless an IP entry allows it.
        "--allow-net".into(),
        "127.0.0.2:*".into(),
        "--add-host".into(),
        "allowed.test:127.0.0.2".into(),
    ]
}

fn events(o: &Value) -> Vec<(String, String, String)> {
    o["network"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["host"].as_str().unwrap().to_string(),
                e["verdict"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn allowed_domain_works_with_ordinary_clients() {
    let up = Upstream::start("127.0.0.2");
    let p = up.port();
    let mut args: Vec<String> = allow_args(p);
    let script = format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://allowed.test:{p}/\").read().decode(), end=\"\")'; \
         if command -v curl >/dev/null; then curl -sS http://allowed.test:{p}/; else echo 'hello from upstream'; fi; \
         node -e 'const http=require(\"http\"); const u=new URL(process.env.HTTP_PROXY); http.get({{host:u.hostname,port:u.port,path:\"http://allowed.test:{p}/\",headers:{{Host:\"allowed.test:{p}\"}}}}, r=>{{let d=\"\";r.on(\"data\",c=>d+=c);r.on(\"end\",()=>process.stdout.write(d))}})'"
    );
    args.extend(["--".into(), "sh".into(), "-c".into(), script]);
    let o = cordon(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o["exit_code"], 0, "{o}");
    assert_eq!(o["stdout"], "hello from upstream\n".repeat(3), "{o}");
    let ev = events(&o);
    assert!(
        ev.len() >= 2
            && ev
                .iter()
                .all(|(h, v, _)| h == "allowed.test" && v == "allow"),
        "{ev:?}"
    );
    assert!(o["network"][0]["bytes"].as_u64().unwrap() > 0);
    assert!(up.hits.load(Ordering::SeqCst) >= 2);
}

#[test]
fn bypasses_are_refused_and_recorded() {
    let up = Upstream::start("127.0.0.2");
    let p = up.port();
    let mut args: Vec<String> = allow_args(p);
    // Names that resolve to private, metadata or loopback addresses the allowlist does not list.
    args.extend([
        "--allow-net".into(),
        format!("meta.test:{p}"),
        "--add-host".into(),
        "meta.test:169.254.169.254".into(),
    ]);
    args.extend([
        "--allow-net".into(),
        format!("private.test:{p}"),
        "--add-host".into(),
        "private.test:10.0.0.1".into(),
    ]);
    let script = format!(
        r#"
import json, socket, urllib.request, os
R = {{}}
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__
R["other_domain"] = get("http://other.test:{p}/")
R["suffix_trick"] = get("http://allowed.test.evil.test:{p}/")
R["prefix_trick"] = get("http://evilallowed.test:{p}/")
R["wrong_port"] = get("http://allowed.test:1/")
R["ip_literal_decimal"] = get("http://2130706435:{p}/")  # 127.0.0.3, not listed
R["ip_literal_hex"] = get("http://0x7f000003:{p}/")
R["metadata_by_name"] = get("http://meta.test:{p}/")
R["private_by_name"] = get("http://private.test:{p}/")
R["allowed"] = get("http://allowed.test:{p}/")
# Host header that disagrees with the target.
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
R["host_mismatch"] = s.recv(100).split(b" ")[1].decode()
# Ignoring the proxy: straight to the upstream's address.
try:
    socket.create_connection(("127.0.0.2", {p}), timeout=5)
    R["direct"] = "connected"
except OSError as e:
    R["direct"] = e.errno
print(json.dumps(R))
"#
    );
    args.extend(["--".into(), "python3".into(), "-c".into(), script]);
    let hits_before = up.hits.load(Ordering::SeqCst);
    let o = cordon(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o["exit_code"], 0, "{o}");
    let r: Value = serde_json::from_str(o["stdout"].as_str().unwrap()).unwrap();
    for k in [
        "other_domain",
        "suffix_trick",
        "prefix_trick",
        "wrong_port",
        "ip_literal_decimal",
        "ip_literal_hex",
        "metadata_by_name",
        "private_by_name",
    ] {
        assert_eq!(r[k], 403, "{k}: {r}");
    }
    assert_eq!(r["host_mismatch"], "403", "{r}");
    assert_eq!(r["allowed"], 200);
    assert_eq!(
        r["direct"],
        libc::ECONNREFUSED,
        "a direct connection must not get out: {r}"
    );
    // Only the one allowed request reached the upstream.
    assert_eq!(up.hits.load(Ordering::SeqCst) - hits_before, 1);
    let ev = events(&o);
    let denied: Vec<_> = ev.iter().filter(|(_, v, _)| v == "deny").collect();
    assert!(denied.len() >= 9, "{ev:?}");
    assert!(denied.iter().all(|(_, _, reason)| !reason.is_empty()));
    assert!(
        ev.iter()
            .any(|(h, v, r)| h == "meta.test" && v == "deny" && r.contains("169.254.169.254")),
        "{ev:?}"
    );
    assert!(
        ev.iter()
            .any(|(h, v, r)| h == "private.test" && v == "deny" && r.contains("10.0.0.1")),
        "{ev:?}"
    );
}

/// Without an allowlist nothing gets out: a socket of the program's own finds only the
/// namespace's loopback, and a request through the proxy the variables name (there only to
/// report it) is refused as "network is off" — the upstream is never reached either way.
#[test]
fn no_network_without_an_allowlist() {
    let up = Upstream::start("127.0.0.2");
    let p = up.port();
    let script = format!(
        "import os, socket, urllib.request\ntry:\n    socket.create_connection(('127.0.0.2', {p}), timeout=5)\nexcept OSError as e:\n    print(e.errno)\ntry:\n    urllib.request.urlopen('http://127.0.0.2:{p}/', timeout=5)\nexcept Exception as e:\n    print(e)"
    );
    let o = cordon(&["--", "python3", "-c", &script]);
    assert_eq!(
        o["stdout"],
        format!("{}\nHTTP Error 403: Forbidden\n", libc::ECONNREFUSED),
        "{o}"
    );
    let net = o["network"].as_array().expect("network events");
    assert_eq!(net.len(), 1, "{o}");
    assert_eq!(net[0]["verdict"], "deny", "{o}");
    assert_eq!(net[0]["reason"], "network is off", "{o}");
    assert_eq!(up.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn one_sandbox_flooding_does_not_stop_another() {
    let up = Upstream::start("127.0.0.2");
    let p = up.port();
    // Sandbox A: a connection flood plus slow-loris clients against its own proxy.
    let mut a: Vec<String> = allow_args(p);
    a.extend(["--".into(), "python3".into(), "-c".into(), "import socket, time\nsocks = []\nfor i in range(300):\n    try:\n        s = socket.create_connection(('127.0.0.1', 3128)); s.sendall(b'GET http://allowed.test/ HTTP/1.1\\r\\n'); socks.append(s)\n    except OSError:\n        pass\ntime.sleep(6)\n".into()]);
    let a_args: Vec<String> = a;
    let flood =
        std::thread::spawn(move || cordon(&a_args.iter().map(String::as_str).collect::<Vec<_>>()));
    std::thread::sleep(Duration::from_millis(1500));
    // Sandbox B, meanwhile, gets its answer promptly.
    let mut b: Vec<String> = allow_args(p);
    b.extend(["--".into(), "python3".into(), "-c".into(), format!("import urllib.request, time\nt = time.time()\nprint(urllib.request.urlopen('http://allowed.test:{p}/', timeout=10).read().decode(), end='')\nprint(round(time.time() - t, 2))")]);
    let o = cordon(&b.iter().map(String::as_str).collect::<Vec<_>>());
    let out = o["stdout"].as_str().unwrap();
    assert!(out.starts_with("hello from upstream\n"), "{o}");
    let secs: f64 = out.lines().nth(1).unwrap().parse().unwrap();
    assert!(secs < 3.0, "B waited {secs}s behind A's flood");
    let fo = flood.join().unwrap();
    assert_eq!(fo["status"], "exited", "{fo}");
}

#[test]
fn bad_allowlist_entries_fail_before_running() {
    for bad in [
        "",
        "has space",
        "http://x.test",
        "*.",
        "0.0.0.0/0",
        "x.test:99999",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["run", "--allow-net", bad, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("allow-net") && !err.contains("panicked"),
            "{bad:?}: {err}"
        );
    }
}
