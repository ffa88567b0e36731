//! Throughput of a 100 MB download and latency of 1000 small requests, through the proxy
//! versus direct, on loopback; beside them a bare splice relay, the floor of what any relay
//! costs here. `cargo bench -p cordon-net` (set `PROXY_BENCH_MB` / `PROXY_BENCH_REQUESTS` to
//! change the sizes).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use cordon_net::{EgressProxy, ProxyConfig};
use cordon_policy::network::NetworkPolicy;
use rustix::net::sockopt::set_tcp_congestion;
use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};

mod common;
use common::{connect_tunnel, cpu_time};

const ROUNDS: usize = 7;

/// One way of downloading the big file; returns the bytes received.
type Path<'a> = (&'static str, Box<dyn Fn() -> usize + 'a>);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `/big` answers `big` bytes, anything else 13 bytes; one request per connection. With
/// `unpaced`, the server's sockets send with CUBIC (else Reno) whatever the host's default.
fn upstream(big: usize, unpaced: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            if unpaced {
                let _ = set_tcp_congestion(&conn, "cubic")
                    .or_else(|_| set_tcp_congestion(&conn, "reno"));
            }
            thread::spawn(move || serve(conn, big));
        }
    });
    addr
}

/// The least a relay can do: a tunnel to `up` that moves bytes with splice(2) on blocking
/// sockets, a thread per direction, no policy, no accounting, no event loop. The proxy can be
/// no faster than this; its ratio to direct is what relaying itself costs on this machine.
fn bare_relay(up: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind relay");
    let addr = listener.local_addr().expect("addr");
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(upstream) = TcpStream::connect(up) else {
                continue;
            };
            let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
                continue;
            };
            thread::spawn(move || pump(&client, &upstream));
            thread::spawn(move || pump(&u2, &c2));
        }
    });
    addr
}

/// Moves everything from `from` to `to` through a pipe, then shuts `to` for writing.
fn pump(from: &TcpStream, to: &TcpStream) {
    let Ok((r, w)) = pipe_with(PipeFlags::CLOEXEC) else {
        return;
    };
    let _ = fcntl_setpipe_size(&w, 1 << 20);
    loop {
        let n = match splice(from, None, &w, None, 1 << 20, SpliceFlags::MOVE) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut left = n;
        while left > 0 {
            match splice(&r, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) | Err(_) => return,
                Ok(m) => left -= m,
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The host's default congestion control, as a new socket gets it.
fn host_congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn serve(conn: TcpStream, big: usize) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut conn = conn;
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    if first.contains("/big") {
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Length: {big}\r\nConnection: close\r\n\r\n"
        );
        let chunk = vec![b'x'; 256 * 1024];
        let mut left = big;
        while left > 0 {
            let n = left.min(chunk.len());
            if conn.write_all(&chunk[..n]).is_err() {
                return;
            }
            left -= n;
        }
    } else {
        let _ = conn.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello, bench\n",
        );
    }
    let _ = conn.shutdown(Shutdown::Write);
    let mut sink = [0u8; 64];
    let _ = conn.read(&mut sink);
}

/// Send `request` on `stream`, read to EOF; returns the bytes received.
fn exchange(mut stream: TcpStream, request: &[u8]) -> usize {
    let _ = stream.set_nodelay(true);
    stream.write_all(request).expect("write request");
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => panic!("read: {e}"),
        }
    }
    total
}

struct Measure {
    /// Median wall time of the rounds.
    wall: Duration,
    /// CPU time per round, all threads.
    cpu: Duration,
    bytes: usize,
}

