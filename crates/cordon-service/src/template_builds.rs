//! Templates built through a door (E2B's Template SDK): a name (`alias[:tag]`), its builds and
//! tags, the files their COPY steps upload, and the build itself — the steps translated into
//! a Dockerfile run by the one build engine `cordon image build` uses
//! ([`cordon_image::build`]), each RUN in a cordon sandbox. A create that names the alias
//! gets the built image, its start command started and its ready command waited for. Each
//! template is kept on disk as it changes ([`crate::template_store`]) and reloaded at start.
//!
//! Threat model: every byte of a request is hostile — names, steps, uploaded archives.
//! - Names and tags are short and of a fixed alphabet (they become image names and URL path
//!   segments); a template belongs to the key that built it and is invisible to other keys.
//! - The step list is capped ([`MAX_STEPS`]), every step's type and arguments are checked
//!   before anything runs (an unknown type is refused by name), and the translation writes
//!   each instruction in a form its text cannot break out of (JSON arrays, quoted values,
//!   no newlines): a step cannot become two instructions.
//! - An uploaded COPY archive is written only under the data directory, keyed by its hash
//!   (64 hex digits) and its key, capped in size; before it is unpacked every entry is
//!   checked: an absolute name, a `..` component, an entry below a symlink of the archive or a
//!   hard link leaving it refuses the whole build, by the entry's name. Unpacking then goes
//!   through the store's hostile-layer unpacker (nothing followed, setuid stripped, devices
//!   skipped, byte and entry caps), and the COPY itself through the build engine (sources
//!   opened beneath the context only).
//! - RUN steps have no network unless the server's build allowlist gives one (none by
//!   default), and the limits of the build request (capped by the server's).
//! - A base image the store lacks fails the build at once with a log line saying so, unless
//!   the server pulls missing images (`cordon serve --pull missing`); nothing waits forever.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::error::ServiceError;
use crate::templates::Template;
use crate::{Caller, Service};

/// Most steps one build may have.
pub const MAX_STEPS: usize = 1000;
/// Most bytes of one step's argument (a RUN script, a path, an env value).
pub const MAX_ARG: usize = 64 << 10;
/// Largest uploaded COPY archive.
pub const MAX_UPLOAD: u64 = 4 << 30;
/// Most entries one uploaded archive may hold.
const MAX_ENTRIES: u64 = 200_000;
/// Log lines kept per build (the rest are counted, not kept).
const MAX_LOG_LINES: usize = 20_000;
/// How long a create waits for a template's ready command to succeed.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);
/// The image E2B's `base` template is (its SDK's `from_base_image()`), looked up in the store
/// when a build starts from the server's `base` template, which has no image of its own.
pub const E2B_BASE_IMAGE: &str = "e2bdev/base";

/// A build's state as E2B reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BuildStatus {
    #[default]
    Waiting,
    Building,
    Ready,
    Error,
}

impl BuildStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStatus::Waiting => "waiting",
            BuildStatus::Building => "building",
            BuildStatus::Ready => "ready",
            BuildStatus::Error => "error",
        }
    }
}

/// One build log line.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub unix_ms: u64,
    /// `info` or `error`.
    pub level: &'static str,
    pub message: String,
}

#[derive(Debug, Default)]
struct BuildRec {
    status: Option<BuildStatus>,
    logs: Vec<LogLine>,
    /// The log is on disk, not in `logs` (a build of an earlier run of the server).
    log_kept: bool,
    reason: Option<String>,
    image: Option<String>,
    start_cmd: Option<String>,
    ready_cmd: Option<String>,
    created_ms: u64,
    finished_ms: Option<u64>,
}

impl BuildRec {
    fn log(&mut self, level: &'static str, message: &str) {
        if self.logs.len() < MAX_LOG_LINES {
            self.logs.push(LogLine {
                unix_ms: crate::unix_ms(),
                level,
                message: message.chars().take(4096).collect(),
            });
        }
    }
}

#[derive(Debug)]
struct Tmpl {
    owner: String,
    id: String,
    alias: String,
    /// tag -> (build id, created, unix ms)
    tags: BTreeMap<String, (String, u64)>,
    builds: HashMap<String, Arc<Mutex<BuildRec>>>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    created_ms: u64,
    updated_ms: u64,
    /// Sandboxes created from it since the server started, and when the last one was.
    spawns: u64,
    last_spawn_ms: Option<u64>,
}

impl Tmpl {
    /// What is kept on disk of it.
    fn stored(&self) -> crate::template_store::StoredTemplate {
        use crate::template_store::{StoredBuild, StoredTag, StoredTemplate};
        StoredTemplate {
            version: 1,
            owner: self.owner.clone(),
            id: self.id.clone(),
            alias: self.alias.clone(),
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            tags: self
                .tags
                .iter()
                .map(|(t, (b, at))| {
                    (
                        t.clone(),
                        StoredTag {
                            build: b.clone(),
                            at_ms: *at,
                        },
                    )
                })
                .collect(),
            builds: self
                .builds
                .iter()
                .filter_map(|(b, r)| {
                    let r = r.lock().ok()?;
                    Some((
                        b.clone(),
                        StoredBuild {
                            status: r.status.unwrap_or(BuildStatus::Waiting).as_str().into(),
                            reason: r.reason.clone(),
                            image: r.image.clone(),
                            start_cmd: r.start_cmd.clone(),
                            ready_cmd: r.ready_cmd.clone(),
                            created_ms: r.created_ms,
                            finished_ms: r.finished_ms,
                        },
                    ))
                })
                .collect(),
        }
    }

    /// Its newest build that succeeded, else its newest build: (build id, record).
    fn latest(&self) -> Option<(&String, &Arc<Mutex<BuildRec>>)> {
        let key = |r: &Arc<Mutex<BuildRec>>| {
            r.lock()
                .map(|r| (r.image.is_some(), r.created_ms))
                .unwrap_or((false, 0))
        };
        self.builds.iter().max_by_key(|(_, r)| key(r))
    }
}

/// A build's status, as a door reports it.
#[derive(Debug, Clone)]
pub struct BuildView {
    pub template_id: String,
    pub build_id: String,
    pub status: BuildStatus,
    /// The log lines from the offset asked for (at most the limit asked for).
    pub logs: Vec<LogLine>,
    pub reason: Option<String>,
}

/// What a build request made.
#[derive(Debug, Clone)]
pub struct Requested {
    pub template_id: String,
    pub build_id: String,
    pub alias: String,
    pub tags: Vec<String>,
}

/// One tag of a template.
#[derive(Debug, Clone)]
pub struct TagView {
    pub tag: String,
    pub build_id: String,
    pub created_ms: u64,
}

/// A built template, as a listing shows it.
#[derive(Debug, Clone)]
pub struct TemplateView {
    pub template_id: String,
    pub alias: String,
    /// Its newest successful build, else its newest build.
    pub build_id: String,
    /// That build's status.
    pub build_status: BuildStatus,
    pub build_count: usize,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// The scratch disk a sandbox of it gets.
    pub disk_mb: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Sandboxes created from it since the server started.
    pub spawns: u64,
    pub last_spawn_ms: Option<u64>,
}

/// One build of a template, as a template's details show it.
#[derive(Debug, Clone)]
pub struct BuildInfo {
    pub build_id: String,
    pub status: BuildStatus,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
}

/// A template build's definition, as E2B's SDK sends it (`TemplateBuildStartV2`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildSpec {
    #[serde(default)]
    pub from_image: Option<String>,
    #[serde(default)]
    pub from_template: Option<String>,
    #[serde(default)]
    pub from_image_registry: Option<serde_json::Value>,
    #[serde(default)]
    pub force: Option<bool>,
    #[serde(default)]
    pub steps: Option<Vec<Step>>,
    #[serde(default)]
    pub start_cmd: Option<String>,
    #[serde(default)]
    pub ready_cmd: Option<String>,
}

/// One step (`TemplateStep`): a type and its string arguments.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub force: Option<bool>,
    #[serde(default)]
    pub files_hash: Option<String>,
    #[serde(default)]
    pub force_upload: Option<bool>,
}

