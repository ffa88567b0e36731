//! Positive controls: ordinary programs work normally inside the sandbox. A filter or mount
//! layout that breaks `import json` is a failed sandbox too.

mod common;

use std::process::Command;

use common::*;

#[test]
fn python_stdlib_works() {
    let o = py(
        &[],
        r#"
import json, subprocess, threading, multiprocessing, sqlite3, ssl, hashlib, tempfile, socket
import asyncio, concurrent.futures, zlib, random, datetime, locale, shutil, urllib.parse
R["json"] = json.loads('{"a": [1, 2]}')
R["subprocess"] = subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout
got = []
ts = [threading.Thread(target=got.append, args=(i,)) for i in range(8)]
[x.start() for x in ts]; [x.join() for x in ts]
R["threads"] = sorted(got)
with multiprocessing.Pool(2) as p:
    R["pool"] = p.map(abs, [-1, -2, -3])
q = multiprocessing.Queue()
pr = multiprocessing.Process(target=q.put, args=(42,)); pr.start()
R["queue"] = q.get(timeout=20); pr.join()
with concurrent.futures.ProcessPoolExecutor(2) as ex:
    R["executor"] = list(ex.map(pow, [2, 3], [3, 2]))
for path in ("/tmp/t.db", "/workspace/t.db", ":memory:"):
    db = sqlite3.connect(path)
    db.execute("create table t(a)"); db.execute("insert into t values (7)"); db.commit()
    R["sqlite " + path] = db.execute("select a from t").fetchone()[0]
ctx = ssl.create_default_context()
R["ssl_cas"] = ctx.cert_store_stats()["x509_ca"]
R["sha256"] = hashlib.sha256(b"x").hexdigest()[:8]
with tempfile.TemporaryDirectory() as d:
    R["tempdir"] = d.startswith("/tmp/")
async def main():
    await asyncio.sleep(0.01)
    return "async"
R["asyncio"] = asyncio.run(main())
R["zlib"] = len(zlib.compress(b"a" * 1000)) < 100
R["getaddrinfo"] = socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0]
R["cpu_count"] = os.cpu_count() >= 1
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["json"], serde_json::json!({"a": [1, 2]}));
    assert_eq!(d["subprocess"], "hi\n");
    assert_eq!(d["threads"], serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(d["pool"], serde_json::json!([1, 2, 3]));
    assert_eq!(d["queue"], 42);
    assert_eq!(d["executor"], serde_json::json!([8, 9]));
    for p in ["/tmp/t.db", "/workspace/t.db", ":memory:"] {
        assert_eq!(d[format!("sqlite {p}")], 7, "{o}");
    }
    assert!(
        d["ssl_cas"].as_u64().unwrap() > 0,
        "no CA certificates: {o}"
    );
    assert_eq!(d["sha256"], "2d711642");
    assert_eq!(d["tempdir"], true);
    assert_eq!(d["asyncio"], "async");
    assert_eq!(d["zlib"], true);
    assert_eq!(d["getaddrinfo"], "127.0.0.1");
    assert_eq!(d["cpu_count"], true);
}

#[test]
fn python_tls_handshake_over_the_sandbox_loopback() {
    // A real TLS session inside: server and client in the sandbox, certificate from the host.
    let dir = HostDir::new("tls");
    let gen = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
        ])
        .arg("/CN=localhost")
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output();
    let Ok(gen) = gen else {
        eprintln!("openssl not available on the host; skipping");
        return;
    };
    assert!(gen.status.success(), "openssl: {gen:?}");
    set_mode(&dir.join("key.pem"), 0o644);
    let o = py(
        &["--ro", &format!("{}:/certs", dir.str())],
        r#"
import socket, ssl, threading
srv_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
srv_ctx.load_cert_chain("/certs/cert.pem", "/certs/key.pem")
cli_ctx = ssl.create_default_context(cafile="/certs/cert.pem")
lsock = socket.socket(); lsock.bind(("127.0.0.1", 0)); lsock.listen()
port = lsock.getsockname()[1]
def serve():
    conn, _ = lsock.accept()
    with srv_ctx.wrap_socket(conn, server_side=True) as s:
        s.sendall(s.recv(5).upper())
th = threading.Thread(target=serve); th.start()
with cli_ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost") as c:
    c.sendall(b"hello")
    R["echo"] = c.recv(5).decode()
    R["version"] = c.version()
th.join()
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(d["echo"], "HELLO", "{o}");
    assert!(d["version"].as_str().unwrap().starts_with("TLS"), "{o}");
}

