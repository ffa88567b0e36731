//! Secrets injected at the proxy (issue 30): TLS termination for the hosts a secret is bound
//! to, and only those.
//!
//! The sandbox holds placeholders (`cordon-secret:v1:<hex>`); the values live here, in the
//! proxy's memory, outside the sandbox's namespaces. For a `CONNECT` to a bound host the proxy:
//!
//! 1. reads the ClientHello and refuses unless its server name is the `CONNECT` host;
//! 2. opens TLS to the upstream and verifies its certificate for that name (the host's trust
//!    store plus the CA files the secret names) — nothing is substituted before this;
//! 3. completes the client's handshake with a leaf certificate for the name, signed by the
//!    per-run CA made in [`Interception::new`] (its key never leaves this process);
//! 4. relays HTTP/1.1 requests one by one (keep-alive), or HTTP/2 streams when both sides chose
//!    `h2` (see `intercept_h2`): each request's `Host` must be the TLS
//!    name; placeholders of the host's secrets are replaced in header values (and inside
//!    `Basic` credentials), never in the target or the body; a secret's `header` is added when
//!    the request has none; a placeholder of a secret *not* bound to this host refuses the
//!    request and logs an attempted exfiltration (the secret's name and the host, never a
//!    value).
//!
//! Threat model: the client is the sandbox, hostile; it knows the placeholders and the CA's
//! certificate. It can make the proxy send a value only inside a TLS session whose peer proved
//! it is the bound host. The values never appear in events, errors or answers.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use cordon_policy::network::{parse_authority, Host};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::TcpStream;

use crate::events::{sanitize, Record};
use crate::http::{self, Framing, HeadError, RequestHead, ResponseHead};
use crate::Shared;

/// One secret as the proxy holds it. `Debug` never shows the value.
#[derive(Clone)]
pub struct SecretBinding {
    pub name: String,
    pub placeholder: String,
    pub value: SecretValue,
    /// Normalised host names.
    pub hosts: Vec<String>,
    pub header: Option<String>,
    /// `{value}` stands for the value; `None` is the value alone.
    pub format: Option<String>,
    /// PEM files' contents: extra CAs the upstream's certificate may chain to.
    pub extra_ca_pem: Vec<Vec<u8>>,
}

/// A secret's value, shared by the proxy and whoever may rotate it (`cordon serve`): a new
/// value reaches the requests that start after [`SecretValue::set`]. `Debug` never shows it.
#[derive(Clone)]
pub struct SecretValue(Arc<RwLock<String>>);

impl SecretValue {
    pub fn new(value: String) -> SecretValue {
        SecretValue(Arc::new(RwLock::new(value)))
    }

