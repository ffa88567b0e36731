//! `cordon serve --allow-degraded` on hosts that refuse namespaces (see `common::hosts`):
//! persistent sandboxes there run with the no-namespace confinement (Landlock, seccomp,
//! rlimits, a cgroup where one is writable, a subreaper, a 0700 run directory per sandbox).
//! A real server on loopback, real HTTP; every attack is made from inside through exec and
//! checked from outside, and delete must leave no process and no scratch directory behind.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

mod common;
mod serve;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use common::hosts::{refusing as hosts, HostLayout};
use common::*;
use serve::Server;

/// One of these tests at a time. Rootless, a degraded sandbox's process limit is
/// `RLIMIT_NPROC`, which counts every task of the uid — the other tests' servers, kernels and
/// sandboxes included, as `enforcement` says. Run side by side, one test's Node kernel (a
/// dozen threads) would eat into another's fork-counting disk loop.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server started inside `layout`, accepting the degraded mode, with `env` added to its
/// environment (a secret the sandboxes must not see, say).
fn start(layout: &HostLayout, env: &[(&str, &str)]) -> Server {
    let data = std::env::temp_dir().join(format!(
        "cordon-degraded-serve-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    let mut cmd = layout.exec(cordon_bin()).command();
    cmd.args(["serve", "--allow-degraded", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&data)
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Server::start_command(cmd, data)
}

fn create(s: &Server, body: Value) -> (String, Value) {
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(body));
    assert_eq!(st, 201, "create: {v}");
    (v["id"].as_str().expect("id").to_string(), v)
}

fn exec(s: &Server, id: &str, body: Value) -> Value {
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
    assert!(st == 200 || st == 202, "exec: {st} {v}");
    v
}

fn sh(s: &Server, id: &str, script: &str) -> Value {
    exec(s, id, json!({ "cmd": script }))
}

/// Runs a Python script in the sandbox; it fills `R` and the test reads it back as JSON.
fn py(s: &Server, id: &str, script: &str) -> Value {
    let prog = format!(
        "import errno, json, os, signal, socket, sys\nR = {{}}\n\
         def t(f, *a):\n    try:\n        f(*a); return 'ok'\n    except OSError as e:\n        return errno.errorcode.get(e.errno, str(e.errno))\n\
         {script}\nprint(json.dumps(R))"
    );
    let o = exec(s, id, json!({ "cmd": ["python3", "-c", prog] }));
    let line = o["stdout"].as_str().unwrap_or_default().trim().to_string();
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("no JSON from the script: {o}"))
}

/// What `enforcement` says without namespaces (see `assert_no_namespaces`).
fn assert_honest(e: &Value, what: &str) {
    assert_no_namespaces(e, &format!("{what}: {e}"));
}

/// The sandbox's run directory on the host, from its working directory.
fn run_dir(s: &Server, id: &str) -> PathBuf {
    let o = sh(s, id, "pwd");
    let pwd = o["stdout"].as_str().unwrap_or_default().trim().to_string();
    assert!(pwd.contains("/cordon-run-"), "cwd {pwd}: {o}");
    PathBuf::from(pwd)
        .parent()
        .expect("the workspace's parent")
        .to_path_buf()
}

/// A WASI module that prints the file its argument names (`ERR` when it cannot open it),
/// built once with clang + wasi-libc.
fn cat_module() -> Vec<u8> {
    static M: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    M.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("cordon-degraded-wasm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let src = dir.join("cat.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\nint main(int c, char **v) { FILE *f = c > 1 ? fopen(v[1], \"r\") : 0;\n\
             if (!f) { printf(\"ERR\"); return 1; }\n\
             int ch; while ((ch = fgetc(f)) != EOF) putchar(ch); return 0; }\n",
        )
        .expect("write source");
        let out = dir.join("cat.wasm");
        let r = std::process::Command::new("clang")
            .args(["--target=wasm32-wasi", "-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .output()
            .expect("clang: install clang lld wasi-libc libclang-rt-dev-wasm32");
        assert!(r.status.success(), "clang: {}", String::from_utf8_lossy(&r.stderr));
        let bytes = std::fs::read(&out).expect("read module");
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    })
    .clone()
}

/// Create, exec (foreground, background with stdin, a signal), files both ways, delete: it
/// all works without namespaces, says so, and delete leaves nothing.
#[test]
fn a_persistent_sandbox_works_and_says_what_held() {
    let _one = one_at_a_time();
    for (name, layout) in hosts() {
        let s = start(&layout, &[]);
        let (id, info) = create(&s, json!({}));
        assert_honest(&info["enforcement"], name);
        let (_, got) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
        assert_honest(&got["enforcement"], name);

        // Files in, through a command, and out; relative paths and /workspace are the same.
        let r = s
            .req(
                "PUT",
                &format!("/v1/sandboxes/{id}/files?path=/workspace/in.txt"),
            )
            .send_bytes(b"from-the-api");
        assert!(r.is_ok(), "{name}: upload: {r:?}");
        let o = sh(
            &s,
            &id,
            "cat in.txt && echo made > out.txt && mkdir -p d && echo $HOME",
        );
        assert_eq!(o["status"], "exited", "{name}: {o}");
        assert_honest(&o["enforcement"], name);
        let out = o["stdout"].as_str().unwrap_or_default();
        assert!(out.starts_with("from-the-api"), "{name}: {o}");
        let r = s
            .req(
                "GET",
                &format!("/v1/sandboxes/{id}/files?path=/workspace/out.txt"),
            )
            .call()
            .expect("download");
        assert_eq!(r.into_string().unwrap_or_default(), "made\n", "{name}");
        // The files API's root is the sandbox's own directory, never the host's.
        let (st, v) = s.call(
            "GET",
            &format!("/v1/sandboxes/{id}/files?path=../../../etc/passwd"),
            None,
        );
        assert_eq!(
            st, 404,
            "{name}: the host's /etc/passwd through the files API: {v}"
        );
        // A cwd the caller names is translated: /tmp is the sandbox's.
        let o = exec(&s, &id, json!({"cmd": "pwd; echo x > t", "cwd": "/tmp"}));
        let pwd = o["stdout"].as_str().unwrap_or_default();
        assert!(
            pwd.contains("/cordon-run-") && pwd.trim_end().ends_with("/tmp"),
            "{name}: {o}"
        );
        let (st, _) = s.call(
            "GET",
            &format!("/v1/sandboxes/{id}/files/stat?path=/tmp/t"),
            None,
        );
        assert_eq!(st, 200, "{name}");

        // A module in its files runs in the confined wasm runtime, the workspace its own.
        let r = s
            .req(
                "PUT",
                &format!("/v1/sandboxes/{id}/files?path=/workspace/cat.wasm"),
            )
            .send_bytes(&cat_module());
        assert!(r.is_ok(), "{name}: upload: {r:?}");
        let o = exec(&s, &id, json!({"cmd": ["./cat.wasm", "/workspace/in.txt"]}));
        assert_eq!(o["enforcement"]["backend"], "wasm", "{name}: {o}");
        assert_eq!(o["stdout"], "from-the-api", "{name}: {o}");
        let o = exec(
            &s,
            &id,
            json!({"cmd": ["./cat.wasm", "/workspace/../../../etc/passwd"]}),
        );
        assert!(
            o["stdout"].as_str().unwrap_or_default().starts_with("ERR"),
            "{name}: {o}"
        );

        // A background command: stdin in, output out, a signal ends it.
        let marker = unique("degraded-serve-bg");
        let o = exec(
            &s,
            &id,
            json!({"cmd": format!("read l; echo got $l; setsid sh -c 'exec python3 -c \"import time; time.sleep(300)\" {marker}' </dev/null >/dev/null 2>&1 & exec sleep 300"), "background": true}),
        );
        let cid = o["command_id"].as_str().expect("command id").to_string();
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/commands/{cid}/stdin"),
            Some(json!({"data": "hello\n"})),
        );
        assert_eq!(st, 204, "{name}: stdin: {v}");
        assert!(
            wait_for_process(&marker, "python3", Duration::from_secs(10)).is_some(),
            "{name}: the background command's daemon never started"
        );
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/commands/{cid}/signal"),
            Some(json!({"signal": "TERM"})),
        );
        assert_eq!(st, 204, "{name}: signal: {v}");
        let (_, w) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/commands/{cid}/wait?timeout=10s"),
            None,
        );
        let w = if w["outcome"].is_null() {
            w.clone()
        } else {
            w["outcome"].clone()
        };
        assert_eq!(w["signal"], libc::SIGTERM, "{name}: {w}");
        assert_eq!(w["stdout"], "got hello\n", "{name}: {w}");
        // What the command left in its own session ended with it.
        assert_no_process_with(&marker, Duration::from_secs(5));

        // Delete: nothing of the sandbox is left, checked from outside.
        let dir = run_dir(&s, &id);
        let marker = unique("degraded-serve-left");
        exec(
            &s,
            &id,
            json!({"cmd": format!("setsid sh -c 'exec python3 -c \"import time; time.sleep(300)\" {marker}' </dev/null >/dev/null 2>&1 & exec sleep 300"), "background": true}),
        );
        assert!(
            wait_for_process(&marker, "python3", Duration::from_secs(10)).is_some(),
            "{name}: the daemon never started"
        );
        assert!(dir.exists(), "{name}: {dir:?}");
        let (st, v) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
        assert!(st == 200 || st == 204, "{name}: delete: {st} {v}");
        assert_no_process_with(&marker, Duration::from_secs(5));
        serve::wait_until("the run directory to go", || !dir.exists());
    }
}

