//! The native API's network policy of a sandbox: read it, replace it.
//!
//! Threat model: the policy is client input, parsed and validated by `cordon-policy`'s types.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::{Extension, Json};

use super::{IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::Caller;

#[utoipa::path(get, path = "/v1/sandboxes/{id}/network", params(IdPath),
    responses((status = 200, body = super::schema::NetworkInfo)))]
pub(super) async fn get_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<NetworkInfo>, ApiError> {
    Ok(Json(st.service.network(&c, &id)?))
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/network", params(IdPath),
    request_body(content = Option<cordon_policy::network::NetworkPolicy>, description = "An empty body is `{}`: no network. The new policy, in force at once for new connections: `allow` entries `DOMAIN[:PORT]`, `*.DOMAIN[:PORT]`, `IP[:PORT]`, `CIDR`; `hosts` pins names to addresses"),
    responses((status = 200, body = inline(super::schema::NetworkSet))))]
pub(super) async fn put_network(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(policy): JsonBody<cordon_policy::network::NetworkPolicy>,
) -> Result<Json<NetworkSet>, ApiError> {
    Ok(Json(st.service.set_network(&c, &id, policy)?))
}
