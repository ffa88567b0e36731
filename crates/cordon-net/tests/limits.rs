//! Caps and timeouts: concurrent connections, total bytes, slow clients, floods.

mod common;

use std::io::{Read, Write};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn connection_cap_answers_503_and_frees_slots() {
    let up = Upstream::start();
    let p = Proxy::start(|c| c.max_connections = 2);
    let a = connect(p.addr);
    let b = connect(p.addr);
    // Let the proxy accept both.
    for _ in 0..100 {
        if p.proxy.active_connections() == 2 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(p.proxy.active_connections(), 2);
    let url = format!("http://allowed.test:{}/hello", up.port());
    let host = format!("allowed.test:{}", up.port());
    let resp = get(p.addr, &url, &host);
    assert_eq!(resp.status, 503, "{resp:?}");
    let e = p
        .proxy
        .events()
        .into_iter()
        .find(|e| e.reason.starts_with("connection limit"))
        .unwrap();
    assert_eq!(e.verdict, "deny");
    drop(a);
    drop(b);
    for _ in 0..100 {
        if p.proxy.active_connections() == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(get(p.addr, &url, &host).status, 200);
}

#[test]
fn byte_cap_cuts_the_transfer_and_refuses_later_requests() {
    byte_cap_cuts(true);
    byte_cap_cuts(false);
}

fn byte_cap_cuts(splice: bool) {
    let up = Upstream::start();
    let cap = 1_000_000u64;
    let p = Proxy::start(|c| {
        c.max_bytes = cap;
        c.splice = splice;
    });
    let port = up.port();
    let mut s = connect(p.addr);
    write!(s, "GET http://allowed.test:{port}/big?n=5000000 HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(raw.starts_with(b"HTTP/1.1 200 OK"));
    assert!((raw.len() as u64) < cap, "got {} bytes", raw.len());
    assert!(raw.len() > 900_000, "got {} bytes", raw.len());
    let e = p.final_event_for("allowed.test");
    assert_eq!(e.verdict, "allow");
    assert!(e.reason.ends_with("cut: byte limit reached"), "{e:?}");
    assert!(e.bytes <= cap && e.bytes > 900_000, "{e:?}");
    assert_eq!(p.proxy.bytes_used(), cap);

    let resp = get(
        p.addr,
        &format!("http://allowed.test:{port}/hello"),
        &format!("allowed.test:{port}"),
    );
    assert_eq!(resp.status, 403);
    assert!(resp.text().contains("byte limit reached"));
    let (status, _, _) = tunnel(p.addr, &format!("allowed.test:{port}"));
    assert_eq!(status, 403);
}

#[test]
fn byte_cap_applies_to_tunnels_in_both_directions() {
    tunnel_byte_cap(true);
    tunnel_byte_cap(false);
}

fn tunnel_byte_cap(splice: bool) {
    let echo = Echo::start();
    let p = Proxy::start(|c| {
        c.max_bytes = 100_000;
        c.splice = splice;
    });
    let (status, _, mut s) = tunnel(p.addr, &format!("allowed.test:{}", echo.port()));
    assert_eq!(status, 200);
    let writer = {
        let mut s = s.try_clone().unwrap();
        thread::spawn(move || {
            let chunk = vec![7u8; 10_000];
            for _ in 0..20 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        })
    };
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    let _ = writer.join();
    assert!(back.len() <= 50_000 + 1, "echoed {}", back.len());
    let events = p.proxy.shutdown();
    assert_eq!(events[0].bytes, 100_000, "{events:#?}");
}

#[test]
fn slow_loris_times_out_without_blocking_others() {
    let up = Upstream::start();
    let p = Proxy::start(|c| c.header_timeout = Duration::from_secs(2));
    let port = up.port();
    let addr = p.addr;
    // Several slow clients dripping one byte at a time.
    let slow: Vec<_> = (0..5)
        .map(|_| {
            thread::spawn(move || {
                let mut s = connect(addr);
                let start = Instant::now();
                for b in format!("GET http://allowed.test:{port}/hello HTTP/1.1\r\nHost: allowed")
                    .bytes()
                {
                    if s.write_all(&[b]).is_err() {
                        break;
                    }
                    thread::sleep(Duration::from_millis(50));
                }
                let mut raw = Vec::new();
                let _ = s.read_to_end(&mut raw);
                (start.elapsed(), String::from_utf8_lossy(&raw).into_owned())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    // A normal client meanwhile is served at once.
    let start = Instant::now();
    for _ in 0..5 {
        let resp = get(
            p.addr,
            &format!("http://allowed.test:{port}/hello"),
            &format!("allowed.test:{port}"),
        );
        assert_eq!(resp.status, 200);
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    for t in slow {
        let (took, answer) = t.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(took < Duration::from_secs(4), "{took:?}");
    }
    let timeouts = p
        .proxy
        .events()
        .into_iter()
        .filter(|e| e.reason == "request head not received in time")
        .count();
    assert_eq!(timeouts, 5);
}

#[test]
fn slow_tls_hello_is_cut() {
    let echo = Echo::start();
    let p = Proxy::start(|c| c.header_timeout = Duration::from_millis(500));
    let (status, _, mut s) = tunnel(p.addr, &format!("allowed.test:{}", echo.port()));
    assert_eq!(status, 200);
    // The first byte of a ClientHello, then nothing.
    s.write_all(&[22, 3, 1]).unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(start.elapsed() < Duration::from_secs(3));
    let e = p.event_for("allowed.test");
    assert_eq!(e.reason, "tls client hello not completed in time");
    assert_eq!(echo.received.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn idle_tunnels_are_closed() {
    let echo = Echo::start();
    let p = Proxy::start(|c| c.idle_timeout = Duration::from_millis(500));
    let (status, _, mut s) = tunnel(p.addr, &format!("allowed.test:{}", echo.port()));
    assert_eq!(status, 200);
    s.write_all(b"hi").unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(rest, b"hi");
    assert!(start.elapsed() < Duration::from_secs(3));
    let e = p.final_event_for("allowed.test");
    assert!(e.reason.ends_with("closed: idle timeout"), "{e:?}");
}

#[test]
fn a_flood_on_one_proxy_does_not_stop_another() {
    let up = Upstream::start();
    let flooded = Proxy::start(|c| {
        c.max_connections = 8;
        c.header_timeout = Duration::from_secs(10);
    });
    let calm = Proxy::start(|_| {});
    // Fill the flooded proxy with idle connections, then keep hammering it.
    let held: Vec<_> = (0..8).map(|_| connect(flooded.addr)).collect();
    let addr = flooded.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammer = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut refused = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(mut s) = std::net::TcpStream::connect(addr) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buf = [0u8; 12];
                    if s.read_exact(&mut buf).is_ok() && &buf == b"HTTP/1.1 503" {
                        refused += 1;
                    }
                }
            }
            refused
        })
    };
    let port = up.port();
    let start = Instant::now();
    for _ in 0..20 {
        let resp = get(
            calm.addr,
            &format!("http://allowed.test:{port}/hello"),
            &format!("allowed.test:{port}"),
        );
        assert_eq!(resp.status, 200);
    }
    let took = start.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let refused = hammer.join().unwrap();
    assert!(refused > 0);
    assert!(took < Duration::from_secs(3), "calm proxy took {took:?}");
    drop(held);
}