/// Builds that run at once on a server; more wait their turn (reported as building).
const MAX_RUNNING: usize = 4;

/// Every door-built template of this server.
#[derive(Debug, Default)]
pub struct Builds {
    by_id: Mutex<HashMap<String, Tmpl>>,
    /// Builds running now (at most [`MAX_RUNNING`]), and the wake-up of those waiting.
    running: Mutex<usize>,
    turn: std::sync::Condvar,
    /// Upload tokens: token -> (key id, files hash, expiry unix ms).
    uploads: Mutex<HashMap<String, (String, String, u64)>>,
}

fn random_hex(bytes: usize) -> Result<String, ServiceError> {
    let mut b = vec![0u8; bytes];
    getrandom::getrandom(&mut b).map_err(|e| ServiceError::internal(format!("random: {e}")))?;
    Ok(hex::encode(b))
}

fn uuid4() -> Result<String, ServiceError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| ServiceError::internal(format!("random: {e}")))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

/// An alias: what becomes part of an image name and a URL segment.
pub fn valid_alias(a: &str) -> bool {
    (1..=64).contains(&a.len())
        && a.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && a.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
}

/// A tag: an image tag's alphabet, no colon.
pub fn valid_tag(t: &str) -> bool {
    (1..=128).contains(&t.len())
        && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `alias[:tag]` split and checked; the tag defaults to `default`.
pub fn split_name(name: &str) -> Result<(String, String), ServiceError> {
    let (alias, tag) = match name.split_once(':') {
        Some((a, t)) => (a, t),
        None => (name, "default"),
    };
    if !valid_alias(alias) {
        return Err(ServiceError::bad_request(format!(
            "template name '{}': the name must be 1-64 lowercase letters, digits, '-', '_' or '.' (then optionally ':TAG')",
            name.chars().take(80).collect::<String>()
        )));
    }
    if !valid_tag(tag) {
        return Err(ServiceError::bad_request(format!(
            "template tag '{}': a tag is 1-128 letters, digits, '-', '_' or '.'",
            tag.chars().take(80).collect::<String>()
        )));
    }
    Ok((alias.to_string(), tag.to_string()))
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where a key's uploaded COPY archives are kept.
fn upload_dir(data_dir: &Path, key_id: &str) -> PathBuf {
    data_dir
        .join("template-files")
        .join(hex::encode(key_id.as_bytes()))
}

fn image_name(template_id: &str, build_id: &str) -> String {
    format!("e2b-template-{template_id}:{build_id}")
}

/// A running build's place, given back on drop.
struct Slot<'a>(&'a Builds);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Ok(mut n) = self.0.running.lock() {
            *n = n.saturating_sub(1);
        }
        self.0.turn.notify_one();
    }
}

impl Builds {
    /// Waits for a place among the running builds.
    fn slot(&self) -> Slot<'_> {
        if let Ok(mut n) = self.running.lock() {
            while *n >= MAX_RUNNING {
                match self.turn.wait(n) {
                    Ok(g) => n = g,
                    Err(_) => return Slot(self),
                }
            }
            *n += 1;
        }
        Slot(self)
    }

    fn find<'a>(
        map: &'a HashMap<String, Tmpl>,
        owner: &str,
        id_or_alias: &str,
    ) -> Option<&'a Tmpl> {
        map.values()
            .find(|t| t.owner == owner && (t.id == id_or_alias || t.alias == id_or_alias))
    }
}

impl Service {
    /// Writes `t` to disk (see [`crate::template_store`]).
    fn keep_template(&self, t: &Tmpl) -> Result<(), ServiceError> {
        crate::template_store::save(&self.cfg.data_dir, &t.stored())
            .map_err(|e| ServiceError::internal(format!("keeping template '{}': {e}", t.alias)))
    }

    /// As a build ends: its log and its template kept, unless the template was deleted
    /// meanwhile. A failure loses only what a restart would lose, and is said on stderr.
    fn keep_finished_build(
        &self,
        owner: &str,
        id: &str,
        build: &str,
        lines: &[crate::template_store::StoredLine],
    ) {
        let Ok(map) = self.template_builds.by_id.lock() else {
            return;
        };
        let Some(t) = map.get(id).filter(|t| t.owner == owner) else {
            return;
        };
        let kept = crate::template_store::save_log(&self.cfg.data_dir, owner, id, build, lines)
            .map_err(|e| ServiceError::internal(e.to_string()))
            .and_then(|()| self.keep_template(t));
        match kept {
            Ok(()) => {
                if let Some(Ok(mut r)) = t.builds.get(build).map(|r| r.lock()) {
                    // The log is read from disk from now on; memory holds only the running.
                    r.log_kept = true;
                    r.logs = Vec::new();
                }
            }
            Err(e) => eprintln!(
                "cordon: warning: template '{}' build {build} not kept: {}",
                t.alias, e.message
            ),
        }
    }

    /// At start: the templates an earlier run built. A build that was under way when that
    /// run stopped is an error now (it cannot resume), kept so.
    pub(crate) fn load_built_templates(&self) {
        // Scratch contexts of builds cut off by the stop.
        let _ = std::fs::remove_dir_all(self.cfg.data_dir.join("template-builds"));
        let Ok(mut map) = self.template_builds.by_id.lock() else {
            return;
        };
        for st in crate::template_store::load_all(&self.cfg.data_dir) {
            let mut cut = false;
            let builds = st
                .builds
                .iter()
                .map(|(b, r)| {
                    let mut status = match r.status.as_str() {
                        "ready" => BuildStatus::Ready,
                        "error" => BuildStatus::Error,
                        "building" => BuildStatus::Building,
                        _ => BuildStatus::Waiting,
                    };
                    let mut reason = r.reason.clone();
                    let mut image = r.image.clone();
                    if !matches!(status, BuildStatus::Ready | BuildStatus::Error) {
                        cut = true;
                        status = BuildStatus::Error;
                        image = None;
                        reason = Some(
                            "the server stopped before this build finished; build the template again"
                                .into(),
                        );
                    }
                    if status == BuildStatus::Error {
                        image = None;
                    }
                    let rec = BuildRec {
                        status: Some(status),
                        logs: Vec::new(),
                        log_kept: true,
                        reason,
                        image,
                        start_cmd: r.start_cmd.clone(),
                        ready_cmd: r.ready_cmd.clone(),
                        created_ms: r.created_ms,
                        finished_ms: r.finished_ms,
                    };
                    (b.clone(), Arc::new(Mutex::new(rec)))
                })
                .collect();
            let t = Tmpl {
                owner: st.owner.clone(),
                id: st.id.clone(),
                alias: st.alias.clone(),
                tags: st
                    .tags
                    .iter()
                    .map(|(t, g)| (t.clone(), (g.build.clone(), g.at_ms)))
                    .collect(),
                builds,
                cpus: st.cpus,
                memory_mb: st.memory_mb,
                created_ms: st.created_ms,
                updated_ms: st.updated_ms,
                spawns: 0,
                last_spawn_ms: None,
            };
            // Two files claiming one alias of one key (only a hand edit makes that): the
            // first loaded keeps it.
            if Builds::find(&map, &t.owner, &t.alias).is_some() {
                eprintln!(
                    "cordon: warning: built template {} not loaded: its alias '{}' is taken",
                    t.id, t.alias
                );
                continue;
            }
            if cut {
                if let Err(e) = self.keep_template(&t) {
                    eprintln!("cordon: warning: {}", e.message);
                }
            }
            map.insert(t.id.clone(), t);
        }
    }

    /// Counts a sandbox created from a built template (E2B's `spawnCount`).
    pub(crate) fn template_spawned(&self, key_id: &str, name: &str) {
        let alias = name.split_once(':').map(|(a, _)| a).unwrap_or(name);
        let Ok(mut map) = self.template_builds.by_id.lock() else {
            return;
        };
        let Some(id) = Builds::find(&map, key_id, alias).map(|t| t.id.clone()) else {
            return;
        };
        if let Some(t) = map.get_mut(&id) {
            t.spawns += 1;
            t.last_spawn_ms = Some(crate::unix_ms());
        }
    }

