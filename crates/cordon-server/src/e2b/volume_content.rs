//! E2B's volume content API (`/volumecontent/{volume}/…`, where the SDK's `Volume` sends what
//! `E2B_VOLUME_API_URL` names): a volume's files read and written without a sandbox — stat,
//! list, mkdir, read, write, change mode, remove.
//!
//! Threat model: the bearer token, the path and the uploaded bytes are client input. The token
//! is checked by the service (it names its key and volume; the key must still be valid) and
//! opens that one volume only; paths resolve inside the volume (`openat2` `RESOLVE_IN_ROOT`, in
//! the service), whose contents are whatever its sandboxes wrote. Files made here belong to
//! the sandbox user, as those a sandbox makes do: another owner is refused, and set-user-ID
//! and set-group-ID bits are dropped.

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::{header, request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_service::files::{self, Entry, EntryType, Place};
use cordon_service::Caller;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{rfc3339, E2bError, St};
use crate::error::{ApiError, ErrorKind};

/// The one owner a volume's files have, as sandboxes see them.
const SANDBOX_USER: u32 = 1000;
/// Entries one listing returns at most.
const LIST_CAP: usize = 10_000;

/// A volume content request's caller and volume, from its `Authorization: Bearer` token.
pub(super) struct VolumeCaller(St, Caller, String);

impl FromRequestParts<St> for VolumeCaller {
    type Rejection = E2bError;

    async fn from_request_parts(parts: &mut Parts, e2b: &St) -> Result<Self, E2bError> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let (caller, volume) = e2b.st.service.volume_by_token(token, e2b.st.open)?;
        Ok(VolumeCaller(e2b.clone(), caller, volume))
    }
}

impl VolumeCaller {
    /// The volume the URL names, which must be the token's.
    fn volume(&self, named: &str) -> Result<Place<'_>, ApiError> {
        if named != self.2 {
            return Err(ApiError::new(
                ErrorKind::Forbidden,
                "forbidden",
                format!("this token opens volume '{}', not '{named}'", self.2),
            ));
        }
        Ok(Place::Volume(&self.2))
    }
}

#[derive(Deserialize)]
pub(super) struct PathQuery {
    path: String,
}

#[derive(Deserialize)]
pub(super) struct DirQuery {
    path: String,
    depth: Option<u32>,
}

/// What a new file or directory is to be: owner (only the sandbox user) and mode; `force`
/// makes missing parents (and, for a directory, accepts one that is there).
#[derive(Deserialize)]
pub(super) struct MakeQuery {
    path: String,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Metadata {
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
}

fn owner_ok(uid: Option<u32>, gid: Option<u32>) -> Result<(), ApiError> {
    if uid.is_some_and(|u| u != SANDBOX_USER) || gid.is_some_and(|g| g != SANDBOX_USER) {
        return Err(ApiError::bad_request(format!(
            "uid, gid: a volume's files belong to the sandbox user ({SANDBOX_USER}), whoever \
             writes them"
        )));
    }
    Ok(())
}

/// An entry as E2B's `VolumeEntryStat`.
fn stat_body(e: &Entry) -> Value {
    let kind = match e.r#type {
        EntryType::File => "file",
        EntryType::Dir => "directory",
        EntryType::Symlink => "symlink",
        EntryType::Other => "unknown",
    };
    let t = rfc3339(e.modified);
    let mut v = json!({
        "name": e.name, "type": kind, "path": e.path, "size": e.size, "mode": e.mode,
        "uid": SANDBOX_USER, "gid": SANDBOX_USER, "atime": t, "mtime": t, "ctime": t,
    });
    if let Some(target) = &e.target {
        v["target"] = json!(target);
    }
    v
}

pub(super) async fn stat(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Json<Value>, E2bError> {
    let at = vc.volume(&volume)?;
    let e = files::stat(&vc.0.st.service, &vc.1, at, &q.path).await?;
    Ok(Json(stat_body(&e)))
}

pub(super) async fn remove(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<StatusCode, E2bError> {
    let at = vc.volume(&volume)?;
    files::remove(&vc.0.st.service, &vc.1, at, &q.path, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn update(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<PathQuery>,
    body: Bytes,
) -> Result<Json<Value>, E2bError> {
    let at = vc.volume(&volume)?;
    let m: Metadata = super::control::parse(&body)?;
    owner_ok(m.uid, m.gid)?;
    let svc = &vc.0.st.service;
    if let Some(mode) = m.mode {
        files::set_mode(svc, &vc.1, at, &q.path, mode).await?;
    }
    Ok(Json(stat_body(
        &files::stat(svc, &vc.1, at, &q.path).await?,
    )))
}

pub(super) async fn list(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<DirQuery>,
) -> Result<Json<Value>, E2bError> {
    let at = vc.volume(&volume)?;
    let depth = q.depth.unwrap_or(1).clamp(1, 64);
    let entries = files::list(&vc.0.st.service, &vc.1, at, &q.path, depth, LIST_CAP).await?;
    Ok(Json(Value::Array(entries.iter().map(stat_body).collect())))
}

pub(super) async fn make_dir(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<MakeQuery>,
) -> Result<Response, E2bError> {
    let at = vc.volume(&volume)?;
    owner_ok(q.uid, q.gid)?;
    let svc = &vc.0.st.service;
    if q.force {
        files::mkdir(svc, &vc.1, at, &q.path, true).await?;
    } else {
        files::mkdir_new(svc, &vc.1, at, &q.path).await?;
    }
    if let Some(mode) = q.mode {
        files::set_mode(svc, &vc.1, at, &q.path, mode).await?;
    }
    let e = files::stat(svc, &vc.1, at, &q.path).await?;
    Ok((StatusCode::CREATED, Json(stat_body(&e))).into_response())
}

pub(super) async fn read(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, E2bError> {
    let at = vc.volume(&volume)?;
    let data = files::read(&vc.0.st.service, &vc.1, at, &q.path).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], data).into_response())
}

pub(super) async fn write(
    vc: VolumeCaller,
    Path(volume): Path<String>,
    Query(q): Query<MakeQuery>,
    body: Bytes,
) -> Result<Response, E2bError> {
    let at = vc.volume(&volume)?;
    owner_ok(q.uid, q.gid)?;
    let svc = &vc.0.st.service;
    files::write(svc, &vc.1, at, &q.path, body.to_vec()).await?;
    if let Some(mode) = q.mode {
        files::set_mode(svc, &vc.1, at, &q.path, mode).await?;
    }
    let e = files::stat(svc, &vc.1, at, &q.path).await?;
    Ok((StatusCode::CREATED, Json(stat_body(&e))).into_response())
}
