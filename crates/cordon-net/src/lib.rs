//! cordon's egress proxy (issue 5): the only way out of a sandbox's network namespace.
//!
//! The sandbox engine creates a listening TCP socket inside the sandbox's network namespace (on
//! its loopback) and hands it to [`EgressProxy::start`]; the proxy serves it from outside, so the
//! proxy's own outbound connections leave from the host's namespace. Inside, `HTTP_PROXY` and
//! friends point at that socket.
//!
//! What the proxy does for each client connection:
//!
//! * `CONNECT host:port` (HTTPS and other tunnels) and absolute-form plain HTTP
//!   (`GET http://host/path`); anything else is answered `400`.
//! * The host is normalised and checked against the allowlist ([`EgressRules::check`]); IP
//!   literals in any spelling are refused unless an IP/CIDR entry lists the address.
//! * The proxy resolves the name itself — the static [`ProxyConfig::hosts`] map first, then
//!   (when [`ProxyConfig::system_resolver`] is on) the system resolver — checks every address
//!   against the special ranges ([`EgressRules::check_addr`]) and connects only to an address it
//!   checked. There is no second resolution, so DNS rebinding gains nothing.
//! * Plain HTTP: the `Host` header must name the request target; the request is rewritten to
//!   origin-form with hop-by-hop and proxy headers removed and `Connection: close` added; the
//!   request body is forwarded by its own framing (`Content-Length` or `chunked`) and nothing
//!   after it; the response is relayed as is (redirects are never followed).
//! * `CONNECT`: after the tunnel opens, the first bytes from the client are inspected; if they
//!   are a TLS ClientHello with a server name (SNI) that differs from the `CONNECT` host, the
//!   tunnel is closed before anything reaches the server.
//! * Secrets (issue 30, [`ProxyConfig::secrets`]): a `CONNECT` to a host a secret is bound to
//!   is TLS-terminated with a per-run CA and its requests get the secret's value in place of
//!   its placeholder (see `intercept`); a placeholder in any other request (a `CONNECT` target,
//!   a plain HTTP request) refuses it as an attempted exfiltration; plain HTTP to a bound host
//!   is refused (a value never goes out in cleartext).
//! * Caps on concurrent client connections and on total bytes relayed; connect, idle and
//!   request-head timeouts (a slow client only holds its own connection).
//! * Every decision becomes a [`NetworkEvent`]: immediately for denials, when the connection
//!   ends for allowed connections (with the bytes relayed).
//!
//! Denials are answered `403` with a one-line reason; upstream failures `502`; timeouts `504`;
//! a slow request head `408`; the connection cap `503`.

mod conn;
mod events;
mod http;
mod intercept;
mod intercept_h2;
#[cfg(target_os = "linux")]
mod local_hop;
#[cfg(not(target_os = "linux"))]
mod local_hop {
    pub(crate) fn tune(_sock: &tokio::net::TcpStream) {}
}
mod sni;
#[cfg(target_os = "linux")]
mod splice;

