//! Serving a door's router over HTTP: what `axum::serve` does with axum's features here
//! (HTTP/1.1, upgrades for WebSockets, graceful shutdown), plus the connection timeout it
//! leaves out.
//!
//! Threat model: any client that reaches the port, before it authenticates. `axum::serve` sets
//! no timer, so a connection that never sends a request head, sends one a byte at a time, or
//! sits idle after its last request stays open for ever: enough of them, and the server runs
//! out of file descriptors (a soak saw an idle client's connections pile up). Here each
//! HTTP/1 connection must bring a whole request head within [`IDLE`] of being ready for one —
//! hyper runs the same timer while a keep-alive connection waits for its next request — or it
//! is closed (the first bytes too: hyper's protocol detection would wait for them for ever). A
//! request being served, a streamed answer (SSE, a download) and an upgraded
//! connection (WebSocket) are not bounded by it. [`IDLE`] is longer than the keep-alive of the
//! usual clients' pools (httpx 5 s, Node 4 s, Go 90 s), so a client closes an idle connection
//! before the server does and never sends into one being closed.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::serve::Listener;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tower::ServiceExt;

/// How long a connection may take to send a request head, counted from when it is ready for
/// one: after it is accepted, and after each answer on a keep-alive connection.
pub const IDLE: Duration = Duration::from_secs(120);

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and waits for
/// the open connections to end (idle ones are closed at once, as `axum::serve` does).
pub async fn serve<L>(listener: L, app: Router, shutdown: impl Future<Output = ()>)
where
    L: Listener,
{
    serve_with_idle(listener, app, shutdown, IDLE).await
}

/// [`serve`] with another idle limit (tests).
pub async fn serve_with_idle<L>(
    listener: L,
    app: Router,
    shutdown: impl Future<Output = ()>,
    idle: Duration,
) where
    L: Listener,
{
    serve_inner(listener, app, shutdown, idle, None).await
}

/// [`serve`], also taking TLS on the same port for the names of sandboxes' ports (see
/// [`crate::ports`]): a connection whose first byte starts a TLS handshake is served over TLS
/// with the certificate for the name it asks for (and closed for any other name).
pub async fn serve_with_tls<L>(
    listener: L,
    app: Router,
    shutdown: impl Future<Output = ()>,
    ports: Option<Arc<crate::ports::Ports>>,
) where
    L: Listener,
{
    serve_inner(listener, app, shutdown, IDLE, ports).await
}

async fn serve_inner<L>(
    mut listener: L,
    app: Router,
    shutdown: impl Future<Output = ()>,
    idle: Duration,
    ports: Option<Arc<crate::ports::Ports>>,
) where
    L: Listener,
{
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(idle);
    // Each connection's task holds a receiver of `stop` (told to finish its request and
    // close) and of `running` (whose closing tells that every task has ended).
    let (stop, _) = watch::channel(());
    let (running_tx, running) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (io, _) = tokio::select! {
            conn = listener.accept() => conn,
            _ = &mut shutdown => break,
        };
        let service = app.clone();
        let stopping = stop.subscribe();
        let running = running.clone();
        let builder = builder.clone();
        let ports = ports.clone();
        tokio::spawn(async move {
            let io = FirstBytes::new(io, idle);
            match ports {
                None => drive(&builder, io, service, stopping).await,
                Some(ports) => {
                    let mut io = tokio::io::BufReader::new(io);
                    // Told to stop before the client said anything (or finished its TLS
                    // handshake): there is no request to finish, so the connection just goes —
                    // it must not hold the server's stop until its idle timeout.
                    let mut told = stopping.clone();
                    let tls = tokio::select! {
                        first = io.fill_buf() => match first {
                            Ok([]) | Err(_) => false,
                            // A TLS record of type handshake.
                            Ok(b) => b[0] == 0x16,
                        },
                        _ = told.changed() => {
                            drop(running);
                            return;
                        }
                    };
                    if !tls {
                        drive(&builder, io, service, stopping).await;
                    } else {
                        let accepted = tokio::select! {
                            a = accept_tls(io, &ports, idle) => a,
                            _ = told.changed() => None,
                        };
                        if let Some(io) = accepted {
                            drive(&builder, io, service, stopping).await;
                        }
                    }
                }
            }
            drop(running);
        });
    }
    drop(listener);
    let _ = stop.send(());
    drop(running);
    running_tx.closed().await;
}

/// Completes a TLS handshake for a name under the ports domain, within `idle`.
async fn accept_tls<I>(
    io: I,
    ports: &crate::ports::Ports,
    idle: Duration,
) -> Option<tokio_rustls::server::TlsStream<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    tokio::time::timeout(idle, async {
        let start = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io)
            .await
            .ok()?;
        let config = ports.tls_for(start.client_hello().server_name()?)?;
        start.into_stream(config).await.ok()
    })
    .await
    .ok()
    .flatten()
}

