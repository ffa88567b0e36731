//! The native API's files: read, write (raw bytes), delete, list, stat, mkdir, move.
//!
//! Threat model: paths and upload bytes are client input: a path is checked for NUL and
//! emptiness here and confined to the sandbox by the service; an upload is kept up to the
//! server's limit only.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cordon_service::files;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};

use super::{IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::Caller;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct PathQuery {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    #[param(pattern = r"^[^\x00]+$")]
    pub(super) path: String,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct DeleteQuery {
    /// A path inside the sandbox; relative paths are under `/workspace`.
    #[param(pattern = r"^[^\x00]+$")]
    pub(super) path: String,
    /// Delete a directory and everything in it.
    pub(super) recursive: Option<bool>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ListQuery {
    /// A directory inside the sandbox (default `/workspace`).
    #[param(pattern = r"^[^\x00]+$")]
    pub(super) path: Option<String>,
}

/// Checks a path against the schema's pattern (`^[^\x00]+$`): not empty, no NUL.
pub(super) fn checked_path(p: &str, field: &str) -> Result<String, ApiError> {
    if p.is_empty() || p.contains('\0') {
        return Err(ApiError::bad_request(format!(
            "{field}: give a path inside the sandbox, e.g. /workspace/file"
        )));
    }
    Ok(p.to_string())
}

/// Schema of raw bytes.
pub(super) struct Binary;

impl utoipa::PartialSchema for Binary {
    fn schema() -> RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .into()
    }
}
impl ToSchema for Binary {}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(IdPath, PathQuery),
    responses((status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = inline(Binary))))]
pub(super) async fn file_read(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let data = files::read(&st.service, &c, &id, &path).await?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from(data),
    )
        .into_response())
}

/// Reads an upload of at most `max` bytes. Past the limit nothing more is kept, but the rest
/// is read and dropped (up to a bound) so the client can read the 413 instead of meeting a
/// reset connection.
pub(super) async fn read_upload(body: Body, max: u64) -> Result<Vec<u8>, ApiError> {
    const DRAIN_LIMIT: u64 = 64 << 20;
    let too_large = || ApiError::too_large("the upload", max);
    let mut stream = body.into_data_stream();
    let mut data = Vec::new();
    let mut seen: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the upload: {e}")))?;
        seen += chunk.len() as u64;
        if seen > max {
            if seen > max.saturating_add(DRAIN_LIMIT) {
                return Err(too_large());
            }
            data.clear();
            continue;
        }
        data.extend_from_slice(&chunk);
    }
    if seen > max {
        return Err(too_large());
    }
    Ok(data)
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(IdPath, PathQuery),
    request_body(content = inline(Option<Binary>), content_type = "application/octet-stream", description = "The file's new contents (any content type; the bytes are written as they are; none: an empty file)"),
    responses((status = 201, body = inline(super::schema::Written), description = "Written, as the sandbox's user; missing parent directories are made")))]
pub(super) async fn file_write(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let max = st.service.config().max_upload;
    let data = read_upload(body, max).await?;
    let written = cordon_service::files::write(&st.service, &c, &id, &path, data).await?;
    Ok((
        StatusCode::CREATED,
        Json(Written {
            path,
            bytes: written,
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", params(IdPath, DeleteQuery),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn file_delete(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let path = checked_path(&q.path, "path")?;
    files::remove(&st.service, &c, &id, &path, q.recursive.unwrap_or(false)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(IdPath, ListQuery),
    responses((status = 200, body = super::schema::FileList)))]
pub(super) async fn file_list(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = match &q.path {
        Some(p) => checked_path(p, "path")?,
        None => "/workspace".into(),
    };
    let entries = files::list(&st.service, &c, &id, &path, 1, usize::MAX).await?;
    Ok(Json(json!({ "entries": entries })))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", params(IdPath, PathQuery),
    responses((status = 200, body = super::schema::FileEntry)))]
pub(super) async fn file_stat(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    Query(q): Query<PathQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let path = checked_path(&q.path, "path")?;
    let entry = files::stat(&st.service, &c, &id, &path).await?;
    Ok(Json(serde_json::to_value(entry).unwrap_or_default()))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", params(IdPath), request_body = super::schema::MkdirRequest,
    responses((status = 201, description = "Made (with its parents unless `parents: false`)")))]
pub(super) async fn file_mkdir(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<MkdirRequest>,
) -> Result<StatusCode, ApiError> {
    let p = checked_path(&req.path, "path")?;
    files::mkdir(&st.service, &c, &id, &p, req.parents).await?;
    Ok(StatusCode::CREATED)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/move", params(IdPath), request_body = super::schema::MoveRequest,
    responses((status = 204, description = "Moved")))]
pub(super) async fn file_move(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<MoveRequest>,
) -> Result<StatusCode, ApiError> {
    let (from, to) = (
        checked_path(&req.from, "from")?,
        checked_path(&req.to, "to")?,
    );
    files::rename(&st.service, &c, &id, &from, &to).await?;
    Ok(StatusCode::NO_CONTENT)
}
