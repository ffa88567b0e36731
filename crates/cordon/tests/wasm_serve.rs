//! WebAssembly through the server's doors: `POST /v1/run` with a module, and the MCP tool
//! `run_wasm` (a module from the session's sandbox, or sent as base64). Real server on
//! loopback, real `cordon mcp` on pipes; modules built here from C with clang + wasi-libc.

mod serve;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use serve::Server;

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Compiles C to a WASI module in a fresh directory (readable by any sandbox uid).
fn compile(name: &str, source: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "cordon-wasm-serve-{name}-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write source");
    let out = dir.join(format!("{name}.wasm"));
    let r = Command::new("clang")
        .args(["--target=wasm32-wasi", "-O2", "-Wl,--strip-all", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| {
            panic!("clang: {e}: install clang lld wasi-libc libclang-rt-dev-wasm32")
        });
    assert!(
        r.status.success(),
        "clang: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

fn tool() -> &'static Path {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        compile(
            "tool",
            include_str!("../../cordon-wasm/tests/common/tool.c"),
        )
    })
}

fn tiny() -> &'static Path {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| compile("tiny", "int main(void) { return 7; }\n"))
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).expect("read module")
}

#[test]
fn one_shot_runs_take_a_module() {
    let s = Server::start();
    let module = b64(&read(tool()));
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": ["tool.wasm", "hello", "from http"], "wasm": module})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["status"], "exited", "{o}");
    assert_eq!(o["stdout"], "hello from wasm [from http]\n", "{o}");
    assert_eq!(o["enforcement"]["backend"], "wasm", "{o}");
    // The runtime confined itself (no process sandbox around it).
    assert_eq!(o["enforcement"]["seccomp"], true, "{o}");
    assert_eq!(o["enforcement"]["rlimits"], true, "{o}");

    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": ["tool.wasm", "spin"], "wasm": module, "timeout": "500ms"})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["status"], "timeout", "{o}");
    assert_eq!(o["limits_hit"], json!(["wall_time"]), "{o}");

    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": ["tool.wasm", "stdin"], "wasm": module, "stdin": "abc"})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["stdout"], "ABC\n3 bytes\n", "{o}");

    for (body, needle) in [
        (json!({"cmd": ["x"], "wasm": "not base64!"}), "not base64"),
        (
            json!({"cmd": ["x"], "wasm": b64(b"#!/bin/sh\necho hi\n")}),
            "not a WebAssembly module",
        ),
        (
            json!({"cmd": ["x"], "wasm": module, "network": {"allow": ["example.org"]}}),
            "no network",
        ),
    ] {
        let (st, o) = s.call("POST", "/v1/run", Some(body));
        assert_eq!(st, 400, "{o}");
        let msg = o["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{o}");
    }

    // A module that is cut short is the module's error, reported as an Outcome.
    let bytes = read(tool());
    let (st, o) = s.call(
        "POST",
        "/v1/run",
        Some(json!({"cmd": ["cut.wasm"], "wasm": b64(&bytes[..bytes.len() / 2])})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["status"], "error", "{o}");
    assert_eq!(o["exit_code"], 126, "{o}");
}

/// A module in a persistent sandbox's files runs when a command names it: in the confined wasm
/// runtime (the sandbox's kernel has no loader for it), with the sandbox's `/workspace` as its
/// own and nothing else of the sandbox or the host.
#[test]
fn sandboxes_run_the_modules_in_their_files() {
    let s = Server::start();
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let exec = |body: Value| -> (u16, Value) {
        s.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body))
    };
    let put = s
        .req(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=/workspace/bin/tool.wasm"),
        )
        .send_bytes(&read(tool()))
        .expect("upload the module");
    assert!(put.status() < 300);
    let (st, o) = exec(json!({"cmd": ["sh", "-c",
        "echo from a process > /workspace/note.txt && ln -s /etc/passwd /workspace/link \
         && ln -s .. /workspace/up && id -u"]}));
    assert_eq!((st, &o["exit_code"]), (200, &json!(0)), "{o}");
    let process_uid = o["stdout"].as_str().unwrap_or_default().trim().to_string();

    // Found by its path from the working directory, or absolute; reads what processes wrote.
    let (st, o) = exec(json!({"cmd": ["./bin/tool.wasm", "cat", "/workspace/note.txt"]}));
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["enforcement"]["backend"], "wasm", "{o}");
    assert_eq!(o["status"], "exited", "{o}");
    assert_eq!(o["stdout"], "from a process\n", "{o}");
    let (_, o) = exec(json!({"cmd": ["tool.wasm", "hello", "x"], "cwd": "/workspace/bin"}));
    assert_eq!(o["stdout"], "hello from wasm [x]\n", "{o}");

    // Streamed: its output, then the exit event.
    let body = s
        .req("POST", &format!("/v1/sandboxes/{id}/exec"))
        .set("Accept", "text/event-stream")
        .send_json(json!({"cmd": ["./bin/tool.wasm", "hello", "sse"]}))
        .expect("streamed exec")
        .into_string()
        .unwrap_or_default();
    let out = body
        .find("event: stdout")
        .zip(body.find("hello from wasm [sse]"));
    let exit = body.find("event: exit");
    assert!(
        matches!((out, exit), (Some((a, b)), Some(c)) if a < b && b < c),
        "{body}"
    );

    // What it writes, the sandbox's processes see, as their own user's.
    let (_, o) = exec(
        json!({"cmd": ["/workspace/bin/tool.wasm", "write", "/workspace/out.txt", "from wasm"]}),
    );
    assert_eq!(o["exit_code"], 0, "{o}");
    let (_, o) = exec(
        json!({"cmd": ["sh", "-c", "cat /workspace/out.txt; echo; stat -c %u /workspace/out.txt"]}),
    );
    assert_eq!(
        o["stdout"].as_str().unwrap_or_default(),
        format!("from wasm\n{process_uid}\n"),
        "{o}"
    );

    // The environment, stdin and the timeout are the command's.
    let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm", "env"], "env": {"GREETING": "hi"}}));
    assert!(
        o["stdout"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .any(|l| l == "GREETING=hi"),
        "{o}"
    );
    let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm", "stdin"], "stdin": "abc"}));
    assert_eq!(o["stdout"], "ABC\n3 bytes\n", "{o}");
    let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm", "spin"], "timeout": "500ms"}));
    assert_eq!(o["status"], "timeout", "{o}");

    // Hostile: out of the workspace by path, by `..`, by symlinks a process planted.
    let host_file = std::env::temp_dir().join(format!("cordon-wasm-host-{}", serve::unique()));
    std::fs::write(&host_file, "host secret").expect("host file");
    for path in [
        "/etc/passwd".to_string(),
        "/workspace/../etc/passwd".to_string(),
        "/workspace/link".to_string(),
        "/workspace/up/etc/passwd".to_string(),
        format!("/workspace/../../../..{}", host_file.display()),
    ] {
        let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm", "cat", path]}));
        let out = o["stdout"].as_str().unwrap_or_default();
        assert!(out.starts_with("ERR "), "{path}: {o}");
        assert!(
            !out.contains("root:") && !out.contains("host secret"),
            "{path}: {o}"
        );
    }
    let escape = std::env::temp_dir().join(format!("cordon-wasm-escape-{}", serve::unique()));
    let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm", "write",
        format!("/workspace/up/../../../..{}", escape.display()), "x"]}));
    assert!(
        o["stdout"].as_str().unwrap_or_default().starts_with("ERR "),
        "{o}"
    );
    assert!(
        !escape.exists(),
        "a module wrote {} on the host",
        escape.display()
    );
    assert_eq!(
        std::fs::read_to_string(&host_file).ok().as_deref(),
        Some("host secret")
    );
    let _ = std::fs::remove_file(&host_file);

    // A paused sandbox runs no module either, until it is resumed.
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert!(st < 300, "pause: {st} {v}");
    let (st, o) = exec(json!({"cmd": ["./bin/tool.wasm"]}));
    assert_eq!(st, 409, "{o}");
    assert_eq!(o["error"]["code"], "sandbox_paused", "{o}");
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/resume"), None);
    assert!(st < 300, "resume: {st} {v}");
    let (_, o) = exec(json!({"cmd": ["./bin/tool.wasm"]}));
    assert_eq!(o["stdout"], "hello from wasm\n", "{o}");

    // A module runs to completion: not as a background command.
    let (st, o) = exec(json!({"cmd": ["./bin/tool.wasm"], "background": true}));
    assert_eq!(st, 400, "{o}");
    assert!(
        o["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("WebAssembly"),
        "{o}"
    );
    // Other programs are still processes.
    let (_, o) = exec(json!({"cmd": ["./bin/../note.txt"]}));
    assert_eq!(o["exit_code"], 126, "{o}");
    assert!(o["enforcement"]["backend"] != "wasm", "{o}");
}

