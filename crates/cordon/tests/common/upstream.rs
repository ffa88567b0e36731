//! A tiny plain-HTTP upstream on a loopback address that counts the connections it accepts:
//! the far side of the egress tests (what reached it, and how often).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Upstream {
    pub addr: SocketAddr,
    pub port: u16,
    pub hits: Arc<AtomicUsize>,
}

impl Upstream {
    /// Listens on `ip` (a loopback address), any port; answers every request
    /// `hello from upstream` and closes.
    pub fn start(ip: &str) -> Upstream {
        let l = TcpListener::bind((ip, 0)).expect("bind loopback");
        let addr = l.local_addr().expect("local addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut buf = [0u8; 4096];
                    let mut req = Vec::new();
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let body = "hello from upstream\n";
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Upstream {
            addr,
            port: addr.port(),
            hits,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}
