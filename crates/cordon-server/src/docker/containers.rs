//! Containers: create (the request checked and narrowed into a sandbox create), start (the
//! container's command as the sandbox's main command), wait, logs and attach (Docker's
//! multiplexed stream, following), stop, kill, remove, list, inspect, top, stats.
//!
//! Threat model: the create body is hostile. Every field that would widen what a sandbox may
//! do is refused with 403 naming it (privileged, capabilities, devices, the host's network,
//! PID, IPC, UTS, user or cgroup namespace, security options other than
//! `no-new-privileges`, sysctls, an OOM killer turned off, a cgroup parent) before anything
//! is created; host binds go to the service, which allows only the operator's roots. A
//! `User` is resolved in the image's own user database and only names the sandbox's one id
//! inside (never another host id). The input an attached client sends is passed to the main
//! process's stdin as bytes, only with `OpenStdin`. The output a container writes is hostile too: kept up to the sandbox's output limit
//! (`--output-limit`), then dropped, so a flood cannot fill the server's memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cordon_service::error::ErrorKind;
use cordon_service::types::{Amount, Cmd, CreateSandbox, ExecRequest};
use cordon_service::{Caller, ExecEvent};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use super::{stream, DResult, DockerError, Found, St};

/// Where a container's main process is.
#[derive(Clone)]
pub(crate) enum Run {
    Created,
    Running { cid: String, started: String },
    Exited { ended: Ended, started: String },
}

/// How a container's main process ended, as Docker reports it.
#[derive(Clone)]
pub(crate) struct Ended {
    pub code: i64,
    pub oom: bool,
    pub error: String,
    pub finished: String,
}

/// A container's output in the order it came: (stream, bytes, when in Unix nanoseconds);
/// stream 1 stdout, 2 stderr.
#[derive(Default)]
pub(crate) struct Log {
    chunks: Vec<(u8, Vec<u8>, i64)>,
    bytes: u64,
    dropped: bool,
}

/// What the door knows of a container beyond its sandbox.
pub(crate) struct Container {
    /// The sandbox's id.
    pub id: String,
    /// Its name, without Docker's leading `/` (changed by `rename`).
    pub name: Mutex<String>,
    pub caller: Caller,
    pub image: String,
    pub image_id: String,
    pub created: String,
    pub created_unix: i64,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub tty: bool,
    /// `OpenStdin`: the main process's stdin stays open for `attach` (else it is closed).
    pub open_stdin: bool,
    /// `StdinOnce`: closed when the first attached client's input ends.
    pub stdin_once: bool,
    pub auto_remove: bool,
    /// The uid and gid its processes have inside (`User`, else the image's, else its root).
    pub run_as: (u32, u32),
    /// Its host binds as inspect shows them (`Mounts`: source as asked, destination, RW).
    pub mounts: Vec<Value>,
    /// The service volumes made for its anonymous `Volumes`, deleted with it.
    pub anon_volumes: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub config: Value,
    pub host_config: Value,
    pub output_limit: u64,
    pub run: Mutex<Run>,
    pub log: Mutex<Log>,
    /// Bumped at every output chunk and state change: followers wait on it.
    pub changed: watch::Sender<u64>,
}

impl Container {
    pub(crate) fn name(&self) -> String {
        self.name.lock().map(|n| n.clone()).unwrap_or_default()
    }

    pub(crate) fn running(&self) -> bool {
        matches!(self.run.lock().map(|r| r.clone()), Ok(Run::Running { .. }))
    }

    fn state(&self) -> Run {
        self.run.lock().map(|r| r.clone()).unwrap_or(Run::Created)
    }

    pub(crate) fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn append(&self, stream: u8, data: Vec<u8>) {
        if let Ok(mut l) = self.log.lock() {
            // Both streams together, like the service's cap per stream doubled.
            if l.bytes + data.len() as u64 > self.output_limit.saturating_mul(2) {
                l.dropped = true;
                return;
            }
            l.bytes += data.len() as u64;
            l.chunks.push((stream, data, unix_nanos()));
        }
        self.bump();
    }

    fn set(&self, run: Run) {
        if let Ok(mut r) = self.run.lock() {
            *r = run;
        }
        self.bump();
    }

    /// The last `n` lines of what `pick` selects (Docker's `tail`), framed; and the index
    /// following from there.
    fn tail_lines(&self, n: usize, pick: &Pick) -> (Vec<Vec<u8>>, usize) {
        let Ok(l) = self.log.lock() else {
            return (Vec::new(), 0);
        };
        let mut lines: Vec<(u8, Vec<u8>, i64)> = Vec::new();
        for (s, d, t) in l.chunks.iter().filter(|(s, _, t)| pick.takes(*s, *t)) {
            for piece in d.split_inclusive(|b| *b == b'\n') {
                match lines.last_mut() {
                    // A line a chunk left unfinished goes on in the next of its stream.
                    Some((ls, ld, _)) if *ls == *s && ld.last() != Some(&b'\n') => {
                        ld.extend_from_slice(piece)
                    }
                    _ => lines.push((*s, piece.to_vec(), *t)),
                }
            }
        }
        let skip = lines.len().saturating_sub(n);
        let out = lines
            .iter()
            .skip(skip)
            .map(|(s, d, t)| pick.frame(*s, d, *t, self.tty))
            .collect();
        (out, l.chunks.len())
    }

    /// Output chunks from index `from` on, of what `pick` selects.
    fn chunks_from(&self, from: usize, pick: &Pick) -> (Vec<Vec<u8>>, usize) {
        let Ok(l) = self.log.lock() else {
            return (Vec::new(), from);
        };
        let out = l
            .chunks
            .iter()
            .skip(from)
            .filter(|(s, _, t)| pick.takes(*s, *t))
            .map(|(s, d, t)| pick.frame(*s, d, *t, self.tty))
            .collect();
        (out, l.chunks.len())
    }
}

/// Which of a container's output a `logs` or `attach` asks for: the streams, a time window
/// (`since`/`until`, Unix nanoseconds), and whether each line starts with its time.
#[derive(Clone)]
pub(crate) struct Pick {
    stdout: bool,
    stderr: bool,
    since: Option<i64>,
    until: Option<i64>,
    timestamps: bool,
}

