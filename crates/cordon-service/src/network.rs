//! A sandbox's egress policy and its proxy's decisions.

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::{Caller, Live, Service};
use crate::error::ServiceError;
use crate::types::*;

/// Every decision the sandbox's egress proxy has logged.
pub(super) fn egress_events(live: &Live) -> Vec<cordon_policy::NetworkEvent> {
    live.egress
        .lock()
        .ok()
        .and_then(|e| e.as_ref().map(|p| p.events()))
        .unwrap_or_default()
}

/// The decisions the sandbox's egress proxy made between `from_ms` and `to_ms`: a command's
/// share of the log (commands running side by side share theirs).
pub(super) fn egress_during(
    live: &Live,
    from_ms: u64,
    to_ms: u64,
) -> Vec<cordon_policy::NetworkEvent> {
    egress_events(live)
        .into_iter()
        .filter(|e| (from_ms..=to_ms).contains(&e.time_ms))
        .collect()
}

impl Service {
    /// The callback that starts a sandbox's egress proxy on the listener its init created;
    /// every decision also goes to the audit log.
    pub(super) fn egress_starter(
        self: &Arc<Self>,
        id: &str,
        key_id: &str,
        policy: &cordon_policy::network::NetworkPolicy,
        slot: Arc<Mutex<Option<cordon_net::EgressProxy>>>,
        secrets: Option<Arc<cordon_net::Interception>>,
    ) -> Result<cordon_linux::persistent::OnProxyListener, ServiceError> {
        let mut config = cordon_net::ProxyConfig::from_policy(policy)
            .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        config.secrets = secrets;
        let weak = Arc::downgrade(self);
        let (id, key_id) = (id.to_string(), key_id.to_string());
        config.on_event = Some(Arc::new(move |ev: &cordon_policy::NetworkEvent| {
            if let Some(svc) = weak.upgrade() {
                if ev.verdict == "deny" {
                    svc.metrics.deny("egress");
                }
                svc.audit.record("network", &key_id, Some(&id), json!({"host": ev.host, "port": ev.port, "verdict": ev.verdict, "reason": ev.reason, "bytes": ev.bytes}));
            }
        }));
        Ok(Box::new(move |listener| {
            if let Ok(p) = cordon_net::EgressProxy::start(listener, config) {
                if let Ok(mut s) = slot.lock() {
                    *s = Some(p);
                }
            }
        }))
    }

    /// The sandbox's egress policy and every decision its proxy made so far.
    pub fn network(&self, caller: &Caller, id: &str) -> Result<NetworkInfo, ServiceError> {
        let live = self.get_live(caller, id)?;
        let policy = live.network.lock().map(|p| p.clone()).unwrap_or_default();
        Ok(NetworkInfo {
            policy,
            events: egress_events(&live),
        })
    }

    /// Replaces the sandbox's egress policy while it runs.
    pub fn set_network(
        &self,
        caller: &Caller,
        id: &str,
        policy: cordon_policy::network::NetworkPolicy,
    ) -> Result<NetworkSet, ServiceError> {
        let live = self.get_live(caller, id)?;
        let rules = policy
            .compile()
            .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        let hosts = policy
            .static_hosts()
            .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        {
            let guard = live
                .egress
                .lock()
                .map_err(|_| ServiceError::internal("lock"))?;
            let proxy = guard
                .as_ref()
                .ok_or_else(|| ServiceError::conflict("this sandbox has no egress proxy"))?;
            proxy
                .set_policy(rules, &hosts)
                .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        }
        if let Ok(mut p) = live.network.lock() {
            *p = policy.clone();
        }
        self.audit.record(
            "sandbox.network",
            &caller.key_id,
            Some(id),
            json!({"allow": policy.allow}),
        );
        Ok(NetworkSet { policy })
    }
}
