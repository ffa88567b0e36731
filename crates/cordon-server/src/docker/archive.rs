//! `PUT`, `GET` and `HEAD /containers/{id}/archive?path=…`: a tar into a directory of the
//! container, a path of it out as a tar, and its stat (Docker's
//! `X-Docker-Container-Path-Stat` header) — through the service's archive operations.
//!
//! Threat model: the tar is hostile (absolute names, `..`, links out); the service folds names
//! under the destination, writes only inside the sandbox's root as its user, and refuses
//! link and device entries before writing anything.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use cordon_service::files::{Entry, EntryType};
use serde_json::json;

use super::{DResult, DockerError, Found, St};

fn path_of(q: &HashMap<String, String>) -> DResult<String> {
    q.get("path")
        .filter(|p| !p.is_empty())
        .cloned()
        .ok_or_else(|| DockerError::bad("path: give a path inside the container"))
}

fn not_found(e: cordon_service::error::ServiceError, path: &str) -> DockerError {
    if e.kind == cordon_service::error::ErrorKind::NotFound {
        DockerError::new(
            StatusCode::NOT_FOUND,
            format!("Could not find the file {path} in container"),
        )
    } else {
        e.into()
    }
}

fn stat_header(e: &Entry) -> HeaderValue {
    // Go's FileMode: the type in the high bits.
    let kind: u64 = match e.r#type {
        EntryType::Dir => 1 << 31,
        EntryType::Symlink => 1 << 27,
        _ => 0,
    };
    let stat = json!({
        "name": e.name,
        "size": e.size,
        "mode": kind | e.mode as u64,
        "mtime": chrono::DateTime::from_timestamp(e.modified as i64, 0)
            .map(|t| t.to_rfc3339())
            .unwrap_or_default(),
        "linkTarget": e.target.clone().unwrap_or_default(),
    });
    let b64 = base64::engine::general_purpose::STANDARD.encode(stat.to_string());
    HeaderValue::from_str(&b64).unwrap_or(HeaderValue::from_static(""))
}

pub(crate) async fn put_archive(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> DResult<Response> {
    let path = path_of(&q)?;
    cordon_service::archive::put_archive(&d.st.service, &c.caller, &c.id, &path, body.to_vec())
        .await
        .map_err(|e| not_found(e, &path))?;
    Ok(StatusCode::OK.into_response())
}

pub(crate) async fn get_archive(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let path = path_of(&q)?;
    let (tar, entry) = cordon_service::archive::get_archive(&d.st.service, &c.caller, &c.id, &path)
        .await
        .map_err(|e| not_found(e, &path))?;
    let mut r = Response::new(Body::from(tar));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    r.headers_mut()
        .insert("X-Docker-Container-Path-Stat", stat_header(&entry));
    Ok(r)
}

pub(crate) async fn stat_archive(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let path = path_of(&q)?;
    let entry = cordon_service::files::stat(&d.st.service, &c.caller, c.id.as_str(), &path)
        .await
        .map_err(|e| not_found(e, &path))?;
    let mut r = StatusCode::OK.into_response();
    r.headers_mut()
        .insert("X-Docker-Container-Path-Stat", stat_header(&entry));
    Ok(r)
}