impl Pick {
    fn streams(stdout: bool, stderr: bool) -> Self {
        Pick {
            stdout,
            stderr,
            since: None,
            until: None,
            timestamps: false,
        }
    }

    fn takes(&self, stream: u8, at: i64) -> bool {
        ((stream == 1 && self.stdout) || (stream == 2 && self.stderr))
            && self.since.is_none_or(|s| at >= s)
            && self.until.is_none_or(|u| at <= u)
    }

    /// One chunk framed; with `timestamps`, each of its lines after its time (RFC 3339 with
    /// nanoseconds, and a space), as Docker writes them.
    fn frame(&self, stream: u8, data: &[u8], at: i64, tty: bool) -> Vec<u8> {
        if !self.timestamps {
            return stream::frame(stream, data, tty);
        }
        let when = chrono::DateTime::from_timestamp(
            at.div_euclid(1_000_000_000),
            at.rem_euclid(1_000_000_000) as u32,
        )
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_default();
        let mut out = Vec::with_capacity(data.len() + 32);
        for line in data.split_inclusive(|b| *b == b'\n') {
            out.extend_from_slice(when.as_bytes());
            out.push(b' ');
            out.extend_from_slice(line);
        }
        stream::frame(stream, &out, tty)
    }
}

fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64)
}

/// A `since`/`until` of `logs`: Unix seconds, with a fraction or not (0 or none: no bound).
fn time_bound(q: &HashMap<String, String>, key: &str) -> DResult<Option<i64>> {
    let Some(v) = q.get(key).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let secs: f64 = v
        .parse()
        .ok()
        .filter(|f: &f64| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| DockerError::bad(format!("{key}: '{v}' is not a Unix time in seconds")))?;
    Ok((secs > 0.0).then(|| (secs * 1e9).min(i64::MAX as f64) as i64))
}

impl Container {}

pub(crate) fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    chrono::DateTime::from_timestamp(d.as_secs() as i64, d.subsec_nanos())
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_default()
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k)
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "True" | "yes"))
}

fn strings(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Array(a) => Some(
            a.iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect(),
        ),
        Value::String(s) => Some(vec![s.clone()]),
        _ => None,
    }
}

fn nonempty(v: &Value) -> bool {
    match v {
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        Value::Bool(b) => *b,
        _ => false,
    }
}

/// Refuses every power a create asks for that cordon does not grant, naming the field.
pub(crate) fn refuse_powers(hc: &Value) -> DResult<()> {
    if hc["Privileged"].as_bool() == Some(true) {
        return Err(DockerError::refused(
            "HostConfig.Privileged",
            "privileged containers are never granted",
        ));
    }
    if nonempty(&hc["CapAdd"]) {
        return Err(DockerError::refused(
            "HostConfig.CapAdd",
            &format!(
                "capabilities are never added (asked for {}); a sandbox's capabilities are its own user namespace's only",
                hc["CapAdd"]
            ),
        ));
    }
    for f in ["Devices", "DeviceRequests", "DeviceCgroupRules"] {
        if nonempty(&hc[f]) {
            return Err(DockerError::refused(
                &format!("HostConfig.{f}"),
                "host devices are never passed into a container",
            ));
        }
    }
    match hc["NetworkMode"].as_str().unwrap_or("") {
        "" | "default" | "none" | "bridge" => {}
        "host" => {
            return Err(DockerError::refused(
                "HostConfig.NetworkMode",
                "the host's network namespace is never shared (containers have no network)",
            ))
        }
        other => {
            return Err(DockerError::refused(
                "HostConfig.NetworkMode",
                &format!("'{other}' is not available: containers have no network (use none)"),
            ))
        }
    }
    for (f, ok) in [
        ("PidMode", &["", "private"][..]),
        ("IpcMode", &["", "private", "none", "shareable"][..]),
        ("UTSMode", &["", "private"][..]),
        ("UsernsMode", &["", "private"][..]),
        ("CgroupnsMode", &["", "private"][..]),
    ] {
        let v = hc[f].as_str().unwrap_or("");
        if !ok.contains(&v) {
            return Err(DockerError::refused(
                &format!("HostConfig.{f}"),
                &format!("'{v}' would share a namespace with the host or another container; each sandbox has its own"),
            ));
        }
    }
    if let Some(opts) = strings(&hc["SecurityOpt"]) {
        for o in opts {
            let o = o.trim();
            if !matches!(
                o,
                "no-new-privileges" | "no-new-privileges:true" | "no-new-privileges=true"
            ) {
                return Err(DockerError::refused(
                    "HostConfig.SecurityOpt",
                    &format!("'{o}' could loosen confinement; cordon's seccomp, Landlock and namespaces always apply"),
                ));
            }
        }
    }
    if nonempty(&hc["Sysctls"]) {
        return Err(DockerError::refused(
            "HostConfig.Sysctls",
            "kernel parameters are not set for containers",
        ));
    }
    if hc["OomKillDisable"].as_bool() == Some(true) {
        return Err(DockerError::refused(
            "HostConfig.OomKillDisable",
            "a container's memory limit is always enforced",
        ));
    }
    if nonempty(&hc["CgroupParent"]) {
        return Err(DockerError::refused(
            "HostConfig.CgroupParent",
            "containers get cordon's own cgroups",
        ));
    }
    if nonempty(&hc["VolumesFrom"]) {
        return Err(DockerError::bad(
            "HostConfig.VolumesFrom: not supported by cordon",
        ));
    }
    if nonempty(&hc["PortBindings"]) || hc["PublishAllPorts"].as_bool() == Some(true) {
        return Err(DockerError::bad(
            "HostConfig.PortBindings: containers have no network, so no port can be published",
        ));
    }
    if nonempty(&hc["GroupAdd"]) {
        return Err(DockerError::bad(
            "HostConfig.GroupAdd: a sandbox maps one user and one group inside; supplementary \
             groups cannot be added (set the group with User: uid:gid)",
        ));
    }
    match hc["RestartPolicy"]["Name"].as_str().unwrap_or("") {
        "" | "no" => {}
        other => {
            return Err(DockerError::bad(format!(
                "HostConfig.RestartPolicy: '{other}' is not supported by cordon: a container's \
                 command runs once per start (POST /containers/{{id}}/restart runs it again)"
            )))
        }
    }
    match hc["LogConfig"]["Type"].as_str().unwrap_or("") {
        "" | "json-file" | "local" | "none" => {}
        other => {
            // Docker's own words (docker-py's callers match them); cordon keeps a
            // container's output itself, so json-file, local and none are all served alike.
            return Err(DockerError::bad(format!(
                "logger: no log driver named '{other}' is registered"
            )));
        }
    }
    if let Some(rt) = hc["Runtime"].as_str() {
        if !matches!(rt, "" | "runc" | "cordon") {
            return Err(DockerError::bad(format!(
                "HostConfig.Runtime: '{rt}' is not available (containers run in cordon)"
            )));
        }
    }
    Ok(())
}

