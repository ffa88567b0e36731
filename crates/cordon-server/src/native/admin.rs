//! The native API's admin routes: the server's API keys (`/v1/keys`) and the host's
//! enforcement as `cordon check` reports it (`/v1/host/enforcement`). Translation only: the
//! service refuses every key that is not an admin key (403 `admin_only`).
//!
//! Threat model: bodies and ids are client input, bounded and checked by the service; a key's
//! secret appears once, in the answer that creates it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::JsonBody;
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::admin::{CreateKey, HostEnforcement, KeyList};
use cordon_service::Caller;

/// Path parameter of a key route.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct KeyPath {
    /// The key's id (`key_…`).
    pub(super) id: String,
}

#[utoipa::path(get, path = "/v1/keys",
    description = "Admin keys only. Every API key of this server (never a secret), with how many sandboxes each has alive.",
    responses((status = 200, body = super::schema::KeyList)))]
pub(super) async fn list_keys(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<KeyList>, ApiError> {
    Ok(Json(st.service.list_keys(&c)?))
}

#[utoipa::path(post, path = "/v1/keys", request_body = super::schema::CreateKey,
    description = "Admin keys only. A new API key; its secret is in this answer and nowhere else.",
    responses((status = 201, body = super::schema::CreatedKey)))]
pub(super) async fn create_key(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateKey>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(st.service.create_key_as(&c, req)?),
    ))
}

#[utoipa::path(delete, path = "/v1/keys/{id}", params(KeyPath),
    description = "Admin keys only. Revokes a key: its requests are refused from now on, its sandboxes end with their TTL. An admin key cannot revoke itself (409).",
    responses((status = 204, description = "Revoked")))]
pub(super) async fn revoke_key(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(KeyPath { id }): Path<KeyPath>,
) -> Result<StatusCode, ApiError> {
    st.service.revoke_key_as(&c, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/host/enforcement",
    description = "Admin keys only. What this host can enforce, why anything is missing and what to do: `cordon check --json`'s document.",
    responses((status = 200, body = super::schema::HostEnforcement)))]
pub(super) async fn host_enforcement(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<HostEnforcement>, ApiError> {
    let svc = st.service.clone();
    // The probe starts processes (namespaces, the wasm backend): off the async workers.
    let v = tokio::task::spawn_blocking(move || svc.host_enforcement(&c))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(Json(v))
}
