//! Throughput of a TLS download through the proxy's secret-injecting TLS termination next to
//! the plain `CONNECT` relay (the client's TLS straight to the upstream) and a direct TLS
//! connection, on loopback, all in this process (client, proxy and upstream share the
//! machine's cores as they would in a sandbox): wall time and CPU time per download.
//! `cargo bench -p cordon-net --bench intercept_bench` (`INTERCEPT_BENCH_MB` sets the size).
//! `cordon-bench`'s secrets rows measure the same through a real sandbox with Python as the
//! client; this one is quick to rebuild while working on the proxy.
//!
//! Two floors run beside them: a bare terminator with no policy, no parsing and no async
//! runtime (blocking rustls streams: read the request head, forward it, copy the answer back),
//! once on one thread and once pipelined over two (one thread decrypts the upstream's records,
//! the other encrypts them for the client). Whatever the proxy does, it cannot beat the floor
//! that does the same cryptography with nothing else; where the floor itself sits below a
//! target, the target is below what terminating TLS costs on this machine.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cordon_net::{EgressProxy, Interception, ProxyConfig, SecretBinding};
use cordon_policy::network::NetworkPolicy;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

mod common;
use common::{connect_tunnel, cpu_time};
#[path = "../tests/common/tls.rs"]
mod tls;
use tls::{client_config, server_config};

const HOST: &str = "bench.test";
const ROUNDS: usize = 5;

/// A TLS server on 127.0.0.2 answering any request with `big` bytes, one request per
/// connection.
fn upstream(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>, big: usize) -> SocketAddr {
    let config = server_config(cert, key);
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let config = config.clone();
            thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).expect("server conn");
                let mut s = rustls::StreamOwned::new(conn, sock);
                let mut head = Vec::new();
                let mut byte = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&byte[..n]),
                    }
                }
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {big}\r\n\r\n");
                let chunk = vec![b'x'; 256 << 10];
                let mut left = big;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = s.flush();
            });
        }
    });
    addr
}

/// The floor: a terminator for [`HOST`] that does the cryptography and nothing else. It takes
/// a `CONNECT`, answers 200, accepts the client's TLS with its own leaf, opens TLS to `up`
/// (trusting `up_ca`), forwards the request head, then copies the answer back with 256 KiB
/// buffers — on the connection's one thread, or `pipelined` over two.
fn bare_terminator(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    up: SocketAddr,
    up_ca: &str,
    pipelined: bool,
) -> SocketAddr {
    let server = server_config(cert, key);
    let client = client_config(up_ca);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind floor");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for mut sock in listener.incoming().flatten() {
            let (server, client) = (server.clone(), client.clone());
            thread::spawn(move || {
                let _ = sock.set_nodelay(true);
                if read_head(&mut sock).is_none() {
                    return;
                }
                let _ = sock.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let conn = rustls::ServerConnection::new(server).expect("server conn");
                let mut down = rustls::StreamOwned::new(conn, sock);
                let Some(head) = read_head(&mut down) else {
                    return;
                };
                let name = ServerName::try_from(HOST).expect("name");
                let conn = rustls::ClientConnection::new(client, name).expect("client conn");
                let mut upstream =
                    rustls::StreamOwned::new(conn, TcpStream::connect(up).expect("connect up"));
                upstream.write_all(&head).expect("forward head");
                if pipelined {
                    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(4);
                    let reader = thread::spawn(move || loop {
                        let mut buf = vec![0u8; 256 << 10];
                        match upstream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                buf.truncate(n);
                                if tx.send(buf).is_err() {
                                    return;
                                }
                            }
                        }
                    });
                    for buf in rx {
                        if down.write_all(&buf).is_err() {
                            break;
                        }
                    }
                    let _ = reader.join();
                } else {
                    let mut buf = vec![0u8; 256 << 10];
                    loop {
                        match upstream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if down.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                }
                let _ = down.flush();
                down.conn.send_close_notify();
                let _ = down.flush();
            });
        }
    });
    addr
}

