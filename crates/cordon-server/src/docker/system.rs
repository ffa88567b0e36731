//! `/_ping`, `/version` and `/info`: what a Docker client asks first, to negotiate the API
//! version and learn what it talks to (cordon says it is cordon).
//!
//! Threat model: no client input is read; only the server's own facts are told (no paths,
//! no keys).

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{DResult, St, API_VERSION, MIN_API_VERSION};

pub(crate) async fn ping(State(d): State<St>, headers: HeaderMap) -> DResult<Response> {
    d.caller(&headers)?;
    let mut r = "OK".into_response();
    let h = r.headers_mut();
    h.insert("API-Version", HeaderValue::from_static(API_VERSION));
    h.insert("OSType", HeaderValue::from_static("linux"));
    h.insert("Docker-Experimental", HeaderValue::from_static("false"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(r)
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub(crate) async fn version(State(d): State<St>, headers: HeaderMap) -> DResult<Json<Value>> {
    d.caller(&headers)?;
    let v = env!("CARGO_PKG_VERSION");
    Ok(Json(json!({
        "Platform": {"Name": "cordon"},
        "Components": [{"Name": "cordon", "Version": v, "Details": {"ApiVersion": API_VERSION}}],
        "Version": format!("cordon-{v}"),
        "ApiVersion": API_VERSION,
        "MinAPIVersion": MIN_API_VERSION,
        "GitCommit": "",
        "GoVersion": "",
        "Os": "linux",
        "Arch": arch(),
        "KernelVersion": kernel(),
        "BuildTime": "",
    })))
}

pub(crate) async fn info(State(d): State<St>, headers: HeaderMap) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let (total, running) = {
        let map = d
            .containers
            .lock()
            .map_err(|_| super::DockerError::bad("lock"))?;
        // The caller's own, as list shows them.
        let mine: Vec<_> = map
            .values()
            .filter(|c| c.caller.key_id == caller.key_id)
            .collect();
        let running = mine.iter().filter(|c| c.running()).count();
        (mine.len(), running)
    };
    let images =
        d.st.service
            .list_images(&caller)
            .await
            .map(|l| l.images.len())
            .unwrap_or(0);
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024;
    Ok(Json(json!({
        "ID": "cordon",
        "Containers": total,
        "ContainersRunning": running,
        "ContainersPaused": 0,
        "ContainersStopped": total - running,
        "Images": images,
        "Driver": "overlay (cordon)",
        "DockerRootDir": "",
        "OperatingSystem": "cordon sandboxes",
        "OSType": "linux",
        "OSVersion": "",
        "Architecture": std::env::consts::ARCH,
        "KernelVersion": kernel(),
        "NCPU": ncpu,
        "MemTotal": mem,
        "Name": "cordon",
        "ServerVersion": format!("cordon-{}", env!("CARGO_PKG_VERSION")),
        "DefaultRuntime": "cordon",
        "Runtimes": {"cordon": {"path": "cordon"}},
        "SecurityOptions": ["name=seccomp,profile=cordon", "name=userns", "name=no-new-privileges"],
        "Labels": [],
        "ExperimentalBuild": false,
        "LiveRestoreEnabled": false,
        "Swarm": {"LocalNodeState": "inactive"},
        "Plugins": {"Volume": [], "Network": [], "Log": []},
        "RegistryConfig": {"IndexConfigs": {}, "InsecureRegistryCIDRs": []},
        "Warnings": ["cordon: containers are cordon sandboxes; see the README's Docker API section for what differs"],
    })))
}
