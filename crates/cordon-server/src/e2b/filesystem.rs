//! envd's `filesystem.Filesystem` Connect service: stat, list, mkdir, move, remove and
//! directory watchers (polled, streamed or kept for the client to fetch).
//!
//! Threat model: paths come from the client; the service confines every one to what the
//! sandbox may touch, and listings are bounded in depth and size.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use cordon_service::files::{self, Entry, EntryType};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::connect::{
    answer, decode, frame, keepalive_of, kind, one_message, pre_read, stream_response, unary_ok,
    Kind, RpcError, FLAG_END,
};
use super::{check_user, rfc3339, sandbox_path, St};
fn permissions(mode: u32, t: EntryType) -> String {
    let mut s = String::with_capacity(10);
    s.push(match t {
        EntryType::Dir => 'd',
        EntryType::Symlink => 'l',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub(super) fn entry_info(e: &Entry) -> Value {
    let t = match e.r#type {
        EntryType::File => "FILE_TYPE_FILE",
        EntryType::Dir => "FILE_TYPE_DIRECTORY",
        EntryType::Symlink => "FILE_TYPE_SYMLINK",
        EntryType::Other => "FILE_TYPE_UNSPECIFIED",
    };
    let mut v = json!({
        "name": e.name,
        "type": t,
        "path": e.path,
        "size": e.size.to_string(),
        "mode": e.mode,
        "permissions": permissions(e.mode, e.r#type),
        "owner": "user",
        "group": "user",
        "modifiedTime": rfc3339(e.modified),
    });
    if let (Some(target), Some(o)) = (&e.target, v.as_object_mut()) {
        o.insert("symlinkTarget".into(), json!(target));
    }
    if let (Some(metadata), Some(o)) = (&e.metadata, v.as_object_mut()) {
        o.insert("metadata".into(), json!(metadata));
    }
    v
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PathReq {
    path: String,
    depth: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
#[serde(rename_all = "camelCase")]
struct WatchReq {
    path: String,
    recursive: bool,
    #[serde(alias = "include_entry")]
    include_entry: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct WatcherReq {
    watcher_id: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MoveReq {
    source: String,
    destination: String,
}

/// Deepest listing taken (E2B's own cap is on the client side; this bounds the server's work).
const MAX_DEPTH: u32 = 16;
/// Most entries one listing returns.
const MAX_ENTRIES: usize = 100_000;

pub(super) async fn filesystem(
    State(e2b): State<St>,
    Path(method): Path<String>,
    h: HeaderMap,
    body: Body,
) -> Response {
    let body = pre_read(body, true).await;
    let k = match kind(&h) {
        Ok(k) => k,
        Err(e) => return e.unary(),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return answer(&k, Err(e)),
    };
    let r = fs_call(&e2b, &method, &h, body, &k).await;
    answer(&k, r)
}

/// How often a streamed watch looks at its directory again.
const WATCH_POLL: Duration = Duration::from_millis(200);

/// The async SDKs' `watch_dir`: a `start` event, then each change as the poller sees it, with
/// keepalives while nothing happens, until the client leaves or the sandbox ends.
async fn watch_stream(e2b: &St, h: &HeaderMap, body: Body, k: &Kind) -> Result<Response, RpcError> {
    if *k != Kind::Stream {
        return Err(RpcError::new(
            "invalid_argument",
            "filesystem.Filesystem/WatchDir is a server-stream call (content type application/connect+json)",
        ));
    }
    let (caller, id) = e2b.sandbox(h)?;
    check_user(h, None)?;
    let msg = one_message(body, k).await?;
    let req: WatchReq = decode(&msg)?;
    let p = sandbox_path(&req.path)?;
    let svc = e2b.st.service.clone();
    svc.audit(
        "file.watch",
        &caller.key_id,
        Some(&id),
        json!({"path": p, "recursive": req.recursive}),
    );
    let wid = e2b
        .watchers
        .create(&svc, &caller, &id, p, req.recursive, req.include_entry)
        .await?;
    let keepalive = keepalive_of(h);
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let e2b = e2b.clone();
    tokio::spawn(async move {
        let mut last_sent = tokio::time::Instant::now();
        let mut end = json!({});
        if tx.send(frame(0, &json!({"start": {}}))).await.is_ok() {
            loop {
                tokio::time::sleep(WATCH_POLL).await;
                if tx.is_closed() {
                    break;
                }
                match e2b.watchers.events(&svc, &caller, &id, &wid).await {
                    Ok(evs) => {
                        for ev in evs {
                            if tx
                                .send(frame(0, &json!({ "filesystem": ev })))
                                .await
                                .is_err()
                            {
                                break;
                            }
                            last_sent = tokio::time::Instant::now();
                        }
                    }
                    Err(e) => {
                        end = json!({"error": RpcError::from(e).body()});
                        break;
                    }
                }
                if last_sent.elapsed() >= keepalive {
                    if tx.send(frame(0, &json!({"keepalive": {}}))).await.is_err() {
                        break;
                    }
                    last_sent = tokio::time::Instant::now();
                }
            }
        }
        let _ = e2b.watchers.remove(&caller, &id, &wid);
        let _ = tx.send(frame(FLAG_END, &end)).await;
    });
    Ok(stream_response(rx))
}

async fn fs_call(
    e2b: &St,
    method: &str,
    h: &HeaderMap,
    body: Body,
    k: &Kind,
) -> Result<Response, RpcError> {
    let unary = matches!(method, "Stat" | "ListDir" | "MakeDir" | "Move" | "Remove");
    if method == "WatchDir" {
        return watch_stream(e2b, h, body, k).await;
    }
    let polled = matches!(
        method,
        "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher"
    );
    if !unary && !polled {
        return Err(RpcError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{method} is not a method of this server"),
        ));
    }
    if *k != Kind::Unary {
        return Err(RpcError::new(
            "invalid_argument",
            format!(
                "filesystem.Filesystem/{method} is a unary call (content type application/json)"
            ),
        ));
    }
    let (caller, id) = e2b.sandbox(h)?;
    check_user(h, None)?;
    let msg = one_message(body, k).await?;
    let svc = &e2b.st.service;
    match method {
        "CreateWatcher" => {
            let req: WatchReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            svc.audit(
                "file.watch",
                &caller.key_id,
                Some(&id),
                json!({"path": p, "recursive": req.recursive}),
            );
            let wid = e2b
                .watchers
                .create(svc, &caller, &id, p, req.recursive, req.include_entry)
                .await?;
            return unary_ok(json!({ "watcherId": wid }));
        }
        "GetWatcherEvents" => {
            let req: WatcherReq = decode(&msg)?;
            let ev = e2b
                .watchers
                .events(svc, &caller, &id, &req.watcher_id)
                .await?;
            return unary_ok(json!({ "events": ev }));
        }
        "RemoveWatcher" => {
            let req: WatcherReq = decode(&msg)?;
            e2b.watchers.remove(&caller, &id, &req.watcher_id)?;
            return unary_ok(json!({}));
        }
        _ => {}
    }
    match method {
        "Stat" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            // envd describes what a link leads to, its absolute path as `symlinkTarget`.
            let e = files::stat_following(svc, &caller, &id, &p).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        "ListDir" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            let depth = req.depth.unwrap_or(1).clamp(1, MAX_DEPTH);
            let entries = files::list(svc, &caller, &id, &p, depth, MAX_ENTRIES).await?;
            let entries: Vec<Value> = entries.iter().map(entry_info).collect();
            unary_ok(json!({ "entries": entries }))
        }
        "MakeDir" => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            let e = files::mkdir_new(svc, &caller, &id, &p).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        "Move" => {
            let req: MoveReq = decode(&msg)?;
            let (from, to) = (sandbox_path(&req.source)?, sandbox_path(&req.destination)?);
            let e = files::rename(svc, &caller, &id, &from, &to).await?;
            unary_ok(json!({"entry": entry_info(&e)}))
        }
        _ => {
            let req: PathReq = decode(&msg)?;
            let p = sandbox_path(&req.path)?;
            // envd's remove of a path that is not there succeeds.
            files::remove_if_present(svc, &caller, &id, &p, true).await?;
            unary_ok(json!({}))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(0o755, EntryType::Dir), "drwxr-xr-x");
        assert_eq!(permissions(0o640, EntryType::File), "-rw-r-----");
    }
}
