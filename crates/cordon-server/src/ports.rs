//! Ports into a sandbox, as E2B's `Sandbox.get_host(port)` names them: a request whose `Host`
//! is `{port}-{sandboxId}.{domain}` (the domain every create and connect answer carries,
//! `cordon serve --sandbox-domain`, by default `localhost:<the server's port>`) is relayed to
//! `127.0.0.1:{port}` inside that sandbox, over plain HTTP or TLS on the server's own port (the
//! first byte tells: a TLS handshake starts with 0x16). Who may reach which port is the
//! service's decision ([`cordon_service::ports`]); this is the translation: the host name, the
//! traffic-token header, HTTP/1.1 in and out (streamed bodies, WebSocket and other upgrades).
//!
//! Threat model: any client that reaches the server's port, with no API key. The target is
//! only ever a sandbox id and a port number parsed from the host name — no address — and the
//! connection is made inside that sandbox's network namespace, so the host's ports and other
//! sandboxes are out of reach. Each request is parsed by hyper and written anew to the
//! sandbox (its framing regenerated, never the client's bytes passed through), and a request
//! whose framing is ambiguous (`Content-Length` with `Transfer-Encoding`, several lengths, a
//! transfer coding other than chunked) is refused before any connection is made, as is a head
//! over [`MAX_HEAD`] bytes: what a front proxy and the sandbox's server could read differently
//! never reaches the sandbox. The token header is removed on the way in. TLS: leaf
//! certificates for the names under the domain only, signed by a CA kept in the data
//! directory and name-constrained to the domain, so even a client that trusts it trusts it
//! for nothing else.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

use crate::app::AppState;
use cordon_service::error::ServiceError;

/// The header a client presents a sandbox's traffic access token in (E2B's name).
pub const TOKEN_HEADER: &str = "e2b-traffic-access-token";
/// The ports E2B's SDKs reach envd and the code interpreter on, served by the E2B door.
const ENVD_PORT: u16 = 49983;
const INTERPRETER_PORT: u16 = 49999;
const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// The largest request head relayed into a sandbox (names and values together).
pub const MAX_HEAD: usize = 32 * 1024;

/// The server's ports front: its domain and the TLS certificates for the names under it.
pub struct Ports {
    /// What creates answer as `domain` (`localhost:8080`, `sandboxes.example.com`).
    pub domain: String,
    /// The domain's host name, lower case, without a port: what TLS names end in.
    host: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    ca_der: CertificateDer<'static>,
    /// Where the CA's certificate is, for clients to trust (`SSL_CERT_FILE`).
    pub ca_path: PathBuf,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PortsError {
    #[error("--sandbox-domain {0:?}: a host name (and port), e.g. localhost:8080")]
    Domain(String),
    #[error("the ports CA ({path}): {message}")]
    Ca { path: String, message: String },
}

impl Ports {
    /// The front for `domain`, with the CA kept in `data_dir` (made on first use, reused
    /// after: clients that trust it keep trusting it across restarts).
    pub fn new(domain: &str, data_dir: &Path) -> Result<Ports, PortsError> {
        let host = domain_host(domain).ok_or_else(|| PortsError::Domain(domain.to_string()))?;
        let ca_path = data_dir.join(format!("ports-ca-{host}.pem"));
        let key_path = data_dir.join(format!("ports-ca-{host}.key"));
        let ca_err = |message: String| PortsError::Ca {
            path: ca_path.display().to_string(),
            message,
        };
        let kept = std::fs::read_to_string(&key_path).ok().and_then(|pem| {
            let key = rcgen::KeyPair::from_pem(&pem).ok()?;
            let cert = CertificateDer::from_pem_file(&ca_path).ok()?;
            Some((key, cert))
        });
        let params = ca_params(&host).map_err(|e| ca_err(e.to_string()))?;
        let (key, ca_der) = match kept {
            Some(k) => k,
            None => {
                let key = rcgen::KeyPair::generate().map_err(|e| ca_err(e.to_string()))?;
                let cert = params
                    .self_signed(&key)
                    .map_err(|e| ca_err(e.to_string()))?;
                // Every file of the data directory is the server user's alone (0600), the
                // certificate too: a client on this host reads it as that user.
                for (path, data) in [(&key_path, key.serialize_pem()), (&ca_path, cert.pem())] {
                    let _ = std::fs::remove_file(path);
                    write_private(path, data.as_bytes()).map_err(|e| ca_err(e.to_string()))?;
                }
                (key, cert.der().clone())
            }
        };
        Ok(Ports {
            domain: domain.to_string(),
            host,
            ca_der,
            issuer: rcgen::Issuer::new(params, key),
            ca_path,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The sandbox port a `Host` header names: `{port}-{id}.{domain}`.
    pub fn target(&self, host: &str) -> Option<(u16, String)> {
        let host = host.to_ascii_lowercase();
        let label = host.strip_suffix(&format!(".{}", self.domain.to_ascii_lowercase()))?;
        parse_label(label)
    }

    /// The TLS configuration for a name under the domain (`None` for any other name).
    pub fn tls_for(&self, sni: &str) -> Option<Arc<rustls::ServerConfig>> {
        let sni = sni.to_ascii_lowercase();
        let label = sni.strip_suffix(&format!(".{}", self.host))?;
        parse_label(label)?;
        let mut leaves = match self.leaves.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(c) = leaves.get(&sni) {
            return Some(c.clone());
        }
        let key = rcgen::KeyPair::generate().ok()?;
        let mut params = rcgen::CertificateParams::new(vec![sni.clone()]).ok()?;
        params.is_ca = rcgen::IsCa::NoCa;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, sni.clone());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params.signed_by(&key, &self.issuer).ok()?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone(), self.ca_der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .ok()?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        // Names are per sandbox and port: a bounded cache, emptied when full.
        if leaves.len() >= 4096 {
            leaves.clear();
        }
        leaves.insert(sni, config.clone());
        Some(config)
    }
}

/// The CA's certificate: the same for the same host, so a kept key signs as the kept
/// certificate names it.
fn ca_params(host: &str) -> Result<rcgen::CertificateParams, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("cordon sandbox ports CA ({host})"),
    );
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    // Even a client that trusted this CA everywhere would accept it for these names only.
    params.name_constraints = Some(rcgen::NameConstraints {
        permitted_subtrees: vec![rcgen::GeneralSubtree::DnsName(host.to_string())],
        excluded_subtrees: Vec::new(),
    });
    Ok(params)
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)
}

