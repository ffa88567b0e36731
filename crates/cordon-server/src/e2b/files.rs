//! envd's plain-HTTP `/files`: downloads (optionally gzip) and uploads (multipart or raw
//! octet-stream) of a sandbox's files.
//!
//! Threat model: the query's path and the upload's bytes are client input: uploads are read
//! up to the server's limit only, and the service confines the path to the sandbox.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use cordon_service::files::{self};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{check_user, sandbox_path, E2bError, St};
use crate::error::ApiError;
use cordon_service::Caller;
#[derive(Deserialize)]
pub(super) struct FilesQuery {
    path: Option<String>,
    username: Option<String>,
    /// A signed URL's (`download_url`, `upload_url`): it stands for the access token.
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

/// Whose sandbox a `/files` request is for: the `E2b-Sandbox-Id` header and access token, or,
/// on a signed URL that carries no token, the signature (see `E2b::signed`).
fn files_caller(
    e2b: &St,
    h: &HeaderMap,
    q: &FilesQuery,
    operation: &str,
) -> Result<(Caller, String), ApiError> {
    let has_token = ["x-access-token", "e2b-traffic-access-token"]
        .iter()
        .any(|n| h.contains_key(*n));
    let Some(sig) = q.signature.as_deref().filter(|_| !has_token) else {
        return e2b.sandbox(h);
    };
    let path = q.path.as_deref().unwrap_or("");
    let (caller, id) = e2b.signed(
        path,
        operation,
        q.username.as_deref(),
        sig,
        q.signature_expiration,
    )?;
    let named = h.get("e2b-sandbox-id").and_then(|v| v.to_str().ok());
    if named.is_some_and(|n| n.trim() != id) {
        return Err(ApiError::unauthorized("invalid signature"));
    }
    Ok((caller, id))
}

pub(super) async fn download(
    State(e2b): State<St>,
    h: HeaderMap,
    Query(q): Query<FilesQuery>,
) -> Result<Response, E2bError> {
    let (caller, id) = files_caller(&e2b, &h, &q, "read")?;
    check_user(&h, q.username.as_deref())?;
    let path = sandbox_path(
        q.path
            .as_deref()
            .ok_or_else(|| ApiError::bad_request("path: required"))?,
    )?;
    let data = files::read(&e2b.st.service, &caller, &id, &path).await?;
    if super::gzip::accepts_gzip(&h) {
        let packed = tokio::task::spawn_blocking(move || super::gzip::gzip(&data))
            .await
            .map_err(|_| ApiError::internal("gzip task"))??;
        return Ok((
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            Body::from(packed),
        )
            .into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::VARY, "accept-encoding"),
        ],
        Body::from(data),
    )
        .into_response())
}

fn written(path: &str, metadata: &BTreeMap<String, String>) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut v = json!({"name": name, "type": "file", "path": path});
    if let (false, Some(o)) = (metadata.is_empty(), v.as_object_mut()) {
        o.insert("metadata".into(), json!(metadata));
    }
    v
}

/// The upload's `X-Metadata-<key>: value` headers (E2B's file metadata), keys lowercased as
/// envd does; checked by the service.
fn upload_metadata(h: &HeaderMap) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    for (name, value) in h {
        let Some(key) = name.as_str().strip_prefix("x-metadata-") else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            ApiError::bad_request(format!(
                "metadata value of {key:?}: printable US-ASCII only"
            ))
        })?;
        out.insert(key.to_string(), value.to_string());
    }
    Ok(out)
}

pub(super) async fn upload(
    State(e2b): State<St>,
    Query(q): Query<FilesQuery>,
    req: Request,
) -> Result<Response, E2bError> {
    let h = req.headers().clone();
    let (caller, id) = files_caller(&e2b, &h, &q, "write")?;
    check_user(&h, q.username.as_deref())?;
    let metadata = upload_metadata(&h)?;
    files::check_metadata(&metadata)?;
    let ct = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let max = e2b.st.service.config().max_upload as usize;
    let too_large = || ApiError::too_large("the upload", max as u64);
    let req = if super::gzip::upload_is_gzip(&h)? {
        // The body limit held for the packed bytes; the unpacked ones get the same cap.
        let (mut parts, body) = req.into_parts();
        let packed = axum::body::to_bytes(body, max)
            .await
            .map_err(|_| too_large())?;
        let unpacked = tokio::task::spawn_blocking(move || super::gzip::gunzip(&packed, max))
            .await
            .map_err(|_| ApiError::internal("gunzip task"))??;
        parts.headers.remove(header::CONTENT_ENCODING);
        parts.headers.remove(header::CONTENT_LENGTH);
        Request::from_parts(parts, Body::from(unpacked))
    } else {
        req
    };
    // Each file of the upload: written with the upload's metadata, and described.
    let put = |path: String, data: Vec<u8>| {
        let (svc, caller, id, metadata) = (&e2b.st.service, &caller, &id, &metadata);
        async move {
            files::write_with_metadata(svc, caller, id, &path, data, metadata.clone()).await?;
            Ok::<Value, E2bError>(written(&path, metadata))
        }
    };
    let mut out = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart body: {e}")))?;
        while let Some(field) = mp
            .next_field()
            .await
            .map_err(|e| ApiError::bad_request(format!("multipart body: {e}")))?
        {
            if field.name() != Some("file") {
                continue;
            }
            let dest = match (&q.path, field.file_name()) {
                (Some(p), _) => p.clone(),
                (None, Some(f)) => f.to_string(),
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "each file part needs a filename (its path) or ?path=",
                    )
                    .into())
                }
            };
            let path = sandbox_path(&dest)?;
            let data = field.bytes().await.map_err(|e| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    too_large()
                } else {
                    ApiError::bad_request(format!("multipart body: {e}"))
                }
            })?;
            out.push(put(path, data.to_vec()).await?);
        }
        if out.is_empty() {
            return Err(ApiError::bad_request("no part named 'file' in the upload").into());
        }
    } else {
        let path =
            sandbox_path(q.path.as_deref().ok_or_else(|| {
                ApiError::bad_request("path: required for an octet-stream upload")
            })?)?;
        let data = axum::body::to_bytes(req.into_body(), max)
            .await
            .map_err(|_| too_large())?;
        out.push(put(path, data.to_vec()).await?);
    }
    Ok(axum::Json(out).into_response())
}