/// Serves one connection until it ends, or finishes its request and closes on `stopping`.
/// Its request bytes are followed on their way to hyper, and a request with both framings
/// answered 400 (see [`crate::framing`]).
async fn drive<I>(builder: &http1::Builder, io: I, app: Router, mut stopping: watch::Receiver<()>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let flag = crate::framing::Ambiguous::default();
    let io = crate::framing::Watched::new(io, flag.clone());
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let app = app.clone();
        let ambiguous = flag.seen();
        async move {
            if ambiguous {
                return Ok::<_, std::convert::Infallible>(crate::framing::refusal());
            }
            app.oneshot(req.map(Body::new)).await
        }
    });
    let conn = builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        .with_upgrades();
    let mut conn = pin!(conn);
    loop {
        tokio::select! {
            // A connection's error (a reset, a malformed request, the timeout) ends only it.
            _ = conn.as_mut() => break,
            _ = stopping.changed() => conn.as_mut().graceful_shutdown(),
        }
    }
}

/// A connection's stream that fails a read with `TimedOut` when no byte has come `limit` after
/// the accept: hyper's HTTP/1-or-2 detection reads the first bytes with no timer of its own.
/// Once a byte came, it is the stream itself (hyper's head timer takes over).
struct FirstBytes<I> {
    io: I,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> FirstBytes<I> {
    fn new(io: I, limit: Duration) -> Self {
        FirstBytes {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstBytes<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Some(deadline) = self.deadline.as_mut() {
            match &polled {
                Poll::Ready(Ok(())) if buf.filled().len() > before => self.deadline = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(std::io::ErrorKind::TimedOut.into()));
                }
                _ => {}
            }
        }
        polled
    }
}

/// `AsyncWrite` for a wrapper (`$t<I>`, its inner stream in `io`) that watches only what is
/// read: every write call passes straight through.
macro_rules! forward_async_write {
    ($t:ident) => {
        impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $t<I> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                data: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.io).poll_write(cx, data)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.io.is_write_vectored()
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.io).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
            }
        }
    };
}
pub(crate) use forward_async_write;

forward_async_write!(FirstBytes);

/// SIGTERM or Ctrl-C: what ends `cordon serve` and `cordon gateway --listen`.
pub async fn terminate_or_interrupt() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        } => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Instant;

    fn start(idle: Duration) -> std::net::SocketAddr {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
                serve_with_idle(listener, app, std::future::pending(), idle).await;
            });
        });
        addr
    }

    /// Seconds until the server closes `s` (reads until EOF), at most `limit`.
    fn closed_after(s: &mut std::net::TcpStream, limit: Duration) -> Option<Duration> {
        let t = Instant::now();
        s.set_read_timeout(Some(limit)).expect("timeout");
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return Some(t.elapsed()),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }

    /// With TLS for ports on (the server's own setup), a connection that has sent nothing yet
    /// — so the server is still waiting to tell TLS from HTTP — does not hold the server's
    /// stop until its idle limit: told to stop, the server ends at once.
    #[test]
    fn a_silent_connection_does_not_hold_the_servers_stop() {
        let dir = std::env::temp_dir().join(format!("cordon-stop-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ports = Arc::new(crate::ports::Ports::new("localhost:1", &dir).expect("ports"));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
                let shutdown = async {
                    let _ = stop_rx.await;
                };
                serve_inner(
                    listener,
                    app,
                    shutdown,
                    Duration::from_secs(60),
                    Some(ports),
                )
                .await;
            });
            let _ = done_tx.send(());
        });
        let _silent = std::net::TcpStream::connect(addr).expect("connect");
        std::thread::sleep(Duration::from_millis(200));
        let _ = stop_tx.send(());
        let stopped = done_rx.recv_timeout(Duration::from_secs(10)).is_ok();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(stopped, "a connection that sent nothing held the stop");
    }

    #[test]
    fn a_connection_that_never_sends_a_request_is_closed() {
        let addr = start(Duration::from_millis(500));
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let after = closed_after(&mut s, Duration::from_secs(10));
        assert!(after.is_some(), "a silent connection stayed open");
    }

    #[test]
    fn a_request_head_sent_a_byte_at_a_time_is_cut_off() {
        let addr = start(Duration::from_millis(500));
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let head =
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        let t = Instant::now();
        for b in head {
            if s.write_all(&[*b]).is_err() {
                break; // closed under us: what this test wants
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let closed = closed_after(&mut s, Duration::from_secs(10)).is_some();
        assert!(
            closed && t.elapsed() < Duration::from_secs(9),
            "a slow head was served"
        );
    }

    #[test]
    fn a_keep_alive_connection_is_served_then_closed_once_idle() {
        let addr = start(Duration::from_millis(500));
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        for _ in 0..3 {
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("request");
            let mut got = Vec::new();
            let mut buf = [0u8; 512];
            while !got.ends_with(b"ok") {
                let n = s.read(&mut buf).expect("answer");
                assert!(n > 0, "closed while serving");
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got.starts_with(b"HTTP/1.1 200"));
            std::thread::sleep(Duration::from_millis(200)); // within the limit: kept
        }
        assert!(closed_after(&mut s, Duration::from_secs(10)).is_some());
    }
}
