//! What passes between the agent's client sessions and the upstream servers besides the
//! client's own requests: the upstreams' notifications (progress, log messages, resource
//! updates, list changes) routed to the sessions they concern, and the upstreams' requests to
//! the client (sampling, elicitation, roots), which go through the policy first (see
//! `Gateway::to_client`) and then to a session that declared the capability. An upstream
//! session serves the client sessions that declared the same relayed capabilities (see
//! `upstream::caps_key`): what it sends reaches only those.
//!
//! Threat model: an upstream is untrusted. Its notifications reach only the sessions they
//! concern (a progress notification only the session whose call carries that token; a
//! resource update only the sessions subscribed to that resource) and carry the gateway's
//! names (`server+uri`); its requests to the client are calls like any other, allowlisted,
//! rate-limited, held for approval where a rule says so, and audited.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, Implementation, ListRootsResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ClientHandler, ErrorData as McpError, RoleClient, RoleServer};

use super::Gateway;

/// One client session of the gateway.
pub(super) struct ClientSession {
    /// Who (`stdio`, or the API key's id).
    pub client: String,
    pub peer: Peer<RoleServer>,
    pub caps: ClientCapabilities,
    /// The upstream sessions it uses: those of its capability set (`upstream::caps_key`).
    pub key: String,
    /// The log level it asked for with `logging/setLevel`; `None`: every message.
    pub level: Mutex<Option<LoggingLevel>>,
    /// The resources it subscribed to: (server, upstream uri).
    pub subscribed: Mutex<BTreeSet<(String, String)>>,
}

#[derive(Default)]
pub(super) struct Relay {
    next: AtomicU64,
    sessions: Mutex<BTreeMap<u64, Arc<ClientSession>>>,
    /// (server, upstream session key, the gateway's progress token upstream) → the session's
    /// peer, its token, and the last progress passed on.
    progress: Mutex<HashMap<(String, String, ProgressToken), ProgressTo>>,
    /// server → the sessions with a request in flight there (the latest last), with the id of
    /// that request: where a server's request to the client goes first.
    inflight: Mutex<BTreeMap<String, Vec<(u64, RequestId)>>>,
    pub gw: OnceLock<Weak<Gateway>>,
}

/// Removes an in-flight mark when the request ends (or is dropped).
pub(super) struct InFlight {
    relay: Arc<Relay>,
    server: String,
    session: u64,
    id: RequestId,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut m) = self.relay.inflight.lock() {
            if let Some(v) = m.get_mut(&self.server) {
                v.retain(|(s, i)| !(*s == self.session && *i == self.id));
            }
        }
    }
}

type ProgressTo = (
    Peer<RoleServer>,
    ProgressToken,
    Arc<tokio::sync::Mutex<Option<f64>>>,
);

/// Removes a progress mapping when the request ends (or is dropped).
pub(super) struct ProgressRoute {
    relay: Arc<Relay>,
    key: (String, String, ProgressToken),
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        if let Ok(mut m) = self.relay.progress.lock() {
            m.remove(&self.key);
        }
    }
}

