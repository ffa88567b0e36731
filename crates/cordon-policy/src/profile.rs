//! The `Profile`: everything a sandbox is allowed to do, built-in or read from TOML.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network::NetworkPolicy;
use crate::secrets::{SecretFile, SecretSpec};
use crate::units::{parse_duration, parse_size, UnitError};

/// A profile that failed to load or validate. Messages name the offending key or flag.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("unknown profile '{0}': use a built-in ({builtins}) or a path to a TOML file", builtins = BUILTINS.join(", "))]
    UnknownBuiltin(String),
    #[error("cannot read profile {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {path}: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("{field}: {source}")]
    Unit {
        field: String,
        #[source]
        source: UnitError,
    },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

impl ProfileError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ProfileError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Names of the built-in profiles.
pub const BUILTINS: &[&str] = &["default", "strict"];

/// How much of the host's system directories the sandbox sees (always read-only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemView {
    /// `/usr`, `/bin`, `/lib*`, `/sbin` and all of `/etc`.
    Full,
    /// `/usr`, `/bin`, `/lib*`, `/sbin` and of `/etc` only what the dynamic loader and the
    /// system's libraries need (the engine's list: nothing that names the host's users, hosts
    /// or keys).
    Minimal,
}

/// An isolation layer the caller can demand with `--require`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    UserNs,
    PidNs,
    NetNs,
    MountNs,
    IpcNs,
    UtsNs,
    CgroupNs,
    Seccomp,
    Landlock,
    Cgroup,
    Rlimits,
}

impl Layer {
    pub const ALL: [Layer; 11] = [
        Layer::UserNs,
        Layer::PidNs,
        Layer::NetNs,
        Layer::MountNs,
        Layer::IpcNs,
        Layer::UtsNs,
        Layer::CgroupNs,
        Layer::Seccomp,
        Layer::Landlock,
        Layer::Cgroup,
        Layer::Rlimits,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layer::UserNs => "user_ns",
            Layer::PidNs => "pid_ns",
            Layer::NetNs => "net_ns",
            Layer::MountNs => "mount_ns",
            Layer::IpcNs => "ipc_ns",
            Layer::UtsNs => "uts_ns",
            Layer::CgroupNs => "cgroup_ns",
            Layer::Seccomp => "seccomp",
            Layer::Landlock => "landlock",
            Layer::Cgroup => "cgroup",
            Layer::Rlimits => "rlimits",
        }
    }

    pub fn parse(text: &str) -> Result<Layer, ProfileError> {
        let t = text.trim();
        Layer::ALL
            .into_iter()
            .find(|l| l.name() == t)
            .ok_or_else(|| {
                let names: Vec<_> = Layer::ALL.iter().map(|l| l.name()).collect();
                ProfileError::invalid(
                    "require",
                    format!("unknown layer '{t}': choose from {}", names.join(", ")),
                )
            })
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Resource limits of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory (RAM, no swap) in bytes.
    pub memory: u64,
    /// CPU quota in cores.
    pub cpus: f64,
    /// Processes and threads the payload may have at once.
    pub pids: u32,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// CPU-time limit over the whole tree, if any.
    pub cpu_time: Option<Duration>,
    /// Size of each writable tmpfs (`/tmp`, `/workspace`, the home directory, `/dev/shm`).
    pub disk: u64,
    /// Bytes kept per output stream.
    pub output_limit: u64,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub nofile: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub file_size: u64,
}

/// Bytes of `--disk` per inode of each scratch tmpfs: a file with any data takes at least one
/// page of the tmpfs's size, so this many inodes never stop files the size would allow. Only
/// what takes no page — empty files, directories, symlinks — meets the cap, and those cost the
/// host unaccounted kernel memory (about 1 KiB each) where no cgroup holds the sandbox.
pub const DISK_BYTES_PER_INODE: u64 = 4096;

impl Limits {
    /// The `nr_inodes` of each scratch tmpfs (`/tmp`, `/workspace`, `/dev/shm`).
    pub fn scratch_inodes(&self) -> u64 {
        (self.disk / DISK_BYTES_PER_INODE).max(1)
    }
}

/// An extra bind mount from the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub source: PathBuf,
    pub dest: PathBuf,
    pub writable: bool,
    /// Mounted idmapped when the sandbox runs as host root: host root's files there are the
    /// sandbox user's, and what it creates stays root's on the host (a server's volumes,
    /// shared by sandboxes each with a host uid of its own). Set by the service only: no
    /// profile file or flag can ask for it.
    #[serde(default)]
    pub idmap: bool,
    /// A writable bind's size cap (a server's volume): while commands run, the sandbox's
    /// helper walks the source every so often, and what runs while its usage grows past this
    /// is ended (`limits_hit: ["disk"]`). Set by the service only.
    #[serde(default)]
    pub limit: Option<u64>,
}

