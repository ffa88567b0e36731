//! Images: `GET /images/json`, `POST /images/create` (pull, its progress streamed as
//! Docker's JSON lines), `GET /images/{name}/json`, `DELETE /images/{name}`, `POST
//! /images/load` (a `docker save` archive imported; `save` itself is answered 501) — over the
//! node's image store through the service. An image's id is its manifest digest (what the store
//! finds it by, as a whole or as a prefix).
//!
//! Threat model: names and queries are hostile; the service validates references and the
//! registries the server may pull from (`--pull-from`, `--insecure-registry`). A loaded
//! archive is hostile: capped in size, unpacked by the store within its limits, and refused
//! altogether on a server that names its registries.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Json;
use cordon_service::{PullEvent, PullRequest};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{DResult, DockerError, St};

/// `docker.io/library/python:3` as Docker shows it: `python:3`.
pub(crate) fn short_name(n: &str) -> String {
    n.strip_prefix("docker.io/library/")
        .or_else(|| n.strip_prefix("docker.io/"))
        .unwrap_or(n)
        .to_string()
}

fn unix_time(rfc3339: Option<&str>) -> i64 {
    rfc3339
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| t.timestamp())
}

fn tags_and_digests(v: &cordon_service::ImageView) -> (Vec<String>, Vec<String>) {
    let tags: Vec<String> = v
        .names
        .iter()
        .filter(|n| !n.contains('@'))
        .map(|n| short_name(n))
        .collect();
    let mut digests: Vec<String> = v
        .names
        .iter()
        .map(|n| {
            let repo = match n.split_once('@') {
                Some((r, _)) => r.to_string(),
                None => match n.rfind(':') {
                    Some(i) if !n[i..].contains('/') => n[..i].to_string(),
                    _ => n.clone(),
                },
            };
            format!("{}@{}", short_name(&repo), v.digest)
        })
        .collect();
    digests.dedup();
    (tags, digests)
}

pub(crate) async fn list(State(d): State<St>, headers: HeaderMap) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let list = d.st.service.list_images(&caller).await?;
    let out: Vec<Value> = list
        .images
        .iter()
        .map(|v| {
            let (tags, digests) = tags_and_digests(v);
            json!({
                "Id": v.digest,
                "ParentId": "",
                "RepoTags": tags,
                "RepoDigests": digests,
                "Created": unix_time(v.created.as_deref()),
                "Size": v.unpacked_bytes,
                "VirtualSize": v.unpacked_bytes,
                "SharedSize": -1,
                "Labels": {},
                "Containers": -1,
            })
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

pub(crate) async fn inspect(
    State(d): State<St>,
    Path(rest): Path<String>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    if rest.ends_with("/get") {
        return Err(save_unsupported());
    }
    let Some(name) = rest.strip_suffix("/json") else {
        return Err(DockerError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("GET /images/{rest}: not supported by cordon's Docker API (inspect is /images/NAME/json)"),
        ));
    };
    let i =
        d.st.service
            .inspect_image(&caller, name)
            .await
            .map_err(|e| match e.kind {
                cordon_service::error::ErrorKind::NotFound => DockerError::no_image(name),
                _ => e.into(),
            })?;
    let (tags, digests) = tags_and_digests(&i.image);
    let ports: serde_json::Map<String, Value> = i
        .exposed_ports
        .iter()
        .map(|p| (p.clone(), json!({})))
        .collect();
    let mut body = json!({
        "Id": i.image.digest,
        "RepoTags": tags,
        "RepoDigests": digests,
        "Parent": "",
        "Comment": "",
        "Created": i.image.created.clone().unwrap_or_default(),
        "Config": {
            "Env": i.env,
            "Cmd": i.cmd,
            "Entrypoint": if i.entrypoint.is_empty() { Value::Null } else { json!(i.entrypoint) },
            "WorkingDir": i.working_dir.clone().unwrap_or_default(),
            "User": i.user.clone().unwrap_or_default(),
            "Labels": i.labels,
            "ExposedPorts": if ports.is_empty() { Value::Null } else { Value::Object(ports) },
        },
        "Architecture": i.architecture,
        "Os": i.os,
        "Size": i.image.unpacked_bytes,
        "VirtualSize": i.image.unpacked_bytes,
        "RootFS": {"Type": "layers", "Layers": []},
        "Metadata": {"LastTagTime": ""},
    });
    // An image this door committed: the container, parent, comment and author, as Docker's.
    for (k, v) in super::commit::inspect_fields(&d, &i.image.digest) {
        body[k] = v;
    }
    Ok(Json(body))
}

/// `docker save` (`GET /images/{name}/get`, `GET /images/get`): the store keeps each layer
/// unpacked, not the layer blobs an archive is made of, so there is nothing to save from.
fn save_unsupported() -> DockerError {
    DockerError::new(
        StatusCode::NOT_IMPLEMENTED,
        "save: not supported by cordon's Docker API: the image store keeps layers unpacked, \
         not the blobs an archive holds (push the image to a registry instead)",
    )
}

pub(crate) async fn save_many(State(d): State<St>, headers: HeaderMap) -> DResult<Response> {
    d.caller(&headers)?;
    Err(save_unsupported())
}

/// `POST /images/load`: a `docker save` archive (or an oci-archive) in the body, streamed
/// to the store's scratch (at most [`MAX_LOAD`] bytes) and imported; Docker's answer, a
/// `{"stream": "Loaded image: NAME\n"}` line per name (by id when it has none).
pub(crate) async fn load(State(d): State<St>, req: axum::extract::Request) -> DResult<Response> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let caller = d.caller(req.headers())?;
    let svc = &d.st.service;
    svc.may_load(&caller)?;
    let path = svc.load_staging()?;
    let written = async {
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| e.to_string())?;
        let mut body = req.into_body().into_data_stream();
        let mut total = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            total += chunk.len() as u64;
            if total > MAX_LOAD {
                return Err(format!("the archive is larger than {} GiB", MAX_LOAD >> 30));
            }
            file.write_all(&chunk).await.map_err(|e| e.to_string())?;
        }
        file.flush().await.map_err(|e| e.to_string())
    }
    .await;
    let loaded = match written {
        Ok(()) => svc
            .load_image(&caller, &path)
            .await
            .map_err(DockerError::from),
        Err(e) => Err(DockerError::bad(format!("load: {e}"))),
    };
    let _ = tokio::fs::remove_file(&path).await;
    let mut out = Vec::new();
    for v in loaded? {
        let (tags, _) = tags_and_digests(&v);
        if tags.is_empty() {
            out.extend(line(
                json!({"stream": format!("Loaded image ID: {}\n", v.digest)}),
            ));
        }
        for t in tags {
            out.extend(line(json!({"stream": format!("Loaded image: {t}\n")})));
        }
    }
    let mut r = Response::new(Body::from(out));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// The largest archive `load` takes.
