//! What the proxy benchmarks share: opening a `CONNECT` tunnel, and this process's CPU time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A `CONNECT` to `target` through the proxy at `proxy`, its `200` read; the tunnel.
pub fn connect_tunnel(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).expect("connect proxy");
    let _ = s.set_nodelay(true);
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("write CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("read CONNECT answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// CPU time (user + system) of this whole process so far: client, upstream and proxy threads.
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line; the state (field 3) is index 0 here.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ticks = field(11) + field(12);
    Duration::from_millis(ticks * 10)
}