/// `localhost:8080` → `localhost`; `None` for anything that is not a host name (and port).
fn domain_host(domain: &str) -> Option<String> {
    let (host, port) = match domain.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (domain, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return None;
    }
    let ok = !host.is_empty()
        && host.len() <= 200
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    ok.then(|| host.to_ascii_lowercase())
}

/// `8080-n1-0a1b2c3d` → (8080, `n1-0a1b2c3d`).
fn parse_label(label: &str) -> Option<(u16, String)> {
    let (port, id) = label.split_once('-')?;
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port: u16 = port.parse().ok()?;
    let id_ok = !id.is_empty()
        && !id.contains('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (port > 0 && id_ok).then(|| (port, id.to_string()))
}

/// Around every door: a request for a sandbox's port goes to the sandbox, any other on.
pub(crate) async fn route(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(ports) = st.ports.get() else {
        return next.run(req).await;
    };
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match host.as_deref().and_then(|h| ports.target(h)) {
        // envd's and the code interpreter's ports are the E2B door's (an SDK told no
        // E2B_SANDBOX_URL sends its sandbox calls to `https://49983-<id>.<domain>`), which
        // checks the sandbox's access token itself.
        Some((port @ (ENVD_PORT | INTERPRETER_PORT), id)) => {
            let mut req = req;
            if !req.headers().contains_key(SANDBOX_ID_HEADER) {
                if let Ok(v) = HeaderValue::from_str(&id) {
                    req.headers_mut().insert(SANDBOX_ID_HEADER, v);
                }
            }
            if !req.headers().contains_key(SANDBOX_PORT_HEADER) {
                req.headers_mut()
                    .insert(SANDBOX_PORT_HEADER, HeaderValue::from(port));
            }
            next.run(req).await
        }
        Some((port, id)) => relay(&st, req, port, &id).await,
        None => next.run(req).await,
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"code": status.as_u16(), "message": message}).to_string(),
    )
        .into_response()
}

fn service_refusal(e: ServiceError) -> Response {
    let e = crate::error::ApiError(e);
    refuse(e.status(), &e.message)
}

/// Refuses what could be framed two ways, and heads over [`MAX_HEAD`].
pub fn check_request_head(headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
    let size: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    if size > MAX_HEAD {
        return Err((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request headers too large",
        ));
    }
    let lengths: Vec<&HeaderValue> = headers.get_all(header::CONTENT_LENGTH).iter().collect();
    let te: Vec<&HeaderValue> = headers.get_all(header::TRANSFER_ENCODING).iter().collect();
    if lengths.len() > 1 || lengths.iter().any(|v| v.as_bytes().contains(&b',')) {
        return Err((StatusCode::BAD_REQUEST, "several Content-Length values"));
    }
    if !te.is_empty() && !lengths.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "both Content-Length and Transfer-Encoding",
        ));
    }
    if te.len() > 1
        || te
            .iter()
            .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"chunked"))
    {
        return Err((
            StatusCode::BAD_REQUEST,
            "a Transfer-Encoding other than chunked",
        ));
    }
    Ok(())
}

