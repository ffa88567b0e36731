//! E2B's control plane: create, connect, list, info, kill, timeouts — over the service's
//! sandboxes, with `templateID` naming one of the server's templates (`cordon serve
//! --templates`), a cordon profile, or one of the caller's snapshots (which a sandbox then
//! starts from), and `volumeMounts` naming the caller's volumes.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{rfc3339, rfc3339_ms, Control, E2bError, St, DEFAULT_TEMPLATE, ENVD_VERSION};
use crate::error::ApiError;
use cordon_service::templates::Templates;
use cordon_service::types::{Amount, CreateSandbox, SandboxInfo, SandboxState};
use cordon_service::volumes::VolumeMount;
use cordon_service::Caller;

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
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<E2bNetwork>,
    /// Pause rather than kill when the timeout runs out (the processes frozen, memory kept).
    auto_pause: Option<bool>,
    /// `false` asks the auto-pause to drop memory and keep the files only (a cold boot on
    /// resume): a pause to disk.
    auto_pause_memory: Option<bool>,
    /// `{"enabled": true}`: a request to one of its ports resumes it when paused.
    auto_resume: Option<E2bAutoResume>,
    /// Volumes of the caller's key to mount, read-write (E2B has no read-only mount).
    volume_mounts: Option<Vec<E2bVolumeMount>>,
    // Other fields E2B knows (autoResume, secure, mcp, …) are read and left alone.
}

/// `autoResume`: `{enabled}`.
#[derive(Debug, Deserialize)]
struct E2bAutoResume {
    #[serde(default)]
    enabled: bool,
}

/// One of `volumeMounts`: `{name, path}`.
#[derive(Debug, Deserialize)]
struct E2bVolumeMount {
    name: String,
    path: String,
}

/// E2B's `network` object. Only what maps onto cordon's egress allowlist is taken; what
/// cannot hold here is refused by name rather than dropped.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct E2bNetwork {
    allow_out: Option<Vec<String>>,
    deny_out: Option<Vec<String>>,
    egress_proxy: Option<Value>,
    rules: Option<Value>,
    /// Its ports reachable without the traffic access token (E2B's default: true).
    allow_public_traffic: Option<bool>,
    /// The `Host` header requests reach its ports with (`${PORT}`: the port).
    mask_request_host: Option<String>,
    // dnsServers (the proxy resolves names itself) changes nothing in a cordon sandbox.
}

/// What E2B's `network` says of the sandbox's ports.
fn ports_options(network: Option<&E2bNetwork>) -> cordon_service::ports::PortsOptions {
    cordon_service::ports::PortsOptions {
        public: network.and_then(|n| n.allow_public_traffic).unwrap_or(true),
        host_header: network.and_then(|n| n.mask_request_host.clone()),
        wake_on_request: false,
    }
}

fn all_traffic(entry: &str) -> bool {
    matches!(entry.trim(), "0.0.0.0/0" | "::/0")
}