impl Bind {
    /// Parses `PATH[:DEST]`; DEST defaults to PATH.
    pub fn parse(spec: &str, writable: bool) -> Result<Bind, ProfileError> {
        let field = if writable { "--rw" } else { "--ro" };
        let (src, dest) = match spec.split_once(':') {
            Some((s, d)) => (s, d),
            None => (spec, spec),
        };
        if src.is_empty() || dest.is_empty() {
            return Err(ProfileError::invalid(
                field,
                format!("'{spec}' is not PATH[:DEST], e.g. /data/in:/input"),
            ));
        }
        Ok(Bind {
            source: PathBuf::from(src),
            dest: PathBuf::from(dest),
            writable,
            idmap: false,
            limit: None,
        })
    }
}

/// One environment entry for the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvEntry {
    /// Set KEY to VALUE.
    Set(String, String),
    /// Copy KEY from cordon's own environment, if present.
    Pass(String),
}

impl EnvEntry {
    /// Parses `KEY=VALUE` or `KEY`.
    pub fn parse(spec: &str) -> Result<EnvEntry, ProfileError> {
        let entry = match spec.split_once('=') {
            Some((k, v)) => EnvEntry::Set(k.to_string(), v.to_string()),
            None => EnvEntry::Pass(spec.to_string()),
        };
        entry.validate()?;
        Ok(entry)
    }

    pub fn key(&self) -> &str {
        match self {
            EnvEntry::Set(k, _) | EnvEntry::Pass(k) => k,
        }
    }

    fn validate(&self) -> Result<(), ProfileError> {
        let key = self.key();
        let key_ok = !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !key.starts_with(|c: char| c.is_ascii_digit());
        if !key_ok {
            return Err(ProfileError::invalid(
                "--env",
                format!(
                    "'{key}' is not a variable name: use KEY=VALUE or KEY (letters, digits, _)"
                ),
            ));
        }
        if let EnvEntry::Set(_, v) = self {
            if v.contains('\0') {
                return Err(ProfileError::invalid(
                    "--env",
                    format!("value of {key} contains a NUL byte"),
                ));
            }
        }
        Ok(())
    }
}

/// The sandbox user's home directory: its own small tmpfs, so that the caches and settings
/// tools keep there (pip, npm, matplotlib) never land in a `--workspace` shared with the host.
pub const HOME: &str = "/home/sandbox";

/// Variables every sandbox gets (unless overridden), so ordinary programs behave.
pub const BASE_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    ),
    ("HOME", HOME),
    ("LANG", "C.UTF-8"),
    ("TERM", "dumb"),
];

/// Everything a sandbox may do. Build one with [`Profile::builtin`] or [`Profile::load`], adjust
/// it, then call [`Profile::validate`] before handing it to the engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    pub limits: Limits,
    pub system: SystemView,
    pub binds: Vec<Bind>,
    /// Host directory mounted read-write at `/workspace`; `None` gives a fresh tmpfs.
    pub workspace: Option<PathBuf>,
    pub env: Vec<EnvEntry>,
    pub network: NetworkPolicy,
    /// Layers without which the run must fail instead of running weaker.
    pub require: Vec<Layer>,
    /// Where the host refuses namespaces *and* has no Landlock, run anyway (the host's files
    /// then protected by their permissions only) instead of refusing.
    #[serde(default)]
    pub allow_no_landlock: bool,
    pub hostname: String,
    /// The image (reference, digest or a directory's path) whose root replaces the host's
    /// system directories, as the user named it; `root_image` is what it resolved to.
    #[serde(default)]
    pub image: Option<String>,
    /// `image` resolved by the caller (cordon's image store) before the profile reaches the
    /// engine; the caller keeps the store's hold on its layers until the sandbox is gone.
    #[serde(default)]
    pub root_image: Option<RootImage>,
    /// Paths inside the sandbox, each below a bind's destination, that it must not reach
    /// although the bind covers them (a gateway rule's denied subtree): the engine mounts an
    /// empty read-only directory (or `/dev/null`, for a file) over each, and grants Landlock
    /// access to the bind minus it (the siblings at each level down to it). See
    /// [`Profile::hidden_in`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<PathBuf>,
    /// Secrets bound to hosts (`--secret`, `[secrets.NAME]`): references to values read
    /// outside the sandbox, which gets placeholders only (see [`crate::secrets`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretSpec>,
    /// The programs allowlist (`[exec] allow`, `--exec-allow`): `None` lets the sandbox
    /// execute any file it can read; `Some` only the files these entries name (absolute paths
    /// in the sandbox, `*` and `?` allowed in the last component). See [`crate::exec`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_allow: Option<Vec<PathBuf>>,
    /// Learn mode (`cordon run --learn`): the engine records the programs the run executes
    /// (into `Outcome::executed`) and the host files it asks for beyond its sandbox (into
    /// `Outcome::files`) without changing what it may do. Set by the CLI only.
    #[serde(skip)]
    pub learn_exec: bool,
}

