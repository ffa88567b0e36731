//! `cordon-bench`'s secrets rows (issue 30): a request carrying an injected secret through the
//! egress proxy's TLS termination, next to the same request through the plain `CONNECT`
//! relay, in one run — per-request latency (a new connection each: `CONNECT`, TLS, one GET)
//! and a 100 MB download through each. The upstream is a loopback HTTPS server with a
//! certificate from a CA made here; the client is Python's `http.client` inside the sandbox,
//! the same script both ways, interleaved round by round so drift hits both alike.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const HOST: &str = "api.bench.test";
const IP: &str = "127.0.0.9";
const VALUE: &str = "sk-bench-3f1c-not-a-real-key";
/// The download's size.
const BIG: u64 = 100 << 20;
const ROUNDS: u32 = 3;

/// Inside the sandbox: `n` requests on new connections through the proxy, then one download.
const CLIENT: &str = r#"
import http.client, json, os, ssl, sys, time, urllib.parse
host, port, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or os.environ["https_proxy"])
ctx = ssl.create_default_context(cafile=os.environ.get("BENCH_CA") or os.environ["SSL_CERT_FILE"])
hdr = {"Authorization": "Bearer " + os.environ.get("API_KEY", "none")}
def conn():
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx, timeout=60)
    c.set_tunnel(host, port)
    return c
lat = []
for _ in range(n):
    t = time.perf_counter()
    c = conn(); c.request("GET", "/small", headers=hdr); r = c.getresponse(); r.read(); c.close()
    lat.append(time.perf_counter() - t)
got, secs = 0, 0.0
if big:
    t = time.perf_counter()
    c = conn(); c.request("GET", "/big", headers=hdr); r = c.getresponse()
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        got += len(b)
    secs = time.perf_counter() - t
print(json.dumps({"lat": lat, "bytes": got, "secs": secs}))
"#;

/// A loopback HTTPS upstream: `/small` answers a few bytes, `/big` [`BIG`] bytes; it counts
/// the requests that carried the value (so the termination path is known to be the one timed).
struct Upstream {
    port: u16,
    with_value: Arc<AtomicU64>,
}

fn upstream(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<Upstream, String> {
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| e.to_string())?,
    );
    let l = TcpListener::bind((IP, 0)).map_err(|e| format!("bind {IP}: {e}"))?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    let with_value = Arc::new(AtomicU64::new(0));
    let counter = with_value.clone();
    std::thread::spawn(move || {
        for sock in l.incoming().flatten() {
            let (config, counter) = (config.clone(), counter.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                serve(rustls::StreamOwned::new(conn, sock), &counter);
            });
        }
    });
    Ok(Upstream { port, with_value })
}