/// Bytes up to and including the first blank line, read a byte at a time (heads are small).
fn read_head(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// TLS to [`HOST`] over `sock` (trusting `ca_pem`), one GET, the body read to its end in
/// 1 MiB reads (as the secrets rows' Python client does); returns the body's bytes.
fn download(sock: TcpStream, ca_pem: &str, port: u16) -> usize {
    let name = ServerName::try_from(HOST).expect("name");
    let conn = rustls::ClientConnection::new(client_config(ca_pem), name).expect("client conn");
    let mut s = rustls::StreamOwned::new(conn, sock);
    write!(
        s,
        "GET /big HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("read: {e}"),
        }
    }
    total
}

fn start_proxy(
    policy: &NetworkPolicy,
    secrets: Option<Arc<Interception>>,
) -> (EgressProxy, SocketAddr) {
    let mut config = ProxyConfig::from_policy(policy).expect("policy");
    config.system_resolver = false;
    config.max_bytes = u64::MAX;
    config.max_events = 1_000_000;
    config.secrets = secrets;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    (
        EgressProxy::start(listener, config).expect("start proxy"),
        addr,
    )
}

fn main() {
    let mb: usize = std::env::var("INTERCEPT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let big = mb << 20;
    let (ca_pem, cert, key) = tls::identity(HOST);
    let up = upstream(cert, key, big);
    let (floor_ca, floor_cert, floor_key) = tls::identity(HOST);
    let floor_one = bare_terminator(
        floor_cert.clone(),
        floor_key.clone_key(),
        up,
        &ca_pem,
        false,
    );
    let floor_two = bare_terminator(floor_cert, floor_key, up, &ca_pem, true);
    let port = up.port();
    let policy = NetworkPolicy {
        allow: vec![format!("{HOST}:*"), "127.0.0.2:*".into()],
        hosts: BTreeMap::from([(HOST.to_string(), "127.0.0.2".parse().expect("ip"))]),
    };
    let icpt = Interception::new(vec![SecretBinding {
        name: "TOKEN".into(),
        placeholder: "cordon-secret:v1:bench".into(),
        value: "bench-secret-value".into(),
        hosts: vec![HOST.into()],
        header: Some("Authorization".into()),
        format: Some("Bearer {value}".into()),
        extra_ca_pem: vec![ca_pem.clone().into_bytes()],
    }])
    .expect("interception");
    let icpt_ca = icpt.ca_pem().to_string();
    let (relay, relay_addr) = start_proxy(&policy, None);
    let (term, term_addr) = start_proxy(&policy, Some(Arc::new(icpt)));
    let target = format!("{HOST}:{port}");

    type Way<'a> = (&'static str, Box<dyn Fn() -> usize + 'a>);
    let ways: [Way; 5] = [
        (
            "direct TLS                    ",
            Box::new(|| download(TcpStream::connect(up).expect("connect"), &ca_pem, port)),
        ),
        (
            "CONNECT relay (splice)        ",
            Box::new(|| download(connect_tunnel(relay_addr, &target), &ca_pem, port)),
        ),
        (
            "TLS termination, secret header",
            Box::new(|| download(connect_tunnel(term_addr, &target), &icpt_ca, port)),
        ),
        (
            "floor: bare termination       ",
            Box::new(|| download(connect_tunnel(floor_one, &target), &floor_ca, port)),
        ),
        (
            "floor: bare, two threads      ",
            Box::new(|| download(connect_tunnel(floor_two, &target), &floor_ca, port)),
        ),
    ];
    let mut walls: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    let mut cpus: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    for _ in 0..ROUNDS {
        for (i, (_, way)) in ways.iter().enumerate() {
            let (t, c) = (Instant::now(), cpu_time());
            let got = way();
            assert!(got >= big, "short download: {got} bytes");
            walls[i].push(t.elapsed());
            cpus[i].push(cpu_time().saturating_sub(c));
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let results: Vec<(Duration, Duration)> = walls
        .iter_mut()
        .zip(cpus.iter_mut())
        .map(|(w, c)| (median(w), median(c)))
        .collect();
    println!(
        "TLS download {mb} MiB through the proxy, loopback, {} cores, median of {ROUNDS}:",
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    let relay_wall = results[1].0.as_secs_f64();
    for ((name, _), (wall, cpu)) in ways.iter().zip(&results) {
        println!(
            "  {name} {:>7.1} MB/s  cpu {:>6.0?}  ({:.2}x the relay)",
            big as f64 / wall.as_secs_f64() / 1e6,
            cpu,
            relay_wall / wall.as_secs_f64()
        );
    }
    relay.shutdown();
    term.shutdown();
}