/// The egress allowlist an E2B create asks for, in cordon's terms: internet access (E2B's
/// default) is the server's `--e2b-allow-net` list, `allowOut` adds to it, and
/// `allow_internet_access: false` or a `denyOut` of all traffic leaves only `allowOut`.
/// Everything else is refused, so a deny list over a non-empty allowlist (which cordon's
/// allowlist cannot express) is a 400.
fn egress(
    allow_internet: Option<bool>,
    net: Option<E2bNetwork>,
    server_default: &[String],
    rules_taken: bool,
) -> Result<Vec<String>, ApiError> {
    let net = net.unwrap_or_default();
    if net.egress_proxy.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request(
            "network.egressProxy: not supported by this server (its egress goes through cordon's own proxy)",
        ));
    }
    if !rules_taken
        && net
            .rules
            .as_ref()
            .is_some_and(|v| v.as_object().is_some_and(|o| !o.is_empty()))
    {
        return Err(ApiError::bad_request(
            "network.rules: transforms (secrets injected at the proxy) are set when a sandbox is created and cannot be changed while it runs",
        ));
    }
    let allow = net.allow_out.unwrap_or_default();
    let deny = net.deny_out.unwrap_or_default();
    if allow.iter().any(|e| all_traffic(e)) {
        return Err(ApiError::bad_request(
            "network.allowOut: all traffic cannot be allowed here (cordon's egress is an allowlist): list the hosts or networks",
        ));
    }
    let internet = allow_internet.unwrap_or(true) && !deny.iter().any(|e| all_traffic(e));
    let mut list: Vec<String> = if internet {
        server_default.to_vec()
    } else {
        Vec::new()
    };
    let partial_deny = deny.iter().any(|e| !all_traffic(e));
    if partial_deny && !list.is_empty() {
        return Err(ApiError::bad_request(
            "network.denyOut: a deny list is not expressible here (cordon's egress is an allowlist): deny all traffic (0.0.0.0/0) and list what may be reached in allowOut",
        ));
    }
    for e in allow {
        if !list.contains(&e) {
            list.push(e);
        }
    }
    let policy = cordon_policy::network::NetworkPolicy {
        allow: list,
        ..Default::default()
    };
    policy
        .validate()
        .map_err(|e| ApiError::bad_request(format!("network.allowOut: {e}")))?;
    Ok(policy.allow)
}

/// `PUT /sandboxes/{id}/network` (`update_network`): E2B's network object with its
/// `allow_internet_access`, replacing what was there.
#[derive(Debug, Deserialize, Default)]
struct NetworkUpdate {
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(flatten)]
    network: E2bNetwork,
}

#[derive(Debug, Deserialize, Default)]
struct Timeout {
    timeout: Option<f64>,
}

pub(super) fn parse<T: for<'de> Deserialize<'de> + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("request body: {e}")))
}

/// What an E2B `templateID` selects.
#[derive(Debug, PartialEq)]
enum Chosen {
    /// One of the server's templates (built-in `base` and `code-interpreter-v1`, or the
    /// operator's file); E2B's other names for the code interpreter's are aliases of it.
    Template(String),
    /// A built-in cordon profile named directly (`default`, `strict`).
    Profile(String),
}

fn choose(templates: &Templates, name: &str) -> Option<Chosen> {
    let alias = match name {
        "" | "code-interpreter" | "code-interpreter-beta" if templates.get(name).is_none() => {
            DEFAULT_TEMPLATE
        }
        n => n,
    };
    if templates.get(alias).is_some() {
        return Some(Chosen::Template(alias.to_string()));
    }
    cordon_policy::Profile::builtin(name)
        .is_ok()
        .then(|| Chosen::Profile(name.to_string()))
}

pub(super) fn seconds(t: f64, field: &str) -> Result<Amount, ApiError> {
    if !(t.is_finite() && t > 0.0) {
        return Err(ApiError::bad_request(format!(
            "{field}: a positive number of seconds"
        )));
    }
    Ok(Amount::Number(t))
}

pub(super) fn sandbox_body(
    e2b: &St,
    caller: &Caller,
    id: &str,
    template: &str,
    token: &str,
) -> Value {
    let traffic = e2b.st.service.port_grant(caller, id).ok().map(|g| g.token);
    json!({
        "templateID": template,
        "sandboxID": id,
        "clientID": e2b.st.service.config().node,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": token,
        "trafficAccessToken": traffic,
        "domain": e2b.st.ports.get().map(|p| p.domain.clone()),
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
        "clientID": e2b.st.service.config().node,
        "startedAt": rfc3339_ms(info.created_ms),
        "endAt": rfc3339(info.expires_at),
        "cpuCount": cpus,
        "memoryMB": mem,
        "diskSizeMB": disk,
        "metadata": info.metadata,
        "state": if info.state == SandboxState::Paused { "paused" } else { "running" },
        "envdVersion": ENVD_VERSION,
    })
}

