//! The hop between the sandbox and the proxy is the sandbox's own loopback, never a network
//! path: a pacing congestion control there only slows the relay down.
//!
//! Hosts that default to BBR (as this project's CI machines do) pace every socket: BBR sends at
//! the bottleneck rate it has estimated, and on loopback, where there is no bottleneck to
//! find, that estimate held a 100 MB download through the proxy to ~0.6× of a direct one (the
//! bench, `cargo bench -p cordon-net`). A loss-based algorithm without pacing has nothing to
//! estimate on a lossless link and lets the relay run at the speed of the copies. The upstream
//! side keeps the host's choice: that one does cross a real network.

use rustix::net::sockopt::set_tcp_congestion;
use tokio::net::TcpStream;

/// Algorithms to try, in order: CUBIC (Linux's default) needs CAP_NET_ADMIN over the socket's
/// network namespace when the host does not list it as allowed — which cordon has over a
/// sandbox's namespace in both modes, but not over the host's when a test binds the proxy
/// there unprivileged; Reno is always allowed.
const UNPACED: [&str; 2] = ["cubic", "reno"];

/// Gives a client connection (sandbox → proxy) a congestion control that does not pace.
/// Best effort: on failure the socket keeps the host's default, which works, only slower.
pub(crate) fn tune(sock: &TcpStream) {
    for name in UNPACED {
        if set_tcp_congestion(sock, name).is_ok() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::sockopt::tcp_congestion;

    #[tokio::test]
    async fn a_client_connection_gets_an_unpaced_congestion_control() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (sock, _) = listener.accept().await.expect("accept");
        // Start from a pacing algorithm where the host has one, whatever its default is.
        let _ = set_tcp_congestion(&sock, "bbr");
        tune(&sock);
        let now = tcp_congestion(&sock).expect("read TCP_CONGESTION");
        assert!(
            UNPACED.contains(&now.as_str()),
            "congestion control is {now}"
        );
    }
}
