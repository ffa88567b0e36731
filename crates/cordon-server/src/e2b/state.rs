//! E2B's state that outlives a sandbox, over the service's snapshots, forks and volumes:
//! `create_snapshot` (`POST /sandboxes/{id}/snapshots`), `list_snapshots` (`GET /snapshots`),
//! `delete_snapshot` (`DELETE /templates/{id}`: E2B's snapshots are templates), `fork`
//! (`POST /sandboxes/{id}/fork`) and the `Volume` control API (`/volumes`). A snapshot's E2B
//! id is its cordon name, and so is a volume's. Translation only: the service validates,
//! scopes to the caller's key and stores.
//!
//! Threat model: names and bodies are client input, passed to the service's validation
//! (names of a small alphabet, one path component); nothing here touches a file.
//! E2B promises memory in snapshots and forks; this host carries files only, so every answer
//! names what it did not carry (`notCarried`) and an explicit request for memory is refused.

use axum::body::Bytes;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::control::{parse, sandbox_body, seconds};
use super::{Control, E2bError, St};
use crate::error::ApiError;
use cordon_service::snapshots::{CreateSnapshot, ForkRequest, SnapshotInfo};
use cordon_service::volumes::{CreateVolume, VolumeInfo};
use cordon_service::Caller;

/// `create_snapshot`'s body.
#[derive(Debug, Deserialize, Default)]
struct SnapshotRequest {
    name: Option<String>,
    /// `mode="full"` (true) asks for memory, which this host does not snapshot.
    memory: Option<bool>,
}

/// `fork`'s body.
#[derive(Debug, Deserialize, Default)]
struct ForkBody {
    timeout: Option<f64>,
    count: Option<u32>,
}

/// `list_snapshots`'s query.
#[derive(Debug, Deserialize, Default)]
pub(super) struct SnapshotQuery {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
struct NewVolume {
    name: String,
}

const NO_MEMORY: &str = "memory snapshots are not supported by this server: it carries the sandbox's files only (/workspace, the home, /tmp), not memory or processes; use mode='filesystem'";

fn snapshot_body(s: &SnapshotInfo) -> Value {
    json!({
        "snapshotID": s.name,
        "names": [s.name],
        "sandboxID": s.sandbox,
        "notCarried": s.not_carried,
    })
}

/// A name for a snapshot the SDK asked for without one: the sandbox's id and the time, in
/// the service's alphabet.
fn generated_name(sandbox: &str) -> String {
    let id: String = sandbox
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .map(|c| c.to_ascii_lowercase())
        .take(40)
        .collect();
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{id}-{ms}")
}

/// Whether the caller has a snapshot of that name (a create naming it as its template starts
/// from it).
pub(super) async fn is_snapshot(e2b: &St, caller: &Caller, name: &str) -> Result<bool, E2bError> {
    Ok(e2b
        .st
        .service
        .list_snapshots(caller)
        .await?
        .snapshots
        .iter()
        .any(|s| s.name == name))
}

pub(super) async fn create_snapshot(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: SnapshotRequest = parse(&body)?;
    if req.memory == Some(true) {
        return Err(ApiError::bad_request(NO_MEMORY).into());
    }
    let name = req
        .name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| generated_name(&id));
    let info = e2b
        .st
        .service
        .create_snapshot(&caller, &id, CreateSnapshot { name })
        .await?;
    Ok((StatusCode::CREATED, Json(snapshot_body(&info))).into_response())
}

pub(super) async fn list_snapshots(
    Control(e2b, caller): Control,
    Query(q): Query<SnapshotQuery>,
) -> Result<Json<Value>, E2bError> {
    let list = e2b.st.service.list_snapshots(&caller).await?;
    let out: Vec<Value> = list
        .snapshots
        .iter()
        .filter(|s| q.sandbox_id.as_ref().is_none_or(|id| &s.sandbox == id))
        .filter(|s| q.name.as_ref().is_none_or(|n| &s.name == n))
        .map(snapshot_body)
        .collect();
    Ok(Json(Value::Array(out)))
}

/// `delete_snapshot`: E2B deletes a snapshot as a template; the only templates one can delete
/// here are snapshots.
pub(super) async fn delete_template(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    // A template built through the Template SDK, else a snapshot (E2B's are templates too).
    if e2b.st.service.template_delete(&caller, &id)? {
        return Ok(StatusCode::NO_CONTENT);
    }
    e2b.st.service.delete_snapshot(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn fork(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: ForkBody = parse(&body)?;
    let ttl = req.timeout.map(|t| seconds(t, "timeout")).transpose()?;
    // The parent must be live (E2B answers 404 for an ended one), and its door gives the
    // forks their template.
    e2b.st.service.get_live(&caller, &id)?;
    let template = e2b.door(&caller, &id, None)?.template;
    let result = e2b
        .st
        .service
        .fork(
            &caller,
            &id,
            ForkRequest {
                count: req.count,
                ttl,
                metadata: None,
            },
        )
        .await?;
    let mut out = Vec::with_capacity(result.sandboxes.len());
    for sbx in &result.sandboxes {
        let door = e2b.door(&caller, &sbx.id, Some(&template))?;
        let mut body = sandbox_body(&e2b, &caller, &sbx.id, &template, &door.token);
        body["notCarried"] = json!(result.not_carried);
        out.push(json!({ "sandbox": body }));
    }
    Ok((StatusCode::CREATED, Json(Value::Array(out))).into_response())
}

/// A volume with the token that opens its files through the volume content API
/// (`volume_content.rs`; the SDK sends it to `E2B_VOLUME_API_URL`).
fn volume_body(e2b: &St, caller: &Caller, v: &VolumeInfo) -> Result<Value, E2bError> {
    let token = e2b.st.service.volume_token(caller, &v.name)?;
    Ok(json!({"volumeID": v.name, "name": v.name, "token": token, "domain": null}))
}

pub(super) async fn create_volume(
    Control(e2b, caller): Control,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: NewVolume = parse(&body)?;
    let info = e2b
        .st
        .service
        .create_volume(
            &caller,
            CreateVolume {
                name: req.name,
                size: None,
            },
        )
        .await?;
    let body = volume_body(&e2b, &caller, &info)?;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub(super) async fn list_volumes(Control(e2b, caller): Control) -> Result<Json<Value>, E2bError> {
    let list = e2b.st.service.list_volumes(&caller).await?;
    Ok(Json(Value::Array(
        list.volumes
            .iter()
            .map(|v| json!({"volumeID": v.name, "name": v.name}))
            .collect(),
    )))
}

pub(super) async fn get_volume(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    let info = e2b.st.service.get_volume(&caller, &id).await?;
    Ok(Json(volume_body(&e2b, &caller, &info)?))
}

/// Refused with 409 while a running sandbox mounts it.
pub(super) async fn delete_volume(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    e2b.st.service.delete_volume(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