/// One bind with hidden paths below it: Landlock must grant its destination minus these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carve {
    /// The bind's index in [`Profile::binds`].
    pub bind: usize,
    /// The hidden paths, relative to the bind's destination (never empty).
    pub hidden: Vec<PathBuf>,
}

/// Most layers overlayfs stacks.
pub const MAX_IMAGE_LAYERS: usize = 500;

/// A sandbox root made of an image: its layer directories (host paths, mounted read-only
/// under a per-sandbox writable layer) and the parts of its config a run honours, the way
/// `docker run` does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootImage {
    /// The reference it was found by (normalised), or the directory's path.
    pub reference: String,
    /// The manifest digest; `None` for a plain directory.
    pub digest: Option<String>,
    /// Layer directories on the host, top layer first.
    pub layers: Vec<PathBuf>,
    /// `KEY=VALUE` entries (the image's `Env`).
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: Option<String>,
    /// The image's `User`: recorded, and run as the sandbox user (never host root).
    pub user: Option<String>,
    /// The uid and gid the sandbox's one user has inside its user namespace (Docker's
    /// `--user`, resolved in the image's own `/etc/passwd` and `/etc/group`); `None`: 1000.
    /// Only the name inside changes: outside it is the same unprivileged host id either way,
    /// and every capability is dropped whatever the id (uid 0 included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<(u32, u32)>,
    /// A host directory (holding `upper/` and `work/`) to be the root's writable layer
    /// instead of a tmpfs, so that what the run changed outlives it: `cordon image build`
    /// takes a RUN step's new layer from there. `None` (every sandbox but a build's): a
    /// tmpfs capped by `--disk`. With a directory, `--disk` is watched from outside instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upper: Option<PathBuf>,
    /// The merged root is mounted read-only once the sandbox's own mounts (/tmp, the home,
    /// /workspace, binds) are on it (Docker's `ReadonlyRootfs`): writes elsewhere fail with
    /// EROFS instead of landing in the writable layer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

impl RootImage {
    /// The command a run executes: `Entrypoint`, then the given command or else `Cmd`
    /// (a given command replaces `Cmd`, as with `docker run IMAGE CMD…`).
    pub fn command(&self, given: &[String]) -> Vec<String> {
        let tail = if given.is_empty() { &self.cmd } else { given };
        self.entrypoint.iter().chain(tail).cloned().collect()
    }

    /// The image's `WorkingDir` as an absolute path, if it names one (Docker takes a relative
    /// one from `/`).
    pub fn working_dir(&self) -> Option<PathBuf> {
        let w = self.working_dir.as_deref().filter(|w| !w.is_empty())?;
        Some(Path::new("/").join(w))
    }

    fn validate(&self) -> Result<(), ProfileError> {
        if self.layers.is_empty() {
            return Err(ProfileError::invalid("image", "the image has no layers"));
        }
        if self.layers.len() > MAX_IMAGE_LAYERS {
            return Err(ProfileError::invalid(
                "image",
                format!(
                    "{} layers: overlayfs stacks at most {MAX_IMAGE_LAYERS}",
                    self.layers.len()
                ),
            ));
        }
        for l in &self.layers {
            check_abs_clean(l, "image")?;
        }
        if let Some(u) = &self.upper {
            check_abs_clean(u, "image upper")?;
        }
        if let Some(w) = self.working_dir() {
            check_abs_clean(&w, "image WorkingDir")?;
        }
        for e in &self.env {
            if !e.contains('=') || e.contains('\0') {
                return Err(ProfileError::invalid(
                    "image Env",
                    "an entry is not KEY=VALUE",
                ));
            }
        }
        Ok(())
    }
}

