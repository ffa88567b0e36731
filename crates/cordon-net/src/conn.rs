//! The accept loop and the life of one client connection.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_policy::network::{canonical_ip, parse_authority, Host, Verdict};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::events::{sanitize, Record};
use crate::http::{self, Framing, HeadError, RequestHead};
use crate::sni::{self, Hello};
use crate::{Policy, Shared};

/// Relay buffer per direction.
const BUF: usize = 64 * 1024;
/// Longest chunk-size or trailer line of a chunked request body.
const MAX_CHUNK_LINE: usize = 4096;
/// How long, and how much, the proxy keeps reading from a client it has answered and is about
/// to close, so that closing does not reset the connection before the client read the answer.
const LINGER: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 256 * 1024;

pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, _)) => {
                    let _ = sock.set_nodelay(true);
                    crate::local_hop::tune(&sock);
                    if shared.active.load(Ordering::Acquire) >= shared.max_connections {
                        tokio::spawn(refuse_busy(sock, shared.clone()));
                    } else {
                        let slot = ActiveSlot::take(&shared);
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            let _slot = slot;
                            handle(sock, shared).await;
                        });
                    }
                }
                // Out of file descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
        }
    }
}

/// One place in the connection count, given back on drop.
struct ActiveSlot(Arc<Shared>);

impl ActiveSlot {
    fn take(shared: &Arc<Shared>) -> ActiveSlot {
        shared.active.fetch_add(1, Ordering::AcqRel);
        ActiveSlot(shared.clone())
    }
}

impl Drop for ActiveSlot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn refuse_busy(sock: TcpStream, shared: Arc<Shared>) {
    let mut rec = Record::new(shared.clone());
    rec.deny(format!(
        "connection limit reached ({} open)",
        shared.max_connections
    ));
    let (mut r, mut w) = sock.into_split();
    answer(
        &mut r,
        &mut w,
        503,
        "too many connections from this sandbox",
    )
    .await;
}

/// Send the proxy's own answer, close the sending side, and drain what the client still sends
/// for a moment (closing with unread data would reset the connection and could lose the
/// answer).
async fn answer(r: &mut OwnedReadHalf, w: &mut OwnedWriteHalf, status: u16, text: &str) {
    let response = http::proxy_response(status, text);
    let _ = tokio::time::timeout(LINGER, async {
        let _ = w.write_all(&response).await;
        let _ = w.shutdown().await;
    })
    .await;
    linger(r).await;
}