/// Entry points for the fuzz targets (`fuzz/`): the proxy's parsers of hostile bytes, reached
/// without a socket. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::http::{Framing, HeadError};
    pub use crate::sni::{client_hello_record, Hello, MAX_HELLO};

    /// What the plain-HTTP proxy makes of one request head (`forward`'s checks in
    /// `conn.rs`, in its order): the head's length and the request it would send upstream, or
    /// why it refuses.
    pub struct Forwarded {
        pub head_len: usize,
        pub framing: Framing,
        pub authority: String,
        pub upstream: Vec<u8>,
    }

    /// Where a request head ends in `buf`, if it is there.
    pub fn head_end(buf: &[u8]) -> Option<usize> {
        crate::http::head_end(buf, 0)
    }

    /// Parses a request head as `read_request` does (`buf` holds one whole head).
    pub fn parse_request(buf: &[u8]) -> Result<crate::http::RequestHead, HeadError> {
        let mut headers = [httparse::EMPTY_HEADER; crate::http::MAX_HEADERS];
        crate::http::parse_request(buf, &mut headers)
    }

    /// The plain-HTTP path of the proxy up to the upstream request: head, absolute URL, host
    /// and Host header, framing, and the rewritten head.
    pub fn forward(buf: &[u8]) -> Result<Forwarded, String> {
        use cordon_policy::network::{parse_authority, Host};
        use std::net::IpAddr;
        let head_len = head_end(buf).ok_or("no complete head")?;
        let head = parse_request(&buf[..head_len]).map_err(|e| format!("{e:?}"))?;
        let url = crate::http::parse_absolute(&head.target)?;
        let (host, port) = parse_authority(&url.authority).map_err(|e| e.to_string())?;
        let port = port.unwrap_or(80);
        let hosts: Vec<&[u8]> = crate::http::header_values(&head.headers, "host").collect();
        if hosts.len() > 1 {
            return Err("several Host headers".into());
        }
        if let Some(value) = hosts.first() {
            let text = String::from_utf8_lossy(value);
            if !matches!(parse_authority(text.trim()), Ok((h, p)) if h == host && p.unwrap_or(80) == port)
            {
                return Err("host header mismatch".into());
            }
        }
        let framing = crate::http::request_framing(&head.headers)?;
        let host_header = match (&host, port) {
            (Host::Ip(IpAddr::V6(ip)), 80) => format!("[{ip}]"),
            (_, 80) => host.to_string(),
            _ => host.with_port(port),
        };
        let upstream = crate::http::origin_request(&head, &url.path, &host_header)?;
        Ok(Forwarded {
            head_len,
            framing,
            authority: host_header,
            upstream,
        })
    }

    /// The framing `request_framing` gives a parsed head's headers.
    pub fn framing(head: &crate::http::RequestHead) -> Result<Framing, String> {
        crate::http::request_framing(&head.headers)
    }

    /// The SNI parser run on the first bytes of a CONNECT tunnel.
    pub fn sni(buf: &[u8]) -> Hello {
        crate::sni::parse(buf)
    }
}

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use cordon_policy::network::{EgressRules, Host, NetworkPolicy};
use cordon_policy::{NetworkEvent, ProfileError};

pub use cordon_policy::network::{Decision, Verdict};
pub use intercept::{InterceptError, Interception, SecretBinding, SecretValue};
#[doc(hidden)]
pub use sni::client_hello_record;

use crate::events::EventLog;

/// Called with every final event, on the proxy's thread: keep it short and non-blocking.
pub type EventCallback = Arc<dyn Fn(&NetworkEvent) + Send + Sync>;

/// A last veto on every outbound connection, called just before `connect(2)` with an address
/// that already passed the policy. Returning `false` refuses it. Tests use it to prove that no
/// connection ever goes to a non-loopback address; a server could use it for extra rules.
pub type ConnectFilter = Arc<dyn Fn(SocketAddr) -> bool + Send + Sync>;

/// Everything the proxy needs. [`ProxyConfig::new`] and [`ProxyConfig::from_policy`] fill in
/// the defaults.
#[derive(Clone)]
pub struct ProxyConfig {
    pub rules: EgressRules,
    /// Static name → address map consulted before any resolver. Keys are normalised on start
    /// (case, trailing dot, IDNA).
    pub hosts: BTreeMap<String, IpAddr>,
    /// Ask the system resolver for names not in `hosts`. Default on; tests turn it off so that
    /// no DNS query ever leaves the machine.
    pub system_resolver: bool,
    /// Concurrent client connections; further connections get `503`. Default 128.
    pub max_connections: usize,
    /// Total bytes relayed (both directions, all connections) over the proxy's life; the
    /// connection that crosses it is cut, later requests get `403`. Default 2 GiB.
    pub max_bytes: u64,
    /// Resolution plus TCP connect to the upstream. Default 10 s.
    pub connect_timeout: Duration,
    /// A connection with no traffic in either direction for this long is closed (`504` if the
    /// upstream has not started answering a plain HTTP request). Default 60 s.
    pub idle_timeout: Duration,
    /// Time a client has to deliver a complete request head, and a `CONNECT` client its TLS
    /// ClientHello. Default 10 s.
    pub header_timeout: Duration,
    /// Events kept for [`EgressProxy::events`]; past it, decisions still reach `on_event` but
    /// are only counted. Default 10 000.
    pub max_events: usize,
    pub on_event: Option<EventCallback>,
    pub connect_filter: Option<ConnectFilter>,
    /// Relay bulk data with splice(2) (Linux): the bytes move between the sockets inside the
    /// kernel instead of being copied through the proxy. Default on; off copies through a
    /// buffer (for comparison, or a kernel where splice misbehaves).
    pub splice: bool,
    /// Secrets bound to hosts (issue 30): TLS to those hosts is terminated and the secrets'
    /// placeholders replaced in request headers; placeholders sent anywhere else are refused.
    /// `None`: no interception at all.
    pub secrets: Option<Arc<Interception>>,
}