/// The ids a container runs as inside when neither the create nor the image's config names a
/// `User`: the image's root, as Docker runs it (only inside: see the module's threat model).
pub(crate) const IMAGE_ROOT: (u32, u32) = (0, 0);

/// Where a container's scratch is a tmpfs already.
const TMPFS_PATHS: &[&str] = &["/tmp", "/workspace", "/home/sandbox"];

/// The create body, checked: what the sandbox gets and how its command runs.
struct Spec {
    create: CreateSandbox,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    cwd: Option<String>,
    tty: bool,
    auto_remove: bool,
    /// Anonymous volumes named in `Binds` (a bare path); `Volumes` names them too.
    anon_paths: Vec<String>,
}

fn spec_of(body: &Value, image: &str) -> DResult<Spec> {
    let hc = &body["HostConfig"];
    refuse_powers(hc)?;
    let mut binds = Vec::new();
    let mut anon_paths = Vec::new();
    if let Some(list) = strings(&hc["Binds"]) {
        for b in list {
            // A bare path is Docker's anonymous volume (docker-py's `volumes=["/data"]`).
            if b.starts_with('/') && !b.contains(':') {
                anon_paths.push(b);
                continue;
            }
            let mut parts = b.splitn(3, ':');
            let (Some(src), Some(dst)) = (parts.next(), parts.next()) else {
                return Err(DockerError::bad(format!(
                    "HostConfig.Binds: '{b}' is not SOURCE:DEST[:ro]"
                )));
            };
            let opts = parts.next().unwrap_or("");
            binds.push(cordon_service::binds::HostBind {
                source: src.to_string(),
                dest: dst.to_string(),
                writable: !opts.split(',').any(|o| o == "ro"),
            });
        }
    }
    let mut tmpfs: Vec<String> = hc["Tmpfs"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(mounts) = hc["Mounts"].as_array() {
        for m in mounts {
            let target = m["Target"].as_str().unwrap_or("").to_string();
            match m["Type"].as_str().unwrap_or("") {
                "bind" => binds.push(cordon_service::binds::HostBind {
                    source: m["Source"].as_str().unwrap_or("").to_string(),
                    dest: target,
                    writable: m["ReadOnly"].as_bool() != Some(true),
                }),
                "tmpfs" => tmpfs.push(target),
                other => {
                    return Err(DockerError::bad(format!(
                        "HostConfig.Mounts: mounts of type '{other}' are not supported (bind and tmpfs are)"
                    )))
                }
            }
        }
    }
    for t in &tmpfs {
        if !TMPFS_PATHS.contains(&t.trim_end_matches('/')) {
            return Err(DockerError::bad(format!(
                "HostConfig.Tmpfs: '{t}' cannot be a tmpfs here; {} are tmpfs already in every container (sized by the server's disk limit)",
                TMPFS_PATHS.join(", ")
            )));
        }
    }
    let mut env = BTreeMap::new();
    if let Some(list) = strings(&body["Env"]) {
        for e in list {
            if let Some((k, v)) = e.split_once('=') {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    let labels: BTreeMap<String, String> = body["Labels"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let memory = hc["Memory"].as_i64().filter(|m| *m > 0);
    let cpus = match (hc["NanoCpus"].as_i64(), hc["CpuQuota"].as_i64()) {
        (Some(n), _) if n > 0 => Some(n as f64 / 1e9),
        (_, Some(q)) if q > 0 => {
            let period = hc["CpuPeriod"]
                .as_i64()
                .filter(|p| *p > 0)
                .unwrap_or(100_000);
            Some(q as f64 / period as f64)
        }
        _ => None,
    };
    let pids = hc["PidsLimit"]
        .as_i64()
        .filter(|p| *p > 0)
        .map(|p| p.min(u32::MAX as i64) as u32);
    let create = CreateSandbox {
        image: Some(image.to_string()),
        memory: memory.map(|m| Amount::Number(m as f64)),
        cpus,
        pids,
        env,
        metadata: labels,
        host_binds: binds,
        read_only_root: hc["ReadonlyRootfs"].as_bool() == Some(true),
        ..Default::default()
    };
    let cwd = body["WorkingDir"]
        .as_str()
        .filter(|w| !w.is_empty())
        .map(str::to_string);
    Ok(Spec {
        create,
        entrypoint: strings(&body["Entrypoint"]).filter(|e| !e.is_empty()),
        cmd: strings(&body["Cmd"]),
        cwd,
        tty: body["Tty"].as_bool() == Some(true),
        auto_remove: hc["AutoRemove"].as_bool() == Some(true),
        anon_paths,
    })
}

pub(crate) async fn create(
    State(d): State<St>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> DResult<Response> {
    let caller = d.caller(&headers)?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| DockerError::bad(format!("the create body is not JSON: {e}")))?;
    let image = body["Image"]
        .as_str()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| DockerError::bad("Image: give the image to run"))?
        .to_string();
    let mut spec = spec_of(&body, &image)?;
    let name = q.get("name").cloned().unwrap_or_default();
    let name = name.trim_start_matches('/').to_string();
    if !name.is_empty() {
        check_name(&name)?;
    }
    // Names are one namespace for every caller, as on one Docker daemon.
    let taken = |n: &str| {
        d.containers
            .lock()
            .is_ok_and(|m| m.values().any(|c| c.name() == n))
    };
    if !name.is_empty() && taken(&name) {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Conflict. The container name \"/{name}\" is already in use"),
        ));
    }
    let svc = &d.st.service;
    let img = svc
        .inspect_image(&caller, &image)
        .await
        .map_err(|e| match e.kind {
            ErrorKind::NotFound => DockerError::no_image(&image),
            _ => e.into(),
        })?;
    let argv: Vec<String> = match (&spec.entrypoint, &spec.cmd) {
        (Some(ep), cmd) => ep.iter().chain(cmd.iter().flatten()).cloned().collect(),
        (None, Some(cmd)) if !cmd.is_empty() => {
            img.entrypoint.iter().chain(cmd.iter()).cloned().collect()
        }
        (None, _) => img
            .entrypoint
            .iter()
            .chain(img.cmd.iter())
            .cloned()
            .collect(),
    };
    if argv.is_empty() {
        return Err(DockerError::bad("No command specified"));
    }
    // The image as found: a name re-resolved at start could have been re-tagged since.
    spec.create.image = Some(img.image.digest.clone());
    // Docker's daemon fills an unset `User` from the image's config (and inspect shows it
    // so); an image that names none runs as its root — here uid 0 of the sandbox's own
    // namespace, mapped to the usual unprivileged host id, with no capability.
    let asked = body["User"].as_str().filter(|u| !u.is_empty());
    let user = asked.or(img.user.as_deref()).map(str::to_string);
    let run_as = match &user {
        Some(u) => user_ids(&d, &caller, &img.image.digest, u)
            .await
            .map_err(|e| match asked {
                Some(_) => e,
                None => DockerError(e.0, format!("{} (the image's config names this User)", e.1)),
            })?,
        None => IMAGE_ROOT,
    };
    spec.create.run_as = Some(run_as);
    spec.create.ttl = Some(Amount::Number(svc.config().max_ttl.as_secs() as f64));
    let mounts: Vec<Value> = spec
        .create
        .host_binds
        .iter()
        .map(|b| {
            json!({"Type": "bind", "Source": b.source, "Destination": b.dest, "Mode": "",
                "RW": b.writable, "Propagation": "rprivate"})
        })
        .collect();
    // `Volumes` (docker-py's `volumes=["/data"]`) not bound from the host: each an anonymous
    // volume of the service's, made for this container and deleted with it.
    let anon_volumes =
        anonymous_volumes(&d, &caller, &body, &spec.anon_paths, &mut spec.create).await?;
    let info = match svc.create(&caller, spec.create).await {
        Ok(info) => info,
        Err(e) => {
            delete_volumes(&d, &caller, &anon_volumes).await;
            return Err(e.into());
        }
    };
    let id = info.id.clone();
    let name = if name.is_empty() {
        format!("cordon_{}", id.rsplit('-').next().unwrap_or(&id))
    } else {
        name
    };
    let created = now_rfc3339();
    let mut config = body.clone();
    config["Image"] = json!(image);
    config["User"] = json!(user.unwrap_or_default());
    if let Some(o) = config.as_object_mut() {
        o.remove("HostConfig");
        o.remove("NetworkingConfig");
    }
    let c = Arc::new(Container {
        id: id.clone(),
        name: Mutex::new(name),
        caller,
        image,
        image_id: img.image.digest.clone(),
        created,
        created_unix: info.created_at as i64,
        argv,
        cwd: spec.cwd,
        tty: spec.tty,
        open_stdin: body["OpenStdin"].as_bool() == Some(true),
        stdin_once: body["StdinOnce"].as_bool() == Some(true),
        auto_remove: spec.auto_remove,
        run_as,
        mounts,
        anon_volumes,
        labels: info.metadata.clone(),
        config,
        host_config: {
            let mut hc = match &body["HostConfig"] {
                Value::Object(o) => Value::Object(o.clone()),
                _ => json!({}),
            };
            // What docker-py reads back: where the logs are (the door keeps them itself, so
            // any driver named is only a name), the runtime.
            let log_type = match hc["LogConfig"]["Type"].as_str() {
                Some(t) if !t.is_empty() => t.to_string(),
                _ => "json-file".to_string(),
            };
            let log_config = match &hc["LogConfig"]["Config"] {
                Value::Object(o) => Value::Object(o.clone()),
                _ => json!({}),
            };
            hc["LogConfig"] = json!({"Type": log_type, "Config": log_config});
            hc["NetworkMode"] = json!("none");
            if hc["Runtime"].as_str().is_none_or(str::is_empty) {
                hc["Runtime"] = json!("runc");
            }
            hc
        },
        output_limit: info
            .limits
            .as_ref()
            .map_or(1 << 20, |l| l.output_limit_bytes),
        run: Mutex::new(Run::Created),
        log: Mutex::new(Log::default()),
        changed: watch::channel(0).0,
    });
    if let Ok(mut m) = d.containers.lock() {
        m.insert(id.clone(), c);
    }
    let warnings: Vec<String> = Vec::new();
    Ok((
        StatusCode::CREATED,
        Json(json!({"Id": id, "Warnings": warnings})),
    )
        .into_response())
}

/// At most this many anonymous volumes per container (each capped as a volume is).
const MAX_ANON_VOLUMES: usize = 16;

/// Makes a volume for each path of the create's `Volumes` (and bare paths of its `Binds`) that
/// no bind covers, and adds it to the sandbox's mounts; their names (to delete with the
/// container).
async fn anonymous_volumes(
    d: &St,
    caller: &Caller,
    body: &Value,
    bare: &[String],
    create: &mut CreateSandbox,
) -> DResult<Vec<String>> {
    let mut paths: Vec<&String> = body["Volumes"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    paths.extend(bare.iter().filter(|b| {
        !body["Volumes"]
            .as_object()
            .is_some_and(|o| o.contains_key(b.as_str()))
    }));
    let paths: Vec<&String> = paths
        .into_iter()
        .filter(|p| {
            !create
                .host_binds
                .iter()
                .any(|b| b.dest.trim_end_matches('/') == p.trim_end_matches('/'))
        })
        .collect();
    if paths.len() > MAX_ANON_VOLUMES {
        return Err(DockerError::bad(format!(
            "Volumes: at most {MAX_ANON_VOLUMES} anonymous volumes per container"
        )));
    }
    let mut made = Vec::new();
    for path in paths {
        let name = format!("anon-{}", cordon_service::keys::random_hex(8));
        let req = cordon_service::volumes::CreateVolume {
            name: name.clone(),
            size: None,
        };
        if let Err(e) = d.st.service.create_volume(caller, req).await {
            delete_volumes(d, caller, &made).await;
            return Err(DockerError::new(
                crate::error::status_of(e.kind),
                format!("Volumes: {path}: {}", e.message),
            ));
        }
        made.push(name.clone());
        create.volumes.push(cordon_service::volumes::VolumeMount {
            name,
            path: path.clone(),
            readonly: false,
        });
    }
    Ok(made)
}

async fn delete_volumes(d: &St, caller: &Caller, names: &[String]) {
    for n in names {
        let _ = d.st.service.delete_volume(caller, n).await;
    }
}

/// A container name as Docker allows it (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`, here at most 128).
pub(crate) fn check_name(name: &str) -> DResult<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok
        || name.len() > 128
        || !chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(DockerError::bad(format!(
            "name: '{name}' must be [a-zA-Z0-9][a-zA-Z0-9_.-]*"
        )));
    }
    Ok(())
}