async fn linger<R: AsyncRead + Unpin>(r: &mut R) {
    let _ = tokio::time::timeout(LINGER, async {
        let mut buf = [0u8; 8192];
        let mut total = 0;
        while total < LINGER_BYTES {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}

async fn handle(sock: TcpStream, shared: Arc<Shared>) {
    let mut rec = Record::new(shared.clone());
    let (mut r, mut w) = sock.into_split();
    let head = tokio::time::timeout(shared.header_timeout, http::read_request(&mut r)).await;
    let (head, leftover) = match head {
        Err(_) => {
            rec.deny("request head not received in time");
            answer(&mut r, &mut w, 408, "request head not received in time").await;
            return;
        }
        Ok(Err(HeadError::Closed | HeadError::Io(_))) => return,
        Ok(Err(HeadError::TooLarge)) => {
            rec.deny("request head too large");
            answer(&mut r, &mut w, 431, "request head too large").await;
            return;
        }
        Ok(Err(HeadError::Malformed(why))) => {
            rec.deny(format!("malformed request: {why}"));
            answer(&mut r, &mut w, 400, &format!("malformed request: {why}")).await;
            return;
        }
        Ok(Ok(parsed)) => parsed,
    };
    let client = Client { r, w, leftover };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        tunnel(client, head, rec, shared).await;
    } else {
        forward(client, head, rec, shared).await;
    }
}

struct Client {
    r: OwnedReadHalf,
    w: OwnedWriteHalf,
    /// Bytes read past the request head.
    leftover: Vec<u8>,
}

impl Client {
    async fn refuse(&mut self, rec: &mut Record, status: u16, reason: &str) {
        rec.deny(reason);
        answer(&mut self.r, &mut self.w, status, reason).await;
    }
}

/// Why an upstream could not be used.
enum UpstreamError {
    /// Policy: every resolved address is refused.
    Denied(String),
    /// The destination is allowed but unreachable: HTTP status and reason.
    Failed(u16, String),
}

/// Resolve (static map, then the system resolver if enabled), check every address, connect to
/// the first checked address that answers. Nothing is resolved twice.
async fn open_upstream(
    shared: &Shared,
    policy: &Policy,
    host: &Host,
    port: u16,
) -> Result<TcpStream, UpstreamError> {
    let deadline = tokio::time::Instant::now() + shared.connect_timeout;
    let addrs: Vec<IpAddr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => match policy.hosts.get(name) {
            Some(ip) => vec![*ip],
            None if shared.system_resolver => {
                match tokio::time::timeout_at(
                    deadline,
                    tokio::net::lookup_host((name.as_str(), port)),
                )
                .await
                {
                    Err(_) => {
                        return Err(UpstreamError::Failed(
                            504,
                            format!("resolving {name} timed out"),
                        ))
                    }
                    Ok(Err(e)) => {
                        return Err(UpstreamError::Failed(
                            502,
                            format!("cannot resolve {name}: {e}"),
                        ))
                    }
                    Ok(Ok(found)) => {
                        let mut ips: Vec<IpAddr> = Vec::new();
                        for sa in found {
                            if !ips.contains(&sa.ip()) {
                                ips.push(sa.ip());
                            }
                        }
                        ips
                    }
                }
            }
            None => {
                return Err(UpstreamError::Failed(
                    502,
                    format!("no static address for {name} and the system resolver is off"),
                ))
            }
        },
    };
    let mut checked = Vec::new();
    let mut first_denial = None;
    for ip in addrs {
        let decision = policy.rules.check_addr(ip, port);
        if decision.is_allowed() {
            checked.push(canonical_ip(ip));
        } else if first_denial.is_none() {
            first_denial = Some(decision.reason);
        }
    }
    if checked.is_empty() {
        return Err(match first_denial {
            Some(reason) => UpstreamError::Denied(reason),
            None => UpstreamError::Failed(502, format!("{host} has no address")),
        });
    }
    let mut last = UpstreamError::Failed(502, format!("{host} has no usable address"));
    for ip in checked {
        let addr = SocketAddr::new(ip, port);
        if let Some(filter) = &shared.connect_filter {
            if !filter(addr) {
                last = UpstreamError::Denied(format!("connect filter refused {addr}"));
                continue;
            }
        }
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => {
                last = UpstreamError::Failed(502, format!("connect to {addr} failed: {e}"))
            }
            Err(_) => {
                return Err(UpstreamError::Failed(
                    504,
                    format!("connect to {addr} timed out"),
                ))
            }
        }
    }
    Err(last)
}

