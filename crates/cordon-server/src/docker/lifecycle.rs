//! The container verbs docker-py users call beside run and exec, each thin over what the
//! service already does: `restart` (stop, then the command again in the same sandbox),
//! `pause`/`unpause` (the service's freeze: the cgroup freezer, or SIGSTOP where the server may
//! create no freezer cgroup), `rename`, `containers/prune` (the caller's stopped containers
//! removed), `images/prune` (images no name and no container uses), and `update`, answered
//! 501: the service cannot change a live sandbox's limits.
//!
//! Threat model: the client is hostile. Nothing here widens a sandbox: pause and restart act
//! on the caller's own containers through the service as any other verb does; a new name is
//! checked as a create's is and taken under the containers' lock (two renames cannot both
//! win one name); prune removes only the caller's containers that are not running, and
//! refuses filters it does not understand rather than removing more than was asked.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::containers::{self, Container};
use super::{DResult, DockerError, Found, St};

fn not_running(c: &Container) -> DockerError {
    DockerError::new(
        StatusCode::CONFLICT,
        format!("Container {} is not running", c.id),
    )
}

/// `POST /containers/{id}/restart?t=`: the main process stopped (SIGTERM, SIGKILL after
/// `t` seconds) and started again in the same sandbox, its files and log kept, as Docker's
/// restart keeps the container's.
pub(crate) async fn restart(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    containers::stop_main(&d, &c, containers::grace_of(&q)).await;
    containers::start(State(d), Found(c)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /containers/{id}/pause`: every process of the container frozen.
pub(crate) async fn pause(State(d): State<St>, Found(c): Found) -> DResult<Response> {
    if !c.running() {
        return Err(not_running(&c));
    }
    if containers::paused(&d, &c) {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is already paused", c.id),
        ));
    }
    d.st.service.pause(&c.caller, &c.id, true).await?;
    c.bump();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /containers/{id}/unpause`.
pub(crate) async fn unpause(State(d): State<St>, Found(c): Found) -> DResult<Response> {
    if !containers::paused(&d, &c) {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is not paused", c.id),
        ));
    }
    d.st.service.resume(&c.caller, &c.id).await?;
    c.bump();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /containers/{id}/rename?name=`.
pub(crate) async fn rename(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let name = q
        .get("name")
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_default();
    if name.is_empty() {
        return Err(DockerError::bad("name: give the container's new name"));
    }
    containers::check_name(&name)?;
    let map = d
        .containers
        .lock()
        .map_err(|_| DockerError::new(StatusCode::INTERNAL_SERVER_ERROR, "lock"))?;
    if map.values().any(|o| o.id != c.id && o.name() == name) {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Conflict. The container name \"/{name}\" is already in use"),
        ));
    }
    if let Ok(mut n) = c.name.lock() {
        *n = name;
    }
    drop(map);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The `label` filters of a prune (`key`, `key=value`, and `label!` for their negation);
/// any other filter is refused, so that a prune never removes more than was asked.
fn prune_filters(q: &HashMap<String, String>) -> DResult<Vec<(bool, String)>> {
    let filters: HashMap<String, Value> = match q.get("filters") {
        Some(f) if !f.is_empty() => serde_json::from_str(f)
            .map_err(|e| DockerError::bad(format!("filters: not JSON: {e}")))?,
        _ => HashMap::new(),
    };
    let mut out = Vec::new();
    for (key, v) in filters {
        let keep = match key.as_str() {
            "label" => true,
            "label!" => false,
            other => {
                return Err(DockerError::bad(format!(
                    "filters: '{other}' is not supported by cordon's prune (label and label! are)"
                )))
            }
        };
        let values: Vec<String> = match v {
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect(),
            Value::Object(o) => o.keys().cloned().collect(),
            _ => Vec::new(),
        };
        out.extend(values.into_iter().map(|l| (keep, l)));
    }
    Ok(out)
}

fn labels_match(c: &Container, filters: &[(bool, String)]) -> bool {
    filters.iter().all(|(keep, l)| {
        let has = match l.split_once('=') {
            Some((k, v)) => c.labels.get(k).is_some_and(|x| x == v),
            None => c.labels.contains_key(l),
        };
        has == *keep
    })
}

/// `POST /containers/prune`: the caller's containers that are not running, removed; what
/// their sandboxes' scratch held is the space reclaimed.
pub(crate) async fn prune_containers(
    State(d): State<St>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let filters = prune_filters(&q)?;
    let doomed: Vec<Arc<Container>> = d
        .containers
        .lock()
        .map(|m| m.values().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.caller.key_id == caller.key_id && !c.running() && labels_match(c, &filters))
        .collect();
    let mut deleted = Vec::new();
    let mut space = 0u64;
    for c in doomed {
        space +=
            d.st.service
                .sandbox_metrics(&c.caller, &c.id)
                .await
                .map_or(0, |m| m.disk_used);
        containers::remove_container(&d, &c).await;
        deleted.push(c.id.clone());
    }
    Ok(Json(
        json!({"ContainersDeleted": deleted, "SpaceReclaimed": space}),
    ))
}

/// `POST /images/prune`: images of the store that no name and no container refers to
/// (Docker's dangling images); with `dangling=false`, also named ones no container uses.
pub(crate) async fn prune_images(
    State(d): State<St>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let filters: HashMap<String, Value> = match q.get("filters") {
        Some(f) if !f.is_empty() => serde_json::from_str(f)
            .map_err(|e| DockerError::bad(format!("filters: not JSON: {e}")))?,
        _ => HashMap::new(),
    };
    let mut dangling_only = true;
    for (key, v) in &filters {
        let words: Vec<String> = match v {
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), String::from))
                .collect(),
            Value::Object(o) => o.keys().cloned().collect(),
            other => vec![other.to_string()],
        };
        match (key.as_str(), words.as_slice()) {
            ("dangling", [w]) if matches!(w.as_str(), "true" | "1") => dangling_only = true,
            ("dangling", [w]) if matches!(w.as_str(), "false" | "0") => dangling_only = false,
            (other, _) => {
                return Err(DockerError::bad(format!(
                    "filters: '{other}' {v} is not supported by cordon's image prune (dangling=true|false is)"
                )))
            }
        }
    }
    let used: Vec<String> = d
        .containers
        .lock()
        .map(|m| m.values().map(|c| c.image_id.clone()).collect())
        .unwrap_or_default();
    let svc = &d.st.service;
    let mut deleted = Vec::new();
    let mut space = 0u64;
    for img in svc.list_images(&caller).await?.images {
        if used.contains(&img.digest) || (dangling_only && !img.names.is_empty()) {
            continue;
        }
        if let Ok(r) = svc.remove_image(&caller, &img.digest).await {
            space += img.unpacked_bytes;
            deleted.extend(r.untagged.into_iter().map(|u| json!({"Untagged": u})));
            deleted.extend(r.deleted.into_iter().map(|x| json!({"Deleted": x})));
        }
    }
    Ok(Json(
        json!({"ImagesDeleted": deleted, "SpaceReclaimed": space}),
    ))
}

/// `POST /containers/{id}/update`: 501 — a sandbox's limits are fixed when it is made.
pub(crate) async fn update(Found(c): Found) -> DResult<Response> {
    Err(DockerError::new(
        StatusCode::NOT_IMPLEMENTED,
        format!(
            "update: cordon does not change a container's limits or restart policy once it \
             is created (container {}); create a new one with the limits wanted",
            c.id
        ),
    ))
}