pub(super) async fn create(
    Control(e2b, caller): Control,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: NewSandbox = parse(&body)?;
    let template = req
        .template_id
        .clone()
        .unwrap_or_else(|| DEFAULT_TEMPLATE.into());
    let templates = &e2b.st.service.config().templates;
    // A name that is no template or profile may be one of the caller's snapshots (E2B
    // creates from a snapshot by naming it as the template): the sandbox starts with its files.
    let (chosen, from) = match choose(templates, &template) {
        Some(c) => (c, None),
        // One the caller built with the Template SDK.
        None if e2b.st.service.template_alias(&caller, &template).is_some() => {
            (Chosen::Template(template.clone()), None)
        }
        None if super::state::is_snapshot(&e2b, &caller, &template).await? => {
            (Chosen::Profile("default".into()), Some(template.clone()))
        }
        None => {
            return Err(ApiError::not_found(format!(
                "template '{template}' not found: name one of this server's templates ({}), a built-in profile (default, strict) or one of your snapshots; an operator adds templates with cordon serve --templates FILE",
                templates.names()
            ))
            .into());
        }
    };
    let picked = match &chosen {
        Chosen::Template(n) => templates.get(n),
        Chosen::Profile(_) => None,
    };
    let ttl = seconds(req.timeout.unwrap_or(DEFAULT_TIMEOUT_S), "timeout")?;
    let pause_on_timeout = req.auto_pause == Some(true);
    // "The internet" is the template's allowlist where it has one, else the server's.
    let internet = picked
        .and_then(|t| t.allow_net.as_deref())
        .unwrap_or(&e2b.st.service.config().e2b_allow_net);
    // `${e2b.secrets.NAME}` in envVars and network.rules: placeholders in the sandbox, the
    // values at its proxy (see `secrets`).
    let mut env = req.env_vars.unwrap_or_default();
    let rules = req.network.as_ref().and_then(|n| n.rules.clone());
    let given = super::secrets::from_create(&mut env, rules.as_ref(), |name| {
        let info = e2b.st.service.secret_info(&caller, name).ok()?;
        let hosts = info.metadata.get("cordon.hosts")?;
        Some(
            hosts
                .split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect(),
        )
    })?;
    let mut ports = ports_options(req.network.as_ref());
    ports.wake_on_request = req.auto_resume.as_ref().is_some_and(|a| a.enabled);
    if ports.wake_on_request && !pause_on_timeout {
        return Err(ApiError::bad_request(
            "autoResume: only a sandbox that pauses on its timeout (autoPause) can be resumed by a request",
        )
        .into());
    }
    let allow = egress(req.allow_internet_access, req.network, internet, true)?;
    let info = e2b
        .st
        .service
        .create(
            &caller,
            CreateSandbox {
                template: match &chosen {
                    Chosen::Template(n) => Some(n.clone()),
                    Chosen::Profile(_) => None,
                },
                profile: match chosen {
                    Chosen::Profile(p) => Some(p),
                    Chosen::Template(_) => None,
                },
                // Given always, so that no internet access stays none whatever the template.
                network: Some(cordon_policy::network::NetworkPolicy {
                    allow,
                    hosts: picked.map(|t| t.hosts.clone()).unwrap_or_default(),
                }),
                ttl: Some(ttl),
                env,
                metadata: req.metadata.unwrap_or_default(),
                volumes: req
                    .volume_mounts
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| VolumeMount {
                        name: m.name,
                        path: m.path,
                        readonly: false,
                    })
                    .collect(),
                from,
                pause_on_timeout,
                pause_keep_memory: req.auto_pause_memory,
                secrets: given,
                ports,
                ..Default::default()
            },
        )
        .await?;
    let door = e2b.door(&caller, &info.id, Some(&template))?;
    Ok((
        StatusCode::CREATED,
        Json(sandbox_body(
            &e2b,
            &caller,
            &info.id,
            &template,
            &door.token,
        )),
    )
        .into_response())
}