/// Docker's `User` (`name`, `uid`, `uid:gid`, `name:group`) as ids inside a sandbox of
/// `image`, resolved in the image's own user database; an error names the field.
pub(crate) async fn user_ids(
    d: &St,
    caller: &Caller,
    image: &str,
    user: &str,
) -> DResult<(u32, u32)> {
    d.st.service
        .image_user(caller, image, user)
        .await
        .map_err(|e| {
            DockerError::new(
                crate::error::status_of(e.kind),
                format!("User: {}", e.message.trim_start_matches("user: ")),
            )
        })
}

/// Docker's exit code and OOM flag for how a command ended.
pub(crate) fn exit_of(o: &cordon_policy::outcome::Outcome) -> (i64, bool) {
    use cordon_policy::outcome::Status;
    match o.status {
        Status::Exited => (o.exit_code.unwrap_or(0) as i64, false),
        Status::Signaled => (128 + o.signal.unwrap_or(9) as i64, false),
        Status::Oom => (137, true),
        Status::Timeout | Status::CpuTime => (137, false),
        Status::Error => (o.exit_code.map_or(125, |c| c as i64), false),
    }
}

pub(crate) async fn start(State(d): State<St>, Found(c): Found) -> DResult<Response> {
    if c.running() {
        return Ok(StatusCode::NOT_MODIFIED.into_response());
    }
    let svc = d.st.service.clone();
    let req = ExecRequest {
        cmd: Cmd::Argv(c.argv.clone()),
        cwd: c.cwd.clone(),
        env: BTreeMap::new(),
        stdin: None,
        timeout: Some(Amount::Number(
            svc.config().max_exec_timeout.as_secs().max(1) as f64,
        )),
        background: true,
        pty: c.tty.then_some(TERMINAL),
        tag: Some("docker".into()),
    };
    let (cmd, mut rx) = svc
        .exec_attached(&c.caller, &c.id, req, c.open_stdin)
        .await?;
    let started = now_rfc3339();
    c.set(Run::Running {
        cid: cmd.id.clone(),
        started: started.clone(),
    });
    let d2 = d.clone();
    let c2 = c.clone();
    tokio::spawn(async move {
        let mut outcome = None;
        loop {
            match rx.recv().await {
                Ok(ExecEvent::Stdout(b)) => c2.append(1, b),
                Ok(ExecEvent::Stderr(b)) => c2.append(2, b),
                Ok(ExecEvent::Exit(o)) => {
                    outcome = Some(*o);
                    break;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    if let Ok(mut l) = c2.log.lock() {
                        l.dropped = true;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
        if outcome.is_none() {
            outcome = d2
                .st
                .service
                .wait_command(
                    &c2.caller,
                    &c2.id,
                    &cmd.id,
                    Duration::from_secs(u32::MAX as u64),
                )
                .await
                .ok()
                .and_then(|i| i.outcome);
        }
        if outcome
            .as_ref()
            .is_some_and(|o| o.stdout_truncated || o.stderr_truncated)
        {
            // The service kept only the output limit's worth: so did the log.
            if let Ok(mut l) = c2.log.lock() {
                l.dropped = true;
            }
        }
        let ended = match &outcome {
            Some(o) => {
                let (code, oom) = exit_of(o);
                Ended {
                    code,
                    oom,
                    error: o.error.clone().unwrap_or_default(),
                    finished: now_rfc3339(),
                }
            }
            None => Ended {
                code: 137,
                oom: false,
                error: "the container's sandbox ended".into(),
                finished: now_rfc3339(),
            },
        };
        c2.set(Run::Exited { ended, started });
        if c2.auto_remove {
            remove_container(&d2, &c2).await;
        }
    });
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn remove_container(d: &St, c: &Arc<super::containers::Container>) {
    // Out of the list first: a client listing while the sandbox is being deleted (an
    // auto-remove under way) must not find a container that is about to vanish.
    if let Ok(mut m) = d.containers.lock() {
        m.remove(&c.id);
    }
    let _ = d.st.service.delete(&c.caller, &c.id).await;
    delete_volumes(d, &c.caller, &c.anon_volumes).await;
    if let Ok(mut m) = d.execs.lock() {
        m.retain(|_, e| e.container != c.id);
    }
    c.bump();
}

/// Until the container has exited (or, with `not_started_ok`, is not running).
async fn until_exited(c: &Container, not_started_ok: bool) -> Ended {
    let mut rx = c.changed.subscribe();
    loop {
        match c.state() {
            Run::Exited { ended, .. } => return ended,
            Run::Created if not_started_ok => {
                return Ended {
                    code: 0,
                    oom: false,
                    error: String::new(),
                    finished: String::new(),
                }
            }
            _ => {}
        }
        if rx.changed().await.is_err() {
            return Ended {
                code: 137,
                oom: false,
                error: "removed".into(),
                finished: now_rfc3339(),
            };
        }
    }
}

pub(crate) async fn wait(
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let not_running = q.get("condition").is_none_or(|c| c == "not-running");
    // The status goes out at once and the body when the container exits: the docker CLI
    // waits for the answer's headers before it starts the container.
    let (tx, rx) = mpsc::channel::<Vec<u8>>(1);
    tokio::spawn(async move {
        let e = until_exited(&c, not_running).await;
        let error = if e.error.is_empty() {
            Value::Null
        } else {
            json!({"Message": e.error})
        };
        let mut body =
            serde_json::to_vec(&json!({"StatusCode": e.code, "Error": error})).unwrap_or_default();
        body.push(b'\n');
        let _ = tx.send(body).await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, std::io::Error>(c), rx))
    });
    let mut r = Response::new(axum::body::Body::from_stream(stream));
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// Streams a container's output: what it wrote from the start, then (with `follow`) what
/// it writes until it exits.
fn follow_output(
    c: Arc<Container>,
    pick: Pick,
    follow: bool,
    mut tail: Option<usize>,
) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut changed = c.changed.subscribe();
        let mut at = 0;
        loop {
            changed.borrow_and_update();
            let exited = matches!(c.state(), Run::Exited { .. });
            let (chunks, next) = match tail.take() {
                Some(n) => c.tail_lines(n, &pick),
                None => c.chunks_from(at, &pick),
            };
            at = next;
            for ch in chunks {
                if tx.send(ch).await.is_err() {
                    return;
                }
            }
            if !follow || exited || pick.until.is_some_and(|u| unix_nanos() > u) {
                return;
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    });
    rx
}

pub(crate) async fn logs(
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let (stdout, stderr) = (truthy(&q, "stdout"), truthy(&q, "stderr"));
    if !stdout && !stderr {
        return Err(DockerError::bad(
            "You must choose at least one stream (stdout=1 or stderr=1)",
        ));
    }
    let tty = c.tty;
    // `tail=N`: the last N lines only (`all`, or none given: everything).
    let tail = match q.get("tail").map(String::as_str) {
        None | Some("") | Some("all") => None,
        Some(t) => Some(t.parse::<usize>().map_err(|_| {
            DockerError::bad(format!("tail: '{t}' is not a number of lines or 'all'"))
        })?),
    };
    let pick = Pick {
        since: time_bound(&q, "since")?,
        until: time_bound(&q, "until")?,
        timestamps: truthy(&q, "timestamps"),
        ..Pick::streams(stdout, stderr)
    };
    let rx = follow_output(c, pick, truthy(&q, "follow"), tail);
    Ok(stream::respond(None, rx, tty))
}

/// Feeds what an attached client sends to the stdin of command `cid` of sandbox `sid`;
/// at the client's end of input, closes it when `close` (`StdinOnce`, an exec's stdin).
pub(crate) fn feed_stdin(
    d: &St,
    caller: Caller,
    sid: String,
    cid: impl std::future::Future<Output = Option<String>> + Send + 'static,
    close: bool,
) -> stream::Input {
    let (tx, mut rx) = mpsc::channel::<Option<Vec<u8>>>(16);
    let svc = d.st.service.clone();
    tokio::spawn(async move {
        let Some(cid) = cid.await else { return };
        while let Some(chunk) = rx.recv().await {
            match chunk {
                Some(data) => {
                    if svc
                        .command_input(&caller, &sid, &cid, &data, false)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                None => {
                    if close {
                        let _ = svc.command_input(&caller, &sid, &cid, &[], true).await;
                    }
                    return;
                }
            }
        }
    });
    tx
}

/// The id of the container's main command once it has started (`None` if it ended first).
async fn started_cid(c: Arc<Container>) -> Option<String> {
    let mut changed = c.changed.subscribe();
    loop {
        match c.state() {
            Run::Running { cid, .. } => return Some(cid),
            Run::Exited { .. } => return None,
            Run::Created => {}
        }
        changed.changed().await.ok()?;
    }
}

/// `attach` (the CLI's `docker run` without `-d`): the hijacked connection gets the
/// container's output once it starts, until it exits; with `stdin=1` on a container created
/// with `OpenStdin`, what the client writes is the main process's stdin.
pub(crate) async fn attach(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
    mut req: Request,
) -> DResult<Response> {
    let upgrade = stream::take_upgrade(&mut req);
    let (stdout, stderr) = (truthy(&q, "stdout"), truthy(&q, "stderr"));
    let tty = c.tty;
    let detach =
        stream::detach_keys(q.get("detachKeys").map(String::as_str)).map_err(DockerError::bad)?;
    let input = (truthy(&q, "stdin") && c.open_stdin && upgrade.is_some()).then(|| {
        feed_stdin(
            &d,
            c.caller.clone(),
            c.id.clone(),
            started_cid(c.clone()),
            c.stdin_once,
        )
    });
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut changed = c.changed.subscribe();
        while matches!(c.state(), Run::Created) {
            if changed.changed().await.is_err() {
                return;
            }
        }
        let mut inner = follow_output(c, Pick::streams(stdout, stderr), true, None);
        while let Some(ch) = inner.recv().await {
            if tx.send(ch).await.is_err() {
                return;
            }
        }
    });
    Ok(stream::respond_duplex(upgrade, rx, tty, input, detach))
}

/// A terminal's size when a client has not said (Docker's default too).
pub(crate) const TERMINAL: cordon_service::types::PtySize =
    cordon_service::types::PtySize { rows: 24, cols: 80 };

/// The terminal size of `h` and `w` in a resize request's query.
pub(crate) fn size_of(q: &HashMap<String, String>) -> DResult<cordon_service::types::PtySize> {
    let n = |k: &str| {
        q.get(k)
            .and_then(|v| v.parse::<u16>().ok())
            .ok_or_else(|| DockerError::bad(format!("{k}: give the terminal's size (1 to 1000)")))
    };
    Ok(cordon_service::types::PtySize {
        rows: n("h")?,
        cols: n("w")?,
    })
}

/// `POST /containers/{id}/resize?h=…&w=…`: the main process's terminal (with `Tty`).
pub(crate) async fn resize(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let size = size_of(&q)?;
    let Some(cid) = main_cid(&c) else {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is not running", c.id),
        ));
    };
    if c.tty {
        d.st.service.command_resize(&c.caller, &c.id, &cid, size)?;
    }
    Ok(StatusCode::OK.into_response())
}

