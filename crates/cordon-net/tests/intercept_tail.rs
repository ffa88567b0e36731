//! The TLS termination hands a body's last bytes to a slow client at once: `write_all` on a
//! TLS stream returns once rustls holds the bytes, and what the client's socket could not take
//! then used to stay in rustls until the connection's idle timeout closed it (a 100 MB
//! download through the sandbox's Python client took 60 s). Loopback only: the upstream on
//! 127.0.0.2, the proxy on 127.0.0.1.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use cordon_net::{EgressProxy, Interception, ProxyConfig, SecretBinding};
use cordon_policy::network::NetworkPolicy;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

#[path = "common/tls.rs"]
mod tls;

const HOST: &str = "tail.test";
const BODY: usize = 8 << 20;
// Long enough that a loaded machine reading slowly stays far under half of it.
const IDLE: Duration = Duration::from_secs(20);

/// A TLS upstream answering one GET per connection with [`BODY`] bytes (Content-Length).
fn upstream(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> SocketAddr {
    let config = tls::server_config(cert, key);
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for sock in listener.incoming().flatten() {
            let config = config.clone();
            thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).expect("conn");
                let mut s = rustls::StreamOwned::new(conn, sock);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
                let chunk = vec![b'x'; 64 << 10];
                let mut left = BODY;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = s.flush();
                // Keep the connection open, as a keep-alive upstream does: the proxy must not
                // need its end to deliver the body.
                thread::sleep(IDLE * 2);
            });
        }
    });
    addr
}

#[test]
fn a_slow_clients_download_through_the_termination_ends_with_its_body_not_the_idle_timeout() {
    let (up_ca, cert, key) = tls::identity(HOST);
    let up = upstream(cert, key);
    let icpt = Interception::new(vec![SecretBinding {
        name: "TOKEN".into(),
        placeholder: "cordon-secret:v1:tail".into(),
        value: "tail-secret-value".into(),
        hosts: vec![HOST.into()],
        header: Some("Authorization".into()),
        format: Some("Bearer {value}".into()),
        extra_ca_pem: vec![up_ca.into_bytes()],
    }])
    .expect("interception");
    let client_ca = icpt.ca_pem().to_string();
    let policy = NetworkPolicy {
        // The name resolves to loopback, which the proxy refuses unless it is allowed too.
        allow: vec![format!("{HOST}:*"), "127.0.0.2:*".into()],
        hosts: BTreeMap::from([(HOST.to_string(), "127.0.0.2".parse().expect("ip"))]),
    };
    let mut config = ProxyConfig::from_policy(&policy).expect("policy");
    config.system_resolver = false;
    config.max_bytes = u64::MAX;
    config.idle_timeout = IDLE;
    config.secrets = Some(Arc::new(icpt));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let proxy_addr = listener.local_addr().expect("addr");
    let proxy = EgressProxy::start(listener, config).expect("proxy");

    let target = format!("{HOST}:{}", up.port());
    let mut sock = TcpStream::connect(proxy_addr).expect("connect proxy");
    // A small receive buffer (no autotuning): the proxy's socket to us stays full while we
    // read slowly, so its last write of the body finds no room and leaves bytes in rustls.
    rustix::net::sockopt::set_socket_recv_buffer_size(&sock, 32 << 10).expect("SO_RCVBUF");
    write!(sock, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        sock.read_exact(&mut byte).expect("CONNECT answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let client = tls::client_config(&client_ca);
    let conn = rustls::ClientConnection::new(client, ServerName::try_from(HOST).expect("name"))
        .expect("client conn");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    write!(
        tls,
        "GET /big HTTP/1.1\r\nHost: {target}\r\nAuthorization: Bearer cordon-secret:v1:tail\r\n\r\n"
    )
    .expect("request");
    // A slow reader: the proxy's writes to it keep finding its socket full, so the body's last
    // write leaves bytes in rustls.
    let start = Instant::now();
    let mut got = Vec::with_capacity(BODY + 4096);
    let mut buf = vec![0u8; 64 << 10];
    let mut body_at = None;
    loop {
        tls.sock
            .set_read_timeout(Some(IDLE * 3))
            .expect("read timeout");
        let n = tls.read(&mut buf).expect("read");
        assert!(n > 0, "the connection ended before the body did");
        got.extend_from_slice(&buf[..n]);
        if body_at.is_none() {
            body_at = got.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        }
        if body_at.is_some_and(|b| got.len() - b >= BODY) {
            break;
        }
        thread::sleep(Duration::from_millis(4));
    }
    let took = start.elapsed();
    assert!(
        took < IDLE / 2,
        "the body's last bytes came after {took:?} (the idle timeout is {IDLE:?})"
    );
    proxy.shutdown();
}