/// The attack suite, through exec: host files, the server's secrets, the network, another
/// sandbox's files and processes, inherited fds, privileges, a fork bomb and memory.
#[test]
fn attacks_through_exec_fail() {
    let _one = one_at_a_time();
    for (name, layout) in hosts() {
        let secret_env = unique("SECRETVALUE");
        let s = start(&layout, &[("CORDON_TEST_SECRET", &secret_env)]);
        let host = HostDir::new("degraded-serve-host");
        set_mode(&host.path, 0o777);
        let secret = host.file("secret", "TOPSECRET-degraded-serve", 0o644);
        let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();

        // Sandbox A keeps a file and a process; B attacks them.
        let (a, _) = create(&s, json!({}));
        sh(&s, &a, "echo A-private > mine.txt");
        let a_dir = run_dir(&s, &a);
        let marker = unique("degraded-serve-victim");
        exec(
            &s,
            &a,
            json!({"cmd": format!("exec python3 -c \"import time; time.sleep(300)\" {marker}"), "background": true}),
        );
        let victim = wait_for_process(&marker, "python3", Duration::from_secs(10))
            .expect("sandbox A's process");
        let (b, _) = create(&s, json!({"pids": 16, "memory": "64M"}));
        let server_pid = s.child.id();
        let r = py(
            &s,
            &b,
            &format!(
                "def rd(p): open(p, 'rb').read()
def wr(p): open(p, 'w').write('pwned')
def conn(family, addr):
    c = socket.socket(family, socket.SOCK_STREAM); c.settimeout(2); c.connect(addr)
R['read_secret'] = t(rd, {secret:?})
R['write_host'] = t(wr, {host:?} + '/planted')
R['read_other'] = t(rd, {other:?})
R['write_other'] = t(wr, {other_ws:?} + '/planted')
R['list_tmp'] = t(os.listdir, '/tmp')
R['env_secret'] = any({secret_env:?} in v for v in os.environ.values())
R['tcp'] = t(conn, socket.AF_INET, ('127.0.0.1', {port}))
R['tcp6'] = t(conn, socket.AF_INET6, ('::1', {port}))
R['udp'] = t(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
R['kill_other'] = t(os.kill, {victim}, signal.SIGKILL)
R['kill_server'] = t(os.kill, {server_pid}, signal.SIGKILL)
R['fds'] = sorted(int(f) for f in os.listdir('/proc/self/fd'))
st = open('/proc/self/status').read()
R['uid'] = os.getuid()
R['nnp'] = [l.split()[1] for l in st.splitlines() if l.startswith('NoNewPrivs')][0]
R['capeff'] = [l.split()[1] for l in st.splitlines() if l.startswith('CapEff')][0]
R['setuid0'] = t(os.setuid, 0)",
                host = host.str(),
                other = a_dir.join("workspace/mine.txt"),
                other_ws = a_dir.join("workspace"),
            ),
        );
        for k in [
            "read_secret",
            "write_host",
            "read_other",
            "write_other",
            "list_tmp",
            "tcp",
            "tcp6",
            "udp",
            "kill_other",
            "kill_server",
            "setuid0",
        ] {
            assert_ne!(r[k], "ok", "{name}: {k} succeeded: {r}");
        }
        assert_eq!(r["env_secret"], false, "{name}: {r}");
        assert_ne!(r["uid"], 0, "{name}: {r}");
        assert_eq!(r["nnp"], "1", "{name}: {r}");
        assert_eq!(r["capeff"], "0000000000000000", "{name}: {r}");
        // stdio and the directory listing itself; nothing inherited.
        let fds: Vec<i64> = r["fds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        assert!(fds.len() <= 4 && fds.starts_with(&[0, 1, 2]), "{name}: {r}");
        // From outside: nothing planted, A's file and process and the server unharmed, and
        // the listener never saw a connection.
        assert!(!host.join("planted").exists(), "{name}");
        assert!(!a_dir.join("workspace/planted").exists(), "{name}");
        assert_eq!(
            std::fs::read_to_string(a_dir.join("workspace/mine.txt")).unwrap_or_default(),
            "A-private\n",
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap_or_default(),
            "TOPSECRET-degraded-serve",
            "{name}"
        );
        assert!(
            std::path::Path::new(&format!("/proc/{victim}")).exists(),
            "{name}: sandbox B killed sandbox A's process"
        );
        assert!(
            listener.accept().is_err(),
            "{name}: a connection reached the host"
        );
        let (st, _) = s.call("GET", "/healthz", None);
        assert_eq!(st, 200, "{name}: the server after the attacks");

        // A fork bomb and a memory grab, in B's limits.
        let r = py(&s, &b, FORK_BOMB_PY);
        assert_eq!(r["refused"], libc::EAGAIN, "{name}: {r}");
        let o = exec(
            &s,
            &b,
            json!({"cmd": ["python3", "-c", "b = bytearray(512 << 20); print(len(b))"]}),
        );
        assert_ne!(
            o["stdout"], "536870912\n",
            "{name}: 512 MiB under --memory 64M: {o}"
        );
    }
}

/// `--disk` without a tmpfs: the run directory's usage is watched; a command that grows it
/// past the limit is killed and says `limits_hit: ["disk"]`; one that cleans up is not. The
/// same for a one-shot run.
#[test]
fn disk_is_watched_without_a_tmpfs() {
    let _one = one_at_a_time();
    for (name, layout) in hosts() {
        let s = start(&layout, &[]);
        let (id, _) = create(&s, json!({"disk": "16M"}));
        let o = sh(
            &s,
            &id,
            "for i in $(seq 1 60); do head -c 1000000 /dev/zero > f$i; sleep 0.02; done; echo all",
        );
        let hits = o["limits_hit"].to_string();
        assert!(hits.contains("disk"), "{name}: {o}");
        assert_eq!(o["signal"], libc::SIGKILL, "{name}: {o}");
        assert_ne!(o["stdout"], "all\n", "{name}: {o}");
        let o = sh(&s, &id, "rm -f f*; echo clean");
        assert_eq!(o["stdout"], "clean\n", "{name}: {o}");
        assert_eq!(o["limits_hit"], json!([]), "{name}: {o}");

        let o = layout
            .cordon()
            .args(["run", "--json", "--disk", "16M", "--", "sh", "-c"])
            .arg("for i in $(seq 1 60); do head -c 1000000 /dev/zero > $TMPDIR/f$i; sleep 0.02; done; echo all")
            .run()
            .outcome();
        assert!(o.hit("disk"), "{name}: {o}");
        assert_ne!(o.stdout(), "all\n", "{name}: {o}");
    }
}

/// `--require` with a namespace layer still refuses to start, degraded mode accepted or not.
#[test]
fn require_still_refuses() {
    for (name, layout) in hosts() {
        let data = HostDir::new("degraded-serve-require");
        let f = layout
            .cordon()
            .args(["serve", "--allow-degraded", "--require", "user_ns,pid_ns"])
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.join("d"))
            .run();
        assert_eq!(f.code, Some(125), "{name}: {f:?}");
        assert!(f.stderr.contains("user_ns"), "{name}: {}", f.stderr);
    }
}

/// One MCP JSON-RPC request over streamable HTTP; the answer with the request's id, from a
/// JSON body or an event stream.
fn mcp(s: &Server, session: Option<&str>, id: u64, method: &str, params: Value) -> (Value, String) {
    let mut r = s
        .req("POST", "/mcp")
        .set("Accept", "application/json, text/event-stream");
    if let Some(sid) = session {
        r = r.set("Mcp-Session-Id", sid);
    }
    let resp = r
        .send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .expect("mcp request");
    let sid = resp
        .header("Mcp-Session-Id")
        .unwrap_or_default()
        .to_string();
    let body = resp.into_string().unwrap_or_default();
    let answer = body
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {method}: {body}"));
    (answer, sid)
}

/// Code cells keep their state, and an MCP session's tools work, without namespaces.
#[test]
fn code_cells_and_mcp_sessions_work() {
    let _one = one_at_a_time();
    for (name, layout) in hosts() {
        let s = start(&layout, &[]);
        let (id, _) = create(&s, json!({}));
        let code = |c: &str| {
            let (st, v) = s.call(
                "POST",
                &format!("/v1/sandboxes/{id}/code"),
                Some(json!({"code": c, "language": "python"})),
            );
            assert_eq!(st, 200, "{name}: {v}");
            v
        };
        code("x = 20");
        let v = code("x + 22");
        assert_eq!(v["results"][0]["text/plain"], "42", "{name}: {v}");

        let (init, sid) = mcp(
            &s,
            None,
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        assert!(init["result"].is_object(), "{name}: {init}");
        assert!(!sid.is_empty(), "{name}: no session id");
        let _ = s
            .req("POST", "/mcp")
            .set("Accept", "application/json, text/event-stream")
            .set("Mcp-Session-Id", &sid)
            .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let (w, _) = mcp(
            &s,
            Some(&sid),
            2,
            "tools/call",
            json!({"name": "write_file", "arguments": {"path": "m.txt", "content": "via-mcp"}}),
        );
        assert_eq!(w["result"]["isError"], false, "{name}: {w}");
        let (r, _) = mcp(
            &s,
            Some(&sid),
            3,
            "tools/call",
            json!({"name": "run_command", "arguments": {"command": "cat m.txt"}}),
        );
        let text = r["result"].to_string();
        assert!(text.contains("via-mcp"), "{name}: {r}");
        assert!(
            text.contains("\"user_ns\":false"),
            "{name}: the session's enforcement: {r}"
        );
    }
}

/// Rootless without a cgroup, the process limit is `RLIMIT_NPROC` over the whole uid: each
/// command gets `pids` on top of what the uid runs outside the sandbox *when it starts*. So a
/// sandbox made before the uid started 40 more processes (as a long-lived server's neighbours
/// do) still runs a command with its `pids` (with the count taken at the sandbox's start it
/// could not even start one), and a fork bomb in it still stops at the limit.
#[test]
fn the_process_limit_follows_the_uid_neighbours_rootless() {
    let _one = one_at_a_time();
    if is_root() {
        // As root the sandbox runs as a uid of its own, which nothing else shares; the
        // rootless pass (scripts/test.sh) runs this one.
        return;
    }
    for (name, layout) in hosts() {
        let s = start(&layout, &[]);
        let (id, info) = create(&s, json!({"pids": 16}));
        if info["enforcement"]["cgroup"] != "none" && !info["enforcement"]["cgroup"].is_null() {
            // A delegated cgroup counts the sandbox alone: nothing to show here.
            continue;
        }
        let _neighbours = Neighbours(
            (0..40)
                .map(|_| {
                    std::process::Command::new("sleep")
                        .arg("60")
                        .spawn()
                        .expect("sleep")
                })
                .collect(),
        );
        let r = py(
            &s,
            &id,
            "pids = []
for i in range(10):
    p = os.fork()
    if p == 0:
        import time; time.sleep(0.5); os._exit(0)
    pids.append(p)
for p in pids: os.waitpid(p, 0)
R['forked'] = len(pids)",
        );
        assert_eq!(r["forked"], 10, "{name}: {r}");
        let bomb = py(&s, &id, FORK_BOMB_PY);
        assert_eq!(bomb["refused"], libc::EAGAIN, "{name}: {bomb}");
        assert!(
            bomb["forked"].as_u64().unwrap_or(u64::MAX) < 16,
            "{name}: more than --pids 16: {bomb}"
        );
    }
}

/// Processes of the test's own uid, ended however the test ends.
struct Neighbours(Vec<std::process::Child>);

impl Drop for Neighbours {
    fn drop(&mut self) {
        for n in &mut self.0 {
            let _ = n.kill();
            let _ = n.wait();
        }
    }
}

/// Without a network namespace of its own, a sandbox's 127.0.0.1 is the host's: a request for
/// one of its ports (`{port}-{id}.{domain}`) must never be relayed, or every host port would be
/// a sandbox port. It answers 502, saying why, and the host's listener hears nothing.
#[test]
fn ports_of_a_sandbox_without_a_network_namespace_are_never_the_hosts() {
    let _one = one_at_a_time();
    for (name, layout) in hosts() {
        let s = start(&layout, &[]);
        let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let created = ureq::post(&format!("{}/sandboxes", s.url))
            .set("X-API-KEY", &s.key)
            .send_json(json!({"templateID": "base", "network": {"allowPublicTraffic": true}}));
        let v: Value = match created {
            Ok(r) => r.into_json().expect("json"),
            Err(e) => panic!("{name}: E2B create: {e}"),
        };
        let id = v["sandboxID"].as_str().expect("sandboxID");
        let domain = v["domain"].as_str().expect("domain");
        let got = ureq::get(&format!("{}/", s.url))
            .set("Host", &format!("{port}-{id}.{domain}"))
            .timeout(Duration::from_secs(30))
            .call();
        let (status, body) = match got {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(c, r)) => (c, r.into_string().unwrap_or_default()),
            Err(e) => panic!("{name}: {e}"),
        };
        assert_eq!(status, 502, "{name}: {body}");
        assert!(body.contains("no network namespace"), "{name}: {body}");
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{name}: the host's listener was reached"
        );
    }
}