fn serve(mut s: rustls::StreamOwned<rustls::ServerConnection, TcpStream>, with_value: &AtomicU64) {
    let mut head = Vec::new();
    let mut byte = [0u8; 4096];
    loop {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut byte) {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&byte[..n]),
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        head.clear();
        if text.contains(VALUE) {
            with_value.fetch_add(1, Ordering::Relaxed);
        }
        let big = text.starts_with("GET /big");
        let len = if big { BIG } else { 2 };
        if s.write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n").as_bytes())
            .is_err()
        {
            return;
        }
        if big {
            let chunk = vec![b'x'; 256 << 10];
            let mut left = BIG;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if s.write_all(&chunk[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
        } else if s.write_all(b"ok").is_err() {
            return;
        }
        let _ = s.flush();
    }
}

struct Measured {
    lat: Vec<f64>,
    mb_per_s: Vec<f64>,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn one_run(
    me: &str,
    base: &[String],
    port: u16,
    inject: bool,
    n: u32,
) -> Result<(Vec<f64>, f64), String> {
    let mut cmd = Command::new(me);
    cmd.args(base);
    if inject {
        cmd.args([
            "--secret",
            &format!("API_KEY=env:CORDON_BENCH_SECRET@{HOST}"),
        ]);
    }
    cmd.args(["--", "python3", "-c", CLIENT, HOST])
        .arg(port.to_string())
        .arg(n.to_string())
        .arg("1")
        .env("CORDON_BENCH_SECRET", VALUE);
    let out = cmd.output().map_err(|e| format!("{me}: {e}"))?;
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "cordon run --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let stdout = outcome["stdout"].as_str().unwrap_or_default();
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|_| {
        format!(
            "the client failed ({}): {}",
            outcome["status"],
            outcome["stderr"].as_str().unwrap_or_default()
        )
    })?;
    let lat = r["lat"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let bytes = r["bytes"].as_u64().unwrap_or(0);
    if bytes != BIG {
        return Err(format!("the download got {bytes} of {BIG} bytes"));
    }
    let secs = r["secs"].as_f64().unwrap_or(0.0).max(1e-9);
    Ok((lat, bytes as f64 / (1 << 20) as f64 / secs))
}

/// Runs the secrets rows; prints them unless `json`, and returns them as a JSON report.
pub fn bench(me: &str, iterations: u32, json: bool) -> Result<serde_json::Value, String> {
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        eprintln!("cordon-bench: secrets rows skipped: no python3 for the client");
        return Ok(serde_json::json!({"secrets": "skipped", "why": "no python3"}));
    }
    let dir = std::env::temp_dir().join(format!("cordon-bench-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _cleanup = Cleanup(&dir);
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cordon-bench upstream CA");
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_cert.pem()).map_err(|e| e.to_string())?;
    let issuer = rcgen::Issuer::new(params, key);
    let leaf_key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut leaf =
        rcgen::CertificateParams::new(vec![HOST.to_string()]).map_err(|e| e.to_string())?;
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf
        .signed_by(&leaf_key, &issuer)
        .map_err(|e| e.to_string())?;
    let up = upstream(
        leaf.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )?;
    let p = up.port;
    let ca = ca_file.display().to_string();
    let base: Vec<String> = vec![
        "run".into(),
        "--json".into(),
        "--timeout".into(),
        "300s".into(),
        "--memory".into(),
        "512M".into(),
        "--allow-net".into(),
        format!("{HOST}:{p}"),
        "--allow-net".into(),
        format!("{IP}:{p}"),
        "--add-host".into(),
        format!("{HOST}:{IP}"),
        "--secret-ca".into(),
        ca.clone(),
        "--ro".into(),
        format!("{ca}:/bench/ca.pem"),
    ];
    // The relay run trusts the upstream's CA itself; the intercepting run trusts the run's CA
    // (cordon points SSL_CERT_FILE at its bundle), and the proxy checks the upstream's.
    let mut relay_base = base.clone();
    relay_base.extend(["--env".into(), "BENCH_CA=/bench/ca.pem".into()]);
    let mut relay = Measured {
        lat: Vec::new(),
        mb_per_s: Vec::new(),
    };
    let mut inject = Measured {
        lat: Vec::new(),
        mb_per_s: Vec::new(),
    };
    let per_round = iterations.max(ROUNDS) / ROUNDS;
    // A first run of each warms the page cache and the interpreter's imports.
    one_run(me, &relay_base, p, false, 2)?;
    one_run(me, &base, p, true, 2)?;
    let before = up.with_value.load(Ordering::Relaxed);
    for _ in 0..ROUNDS {
        let (l, t) = one_run(me, &relay_base, p, false, per_round)?;
        relay.lat.extend(l);
        relay.mb_per_s.push(t);
        let (l, t) = one_run(me, &base, p, true, per_round)?;
        inject.lat.extend(l);
        inject.mb_per_s.push(t);
    }
    let injected = up.with_value.load(Ordering::Relaxed) - before;
    // Every request of the intercepting runs (and the downloads) carried the value; none of
    // the relay's could.
    let want = u64::from(per_round * ROUNDS + ROUNDS);
    if injected != want {
        return Err(format!(
            "the upstream saw the value in {injected} requests, expected {want}: the intercepting path was not the one timed"
        ));
    }
    let (r50, r99) = (
        percentile(&mut relay.lat, 0.5),
        percentile(&mut relay.lat, 0.99),
    );
    let (i50, i99) = (
        percentile(&mut inject.lat, 0.5),
        percentile(&mut inject.lat, 0.99),
    );
    let rt = percentile(&mut relay.mb_per_s, 0.5);
    let it = percentile(&mut inject.mb_per_s, 0.5);
    let ms = |s: f64| s * 1000.0;
    if !json {
        println!(
            "secrets: a request (new connection: CONNECT + TLS + GET) from Python in the sandbox, {} per way",
            relay.lat.len()
        );
        println!(
            "  CONNECT relay        p50 {:>7.2} ms  p99 {:>7.2} ms   100 MB download {:>7.1} MB/s",
            ms(r50),
            ms(r99),
            rt
        );
        println!(
            "  secret injected (TLS termination) p50 {:>7.2} ms  p99 {:>7.2} ms   100 MB download {:>7.1} MB/s",
            ms(i50),
            ms(i99),
            it
        );
        println!(
            "  injected - relay p50 = {:+.2} ms (target <= +1 ms), p99 ratio = {:.2}x (target <= 1.5x), throughput ratio = {:.2}x (target >= 0.8x)",
            ms(i50 - r50),
            i99 / r99.max(1e-9),
            it / rt.max(1e-9)
        );
    }
    Ok(serde_json::json!({
        "secrets": {
            "requests_per_way": relay.lat.len(),
            "relay_ms": {"p50": ms(r50), "p99": ms(r99)},
            "injected_ms": {"p50": ms(i50), "p99": ms(i99)},
            "p50_delta_ms": ms(i50 - r50),
            "p99_ratio": i99 / r99.max(1e-9),
            "download_mb_per_s": {"relay": rt, "injected": it},
            "throughput_ratio": it / rt.max(1e-9),
        }
    }))
}

struct Cleanup<'a>(&'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0);
    }
}
