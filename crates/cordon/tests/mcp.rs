//! `cordon mcp` and `/mcp` against hostile input: every message the server cannot use is
//! answered with the JSON-RPC error for it (right code, right id), none is dropped in silence,
//! and the server keeps serving afterwards — checked with a real tool call that runs a command
//! in a real sandbox. The official SDK's end-to-end tests are in clients/mcp-e2e.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

mod serve;
use serve::Server;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const LIMIT: usize = 16 << 20;

/// One malformed message: what is sent, the code and id expected back.
struct Case {
    what: &'static str,
    body: Vec<u8>,
    code: i64,
    id: Value,
}

fn case(what: &'static str, body: impl Into<Vec<u8>>, code: i64, id: Value) -> Case {
    Case {
        what,
        body: body.into(),
        code,
        id,
    }
}

fn table() -> Vec<Case> {
    vec![
        case("garbage", "hello there", PARSE_ERROR, Value::Null),
        case(
            "invalid UTF-8",
            b"\xff\xfe\x00{}".to_vec(),
            PARSE_ERROR,
            Value::Null,
        ),
        case(
            "NaN",
            r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"n":NaN}}"#,
            PARSE_ERROR,
            Value::Null,
        ),
        case(
            "truncated JSON",
            r#"{"jsonrpc":"2.0","id":4,"method":"#,
            PARSE_ERROR,
            Value::Null,
        ),
        case(
            "wrong jsonrpc version",
            r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
            INVALID_REQUEST,
            json!(5),
        ),
        case(
            "no jsonrpc member",
            r#"{"id":"six","method":"ping"}"#,
            INVALID_REQUEST,
            json!("six"),
        ),
        case(
            "batch (MCP has none)",
            r#"[{"jsonrpc":"2.0","id":7,"method":"ping"}]"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        case("empty batch", "[]", INVALID_REQUEST, Value::Null),
        case("not an object", "17", INVALID_REQUEST, Value::Null),
        case(
            "missing method",
            r#"{"jsonrpc":"2.0","id":8}"#,
            INVALID_REQUEST,
            json!(8),
        ),
        case(
            "method not a string",
            r#"{"jsonrpc":"2.0","id":9,"method":["tools/list"]}"#,
            INVALID_REQUEST,
            json!(9),
        ),
        case(
            "id of a type MCP forbids",
            r#"{"jsonrpc":"2.0","id":{"n":10},"method":"ping"}"#,
            INVALID_REQUEST,
            Value::Null,
        ),
        case(
            "params not structured",
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":"read_file"}"#,
            INVALID_REQUEST,
            json!(11),
        ),
        case(
            "unknown method",
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/destroy"}"#,
            METHOD_NOT_FOUND,
            json!(12),
        ),
        case(
            "wrong params of a known method",
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"tool":"read_file"}}"#,
            INVALID_PARAMS,
            json!(13),
        ),
        case(
            "unknown tool",
            r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"format_disk","arguments":{}}}"#,
            INVALID_PARAMS,
            json!(14),
        ),
        case(
            "oversized, id first",
            oversized(r#""id":15,"#, ""),
            INVALID_REQUEST,
            json!(15),
        ),
        case(
            "oversized, id only at the end",
            oversized("", r#","id":16"#),
            INVALID_REQUEST,
            Value::Null,
        ),
    ]
}

/// A valid `write_file` call just over the limit, with `id_first`/`id_last` around it.
fn oversized(id_first: &str, id_last: &str) -> Vec<u8> {
    let head = format!(
        r#"{{"jsonrpc":"2.0",{id_first}"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"big","content":""#
    );
    let tail = format!(r#""}}}}{id_last}}}"#);
    let mut b = head.into_bytes();
    b.resize(LIMIT + 10, b'x');
    b.extend_from_slice(tail.as_bytes());
    assert!(
        serde_json::from_slice::<Value>(&b).is_ok(),
        "the oversized case must be valid JSON"
    );
    b
}

fn initialize(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "cordon-tests", "version": "0"}}})
}

fn echo_call(id: i64, word: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "run_command", "arguments": {"command": format!("echo {word}")}}})
}