fn live_info(e2b: &St, caller: &Caller, id: &str) -> Result<SandboxInfo, ApiError> {
    // Ended sandboxes are gone for E2B (its API answers 404 for them); one paused to disk is
    // paused.
    match e2b.st.service.get_live(caller, id) {
        Ok(l) => Ok(l.info()),
        Err(e) => match e2b.st.service.get(caller, id) {
            Ok(info) if info.state == SandboxState::Paused => Ok(info),
            _ => Err(e.into()),
        },
    }
}

pub(super) async fn connect(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    let req: Timeout = parse(&body)?;
    let info = live_info(&e2b, &caller, &id)?;
    // Connecting to a paused sandbox resumes it (E2B answers 201 then); one the timeout
    // paused gets its time to live from this call (it was kept for the server's longest).
    let resumed = e2b.st.service.resume(&caller, &id).await?;
    let from_disk = info.paused_by.as_deref() == Some(cordon_service::hibernate::PAUSED_TO_DISK);
    if resumed && (info.pause_on_timeout || from_disk) {
        let t = req.timeout.unwrap_or(DEFAULT_TIMEOUT_S);
        e2b.st
            .service
            .extend(&caller, &id, &seconds(t, "timeout")?)?;
    } else if let Some(t) = req.timeout {
        // Connecting never shortens the sandbox's life.
        let want = cordon_service::registry::now() + t.max(0.0) as u64;
        if want > info.expires_at {
            e2b.st
                .service
                .extend(&caller, &id, &seconds(t, "timeout")?)?;
        }
    }
    let door = e2b.door(&caller, &id, None)?;
    Ok((
        if resumed {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(sandbox_body(
            &e2b,
            &caller,
            &id,
            &door.template,
            &door.token,
        )),
    )
        .into_response())
}

pub(super) async fn resume(
    control: Control,
    id: Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    connect(control, id, body).await
}

pub(super) async fn pause(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, E2bError> {
    // The SDK sends `{}` or `{"memory": false}`; anything but JSON is a malformed request.
    let req: serde_json::Map<String, Value> = parse(&body)?;
    let keep_memory = match req.get("memory") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("memory: true or false").into()),
    };
    // Memory kept: frozen; `memory: false`: to disk (files kept, a cold boot on resume). 409
    // when it is already paused, as E2B answers.
    e2b.st.service.pause(&caller, &id, keep_memory).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Replaces a running sandbox's egress allowlist, mapped as at create.
pub(super) async fn update_network(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let req: NetworkUpdate = parse(&body)?;
    let allow = egress(
        req.allow_internet_access,
        Some(req.network),
        &e2b.st.service.config().e2b_allow_net,
        false,
    )?;
    e2b.st.service.set_network(
        &caller,
        &id,
        cordon_policy::network::NetworkPolicy {
            allow,
            ..Default::default()
        },
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// `start` and `end` of a metrics query, in seconds since the epoch.
fn metrics_range(raw: Option<&str>) -> Result<(Option<u64>, Option<u64>), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    let (mut start, mut end) = (None, None);
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "start" => &mut start,
            "end" => &mut end,
            _ => continue,
        };
        *slot = Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("{k}: seconds since the epoch")))?,
        );
    }
    Ok((start, end))
}