const MAX_LOAD: u64 = 8 << 30;

pub(crate) async fn remove(
    State(d): State<St>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let r =
        d.st.service
            .remove_image(&caller, &name)
            .await
            .map_err(|e| match e.kind {
                cordon_service::error::ErrorKind::NotFound => DockerError::no_image(&name),
                _ => e.into(),
            })?;
    let mut out: Vec<Value> = r
        .untagged
        .iter()
        .map(|u| json!({"Untagged": short_name(u)}))
        .collect();
    out.extend(r.deleted.iter().map(|d| json!({"Deleted": d})));
    Ok(Json(Value::Array(out)))
}

fn line(v: Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(&v).unwrap_or_default();
    b.push(b'\r');
    b.push(b'\n');
    b
}

fn short(digest: &str) -> String {
    digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .chars()
        .take(12)
        .collect()
}

fn progress_line(ev: &PullEvent) -> Value {
    match ev {
        PullEvent::Resolved {
            reference,
            digest,
            layers,
        } => json!({
            "status": format!("Pulling {reference} ({layers} layers, {digest})")
        }),
        PullEvent::LayerCached { digest } => {
            json!({"status": "Already exists", "id": short(digest)})
        }
        PullEvent::LayerStart { digest, .. } => {
            json!({"status": "Pulling fs layer", "id": short(digest)})
        }
        PullEvent::LayerProgress {
            digest,
            bytes,
            size,
        } => json!({
            "status": "Downloading", "id": short(digest),
            "progressDetail": {"current": bytes, "total": size}
        }),
        PullEvent::LayerUnpacking { digest } => {
            json!({"status": "Extracting", "id": short(digest)})
        }
        PullEvent::LayerDone { digest } => json!({"status": "Pull complete", "id": short(digest)}),
        PullEvent::Retry { digest, from, .. } => json!({
            "status": format!("Retrying from byte {from}"), "id": short(digest)
        }),
    }
}

/// `POST /images/create?fromImage=NAME&tag=TAG`: a pull, its progress as JSON lines and its
/// failure as a last `{"error": …}` line (the status is sent before the pull's end).
pub(crate) async fn pull(
    State(d): State<St>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> DResult<Response> {
    let caller = d.caller(&headers)?;
    let Some(from) = q.get("fromImage").filter(|f| !f.is_empty()) else {
        return Err(DockerError::bad(
            "fromImage: give the image to pull (importing with fromSrc is not supported)",
        ));
    };
    let reference = match q.get("tag").map(String::as_str) {
        None | Some("") => from.clone(),
        Some(t) if t.starts_with("sha256:") => format!("{from}@{t}"),
        Some(t) => format!("{from}:{t}"),
    };
    let req = PullRequest {
        reference: reference.clone(),
        platform: q.get("platform").filter(|p| !p.is_empty()).cloned(),
    };
    cordon_service::validate_pull(&req)?;
    let (tx, mut rx) = mpsc::channel::<PullEvent>(64);
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(64);
    let svc = d.st.service.clone();
    tokio::spawn(async move {
        let fwd = out_tx.clone();
        let relay = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let _ = fwd.send(line(progress_line(&ev))).await;
            }
        });
        let result = svc.pull_image(&caller, req, Some(tx)).await;
        let _ = relay.await;
        let last = match result {
            Ok(r) => vec![
                json!({"status": format!("Digest: {}", r.image.digest)}),
                json!({"status": format!("Status: Downloaded newer image for {}", short_name(&r.reference))}),
            ],
            Err(e) => vec![json!({"errorDetail": {"message": e.message}, "error": e.message})],
        };
        for v in last {
            let _ = out_tx.send(line(v)).await;
        }
    });
    let stream = futures::stream::unfold(out_rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, std::io::Error>(c), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}