/// Policy checks shared by both request kinds; `Ok` with the upstream and the allow reason.
async fn admit(
    client: &mut Client,
    rec: &mut Record,
    shared: &Shared,
    host: &Host,
    port: u16,
) -> Option<(TcpStream, String)> {
    let policy = shared.policy();
    let decision = policy.rules.check(host, port);
    if !decision.is_allowed() {
        client.refuse(rec, 403, &decision.reason).await;
        return None;
    }
    if shared.budget_exhausted() {
        client.refuse(rec, 403, "byte limit reached").await;
        return None;
    }
    match open_upstream(shared, &policy, host, port).await {
        Ok(stream) => Some((stream, decision.reason)),
        Err(UpstreamError::Denied(reason)) => {
            client.refuse(rec, 403, &reason).await;
            None
        }
        Err(UpstreamError::Failed(status, reason)) => {
            rec.pending(Verdict::Allow, decision.reason);
            rec.note(reason.clone());
            answer(&mut client.r, &mut client.w, status, &reason).await;
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CONNECT

async fn tunnel(mut client: Client, head: RequestHead, mut rec: Record, shared: Arc<Shared>) {
    rec.target(http::raw_host(&head.target), 0);
    if let Some(icpt) = &shared.secrets {
        if let Some(s) = icpt.placeholder_in_head(&head) {
            let reason =
                crate::intercept::exfiltration(&s.name, &sanitize(http::raw_host(&head.target)));
            return client.refuse(&mut rec, 403, &reason).await;
        }
    }
    let (host, port) = match parse_authority(&head.target) {
        Ok((host, Some(port))) => (host, port),
        Ok((_, None)) => {
            return client
                .refuse(&mut rec, 400, "CONNECT target needs a port")
                .await
        }
        Err(e) => {
            return client
                .refuse(&mut rec, 400, &format!("bad CONNECT target: {e}"))
                .await
        }
    };
    rec.target(http::raw_host(&head.target), port);
    let Some((upstream, reason)) = admit(&mut client, &mut rec, &shared, &host, port).await else {
        return;
    };
    rec.pending(Verdict::Allow, reason.clone());
    if client
        .w
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        rec.note("client went away");
        return;
    }
    if let (Some(icpt), Host::Name(name)) = (&shared.secrets, &host) {
        if icpt.binds(name) {
            let Client { r, w, leftover } = client;
            let Ok(sock) = r.reunite(w) else {
                return;
            };
            let client = crate::intercept::Prefixed::new(leftover, sock);
            crate::intercept::serve(
                client,
                upstream,
                name.clone(),
                port,
                icpt.clone(),
                shared.clone(),
                rec,
                reason,
            )
            .await;
            return;
        }
    }
    let flow = Flow::new(&shared, rec.bytes.clone());
    let Client {
        mut r,
        mut w,
        leftover,
    } = client;
    let (mut ur, mut uw) = upstream.into_split();
    let down = flow.relay(&mut ur, &mut w);
    let up = async {
        let first = sni_gate(&mut r, leftover, &host, &flow, shared.header_timeout).await?;
        rec.allow(reason);
        flow.write(&mut uw, &first).await?;
        flow.relay(&mut r, &mut uw).await
    };
    let result = tokio::try_join!(down, up);
    if let Err(end) = result {
        end.record(&mut rec);
    }
}

/// Read the tunnel's first bytes; if they are a TLS ClientHello naming another host than the
/// `CONNECT` target, refuse. Returns the bytes read, to be forwarded.
async fn sni_gate(
    r: &mut OwnedReadHalf,
    mut buf: Vec<u8>,
    host: &Host,
    flow: &Flow,
    hello_timeout: Duration,
) -> Result<Vec<u8>, End> {
    let mut chunk = vec![0u8; 16 * 1024];
    let mut hello_deadline: Option<Instant> = None;
    loop {
        match sni::parse(&buf) {
            Hello::NotTls | Hello::Complete(None) => return Ok(buf),
            Hello::Complete(Some(name)) => {
                return match Host::parse(&name) {
                    Ok(sni_host) if &sni_host == host => Ok(buf),
                    Ok(sni_host) => Err(End::Denied(format!(
                        "tls sni {} does not match connect host {host}",
                        sanitize(&sni_host.to_string())
                    ))),
                    Err(_) => Err(End::Denied(format!(
                        "malformed tls sni '{}'",
                        sanitize(&name)
                    ))),
                };
            }
            Hello::Malformed(why) => {
                return Err(End::Denied(format!("malformed tls client hello: {why}")))
            }
            Hello::Incomplete => {}
        }
        if buf.len() > sni::MAX_HELLO + 64 * 1024 {
            return Err(End::Denied("tls client hello too large".into()));
        }
        // Once a ClientHello has started, it must complete within the head timeout (no drip
        // feeding); before that the tunnel may legitimately wait for the server to speak.
        let n = if buf.is_empty() {
            flow.read(r, &mut chunk).await?
        } else {
            let deadline = *hello_deadline.get_or_insert_with(|| Instant::now() + hello_timeout);
            match tokio::time::timeout_at(deadline.into(), flow.read(r, &mut chunk)).await {
                Ok(n) => n?,
                Err(_) => return Err(End::Denied("tls client hello not completed in time".into())),
            }
        };
        if n == 0 {
            return Err(End::ClientGone);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP

async fn forward(mut client: Client, head: RequestHead, mut rec: Record, shared: Arc<Shared>) {
    let url = match http::parse_absolute(&head.target) {
        Ok(url) => url,
        Err(why) => {
            rec.target(&head.target, 0);
            return client.refuse(&mut rec, 400, &why).await;
        }
    };
    rec.target(http::raw_host(&url.authority), 80);
    let (host, port) = match parse_authority(&url.authority) {
        Ok((host, port)) => (host, port.unwrap_or(80)),
        Err(e) => {
            return client
                .refuse(&mut rec, 400, &format!("bad URL host: {e}"))
                .await
        }
    };
    rec.target(http::raw_host(&url.authority), port);
    if let Some(icpt) = &shared.secrets {
        if let Host::Name(name) = &host {
            if icpt.binds(name) {
                let reason = format!(
                    "plain HTTP to {name}, which a secret is bound to: refused (secrets go over \
                     verified TLS only; use https)"
                );
                return client.refuse(&mut rec, 403, &reason).await;
            }
        }
        if let Some(s) = icpt.placeholder_in_head(&head) {
            let reason = crate::intercept::exfiltration(&s.name, &host.to_string());
            return client.refuse(&mut rec, 403, &reason).await;
        }
    }
    // The Host header must name the request target, so that the server cannot be told
    // another name than the one the policy checked.
    let host_headers: Vec<&[u8]> = http::header_values(&head.headers, "host").collect();
    if host_headers.len() > 1 {
        return client.refuse(&mut rec, 400, "several Host headers").await;
    }
    if let Some(value) = host_headers.first() {
        let text = String::from_utf8_lossy(value);
        let matches = matches!(
            parse_authority(text.trim()),
            Ok((h, p)) if h == host && p.unwrap_or(80) == port
        );
        if !matches {
            let reason = format!(
                "host header mismatch: {} is not {}",
                sanitize(text.trim()),
                host.with_port(port)
            );
            return client.refuse(&mut rec, 403, &reason).await;
        }
    }
    let framing = match http::request_framing(&head.headers) {
        Ok(f) => f,
        Err(why) => {
            return client
                .refuse(&mut rec, 400, &format!("malformed request: {why}"))
                .await
        }
    };
    let host_header = match (&host, port) {
        (Host::Ip(IpAddr::V6(ip)), 80) => format!("[{ip}]"),
        (_, 80) => host.to_string(),
        _ => host.with_port(port),
    };
    let request = match http::origin_request(&head, &url.path, &host_header) {
        Ok(bytes) => bytes,
        Err(why) => {
            return client
                .refuse(&mut rec, 400, &format!("malformed request: {why}"))
                .await
        }
    };
    let Some((upstream, reason)) = admit(&mut client, &mut rec, &shared, &host, port).await else {
        return;
    };
    rec.allow(reason);
    let flow = Flow::new(&shared, rec.bytes.clone());
    let Client { r, mut w, leftover } = client;
    let mut body = BufReader::with_capacity(BUF, std::io::Cursor::new(leftover).chain(r));
    let (mut ur, mut uw) = upstream.into_split();
    let result = {
        let up = async {
            flow.write(&mut uw, &request).await?;
            forward_body(&mut body, &mut uw, framing, &flow).await
        };
        let down = relay_response(&mut ur, &mut w, &flow);
        tokio::pin!(up, down);
        let mut up_done = false;
        loop {
            tokio::select! {
                r = &mut up, if !up_done => match r {
                    Ok(()) => up_done = true,
                    Err(end) => break Err(end),
                },
                r = &mut down => break r,
            }
        }
    };
    if let Err(end) = &result {
        if !flow.responded.load(Ordering::Acquire) {
            if let Some((status, text)) = end.status() {
                let _ = w.write_all(&http::proxy_response(status, &text)).await;
            }
        }
    }
    if let Err(end) = result {
        end.record(&mut rec);
    }
    let _ = w.shutdown().await;
    linger(&mut body).await;
}

/// Forward exactly the request body (by its framing) and nothing after it.
async fn forward_body<R: AsyncBufRead + Unpin>(
    r: &mut R,
    w: &mut OwnedWriteHalf,
    framing: Framing,
    flow: &Flow,
) -> Result<(), End> {
    match framing {
        Framing::None => Ok(()),
        Framing::Length(n) => copy_exact(r, w, n, flow).await,
        Framing::Chunked => loop {
            let line = read_line(r, flow).await?;
            let size = chunk_size(&line)?;
            flow.write(w, &line).await?;
            if size == 0 {
                // Trailer fields, then the blank line.
                loop {
                    let line = read_line(r, flow).await?;
                    flow.write(w, &line).await?;
                    if line == b"\r\n" {
                        return Ok(());
                    }
                }
            }
            copy_exact(r, w, size, flow).await?;
            let end = read_line(r, flow).await?;
            if end != b"\r\n" {
                return Err(End::BadRequest("chunk not followed by CRLF".into()));
            }
            flow.write(w, &end).await?;
        },
    }
}

fn chunk_size(line: &[u8]) -> Result<u64, End> {
    let bad = || End::BadRequest("malformed chunk size".into());
    let body = line.strip_suffix(b"\r\n").ok_or_else(bad)?;
    if body.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(bad());
    }
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((used, size))) if used == line.len() => Ok(size),
        _ => Err(bad()),
    }
}

/// One line ending in LF (CRLF checked by the caller), bounded.
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R, flow: &Flow) -> Result<Vec<u8>, End> {
    let mut line = Vec::new();
    loop {
        let available = flow.fill(r).await?;
        if available.is_empty() {
            return Err(End::ClientGone);
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..take]);
        r.consume(take);
        if line.len() > MAX_CHUNK_LINE {
            return Err(End::BadRequest("chunk line too long".into()));
        }
        if done {
            return Ok(line);
        }
    }
}