/// Headers of one hop only: never relayed (except the upgrade's own, on an upgrade).
const HOP_BY_HOP: [&str; 5] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
];

async fn relay(st: &Arc<AppState>, mut req: Request, port: u16, id: &str) -> Response {
    if let Err((status, why)) = check_request_head(req.headers()) {
        return refuse(status, why);
    }
    let token = req
        .headers()
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let conn = match st.service.open_port(id, port, token.as_deref()).await {
        Ok(c) => c,
        Err(e) => return service_refusal(e),
    };
    let upgrading = req.headers().contains_key(header::UPGRADE);
    let from_client = upgrading.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    parts.headers.remove(TOKEN_HEADER);
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    if !upgrading {
        parts.headers.remove(header::CONNECTION);
    }
    if let Some(h) = conn
        .host_header
        .and_then(|h| HeaderValue::from_str(&h).ok())
    {
        parts.headers.insert(header::HOST, h);
    }
    parts.version = Version::HTTP_11;
    let upstream = Request::from_parts(parts, body);
    // Header names as Go's proxy in front of E2B's sandboxes writes them (`Host`, not `host`):
    // programs in the sandbox that read them case-sensitively see what they would see there.
    let (mut sender, connection) = match hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(conn.stream))
        .await
    {
        Ok(c) => c,
        Err(_) => return refuse(StatusCode::BAD_GATEWAY, "the sandbox's port closed"),
    };
    tokio::spawn(connection.with_upgrades());
    let mut resp = match sender.send_request(upstream).await {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_GATEWAY,
                &format!("the program on port {port} of sandbox '{id}' gave no answer: {e}"),
            )
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(from_client) = from_client {
            let from_sandbox = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                if let (Ok(c), Ok(s)) = tokio::join!(from_client, from_sandbox) {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(s))
                            .await;
                }
            });
        }
    }
    resp.map(Body::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_name_a_port_and_a_sandbox() {
        assert_eq!(
            parse_label("8080-n1-0a1b2c3d"),
            Some((8080, "n1-0a1b2c3d".into()))
        );
        assert_eq!(parse_label("0-n1-a"), None);
        assert_eq!(parse_label("70000-n1-a"), None);
        assert_eq!(parse_label("x-n1-a"), None);
        assert_eq!(parse_label("8080-"), None);
        assert_eq!(parse_label("8080"), None);
    }

    #[test]
    fn domains_are_a_host_name_and_maybe_a_port() {
        assert_eq!(domain_host("localhost:8080").as_deref(), Some("localhost"));
        assert_eq!(
            domain_host("Sandboxes.Example.com").as_deref(),
            Some("sandboxes.example.com")
        );
        assert_eq!(domain_host("localhost:x"), None);
        assert_eq!(domain_host("a..b"), None);
        assert_eq!(domain_host("a/b"), None);
    }

    #[test]
    fn only_hosts_under_the_domain_are_routed() {
        let dir = std::env::temp_dir().join(format!("cordon-ports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = Ports::new("localhost:8080", &dir).expect("ports");
        assert_eq!(
            p.target("8080-n1-ab.localhost:8080"),
            Some((8080, "n1-ab".into()))
        );
        assert_eq!(p.target("8080-n1-ab.localhost:9"), None);
        assert_eq!(p.target("localhost:8080"), None);
        assert_eq!(p.target("8080-n1-ab.evil.localhost:8080"), None);
        assert!(p.tls_for("8080-n1-ab.localhost").is_some());
        assert!(p.tls_for("example.com").is_none());
        // The CA is kept: a second start signs with the same key.
        let again = Ports::new("localhost:8080", &dir).expect("again");
        assert_eq!(again.ca_der, p.ca_der);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ambiguous_framing_and_huge_heads_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("4"));
        assert!(check_request_head(&h).is_ok());
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        assert_eq!(
            check_request_head(&h).map_err(|e| e.0),
            Err(StatusCode::BAD_REQUEST)
        );
        let mut h = HeaderMap::new();
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("4"));
        h.append(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        assert_eq!(
            check_request_head(&h).map_err(|e| e.0),
            Err(StatusCode::BAD_REQUEST)
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        assert_eq!(
            check_request_head(&h).map_err(|e| e.0),
            Err(StatusCode::BAD_REQUEST)
        );
        let mut h = HeaderMap::new();
        let big = HeaderValue::from_str(&"a".repeat(MAX_HEAD)).expect("value");
        h.insert("x-big", big);
        assert_eq!(
            check_request_head(&h).map_err(|e| e.0),
            Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
    }
}
