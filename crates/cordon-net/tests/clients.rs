//! Real clients through the proxy: curl, Python urllib and requests (what pip vendors), pip
//! itself against a tiny package index, and TLS end to end (an `openssl s_server` upstream). Each test is skipped, saying
//! so, when its tool is missing. Clients get the proxy through their usual environment
//! variables and never resolve the test names themselves (a proxied client sends the name to
//! the proxy), so no DNS query leaves the machine.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

fn proxied(program: &str, proxy: std::net::SocketAddr) -> Command {
    let mut cmd = Command::new(program);
    let url = format!("http://{proxy}");
    for var in [
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env(var, &url);
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
    cmd.env("PIP_CONFIG_FILE", "/dev/null");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    if !out.status.success() {
        eprintln!(
            "stdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn skip(tool: &str) -> bool {
    if which(tool) {
        return false;
    }
    eprintln!("SKIP: {tool} not installed");
    true
}

/// A scratch directory removed when dropped, also when the test fails.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn tempdir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("cordon-net-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

#[test]
fn curl_plain_http_and_connect() {
    if skip("curl") {
        return;
    }
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    let url = format!("http://allowed.test:{}/hello", up.port());
    let out = run(proxied("curl", p.addr).args(["-sS", "--max-time", "10", &url]));
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from upstream");
    // --proxytunnel: the same request through CONNECT.
    let out = run(proxied("curl", p.addr).args(["-sS", "--max-time", "10", "--proxytunnel", &url]));
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from upstream");
    // Refused: curl reports the proxy's 403.
    let out = run(proxied("curl", p.addr).args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "http://evil.test/",
    ]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "403");
    let out =
        run(proxied("curl", p.addr).args(["-sS", "--max-time", "10", "https://metadata.test/"]));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = p.proxy.shutdown();
    let verdicts: Vec<_> = events
        .iter()
        .map(|e| (e.host.as_str(), e.verdict.as_str()))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("allowed.test", "allow"),
            ("allowed.test", "allow"),
            ("evil.test", "deny"),
            ("metadata.test", "deny")
        ]
    );
    assert_eq!(
        events[3].reason,
        "resolves to cloud metadata address 169.254.169.254"
    );
}

#[test]
fn python_urllib_and_requests() {
    if skip("python3") {
        return;
    }
    let up = Upstream::start();
    let p = Proxy::start(|_| {});
    let url = format!("http://allowed.test:{}/hello", up.port());
    let script = r#"
import sys, urllib.request, urllib.error
url = sys.argv[1]
print(urllib.request.urlopen(url, timeout=10).read().decode())
try:
    urllib.request.urlopen("http://evil.test/", timeout=10)
    print("evil reachable")
except urllib.error.HTTPError as e:
    print(e.code)
try:
    import requests
except ImportError:
    print("hello from upstream\n403")
    sys.exit(0)
print(requests.get(url, timeout=10).text)
print(requests.get("http://private.test/", timeout=10).status_code)
"#;
    let out = run(proxied("python3", p.addr).args(["-c", script, &url]));
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from upstream\n403\nhello from upstream\n403\n"
    );
    p.assert_loopback_only();
}