async fn copy_exact<R: AsyncBufRead + Unpin>(
    r: &mut R,
    w: &mut OwnedWriteHalf,
    mut n: u64,
    flow: &Flow,
) -> Result<(), End> {
    while n > 0 {
        let available = flow.fill(r).await?;
        if available.is_empty() {
            return Err(End::ClientGone);
        }
        let take = available
            .len()
            .min(usize::try_from(n).unwrap_or(usize::MAX));
        let chunk = available[..take].to_vec();
        r.consume(take);
        flow.write(w, &chunk).await?;
        n -= take as u64;
    }
    Ok(())
}

/// The upstream's answer to the client: interim 1xx heads as they are, the final head with
/// hop-by-hop headers removed, then everything until the upstream closes.
async fn relay_response(
    ur: &mut OwnedReadHalf,
    w: &mut OwnedWriteHalf,
    flow: &Flow,
) -> Result<(), End> {
    loop {
        let (head, rest) = match flow.idle_bounded(http::read_response(ur)).await {
            None => return Err(End::UpstreamTimeout),
            Some(Err(HeadError::Closed)) => {
                return Err(End::BadResponse("upstream closed without answering".into()))
            }
            Some(Err(HeadError::Io(e))) => return Err(End::Io(e)),
            Some(Err(HeadError::TooLarge)) => {
                return Err(End::BadResponse("response head too large".into()))
            }
            Some(Err(HeadError::Malformed(why))) => {
                return Err(End::BadResponse(format!("malformed response: {why}")))
            }
            Some(Ok(parsed)) => parsed,
        };
        let interim = (100..200).contains(&head.code) && head.code != 101;
        let bytes = if interim {
            // Interim answers carry no body; pass the head on and read the next one.
            let mut b = http::client_response(&head);
            // `client_response` adds `Connection: close`, which has no place in a 1xx.
            b.truncate(b.len() - b"Connection: close\r\n\r\n".len());
            b.extend_from_slice(b"\r\n");
            b
        } else {
            http::client_response(&head)
        };
        flow.responded.store(true, Ordering::Release);
        flow.write(w, &bytes).await?;
        if interim {
            if !rest.is_empty() {
                return Err(End::BadResponse("bytes after an interim response".into()));
            }
            continue;
        }
        flow.write(w, &rest).await?;
        return flow.relay(ur, w).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Relaying with accounting

/// How a relay ended early.
#[derive(Debug)]
pub(crate) enum End {
    /// No traffic either way for the idle timeout.
    Idle,
    ByteCap,
    ClientGone,
    Io(std::io::Error),
    /// A policy refusal discovered while relaying (the SNI check).
    Denied(String),
    BadRequest(String),
    BadResponse(String),
    UpstreamTimeout,
}

impl End {
    /// The answer to give a plain HTTP client that has not had a response yet.
    fn status(&self) -> Option<(u16, String)> {
        match self {
            End::Idle | End::UpstreamTimeout => {
                Some((504, "upstream did not answer in time".into()))
            }
            End::ByteCap => Some((403, "byte limit reached".into())),
            End::BadRequest(why) => Some((400, format!("malformed request: {why}"))),
            End::BadResponse(why) => Some((502, why.clone())),
            End::Denied(why) => Some((403, why.clone())),
            End::Io(e) => Some((502, format!("upstream error: {e}"))),
            End::ClientGone => None,
        }
    }

    fn record(self, rec: &mut Record) {
        match self {
            End::Denied(reason) => rec.deny(reason),
            End::Idle => rec.note("closed: idle timeout"),
            End::ByteCap => rec.note("cut: byte limit reached"),
            End::ClientGone => rec.note("client closed early"),
            End::Io(e) => rec.note(format!("closed: {e}")),
            End::BadRequest(why) => rec.note(format!("bad request body: {why}")),
            End::BadResponse(why) => rec.note(format!("bad upstream response: {why}")),
            End::UpstreamTimeout => rec.note("upstream did not answer in time"),
        }
    }
}

/// Byte and idle accounting shared by both directions of one connection.
pub(crate) struct Flow {
    pub(crate) shared: Arc<Shared>,
    pub(crate) bytes: Arc<AtomicU64>,
    start: Instant,
    /// Milliseconds after `start` of the last traffic in either direction.
    last: AtomicU64,
    pub(crate) idle: Duration,
    /// A response has started towards the client (no proxy error page can follow).
    responded: AtomicBool,
}

impl Flow {
    fn new(shared: &Arc<Shared>, bytes: Arc<AtomicU64>) -> Flow {
        Flow {
            shared: shared.clone(),
            bytes,
            start: Instant::now(),
            last: AtomicU64::new(0),
            idle: shared.idle_timeout,
            responded: AtomicBool::new(false),
        }
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::AcqRel);
    }

    /// Time left before the connection counts as idle.
    fn idle_left(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Acquire));
        let quiet = self.start.elapsed().saturating_sub(last);
        self.idle.saturating_sub(quiet)
    }

    /// Run `fut` until it finishes or the connection has been idle for the idle timeout
    /// (traffic in the other direction keeps it alive).
    pub(crate) async fn idle_bounded<F: std::future::Future>(&self, fut: F) -> Option<F::Output> {
        tokio::pin!(fut);
        loop {
            let left = self.idle_left();
            if left.is_zero() {
                return None;
            }
            match tokio::time::timeout(left, &mut fut).await {
                Ok(out) => {
                    self.touch();
                    return Some(out);
                }
                Err(_) => continue,
            }
        }
    }

    async fn read<R: AsyncRead + Unpin>(&self, r: &mut R, buf: &mut [u8]) -> Result<usize, End> {
        match self.idle_bounded(r.read(buf)).await {
            None => Err(End::Idle),
            Some(Ok(n)) => Ok(n),
            Some(Err(e)) => Err(End::Io(e)),
        }
    }

    async fn fill<'r, R: AsyncBufRead + Unpin>(&self, r: &'r mut R) -> Result<&'r [u8], End> {
        // Poll readiness first, then borrow the buffer: `fill_buf` is cancel-safe.
        match self.idle_bounded(r.fill_buf()).await {
            None => return Err(End::Idle),
            Some(Err(e)) => return Err(End::Io(e)),
            Some(Ok(_)) => {}
        }
        r.fill_buf().await.map_err(End::Io)
    }

    /// Write `data`, charging it to the byte budget; cut at the budget.
    async fn write(&self, w: &mut OwnedWriteHalf, data: &[u8]) -> Result<(), End> {
        if data.is_empty() {
            return Ok(());
        }
        let granted = self.shared.take_bytes(data.len());
        self.bytes.fetch_add(granted as u64, Ordering::AcqRel);
        if granted > 0 {
            match tokio::time::timeout(self.idle, w.write_all(&data[..granted])).await {
                Err(_) => return Err(End::Idle),
                Ok(Err(e)) => return Err(End::Io(e)),
                Ok(Ok(())) => self.touch(),
            }
        }
        if granted < data.len() {
            return Err(End::ByteCap);
        }
        Ok(())
    }

    /// Relay from one socket to the other until end of stream, then half-close the other
    /// side: with splice(2) where available (the bytes never enter this process), by copying
    /// otherwise.
    async fn relay(&self, r: &mut OwnedReadHalf, w: &mut OwnedWriteHalf) -> Result<(), End> {
        #[cfg(target_os = "linux")]
        if self.shared.splice {
            if let Some(pipe) = crate::splice::Pipe::new() {
                return pipe.relay(self, r, w).await;
            }
        }
        self.pump(r, w).await
    }

    /// Copy until end of stream, then half-close the other side.
    async fn pump<R: AsyncRead + Unpin>(
        &self,
        r: &mut R,
        w: &mut OwnedWriteHalf,
    ) -> Result<(), End> {
        let mut buf = vec![0u8; BUF];
        loop {
            let n = self.read(r, &mut buf).await?;
            if n == 0 {
                let _ = w.shutdown().await;
                return Ok(());
            }
            self.write(w, &buf[..n]).await?;
        }
    }
}
