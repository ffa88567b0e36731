//! Ports into a sandbox: who may open a connection to a program serving on a port inside a
//! sandbox (on its own loopback, in its own network namespace), and the connection itself.
//! Doors route a request here by the sandbox id and port its host name names; they only
//! translate (see the server's `ports` relay).
//!
//! Threat model: the requests carry no API key — whoever holds the URL is the client, so a
//! sandbox whose ports are not public needs its traffic access token (a per-sandbox random
//! secret, compared in constant time; one sandbox's token opens no other's). The connection is
//! made from a socket the sandbox's own init created in its network namespace (made ahead, a
//! few at a time), to `127.0.0.1:port` there and nowhere else: no address comes from the request, so neither the host's ports nor another
//! sandbox's loopback can be named; a sandbox without a namespace of its own (degraded hosts)
//! is refused, since its loopback would be the host's. What the sandbox answers is hostile to
//! the relay that carries it (bounded there, not here).

use std::sync::Arc;
use std::time::Duration;

use crate::error::{ErrorKind, ServiceError};
use crate::Service;

/// How long the sandbox's init may take to start a connection, and the connection to complete.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// What a create says of its ports.
#[derive(Debug, Clone, Default)]
pub struct PortsOptions {
    /// Any client may reach its ports, without the traffic access token.
    pub public: bool,
    /// The `Host` header requests reach the sandbox's program with, `${PORT}` standing for
    /// the port (E2B's `mask_request_host`); none: the host name the client used.
    pub host_header: Option<String>,
    /// A request for one of its ports resumes it when it is paused (E2B's `autoResume`).
    pub wake_on_request: bool,
}

/// A sandbox's ports: its traffic access token and whether they need it. Kept (0600, in the
/// data directory) with the files of a sandbox paused to disk, so that it comes back with the
/// same grant.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PortGrant {
    pub token: String,
    pub public: bool,
    pub host_header: Option<String>,
    pub wake_on_request: bool,
}

impl PortGrant {
    pub(crate) fn new(opts: &PortsOptions) -> PortGrant {
        PortGrant {
            token: format!("ta_{}", crate::keys::random_hex(24)),
            public: opts.public,
            host_header: opts.host_header.clone(),
            wake_on_request: opts.wake_on_request,
        }
    }
}

/// An open connection to a port in a sandbox.
pub struct PortConn {
    pub stream: tokio::net::TcpStream,
    /// The `Host` header the request must carry into the sandbox, when the create set one.
    pub host_header: Option<String>,
}

/// The `Host` value a mask makes for `port`.
pub fn masked_host(mask: &str, port: u16) -> String {
    mask.replace("${PORT}", &port.to_string())
}

impl Service {
    /// The sandbox's port grant (its traffic access token), for the caller that owns it.
    pub fn port_grant(&self, caller: &crate::Caller, id: &str) -> Result<PortGrant, ServiceError> {
        Ok(self.get_live(caller, id)?.ports.clone())
    }

    /// Opens a connection to `127.0.0.1:port` inside sandbox `id`, for a client presenting
    /// `token` (or none). Refused: 404 for no such sandbox, 403 without the sandbox's token
    /// when its ports are not public, 502 (`Upstream`) when nothing listens there, 409 while
    /// it is paused (unless it wakes on requests: then it is resumed first).
    pub async fn open_port(
        self: &Arc<Self>,
        id: &str,
        port: u16,
        token: Option<&str>,
    ) -> Result<PortConn, ServiceError> {
        let live = {
            let all = self
                .live
                .read()
                .map_err(|_| ServiceError::internal("lock"))?;
            all.get(id)
                // Host names come lower-cased; ids are compared as DNS compares names.
                .or_else(|| {
                    all.iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(id))
                        .map(|(_, l)| l)
                })
                .cloned()
                .ok_or_else(|| ServiceError::not_found(format!("no sandbox '{id}'")))?
        };
        let grant = &live.ports;
        if !grant.public && !token.is_some_and(|t| crate::keys::constant_time_eq(t, &grant.token)) {
            self.metrics.deny("port_token");
            return Err(ServiceError::new(
                ErrorKind::Forbidden,
                "traffic_token",
                format!(
                    "sandbox '{id}' does not allow public traffic: send its traffic access token in the e2b-traffic-access-token header"
                ),
            ));
        }
        if port == 0 {
            return Err(ServiceError::bad_request("port 0 is no port"));
        }
        if grant.wake_on_request && live.sandbox.paused().is_some() {
            self.resume_live(&live).await?;
        }
        crate::exec::refuse_if_paused(&live)?;
        // A socket at hand costs no thread hop; only waiting for the sandbox's init does.
        let fd = match live.sandbox.try_connect_port(port) {
            Err(libc::EWOULDBLOCK) => {
                let sandbox = live.sandbox.clone();
                tokio::task::spawn_blocking(move || sandbox.connect_port(port, CONNECT_WAIT))
                    .await
                    .map_err(|_| ServiceError::internal("connect task"))?
            }
            got => got,
        }
        .map_err(|errno| unreachable_port(id, port, errno))?;
        let std_stream = std::net::TcpStream::from(fd);
        std_stream
            .set_nonblocking(true)
            .map_err(|e| ServiceError::internal(format!("socket: {e}")))?;
        let stream = tokio::net::TcpStream::from_std(std_stream)
            .map_err(|e| ServiceError::internal(format!("socket: {e}")))?;
        // The init only started the connect: it completes (or is refused) here.
        match tokio::time::timeout(CONNECT_WAIT, stream.writable()).await {
            Ok(Ok(())) => {}
            _ => return Err(unreachable_port(id, port, libc::ETIMEDOUT)),
        }
        if let Ok(Some(e)) = stream.take_error() {
            return Err(unreachable_port(id, port, e.raw_os_error().unwrap_or(0)));
        }
        if stream.peer_addr().is_err() {
            return Err(unreachable_port(id, port, libc::ECONNREFUSED));
        }
        let _ = stream.set_nodelay(true);
        Ok(PortConn {
            stream,
            host_header: grant.host_header.as_ref().map(|m| masked_host(m, port)),
        })
    }
}

fn unreachable_port(id: &str, port: u16, errno: i32) -> ServiceError {
    let why = match errno {
        libc::ECONNREFUSED => "nothing listens there".to_string(),
        libc::EPERM => {
            "the sandbox has no network namespace of its own on this host, so its ports cannot be reached".to_string()
        }
        libc::ETIMEDOUT => "the sandbox did not answer in time".to_string(),
        e => std::io::Error::from_raw_os_error(e).to_string(),
    };
    ServiceError::new(
        ErrorKind::Upstream,
        "port_unreachable",
        format!("port {port} of sandbox '{id}' cannot be reached: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_mask_names_the_port() {
        assert_eq!(
            masked_host("custom-host.example.com:${PORT}", 8080),
            "custom-host.example.com:8080"
        );
        assert_eq!(masked_host("fixed", 1), "fixed");
    }

    #[test]
    fn each_grant_has_its_own_token() {
        let a = PortGrant::new(&PortsOptions::default());
        let b = PortGrant::new(&PortsOptions::default());
        assert_ne!(a.token, b.token);
        assert!(a.token.len() > 40);
    }
}