    /// The value now.
    pub fn get(&self) -> String {
        match self.0.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the value, refusing one no header could carry safely (see [`usable`]).
    pub fn set(&self, value: String) -> Result<(), InterceptError> {
        if !usable(&value) {
            return Err(unusable(""));
        }
        match self.0.write() {
            Ok(mut v) => *v = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
        Ok(())
    }
}

impl From<String> for SecretValue {
    fn from(value: String) -> SecretValue {
        SecretValue::new(value)
    }
}

impl From<&str> for SecretValue {
    fn from(value: &str) -> SecretValue {
        SecretValue::new(value.to_string())
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// A value with a line break would let the value's owner forge headers; with NUL, no header
/// can carry it; an empty one is a mistake.
fn usable(value: &str) -> bool {
    !value.is_empty() && !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

fn unusable(name: &str) -> InterceptError {
    InterceptError::Secret {
        name: name.to_string(),
        why: "the value is empty or contains a line break or NUL byte".into(),
    }
}

impl fmt::Debug for SecretBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretBinding")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// Why interception could not be set up. Never carries a value.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    #[error("cannot make the per-run CA: {0}")]
    Ca(String),
    #[error("secret {name}: {why}")]
    Secret { name: String, why: String },
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// The per-run CA, the secrets, and the TLS configurations made from them.
pub struct Interception {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_der: CertificateDer<'static>,
    ca_pem: String,
    secrets: Vec<SecretBinding>,
    /// Per bound host: the client configurations whose roots verify that host's upstream,
    /// offering `http/1.1` only and `h2` first.
    upstream: HashMap<String, UpstreamTls>,
    /// Per bound host and protocol (h2 or not): the server configuration with its leaf
    /// certificate, made on first use.
    leaves: Mutex<HashMap<(String, bool), Arc<rustls::ServerConfig>>>,
}

impl fmt::Debug for Interception {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interception")
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

struct UpstreamTls {
    h1: Arc<rustls::ClientConfig>,
    h2: Arc<rustls::ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Interception {
    /// Makes the per-run CA (name-constrained to the secrets' hosts) and the upstream
    /// verifiers (the host's trust store plus each secret's extra CAs).
    pub fn new(secrets: Vec<SecretBinding>) -> Result<Interception, InterceptError> {
        for s in &secrets {
            if !usable(&s.value.get()) {
                return Err(unusable(&s.name));
            }
        }
        let mut hosts: Vec<String> = secrets.iter().flat_map(|s| s.hosts.clone()).collect();
        hosts.sort();
        hosts.dedup();
        let ca_err = |e: rcgen::Error| InterceptError::Ca(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(ca_err)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(ca_err)?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "cordon per-run secrets CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        // Even a client that trusted this CA everywhere would accept it for these names only.
        params.name_constraints = Some(rcgen::NameConstraints {
            permitted_subtrees: hosts
                .iter()
                .map(|h| rcgen::GeneralSubtree::DnsName(h.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        let cert = params.self_signed(&key).map_err(ca_err)?;
        let ca_pem = cert.pem();
        let ca_der = cert.der().clone();
        let issuer = rcgen::Issuer::new(params, key);

        let native = rustls_native_certs::load_native_certs();
        let mut upstream = HashMap::new();
        for host in &hosts {
            let mut roots = rustls::RootCertStore::empty();
            for c in &native.certs {
                let _ = roots.add(c.clone());
            }
            for s in secrets.iter().filter(|s| s.hosts.contains(host)) {
                for pem in &s.extra_ca_pem {
                    let mut added = 0;
                    for c in rustls_pki_types::pem::PemObject::pem_slice_iter(pem) {
                        let c: CertificateDer<'static> = c.map_err(|e| InterceptError::Secret {
                            name: s.name.clone(),
                            why: format!("ca: not a PEM certificate file: {e}"),
                        })?;
                        roots.add(c).map_err(|e| InterceptError::Secret {
                            name: s.name.clone(),
                            why: format!("ca: unusable certificate: {e}"),
                        })?;
                        added += 1;
                    }
                    if added == 0 {
                        return Err(InterceptError::Secret {
                            name: s.name.clone(),
                            why: "ca: no certificate in the file".into(),
                        });
                    }
                }
            }
            let mut config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| InterceptError::Tls(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let mut h2 = config.clone();
            h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            upstream.insert(
                host.clone(),
                UpstreamTls {
                    h1: Arc::new(config),
                    h2: Arc::new(h2),
                },
            );
        }
        Ok(Interception {
            issuer,
            ca_der,
            ca_pem,
            secrets,
            upstream,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate (PEM), for the sandbox to trust. Not its key.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub(crate) fn secrets(&self) -> &[SecretBinding] {
        &self.secrets
    }

    /// Whether `host` (normalised) has a secret bound to it.
    pub fn binds(&self, host: &str) -> bool {
        self.upstream.contains_key(host)
    }

    /// The first secret whose placeholder `bytes` contains, looking into `Basic` credentials
    /// too.
    pub(crate) fn placeholder_in(&self, bytes: &[u8]) -> Option<&SecretBinding> {
        let decoded = decode_basic(bytes);
        self.secrets.iter().find(|s| {
            let p = s.placeholder.as_bytes();
            contains(bytes, p) || decoded.as_deref().is_some_and(|d| contains(d, p))
        })
    }

    /// A placeholder anywhere in a request head (target or any header value).
    pub(crate) fn placeholder_in_head(&self, head: &RequestHead) -> Option<&SecretBinding> {
        self.placeholder_in(head.target.as_bytes()).or_else(|| {
            head.headers
                .iter()
                .find_map(|(n, v)| self.placeholder_in(n.as_bytes()).or(self.placeholder_in(v)))
        })
    }

    /// The client side's configuration for `host`, offering `h2` by ALPN when the upstream
    /// chose it (the two sides always speak the same protocol).
    fn server_config(&self, host: &str, h2: bool) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut leaves = match self.leaves.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(c) = leaves.get(&(host.to_string(), h2)) {
            return Ok(c.clone());
        }
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            rcgen::CertificateParams::new(vec![host.to_string()]).map_err(|e| e.to_string())?;
        params.is_ca = rcgen::IsCa::NoCa;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, host.to_string());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| e.to_string())?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), self.ca_der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let config = Arc::new(config);
        leaves.insert((host.to_string(), h2), config.clone());
        Ok(config)
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether a header value holds `placeholder`, as is or inside `Basic` credentials.
pub(crate) fn placeholder_in_value(value: &[u8], placeholder: &str) -> bool {
    let p = placeholder.as_bytes();
    contains(value, p) || decode_basic(value).is_some_and(|d| contains(&d, p))
}

/// The decoded credentials of a `Basic …` header value.
pub(crate) fn decode_basic(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, cred) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(cred.trim())
        .ok()
}

pub(crate) fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    let mut hit = false;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
            hit = true;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    (out, hit)
}

// ---------------------------------------------------------------------------------------------
// A stream with bytes in front

/// A stream whose reads first return bytes already taken from it (read past a head).
pub(crate) struct Prefixed<S> {
    front: Vec<u8>,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(crate) fn new(front: Vec<u8>, inner: S) -> Self {
        Prefixed { front, inner }
    }

    fn unread(&mut self, mut bytes: Vec<u8>) {
        bytes.extend_from_slice(&self.front);
        self.front = bytes;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.front.is_empty() {
            let n = self.front.len().min(buf.remaining());
            buf.put_slice(&self.front[..n]);
            self.front.drain(..n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------------------------
// The intercepted connection

/// How an intercepted connection ended early; the text goes to the event log.
enum Stop {
    Quiet,
    Note(String),
    /// Refused: the client gets this status and text (if no response has started).
    Refuse(u16, String),
}

/// Accounting: the proxy's byte budget and this connection's counter.
struct Acct<'a> {
    shared: &'a Shared,
    bytes: Arc<AtomicU64>,
    idle: Duration,
}

impl Acct<'_> {
    async fn write<W: AsyncWrite + Unpin>(&self, w: &mut W, data: &[u8]) -> Result<(), Stop> {
        if data.is_empty() {
            return Ok(());
        }
        let granted = self.shared.take_bytes(data.len());
        self.bytes.fetch_add(granted as u64, Ordering::AcqRel);
        if granted < data.len() {
            return Err(Stop::Note("cut: byte limit reached".into()));
        }
        // Flushed too: `write_all` on a TLS stream returns once rustls holds the bytes, and
        // what the socket could not take then stays in rustls until the next write. After a
        // body's last write there is none: its tail waited for the idle timeout (a 100 MB
        // download through a slower client took 60 s).
        let sent = async {
            w.write_all(data).await?;
            w.flush().await
        };
        match tokio::time::timeout(self.idle, sent).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Stop::Note(format!("closed: {e}"))),
            Err(_) => Err(Stop::Note("closed: idle timeout".into())),
        }
    }

    /// Waits for some bytes, then takes whatever else is ready without waiting, up to the
    /// buffer's size: a TLS stream yields one record (16 KiB) per read, and copying each on
    /// its own costs a write(2), a record and a wakeup of the reader on the other side apiece.
    async fn read_ready<R: AsyncRead + Unpin>(
        &self,
        r: &mut R,
        buf: &mut [u8],
    ) -> Result<usize, Stop> {
        let mut filled = self.read(r, buf).await?;
        if filled == 0 {
            return Ok(0);
        }
        while filled < buf.len() {
            let more = std::future::poll_fn(|cx| {
                let mut rb = ReadBuf::new(&mut buf[filled..]);
                match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    // Nothing more now: what is in hand goes out.
                    Poll::Pending => Poll::Ready(Ok(0)),
                }
            })
            .await;
            match more {
                Ok(0) => break,
                Ok(n) => filled += n,
                // Left for the next read to report, after what was read is passed on.
                Err(_) => break,
            }
        }
        Ok(filled)
    }

    async fn read<R: AsyncRead + Unpin>(&self, r: &mut R, buf: &mut [u8]) -> Result<usize, Stop> {
        match tokio::time::timeout(self.idle, r.read(buf)).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(Stop::Note(format!("closed: {e}"))),
            Err(_) => Err(Stop::Note("closed: idle timeout".into())),
        }
    }
}

/// Serve a `CONNECT` to `host` (a bound name) whose upstream TCP connection is open and whose
/// `200` has been sent. `rec` has the pending allow.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    client: Prefixed<TcpStream>,
    upstream: TcpStream,
    host: String,
    port: u16,
    icpt: Arc<Interception>,
    shared: Arc<Shared>,
    mut rec: Record,
    reason: String,
) {
    // rustls takes TLS records from its transport a few KiB per read; a buffer under it
    // turns a 16 KiB record's several read(2)s into a share of one.
    let client = BufReader::with_capacity(TLS_READ_BUFFER, client);
    let upstream = BufReader::with_capacity(TLS_READ_BUFFER, upstream);
    let acceptor =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
    let start = match tokio::time::timeout(shared.header_timeout, acceptor).await {
        Err(_) => return rec.deny("tls client hello not completed in time"),
        Ok(Err(e)) => return rec.deny(format!("not a TLS client hello: {e}")),
        Ok(Ok(start)) => start,
    };
    let sni = start.client_hello().server_name().map(str::to_string);
    match sni.as_deref().map(Host::parse) {
        Some(Ok(Host::Name(n))) if n == host => {}
        Some(Ok(other)) => {
            return rec.deny(format!(
                "tls sni {} does not match connect host {host} (a secret is bound to {host})",
                sanitize(&other.to_string())
            ))
        }
        _ => {
            return rec.deny(format!(
                "tls client hello without the server name {host} (a secret is bound to it)"
            ))
        }
    }
    // The upstream proves it is `host` before the client's handshake completes, so nothing is
    // ever substituted for a peer that did not.
    let client_h2 = start
        .client_hello()
        .alpn()
        .is_some_and(|mut protocols| protocols.any(|p| p == b"h2"));
    let Some(client_config) = icpt.upstream.get(&host).map(|u| {
        if client_h2 {
            u.h2.clone()
        } else {
            u.h1.clone()
        }
    }) else {
        return rec.deny(format!("no TLS configuration for {host}"));
    };
    let Ok(name) = ServerName::try_from(host.clone()) else {
        return rec.deny(format!("{host} is not a TLS server name"));
    };
    let connector = tokio_rustls::TlsConnector::from(client_config);
    let up = match tokio::time::timeout(shared.connect_timeout, connector.connect(name, upstream))
        .await
    {
        Err(_) => return rec.deny(format!("TLS to {host} timed out")),
        Ok(Err(e)) => {
            return rec.deny(format!(
                "upstream {host} failed TLS verification, no secret sent: {e}"
            ))
        }
        Ok(Ok(s)) => s,
    };
    let mut up = up;
    // A whole copy buffer's worth of records is taken in one write (rustls holds 64 KiB by
    // default, which splits each buffer into several writev(2)s).
    up.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUFFER));
    let h2 = up.get_ref().1.alpn_protocol() == Some(b"h2");
    let server_config = match icpt.server_config(&host, h2) {
        Ok(c) => c,
        Err(e) => return rec.deny(format!("cannot make a certificate for {host}: {e}")),
    };
    let tls =
        match tokio::time::timeout(shared.header_timeout, start.into_stream(server_config)).await {
            Err(_) => return rec.deny("client TLS handshake not completed in time"),
            Ok(Err(e)) => return rec.deny(format!("client TLS handshake failed: {e}")),
            Ok(Ok(s)) => s,
        };
    let mut tls = tls;
    tls.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUFFER));
    rec.allow(format!(
        "{reason}; TLS terminated (secret host){}",
        if h2 { ", h2" } else { "" }
    ));
    if h2 {
        let ctx = Arc::new(crate::intercept_h2::Ctx {
            host: host.clone(),
            port,
            icpt: icpt.clone(),
            shared: shared.clone(),
            bytes: rec.bytes.clone(),
            used: AtomicU64::new(0),
        });
        let note = crate::intercept_h2::serve(tls, up, ctx.clone()).await;
        let used = ctx.used.load(Ordering::Acquire);
        if used > 0 {
            rec.note(format!("secret value inserted {used} time(s)"));
        }
        if let Some(n) = note {
            rec.note(n);
        }
        return;
    }
    let acct = Acct {
        shared: &shared,
        bytes: rec.bytes.clone(),
        idle: shared.idle_timeout,
    };
    let (cr, mut cw) = tokio::io::split(tls);
    let mut cr = Prefixed::new(Vec::new(), cr);
    let (ur, mut uw) = tokio::io::split(up);
    let mut ur = Prefixed::new(Vec::new(), ur);
    let mut injected: u64 = 0;
    let end = loop {
        match exchange(
            &mut cr, &mut cw, &mut ur, &mut uw, &host, port, &icpt, &acct, &shared,
        )
        .await
        {
            Ok((n, keep)) => {
                injected += n;
                if !keep {
                    break Stop::Quiet;
                }
            }
            Err(stop) => break stop,
        }
    };
    if injected > 0 {
        rec.note(format!("secret value inserted {injected} time(s)"));
    }
    match end {
        Stop::Quiet => {}
        Stop::Note(n) => rec.note(n),
        Stop::Refuse(status, text) => {
            let _ = cw.write_all(&http::proxy_response(status, &text)).await;
            rec.note(format!("request refused: {text}"));
        }
    }
    let _ = cw.shutdown().await;
    let _ = uw.shutdown().await;
}

/// One request and its response. Returns how many values went out and whether the
/// connection may carry another request.
#[allow(clippy::too_many_arguments)]
async fn exchange<CR, CW, UR, UW>(
    cr: &mut Prefixed<CR>,
    cw: &mut CW,
    ur: &mut Prefixed<UR>,
    uw: &mut UW,
    host: &str,
    port: u16,
    icpt: &Interception,
    acct: &Acct<'_>,
    shared: &Arc<Shared>,
) -> Result<(u64, bool), Stop>
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let (head, rest) = match tokio::time::timeout(acct.idle, http::read_request(cr)).await {
        Err(_) => return Err(Stop::Note("closed: idle timeout".into())),
        Ok(Err(HeadError::Closed | HeadError::Io(_))) => return Err(Stop::Quiet),
        Ok(Err(HeadError::TooLarge)) => {
            return Err(Stop::Refuse(431, "request head too large".into()))
        }
        Ok(Err(HeadError::Malformed(why))) => {
            return Err(Stop::Refuse(400, format!("malformed request: {why}")))
        }
        Ok(Ok(parsed)) => parsed,
    };
    cr.unread(rest);
    // A placeholder of a secret this host is not bound to: someone is trying to send it where
    // it does not belong.
    let foreign = icpt
        .secrets
        .iter()
        .filter(|s| !s.hosts.iter().any(|h| h == host))
        .find(|s| head_mentions(&head, &s.placeholder));
    if let Some(s) = foreign {
        let reason = exfiltration(&s.name, host);
        deny_event(shared, host, port, &reason);
        return Err(Stop::Refuse(403, reason));
    }
    let hosts: Vec<&[u8]> = http::header_values(&head.headers, "host").collect();
    let host_ok = match hosts.as_slice() {
        [one] => matches!(
            parse_authority(String::from_utf8_lossy(one).trim()),
            Ok((Host::Name(n), p)) if n == host && p.unwrap_or(443) == port
        ),
        _ => false,
    };
    if !host_ok {
        let reason = format!(
            "host header does not name {host}, the TLS server name: request refused, no secret \
             substituted"
        );
        deny_event(shared, host, port, &reason);
        return Err(Stop::Refuse(403, reason));
    }
    if !head.target.starts_with('/') && head.target != "*" {
        return Err(Stop::Refuse(
            400,
            "request target must be origin-form (/path) inside the tunnel".into(),
        ));
    }
    let framing = http::request_framing(&head.headers)
        .map_err(|why| Stop::Refuse(400, format!("malformed request: {why}")))?;
    let bound: Vec<&SecretBinding> = icpt
        .secrets
        .iter()
        .filter(|s| s.hosts.iter().any(|h| h == host))
        .collect();
    let (bytes, used, close) = rebuild_request(&head, &bound);
    acct.write(uw, &bytes).await?;
    if framing != Framing::None && expects_continue(&head.headers) {
        // The proxy answers the client's `Expect` itself (it is dropped from what the upstream
        // gets), so the body is not held up waiting for an interim answer.
        acct.write(cw, b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    copy_body(cr, uw, framing_of(framing), acct).await?;
    let head_request = head.method.eq_ignore_ascii_case("HEAD");
    // The response (interim answers first).
    loop {
        let (resp, rest) = match tokio::time::timeout(acct.idle, http::read_response(ur)).await {
            Err(_) => return Err(Stop::Refuse(504, "upstream did not answer in time".into())),
            Ok(Err(HeadError::Closed)) => {
                return Err(Stop::Refuse(
                    502,
                    "upstream closed without answering".into(),
                ))
            }
            Ok(Err(HeadError::Io(e))) => return Err(Stop::Refuse(502, format!("upstream: {e}"))),
            Ok(Err(_)) => return Err(Stop::Refuse(502, "malformed upstream response".into())),
            Ok(Ok(parsed)) => parsed,
        };
        ur.unread(rest);
        acct.write(cw, &response_bytes(&resp, &bound)).await?;
        if resp.code == 101 {
            // An upgrade (e.g. a WebSocket): from here on the bytes are opaque both ways.
            let up = async {
                copy_body(cr, uw, BodyFraming::UntilClose, acct).await?;
                let _ = uw.shutdown().await;
                Ok::<(), Stop>(())
            };
            let down = copy_body(ur, cw, BodyFraming::UntilClose, acct);
            tokio::try_join!(up, down)?;
            return Ok((used, false));
        }
        if (100..200).contains(&resp.code) {
            continue;
        }
        let resp_close = connection_close(&resp.headers) || resp.minor_version == 0;
        let body = if head_request || resp.code == 204 || resp.code == 304 {
            BodyFraming::Length(0)
        } else {
            match http::request_framing(&resp.headers) {
                Ok(Framing::Chunked) => BodyFraming::Chunked,
                Ok(Framing::Length(n)) => BodyFraming::Length(n),
                Ok(Framing::None)
                    if http::header_values(&resp.headers, "content-length")
                        .next()
                        .is_some() =>
                {
                    BodyFraming::Length(0)
                }
                Ok(Framing::None) => BodyFraming::UntilClose,
                Err(why) => return Err(Stop::Note(format!("bad upstream response: {why}"))),
            }
        };
        let until_close = body == BodyFraming::UntilClose;
        copy_body(ur, cw, body, acct).await?;
        return Ok((used, !(close || resp_close || until_close)));
    }
}

fn framing_of(f: Framing) -> BodyFraming {
    match f {
        Framing::None => BodyFraming::Length(0),
        Framing::Length(n) => BodyFraming::Length(n),
        Framing::Chunked => BodyFraming::Chunked,
    }
}

fn head_mentions(head: &RequestHead, placeholder: &str) -> bool {
    let p = placeholder.as_bytes();
    contains(head.target.as_bytes(), p)
        || head.headers.iter().any(|(n, v)| {
            contains(n.as_bytes(), p)
                || contains(v, p)
                || decode_basic(v).is_some_and(|d| contains(&d, p))
        })
}

pub(crate) fn exfiltration(name: &str, host: &str) -> String {
    format!(
        "attempted exfiltration: the placeholder of secret {name} in a request to {host}, which \
         it is not bound to"
    )
}

/// A denial of its own in the log, beside the connection's event.
pub(crate) fn deny_event(shared: &Arc<Shared>, host: &str, port: u16, reason: &str) {
    let mut rec = Record::new(shared.clone());
    rec.target(host, port);
    rec.deny(reason.to_string());
}

fn connection_close(headers: &[(String, Vec<u8>)]) -> bool {
    http::header_values(headers, "connection").any(|v| {
        String::from_utf8_lossy(v)
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("close"))
    })
}

/// The request as the upstream gets it, with the bound secrets' placeholders replaced in
/// header values and their headers added where missing. Returns the bytes, how many secrets
/// went into it and whether the client asked to close after it.
fn rebuild_request(head: &RequestHead, bound: &[&SecretBinding]) -> (Vec<u8>, u64, bool) {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(
        format!(
            "{} {} HTTP/1.{}\r\n",
            head.method,
            head.target,
            head.minor_version.min(1)
        )
        .as_bytes(),
    );
    let mut used = 0u64;
    for (name, value) in &head.headers {
        if name.eq_ignore_ascii_case("expect")
            && expects_continue(std::slice::from_ref(&(name.clone(), value.clone())))
        {
            continue;
        }
        let mut value = value.clone();
        for s in bound {
            let (v, hit) = replace(&value, s.placeholder.as_bytes(), s.value.get().as_bytes());
            value = v;
            if !hit {
                if let Some(cred) = decode_basic(&value) {
                    let (c, hit) =
                        replace(&cred, s.placeholder.as_bytes(), s.value.get().as_bytes());
                    if hit {
                        let scheme = String::from_utf8_lossy(&value)
                            .split(' ')
                            .next()
                            .unwrap_or("Basic")
                            .to_string();
                        value = format!(
                            "{scheme} {}",
                            base64::engine::general_purpose::STANDARD.encode(c)
                        )
                        .into_bytes();
                        used += 1;
                    }
                }
            } else {
                used += 1;
            }
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    for s in bound {
        let Some(header) = &s.header else { continue };
        if http::header_values(&head.headers, header).next().is_some() {
            continue;
        }
        let value = match &s.format {
            Some(f) => f.replace("{value}", &s.value.get()),
            None => s.value.get(),
        };
        out.extend_from_slice(format!("{header}: {value}\r\n").as_bytes());
        used += 1;
    }
    out.extend_from_slice(b"\r\n");
    let close = connection_close(&head.headers) || head.minor_version == 0;
    (out, used, close)
}

fn expects_continue(headers: &[(String, Vec<u8>)]) -> bool {
    http::header_values(headers, "expect")
        .any(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"))
}

/// The response head as the client gets it, with any value of `bound` an upstream reflects in
/// a header (an echo service, a debug header) turned back into its placeholder.
fn response_bytes(head: &ResponseHead, bound: &[&SecretBinding]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.{} {} {}\r\n",
        head.minor_version.min(1),
        head.code,
        head.reason
    )
    .into_bytes();
    for (name, value) in &head.headers {
        let mut value = value.clone();
        for s in bound {
            value = replace(&value, s.value.get().as_bytes(), s.placeholder.as_bytes()).0;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    Length(u64),
    Chunked,
    UntilClose,
}

/// The body copy's buffer: sixteen TLS records.
const COPY_BUFFER: usize = 256 * 1024;
/// Bytes taken from a socket per read(2), under TLS.
const TLS_READ_BUFFER: usize = 256 * 1024;
/// Encrypted bytes rustls may hold before they are written: a copy buffer's worth and its
/// records' overhead.
const TLS_WRITE_BUFFER: usize = COPY_BUFFER + 64 * 1024;

/// Longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;

async fn copy_body<R, W>(
    r: &mut Prefixed<R>,
    w: &mut W,
    framing: BodyFraming,
    acct: &Acct<'_>,
) -> Result<(), Stop>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // A body (or a chunk) smaller than the buffer gets a buffer of its size: a stream of small
    // chunks (server-sent events) must not allocate the whole buffer per chunk.
    let size = match framing {
        BodyFraming::Length(n) => usize::try_from(n).unwrap_or(COPY_BUFFER).min(COPY_BUFFER),
        BodyFraming::Chunked => 0,
        BodyFraming::UntilClose => COPY_BUFFER,
    };
    let mut buf = vec![0u8; size];
    match framing {
        BodyFraming::Length(mut n) => {
            while n > 0 {
                let want = buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
                let got = acct.read_ready(r, &mut buf[..want]).await?;
                if got == 0 {
                    return Err(Stop::Note("body ended early".into()));
                }
                acct.write(w, &buf[..got]).await?;
                n -= got as u64;
            }
            Ok(())
        }
        BodyFraming::UntilClose => loop {
            let got = acct.read_ready(r, &mut buf).await?;
            if got == 0 {
                return Ok(());
            }
            acct.write(w, &buf[..got]).await?;
        },
        BodyFraming::Chunked => loop {
            let line = read_line(r, acct).await?;
            acct.write(w, &line).await?;
            let size = match httparse::parse_chunk_size(&line) {
                Ok(httparse::Status::Complete((_, size))) => size,
                _ => return Err(Stop::Note("malformed chunk size".into())),
            };
            if size == 0 {
                loop {
                    let line = read_line(r, acct).await?;
                    acct.write(w, &line).await?;
                    if line == b"\r\n" || line == b"\n" {
                        return Ok(());
                    }
                }
            }
            Box::pin(copy_body(r, w, BodyFraming::Length(size), acct)).await?;
            let end = read_line(r, acct).await?;
            if end != b"\r\n" {
                return Err(Stop::Note("chunk not followed by CRLF".into()));
            }
            acct.write(w, &end).await?;
        },
    }
}

async fn read_line<R: AsyncRead + Unpin>(
    r: &mut Prefixed<R>,
    acct: &Acct<'_>,
) -> Result<Vec<u8>, Stop> {
    let mut line = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let got = acct.read(r, &mut buf).await?;
        if got == 0 {
            return Err(Stop::Note("stream ended inside a chunked body".into()));
        }
        if let Some(i) = buf[..got].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..=i]);
            r.unread(buf[i + 1..got].to_vec());
            return Ok(line);
        }
        line.extend_from_slice(&buf[..got]);
        if line.len() > MAX_LINE {
            return Err(Stop::Note("chunk line too long".into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding() -> SecretBinding {
        SecretBinding {
            name: "TOKEN".into(),
            placeholder: "cordon-secret:v1:abcd".into(),
            value: "s3cr3t-value".into(),
            hosts: vec!["api.test".into()],
            header: Some("X-Api-Key".into()),
            format: Some("Key {value}".into()),
            extra_ca_pem: Vec::new(),
        }
    }

    fn head(headers: &[(&str, &str)]) -> RequestHead {
        RequestHead {
            method: "GET".into(),
            target: "/p?q=cordon-secret:v1:abcd".into(),
            minor_version: 1,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn headers_and_basic_credentials_are_substituted_but_not_the_target() {
        let b = binding();
        let basic = base64::engine::general_purpose::STANDARD.encode("user:cordon-secret:v1:abcd");
        let h = head(&[
            ("Host", "api.test"),
            ("Authorization", "Bearer cordon-secret:v1:abcd"),
            ("Proxy-Authorization", &format!("Basic {basic}")),
        ]);
        let (out, used, close) = rebuild_request(&h, &[&b]);
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with("GET /p?q=cordon-secret:v1:abcd HTTP/1.1\r\n"),
            "{out}"
        );
        assert!(
            out.contains("Authorization: Bearer s3cr3t-value\r\n"),
            "{out}"
        );
        let want = base64::engine::general_purpose::STANDARD.encode("user:s3cr3t-value");
        assert!(
            out.contains(&format!("Proxy-Authorization: Basic {want}\r\n")),
            "{out}"
        );
        assert!(out.contains("X-Api-Key: Key s3cr3t-value\r\n"), "{out}");
        assert_eq!(used, 3);
        assert!(!close);
    }

    #[test]
    fn a_header_the_program_sent_is_not_injected_again() {
        let b = binding();
        let h = head(&[("Host", "api.test"), ("x-api-key", "mine")]);
        let (out, used, _) = rebuild_request(&h, &[&b]);
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("s3cr3t-value"), "{out}");
        assert_eq!(used, 0);
    }

    #[test]
    fn debug_output_never_shows_the_value() {
        let b = binding();
        assert!(!format!("{b:?}").contains("s3cr3t"));
        let i = Interception::new(vec![b]).unwrap();
        assert!(!format!("{i:?}").contains("s3cr3t"));
        assert!(i.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(i.binds("api.test"));
        assert!(!i.binds("other.test"));
    }

    #[test]
    fn a_value_with_a_line_break_is_refused_without_showing_it() {
        let mut b = binding();
        b.value = "abc\r\nX-Evil: 1".into();
        let e = Interception::new(vec![b]).unwrap_err().to_string();
        assert!(e.contains("TOKEN") && !e.contains("abc"), "{e}");
    }
}