fn check_error(c: &Case, got: &Value) {
    assert_eq!(got["jsonrpc"], "2.0", "{}: {got}", c.what);
    let obj = got.as_object().expect("an object");
    assert!(
        obj.contains_key("id"),
        "{}: the error has no id member (JSON-RPC wants null): {got}",
        c.what
    );
    assert_eq!(got["id"], c.id, "{}: {got}", c.what);
    assert_eq!(got["error"]["code"], c.code, "{}: {got}", c.what);
    let msg = got["error"]["message"].as_str().unwrap_or("");
    assert!(!msg.is_empty(), "{}: {got}", c.what);
    if c.what.starts_with("oversized") {
        assert!(
            msg.contains("16 MiB") && msg.contains(&LIMIT.to_string()),
            "{}: the error does not state the limit: {msg}",
            c.what
        );
    }
}

/// `cordon mcp` on pipes, with a reader thread so that no read can hang the test.
struct McpProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    _data: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir().join(format!(
                "cordon-mcp-test-{tag}-{}-{}",
                std::process::id(),
                super::serve::unique()
            ));
            std::fs::create_dir_all(&p).expect("temp dir");
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl McpProcess {
    fn start() -> McpProcess {
        McpProcess::start_with(&[])
    }

    fn start_with(args: &[&str]) -> McpProcess {
        let data = tempdir::Dir::new("stdio");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cordon"));
        cmd.arg("mcp").args(args).arg("--data-dir").arg(&data.0);
        McpProcess::spawn(cmd, data)
    }

    /// Without `--data-dir`: the session's own temporary directory is made under `tmp`.
    fn start_in_tmp(tmp: tempdir::Dir) -> McpProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cordon"));
        cmd.arg("mcp").env("TMPDIR", &tmp.0);
        McpProcess::spawn(cmd, tmp)
    }

    /// Without `--data-dir`, under a `tmp` another process owns.
    fn start_sharing_tmp(tmp: &std::path::Path) -> McpProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cordon"));
        cmd.arg("mcp").env("TMPDIR", tmp);
        McpProcess::spawn(cmd, tempdir::Dir::new("unused"))
    }

    fn spawn(mut cmd: Command, data: tempdir::Dir) -> McpProcess {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cordon mcp");
        let stdin = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        McpProcess {
            child,
            stdin: Some(stdin),
            lines,
            _data: data,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin is open");
        w.write_all(bytes).expect("write to cordon mcp");
        w.write_all(b"\n").expect("write to cordon mcp");
        w.flush().expect("flush");
    }

    fn recv(&self, what: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what}: no answer within 60 s (dropped in silence?)"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"))
    }

    /// Sends a request and returns the answer with its id (skipping notifications).
    fn call(&mut self, msg: &Value) -> Value {
        self.send(msg.to_string().as_bytes());
        loop {
            let v = self.recv(&msg.to_string());
            if v.get("id") == msg.get("id") {
                return v;
            }
        }
    }
}

impl Drop for McpProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_echo(v: &Value, word: &str) {
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert!(
        text.contains("status: exited, exit code 0") && text.contains(&format!("{word}\n")),
        "{v}"
    );
    assert_eq!(v["result"]["structuredContent"]["status"], "exited", "{v}");
}

