//! Loopback-only fixtures: upstream servers on 127.0.0.2, a proxy on 127.0.0.1, names resolved
//! through the static hosts map only (the system resolver is off), and a connect filter that
//! refuses — and records — any connection to a non-loopback address.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use cordon_net::{EgressProxy, ProxyConfig};
use cordon_policy::network::NetworkPolicy;
use cordon_policy::NetworkEvent;

pub const UPSTREAM_IP: &str = "127.0.0.2";

/// Test names and where the static map sends them.
pub const HOSTS: &[(&str, &str)] = &[
    ("allowed.test", "127.0.0.2"),
    ("a.wild.test", "127.0.0.2"),
    ("wild.test", "127.0.0.2"),
    ("evilwild.test", "127.0.0.2"),
    ("evil.test", "127.0.0.2"),
    ("allowed.test.evil.test", "127.0.0.2"),
    ("evilallowed.test", "127.0.0.2"),
    ("portonly.test", "127.0.0.2"),
    ("private.test", "10.0.0.1"),
    ("metadata.test", "169.254.169.254"),
    ("loop.test", "127.0.0.1"),
    ("mapped.test", "::ffff:127.0.0.1"),
    ("v6meta.test", "fd00:ec2::254"),
    ("ula.test", "fd00::1"),
    ("nat64.test", "64:ff9b::a9fe:a9fe"),
    ("cgnat.test", "100.100.100.200"),
    ("linklocal.test", "fe80::1"),
    ("zero.test", "0.0.0.0"),
];

/// The allowlist every test starts from: the names (on any port, since upstream ports are
/// random), and 127.0.0.2 explicitly so that its loopback address is let through.
pub const ALLOW: &[&str] = &[
    "allowed.test:*",
    "*.wild.test:*",
    "portonly.test:1",
    "private.test:*",
    "metadata.test:*",
    "loop.test:*",
    "mapped.test:*",
    "v6meta.test:*",
    "ula.test:*",
    "nat64.test:*",
    "cgnat.test:*",
    "linklocal.test:*",
    "zero.test:*",
    "127.0.0.2:*",
];

pub struct Proxy {
    pub proxy: EgressProxy,
    pub addr: SocketAddr,
    /// Every address the proxy tried to connect to.
    pub connects: Arc<Mutex<Vec<SocketAddr>>>,
    /// Every event passed to the live callback.
    pub live: Arc<Mutex<Vec<NetworkEvent>>>,
}