/// `cordon mcp` on pipes.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    data: PathBuf,
}

impl Mcp {
    fn start() -> Mcp {
        let data = std::env::temp_dir().join(format!(
            "cordon-wasm-mcp-{}-{}",
            std::process::id(),
            serve::unique()
        ));
        std::fs::create_dir_all(&data).expect("data dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .arg("mcp")
            .arg("--data-dir")
            .arg(&data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start cordon mcp");
        let stdin = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut m = Mcp {
            child,
            stdin,
            lines,
            data,
        };
        let init = m.call(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "cordon-tests", "version": "0"}}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").expect("write to cordon mcp");
        self.stdin.flush().expect("flush");
    }

    fn call(&mut self, msg: &Value) -> Value {
        self.send(msg);
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no answer to {msg}"));
            let v: Value = serde_json::from_str(&line).expect("JSON from cordon mcp");
            if v.get("id") == msg.get("id") {
                return v;
            }
        }
    }

    fn tool(&mut self, id: i64, name: &str, args: Value) -> Value {
        self.call(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": args}}))
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

#[test]
fn mcp_run_wasm_runs_a_module_from_the_sandbox_or_sent_inline() {
    let mut m = Mcp::start();
    let list = m.call(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"run_wasm"), "{list}");

    // Sent inline.
    let r = m.tool(
        2,
        "run_wasm",
        json!({"module_base64": b64(&read(tool())), "args": ["hello", "mcp"]}),
    );
    assert_eq!(r["result"]["isError"], false, "{r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("hello from wasm [mcp]"), "{r}");
    assert_eq!(r["result"]["structuredContent"]["status"], "exited", "{r}");

    // From the session's sandbox: the agent put it there with a command.
    let put = format!(
        "echo {} | base64 -d > /workspace/tiny.wasm && ls -l /workspace/tiny.wasm",
        b64(&read(tiny()))
    );
    let r = m.tool(3, "run_command", json!({"command": put}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    let r = m.tool(4, "run_wasm", json!({"path": "/workspace/tiny.wasm"}));
    assert_eq!(r["result"]["structuredContent"]["exit_code"], 7, "{r}");
    assert_eq!(
        r["result"]["isError"], true,
        "a non-zero exit is an error result: {r}"
    );

    // Limits and refusals.
    let r = m.tool(
        5,
        "run_wasm",
        json!({"module_base64": b64(&read(tool())), "args": ["spin"], "timeout_seconds": 0.5}),
    );
    assert_eq!(r["result"]["structuredContent"]["status"], "timeout", "{r}");
    let r = m.tool(6, "run_wasm", json!({"module_base64": b64(b"not wasm")}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let r = m.tool(7, "run_wasm", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let r = m.tool(8, "run_wasm", json!({"path": "/workspace/missing.wasm"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
}
