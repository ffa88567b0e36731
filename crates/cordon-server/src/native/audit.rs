//! The native API's audit trail: a key reads its own records, searched, newest first, and
//! whether the log's hash chain holds (`GET /v1/audit`), as `cordon audit verify` checks it.
//!
//! Threat model: the query is client input, used only as a substring to match; a key sees
//! its own records only — the chain's state is a fact about the whole log and names no other
//! key's records.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::audit::AuditView;
use cordon_service::Caller;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditQuery {
    /// Only records whose text holds this (case-insensitive).
    #[param(pattern = r"^[^\x00]*$")]
    q: Option<String>,
    /// At most this many records (1 to 1000, default 200).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/audit", params(AuditQuery),
    description = "The key's own audit records, newest first, and the log's chain checked against its key and head (`intact`, or the first break and its line).",
    responses((status = 200, body = super::schema::AuditView)))]
pub(super) async fn audit_trail(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Query(q): Query<AuditQuery>,
) -> Result<Json<AuditView>, ApiError> {
    let query = q.q.unwrap_or_default();
    if query.contains('\0') {
        return Err(ApiError::bad_request("q: a NUL byte matches no record"));
    }
    let limit = q.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: 1 to 1000 records (got {limit})"
        )));
    }
    let svc = st.service.clone();
    let view = tokio::task::spawn_blocking(move || svc.audit_view(&c, &query, limit))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(view))
}