impl Profile {
    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
        let default_limits = Limits {
            memory: 512 << 20,
            cpus: 1.0,
            pids: 64,
            timeout: Duration::from_secs(30),
            cpu_time: None,
            disk: 64 << 20,
            output_limit: 1 << 20,
            nofile: 1024,
            file_size: 1 << 30,
        };
        let base = Profile {
            name: name.to_string(),
            limits: default_limits,
            system: SystemView::Full,
            binds: Vec::new(),
            workspace: None,
            env: Vec::new(),
            network: NetworkPolicy::default(),
            require: Vec::new(),
            allow_no_landlock: false,
            hostname: "cordon".to_string(),
            image: None,
            root_image: None,
            hide: Vec::new(),
            secrets: Vec::new(),
            exec_allow: None,
            learn_exec: false,
        };
        match name {
            "default" => Ok(base),
            "strict" => Ok(Profile {
                limits: Limits {
                    memory: 256 << 20,
                    cpus: 0.5,
                    pids: 32,
                    timeout: Duration::from_secs(10),
                    cpu_time: Some(Duration::from_secs(10)),
                    disk: 16 << 20,
                    output_limit: 256 << 10,
                    nofile: 256,
                    file_size: 16 << 20,
                },
                system: SystemView::Minimal,
                ..base
            }),
            other => Err(ProfileError::UnknownBuiltin(other.to_string())),
        }
    }

    /// `NAME` of a built-in, or a path to a TOML file (anything with a `/` or ending in `.toml`).
    pub fn resolve(name_or_path: &str) -> Result<Profile, ProfileError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            Profile::load(Path::new(name_or_path))
        } else {
            Profile::builtin(name_or_path)
        }
    }

    /// Reads a TOML profile file.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Profile::from_toml(&text, path)
    }

    /// Parses TOML text; `origin` names the file in errors. Unknown keys are errors with their line.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Profile, ProfileError> {
        let file: ProfileFile = toml::from_str(text).map_err(|e| ProfileError::Toml {
            path: origin.to_path_buf(),
            message: describe_toml_error(text, &e),
        })?;
        let base = file.extends.as_deref().unwrap_or("default");
        let mut profile = Profile::builtin(base).map_err(|_| {
            let e = ProfileError::invalid(
                "extends",
                format!(
                    "'{base}' is not a built-in profile ({})",
                    BUILTINS.join(", ")
                ),
            );
            in_file(e, text, origin)
        })?;
        profile.name = file
            .name
            .clone()
            .unwrap_or_else(|| origin.display().to_string());
        file.apply(&mut profile)
            .and_then(|()| profile.validate())
            .map_err(|e| in_file(e, text, origin))?;
        Ok(profile)
    }

    /// Checks every value; the engine relies on a validated profile.
    /// The binds that have hidden paths below them (a hidden path counts for the innermost
    /// bind holding it: a deeper bind is a mount of its own, granted by its own rule).
    pub fn hidden_in(&self) -> Vec<Carve> {
        let mut out: Vec<Carve> = Vec::new();
        for h in &self.hide {
            let holder = self
                .binds
                .iter()
                .enumerate()
                .filter(|(_, b)| h.starts_with(&b.dest) && *h != b.dest)
                .max_by_key(|(_, b)| b.dest.components().count());
            let Some((i, b)) = holder else { continue };
            let Ok(rel) = h.strip_prefix(&b.dest) else {
                continue;
            };
            match out.iter_mut().find(|c| c.bind == i) {
                Some(c) => c.hidden.push(rel.to_path_buf()),
                None => out.push(Carve {
                    bind: i,
                    hidden: vec![rel.to_path_buf()],
                }),
            }
        }
        out
    }

    pub fn validate(&self) -> Result<(), ProfileError> {
        let l = &self.limits;
        if l.memory < (8 << 20) {
            return Err(ProfileError::invalid(
                "memory",
                "must be at least 8M, e.g. --memory 256M",
            ));
        }
        if !(l.cpus.is_finite() && l.cpus >= 0.01 && l.cpus <= 1024.0) {
            return Err(ProfileError::invalid(
                "cpus",
                "must be between 0.01 and 1024, e.g. --cpus 0.5",
            ));
        }
        if l.pids == 0 || l.pids > 1_000_000 {
            return Err(ProfileError::invalid(
                "pids",
                "must be between 1 and 1000000, e.g. --pids 64",
            ));
        }
        if l.timeout.is_zero() {
            return Err(ProfileError::invalid(
                "timeout",
                "must be more than zero, e.g. --timeout 30s",
            ));
        }
        if l.cpu_time.is_some_and(|d| d < Duration::from_secs(1)) {
            return Err(ProfileError::invalid(
                "cpu-time",
                "must be at least 1s (the kernel counts CPU time in seconds), e.g. --cpu-time 10s",
            ));
        }
        if l.disk < (1 << 20) {
            return Err(ProfileError::invalid(
                "disk",
                "must be at least 1M, e.g. --disk 64M",
            ));
        }
        if l.nofile < 16 {
            return Err(ProfileError::invalid("nofile", "must be at least 16"));
        }
        for bind in &self.binds {
            let field = if bind.writable { "--rw" } else { "--ro" };
            check_abs_clean(&bind.source, field)?;
            check_abs_clean(&bind.dest, field)?;
            check_dest(&bind.dest, field)?;
        }
        if let Some(ws) = &self.workspace {
            check_abs_clean(ws, "--workspace")?;
        }
        for h in &self.hide {
            check_abs_clean(h, "hide")?;
            if !self
                .binds
                .iter()
                .any(|b| h.starts_with(&b.dest) && *h != b.dest)
            {
                return Err(ProfileError::invalid(
                    "hide",
                    format!(
                        "{} is not below a bind's destination (only what a bind brings in can be hidden; leave out a bind that should not be seen at all)",
                        h.display()
                    ),
                ));
            }
        }
        for e in &self.env {
            e.validate()?;
        }
        let host_ok = !self.hostname.is_empty()
            && self.hostname.len() <= 64
            && self
                .hostname
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !host_ok {
            return Err(ProfileError::invalid(
                "hostname",
                "use letters, digits, '-' and '.', at most 64",
            ));
        }
        self.network.validate()?;
        if !self.secrets.is_empty() {
            crate::secrets::validate(&self.secrets, &self.network.compile()?, "--secret")?;
        }
        if let Some(img) = &self.root_image {
            img.validate()?;
        }
        for e in self.exec_allow.iter().flatten() {
            crate::exec::validate_entry(e, "--exec-allow")?;
        }
        if self
            .image
            .as_ref()
            .is_some_and(|i| i.is_empty() || i.len() > 4096)
        {
            return Err(ProfileError::invalid(
                "image",
                "name an image (e.g. python:3.12-slim) or a directory",
            ));
        }
        Ok(())
    }

    /// The environment the payload starts with: the base set, then the image's `Env` (if the
    /// root is an image), then profile entries in order. `lookup` reads cordon's own
    /// environment for pass-through entries.
    pub fn environment(&self, lookup: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = BASE_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for e in self.root_image.iter().flat_map(|i| &i.env) {
            if let Some((k, v)) = e.split_once('=').filter(|(k, _)| !k.is_empty()) {
                env.insert(k.to_string(), v.to_string());
            }
        }
        for e in &self.env {
            match e {
                EnvEntry::Set(k, v) => {
                    env.insert(k.clone(), v.clone());
                }
                EnvEntry::Pass(k) => {
                    if let Some(v) = lookup(k) {
                        env.insert(k.clone(), v);
                    }
                }
            }
        }
        env
    }
}