#[test]
fn node_works() {
    let script = r#"
const cp = require("child_process");
const fs = require("fs");
const os = require("os");
const crypto = require("crypto");
const { Worker } = require("worker_threads");
fs.writeFileSync("/tmp/n.txt", "node");
const w = new Worker("require('worker_threads').parentPort.postMessage(6 * 7)", { eval: true });
w.on("message", (m) => {
  console.log(JSON.stringify({
    sum: [1, 2, 3].reduce((a, b) => a + b),
    sub: cp.execSync("echo hi").toString(),
    file: fs.readFileSync("/tmp/n.txt", "utf8"),
    sha: crypto.createHash("sha256").update("x").digest("hex").slice(0, 8),
    cpus: os.cpus().length > 0,
    worker: m,
  }));
  w.terminate();
});
"#;
    let o = run_json(&["--", "node", "-e", script]);
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["sum"], 6);
    assert_eq!(d["sub"], "hi\n");
    assert_eq!(d["file"], "node");
    assert_eq!(d["sha"], "2d711642");
    assert_eq!(d["cpus"], true);
    assert_eq!(d["worker"], 42);
}

#[test]
fn bash_and_coreutils_work() {
    let script = r#"
set -euo pipefail
cd /workspace
mkdir -p a/b && echo hello > a/b/f.txt
cp a/b/f.txt g.txt && mv g.txt h.txt
test "$(cat h.txt)" = hello
seq 1 1000 | sort -rn | head -1 > top.txt
printf '%s\n' c b a | sort | tr -d '\n'
echo
ls /usr/bin | wc -l > /dev/null
sha256sum h.txt | cut -c1-8
( sleep 0.1; echo sub ) &
wait
find /workspace -name f.txt
grep -c . top.txt
echo "pid=$$ host=$(hostname) user=$(id -u)"
tar -czf /tmp/w.tgz -C /workspace . && tar -tzf /tmp/w.tgz | wc -l
"#;
    let o = run_json(&["--", "bash", "-c", script]);
    o.assert_ok();
    let lines: Vec<&str> = o.stdout().lines().collect();
    assert_eq!(lines[0], "abc", "{o}");
    assert_eq!(lines[1], "5891b5b5", "{o}");
    assert_eq!(lines[2], "sub", "{o}");
    assert_eq!(lines[3], "/workspace/a/b/f.txt", "{o}");
    assert_eq!(lines[4], "1", "{o}");
    assert_eq!(lines[5], "pid=2 host=cordon user=1000", "{o}");
    assert!(lines[6].parse::<u32>().unwrap() >= 4, "{o}");
}

/// A pipeline's writer dies of SIGPIPE when its reader goes, as on the host: cordon's own
/// runtime ignores SIGPIPE, and an ignored signal survives exec unless reset. (With it
/// ignored, `yes` complains "Broken pipe" and fails.)
#[test]
fn signals_start_at_their_defaults() {
    let script = r#"
yes | head -1
grep -E '^(SigIgn|SigBlk):' /proc/self/status
"#;
    let o = run_json(&["--", "bash", "-c", script]);
    o.assert_ok();
    assert_eq!(o.stderr(), "", "{o}");
    let lines: Vec<&str> = o.stdout().lines().collect();
    assert_eq!(lines[0], "y", "{o}");
    let mask = |key: &str| {
        let line = lines.iter().find(|l| l.starts_with(key)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    // SIGPIPE is signal 13: bit 12 of the mask.
    assert_eq!(mask("SigIgn:") & (1 << 12), 0, "SIGPIPE ignored: {o}");
    assert_eq!(mask("SigBlk:"), 0, "signals blocked: {o}");
    // Nothing else ignored that cordon was not started with ignored: in particular not
    // glibc's internal signals 32 and 33 (bits 31, 32), which glibc's spawn ignores in its
    // child and which would survive the exec.
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let inherited = ours
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    let extra = mask("SigIgn:") & !inherited;
    assert_eq!(extra, 0, "ignored in the sandbox only: {extra:#x}: {o}");
}

#[test]
fn json_outcome_has_the_contract_fields() {
    let o = run_json(&["--", "bash", "-c", "echo out; echo err >&2; exit 5"]);
    o.assert_exited(5).assert_fully_confined();
    assert_eq!(o.stdout(), "out\n");
    assert_eq!(o.stderr(), "err\n");
    for k in [
        "status",
        "exit_code",
        "signal",
        "error",
        "stdout",
        "stderr",
        "stdout_truncated",
        "stderr_truncated",
        "usage",
        "enforcement",
        "network",
    ] {
        assert!(o.v.get(k).is_some(), "Outcome lacks {k}: {o}");
    }
    for k in [
        "wall_ms",
        "cpu_user_ms",
        "cpu_system_ms",
        "peak_memory_bytes",
        "peak_pids",
    ] {
        assert!(o.v["usage"][k].is_u64(), "usage.{k}: {o}");
    }
    assert!(o.usage("wall_ms") > 0 && o.usage("wall_ms") < 20_000);
    assert_eq!(
        o.v["network"],
        serde_json::json!([]),
        "no network by default"
    );
    assert!(["v1", "v2", "none"].contains(&o.cgroup()));
}