fn main_cid(c: &Container) -> Option<String> {
    match c.state() {
        Run::Running { cid, .. } => Some(cid),
        _ => None,
    }
}

pub(crate) async fn stop(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    if !stop_main(&d, &c, grace_of(&q)).await {
        return Ok(StatusCode::NOT_MODIFIED.into_response());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A stop's grace period (`t`, seconds; Docker's 10 when not given), at most 5 minutes.
pub(crate) fn grace_of(q: &HashMap<String, String>) -> u64 {
    q.get("t")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(10)
        .min(300)
}

/// Stops the main process as Docker does: SIGTERM, then SIGKILL after `grace` seconds;
/// false when it was not running.
pub(crate) async fn stop_main(d: &St, c: &Container, grace: u64) -> bool {
    let Some(cid) = main_cid(c) else {
        return false;
    };
    let svc = &d.st.service;
    // A frozen process takes no signal until it is thawed (Docker thaws it too).
    if paused(d, c) {
        let _ = svc.resume(&c.caller, &c.id).await;
    }
    let _ = svc.command_signal(&c.caller, &c.id, &cid, libc::SIGTERM);
    let ended = tokio::time::timeout(Duration::from_secs(grace), until_exited(c, false)).await;
    if ended.is_err() {
        let _ = svc.command_signal(&c.caller, &c.id, &cid, libc::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(10), until_exited(c, false)).await;
    }
    true
}

pub(crate) async fn kill(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    let Some(cid) = main_cid(&c) else {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is not running", c.id),
        ));
    };
    let signal = match q.get("signal").map(String::as_str) {
        None | Some("") => libc::SIGKILL,
        Some(s) => match s.parse::<i32>() {
            Ok(n) if (1..=64).contains(&n) => n,
            _ => cordon_service::types::signal_from_text(s)
                .ok_or_else(|| DockerError::bad(format!("signal: '{s}' is not a signal")))?,
        },
    };
    d.st.service
        .command_signal(&c.caller, &c.id, &cid, signal)?;
    if signal == libc::SIGKILL {
        // Docker's daemon answers a SIGKILL once the container has exited: an inspect right
        // after sees its exit code.
        let _ = tokio::time::timeout(Duration::from_secs(10), until_exited(&c, false)).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn remove(
    State(d): State<St>,
    Found(c): Found,
    Query(q): Query<HashMap<String, String>>,
) -> DResult<Response> {
    if c.running() && !truthy(&q, "force") {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!(
                "You cannot remove a running container {}. Stop the container before attempting removal or force remove",
                c.id
            ),
        ));
    }
    remove_container(&d, &c).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Whether the container's sandbox is frozen (`pause`), as the service says.
