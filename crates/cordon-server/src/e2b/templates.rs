//! E2B's template build API, as its Template SDK speaks it: `POST /v3/templates` (a build of
//! `alias[:tag]`), `GET /templates/{id}/files/{hash}` (whether a COPY's archive is here, and a
//! presigned URL — on this server, `/e2b-template-files/{token}` — the SDK PUTs it to),
//! `POST /v2/templates/{id}/builds/{build}` (the steps), `GET …/builds/{build}/status` (status
//! and logs), `GET /templates/aliases/{alias}`, `POST|DELETE /templates/tags`,
//! `GET /templates/{id}/tags`, and the caller's built templates: `GET /templates` (also
//! `/v2/templates`) and `GET /templates/{id}` (deleting is `DELETE /templates/{id}`, in
//! `state.rs`, shared with snapshots). Translation only: the service checks, stores and builds
//! (`cordon_service::template_builds`).
//!
//! Threat model: every path segment, query and body is client input handed to the service's
//! checks. The upload route carries no API key (E2B's SDK PUTs to a presigned URL with a
//! plain HTTP client): its one-use, random, expiring token is the credential, checked by the
//! service before a byte is stored; the body is streamed, never held whole in memory.

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::control::parse;
use super::{Control, E2bError, St};
use crate::error::ApiError;
use cordon_service::template_builds::BuildSpec;

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestBuild {
    name: Option<String>,
    alias: Option<String>,
    tags: Option<Vec<String>>,
    cpu_count: Option<f64>,
    #[serde(rename = "memoryMB")]
    memory_mb: Option<u64>,
}

/// `POST /v3/templates`.
pub(super) async fn request(
    Control(e2b, caller): Control,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: RequestBuild = parse(&body)?;
    let name = req
        .name
        .or(req.alias)
        .ok_or_else(|| ApiError::bad_request("name: the template's name (alias[:tag])"))?;
    let r = e2b.st.service.template_request(
        &caller,
        &name,
        &req.tags.unwrap_or_default(),
        req.cpu_count,
        req.memory_mb,
    )?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "templateID": r.template_id,
            "buildID": r.build_id,
            "public": false,
            "names": [r.alias],
            "aliases": [r.alias],
            "tags": r.tags,
        })),
    )
        .into_response())
}

/// `GET /templates/{id}/files/{hash}`: the upload URL is this server's, from the address the
/// client used to reach it.
pub(super) async fn upload_link(
    Control(e2b, caller): Control,
    Path((id, hash)): Path<(String, String)>,
    h: HeaderMap,
) -> Result<Response, E2bError> {
    let (present, token) = e2b.st.service.template_upload_link(&caller, &id, &hash)?;
    let host = h
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .ok_or_else(|| {
            ApiError::bad_request("Host: the server's address is needed for the upload URL")
        })?;
    let scheme = if h
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
    {
        "https"
    } else {
        "http"
    };
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "present": present,
            "url": format!("{scheme}://{host}/e2b-template-files/{token}"),
        })),
    )
        .into_response())
}

/// A request body as a blocking reader, fed chunk by chunk from the connection.
struct ChanReader {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, String>>,
    cur: Bytes,
}

impl std::io::Read for ChanReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

/// `PUT /e2b-template-files/{token}`: the archive the SDK uploads to its presigned URL.
pub(super) async fn upload(
    axum::extract::State(e2b): axum::extract::State<St>,
    Path(token): Path<String>,
    body: Body,
) -> Result<StatusCode, E2bError> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let svc = e2b.st.service.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let mut r = ChanReader {
            rx,
            cur: Bytes::new(),
        };
        svc.template_upload(&token, &mut r)
    });
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let item = chunk.map_err(|e| e.to_string());
        let failed = item.is_err();
        if tx.send(item).await.is_err() || failed {
            break;
        }
    }
    drop(tx);
    writer
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(StatusCode::OK)
}

