//! The native API's sandboxes: create, list (filtered by metadata), get, their resource use
//! now, delete, extend the TTL, pause and resume; a learning sandbox's learned profile.
//!
//! Threat model: bodies and queries are client input, parsed by [`super::JsonBody`] and
//! axum's extractors into the service's types; the service checks each against the caller's key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};

use super::{IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::Caller;

#[utoipa::path(post, path = "/v1/sandboxes", request_body(content = Option<super::schema::CreateSandbox>, description = "All fields are optional; an empty body is `{}`"),
    responses((status = 201, description = "The sandbox runs", body = super::schema::SandboxInfo)))]
pub(super) async fn create(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateSandbox>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st.service.create(&c, req).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(get, path = "/v1/sandboxes",
    description = "The key's running sandboxes. `?metadata.KEY=VALUE` (any number of them) keeps only those whose metadata has KEY equal to VALUE; other query parameters are ignored.",
    responses((status = 200, body = super::schema::SandboxList)))]
pub(super) async fn list(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Json<SandboxList> {
    let filter: BTreeMap<String, String> = q
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix("metadata.").map(|k| (k.to_string(), v)))
        .collect();
    Json(st.service.list(&c, &filter))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", params(IdPath),
    description = "A running sandbox, or one that ended (its `state` and `ended_reason` say how; `enforcement` and `limits` are then null).",
    responses((status = 200, body = super::schema::SandboxInfo)))]
pub(super) async fn get_one(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.get(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/metrics", params(IdPath),
    description = "What a running sandbox uses now: CPU (since the previous request), memory, disk and processes, each beside its limit.",
    responses((status = 200, body = super::schema::SandboxMetrics)))]
pub(super) async fn metrics(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<cordon_service::SandboxMetrics>, ApiError> {
    Ok(Json(st.service.sandbox_metrics(&c, &id).await?))
}

#[utoipa::path(get, path = "/v1/usage",
    description = "The key's running sandboxes' use at the server's last sample (every 2 s, from each one's cgroup): CPU, memory, processes and disk against their limits, for all of them in one request (the console's live table). A sandbox whose host gives it no cgroup is not listed: ask its `/metrics`.",
    responses((status = 200, body = super::schema::UsageList)))]
pub(super) async fn usage_now(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<cordon_service::usage::UsageList>, ApiError> {
    Ok(Json(st.service.usage_now(&c)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/metrics/history", params(IdPath),
    description = "A running sandbox's CPU and memory over its whole life, sampled by the server from its cgroup every 2 s; a long life is kept in at most 512 points (neighbours merged as it grows).",
    responses((status = 200, body = super::schema::UsageHistory)))]
pub(super) async fn metrics_history(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<cordon_service::usage::UsageHistory>, ApiError> {
    Ok(Json(st.service.usage_history(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes", params(IdPath),
    description = "A running sandbox's processes now, by their pid inside it (its init included), with their command lines, CPU and memory.",
    responses((status = 200, body = super::schema::ProcessList)))]
pub(super) async fn processes(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<cordon_service::ProcessList>, ApiError> {
    Ok(Json(st.service.process_list(&c, &id).await?))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", params(IdPath),
    responses((status = 204, description = "Deleted: every process of the sandbox is gone")))]
pub(super) async fn delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<StatusCode, ApiError> {
    st.service.delete(&c, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/learned-profile", params(IdPath),
    description = "The learned profile of a sandbox created with `learn: true`: what its commands used \
    (network destinations, programs executed, each command's peaks x1.5), as the TOML file `cordon run --profile` \
    takes and as JSON. While it runs, what it used so far; after it ended (deleted, expired), what it used in all, \
    kept in the server's memory (the last 256 ended sandboxes, until the server restarts). \
    409 for a sandbox created without `learn`",
    responses((status = 200, body = super::schema::LearnedProfile)))]
pub(super) async fn learned_profile(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<LearnedProfile>, ApiError> {
    Ok(Json(st.service.learned_profile(&c, &id).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/ttl", params(IdPath), request_body = super::schema::ExtendTtl,
    responses((status = 200, body = super::schema::SandboxInfo)))]
pub(super) async fn extend(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<ExtendTtl>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(st.service.extend(&c, &id, &req.ttl)?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", params(IdPath),
    request_body(content = Option<super::schema::PauseRequest>, description = "Optional; an empty body keeps memory"),
    responses((status = 200, body = super::schema::SandboxInfo,
        description = "Paused. Keeping memory: every process is frozen (`paused_by` says how), memory and files stay; \
        commands answer 409 until it is resumed; it still counts against the key's quota and its TTL keeps running; \
        its files are also copied to disk, so a restart of the server finds it paused to disk. \
        `keep_memory: false`: paused to disk (`paused_by: disk`) — files kept, memory, processes and the quota slot released; \
        a resume starts it afresh with its files under the same id. \
        409 `already_paused` when it is paused already")))]
pub(super) async fn pause(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<cordon_service::types::PauseRequest>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(
        st.service
            .pause(&c, &id, req.keep_memory.unwrap_or(true))
            .await?,
    ))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", params(IdPath),
    responses((status = 200, body = super::schema::SandboxInfo,
        description = "Running again (a sandbox that was not paused is left as it is). One paused to disk starts afresh \
        with its files under the same id (no process of before runs); 429 `quota_exceeded` when the key has no free slot for it")))]
pub(super) async fn resume(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    // Read whole though nothing in it is used (clients send `{}`): a body left unread when
    // the answer goes out makes hyper close the connection if the rest has not arrived yet,
    // and the client's next request on it then meets a closed socket.
    _body: JsonBody<serde::de::IgnoredAny>,
) -> Result<Json<SandboxInfo>, ApiError> {
    st.service.resume(&c, &id).await?;
    Ok(Json(st.service.get(&c, &id)?))
}