pub(crate) fn paused(d: &St, c: &Container) -> bool {
    d.st.service
        .get(&c.caller, &c.id)
        .is_ok_and(|i| i.state == cordon_service::types::SandboxState::Paused)
}

fn status_word(d: &St, c: &Container) -> (&'static str, String) {
    match c.state() {
        Run::Created => ("created", "Created".into()),
        Run::Running { .. } if paused(d, c) => ("paused", "Up (Paused)".into()),
        Run::Running { .. } => ("running", "Up".into()),
        Run::Exited { ended, .. } => ("exited", format!("Exited ({})", ended.code)),
    }
}

fn command_line(c: &Container) -> String {
    c.argv.join(" ")
}

pub(crate) async fn list(
    State(d): State<St>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let all = truthy(&q, "all");
    let filters: HashMap<String, Value> = q
        .get("filters")
        .and_then(|f| serde_json::from_str(f).ok())
        .unwrap_or_default();
    let wanted = |key: &str| -> Vec<String> {
        match filters.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            Some(Value::Object(o)) => o.keys().cloned().collect(),
            _ => Vec::new(),
        }
    };
    let (labels, statuses, names, ids) = (
        wanted("label"),
        wanted("status"),
        wanted("name"),
        wanted("id"),
    );
    let mut list: Vec<Arc<Container>> = d
        .containers
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    list.sort_by(|a, b| b.created.cmp(&a.created));
    let out: Vec<Value> = list
        .iter()
        .filter(|c| c.caller.key_id == caller.key_id)
        .filter(|c| all || c.running() || !statuses.is_empty())
        .filter(|c| statuses.is_empty() || statuses.iter().any(|s| s == status_word(&d, c).0))
        .filter(|c| {
            names.is_empty()
                || names
                    .iter()
                    .any(|n| c.name().contains(n.trim_start_matches('/')))
        })
        .filter(|c| ids.is_empty() || ids.iter().any(|i| c.id.starts_with(i.as_str())))
        .filter(|c| {
            labels.iter().all(|l| match l.split_once('=') {
                Some((k, v)) => c.labels.get(k).is_some_and(|x| x == v),
                None => c.labels.contains_key(l),
            })
        })
        .map(|c| {
            let (state, status) = status_word(&d, c);
            json!({
                "Id": c.id,
                "Names": [format!("/{}", c.name())],
                "Image": c.image,
                "ImageID": c.image_id,
                "Command": command_line(c),
                "Created": c.created_unix,
                "State": state,
                "Status": status,
                "Labels": c.labels,
                "Ports": [],
                "Mounts": c.mounts,
                "HostConfig": {"NetworkMode": "none"},
                "NetworkSettings": {"Networks": {}},
            })
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

pub(crate) async fn inspect(State(d): State<St>, Found(c): Found) -> DResult<Json<Value>> {
    let (status, _) = status_word(&d, &c);
    let (started, ended) = match c.state() {
        Run::Created => (String::new(), None),
        Run::Running { started, .. } => (started, None),
        Run::Exited { ended, started } => (started, Some(ended)),
    };
    let zero = "0001-01-01T00:00:00Z".to_string();
    Ok(Json(json!({
        "Id": c.id,
        "Created": c.created,
        "Path": c.argv.first().cloned().unwrap_or_default(),
        "Args": c.argv.iter().skip(1).collect::<Vec<_>>(),
        "State": {
            "Status": status,
            "Running": matches!(status, "running" | "paused"),
            "Paused": status == "paused",
            "Restarting": false,
            "OOMKilled": ended.as_ref().is_some_and(|e| e.oom),
            "Dead": false,
            "Pid": 0,
            "ExitCode": ended.as_ref().map_or(0, |e| e.code),
            "Error": ended.as_ref().map(|e| e.error.clone()).unwrap_or_default(),
            "StartedAt": if started.is_empty() { zero.clone() } else { started },
            "FinishedAt": ended.as_ref().map_or(zero, |e| e.finished.clone()),
        },
        "Image": c.image_id,
        "Name": format!("/{}", c.name()),
        "RestartCount": 0,
        "Driver": "cordon",
        "Platform": "linux",
        "Config": c.config,
        "HostConfig": c.host_config,
        "Mounts": c.mounts,
        "NetworkSettings": {"Networks": {}, "Ports": {}},
        "LogOutputTruncated": c.log.lock().map(|l| l.dropped).unwrap_or(false),
    })))
}

pub(crate) async fn top(State(d): State<St>, Found(c): Found) -> DResult<Json<Value>> {
    if !c.running() {
        return Err(DockerError::new(
            StatusCode::CONFLICT,
            format!("Container {} is not running", c.id),
        ));
    }
    let pids = d.st.service.sandbox_processes(&c.caller, &c.id).await?;
    let rows: Vec<Value> = pids.iter().map(|p| json!([p.to_string()])).collect();
    Ok(Json(json!({"Titles": ["PID"], "Processes": rows})))
}

pub(crate) async fn stats(
    State(d): State<St>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> DResult<Json<Value>> {
    let caller = d.caller(&headers)?;
    let c = d.find(&caller, &id)?;
    let pids =
        d.st.service
            .sandbox_processes(&c.caller, &c.id)
            .await
            .unwrap_or_default();
    let usage = d.st.service.process_usage(&pids, false);
    let limit = c.host_config["Memory"].as_i64().unwrap_or(0);
    Ok(Json(json!({
        "id": c.id,
        "name": format!("/{}", c.name()),
        "read": now_rfc3339(),
        "pids_stats": {"current": pids.len()},
        "memory_stats": {"usage": usage.rss_bytes, "limit": limit},
        "cpu_stats": {"cpu_usage": {"total_usage": usage.cpu_ns}},
        // One reading: no earlier one to compare with (Docker's first reading has none
        // either); a container has no network and cordon does not count block I/O.
        "precpu_stats": {"cpu_usage": {"total_usage": 0}},
        "blkio_stats": {},
        "networks": {},
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_power_a_create_asks_for_is_refused_naming_its_field() {
        for (hc, field) in [
            (json!({"Privileged": true}), "Privileged"),
            (json!({"CapAdd": ["SYS_ADMIN"]}), "CapAdd"),
            (json!({"Devices": [{"PathOnHost": "/dev/kmsg"}]}), "Devices"),
            (json!({"NetworkMode": "host"}), "NetworkMode"),
            (json!({"NetworkMode": "container:abc"}), "NetworkMode"),
            (json!({"PidMode": "host"}), "PidMode"),
            (json!({"IpcMode": "host"}), "IpcMode"),
            (json!({"UsernsMode": "host"}), "UsernsMode"),
            (
                json!({"SecurityOpt": ["apparmor=unconfined"]}),
                "SecurityOpt",
            ),
            (json!({"Sysctls": {"kernel.x": "1"}}), "Sysctls"),
            (json!({"OomKillDisable": true}), "OomKillDisable"),
        ] {
            let Err(DockerError(status, msg)) = refuse_powers(&hc) else {
                panic!("{hc} was not refused");
            };
            assert_eq!(status, StatusCode::FORBIDDEN, "{hc}");
            assert!(msg.contains(field), "{msg}");
        }
    }

    #[test]
    fn what_narrows_is_accepted() {
        let hc = json!({"NetworkMode": "none", "SecurityOpt": ["no-new-privileges"],
            "IpcMode": "private", "Memory": 536870912, "ReadonlyRootfs": true, "Tmpfs": {"/tmp": ""}});
        assert!(refuse_powers(&hc).is_ok());
        let body = json!({"HostConfig": hc, "Cmd": ["true"]});
        let Ok(spec) = spec_of(&body, "img") else {
            panic!("a narrowing create was refused");
        };
        assert!(spec.create.read_only_root);
        let bad_tmpfs = json!({"HostConfig": {"Tmpfs": {"/etc": ""}}});
        assert!(spec_of(&bad_tmpfs, "img").is_err());
    }

    #[test]
    fn what_cordon_cannot_honour_is_refused_naming_the_field_never_ignored() {
        for (hc, field) in [
            (json!({"GroupAdd": ["1000"]}), "GroupAdd"),
            (
                json!({"RestartPolicy": {"Name": "always"}}),
                "RestartPolicy",
            ),
            (json!({"LogConfig": {"Type": "syslog"}}), "log driver"),
        ] {
            let Err(DockerError(status, msg)) = refuse_powers(&hc) else {
                panic!("{hc} was not refused");
            };
            assert_eq!(status, StatusCode::BAD_REQUEST, "{hc}");
            assert!(msg.contains(field), "{msg}");
        }
        let ok = json!({"RestartPolicy": {"Name": "no"}, "LogConfig": {"Type": "json-file"}});
        assert!(refuse_powers(&ok).is_ok());
    }
}