fn measure(f: &dyn Fn() -> usize) -> Measure {
    let mut walls = Vec::new();
    let mut bytes = 0;
    let cpu0 = cpu_time();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        bytes = f();
        walls.push(start.elapsed());
    }
    let cpu = (cpu_time() - cpu0) / ROUNDS as u32;
    walls.sort();
    Measure {
        wall: walls[walls.len() / 2],
        cpu,
        bytes,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn latencies<F: FnMut()>(n: usize, mut f: F) -> (Duration, Duration, Duration) {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        f();
        all.push(start.elapsed());
    }
    all.sort();
    let mean = all.iter().sum::<Duration>() / n as u32;
    (mean, percentile(&all, 0.5), percentile(&all, 0.99))
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Downloads the big file from `up` directly and through both proxies, interleaved, and
/// prints the rates and ratios.
fn download(
    label: &str,
    up: SocketAddr,
    proxy_addr: SocketAddr,
    copy_addr: SocketAddr,
    big: usize,
) {
    let port = up.port();
    let direct_get = b"GET /big HTTP/1.1\r\nHost: bench.test\r\n\r\n".to_vec();
    let proxied_get =
        format!("GET http://bench.test:{port}/big HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n")
            .into_bytes();

    // Interleave the paths so that noise from the machine hits all of them alike.
    let tunnel_target = format!("bench.test:{port}");
    let relay = bare_relay(up);
    let paths: [Path; 5] = [
        (
            "direct                     ",
            Box::new(|| exchange(TcpStream::connect(up).expect("connect"), &direct_get)),
        ),
        (
            "bare splice relay, no proxy",
            Box::new(|| exchange(TcpStream::connect(relay).expect("connect"), &direct_get)),
        ),
        (
            "proxy, plain HTTP, splice  ",
            Box::new(|| {
                exchange(
                    TcpStream::connect(proxy_addr).expect("connect"),
                    &proxied_get,
                )
            }),
        ),
        (
            "proxy, CONNECT, splice     ",
            Box::new(|| exchange(connect_tunnel(proxy_addr, &tunnel_target), &direct_get)),
        ),
        (
            "proxy, plain HTTP, copying ",
            Box::new(|| {
                exchange(
                    TcpStream::connect(copy_addr).expect("connect"),
                    &proxied_get,
                )
            }),
        ),
    ];
    let mut results: Vec<Vec<Measure>> = paths.iter().map(|_| Vec::new()).collect();
    for _ in 0..3 {
        for (i, (_, run)) in paths.iter().enumerate() {
            results[i].push(measure(run));
        }
    }
    let results: Vec<Measure> = results
        .into_iter()
        .map(|mut v| {
            v.sort_by_key(|m| m.wall);
            v.remove(v.len() / 2)
        })
        .collect();
    let direct_wall = results[0].wall;
    let cores = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as f64;
    println!("download {} MB, {label}:", big / 1_000_000);
    for ((name, _), m) in paths.iter().zip(&results) {
        assert!(m.bytes > big, "short download: {} bytes", m.bytes);
        // Client, server and proxy share this machine's cores: even spread perfectly over
        // them, a path's CPU time bounds how fast it can go. This is that bound, as a ratio.
        let ceiling = direct_wall.as_secs_f64() / (m.cpu.as_secs_f64() / cores).max(1e-9);
        println!(
            "  {name} {:>7.1} MB/s  ({:>7.1?})  ratio {:.2}x   cpu {:>6.1?} per download (CPU-bound ceiling {:.2}x)",
            mbps(m.bytes, m.wall),
            m.wall,
            direct_wall.as_secs_f64() / m.wall.as_secs_f64(),
            m.cpu,
            ceiling
        );
    }
}

fn main() {
    let mb = env_usize("PROXY_BENCH_MB", 100);
    let requests = env_usize("PROXY_BENCH_REQUESTS", 1000);
    let big = mb * 1_000_000;
    let up = upstream(big, false);
    let up_unpaced = upstream(big, true);
    let port = up.port();

    let policy = NetworkPolicy {
        allow: vec!["bench.test:*".into(), "127.0.0.2:*".into()],
        hosts: BTreeMap::from([("bench.test".to_string(), "127.0.0.2".parse().expect("ip"))]),
    };
    let start_proxy = |splice: bool| {
        let mut config = ProxyConfig::from_policy(&policy).expect("policy");
        config.system_resolver = false;
        config.max_bytes = u64::MAX;
        config.max_events = 1_000_000;
        config.splice = splice;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        (
            EgressProxy::start(listener, config).expect("start proxy"),
            addr,
        )
    };
    let (proxy, proxy_addr) = start_proxy(true);
    let (copy_proxy, copy_addr) = start_proxy(false);

    println!(
        "cordon-net proxy benchmark (loopback, {} cores, median of {ROUNDS})",
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    // The same download from a server whose sockets send with the host's default congestion
    // control, and from one that sends unpaced. On hosts that default to BBR the first is what
    // a real server there does, but BBR's pacing on loopback limits a direct download more
    // than the proxied one; the second is each path at the speed of its copies. The target
    // (>= 0.9x direct) is read from both.
    let host_cc = host_congestion_control();
    download(
        &format!("server sending with the host's default ({host_cc})"),
        up,
        proxy_addr,
        copy_addr,
        big,
    );
    download(
        "server sending unpaced (cubic, else reno)",
        up_unpaced,
        proxy_addr,
        copy_addr,
        big,
    );

    let small_direct = b"GET /small HTTP/1.1\r\nHost: bench.test\r\n\r\n".to_vec();
    let small_proxied =
        format!("GET http://bench.test:{port}/small HTTP/1.1\r\nHost: bench.test:{port}\r\n\r\n")
            .into_bytes();
    // Warm up both paths.
    for _ in 0..50 {
        exchange(TcpStream::connect(up).expect("connect"), &small_direct);
        exchange(
            TcpStream::connect(proxy_addr).expect("connect"),
            &small_proxied,
        );
    }
    let d = latencies(requests, || {
        exchange(TcpStream::connect(up).expect("connect"), &small_direct);
    });
    let p = latencies(requests, || {
        exchange(
            TcpStream::connect(proxy_addr).expect("connect"),
            &small_proxied,
        );
    });
    println!("{requests} small requests, one connection each (mean / p50 / p99):");
    println!("  direct  {:?} / {:?} / {:?}", d.0, d.1, d.2);
    println!(
        "  proxy   {:?} / {:?} / {:?}  (mean {:.2}x direct, +{:?} per request)",
        p.0,
        p.1,
        p.2,
        p.0.as_secs_f64() / d.0.as_secs_f64(),
        p.0.saturating_sub(d.0)
    );
    let events = proxy.shutdown();
    let copy_events = copy_proxy.shutdown();
    println!("{} decisions recorded", events.len() + copy_events.len());
}
