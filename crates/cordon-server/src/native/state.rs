//! The native API's state that outlives a sandbox: volumes (`/v1/volumes`), snapshots
//! (`/v1/sandboxes/{id}/snapshots`, `/v1/snapshots`) and forks (`/v1/sandboxes/{id}/fork`).
//! Translation only: the service validates and stores.
//!
//! Threat model: names and bodies are client input, parsed into the service's types; the
//! service scopes every volume and snapshot to the caller's key.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::snapshots::{CreateSnapshot, ForkRequest, SnapshotList};
use cordon_service::volumes::{CreateVolume, VolumeInfo, VolumeList};
use cordon_service::Caller;

/// Path parameter of a volume or snapshot route.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct NamePath {
    /// Its name.
    pub(super) name: String,
}

#[utoipa::path(post, path = "/v1/volumes", request_body = super::schema::CreateVolume,
    responses((status = 201, body = super::schema::VolumeInfo, description = "The volume exists, empty; 409 `already_exists` if the key has one of that name, 507 `quota_exceeded` past the key's volumes")))]
pub(super) async fn create_volume(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateVolume>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(st.service.create_volume(&c, req).await?),
    ))
}

#[utoipa::path(get, path = "/v1/volumes",
    responses((status = 200, body = super::schema::VolumeList, description = "The key's volumes, with their use and the sandboxes mounting them")))]
pub(super) async fn list_volumes(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<VolumeList>, ApiError> {
    Ok(Json(st.service.list_volumes(&c).await?))
}

#[utoipa::path(get, path = "/v1/volumes/{name}", params(NamePath),
    responses((status = 200, body = super::schema::VolumeInfo)))]
pub(super) async fn get_volume(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<Json<VolumeInfo>, ApiError> {
    Ok(Json(st.service.get_volume(&c, &name).await?))
}

#[utoipa::path(delete, path = "/v1/volumes/{name}", params(NamePath),
    responses((status = 204, description = "Deleted with its files; 409 `volume_in_use` naming the sandboxes that mount it")))]
pub(super) async fn delete_volume(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<StatusCode, ApiError> {
    st.service.delete_volume(&c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshots", params(IdPath), request_body = super::schema::CreateSnapshot,
    responses((status = 201, body = super::schema::SnapshotInfo, description = "The sandbox's /workspace, home and /tmp, copied with its processes frozen (`frozen_ms` says how long); memory and processes are not carried. 507 `quota_exceeded` past the key's snapshot quota")))]
pub(super) async fn create_snapshot(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<CreateSnapshot>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(st.service.create_snapshot(&c, &id, req).await?),
    ))
}

#[utoipa::path(get, path = "/v1/snapshots",
    responses((status = 200, body = super::schema::SnapshotList, description = "The key's snapshots, oldest first")))]
pub(super) async fn list_snapshots(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<SnapshotList>, ApiError> {
    Ok(Json(st.service.list_snapshots(&c).await?))
}

#[utoipa::path(delete, path = "/v1/snapshots/{name}", params(NamePath),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn delete_snapshot(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(NamePath { name }): Path<NamePath>,
) -> Result<StatusCode, ApiError> {
    st.service.delete_snapshot(&c, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", params(IdPath), request_body(content = Option<super::schema::ForkRequest>, description = "All fields are optional; an empty body is `{\"count\": 1}`"),
    responses((status = 201, body = super::schema::ForkResult, description = "`count` new sandboxes with the parent's files, profile, environment, network policy and volumes; the parent runs on. Memory and processes are not carried (`note` says so)")))]
pub(super) async fn fork(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<ForkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(st.service.fork(&c, &id, req).await?),
    ))
}