fn check_abs_clean(path: &Path, field: &str) -> Result<(), ProfileError> {
    if !path.is_absolute() {
        return Err(ProfileError::invalid(
            field,
            format!("'{}' must be an absolute path", path.display()),
        ));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(ProfileError::invalid(
            field,
            format!("'{}' must not contain '..'", path.display()),
        ));
    }
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(ProfileError::invalid(field, "path contains a NUL byte"));
    }
    Ok(())
}

/// Destinations cordon builds itself cannot be replaced by a bind mount.
fn check_dest(dest: &Path, field: &str) -> Result<(), ProfileError> {
    const RESERVED: &[&str] = &["/", "/proc", "/dev", "/tmp", "/workspace", HOME];
    let reserved = RESERVED.iter().any(|r| dest == Path::new(r))
        || dest.starts_with("/proc")
        || dest.starts_with("/dev");
    if reserved {
        return Err(ProfileError::invalid(
            field,
            format!(
                "cannot mount over {} (cordon builds /, /proc, /dev, /tmp, /workspace and {HOME} itself; use --workspace for /workspace)",
                dest.display()
            ),
        ));
    }
    Ok(())
}

/// An error in a profile file, said in the file's terms: its `[table] key` and line, and an
/// example in TOML — not the flag that sets the same value on the command line (the checks
/// are shared; their messages name flags).
fn in_file(err: ProfileError, text: &str, origin: &Path) -> ProfileError {
    let (field, message) = match err {
        ProfileError::Invalid { field, message } => (field, message),
        ProfileError::Unit { field, source } => (field, source.to_string()),
        other => return other,
    };
    let key = file_key(&field);
    let (table, name) = key.split_once('.').unwrap_or(("", key.as_str()));
    let shown = if table.is_empty() {
        name.to_string()
    } else {
        format!("[{table}] {name}")
    };
    let mut message = message;
    for (flag, toml) in FLAG_EXAMPLES {
        message = message.replace(flag, toml);
    }
    let at = key_line(text, table, name).map_or(String::new(), |n| format!("line {n}: "));
    ProfileError::Toml {
        path: origin.to_path_buf(),
        message: format!("{at}{shown}: {message}"),
    }
}

