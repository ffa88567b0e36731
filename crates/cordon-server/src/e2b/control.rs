//! E2B's control plane: create, connect, list, info, kill, timeouts — over the service's
//! sandboxes, with templates naming cordon profiles.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{rfc3339, E2bError, St, DEFAULT_TEMPLATE, ENVD_VERSION};
use crate::error::ApiError;
use crate::service::Caller;
use crate::types::{Amount, CreateSandbox, SandboxInfo};

/// E2B's default sandbox lifetime when a create names none (its SDKs send 300 s too).
const DEFAULT_TIMEOUT_S: f64 = 300.0;

#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    timeout: Option<f64>,
    // Other fields E2B knows (autoPause, network, allow_internet_access, mcp, …) are read
    // and left alone: a cordon sandbox has no network unless its profile allows it.
}

#[derive(Debug, Deserialize, Default)]
struct Timeout {
    timeout: Option<f64>,
}

fn parse<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("request body: {e}")))
}

/// The cordon profile a template names: E2B's own template names give the default sandbox
/// (python, node and bash on the host's system), any built-in profile name gives that one.
fn profile_of(template: &str) -> Result<String, ApiError> {
    match template {
        "" | "base" | "code-interpreter-v1" | "code-interpreter" | "code-interpreter-beta" => {
            Ok("default".into())
        }
        t if cordon_policy::Profile::builtin(t).is_ok() => Ok(t.to_string()),
        t => Err(ApiError::not_found(format!(
            "template '{t}' not found: use base, code-interpreter-v1 or a built-in cordon profile (default, strict)"
        ))),
    }
}

fn seconds(t: f64, field: &str) -> Result<Amount, ApiError> {
    if !(t.is_finite() && t > 0.0) {
        return Err(ApiError::bad_request(format!(
            "{field}: a positive number of seconds"
        )));
    }
    Ok(Amount::Number(t))
}

fn sandbox_body(e2b: &St, id: &str, template: &str, token: &str) -> Value {
    json!({
        "templateID": template,
        "sandboxID": id,
        "clientID": e2b.st.service.cfg.node,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": token,
        "trafficAccessToken": token,
        "domain": null,
    })
}

fn listed(e2b: &St, info: &SandboxInfo) -> Value {
    let (cpus, mem, disk) = info
        .limits
        .as_ref()
        .map(|l| {
            (
                l.cpus.ceil().max(1.0) as u64,
                l.memory_bytes >> 20,
                l.disk_bytes >> 20,
            )
        })
        .unwrap_or((1, 0, 0));
    json!({
        "templateID": e2b.template_of(&info.id, &info.profile),
        "sandboxID": info.id,
        "clientID": e2b.st.service.cfg.node,
        "startedAt": rfc3339(info.created_at),
        "endAt": rfc3339(info.expires_at),
        "cpuCount": cpus,
        "memoryMB": mem,
        "diskSizeMB": disk,
        "metadata": info.metadata,
        "state": if info.state == "paused" { "paused" } else { "running" },
        "envdVersion": ENVD_VERSION,
    })
}

pub(super) async fn create(
    State(e2b): State<St>,
    h: HeaderMap,
    body: Bytes,
) -> Result<Response, E2bError> {
    let caller = e2b.caller(&h)?;
    let req: NewSandbox = parse(&body)?;
    let template = req
        .template_id
        .clone()
        .unwrap_or_else(|| DEFAULT_TEMPLATE.into());
    let profile = profile_of(&template)?;
    let ttl = seconds(req.timeout.unwrap_or(DEFAULT_TIMEOUT_S), "timeout")?;
    let info = e2b
        .st
        .service
        .create(
            &caller,
            CreateSandbox {
                profile: Some(profile),
                ttl: Some(ttl),
                env: req.env_vars.unwrap_or_default(),
                metadata: req.metadata.unwrap_or_default(),
                ..Default::default()
            },
        )
        .await?;
    let door = e2b.door(&caller, &info.id, Some(&template))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_body(&e2b, &info.id, &template, &door.token)),
    )
        .into_response())
}

