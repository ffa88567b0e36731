//! `cordon gateway` over stdio against hostile input, spoken to line by line: malformed
//! JSON-RPC, unknown methods, an oversized message, an upstream that never starts (it
//! answers garbage) and one that answers a call with garbage. Every one gets a clear error
//! and the gateway keeps serving. The upstreams are real processes in real sandboxes (a
//! stdlib-only Python MCP server here; the official SDK's end-to-end tests are in
//! clients/gateway-e2e).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::HostDir;
use serde_json::{json, Value};

const RAW_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [
            {"name": "echo", "description": "Echo x", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}},
            {"name": "garbage", "description": "Answers garbage", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        if m["params"]["name"] == "garbage":
            print("this is not JSON-RPC {{{", flush=True)
            continue
        result = {"content": [{"type": "text", "text": m["params"].get("arguments", {}).get("x", "")}]}
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

struct Gateway {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Gateway {
    fn start(config: &std::path::Path) -> Gateway {
        let mut child = Command::new(common::cordon_bin())
            .args(["gateway", "--config"])
            .arg(config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cordon gateway");
        let stdin = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Gateway {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).expect("write");
        self.stdin.write_all(b"\n").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// The next message with this id (others, e.g. notifications, are skipped).
    fn answer(&self, id: &Value, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer for id {id} within {within:?}"));
            let v: Value = serde_json::from_str(&line).expect("the gateway writes JSON");
            if v.get("id") == Some(id) {
                return v;
            }
        }
    }

    fn call(&mut self, id: i64, tool: &str, args: Value) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        self.send(msg.to_string().as_bytes());
        self.answer(&json!(id), Duration::from_secs(60))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn gateway_survives_bad_input_and_garbage_upstreams() {
    let dir = HostDir::new("gateway");
    let server = dir.file("raw_server.py", RAW_SERVER, 0o644);
    let config = dir.file(
        "gateway.toml",
        &format!(
            r#"
[gateway]
default = "allow"
audit = "{audit}"

[servers.raw]
command = ["/usr/bin/python3", "{server}"]
ro = ["{dir}"]
call_timeout = "3s"

[servers.broken]
command = ["/bin/sh", "-c", "echo garbage; sleep 30"]
"#,
            audit = dir.join("audit.jsonl").display(),
            server = server.display(),
            dir = dir.str(),
        ),
        0o644,
    );
    let mut gw = Gateway::start(&config);
    gw.send(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    let init = gw.answer(&json!(0), Duration::from_secs(60));
    assert!(
        init["result"]["serverInfo"]["name"] == "cordon-gateway",
        "{init}"
    );
    gw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    gw.send(b"hello there");
    let e = gw.answer(&Value::Null, Duration::from_secs(10));
    assert_eq!(e["error"]["code"], -32700, "{e}");

    gw.send(br#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#);
    let e = gw.answer(&json!(2), Duration::from_secs(10));
    assert_eq!(e["error"]["code"], -32601, "{e}");

    let mut big = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"raw.echo","arguments":{"x":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 17 << 20));
    big.extend_from_slice(br#""}}}"#);
    gw.send(&big);
    let e = gw.answer(&json!(3), Duration::from_secs(30));
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("over the limit"),
        "{e}"
    );

    gw.send(br#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#);
    let list = gw.answer(&json!(4), Duration::from_secs(30));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"raw.echo") && names.contains(&"raw.garbage"),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.starts_with("broken.")), "{names:?}");

    let r = gw.call(5, "raw.echo", json!({"x": "hi"}));
    assert_eq!(r["result"]["content"][0]["text"], "hi", "{r}");

    // Garbage for an answer: the call fails at the server's call_timeout, the server is
    // restarted, and the next call is served.
    let t0 = Instant::now();
    let r = gw.call(6, "raw.garbage", json!({}));
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("restarted"),
        "{r}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let r = gw.call(7, "raw.echo", json!({"x": "again"}));
    assert_eq!(r["result"]["content"][0]["text"], "again", "{r}");

    // The server that never started: a clear error naming it.
    let r = gw.call(8, "broken.anything", json!({}));
    let msg = r["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("servers.broken") && msg.contains("not running"),
        "{r}"
    );

    // Schema checks hold in allow mode too: the tool's error result, never the upstream.
    let r = gw.call(9, "raw.echo", json!({"x": 5}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let said = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        said.contains("inputSchema") && !said.contains("again"),
        "{r}"
    );
    drop(gw);
    let out = Command::new(common::cordon_bin())
        .args(["audit", "verify"])
        .arg(dir.join("audit.jsonl"))
        .output()
        .expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A stdlib-only MCP server with one tool: `delete_file {"path"}` unlinks the path inside its
/// sandbox.
const FILES_SERVER: &str = r#"
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "files", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "delete_file", "description": "Delete a file",
                             "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]}
    elif method == "tools/call":
        path = m["params"]["arguments"]["path"]
        try:
            os.unlink(path)
            result = {"content": [{"type": "text", "text": "deleted " + path}]}
        except OSError as e:
            result = {"content": [{"type": "text", "text": str(e)}], "isError": True}
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

/// The host side of issue 24's scenario: `srv/system` and `srv/files`, writable by whatever
/// host uid the sandbox runs as, a file in each, and the planted `files/link -> ../system`.
struct SrvTree {
    host: HostDir,
    server_dir: HostDir,
}

impl SrvTree {
    fn new() -> SrvTree {
        let host = HostDir::new("gwsrv");
        for d in ["srv", "srv/system", "srv/files"] {
            std::fs::create_dir(host.join(d)).expect("mkdir");
            common::set_mode(&host.join(d), 0o777);
        }
        host.file("srv/system/x", "precious", 0o666);
        host.file("srv/files/y", "scratch", 0o666);
        std::os::unix::fs::symlink("../system", host.join("srv/files/link")).expect("symlink");
        let server_dir = HostDir::new("gwsrvbin");
        server_dir.file("files_server.py", FILES_SERVER, 0o644);
        SrvTree { host, server_dir }
    }

    /// A gateway config whose server `files` gets its binds from its profile file only.
    fn config(&self, profile_rw: &[&str], deny: &str) -> std::path::PathBuf {
        let rw: Vec<String> = profile_rw
            .iter()
            .map(|b| format!("\"{}/srv/{b}\"", self.host.str()))
            .collect();
        let profile = self.host.file(
            "files-profile.toml",
            &format!("[filesystem]\nrw = [{}]\n", rw.join(", ")),
            0o644,
        );
        self.host.file(
            "gateway.toml",
            &format!(
                r#"
[gateway]
default = "allow"
audit = "{audit}"

[servers.files]
command = ["/usr/bin/python3", "{server}/files_server.py"]
profile = "{profile}"
ro = ["{server}"]

[[rules]]
tool = "files.delete_file"
paths = {{ path = {{ deny = ["{deny}"] }} }}
"#,
                audit = self.host.join("audit.jsonl").display(),
                server = self.server_dir.str(),
                profile = profile.display(),
            ),
            0o644,
        )
    }
}

#[test]
fn a_denied_path_cannot_be_reached_through_a_bind_the_servers_profile_brings() {
    let t = SrvTree::new();
    let config = t.config(&["system:/system", "files:/files"], "/system/**");
    let mut gw = Gateway::start(&config);
    gw.send(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    gw.answer(&json!(0), Duration::from_secs(60));
    gw.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // The server works, and writes the host through its profile's /files bind.
    let r = gw.call(1, "files.delete_file", json!({"path": "/files/y"}));
    assert_eq!(r["result"]["isError"], json!(null), "{r}");
    assert!(!t.host.join("srv/files/y").exists(), "{r}");

    // The argument check refuses the denied path by name.
    let r = gw.call(2, "files.delete_file", json!({"path": "/system/x"}));
    assert_eq!(r["error"]["code"], -32003, "{r}");

    // Through the planted symlink the argument check sees /files/link/x, which it allows;
    // the kernel resolves it to /system/x — which the sandbox must not have.
    let r = gw.call(3, "files.delete_file", json!({"path": "/files/link/x"}));
    assert!(
        std::fs::read_to_string(t.host.join("srv/system/x"))
            .ok()
            .as_deref()
            == Some("precious"),
        "the host's srv/system/x was deleted through /files/link -> ../system: {r}"
    );
    assert_eq!(r["result"]["isError"], json!(true), "{r}");
}

#[test]
fn a_bind_that_cannot_be_carved_for_a_path_rule_refuses_to_start_naming_both() {
    let t = SrvTree::new();
    // `/files/*.key` is not one subtree: no mount can hide what it matches from a symlink.
    let config = t.config(&["files:/files"], "/files/*.key");
    let out = Command::new(common::cordon_bin())
        .args(["gateway", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("run cordon gateway");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("srv/files:/files")
            && err.contains("/files/*.key")
            && err.contains("rules[0]"),
        "{err}"
    );
}
