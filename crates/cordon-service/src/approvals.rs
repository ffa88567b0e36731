//! Admin views of the host rather than of a tenant: the held calls of the gateways registered
//! in this server's data directory (`cordon gateway --keys-dir DIR`), answered as the gateway's
//! own doors answer them ([`crate::gateway_state`]).
//!
//! Threat model: a held call belongs to no tenant — it is the host operator's decision — so
//! only admin keys (a data directory's first key, `cordon keys create --admin`) see or answer
//! them; on a server without keys (loopback only), the local user is the operator. The ids in
//! a request are client input, checked by the state directory before they name a file.

use crate::error::ServiceError;
use crate::gateway_state::{self, Approval, ApprovalAnswer, ApprovalsView, StateDir};
use crate::{Caller, Service};

/// Answered calls shown per gateway.
const HISTORY_SHOWN: usize = 50;

impl Service {
    /// The held and answered calls of every gateway registered in this server's data dir.
    pub fn gateway_approvals(&self, caller: &Caller) -> Result<ApprovalsView, ServiceError> {
        self.require_admin(caller)?;
        let mut gateways = Vec::new();
        for (reg, running) in gateway_state::registered(&self.config().data_dir) {
            // A registration whose directory is gone (a test's, a removed config) is skipped.
            let Ok(state) = StateDir::open_existing(&reg.state_dir) else {
                continue;
            };
            gateways.push(state.view(reg, running, HISTORY_SHOWN));
        }
        Ok(ApprovalsView { gateways })
    }

    /// Answers a held call of one of the registered gateways.
    pub fn answer_gateway_approval(
        &self,
        caller: &Caller,
        id: &str,
        ans: &ApprovalAnswer,
    ) -> Result<Approval, ServiceError> {
        self.require_admin(caller)?;
        if ans.approve && ans.args_digest.is_none() {
            return Err(ServiceError::bad_request(
                "args_digest: a grant names the digest of the arguments it approves",
            ));
        }
        for (reg, _) in gateway_state::registered(&self.config().data_dir) {
            let Ok(state) = StateDir::open_existing(&reg.state_dir) else {
                continue;
            };
            if state.load_approval(id).is_some() {
                let a = state.answer(id, ans, &caller.key_id)?;
                self.audit(
                    "gateway.approval",
                    &caller.key_id,
                    None,
                    serde_json::json!({"gateway": reg.name, "id": id, "tool": a.tool, "approve": ans.approve, "reason": a.reason}),
                );
                return Ok(a);
            }
        }
        Err(ServiceError::not_found(format!(
            "no call {id} is waiting at a gateway registered with this server"
        )))
    }
}