impl Relay {
    pub fn add(&self, s: ClientSession) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        if let Ok(mut m) = self.sessions.lock() {
            m.insert(id, Arc::new(s));
        }
        id
    }

    pub fn remove(&self, id: u64) {
        if let Ok(mut m) = self.sessions.lock() {
            m.remove(&id);
        }
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientSession>> {
        self.sessions.lock().ok()?.get(&id).cloned()
    }

    /// The live sessions (a closed transport's session is dropped here).
    pub fn sessions(&self) -> Vec<(u64, Arc<ClientSession>)> {
        let Ok(mut m) = self.sessions.lock() else {
            return Vec::new();
        };
        m.retain(|_, s| !s.peer.is_transport_closed());
        m.iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    pub fn in_flight(self: &Arc<Self>, server: &str, session: u64, id: RequestId) -> InFlight {
        if let Ok(mut m) = self.inflight.lock() {
            m.entry(server.to_string())
                .or_default()
                .push((session, id.clone()));
        }
        InFlight {
            relay: self.clone(),
            server: server.to_string(),
            session,
            id,
        }
    }

    pub fn route_progress(
        self: &Arc<Self>,
        server: &str,
        caps: &str,
        upstream: ProgressToken,
        to: (Peer<RoleServer>, ProgressToken),
    ) -> ProgressRoute {
        let key = (server.to_string(), caps.to_string(), upstream);
        if let Ok(mut m) = self.progress.lock() {
            m.insert(key.clone(), (to.0, to.1, Default::default()));
        }
        ProgressRoute {
            relay: self.clone(),
            key,
        }
    }

    /// The live sessions the upstream sessions of capability set `key` serve.
    pub fn sessions_of(&self, key: &str) -> Vec<(u64, Arc<ClientSession>)> {
        let mut v = self.sessions();
        v.retain(|(_, s)| s.key == key);
        v
    }

    /// The session a server's request to the client goes to: of those the asking upstream
    /// session serves, the latest with a request in flight at that server that declared the
    /// capability, else any that declared it.
    pub fn target(
        &self,
        server: &str,
        key: &str,
        declared: impl Fn(&ClientCapabilities) -> bool,
    ) -> Option<(Arc<ClientSession>, Option<RequestId>)> {
        let sessions = self.sessions_of(key);
        let busy: Vec<(u64, RequestId)> = self
            .inflight
            .lock()
            .ok()
            .and_then(|m| m.get(server).cloned())
            .unwrap_or_default();
        for (sid, req) in busy.iter().rev() {
            if let Some((_, s)) = sessions.iter().find(|(k, _)| k == sid) {
                if declared(&s.caps) {
                    return Some((s.clone(), Some(req.clone())));
                }
            }
        }
        sessions
            .into_iter()
            .find(|(_, s)| declared(&s.caps))
            .map(|(_, s)| (s, None))
    }
}

/// A server's name as the client sees it, and its resources' URIs.
pub(super) fn exposed_uri(prefix: bool, server: &str, uri: &str) -> String {
    if prefix {
        format!("{server}+{uri}")
    } else {
        uri.to_string()
    }
}

/// The gateway's client of one upstream server, in one session of it.
pub(super) struct UpstreamClient {
    pub server: String,
    /// The capabilities it declares (`upstream::caps_key`), those of the clients it serves.
    pub key: String,
    pub relay: Arc<Relay>,
}

/// Whether a message of `level` reaches a session that asked for `min` (syslog order).
pub(super) fn level_passes(level: LoggingLevel, min: Option<LoggingLevel>) -> bool {
    min.is_none_or(|m| level as u8 >= m as u8)
}

impl UpstreamClient {
    fn gw(&self) -> Option<Arc<Gateway>> {
        self.relay.gw.get().and_then(Weak::upgrade)
    }
}

impl ClientHandler for UpstreamClient {
    /// What the clients this session serves declared (of what the gateway relays): the
    /// server sees what it would see from them directly.
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities = serde_json::from_str(&self.key).unwrap_or_default();
        ClientConfig::new(
            caps,
            Implementation::new("cordon-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let gw = self
            .gw()
            .ok_or_else(|| McpError::internal_error("the gateway is stopping", None))?;
        // Off this task: the relayed request must not carry the upstream's request id as its
        // origin (the client's transport would look for a stream of that id).
        let server = self.server.clone();
        let key = self.key.clone();
        tokio::spawn(async move { gw.relay_sampling(&server, &key, params).await })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let gw = self
            .gw()
            .ok_or_else(|| McpError::internal_error("the gateway is stopping", None))?;
        let server = self.server.clone();
        let key = self.key.clone();
        tokio::spawn(async move { gw.relay_elicitation(&server, &key, request).await })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, McpError> {
        let gw = self
            .gw()
            .ok_or_else(|| McpError::internal_error("the gateway is stopping", None))?;
        let server = self.server.clone();
        let key = self.key.clone();
        tokio::spawn(async move { gw.relay_roots(&server, &key).await })
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let to = self.relay.progress.lock().ok().and_then(|m| {
            m.get(&(
                self.server.clone(),
                self.key.clone(),
                params.progress_token.clone(),
            ))
            .cloned()
        });
        if let Some((peer, token, last)) = to {
            // rmcp runs each notification in a task of its own, so they may come here out of
            // order; progress only ever increases, so one overtaken by a later one is dropped.
            let mut last = last.lock().await;
            if last.is_some_and(|l| params.progress <= l) {
                return;
            }
            *last = Some(params.progress);
            let mut p = params;
            p.progress_token = token;
            let _ = peer.notify_progress(p).await;
        }
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let mut p = params;
        p.logger = Some(match p.logger.take() {
            Some(l) => format!("{}/{l}", self.server),
            None => self.server.clone(),
        });
        // Each session's own level: one client's `logging/setLevel` changes only what it gets.
        for (_, s) in self.relay.sessions_of(&self.key) {
            let min = s.level.lock().ok().and_then(|l| *l);
            if level_passes(p.level, min) {
                let _ = s.peer.notify_logging_message(p.clone()).await;
            }
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let prefix = self.gw().map(|g| g.prefix).unwrap_or(true);
        let key = (self.server.clone(), params.uri.clone());
        for (_, s) in self.relay.sessions_of(&self.key) {
            let subscribed = s
                .subscribed
                .lock()
                .map(|m| m.contains(&key))
                .unwrap_or(false);
            if subscribed {
                let mut p = params.clone();
                p.uri = exposed_uri(prefix, &self.server, &params.uri);
                let _ = s.peer.notify_resource_updated(p).await;
            }
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        for (_, s) in self.relay.sessions_of(&self.key) {
            let _ = s.peer.notify_resource_list_changed().await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The gateway's own view (its pins) is refreshed first: the client lists at once.
        if let Some(gw) = self.gw() {
            if let Some(up) = gw.upstreams.get(&self.server) {
                up.refresh_tools(&gw, &self.key).await;
            }
        }
        for (_, s) in self.relay.sessions_of(&self.key) {
            let _ = s.peer.notify_tool_list_changed().await;
        }
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        for (_, s) in self.relay.sessions_of(&self.key) {
            let _ = s.peer.notify_prompt_list_changed().await;
        }
    }
}