impl ProxyConfig {
    pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
    pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

    /// The given rules, no static hosts, default limits.
    pub fn new(rules: EgressRules) -> ProxyConfig {
        ProxyConfig {
            rules,
            hosts: BTreeMap::new(),
            system_resolver: true,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            max_bytes: Self::DEFAULT_MAX_BYTES,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(10),
            max_events: 10_000,
            on_event: None,
            connect_filter: None,
            splice: true,
            secrets: None,
        }
    }

    /// Rules and static hosts of a profile's `[network]` section, default limits.
    pub fn from_policy(policy: &NetworkPolicy) -> Result<ProxyConfig, ProfileError> {
        let mut config = ProxyConfig::new(policy.compile()?);
        config.hosts = policy.static_hosts()?;
        Ok(config)
    }
}

impl fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyConfig")
            .field("rules", &self.rules)
            .field("hosts", &self.hosts)
            .field("system_resolver", &self.system_resolver)
            .field("max_connections", &self.max_connections)
            .field("max_bytes", &self.max_bytes)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("header_timeout", &self.header_timeout)
            .field("max_events", &self.max_events)
            .field("on_event", &self.on_event.as_ref().map(|_| "Fn"))
            .field(
                "connect_filter",
                &self.connect_filter.as_ref().map(|_| "Fn"),
            )
            .field("secrets", &self.secrets)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("proxy listener unusable: {0}")]
    Listener(#[source] std::io::Error),
    #[error("cannot start the proxy runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("static hosts entry '{0}' is not a host name")]
    Hosts(String),
}

/// The rules and static hosts one decision is made with; replaced whole by
/// [`EgressProxy::set_policy`].
pub(crate) struct Policy {
    pub rules: EgressRules,
    pub hosts: BTreeMap<String, IpAddr>,
}

/// State shared by the proxy thread and the handle.
pub(crate) struct Shared {
    pub policy: RwLock<Arc<Policy>>,
    pub log: Mutex<EventLog>,
    pub on_event: Option<EventCallback>,
    pub connect_filter: Option<ConnectFilter>,
    pub system_resolver: bool,
    pub max_connections: usize,
    pub max_bytes: u64,
    pub bytes_used: AtomicU64,
    pub active: AtomicUsize,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub header_timeout: Duration,
    pub splice: bool,
    pub secrets: Option<Arc<Interception>>,
}

impl Shared {
    pub fn policy(&self) -> Arc<Policy> {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reserve up to `n` bytes of the byte budget; returns how many were granted.
    pub fn take_bytes(&self, n: usize) -> usize {
        let want = n as u64;
        let mut granted = 0;
        let _ = self
            .bytes_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                granted = want.min(self.max_bytes.saturating_sub(used));
                Some(used + granted)
            });
        usize::try_from(granted).unwrap_or(n)
    }

    /// Bytes left in the budget now.
    pub fn bytes_left(&self) -> u64 {
        self.max_bytes
            .saturating_sub(self.bytes_used.load(Ordering::Acquire))
    }

    pub fn budget_exhausted(&self) -> bool {
        self.bytes_used.load(Ordering::Acquire) >= self.max_bytes
    }
}