    fn template_view(t: &Tmpl) -> TemplateView {
        let (build_id, build_status) = t
            .latest()
            .map(|(b, r)| {
                (
                    b.clone(),
                    r.lock()
                        .ok()
                        .and_then(|r| r.status)
                        .unwrap_or(BuildStatus::Waiting),
                )
            })
            .unwrap_or_default();
        TemplateView {
            template_id: t.id.clone(),
            alias: t.alias.clone(),
            build_id,
            build_status,
            build_count: t.builds.len(),
            cpus: t.cpus,
            memory_mb: t.memory_mb,
            disk_mb: crate::templates::BUILTIN_DISK >> 20,
            created_ms: t.created_ms,
            updated_ms: t.updated_ms,
            spawns: t.spawns,
            last_spawn_ms: t.last_spawn_ms,
        }
    }

    /// E2B's `GET /templates`: the caller's built templates, oldest first.
    pub fn template_list(&self, caller: &Caller) -> Result<Vec<TemplateView>, ServiceError> {
        let map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let mut out: Vec<TemplateView> = map
            .values()
            .filter(|t| t.owner == caller.key_id)
            .map(Self::template_view)
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.template_id).cmp(&(b.created_ms, &b.template_id)));
        Ok(out)
    }

    /// E2B's `GET /templates/{id}`: one of the caller's built templates and its builds, newest
    /// first.
    pub fn template_get(
        &self,
        caller: &Caller,
        id_or_alias: &str,
    ) -> Result<(TemplateView, Vec<BuildInfo>), ServiceError> {
        let map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let t = Builds::find(&map, &caller.key_id, id_or_alias)
            .ok_or_else(|| ServiceError::not_found(format!("no template '{id_or_alias}'")))?;
        let mut builds: Vec<BuildInfo> = t
            .builds
            .iter()
            .filter_map(|(b, r)| {
                let r = r.lock().ok()?;
                Some(BuildInfo {
                    build_id: b.clone(),
                    status: r.status.unwrap_or(BuildStatus::Waiting),
                    created_ms: r.created_ms,
                    finished_ms: r.finished_ms,
                })
            })
            .collect();
        builds.sort_by_key(|b| std::cmp::Reverse(b.created_ms));
        Ok((Self::template_view(t), builds))
    }

    /// E2B's `POST /v3/templates`: a new build of `alias[:tag]` (the template is made on its
    /// first build), plus `tags` to give it once it is ready.
    pub fn template_request(
        &self,
        caller: &Caller,
        name: &str,
        extra_tags: &[String],
        cpus: Option<f64>,
        memory_mb: Option<u64>,
    ) -> Result<Requested, ServiceError> {
        let (alias, tag) = split_name(name)?;
        if self.cfg.templates.get(&alias).is_some() {
            return Err(ServiceError::conflict(format!(
                "template '{alias}' is one of this server's own templates (cordon serve --templates); build under another name"
            )));
        }
        let mut tags = vec![tag];
        for t in extra_tags {
            if !valid_tag(t) {
                return Err(ServiceError::bad_request(format!(
                    "tag '{}': a tag is 1-128 letters, digits, '-', '_' or '.'",
                    t.chars().take(80).collect::<String>()
                )));
            }
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        if tags.len() > 32 {
            return Err(ServiceError::bad_request("at most 32 tags per build"));
        }
        if let Some(c) = cpus {
            if !(c.is_finite() && c > 0.0 && c <= 64.0) {
                return Err(ServiceError::bad_request("cpuCount: 1 to 64"));
            }
        }
        if memory_mb.is_some_and(|m| !(64..=(1 << 20)).contains(&m)) {
            return Err(ServiceError::bad_request("memoryMB: 64 to 1048576"));
        }
        let build_id = uuid4()?;
        let mut map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let owned = map.values().filter(|t| t.owner == caller.key_id).count();
        let now = crate::unix_ms();
        let (template_id, is_new) = match Builds::find(&map, &caller.key_id, &alias) {
            Some(t) => (t.id.clone(), false),
            None => {
                if owned >= 1000 {
                    return Err(ServiceError::conflict("at most 1000 templates per key"));
                }
                let id = random_hex(10)?;
                map.insert(
                    id.clone(),
                    Tmpl {
                        owner: caller.key_id.clone(),
                        id: id.clone(),
                        alias: alias.clone(),
                        tags: BTreeMap::new(),
                        builds: HashMap::new(),
                        cpus,
                        memory_mb,
                        created_ms: now,
                        updated_ms: now,
                        spawns: 0,
                        last_spawn_ms: None,
                    },
                );
                (id, true)
            }
        };
        let t = map
            .get_mut(&template_id)
            .ok_or_else(|| ServiceError::internal("template vanished"))?;
        if t.builds.len() >= 1000 {
            return Err(ServiceError::conflict("at most 1000 builds per template"));
        }
        let before = (t.cpus, t.memory_mb, t.updated_ms, t.tags.clone());
        t.cpus = cpus.or(t.cpus);
        t.memory_mb = memory_mb.or(t.memory_mb);
        t.updated_ms = now;
        let rec = BuildRec {
            status: Some(BuildStatus::Waiting),
            created_ms: now,
            ..Default::default()
        };
        t.builds.insert(build_id.clone(), Arc::new(Mutex::new(rec)));
        // The tags are the build's from now: E2B answers them at once.
        for tg in &tags {
            t.tags.insert(tg.clone(), (build_id.clone(), now));
        }
        // Kept before it is answered; what cannot be kept is not made.
        if let Err(e) = self.keep_template(t) {
            if is_new {
                map.remove(&template_id);
                let _ =
                    crate::template_store::remove(&self.cfg.data_dir, &caller.key_id, &template_id);
            } else {
                t.builds.remove(&build_id);
                (t.cpus, t.memory_mb, t.updated_ms, t.tags) = before;
            }
            return Err(e);
        }
        Ok(Requested {
            template_id,
            build_id,
            alias,
            tags,
        })
    }

    /// E2B's `GET /templates/{id}/files/{hash}`: whether the caller's archive of that hash is
    /// here, and a one-hour token to upload it with (the door makes it a URL of its own).
    pub fn template_upload_link(
        &self,
        caller: &Caller,
        template_id: &str,
        hash: &str,
    ) -> Result<(bool, String), ServiceError> {
        if !valid_hash(hash) {
            return Err(ServiceError::bad_request(
                "files hash: 64 hexadecimal digits",
            ));
        }
        {
            let map = self
                .template_builds
                .by_id
                .lock()
                .map_err(|_| ServiceError::internal("lock"))?;
            if Builds::find(&map, &caller.key_id, template_id).is_none() {
                return Err(ServiceError::not_found(format!(
                    "no template '{template_id}'"
                )));
            }
        }
        let hash = hash.to_ascii_lowercase();
        let present = upload_dir(&self.cfg.data_dir, &caller.key_id)
            .join(format!("{hash}.tar"))
            .is_file();
        let token = random_hex(24)?;
        let mut up = self
            .template_builds
            .uploads
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let now = crate::unix_ms();
        up.retain(|_, (_, _, exp)| *exp > now);
        if up.len() >= 10_000 {
            return Err(ServiceError::conflict("too many uploads under way"));
        }
        up.insert(
            token.clone(),
            (caller.key_id.clone(), hash, now + 3_600_000),
        );
        Ok((present, token))
    }

    /// The upload a token allows: the body is written (at most [`MAX_UPLOAD`] bytes) as that
    /// key's archive of that hash. The token is the only credential (E2B's SDK PUTs to a
    /// presigned URL without its API key); it works once.
    pub fn template_upload(&self, token: &str, body: &mut dyn Read) -> Result<(), ServiceError> {
        let (key, hash) = {
            let mut up = self
                .template_builds
                .uploads
                .lock()
                .map_err(|_| ServiceError::internal("lock"))?;
            match up.remove(token) {
                Some((k, h, exp)) if exp > crate::unix_ms() => (k, h),
                _ => {
                    return Err(ServiceError::not_found(
                        "no such upload (the link is unknown, used or expired)",
                    ))
                }
            }
        };
        let dir = upload_dir(&self.cfg.data_dir, &key);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ServiceError::internal(format!("{}: {e}", dir.display())))?;
        let tmp = dir.join(format!(".{hash}.{}", random_hex(8)?));
        let res = (|| -> Result<(), ServiceError> {
            let mut f = std::fs::File::create(&tmp)
                .map_err(|e| ServiceError::internal(format!("{}: {e}", tmp.display())))?;
            let n = std::io::copy(&mut body.take(MAX_UPLOAD + 1), &mut f)
                .map_err(|e| ServiceError::bad_request(format!("reading the upload: {e}")))?;
            if n > MAX_UPLOAD {
                return Err(ServiceError::new(
                    crate::error::ErrorKind::TooLarge,
                    "too_large",
                    format!("an uploaded archive is at most {MAX_UPLOAD} bytes"),
                ));
            }
            std::fs::rename(&tmp, dir.join(format!("{hash}.tar")))
                .map_err(|e| ServiceError::internal(e.to_string()))
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res
    }

    /// E2B's `POST /v2/templates/{id}/builds/{build}`: checks the definition and starts the
    /// build in the background (its progress in [`Service::template_build_status`]).
    pub fn template_build_start(
        self: &Arc<Self>,
        caller: &Caller,
        template_id: &str,
        build_id: &str,
        spec: BuildSpec,
    ) -> Result<(), ServiceError> {
        let (tid, rec, cpus, memory_mb) = {
            let map = self
                .template_builds
                .by_id
                .lock()
                .map_err(|_| ServiceError::internal("lock"))?;
            let t = Builds::find(&map, &caller.key_id, template_id)
                .ok_or_else(|| ServiceError::not_found(format!("no template '{template_id}'")))?;
            let rec = t
                .builds
                .get(build_id)
                .cloned()
                .ok_or_else(|| ServiceError::not_found(format!("no build '{build_id}'")))?;
            (t.id.clone(), rec, t.cpus, t.memory_mb)
        };
        let plan = self.plan_build(caller, &spec)?;
        {
            let mut r = rec.lock().map_err(|_| ServiceError::internal("lock"))?;
            if r.status != Some(BuildStatus::Waiting) {
                return Err(ServiceError::conflict(format!(
                    "build '{build_id}' was started already"
                )));
            }
            r.status = Some(BuildStatus::Building);
            r.start_cmd = spec.start_cmd.clone();
            r.ready_cmd = spec.ready_cmd.clone();
        }
        // The start and ready commands are kept with the build before it starts.
        let kept = match self.template_builds.by_id.lock() {
            Ok(map) => map.get(&tid).map_or(Ok(()), |t| self.keep_template(t)),
            Err(_) => Err(ServiceError::internal("lock")),
        };
        if let Err(e) = kept {
            if let Ok(mut r) = rec.lock() {
                r.status = Some(BuildStatus::Waiting);
            }
            return Err(e);
        }
        let svc = self.clone();
        let image = image_name(&tid, build_id);
        let (owner, bid) = (caller.key_id.clone(), build_id.to_string());
        std::thread::Builder::new()
            .name("template-build".into())
            .spawn(move || {
                let out = {
                    let _slot = svc.template_builds.slot();
                    svc.run_build(&plan, &image, cpus, memory_mb, &rec)
                };
                let lines = match rec.lock() {
                    Ok(mut r) => {
                        match out {
                            Ok(()) => {
                                r.log("info", "Build finished");
                                r.image = Some(image);
                                r.status = Some(BuildStatus::Ready);
                            }
                            Err(e) => {
                                r.log("error", &e);
                                r.reason = Some(e);
                                r.status = Some(BuildStatus::Error);
                            }
                        }
                        r.finished_ms = Some(crate::unix_ms());
                        r.logs
                            .iter()
                            .map(|l| crate::template_store::StoredLine {
                                ms: l.unix_ms,
                                level: l.level.into(),
                                message: l.message.clone(),
                            })
                            .collect::<Vec<_>>()
                    }
                    Err(_) => Vec::new(),
                };
                svc.keep_finished_build(&owner, &tid, &bid, &lines);
            })
            .map_err(|e| ServiceError::internal(format!("starting the build: {e}")))?;
        Ok(())
    }

    /// A build's status and its log from `offset` (at most `limit` lines).
    pub fn template_build_status(
        &self,
        caller: &Caller,
        template_id: &str,
        build_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<BuildView, ServiceError> {
        let map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let t = Builds::find(&map, &caller.key_id, template_id)
            .ok_or_else(|| ServiceError::not_found(format!("no template '{template_id}'")))?;
        let rec = t
            .builds
            .get(build_id)
            .ok_or_else(|| ServiceError::not_found(format!("no build '{build_id}'")))?;
        let (owner, id) = (t.owner.clone(), t.id.clone());
        let r = rec.lock().map_err(|_| ServiceError::internal("lock"))?;
        let status = match r.status {
            // Queued or under way: E2B's SDK waits on both, and reports "building".
            Some(BuildStatus::Waiting) | None => BuildStatus::Waiting,
            Some(s) => s,
        };
        let reason = r.reason.clone();
        let logs = match r.log_kept {
            true => None,
            false => Some(r.logs.iter().skip(offset).take(limit).cloned().collect()),
        };
        drop(r);
        drop(map);
        // A finished build's log is on disk: read with no lock held.
        let logs = logs.unwrap_or_else(|| {
            crate::template_store::read_log(&self.cfg.data_dir, &owner, &id, build_id)
                .into_iter()
                .skip(offset)
                .take(limit)
                .map(|l| LogLine {
                    unix_ms: l.ms,
                    level: if l.level == "error" { "error" } else { "info" },
                    message: l.message,
                })
                .collect()
        });
        Ok(BuildView {
            template_id: id,
            build_id: build_id.to_string(),
            status,
            logs,
            reason,
        })
    }

    /// Whether `alias` names a template the caller may create from: the server's own, or
    /// one the caller built (its id when so).
    pub fn template_alias(&self, caller: &Caller, alias: &str) -> Option<String> {
        if self.cfg.templates.get(alias).is_some() {
            return Some(alias.to_string());
        }
        let map = self.template_builds.by_id.lock().ok()?;
        let a = alias.split_once(':').map(|(a, _)| a).unwrap_or(alias);
        Builds::find(&map, &caller.key_id, a).map(|t| t.id.clone())
    }

    /// E2B's `POST /templates/tags`: `tags` for the build `target` (`alias:tag`) names.
    pub fn template_assign_tags(
        &self,
        caller: &Caller,
        target: &str,
        tags: &[String],
    ) -> Result<(String, Vec<String>), ServiceError> {
        let (alias, tag) = split_name(target)?;
        if tags.is_empty() || tags.len() > 32 {
            return Err(ServiceError::bad_request("tags: 1 to 32 tags"));
        }
        for t in tags {
            if !valid_tag(t) {
                return Err(ServiceError::bad_request(format!(
                    "tag '{}': a tag is 1-128 letters, digits, '-', '_' or '.' (no ':')",
                    t.chars().take(80).collect::<String>()
                )));
            }
        }
        let mut map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let id = Builds::find(&map, &caller.key_id, &alias)
            .map(|t| t.id.clone())
            .ok_or_else(|| ServiceError::not_found(format!("no template '{alias}'")))?;
        let t = map
            .get_mut(&id)
            .ok_or_else(|| ServiceError::internal("template vanished"))?;
        let build = t.tags.get(&tag).map(|(b, _)| b.clone()).ok_or_else(|| {
            ServiceError::not_found(format!("template '{alias}' has no tag '{tag}'"))
        })?;
        let now = crate::unix_ms();
        let before = (t.tags.clone(), t.updated_ms);
        for tg in tags {
            t.tags.insert(tg.clone(), (build.clone(), now));
        }
        t.updated_ms = now;
        if let Err(e) = self.keep_template(t) {
            (t.tags, t.updated_ms) = before;
            return Err(e);
        }
        Ok((build, tags.to_vec()))
    }

    /// E2B's `DELETE /templates/tags`.
    pub fn template_remove_tags(
        &self,
        caller: &Caller,
        name: &str,
        tags: &[String],
    ) -> Result<(), ServiceError> {
        let alias = name.split_once(':').map(|(a, _)| a).unwrap_or(name);
        let mut map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let id = Builds::find(&map, &caller.key_id, alias)
            .map(|t| t.id.clone())
            .ok_or_else(|| ServiceError::not_found(format!("no template '{alias}'")))?;
        if let Some(t) = map.get_mut(&id) {
            let before = (t.tags.clone(), t.updated_ms);
            for tg in tags {
                t.tags.remove(tg);
            }
            t.updated_ms = crate::unix_ms();
            if let Err(e) = self.keep_template(t) {
                (t.tags, t.updated_ms) = before;
                return Err(e);
            }
        }
        Ok(())
    }

    /// E2B's `GET /templates/{id}/tags`.
    pub fn template_tags(
        &self,
        caller: &Caller,
        id_or_alias: &str,
    ) -> Result<Vec<TagView>, ServiceError> {
        let map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let t = Builds::find(&map, &caller.key_id, id_or_alias)
            .ok_or_else(|| ServiceError::not_found(format!("no template '{id_or_alias}'")))?;
        Ok(t.tags
            .iter()
            .map(|(tag, (b, at))| TagView {
                tag: tag.clone(),
                build_id: b.clone(),
                created_ms: *at,
            })
            .collect())
    }

    /// Deletes a built template (its images stay in the store until pruned). `false`: the
    /// caller has no such template.
    pub fn template_delete(
        &self,
        caller: &Caller,
        id_or_alias: &str,
    ) -> Result<bool, ServiceError> {
        let mut map = self
            .template_builds
            .by_id
            .lock()
            .map_err(|_| ServiceError::internal("lock"))?;
        let Some(id) = Builds::find(&map, &caller.key_id, id_or_alias).map(|t| t.id.clone()) else {
            return Ok(false);
        };
        // Gone from disk first: a template answered deleted never comes back at a restart.
        crate::template_store::remove(&self.cfg.data_dir, &caller.key_id, &id).map_err(|e| {
            ServiceError::internal(format!("deleting template '{id_or_alias}': {e}"))
        })?;
        map.remove(&id);
        Ok(true)
    }

    /// What a create naming `name` (`alias[:tag]` or a template id) of the caller's gets: the
    /// template (its built image) and the start and ready commands. `None`: no such ready
    /// build.
    pub(crate) fn built_template(
        &self,
        key_id: &str,
        name: &str,
    ) -> Option<(Template, Option<String>, Option<String>)> {
        let (alias, tag) = match name.split_once(':') {
            Some((a, t)) => (a, t),
            None => (name, "default"),
        };
        let map = self.template_builds.by_id.lock().ok()?;
        let t = Builds::find(&map, key_id, alias)?;
        // The tag named; without one, `default`'s build, else the newest ready build.
        let mut cands: Vec<(&String, &(String, u64))> = match name.contains(':') {
            true => t.tags.get_key_value(tag).into_iter().collect(),
            false => t.tags.iter().collect(),
        };
        cands.sort_by_key(|(tg, (_, at))| (tg.as_str() != "default", std::cmp::Reverse(*at)));
        let rec = cands
            .iter()
            .filter_map(|(_, (b, _))| t.builds.get(b))
            .find(|r| r.lock().is_ok_and(|r| r.image.is_some()))?
            .clone();
        let r = rec.lock().ok()?;
        let image = r.image.clone()?;
        let mut tpl = Template {
            image: Some(image),
            profile: "default".into(),
            disk: Some(crate::templates::BUILTIN_DISK),
            memory: Some(
                t.memory_mb
                    .map(|m| m << 20)
                    .unwrap_or(crate::templates::BUILTIN_MEMORY),
            ),
            ..Default::default()
        };
        tpl.cpus = t.cpus;
        Some((tpl, r.start_cmd.clone(), r.ready_cmd.clone()))
    }

    /// Starts a new sandbox's start command and waits for its ready command to succeed.
    pub(crate) async fn start_template(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        start: Option<String>,
        ready: Option<String>,
    ) -> Result<(), ServiceError> {
        use crate::types::{Cmd, ExecRequest};
        if let Some(s) = start {
            self.exec_background(
                caller,
                id,
                ExecRequest {
                    cmd: Cmd::Shell(s),
                    cwd: None,
                    env: BTreeMap::new(),
                    stdin: None,
                    timeout: None,
                    background: true,
                    pty: None,
                    tag: Some("start-cmd".into()),
                },
            )
            .await?;
        }
        let Some(r) = ready else { return Ok(()) };
        let t0 = std::time::Instant::now();
        loop {
            let left = READY_WAIT.saturating_sub(t0.elapsed());
            let out = self
                .exec(
                    caller,
                    id,
                    ExecRequest {
                        cmd: Cmd::Shell(r.clone()),
                        cwd: None,
                        env: BTreeMap::new(),
                        stdin: None,
                        timeout: Some(crate::types::Amount::Number(left.as_secs_f64().max(1.0))),
                        background: false,
                        pty: None,
                        tag: None,
                    },
                    None,
                )
                .await?;
            if out.exit_code == Some(0) {
                return Ok(());
            }
            if t0.elapsed() >= READY_WAIT {
                return Err(ServiceError::new(
                    crate::error::ErrorKind::Upstream,
                    "template_not_ready",
                    format!(
                        "the template's ready command ({r}) did not succeed within {} s",
                        READY_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    /// Checks a build definition and translates it (see [`Plan`]).
    fn plan_build(&self, caller: &Caller, spec: &BuildSpec) -> Result<Plan, ServiceError> {
        let steps = spec.steps.clone().unwrap_or_default();
        if steps.len() > MAX_STEPS {
            return Err(ServiceError::bad_request(format!(
                "steps: {} steps; a template has at most {MAX_STEPS}",
                steps.len()
            )));
        }
        let image = match (&spec.from_image, &spec.from_template) {
            (Some(_), Some(_)) => {
                return Err(ServiceError::bad_request(
                    "fromImage and fromTemplate: give one",
                ))
            }
            (Some(i), None) => i.clone(),
            (None, Some(t)) => {
                if let Some(tpl) = self.cfg.templates.get(t) {
                    // The server's template: its image, or E2B's base image for a template
                    // on the host's system directories (which no build can start from).
                    tpl.image.clone().unwrap_or_else(|| E2B_BASE_IMAGE.into())
                } else if let Some((tpl, _, _)) = self.built_template(&caller.key_id, t) {
                    tpl.image.unwrap_or_default()
                } else {
                    return Err(ServiceError::not_found(format!(
                        "fromTemplate: no template '{}' (name one of this server's templates or one you built)",
                        t.chars().take(80).collect::<String>()
                    )));
                }
            }
            (None, None) => E2B_BASE_IMAGE.into(),
        };
        if image.is_empty()
            || image.len() > 512
            || cordon_image::store::names_directory(&image)
            || image.contains(char::is_whitespace)
        {
            return Err(ServiceError::bad_request(format!(
                "fromImage '{}': name an image (cordon image pull/build puts it in the server's store)",
                image.chars().take(80).collect::<String>()
            )));
        }
        for c in [&spec.start_cmd, &spec.ready_cmd].into_iter().flatten() {
            if c.len() > MAX_ARG || c.contains('\0') {
                return Err(ServiceError::bad_request(
                    "startCmd/readyCmd: at most 64 KiB, no NUL",
                ));
            }
        }
        let mut out = Vec::new();
        let mut no_cache = spec.force.unwrap_or(false);
        for (n, s) in steps.iter().enumerate() {
            let n = n + 1;
            let args = s.args.clone().unwrap_or_default();
            if args.len() > 64 || args.iter().any(|a| a.len() > MAX_ARG || a.contains('\0')) {
                return Err(ServiceError::bad_request(format!(
                    "step {n} ({}): at most 64 arguments of 64 KiB each, no NUL",
                    s.kind.chars().take(20).collect::<String>()
                )));
            }
            no_cache |= s.force.unwrap_or(false);
            let bad =
                |why: &str| ServiceError::bad_request(format!("step {n} ({}): {why}", s.kind));
            let line = |a: &str| !a.contains(['\n', '\r']);
            match s.kind.as_str() {
                "RUN" => {
                    let cmd = args.first().ok_or_else(|| bad("RUN needs a command"))?;
                    let user = args.get(1).filter(|u| !u.is_empty()).cloned();
                    if let Some(u) = &user {
                        if !line(u) || u.contains(char::is_whitespace) {
                            return Err(bad("the user is one word"));
                        }
                    }
                    out.push(PlanStep::Run {
                        cmd: cmd.clone(),
                        user,
                    });
                }
                "ENV" => {
                    if args.is_empty() || args.len() % 2 != 0 {
                        return Err(bad("ENV takes name, value pairs"));
                    }
                    let mut pairs = Vec::new();
                    for kv in args.chunks(2) {
                        let (k, v) = (&kv[0], &kv[1]);
                        let name_ok = !k.is_empty()
                            && k.len() <= 256
                            && !k.starts_with(|c: char| c.is_ascii_digit())
                            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                        if !name_ok {
                            return Err(bad(&format!(
                                "'{}' is not a variable name",
                                k.chars().take(80).collect::<String>()
                            )));
                        }
                        if !line(v) {
                            return Err(bad("a value is one line"));
                        }
                        pairs.push((k.clone(), v.clone()));
                    }
                    out.push(PlanStep::Env(pairs));
                }
                "WORKDIR" => {
                    let d = args
                        .first()
                        .ok_or_else(|| bad("WORKDIR needs a directory"))?;
                    if d.trim().is_empty() || !line(d) || d.trim() != d {
                        return Err(bad("WORKDIR needs one directory"));
                    }
                    out.push(PlanStep::Workdir(d.clone()));
                }
                "USER" => {
                    let u = args.first().ok_or_else(|| bad("USER needs a user"))?;
                    if u.is_empty() || !line(u) || u.contains(char::is_whitespace) {
                        return Err(bad("USER needs one word"));
                    }
                    out.push(PlanStep::User(u.clone()));
                }
                "COPY" => {
                    let src = args.first().ok_or_else(|| bad("COPY SRC DEST"))?;
                    let dest = args.get(1).ok_or_else(|| bad("COPY SRC DEST"))?;
                    if src.is_empty() || src.starts_with('/') {
                        return Err(bad("the source is relative to the template's context"));
                    }
                    if Path::new(src)
                        .components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
                    {
                        return Err(bad("`..` leaves the template's context (refused)"));
                    }
                    if dest.is_empty() || !line(dest) || !line(src) {
                        return Err(bad("COPY needs a source and a destination, one line each"));
                    }
                    let hash = s
                        .files_hash
                        .clone()
                        .filter(|h| valid_hash(h))
                        .ok_or_else(|| bad("filesHash: 64 hexadecimal digits"))?;
                    let archive = upload_dir(&self.cfg.data_dir, &caller.key_id)
                        .join(format!("{}.tar", hash.to_ascii_lowercase()));
                    if !archive.is_file() {
                        return Err(bad("its files were not uploaded (GET /templates/{id}/files/{hash} gives the link)"));
                    }
                    let chown = args.get(2).filter(|u| !u.is_empty()).cloned();
                    let mode = args.get(3).filter(|m| !m.is_empty()).cloned();
                    if let Some(m) = &mode {
                        if m.len() > 6 || !m.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                            return Err(bad("the mode is octal"));
                        }
                    }
                    // A user name or id, optionally `:group`: nothing the build engine would
                    // expand or unquote.
                    let owner_word = |w: &str| {
                        !w.is_empty()
                            && w.len() <= 64
                            && w.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                    };
                    if chown.as_deref().is_some_and(|u| {
                        let (a, b) = u.split_once(':').unwrap_or((u, "x"));
                        !owner_word(a) || !owner_word(b)
                    }) {
                        return Err(bad("the user is a name or id, optionally with :group"));
                    }
                    out.push(PlanStep::Copy {
                        src: src.clone(),
                        dest: dest.clone(),
                        archive,
                        chown,
                        mode,
                    });
                }
                other => {
                    return Err(ServiceError::bad_request(format!(
                        "step {n}: unknown step type '{}' (COPY, ENV, RUN, WORKDIR and USER are)",
                        other.chars().take(40).collect::<String>()
                    )))
                }
            }
        }
        Ok(Plan {
            image,
            steps: out,
            no_cache,
            registry_auth: spec.from_image_registry.is_some(),
        })
    }

    /// Runs a planned build: the archives unpacked into a scratch context, the Dockerfile
    /// written, the build engine run with RUN steps in sandboxes.
    fn run_build(
        &self,
        plan: &Plan,
        image: &str,
        cpus: Option<f64>,
        memory_mb: Option<u64>,
        rec: &Arc<Mutex<BuildRec>>,
    ) -> Result<(), String> {
        let log = |level: &'static str, m: &str| {
            if let Ok(mut r) = rec.lock() {
                r.log(level, m);
            }
        };
        let store = cordon_image::Store::open(&self.cfg.data_dir).map_err(|e| e.to_string())?;
        if plan.registry_auth {
            log(
                "info",
                "fromImageRegistry: registry credentials are not used here; the image comes from the server's store",
            );
        }
        // The base: in the store, or (only when the server pulls missing images) pulled.
        let base = match store.inspect(&plan.image) {
            Ok(i) => i
                .config
                .config
                .map(|c| (c.user, c.working_dir))
                .unwrap_or_default(),
            Err(cordon_image::ImageError::NotFound { .. })
                if self.cfg.image_pull == crate::ImagePull::Never =>
            {
                return Err(format!(
                    "base image '{}' is not in this server's image store: an operator puts it there with `cordon image pull {0}` (or `cordon image build -t {0}`); this server does not pull images by itself",
                    plan.image
                ));
            }
            Err(cordon_image::ImageError::NotFound { .. }) => (None, None),
            Err(e) => return Err(format!("base image '{}': {e}", plan.image)),
        };
        let dir = self
            .cfg
            .data_dir
            .join("template-builds")
            .join(random_hex(8).map_err(|e| e.message)?);
        let ctx = dir.join("context");
        std::fs::create_dir_all(&ctx).map_err(|e| format!("{}: {e}", ctx.display()))?;
        let res = (|| {
            let dockerfile = write_context(plan, &ctx, base)?;
            let names = vec![cordon_image::Reference::parse(image).map_err(|e| e.to_string())?];
            let mut profile =
                cordon_policy::Profile::resolve("default").map_err(|e| e.to_string())?;
            profile.limits.memory = memory_mb.map(|m| m << 20).unwrap_or(2 << 30).max(64 << 20);
            if let Some(c) = cpus {
                profile.limits.cpus = c;
            }
            profile.limits.timeout = std::time::Duration::from_secs(30 * 60);
            profile.limits.disk = 8 << 30;
            profile.network.allow = self.cfg.template_build_allow_net.clone();
            // A build step is a sandbox like any other: the server's required layers hold.
            self.add_required(&mut profile);
            let opts = cordon_image::build::BuildOptions {
                dockerfile,
                context: ctx.clone(),
                names,
                build_args: BTreeMap::new(),
                pull: cordon_image::PullOptions::default(),
                limits: cordon_image::unpack::Limits::default(),
                allow_net: self.cfg.template_build_allow_net.clone(),
                no_cache: plan.no_cache,
                // A template's image runs only in cordon sandboxes, whose one user (E2B's
                // `user`, uid 1000) owns the image root's files: `copy(user="user")` keeps
                // them root's so that they are that user's inside.
                owner_as_root: Some(cordon_linux::INNER_ID),
            };
            let runner = StepRunner {
                helper: self.cfg.helper_exe.clone(),
                profile,
                rec: rec.clone(),
            };
            let logf = |l: &str| log("info", l);
            cordon_image::build::build(&store, &opts, &runner, &logf)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })();
        let _ = std::fs::remove_dir_all(&dir);
        res
    }
}

/// A checked build: its base image and steps.
struct Plan {
    image: String,
    steps: Vec<PlanStep>,
    no_cache: bool,
    registry_auth: bool,
}

enum PlanStep {
    Run {
        cmd: String,
        user: Option<String>,
    },
    Env(Vec<(String, String)>),
    Workdir(String),
    User(String),
    Copy {
        src: String,
        dest: String,
        archive: PathBuf,
        chown: Option<String>,
        mode: Option<String>,
    },
}

/// A Dockerfile word in double quotes that comes out of the build engine's unquoting and then
/// its `$` expansion as the very text given (E2B's env values are literal).
fn quoted(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            // Unquoting makes `\$` of this, which expansion makes `$`.
            '$' => o.push_str("\\\\\\$"),
            '\\' | '"' => {
                o.push('\\');
                o.push(c);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Writes the context (each COPY's matches staged in a directory of their own) and returns
/// the Dockerfile.
fn write_context(
    plan: &Plan,
    ctx: &Path,
    (base_user, base_workdir): (Option<String>, Option<String>),
) -> Result<String, String> {
    let mut df = format!("FROM {}\n", plan.image);
    // Steps run as root (as in Docker and E2B) unless the template or its base says
    // otherwise, and in root's home unless the base has a working directory: a RUN step can
    // write inside the image's directories but create nothing at its top (the sandbox's `/`
    // is not writable), and E2B's `/home/user` is the sandbox's scratch home here, which no
    // build layer holds.
    if base_workdir
        .as_deref()
        .is_none_or(|w| w.is_empty() || w == "/")
    {
        df.push_str("WORKDIR /root\n");
    }
    let mut user = base_user;
    let json = |v: &[&str]| serde_json::to_string(v).unwrap_or_default();
    for (n, s) in plan.steps.iter().enumerate() {
        match s {
            PlanStep::Run { cmd, user: u } => {
                let argv = json(&["/bin/sh", "-c", cmd]);
                match u {
                    Some(u) => {
                        df.push_str(&format!("USER {u}\nRUN {argv}\n"));
                        df.push_str(&format!(
                            "USER {}\n",
                            user.clone()
                                .filter(|x| !x.is_empty())
                                .unwrap_or_else(|| "root".into())
                        ));
                    }
                    None => df.push_str(&format!("RUN {argv}\n")),
                }
            }
            PlanStep::Env(pairs) => {
                df.push_str("ENV");
                for (k, v) in pairs {
                    df.push_str(&format!(" {k}={}", quoted(v)));
                }
                df.push('\n');
            }
            PlanStep::Workdir(d) => df.push_str(&format!("WORKDIR {d}\n")),
            PlanStep::User(u) => {
                user = Some(u.clone());
                df.push_str(&format!("USER {u}\n"));
            }
            PlanStep::Copy {
                src,
                dest,
                archive,
                chown,
                mode,
            } => {
                let unpacked = ctx.join(format!("u{n}"));
                unpack_archive(archive, &unpacked)?;
                let staged = format!("s{n}");
                let into = stage(&unpacked, src, &ctx.join(&staged), dest)?;
                let (from, to) = match into {
                    Staged::Dir => (format!("{staged}/"), dest.clone()),
                    Staged::File(parent) => (format!("{staged}/"), parent),
                };
                let mut flags = String::new();
                if let Some(u) = chown {
                    flags.push_str(&format!("--chown={u} "));
                }
                if let Some(m) = mode {
                    flags.push_str(&format!("--chmod={m} "));
                }
                df.push_str(&format!("COPY {flags}{}\n", json(&[&from, &to])));
                let _ = std::fs::remove_dir_all(&unpacked);
            }
        }
    }
    // The build engine reads only what the Dockerfile names; nothing else is in the context.
    Ok(df)
}

/// How a COPY's matches were staged.
enum Staged {
    /// Into a directory whose contents go into DEST.
    Dir,
    /// One file, named as DEST's last component, into DEST's parent (given).
    File(String),
}

/// Unpacks an uploaded archive into `target` after checking every entry (see the module's
/// threat model).
fn unpack_archive(archive: &Path, target: &Path) -> Result<(), String> {
    let open = || std::fs::File::open(archive).map_err(|e| format!("{}: {e}", archive.display()));
    check_archive(open()?)?;
    std::fs::create_dir_all(target).map_err(|e| e.to_string())?;
    let limits = cordon_image::unpack::Limits {
        max_bytes: 8 << 30,
        max_entries: MAX_ENTRIES,
        max_depth: 128,
    };
    let budget = cordon_image::unpack::Budget::new(limits.max_bytes, 0);
    cordon_image::unpack::unpack_layer(open()?, target, &limits, &budget, None)
        .map(|_| ())
        .map_err(|e| format!("the uploaded files: {e}"))
}

/// Refuses an archive with an entry that could land outside where it is unpacked.
pub fn check_archive(f: impl Read) -> Result<(), String> {
    let mut r = std::io::BufReader::new(f);
    let head = {
        use std::io::BufRead;
        r.fill_buf().map_err(|e| e.to_string())?.to_vec()
    };
    let stream: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(r))
    } else {
        Box::new(r)
    };
    let mut ar = tar::Archive::new(stream);
    let mut links: Vec<PathBuf> = Vec::new();
    let mut count = 0u64;
    for e in ar
        .entries()
        .map_err(|e| format!("the uploaded archive: {e}"))?
    {
        let e = e.map_err(|e| format!("the uploaded archive: {e}"))?;
        count += 1;
        if count > MAX_ENTRIES {
            return Err(format!(
                "the uploaded archive has more than {MAX_ENTRIES} entries (refused)"
            ));
        }
        let raw = e.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let p = PathBuf::from(&name);
        if name.starts_with('/') {
            return Err(format!(
                "the uploaded archive's entry '{name}' is an absolute path (refused: files land only in the template)"
            ));
        }
        if p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(format!(
                "the uploaded archive's entry '{name}' has a `..` component (refused: it would leave the template)"
            ));
        }
        let clean: PathBuf = p
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        if let Some(l) = links.iter().find(|l| clean.starts_with(l) && clean != **l) {
            return Err(format!(
                "the uploaded archive's entry '{name}' lies below the symlink '{}' of the same archive (refused: it would be written through the link)",
                l.display()
            ));
        }
        match e.header().entry_type() {
            tar::EntryType::Symlink => links.push(clean),
            tar::EntryType::Link => {
                let target = e
                    .link_name_bytes()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default();
                let t = Path::new(&target);
                if target.starts_with('/')
                    || t.components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
                {
                    return Err(format!(
                        "the uploaded archive's hard link '{name}' points to '{target}', outside the archive (refused)"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// One directory entry's kind, never following a link.
fn lkind(p: &Path) -> Option<std::fs::FileType> {
    std::fs::symlink_metadata(p).ok().map(|m| m.file_type())
}

/// Puts what `src` (a path or a glob in its last component, relative to the unpacked
/// archive) matches into `staged`, and says how the COPY takes it. Nothing is followed: each
/// directory on the way is checked to be a directory, not a link.
fn stage(unpacked: &Path, src: &str, staged: &Path, dest: &str) -> Result<Staged, String> {
    let comps: Vec<&str> = src
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let (last, parents) = match comps.split_last() {
        Some((l, p)) => (*l, p),
        None => ("*", &[][..]),
    };
    let mut dir = unpacked.to_path_buf();
    for c in parents {
        if c.contains(['*', '?', '[']) {
            return Err(format!("COPY {src}: wildcards only in the last component"));
        }
        dir.push(c);
        if !lkind(&dir).is_some_and(|k| k.is_dir()) {
            return Err(format!(
                "COPY {src}: no such directory in the uploaded files"
            ));
        }
    }
    let glob = last.contains(['*', '?', '[']);
    let mut matched = Vec::new();
    if glob {
        let m = globset::GlobBuilder::new(last)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("COPY {src}: {e}"))?
            .compile_matcher();
        for e in std::fs::read_dir(&dir).map_err(|e| format!("COPY {src}: {e}"))? {
            let e = e.map_err(|e| e.to_string())?;
            if m.is_match(e.file_name()) {
                matched.push(e.path());
            }
        }
        matched.sort();
    } else {
        let p = dir.join(last);
        if lkind(&p).is_some() {
            matched.push(p);
        }
    }
    if matched.is_empty() {
        return Err(format!("COPY {src}: nothing in the uploaded files matches"));
    }
    std::fs::create_dir_all(staged).map_err(|e| e.to_string())?;
    let single_file = matched.len() == 1
        && !glob
        && !dest.ends_with('/')
        && !lkind(&matched[0]).is_some_and(|k| k.is_dir());
    if single_file {
        let d = Path::new(dest);
        let name = d
            .file_name()
            .ok_or_else(|| format!("COPY {src} {dest}: no file name in the destination"))?;
        std::fs::rename(&matched[0], staged.join(name)).map_err(|e| e.to_string())?;
        let parent = d
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".into());
        return Ok(Staged::File(format!("{parent}/")));
    }
    for m in matched {
        let is_dir = lkind(&m).is_some_and(|k| k.is_dir());
        if is_dir && !glob {
            // A directory: its contents go into DEST.
            for e in std::fs::read_dir(&m).map_err(|e| e.to_string())? {
                let e = e.map_err(|e| e.to_string())?;
                std::fs::rename(e.path(), staged.join(e.file_name())).map_err(|e| e.to_string())?;
            }
        } else if let Some(name) = m.file_name() {
            std::fs::rename(&m, staged.join(name)).map_err(|e| e.to_string())?;
        }
    }
    Ok(Staged::Dir)
}

/// Runs a build's RUN steps as one-shot sandboxes of the server (`cordon __oneshot`), their
/// output into the build's log.
struct StepRunner {
    helper: PathBuf,
    profile: cordon_policy::Profile,
    rec: Arc<Mutex<BuildRec>>,
}

impl cordon_image::build::StepRunner for StepRunner {
    fn run(&self, step: &cordon_image::build::RunStep) -> Result<(), String> {
        let cmd = step
            .argv
            .get(2)
            .cloned()
            .unwrap_or_else(|| step.argv.join(" "));
        // Root of the step's own user namespace (every capability dropped) unless a user is
        // named: what Docker and E2B run build steps as.
        let run_as = match step.user.as_deref() {
            None | Some("") => (0, 0),
            Some(u) => cordon_image::user::resolve_user(&step.layers, u).map_err(|_| {
                format!("failed to run command '{cmd}': command failed: unauthenticated: invalid username: '{u}'")
            })?,
        };
        let mut profile = self.profile.clone();
        profile.image = Some("cordon-template-build".into());
        profile.root_image = Some(cordon_policy::RootImage {
            reference: "cordon-template-build".into(),
            digest: None,
            layers: step.layers.clone(),
            env: step.env.clone(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            working_dir: Some(step.working_dir.clone().unwrap_or_else(|| "/".into())),
            user: step.user.clone(),
            run_as: Some(run_as),
            upper: Some(step.upper.clone()),
            read_only: false,
        });
        profile.validate().map_err(|e| e.to_string())?;
        let req = crate::oneshot::OneShot {
            profile,
            argv: step.argv.clone(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            wasm: None,
        };
        let body = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
        let mut child = std::process::Command::new(&self.helper)
            .arg("__oneshot")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the step's sandbox: {e}"))?;
        if let Some(mut w) = child.stdin.take() {
            use std::io::Write;
            let _ = w.write_all(&body);
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("the step's sandbox: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "failed to run command '{cmd}': {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let o: cordon_policy::Outcome =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("the step's outcome: {e}"))?;
        if let Ok(mut r) = self.rec.lock() {
            for l in o.stdout.lines().chain(o.stderr.lines()) {
                r.log("info", l);
            }
        }
        if !o.limits_hit.is_empty() {
            return Err(format!(
                "failed to run command '{cmd}': the step hit its limits: {:?}",
                o.limits_hit
            ));
        }
        match o.exit_code {
            Some(0) => Ok(()),
            code => Err(format!(
                "failed to run command '{cmd}': command failed: exit status {}{}",
                code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                o.error.map(|e| format!(": {e}")).unwrap_or_default()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(0);
            // Raw names: the builder's own setters refuse `..` and absolute paths.
            let gnu = h.as_gnu_mut().expect("gnu");
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if !link.is_empty() {
                gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
            }
            h.set_cksum();
            b.append(&h, std::io::empty()).expect("append");
        }
        b.into_inner().expect("tar")
    }

    #[test]
    fn an_archive_escaping_its_directory_is_refused_by_the_entry_name() {
        use tar::EntryType::*;
        for (entries, want) in [
            (vec![("../x", Regular, "")], "'../x' has a `..` component"),
            (
                vec![("/etc/x", Regular, "")],
                "'/etc/x' is an absolute path",
            ),
            (
                vec![("l", Symlink, "/etc"), ("l/passwd", Regular, "")],
                "'l/passwd' lies below the symlink 'l'",
            ),
            (vec![("h", Link, "../../etc/shadow")], "hard link 'h'"),
        ] {
            let e = check_archive(&tar_of(&entries)[..]).expect_err(want);
            assert!(e.contains(want), "{e}");
        }
        // Symlinks are kept as symlinks, wherever they point: their text means something only
        // inside the template.
        check_archive(
            &tar_of(&[
                ("d/a", Regular, ""),
                ("d/abs", Symlink, "/tmp/x/a"),
                ("d/rel", Symlink, "a"),
            ])[..],
        )
        .expect("plain symlinks pass");
    }

    #[test]
    fn names_and_tags_keep_to_their_alphabets() {
        assert_eq!(
            split_name("my-tpl:v1").expect("ok"),
            ("my-tpl".into(), "v1".into())
        );
        assert_eq!(split_name("my-tpl").expect("ok").1, "default");
        for bad in [":v1", "a:", "A", "a/b", "a:b:c", "../x", ""] {
            assert!(split_name(bad).is_err(), "{bad}");
        }
        assert!(!valid_tag(":invalid"));
    }

    #[test]
    fn an_env_value_comes_out_of_the_engine_as_given() {
        for v in [
            "plain",
            "a \"q\" b",
            "$HOME ${X:-y} \\$Z",
            "back\\slash\\",
            "tail$",
        ] {
            let pairs =
                cordon_image::dockerfile::pairs(&format!("K={}", quoted(v)), true).expect("pairs");
            let got = pairs[0].1.clone().expect("value");
            let got = cordon_image::dockerfile::expand(&got, &|_| Some("EXPANDED".into()))
                .expect("expands");
            assert_eq!(got, v);
        }
    }

    #[test]
    fn a_run_value_cannot_become_a_second_instruction() {
        let plan = Plan {
            image: "x".into(),
            steps: vec![
                PlanStep::Run {
                    cmd: "echo hi\nRUN rm -rf /".into(),
                    user: None,
                },
                PlanStep::Env(vec![("A".into(), "\"$HOME\\".into())]),
            ],
            no_cache: false,
            registry_auth: false,
        };
        let dir = std::env::temp_dir().join(format!("tb-{}", random_hex(6).expect("rand")));
        let df = write_context(&plan, &dir, (None, None)).expect("df");
        let ins = cordon_image::dockerfile::parse(&df).expect("parses");
        // FROM, the WORKDIR of a base without one, the RUN, the ENV: nothing more.
        assert_eq!(ins.len(), 4, "{df}");
        assert_eq!(ins[2].json().expect("json")[2], "echo hi\nRUN rm -rf /");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
