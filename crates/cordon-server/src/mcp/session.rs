//! MCP sessions and their sandboxes: [`McpState`] (shared by every handler of one process),
//! one session per MCP session (or, sessionless, per API key), its sandbox created on its
//! first tool call under the session's own lock and deleted when the session ends.
//!
//! Threat model: a session acts only as the caller the HTTP door authenticated (or the local
//! caller of stdio); its sandbox is the only one its tools reach.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_policy::Profile;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use super::render::{text, tool_error};
use super::tools::CordonMcp;
use cordon_service::types::{Amount, CreateSandbox, SandboxInfo, SandboxState};
use cordon_service::{Caller, Service};

/// How long an HTTP session's sandbox lives without a call (each call extends it).
pub(super) const HTTP_IDLE_TTL: Duration = Duration::from_secs(2 * 3600);

/// Shared by every MCP handler of one process.
pub struct McpState {
    pub(super) service: Arc<Service>,
    /// Caller for transports without HTTP authentication (stdio).
    pub(super) local_caller: Option<Caller>,
    /// The profile of the sandboxes this front end creates; `None`: the built-in default.
    pub(super) profile: Option<Profile>,
    /// A session's sandbox lives this long after its last call.
    pub(super) idle_ttl: Duration,
    /// Session key → session. A std lock, held only to look up or insert: its guard cannot
    /// live across an await (it is not Send, and rmcp's handlers must be), so no create or
    /// call of one session can ever wait on another's.
    pub(super) sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// One MCP session (or, sessionless, one API key).
pub(super) struct Session {
    pub(super) caller: Caller,
    /// A label for the registry's metadata (not the session id itself: that is a credential).
    pub(super) label: String,
    /// Serialises the session's calls where no [`order::Turn`] orders them (sessionless
    /// requests each come with a transport of their own).
    pub(super) busy: tokio::sync::Mutex<()>,
    /// The session's sandbox; locked while it is created, so there is only ever one.
    pub(super) sandbox: tokio::sync::Mutex<Option<String>>,
    /// The snapshot the session's next sandbox starts from (`restore_snapshot`).
    pub(super) next_from: Mutex<Option<String>>,
}

impl McpState {
    /// `profile` comes from the operator (the `cordon mcp` command line), never from a client.
    pub fn new(
        service: Arc<Service>,
        local_caller: Option<Caller>,
        profile: Option<Profile>,
    ) -> Arc<McpState> {
        let idle_ttl = if local_caller.is_some() {
            // stdio: the session is the process; its sandbox lives as long as the service lets.
            service.config().max_ttl
        } else {
            HTTP_IDLE_TTL.min(service.config().max_ttl)
        };
        Arc::new(McpState {
            service,
            local_caller,
            profile,
            idle_ttl,
            sessions: Default::default(),
        })
    }

    pub(super) fn session(&self, key: &str, caller: &Caller, label: &str) -> Arc<Session> {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Session {
                    caller: caller.clone(),
                    label: label.to_string(),
                    busy: Default::default(),
                    sandbox: Default::default(),
                    next_from: Default::default(),
                })
            })
            .clone()
    }

    /// Forgets a session and deletes its sandbox.
    pub(super) async fn end_session(&self, key: &str) {
        let session = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(s) = session {
            if let Some(id) = s.sandbox.lock().await.take() {
                let _ = self.service.delete(&s.caller, &id).await;
            }
        }
    }

    pub(super) async fn end_all(&self) {
        let keys: Vec<String> = self
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for k in keys {
            self.end_session(&k).await;
        }
    }

    pub(super) fn network_note(&self) -> String {
        match &self.profile {
            Some(p) if p.network.is_enabled() => format!(
                "Network: HTTP(S) only, through a proxy, to {}",
                p.network.allow.join(", ")
            ),
            _ => "No network access".to_string(),
        }
    }

    pub(super) fn has_workspace(&self) -> bool {
        self.profile.as_ref().is_some_and(|p| p.workspace.is_some())
    }
}

/// Deletes a session's sandbox when the last handler of that session goes away.
pub(super) struct SessionGuard {
    pub(super) state: Arc<McpState>,
    pub(super) key: Mutex<Option<String>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let Some(key) = self.key.lock().ok().and_then(|mut k| k.take()) else {
            return;
        };
        let state = self.state.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { state.end_session(&key).await });
        }
    }
}

