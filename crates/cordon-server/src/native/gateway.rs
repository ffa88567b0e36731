//! The native API's view of the gateways registered with this server (`cordon gateway
//! --keys-dir DATA_DIR`): their tool calls held for a person, answered here
//! (`/v1/gateway/approvals`). Translation only: the service checks the key and answers.
//!
//! Threat model: admin keys only (the service refuses others with 403); the call id and the
//! body are client input, checked by the service before an id names a file.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::JsonBody;
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::gateway_state::{Approval, ApprovalAnswer, ApprovalsView};
use cordon_service::Caller;

/// Path parameter of a held call.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct CallPath {
    /// The held call's id (`call-…`).
    pub(super) id: String,
}

#[utoipa::path(get, path = "/v1/gateway/approvals",
    description = "Admin keys only. The tool calls each registered gateway holds for a person (with their arguments, secret-looking fields masked, and the rule that asked), and its last answered ones.",
    responses((status = 200, body = super::schema::ApprovalsView)))]
pub(super) async fn list_approvals(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<ApprovalsView>, ApiError> {
    let svc = st.service.clone();
    let view = tokio::task::spawn_blocking(move || svc.gateway_approvals(&c))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(view))
}

#[utoipa::path(post, path = "/v1/gateway/approvals/{id}", params(CallPath), request_body = super::schema::ApprovalAnswer,
    description = "Admin keys only. Grants (naming the digest of the arguments shown) or refuses, with a reason, a held call; the gateway lets it through or answers the agent with the refusal.",
    responses((status = 200, body = super::schema::HeldCall)))]
pub(super) async fn answer_approval(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CallPath { id }): Path<CallPath>,
    JsonBody(req): JsonBody<ApprovalAnswer>,
) -> Result<Json<Approval>, ApiError> {
    let svc = st.service.clone();
    let a = tokio::task::spawn_blocking(move || svc.answer_gateway_approval(&c, &id, &req))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(a))
}