/// pip downloads a wheel from a tiny "simple" index served on 127.0.0.2 through the proxy.
#[test]
fn pip_download_through_the_proxy() {
    if skip("python3")
        || !Command::new("python3")
            .args(["-m", "pip", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIP: pip not available");
        return;
    }
    let root = tempdir("pip");
    let wheel = "tinypkg-0.1-py3-none-any.whl";
    let wheel_path = root.join(wheel);
    make_wheel(&wheel_path);
    let files = std::collections::HashMap::from([
        (
            "/simple/tinypkg/".to_string(),
            format!("<html><body><a href=\"../../files/{wheel}\">{wheel}</a></body></html>")
                .into_bytes(),
        ),
        (format!("/files/{wheel}"), fs::read(&wheel_path).unwrap()),
    ]);
    let index = Files::start(files);
    let port = index.addr.port();
    let p = Proxy::start(|_| {});
    let out = run(proxied("python3", p.addr)
        .args([
            "-m",
            "pip",
            "download",
            "--isolated",
            "--no-deps",
            "--disable-pip-version-check",
            "--no-cache-dir",
        ])
        .args([
            "--index-url",
            &format!("http://allowed.test:{port}/simple/"),
        ])
        .args(["--trusted-host", &format!("allowed.test:{port}")])
        .arg("-d")
        .arg(root.join("out"))
        .arg("tinypkg"));
    assert!(out.status.success());
    assert_eq!(
        *index.paths.lock().unwrap(),
        ["/simple/tinypkg/".to_string(), format!("/files/{wheel}")]
    );
    assert!(root.join("out").join(wheel).exists());
    let events = p.proxy.shutdown();
    assert!(events.len() >= 2, "{events:#?}");
    assert!(
        events
            .iter()
            .all(|e| e.verdict == "allow" && e.host == "allowed.test"),
        "{events:#?}"
    );
}

/// HTTPS end to end: curl and Python verify a certificate for allowed.test served by
/// `openssl s_server` on 127.0.0.2, through CONNECT (real ClientHello, real SNI).
#[test]
fn tls_end_to_end() {
    if skip("openssl") || skip("curl") {
        return;
    }
    let dir = tempdir("tls");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = run(Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=allowed.test",
        ])
        .args(["-addext", "subjectAltName=DNS:allowed.test"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    assert!(out.status.success());
    let port = free_port();
    let mut server = Server(
        Command::new("openssl")
            .args([
                "s_server",
                "-quiet",
                "-www",
                "-accept",
                &format!("{UPSTREAM_IP}:{port}"),
            ])
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port);
    let p = Proxy::start(|_| {});
    let url = format!("https://allowed.test:{port}/");
    let out = run(proxied("curl", p.addr)
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&cert)
        .arg(&url));
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("s_server"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    if which("python3") {
        let script =
            "import ssl,sys,urllib.request\nctx=ssl.create_default_context(cafile=sys.argv[2])\n\
                      print(urllib.request.urlopen(sys.argv[1],context=ctx,timeout=10).status)";
        let out = run(proxied("python3", p.addr)
            .args(["-c", script, &url])
            .arg(&cert));
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200");
    }
    // curl told to CONNECT to allowed.test but to say evil.test in its ClientHello (its
    // --connect-to rewrites the CONNECT target, not the TLS name): refused by the SNI check.
    let out = run(proxied("curl", p.addr)
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(&cert)
        .args([
            "--connect-to",
            &format!("evil.test:{port}:allowed.test:{port}"),
        ])
        .args(["-H", "Host: allowed.test"])
        .arg(format!("https://evil.test:{port}/")));
    assert!(!out.status.success());
    server.stop();
    let events = p.proxy.shutdown();
    assert!(
        events
            .iter()
            .filter(|e| e.verdict == "allow")
            .all(|e| e.bytes > 0),
        "{events:#?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last.verdict, "deny");
    assert_eq!(
        last.reason,
        "tls sni evil.test does not match connect host allowed.test"
    );
}

struct Server(Child);

impl Server {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect((UPSTREAM_IP, port)).is_ok() {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!("server on port {port} did not start");
}

/// A minimal valid wheel, written with Python's zipfile.
fn make_wheel(path: &Path) {
    let script = r#"
import sys, zipfile, hashlib, base64
def h(b): return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
files = {
  "tinypkg/__init__.py": b"VALUE = 1\n",
  "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
  "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{n},{h(b)},{len(b)}\n" for n, b in files.items()) + "tinypkg-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for n, b in files.items(): z.writestr(n, b)
    z.writestr("tinypkg-0.1.dist-info/RECORD", record)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