pub(super) async fn metrics(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, E2bError> {
    let (start, end) = metrics_range(raw.as_deref())?;
    // E2B keeps a history and filters it by start/end; this server samples when asked, so
    // the answer is the one sample of now (CPU: the use since the previous request), and
    // none when now is outside the range asked for (its bounds are whole seconds: a second
    // of slack on each side).
    let m = e2b.st.service.sandbox_metrics(&caller, &id).await?;
    let secs = m.timestamp_ms / 1000;
    if start.is_some_and(|s| secs + 1 < s) || end.is_some_and(|e| secs > e + 1) {
        return Ok(Json(json!([])).into_response());
    }
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
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<Json<Value>, E2bError> {
    let info = live_info(&e2b, &caller, &id)?;
    let door = e2b.door(&caller, &id, None)?;
    let mut v = listed(&e2b, &info);
    if let Some(o) = v.as_object_mut() {
        o.insert("envdAccessToken".into(), json!(door.token));
        o.insert(
            "domain".into(),
            json!(e2b.st.ports.get().map(|p| p.domain.clone())),
        );
        // What holds, not what was asked: the proxy's allowlist, everything else refused.
        let allow = e2b
            .st
            .service
            .network(&caller, &id)
            .map(|n| n.policy.allow)
            .unwrap_or_default();
        o.insert("allowInternetAccess".into(), json!(!allow.is_empty()));
        o.insert(
            "lifecycle".into(),
            json!({"autoResume": e2b.st.service.port_grant(&caller, &id).is_ok_and(|g| g.wake_on_request),
                "onTimeout": if info.pause_on_timeout { "pause" } else { "kill" }}),
        );
        o.insert(
            "network".into(),
            json!({"allowOut": allow, "denyOut": ["0.0.0.0/0"]}),
        );
    }
    Ok(Json(v))
}

pub(super) async fn kill(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
) -> Result<StatusCode, E2bError> {
    e2b.st.service.delete(&caller, &id).await?;
    e2b.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn set_timeout(
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let req: Timeout = parse(&body)?;
    let t = req
        .timeout
        .ok_or_else(|| ApiError::bad_request("timeout: required, in seconds"))?;
    if t == 0.0 {
        // Its timeout now: ended, or paused if it asked for that (E2B's `set_timeout(0)`).
        e2b.st.service.expire_now(&caller, &id)?;
        return Ok(StatusCode::NO_CONTENT);
    }
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
    Control(e2b, caller): Control,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, E2bError> {
    let req: Refresh = parse(&body)?;
    let t = req.duration.unwrap_or(60.0);
    e2b.st
        .service
        .extend(&caller, &id, &seconds(t, "duration")?)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query of a list: `metadata` (itself url-encoded `k=v&…`), `state` (comma-separated),
/// `limit`, `nextToken`, `order` (`asc` or `desc`, by start time; E2B's default is newest
/// first), `startedAfter` (RFC 3339, inclusive), `template`.
struct ListQuery {
    metadata: BTreeMap<String, String>,
    states: Vec<String>,
    limit: usize,
    after: Option<String>,
    ascending: bool,
    started_after_ms: Option<u64>,
    template: Option<String>,
}

fn list_query(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    let mut q = ListQuery {
        metadata: BTreeMap::new(),
        states: Vec::new(),
        limit: 100,
        after: None,
        ascending: false,
        started_after_ms: None,
        template: None,
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
            "order" => {
                q.ascending = match v.as_str() {
                    "asc" => true,
                    "desc" => false,
                    _ => return Err(ApiError::bad_request("order: asc or desc")),
                }
            }
            "startedAfter" => {
                let t = chrono::DateTime::parse_from_rfc3339(&v).map_err(|e| {
                    ApiError::bad_request(format!("startedAfter: an RFC 3339 time: {e}"))
                })?;
                q.started_after_ms = Some(t.timestamp_millis().max(0) as u64);
            }
            "template" => q.template = Some(v).filter(|s| !s.is_empty()),
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

/// `GET /v2/sandboxes`: the caller's sandboxes, newest first unless `order=asc`, a page at a
/// time; the next page's token (the last id shown) in `x-next-token`.
pub(super) async fn list(
    Control(e2b, caller): Control,
    RawQuery(raw): RawQuery,
) -> Result<Response, E2bError> {
    let q = list_query(raw.as_deref())?;
    let mut all: Vec<SandboxInfo> = e2b
        .st
        .service
        .list(&caller, &q.metadata)
        .sandboxes
        .into_iter()
        .filter(|s| q.states.is_empty() || q.states.iter().any(|w| w == s.state.as_str()))
        .filter(|s| q.started_after_ms.is_none_or(|t| s.created_ms >= t))
        .filter(|s| {
            q.template
                .as_ref()
                .is_none_or(|t| *t == e2b.template_of(&s.id, &s.profile))
        })
        .collect();
    if !q.ascending {
        all.reverse();
    }
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
    Control(e2b, caller): Control,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<Value>>, E2bError> {
    let q = list_query(raw.as_deref())?;
    let all = e2b.st.service.list(&caller, &q.metadata).sandboxes;
    Ok(Json(all.iter().map(|s| listed(&e2b, s)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
        assert!(q.template.is_none() && q.started_after_ms.is_none());
        assert!(!q.ascending, "E2B lists newest first by default");
        let q = list_query(Some(
            "order=asc&startedAfter=2023-11-14T22%3A13%3A20.042%2B00%3A00&template=base",
        ))
        .expect("query");
        assert!(q.ascending);
        assert_eq!(q.started_after_ms, Some(1_700_000_000_042));
        assert_eq!(q.template.as_deref(), Some("base"));
        assert!(list_query(Some("order=sideways")).is_err());
        assert!(list_query(Some("startedAfter=yesterday")).is_err());
        assert!(list_query(Some("limit=0")).is_err());
        assert!(list_query(Some("state=dead")).is_err());
    }

    #[test]
    fn metrics_ranges_are_seconds() {
        assert_eq!(metrics_range(None).ok(), Some((None, None)));
        assert_eq!(
            metrics_range(Some("start=10&end=20")).ok(),
            Some((Some(10), Some(20)))
        );
        assert!(metrics_range(Some("end=soon")).is_err());
    }

    #[test]
    fn e2b_network_maps_onto_the_allowlist_or_is_refused() {
        let net = |v: Value| serde_json::from_value::<E2bNetwork>(v).ok();
        let dflt = vec!["pypi.org".to_string()];
        assert_eq!(egress(None, None, &dflt, false).ok(), Some(dflt.clone()));
        assert_eq!(egress(Some(false), None, &dflt, false).ok(), Some(vec![]));
        assert_eq!(egress(None, None, &[], false).ok(), Some(vec![]));
        let only = net(json!({"allowOut": ["127.0.0.2"], "denyOut": ["0.0.0.0/0"]}));
        assert_eq!(
            egress(None, only, &dflt, false).ok(),
            Some(vec!["127.0.0.2".to_string()])
        );
        let more = net(json!({"allowOut": ["example.test"]}));
        assert_eq!(
            egress(None, more, &dflt, false).ok().map(|v| v.len()),
            Some(2)
        );
        for bad in [
            json!({"allowOut": ["0.0.0.0/0"]}),
            json!({"denyOut": ["10.0.0.0/8"]}),
            json!({"allowOut": ["not a host"]}),
            json!({"egressProxy": {"address": "p:1080"}}),
            json!({"rules": {"a.test": []}}),
        ] {
            assert_eq!(
                egress(None, net(bad.clone()), &dflt, false)
                    .err()
                    .map(|e| e.kind),
                Some(ErrorKind::Invalid),
                "{bad}"
            );
        }
        // A deny list over nothing allowed holds trivially.
        let deny = net(json!({"denyOut": ["10.0.0.0/8"]}));
        assert_eq!(egress(None, deny, &[], false).ok(), Some(vec![]));
    }

    #[test]
    fn template_ids_name_templates_then_profiles() {
        let t = Templates::default();
        let tpl = |n: &str| Some(Chosen::Template(n.to_string()));
        assert_eq!(choose(&t, "base"), tpl("base"));
        assert_eq!(
            choose(&t, "code-interpreter-v1"),
            tpl("code-interpreter-v1")
        );
        assert_eq!(choose(&t, "code-interpreter"), tpl("code-interpreter-v1"));
        assert_eq!(
            choose(&t, "strict"),
            Some(Chosen::Profile("strict".to_string()))
        );
        assert_eq!(choose(&t, "nope"), None);
    }
}