/// The flag examples in shared messages, and what a profile file writes instead.
const FLAG_EXAMPLES: &[(&str, &str)] = &[
    ("e.g. --memory 256M", "e.g. memory = \"256M\""),
    ("e.g. --cpus 0.5", "e.g. cpus = 0.5"),
    ("e.g. --pids 64", "e.g. pids = 64"),
    ("e.g. --timeout 30s", "e.g. timeout = \"30s\""),
    ("e.g. --cpu-time 10s", "e.g. cpu_time = \"10s\""),
    ("e.g. --disk 64M", "e.g. disk = \"64M\""),
    ("use --workspace for", "use [filesystem] workspace for"),
];

/// The `table.key` (or top-level `key`) of a profile file that holds what `field` names.
fn file_key(field: &str) -> String {
    let key = match field {
        "memory" | "--memory" => "limits.memory",
        "cpus" | "--cpus" => "limits.cpus",
        "pids" | "--pids" => "limits.pids",
        "timeout" | "--timeout" => "limits.timeout",
        "cpu-time" | "--cpu-time" => "limits.cpu_time",
        "disk" | "--disk" => "limits.disk",
        "--output-limit" => "limits.output_limit",
        "nofile" => "limits.nofile",
        "--ro" => "filesystem.ro",
        "--rw" => "filesystem.rw",
        "--workspace" => "filesystem.workspace",
        "--allow-net" => "network.allow",
        "--env" => "env",
        "--secret" => "secrets",
        "--exec-allow" => "exec.allow",
        other => other.trim_start_matches('-'),
    };
    key.to_string()
}

/// The line (from 1) where `name` is set in `[table]` (or as `table.name`, or at the top
/// level when `table` is empty); `None` if the file does not set it there.
fn key_line(text: &str, table: &str, name: &str) -> Option<usize> {
    let dotted = format!("{table}.{name}");
    let mut current = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            current = line.trim_matches(['[', ']']).trim().to_string();
            continue;
        }
        let Some((k, _)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_matches('"');
        if (current == table && k == name) || (current.is_empty() && k == dotted) {
            return Some(i + 1);
        }
    }
    None
}

/// Turns a TOML error into "line N: message", so a user can find an unknown key.
fn describe_toml_error(text: &str, err: &toml::de::Error) -> String {
    let msg = err.message().trim().to_string();
    match err.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {msg}")
        }
        None => msg,
    }
}

/// A size in TOML: `"256M"` or a number of bytes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    fn bytes(&self, field: &str) -> Result<u64, ProfileError> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => parse_size(t).map_err(|source| ProfileError::Unit {
                field: field.to_string(),
                source,
            }),
        }
    }
}

fn duration(field: &str, text: &str) -> Result<Duration, ProfileError> {
    parse_duration(text).map_err(|source| ProfileError::Unit {
        field: field.to_string(),
        source,
    })
}