impl Proxy {
    pub fn start(tweak: impl FnOnce(&mut ProxyConfig)) -> Proxy {
        let policy = NetworkPolicy {
            allow: ALLOW.iter().map(|s| s.to_string()).collect(),
            hosts: HOSTS
                .iter()
                .map(|(n, ip)| (n.to_string(), ip.parse::<IpAddr>().unwrap()))
                .collect::<BTreeMap<_, _>>(),
        };
        let mut config = ProxyConfig::from_policy(&policy).unwrap();
        config.system_resolver = false;
        config.connect_timeout = Duration::from_secs(3);
        config.idle_timeout = Duration::from_secs(5);
        config.header_timeout = Duration::from_secs(5);
        let connects = Arc::new(Mutex::new(Vec::new()));
        let log = connects.clone();
        config.connect_filter = Some(Arc::new(move |addr: SocketAddr| {
            log.lock().unwrap().push(addr);
            addr.ip().is_loopback()
        }));
        let live = Arc::new(Mutex::new(Vec::new()));
        let sink = live.clone();
        config.on_event = Some(Arc::new(move |e: &NetworkEvent| {
            sink.lock().unwrap().push(e.clone())
        }));
        tweak(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = EgressProxy::start(listener, config).unwrap();
        Proxy {
            proxy,
            addr,
            connects,
            live,
        }
    }

    /// No connection ever went anywhere but loopback.
    pub fn assert_loopback_only(&self) {
        for a in self.connects.lock().unwrap().iter() {
            assert!(a.ip().is_loopback(), "proxy tried to connect to {a}");
        }
    }

    /// The last event whose host is `host`, waiting briefly for it to be final.
    pub fn event_for(&self, host: &str) -> NetworkEvent {
        for _ in 0..100 {
            if let Some(e) = self
                .proxy
                .events()
                .into_iter()
                .rev()
                .find(|e| e.host == host)
            {
                return e;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("no event for {host}: {:#?}", self.proxy.events());
    }

    /// The last final event (as given to the callback) for `host`, waiting for it.
    pub fn final_event_for(&self, host: &str) -> NetworkEvent {
        for _ in 0..250 {
            if let Some(e) = self
                .live
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find(|e| e.host == host)
            {
                return e.clone();
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("no final event for {host}: {:#?}", self.proxy.events());
    }

    /// Wait until the live callback has seen `n` final events.
    pub fn wait_live(&self, n: usize) -> Vec<NetworkEvent> {
        for _ in 0..250 {
            let l = self.live.lock().unwrap().clone();
            if l.len() >= n {
                return l;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.live.lock().unwrap().clone()
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
    s
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Parse a full response read to EOF.
pub fn parse_response(raw: &[u8]) -> Response {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Response {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    }
}

/// Send raw bytes to the proxy, read everything back.
pub fn send(proxy: SocketAddr, request: &[u8]) -> Response {
    let mut s = connect(proxy);
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn get(proxy: SocketAddr, url: &str, host: &str) -> Response {
    send(
        proxy,
        format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: t\r\n\r\n").as_bytes(),
    )
}

/// `CONNECT target`; returns the status and the open stream.
pub fn tunnel(proxy: SocketAddr, target: &str) -> (u16, String, TcpStream) {
    let mut s = connect(proxy);
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    // The 200 has no body; error answers do: read it so the caller sees the reason.
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status != 200 {
        let mut body = String::new();
        let _ = reader.read_to_string(&mut body);
        head.push_str(&body);
    }
    (status, head, s)
}

/// A plain HTTP upstream on 127.0.0.2. Paths: `/hello`, `/big?n=BYTES`, `/redirect`,
/// `/echo` (returns the request body), `/slow` (never answers). Records every request head.
pub struct Upstream {
    pub addr: SocketAddr,
    pub heads: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind((UPSTREAM_IP, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let h = heads.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let h = h.clone();
                thread::spawn(move || serve_http(conn, h));
            }
        });
        Upstream { addr, heads }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve_http(conn: TcpStream, heads: Arc<Mutex<Vec<String>>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    heads.lock().unwrap().push(head.clone());
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if let Some(cl) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
    {
        let n: usize = cl.trim().parse().unwrap_or(0);
        body.resize(n, 0);
        let _ = reader.read_exact(&mut body);
    } else if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            if size == 0 {
                let mut end = String::new();
                let _ = reader.read_line(&mut end);
                break;
            }
            let mut chunk = vec![0; size + 2];
            let _ = reader.read_exact(&mut chunk);
            body.extend_from_slice(&chunk[..size]);
        }
    }
    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
    let (status, extra, payload): (&str, String, Vec<u8>) = if path.starts_with("/hello") {
        ("200 OK", String::new(), b"hello from upstream".to_vec())
    } else if let Some(n) = path.strip_prefix("/big?n=") {
        let n: usize = n.parse().unwrap_or(0);
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n"
        );
        let chunk = vec![b'x'; 256 * 1024];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            if conn.write_all(&chunk[..k]).is_err() {
                return;
            }
            left -= k;
        }
        let _ = conn.shutdown(Shutdown::Write);
        return;
    } else if path.starts_with("/redirect") {
        (
            "302 Found",
            "Location: http://evil.test/\r\n".to_string(),
            b"go away".to_vec(),
        )
    } else if path.starts_with("/echo") {
        ("200 OK", String::new(), body)
    } else if path.starts_with("/slow") {
        thread::sleep(Duration::from_secs(30));
        return;
    } else {
        ("404 Not Found", String::new(), b"no such path".to_vec())
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n",
        payload.len()
    );
    let _ = conn.write_all(&payload);
    let _ = conn.shutdown(Shutdown::Write);
}

/// A static file server on 127.0.0.2: `GET path` answers the file registered for `path`
/// (404 otherwise). Stands in for a package index; unlike `python -m http.server` it does no
/// reverse DNS lookup of its own address.
pub struct Files {
    pub addr: SocketAddr,
    pub paths: Arc<Mutex<Vec<String>>>,
}

impl Files {
    pub fn start(files: std::collections::HashMap<String, Vec<u8>>) -> Files {
        let listener = TcpListener::bind((UPSTREAM_IP, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        let files = Arc::new(files);
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (files, seen) = (files.clone(), seen.clone());
                thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    let _ = reader.read_line(&mut first);
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let path = first.split(' ').nth(1).unwrap_or("/").to_string();
                    seen.lock().unwrap().push(path.clone());
                    let (status, body) = match files.get(&path) {
                        Some(b) => ("200 OK", b.clone()),
                        None => ("404 Not Found", b"not found".to_vec()),
                    };
                    let kind = if path.ends_with('/') || path.ends_with(".html") {
                        "text/html"
                    } else {
                        "application/octet-stream"
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(&body);
                    let _ = conn.shutdown(Shutdown::Write);
                });
            }
        });
        Files { addr, paths }
    }
}

/// A raw TCP echo server on 127.0.0.2 that counts the bytes it received.
pub struct Echo {
    pub addr: SocketAddr,
    pub received: Arc<AtomicUsize>,
    pub accepted: Arc<AtomicUsize>,
}

impl Echo {
    pub fn start() -> Echo {
        let listener = TcpListener::bind((UPSTREAM_IP, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (r, a) = (received.clone(), accepted.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                r.fetch_add(n, Ordering::SeqCst);
                                if conn.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        Echo {
            addr,
            received,
            accepted,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A free port on 127.0.0.2 (for servers started by other programs).
pub fn free_port() -> u16 {
    TcpListener::bind((UPSTREAM_IP, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn which(program: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