fn live_info(e2b: &St, caller: &Caller, id: &str) -> Result<SandboxInfo, ApiError> {
    // Ended sandboxes are gone for E2B (its API answers 404 for them).
    Ok(e2b.st.service.get_live(caller, id)?.info())
}

pub(super) async fn connect(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    let caller = e2b.caller(&h)?;
    let req: Timeout = parse(&body)?;
    let info = live_info(&e2b, &caller, &id)?;
    if let Some(t) = req.timeout {
        // Connecting never shortens the sandbox's life.
        let want = crate::registry::now() + t.max(0.0) as u64;
        if want > info.expires_at {
            e2b.st
                .service
                .extend(&caller, &id, &seconds(t, "timeout")?)?;
        }
    }
    // Connecting to a paused sandbox resumes it (E2B answers 201 then).
    let resumed = e2b.st.service.resume(&caller, &id).await?;
    let door = e2b.door(&caller, &id, None)?;
    Ok((
        if resumed {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(sandbox_body(&e2b, &id, &door.template, &door.token)),
    )
        .into_response())
}

pub(super) async fn resume(
    state: State<St>,
    h: HeaderMap,
    id: Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    connect(state, h, id, body).await
}

pub(super) async fn pause(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, E2bError> {
    let caller = e2b.caller(&h)?;
    // Memory and files stay; 409 when it is already paused, as E2B answers.
    e2b.st.service.pause(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(super) async fn metrics(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, E2bError> {
    let caller = e2b.caller(&h)?;
    // E2B keeps a history and filters it by start/end; this server samples when asked, so
    // the answer is the one sample of now (CPU: the use since the previous request).
    let m = e2b.st.service.sandbox_metrics(&caller, &id).await?;
    let secs = m.timestamp_ms / 1000;
    Ok(Json(json!([{
        "timestamp": rfc3339(secs),
        "timestampUnix": secs,
        "cpuCount": m.cpu_count,
        "cpuUsedPct": m.cpu_used_pct,
        "memUsed": m.mem_used,
        "memTotal": m.mem_total,
        "memCache": 0,
        "diskUsed": m.disk_used,
        "diskTotal": m.disk_total,
    }]))
    .into_response())
}

pub(super) async fn info(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    let caller = e2b.caller(&h)?;
    let info = live_info(&e2b, &caller, &id)?;
    let door = e2b.door(&caller, &id, None)?;
    let mut v = listed(&e2b, &info);
    if let Some(o) = v.as_object_mut() {
        o.insert("envdAccessToken".into(), json!(door.token));
        o.insert("domain".into(), Value::Null);
        o.insert("allowInternetAccess".into(), json!(false));
    }
    Ok(Json(v))
}

pub(super) async fn kill(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    let caller = e2b.caller(&h)?;
    e2b.st.service.delete(&caller, &id).await?;
    e2b.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn set_timeout(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let caller = e2b.caller(&h)?;
    let req: Timeout = parse(&body)?;
    let t = req
        .timeout
        .ok_or_else(|| ApiError::bad_request("timeout: required, in seconds"))?;
    e2b.st
        .service
        .extend(&caller, &id, &seconds(t, "timeout")?)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, Default)]
struct Refresh {
    duration: Option<f64>,
}

pub(super) async fn refresh(
    State(e2b): State<St>,
    h: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let caller = e2b.caller(&h)?;
    let req: Refresh = parse(&body)?;
    let t = req.duration.unwrap_or(60.0);
    e2b.st
        .service
        .extend(&caller, &id, &seconds(t, "duration")?)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query of a list: `metadata` (itself url-encoded `k=v&…`), `state` (comma-separated),
/// `limit`, `nextToken`.
struct ListQuery {
    metadata: BTreeMap<String, String>,
    states: Vec<String>,
    limit: usize,
    after: Option<String>,
}

fn list_query(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    let mut q = ListQuery {
        metadata: BTreeMap::new(),
        states: Vec::new(),
        limit: 100,
        after: None,
    };
    for (k, v) in pairs {
        match k.as_str() {
            "metadata" => {
                let inner: Vec<(String, String)> = serde_urlencoded::from_str(&v)
                    .map_err(|e| ApiError::bad_request(format!("metadata: {e}")))?;
                q.metadata.extend(inner);
            }
            "state" => q.states.extend(
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| ApiError::bad_request("limit: a number from 1 to 1000"))?;
            }
            "nextToken" => q.after = Some(v).filter(|s| !s.is_empty()),
            _ => {}
        }
    }
    for s in &q.states {
        if !matches!(s.as_str(), "running" | "paused") {
            return Err(ApiError::bad_request(format!(
                "state: '{s}' is not running or paused"
            )));
        }
    }
    Ok(q)
}

/// `GET /v2/sandboxes`: the caller's sandboxes, oldest first, a page at a time; the next
/// page's token (the last id shown) in `x-next-token`.
pub(super) async fn list(
    State(e2b): State<St>,
    h: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, E2bError> {
    let caller = e2b.caller(&h)?;
    let q = list_query(raw.as_deref())?;
    let all: Vec<SandboxInfo> = e2b
        .st
        .service
        .list(&caller, &q.metadata)
        .sandboxes
        .into_iter()
        .filter(|s| q.states.is_empty() || q.states.contains(&s.state))
        .collect();
    let start = match &q.after {
        Some(after) => all
            .iter()
            .position(|s| &s.id == after)
            .map(|i| i + 1)
            .ok_or_else(|| ApiError::bad_request("nextToken: not a token this server gave"))?,
        None => 0,
    };
    let page: Vec<&SandboxInfo> = all.iter().skip(start).take(q.limit).collect();
    let more = start + page.len() < all.len();
    let body: Vec<Value> = page.iter().map(|s| listed(&e2b, s)).collect();
    let mut resp = Json(body).into_response();
    if more {
        if let Some(last) = page.last() {
            if let Ok(v) = HeaderValue::from_str(&last.id) {
                resp.headers_mut().insert("x-next-token", v);
            }
        }
    }
    Ok(resp)
}

/// `GET /sandboxes` (older SDKs): every running sandbox, no paging.
pub(super) async fn list_v1(
    State(e2b): State<St>,
    h: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<Value>>, E2bError> {
    let caller = e2b.caller(&h)?;
    let q = list_query(raw.as_deref())?;
    let all = e2b.st.service.list(&caller, &q.metadata).sandboxes;
    Ok(Json(all.iter().map(|s| listed(&e2b, s)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_reads_the_sdk_encoding() {
        // What the SDK sends for metadata={"user id": "a&b"}, state=[running, paused].
        let q = list_query(Some(
            "metadata=user%2520id%3Da%2526b&state=running%2Cpaused&limit=5&nextToken=n-1",
        ))
        .expect("query");
        assert_eq!(q.metadata.get("user id").map(String::as_str), Some("a&b"));
        assert_eq!(q.states, ["running", "paused"]);
        assert_eq!(q.limit, 5);
        assert_eq!(q.after.as_deref(), Some("n-1"));
        assert!(list_query(Some("limit=0")).is_err());
        assert!(list_query(Some("state=dead")).is_err());
    }

    #[test]
    fn templates_name_profiles() {
        assert_eq!(profile_of("base").ok().as_deref(), Some("default"));
        assert_eq!(
            profile_of("code-interpreter-v1").ok().as_deref(),
            Some("default")
        );
        assert_eq!(profile_of("strict").ok().as_deref(), Some("strict"));
        assert_eq!(profile_of("nope").err().map(|e| e.status), Some(404));
    }
}