/// The session's sandbox for one call.
pub(super) struct Bound {
    pub(super) caller: Caller,
    pub(super) id: String,
    /// Said to the agent when its earlier sandbox is gone and this one is fresh.
    pub(super) note: Option<String>,
}

impl Bound {
    /// Puts the note (if any) first in a result.
    pub(super) fn annotate(&self, mut r: CallToolResult) -> CallToolResult {
        if let Some(n) = &self.note {
            r.content.insert(0, text(n.clone()));
        }
        r
    }
}

pub(super) fn seconds(d: Duration) -> Amount {
    Amount::Number(d.as_secs_f64())
}

pub(super) fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl CordonMcp {
    /// This call's session: who calls, and which session it is.
    pub(super) fn session(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Arc<Session>, McpError> {
        let (caller, key, label, owned) = if let Some(c) = &self.state.local_caller {
            (c.clone(), "stdio".to_string(), "stdio".to_string(), true)
        } else {
            let parts = ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .ok_or_else(|| McpError::internal_error("no HTTP request context", None))?;
            let caller = parts
                .extensions
                .get::<Caller>()
                .cloned()
                .ok_or_else(|| McpError::invalid_request("unauthenticated", None))?;
            match parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                Some(sid) => {
                    let key = format!("{}:{sid}", caller.key_id);
                    let label = cordon_service::keys::hash(sid).chars().take(16).collect();
                    (caller, key, label, true)
                }
                None => {
                    let key = format!("{}:shared", caller.key_id);
                    (caller, key, "shared".to_string(), false)
                }
            }
        };
        if owned {
            if let Ok(mut g) = self.guard.key.lock() {
                g.get_or_insert_with(|| key.clone());
            }
        }
        Ok(self.state.session(&key, &caller, &label))
    }

    /// The session's sandbox, created on first use (or when the previous one is gone).
    pub(super) async fn sandbox(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Bound, CallToolResult> {
        let session = self.session(ctx).map_err(|e| tool_error(e.message))?;
        let caller = session.caller.clone();
        let svc = &self.state.service;
        let mut slot = session.sandbox.lock().await;
        let mut note = None;
        if let Some(id) = slot.take() {
            match svc.get(&caller, &id) {
                Ok(info) if info.state == SandboxState::Running => {
                    self.keep_alive(&caller, &info);
                    *slot = Some(id.clone());
                    return Ok(Bound {
                        caller,
                        id,
                        note: None,
                    });
                }
                Ok(info) => {
                    note = Some(format!(
                        "note: this session's sandbox ended ({}{}); this call runs in a fresh one, \
                         and interpreter state{} from before is gone",
                        info.state,
                        info.ended_reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default(),
                        if self.state.has_workspace() {
                            " and files outside /workspace"
                        } else {
                            " and files"
                        },
                    ));
                    // A dead sandbox not reaped yet still counts against the key's quota.
                    let _ = svc.delete(&caller, &id).await;
                }
                Err(_) => {
                    note = Some(
                        "note: this session's sandbox is gone; this call runs in a fresh one"
                            .to_string(),
                    );
                }
            }
        }
        let ttl = Some(seconds(self.state.idle_ttl));
        let metadata = BTreeMap::from([
            ("origin".to_string(), "mcp".to_string()),
            ("mcp_session".to_string(), session.label.clone()),
        ]);
        let from = session
            .next_from
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let created = match &self.state.profile {
            Some(p) => {
                svc.create_with_profile_from(&caller, p.clone(), ttl, metadata, from)
                    .await
            }
            None => {
                svc.create(
                    &caller,
                    CreateSandbox {
                        ttl,
                        metadata,
                        from,
                        ..Default::default()
                    },
                )
                .await
            }
        };
        let info = created.map_err(|e| {
            tool_error(format!(
                "cordon could not create the sandbox: {}",
                e.message
            ))
        })?;
        *slot = Some(info.id.clone());
        Ok(Bound {
            caller,
            id: info.id,
            note,
        })
    }

    /// Keeps a used sandbox from expiring under an active session (extends at half its TTL,
    /// so the registry is written at most a few times per TTL).
    pub(super) fn keep_alive(&self, caller: &Caller, info: &SandboxInfo) {
        let ttl = self.state.idle_ttl.as_secs();
        if info.expires_at.saturating_sub(now_s()) < ttl / 2 {
            let _ = self
                .state
                .service
                .extend(caller, &info.id, &seconds(self.state.idle_ttl));
        }
    }
}