/// The TOML form. Every table denies unknown keys so that typos are caught, not ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: Option<String>,
    extends: Option<String>,
    hostname: Option<String>,
    require: Option<Vec<String>>,
    allow_no_landlock: Option<bool>,
    limits: Option<LimitsFile>,
    filesystem: Option<FilesystemFile>,
    env: Option<EnvFile>,
    network: Option<NetworkPolicy>,
    image: Option<String>,
    secrets: Option<BTreeMap<String, SecretFile>>,
    exec: Option<ExecFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecFile {
    allow: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    memory: Option<SizeValue>,
    cpus: Option<f64>,
    pids: Option<u32>,
    timeout: Option<String>,
    cpu_time: Option<String>,
    disk: Option<SizeValue>,
    output_limit: Option<SizeValue>,
    nofile: Option<u64>,
    file_size: Option<SizeValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilesystemFile {
    system: Option<SystemView>,
    workspace: Option<PathBuf>,
    #[serde(default)]
    ro: Vec<String>,
    #[serde(default)]
    rw: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    pass: Vec<String>,
}

impl ProfileFile {
    fn apply(self, p: &mut Profile) -> Result<(), ProfileError> {
        if let Some(h) = self.hostname {
            p.hostname = h;
        }
        if let Some(req) = self.require {
            for r in req {
                p.require.push(Layer::parse(&r)?);
            }
        }
        if let Some(a) = self.allow_no_landlock {
            p.allow_no_landlock = a;
        }
        if let Some(l) = self.limits {
            let pl = &mut p.limits;
            if let Some(v) = l.memory {
                pl.memory = v.bytes("limits.memory")?;
            }
            if let Some(v) = l.cpus {
                pl.cpus = v;
            }
            if let Some(v) = l.pids {
                pl.pids = v;
            }
            if let Some(v) = l.timeout {
                pl.timeout = duration("limits.timeout", &v)?;
            }
            if let Some(v) = l.cpu_time {
                pl.cpu_time = Some(duration("limits.cpu_time", &v)?);
            }
            if let Some(v) = l.disk {
                pl.disk = v.bytes("limits.disk")?;
            }
            if let Some(v) = l.output_limit {
                pl.output_limit = v.bytes("limits.output_limit")?;
            }
            if let Some(v) = l.nofile {
                pl.nofile = v;
            }
            if let Some(v) = l.file_size {
                pl.file_size = v.bytes("limits.file_size")?;
            }
        }
        if let Some(fs) = self.filesystem {
            if let Some(s) = fs.system {
                p.system = s;
            }
            if let Some(w) = fs.workspace {
                p.workspace = Some(w);
            }
            for spec in fs.ro {
                p.binds.push(Bind::parse(&spec, false)?);
            }
            for spec in fs.rw {
                p.binds.push(Bind::parse(&spec, true)?);
            }
        }
        if let Some(env) = self.env {
            for (k, v) in env.set {
                let e = EnvEntry::Set(k, v);
                e.validate().map_err(|e| named("env.set", e))?;
                p.env.push(e);
            }
            for k in env.pass {
                let e = EnvEntry::Pass(k);
                e.validate().map_err(|e| named("env.pass", e))?;
                p.env.push(e);
            }
        }
        if let Some(n) = self.network {
            p.network = n;
        }
        if let Some(i) = self.image {
            p.image = Some(i);
        }
        if let Some(x) = self.exec {
            p.exec_allow = Some(x.allow);
        }
        for (name, file) in self.secrets.unwrap_or_default() {
            p.secrets.retain(|s| s.name != name);
            p.secrets.push(file.into_spec(name)?);
        }
        Ok(())
    }
}

/// The same error, said of `field`.
fn named(field: &str, e: ProfileError) -> ProfileError {
    match e {
        ProfileError::Invalid { message, .. } => ProfileError::invalid(field, message),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_validate() {
        for name in BUILTINS {
            Profile::builtin(name).unwrap().validate().unwrap();
        }
        assert!(matches!(
            Profile::builtin("nope"),
            Err(ProfileError::UnknownBuiltin(_))
        ));
    }

    #[test]
    fn toml_roundtrip_and_overrides() {
        let p = Profile::from_toml(
            r#"
name = "mine"
extends = "strict"
require = ["seccomp", "user_ns"]
[limits]
memory = "128M"
timeout = "5s"
disk = 2097152
[filesystem]
ro = ["/opt/data:/data"]
[env]
set = { FOO = "bar" }
pass = ["LANG"]
"#,
            Path::new("mine.toml"),
        )
        .unwrap();
        assert_eq!(p.name, "mine");
        assert_eq!(p.limits.memory, 128 << 20);
        assert_eq!(p.limits.timeout, Duration::from_secs(5));
        assert_eq!(p.limits.disk, 2 << 20);
        assert_eq!(p.limits.pids, 32, "inherited from strict");
        assert_eq!(p.system, SystemView::Minimal);
        assert_eq!(p.require, vec![Layer::Seccomp, Layer::UserNs]);
        assert_eq!(p.binds[0].dest, PathBuf::from("/data"));
        let env = p.environment(|_| Some("x".into()));
        assert_eq!(env["FOO"], "bar");
        assert_eq!(env["LANG"], "x");
        assert_eq!(env["HOME"], HOME, "the home tmpfs, not the workspace");
    }

    #[test]
    fn an_image_is_named_in_toml_and_its_config_sits_under_the_profiles_env() {
        let mut p = Profile::from_toml(
            "image = \"python:3.12-slim\"\n[env]\nset = { FOO = \"profile\" }\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(p.image.as_deref(), Some("python:3.12-slim"));
        p.root_image = Some(RootImage {
            reference: "python:3.12-slim".into(),
            layers: vec!["/store/l1".into()],
            env: vec![
                "PATH=/usr/local/bin:/usr/bin".into(),
                "FOO=image".into(),
                "BAR=image".into(),
                "=junk".into(),
            ],
            entrypoint: vec!["/entry".into()],
            cmd: vec!["default".into()],
            working_dir: Some("app".into()),
            ..RootImage::default()
        });
        p.validate().unwrap();
        let env = p.environment(|_| None);
        assert_eq!(
            env["PATH"], "/usr/local/bin:/usr/bin",
            "the image's PATH wins over the base"
        );
        assert_eq!(
            env["FOO"], "profile",
            "the profile's env wins over the image's"
        );
        assert_eq!(env["BAR"], "image");
        assert_eq!(env["HOME"], HOME);
        assert!(!env.contains_key(""));
        let img = p.root_image.as_ref().unwrap();
        assert_eq!(img.command(&[]), ["/entry", "default"]);
        assert_eq!(img.command(&["given".into()]), ["/entry", "given"]);
        assert_eq!(img.working_dir(), Some(PathBuf::from("/app")));
        p.root_image.as_mut().unwrap().layers = vec!["relative".into()];
        assert!(p.validate().is_err());
        p.root_image.as_mut().unwrap().layers = Vec::new();
        assert!(p.validate().is_err());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = Profile::from_toml(
            "name = \"x\"\n[limits]\nmemroy = \"1G\"\n",
            Path::new("p.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("memroy"), "{err}");
    }

    /// A profile file's errors name its own `[table] key` and line, and give TOML examples:
    /// a flag (`--memory`, `--ro`, `--env`, `--allow-net`) is not in the file to fix.
    #[test]
    fn file_errors_name_the_profile_key_and_line_not_a_flag() {
        let cases: &[(&str, &str)] = &[
            (
                "name = \"x\"\n[limits]\nmemory = \"1M\"\n",
                "line 3: [limits] memory: must be at least 8M, e.g. memory = \"256M\"",
            ),
            ("[limits]\ncpus = 0.0\n", "line 2: [limits] cpus:"),
            ("[limits]\npids = 0\n", "line 2: [limits] pids:"),
            (
                "\n[limits]\ntimeout = \"30\"\n",
                "line 3: [limits] timeout: '30' is not a duration",
            ),
            (
                "[limits]\ncpu_time = \"500ms\"\n",
                "line 2: [limits] cpu_time: must be at least 1s",
            ),
            ("[limits]\ndisk = \"lots\"\n", "line 2: [limits] disk:"),
            ("limits.memory = \"1K\"\n", "line 1: [limits] memory:"),
            (
                "[filesystem]\nro = [\"relative/path\"]\n",
                "line 2: [filesystem] ro: 'relative/path' must be an absolute path",
            ),
            (
                "[filesystem]\nrw = [\"/data:/workspace\"]\n",
                "line 2: [filesystem] rw: cannot mount over /workspace",
            ),
            (
                "[filesystem]\nworkspace = \"ws\"\n",
                "line 2: [filesystem] workspace:",
            ),
            (
                "[env]\nset = { \"BAD-KEY\" = \"1\" }\n",
                "line 2: [env] set: 'BAD-KEY'",
            ),
            ("[env]\npass = [\"A B\"]\n", "line 2: [env] pass:"),
            (
                "[network]\nallow = [\"a b\"]\n",
                "line 2: [network] allow: 'a b'",
            ),
            ("hostname = \"has space\"\n", "line 1: hostname:"),
            (
                "[exec]\nallow = [\"python3\"]\n",
                "line 2: [exec] allow: 'python3' is not an absolute path",
            ),
            (
                "\nextends = \"nonexistent\"\n",
                "line 2: extends: 'nonexistent'",
            ),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let err = Profile::from_toml(text, Path::new("/p/x.toml"))
                .expect_err(text)
                .to_string();
            let flag = [
                "--memory",
                "--cpus",
                "--pids",
                "--timeout",
                "--cpu-time",
                "--disk",
                "--ro",
                "--rw",
                "--workspace",
                "--env",
                "--allow-net",
                "--exec-allow",
            ]
            .iter()
            .find(|f| err.contains(*f));
            if !err.starts_with("profile /p/x.toml: ") || !err.contains(want) || flag.is_some() {
                wrong.push(format!("{text:?}\n  got:  {err}\n  want: {want}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The flags themselves keep naming flags.
        let err = Bind::parse(":/x", false).unwrap_err().to_string();
        assert!(err.starts_with("--ro"), "{err}");
    }

    #[test]
    fn bad_values() {
        let cases = [
            "[limits]\nmemory = \"lots\"",
            "[limits]\ncpus = -1.0",
            "[limits]\npids = 0",
            "[limits]\ntimeout = \"30\"",
            "[filesystem]\nro = [\"relative/path\"]",
            "[filesystem]\nrw = [\"/data:/proc/x\"]",
            "[filesystem]\nrw = [\"/data:/home/sandbox\"]",
            "[filesystem]\nro = [\"/a/../etc\"]",
            "[env]\nset = { \"BAD-KEY\" = \"1\" }",
            "require = [\"magic\"]",
            "extends = \"nonexistent\"",
            "hostname = \"has space\"",
            "limits = 3",
        ];
        for c in cases {
            let r = Profile::from_toml(c, Path::new("t.toml"));
            assert!(r.is_err(), "accepted: {c}");
        }
    }
}