#[test]
fn stdio_answers_every_malformed_line_with_its_json_rpc_error_and_keeps_serving() {
    let mut s = McpProcess::start();
    let init = s.call(&initialize(0));
    assert_eq!(init["result"]["serverInfo"]["name"], "cordon", "{init}");
    s.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let first = s.call(&echo_call(1, "before"));
    assert_echo(&first, "before");
    for c in table() {
        s.send(&c.body);
        let got = s.recv(c.what);
        check_error(&c, &got);
    }
    // Notifications are never answered, however wrong; blank lines are not messages. The next
    // answer is the one to the call after them.
    s.send(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#);
    s.send(b"");
    s.send(b"   ");
    let after = s.call(&echo_call(100, "after"));
    assert_echo(&after, "after");
    // The client closing stdin ends the server (and its sandbox) cleanly.
    drop(s.stdin.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = s.child.try_wait() {
            assert!(status.success(), "cordon mcp exited with {status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cordon mcp did not exit after stdin closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The JSON-RPC message in an MCP HTTP answer: a JSON body, or the data of an SSE event.
fn rpc_of(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        return v;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("id").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {body:?}"))
}

fn post(s: &Server, session: Option<&str>, body: &[u8]) -> (u16, String, Option<String>) {
    let mut r = s
        .req("POST", "/mcp")
        .set("Content-Type", "application/json")
        .set("Accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(120));
    if let Some(id) = session {
        r = r
            .set("Mcp-Session-Id", id)
            .set("MCP-Protocol-Version", "2025-06-18");
    }
    let resp = match r.send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("POST /mcp: {e}"),
    };
    let status = resp.status();
    let sid = resp.header("mcp-session-id").map(str::to_string);
    (status, resp.into_string().unwrap_or_default(), sid)
}

#[test]
fn http_mcp_answers_every_malformed_body_with_its_json_rpc_error_and_keeps_serving() {
    let s = Server::start();
    let (status, body, sid) = post(&s, None, initialize(0).to_string().as_bytes());
    assert_eq!(status, 200, "{body}");
    assert_eq!(rpc_of(&body)["result"]["serverInfo"]["name"], "cordon");
    let sid = sid.expect("a session id");
    let (status, body, _) = post(
        &s,
        Some(&sid),
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(status, 202, "{body}");
    let (_, body, _) = post(
        &s,
        Some(&sid),
        echo_call(1, "before").to_string().as_bytes(),
    );
    assert_echo(&rpc_of(&body), "before");
    for c in table() {
        let (status, body, _) = post(&s, Some(&sid), &c.body);
        let got = rpc_of(&body);
        check_error(&c, &got);
        let want = if c.what.starts_with("oversized") {
            413
        } else if c.code == METHOD_NOT_FOUND || c.what == "unknown tool" {
            // Reached the server's dispatch: answered in the request's own stream.
            200
        } else {
            400
        };
        assert_eq!(status, want, "{}: {body}", c.what);
    }
    // An unusable notification is refused with a status (and an error without an id).
    let (status, body, _) = post(
        &s,
        Some(&sid),
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(rpc_of_any(&body)["id"], Value::Null, "{body}");
    let (status, body, _) = post(&s, Some(&sid), b"");
    assert_eq!(status, 400, "{body}");
    assert_eq!(rpc_of_any(&body)["error"]["code"], PARSE_ERROR, "{body}");
    let (_, body, _) = post(
        &s,
        Some(&sid),
        echo_call(100, "after").to_string().as_bytes(),
    );
    assert_echo(&rpc_of(&body), "after");
}

/// A JSON-RPC error body whose id may be null.
fn rpc_of_any(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn a_call_cancelled_while_waiting_for_its_turn_never_runs_and_the_order_holds() {
    let mut s = McpProcess::start();
    s.call(&initialize(0));
    s.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let run = |id: i64, command: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "run_command", "arguments": {"command": command}}})
    };
    s.send(run(1, "sleep 2; echo slow").to_string().as_bytes());
    s.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "write_file",
               "arguments": {"path": "c.txt", "content": "written"}}})
        .to_string()
        .as_bytes(),
    );
    s.send(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}"#,
    );
    s.send(
        run(3, "cat c.txt 2>&1 || echo no c.txt")
            .to_string()
            .as_bytes(),
    );
    let mut order = Vec::new();
    let mut third = Value::Null;
    while !order.contains(&3) {
        let v = s.recv("answers to 1 and 3");
        if let Some(id) = v["id"].as_i64() {
            order.push(id);
            if id == 3 {
                third = v;
            }
        }
    }
    let text = third["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("no c.txt") && !text.contains("written"),
        "the cancelled write ran: {third}"
    );
    let pos = |id| order.iter().position(|&x| x == id);
    assert!(
        pos(1).is_some() && pos(1) < pos(3),
        "3 finished before 1: {order:?}"
    );
}

#[test]
fn cordon_mcp_refuses_a_bad_profile_or_flag_before_serving() {
    let dir = tempdir::Dir::new("flags");
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, "extends = \"default\"\n[limits]\nmemroy = \"1G\"\n").expect("toml");
    let bad = bad.to_string_lossy().into_owned();
    let missing = dir.0.join("no-such-dir").to_string_lossy().into_owned();
    for (args, needle) in [
        (vec!["--profile", bad.as_str()], "memroy"),
        (vec!["--workspace", missing.as_str()], "--workspace"),
        (vec!["--memory", "lots"], "--memory"),
        (vec!["--allow-net", "*"], "allow"),
        (vec!["--require", "teleport"], "--require"),
        (vec!["--image", missing.as_str()], "--image"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .arg("mcp")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run cordon mcp");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?} wrote to stdout");
    }
}