fn normalise_hosts(hosts: &BTreeMap<String, IpAddr>) -> Result<BTreeMap<String, IpAddr>, NetError> {
    let mut out = BTreeMap::new();
    for (name, ip) in hosts {
        match Host::parse(name) {
            Ok(Host::Name(n)) => {
                out.insert(n, *ip);
            }
            _ => return Err(NetError::Hosts(name.clone())),
        }
    }
    Ok(out)
}

/// A running proxy: one thread with a single-threaded tokio runtime serving every connection.
/// Dropping it is [`EgressProxy::shutdown`] without the events.
pub struct EgressProxy {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EgressProxy {
    /// Serve `listener` (already bound and listening) on a thread of its own and return at
    /// once.
    pub fn start(
        listener: std::net::TcpListener,
        config: ProxyConfig,
    ) -> Result<EgressProxy, NetError> {
        let hosts = normalise_hosts(&config.hosts)?;
        let local_addr = listener.local_addr().map_err(NetError::Listener)?;
        listener.set_nonblocking(true).map_err(NetError::Listener)?;
        let shared = Arc::new(Shared {
            policy: RwLock::new(Arc::new(Policy {
                rules: config.rules,
                hosts,
            })),
            log: Mutex::new(EventLog::new(config.max_events)),
            on_event: config.on_event,
            connect_filter: config.connect_filter,
            system_resolver: config.system_resolver,
            max_connections: config.max_connections.max(1),
            max_bytes: config.max_bytes,
            bytes_used: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            connect_timeout: config.connect_timeout,
            idle_timeout: config.idle_timeout,
            header_timeout: config.header_timeout,
            splice: config.splice,
            secrets: config.secrets,
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread_shared = shared.clone();
        // The runtime is built, run and dropped on the proxy's own thread, so that `start`
        // and `shutdown` work the same from plain threads and from inside another runtime.
        let thread = std::thread::Builder::new()
            .name("cordon-egress".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(NetError::Runtime(e)));
                        return;
                    }
                };
                let listener = {
                    let _guard = runtime.enter();
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(NetError::Listener(e)));
                            return;
                        }
                    }
                };
                let _ = ready_tx.send(Ok(()));
                runtime.block_on(conn::serve(listener, thread_shared, stop_rx));
                // Shutting the runtime down drops every connection task (their guards record
                // the final events); a resolver call stuck in the blocking pool is not waited
                // for.
                runtime.shutdown_timeout(Duration::from_millis(100));
            })
            .map_err(NetError::Runtime)?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(NetError::Runtime(std::io::Error::other(
                    "proxy thread ended during start",
                )));
            }
        }
        Ok(EgressProxy {
            shared,
            local_addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address the listener is bound to (in the sandbox's namespace).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Every decision so far, in order; allowed connections still open show the bytes relayed
    /// up to now.
    pub fn events(&self) -> Vec<NetworkEvent> {
        events::snapshot(&self.shared)
    }

    /// Bytes relayed so far, all connections, both directions.
    pub fn bytes_used(&self) -> u64 {
        self.shared
            .bytes_used
            .load(Ordering::Acquire)
            .min(self.shared.max_bytes)
    }

    /// Client connections currently open.
    pub fn active_connections(&self) -> usize {
        self.shared.active.load(Ordering::Acquire)
    }

    /// Replace the rules and static hosts. Connections already open keep going; every later
    /// decision uses the new policy.
    pub fn set_policy(
        &self,
        rules: EgressRules,
        hosts: &BTreeMap<String, IpAddr>,
    ) -> Result<(), NetError> {
        let hosts = normalise_hosts(hosts)?;
        let new = Arc::new(Policy { rules, hosts });
        match self.shared.policy.write() {
            Ok(mut p) => *p = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
        Ok(())
    }

    /// Stop accepting, close every connection and return every decision. Blocks until the
    /// proxy thread has ended (milliseconds); from async code, call it via `spawn_blocking`.
    pub fn shutdown(mut self) -> Vec<NetworkEvent> {
        self.stop_and_join();
        events::snapshot(&self.shared)
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

impl fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressProxy")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}