/// `POST /v2/templates/{id}/builds/{build}`.
pub(super) async fn start(
    Control(e2b, caller): Control,
    Path((id, build)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let spec: BuildSpec = parse(&body)?;
    let svc = e2b.st.service.clone();
    tokio::task::spawn_blocking(move || svc.template_build_start(&caller, &id, &build, spec))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusQuery {
    logs_offset: Option<usize>,
    limit: Option<usize>,
}

use super::rfc3339_ms;

/// `GET /templates/{id}/builds/{build}/status`.
pub(super) async fn status(
    Control(e2b, caller): Control,
    Path((id, build)): Path<(String, String)>,
    Query(q): Query<StatusQuery>,
) -> Result<Json<serde_json::Value>, E2bError> {
    let v = e2b.st.service.template_build_status(
        &caller,
        &id,
        &build,
        q.logs_offset.unwrap_or(0),
        q.limit.unwrap_or(100).clamp(1, 100),
    )?;
    let entries: Vec<_> = v
        .logs
        .iter()
        .map(
            |l| json!({"timestamp": rfc3339_ms(l.unix_ms), "level": l.level, "message": l.message}),
        )
        .collect();
    let mut body = json!({
        "templateID": v.template_id,
        "buildID": v.build_id,
        "status": v.status.as_str(),
        "logs": v.logs.iter().map(|l| l.message.clone()).collect::<Vec<_>>(),
        "logEntries": entries,
    });
    if let Some(r) = v.reason {
        body["reason"] = json!({"message": r});
    }
    Ok(Json(body))
}

/// `GET /templates/aliases/{alias}`.
pub(super) async fn alias(
    Control(e2b, caller): Control,
    Path(alias): Path<String>,
) -> Result<Json<serde_json::Value>, E2bError> {
    let id = e2b
        .st
        .service
        .template_alias(&caller, &alias)
        .ok_or_else(|| ApiError::not_found(format!("template alias '{alias}' not found")))?;
    let public = e2b.st.service.config().templates.get(&alias).is_some();
    Ok(Json(json!({"templateID": id, "public": public})))
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct AssignTags {
    target: String,
    tags: Vec<String>,
}

/// `POST /templates/tags`.
pub(super) async fn assign_tags(
    Control(e2b, caller): Control,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: AssignTags = parse(&body)?;
    let (build, tags) = e2b
        .st
        .service
        .template_assign_tags(&caller, &req.target, &req.tags)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"buildID": build, "tags": tags})),
    )
        .into_response())
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RemoveTags {
    name: String,
    tags: Vec<String>,
}

/// `DELETE /templates/tags`.
pub(super) async fn remove_tags(
    Control(e2b, caller): Control,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let req: RemoveTags = parse(&body)?;
    e2b.st
        .service
        .template_remove_tags(&caller, &req.name, &req.tags)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /templates/{id}/tags`.
pub(super) async fn tags(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, E2bError> {
    let t = e2b.st.service.template_tags(&caller, &id)?;
    Ok(Json(json!(t
        .iter()
        .map(
            |t| json!({"tag": t.tag, "buildID": t.build_id, "createdAt": rfc3339_ms(t.created_ms)})
        )
        .collect::<Vec<_>>())))
}

/// A built template in E2B's `Template` shape.
fn template_body(t: &cordon_service::template_builds::TemplateView) -> serde_json::Value {
    json!({
        "templateID": t.template_id,
        "buildID": t.build_id,
        "cpuCount": t.cpus.map(|c| c.ceil() as u64).unwrap_or(DEFAULT_CPUS),
        "memoryMB": t.memory_mb.unwrap_or(cordon_service::templates::BUILTIN_MEMORY >> 20),
        "diskSizeMB": t.disk_mb,
        "public": false,
        "aliases": [t.alias],
        "names": [t.alias],
        "createdAt": rfc3339_ms(t.created_ms),
        "updatedAt": rfc3339_ms(t.updated_ms),
        "createdBy": null,
        "lastSpawnedAt": t.last_spawn_ms.map(rfc3339_ms),
        "spawnCount": t.spawns,
        "buildCount": t.build_count,
        "envdVersion": super::ENVD_VERSION,
        "buildStatus": t.build_status.as_str(),
    })
}

/// CPUs a template that names none gets (the default profile's).
const DEFAULT_CPUS: u64 = 1;

/// `GET /templates` (and `GET /v2/templates`): the caller's built templates. The server's own
/// (`cordon serve --templates`) are public ones, which E2B's listing leaves out too.
pub(super) async fn list(
    Control(e2b, caller): Control,
) -> Result<Json<serde_json::Value>, E2bError> {
    let list = e2b.st.service.template_list(&caller)?;
    Ok(Json(serde_json::Value::Array(
        list.iter().map(template_body).collect(),
    )))
}

/// `GET /templates/{id}`: one built template and its builds, newest first.
pub(super) async fn get(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, E2bError> {
    let (t, builds) = e2b.st.service.template_get(&caller, &id)?;
    let cpus = t.cpus.map(|c| c.ceil() as u64).unwrap_or(DEFAULT_CPUS);
    let memory = t
        .memory_mb
        .unwrap_or(cordon_service::templates::BUILTIN_MEMORY >> 20);
    Ok(Json(json!({
        "templateID": t.template_id,
        "public": false,
        "aliases": [t.alias],
        "names": [t.alias],
        "createdAt": rfc3339_ms(t.created_ms),
        "updatedAt": rfc3339_ms(t.updated_ms),
        "lastSpawnedAt": t.last_spawn_ms.map(rfc3339_ms),
        "spawnCount": t.spawns,
        "builds": builds.iter().map(|b| json!({
            "buildID": b.build_id,
            "status": b.status.as_str(),
            "createdAt": rfc3339_ms(b.created_ms),
            "updatedAt": rfc3339_ms(b.finished_ms.unwrap_or(b.created_ms)),
            "finishedAt": b.finished_ms.map(rfc3339_ms),
            "cpuCount": cpus,
            "memoryMB": memory,
            "diskSizeMB": t.disk_mb,
            "envdVersion": super::ENVD_VERSION,
        })).collect::<Vec<_>>(),
    })))
}