/// `cordon mcp --image DIR`: the session's sandbox has the directory as its root (and writes
/// stay in the sandbox's own layer).
#[test]
fn cordon_mcp_runs_its_session_from_an_image() {
    let Some(busybox) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
    else {
        eprintln!("SKIPPED: busybox is not installed (scripts/test.sh installs busybox-static)");
        return;
    };
    let dir = tempdir::Dir::new("image");
    let root = dir.0.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).expect("mkdir");
    std::fs::create_dir_all(root.join("etc")).expect("mkdir");
    std::fs::copy(&busybox, root.join("bin/busybox")).expect("copy");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    std::fs::write(root.join("etc/greeting"), "from-the-image\n").expect("greeting");
    let mut p = McpProcess::start_with(&["--image", root.to_str().expect("utf-8 path")]);
    p.call(&initialize(1));
    p.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let v = p.call(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command":
            "/bin/busybox cat /etc/greeting; echo changed > /etc/greeting; test -e /usr/bin/python3 || echo no-host"}}}));
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert_eq!(v["result"]["isError"], false, "{v}");
    assert!(text.contains("from-the-image\nno-host\n"), "{v}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/greeting")).expect("read"),
        "from-the-image\n"
    );
}

/// An agent host that SIGTERMs the server (the MCP Python SDK does after 2 s) ends the session
/// as closing stdin does: the sandbox and its processes end, the temporary data directory goes.
#[test]
fn cordon_mcp_ends_its_session_cleanly_on_sigterm() {
    let tmp = tempdir::Dir::new("sigterm");
    let tmp_path = tmp.0.clone();
    let mut p = McpProcess::start_in_tmp(tmp);
    p.call(&initialize(1));
    p.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let marker = format!("4242.{}", std::process::id());
    let v = p.call(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command":
            format!("(sleep {marker} >/dev/null 2>&1 &) ; echo started")}}}));
    assert_eq!(v["result"]["isError"], false, "{v}");
    let session_dir = session_dir_of(&tmp_path, &p);

    rustix::process::kill_process(
        rustix::process::Pid::from_child(&p.child),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = p.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cordon mcp still runs 30 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        !session_dir.exists(),
        "{} outlived the session",
        session_dir.display()
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker))
        .collect();
    assert!(
        left.is_empty(),
        "the sandbox's processes outlived it: {left:?}"
    );
}

/// The one session directory `cordon mcp` process `p` made under `tmp`.
fn session_dir_of(tmp: &std::path::Path, p: &McpProcess) -> std::path::PathBuf {
    let prefix = format!("cordon-mcp-{}-", p.child.id());
    let mine: Vec<_> = std::fs::read_dir(tmp)
        .expect("read tmp")
        .flatten()
        .map(|e| e.path())
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    assert_eq!(mine.len(), 1, "expected one {prefix}* dir: {mine:?}");
    assert!(mine[0].is_dir());
    mine[0].clone()
}

/// An agent host SIGKILLs a session slow to end (the MCP Python SDK does 2 s after its
/// SIGTERM): that process removes nothing, so the next session removes what it left — and
/// never the directory of a session still running beside it.
#[test]
fn a_killed_cordon_mcp_sessions_directory_is_removed_by_the_next_session() {
    let tmp = tempdir::Dir::new("sigkill");
    let tmp_path = tmp.0.clone();
    let mut killed = McpProcess::start_in_tmp(tmp);
    killed.call(&initialize(1));
    let killed_dir = session_dir_of(&tmp_path, &killed);
    let mut alive = McpProcess::start_sharing_tmp(&tmp_path);
    alive.call(&initialize(1));
    let alive_dir = session_dir_of(&tmp_path, &alive);
    killed.child.kill().expect("SIGKILL");
    killed.child.wait().expect("wait");
    assert!(
        killed_dir.is_dir(),
        "a killed process cannot have removed its dir"
    );
    // A lock younger than 10 s may be a session about to take it: age both, as time would.
    let past = std::time::SystemTime::now() - Duration::from_secs(60);
    for d in [&killed_dir, &alive_dir] {
        let f = std::fs::File::options()
            .write(true)
            .open(d.join(".session.lock"))
            .expect("lock file");
        f.set_modified(past).expect("age the lock");
    }

    let mut next = McpProcess::start_sharing_tmp(&tmp_path);
    next.call(&initialize(1));
    assert!(
        !killed_dir.exists(),
        "{} outlived the next session's start",
        killed_dir.display()
    );
    assert!(
        alive_dir.is_dir(),
        "the sweep removed a running session's dir"
    );
    let v = alive.call(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command": "echo still-here"}}}));
    assert_eq!(v["result"]["isError"], false, "{v}");
}
