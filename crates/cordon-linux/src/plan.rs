//! The plan: everything the sandbox side needs, resolved in the supervisor *before* forking,
//! so that the children only execute decisions and never parse or look up host state twice.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

use cordon_policy::{Limits, Profile, SystemView};

use crate::error::EngineError;
use crate::landlock_rules::FsRules;

/// The uid and gid the payload has inside its user namespace.
pub const INNER_ID: u32 = 1000;
/// Port of the egress proxy on the sandbox's loopback.
pub const PROXY_PORT: u16 = 3128;

/// The home's other name (E2B's), a symlink in the sandbox's root (see `build`).
pub(crate) const HOME_ALIAS: &str = "/home/user";

/// One piece of the new root, in the order it is built.
#[derive(Debug, Clone)]
pub enum RootEntry {
    /// Bind host `src` at `dest`; read-only unless `writable`. `idmap`: as root, attach an
    /// idmapped copy instead (`tree`, an fd the supervisor opened and the init inherits; see
    /// `idmap::bind_tree`), so host root's files there are the sandbox user's.
    Bind {
        src: PathBuf,
        dest: PathBuf,
        writable: bool,
        is_dir: bool,
        idmap: bool,
        tree: Option<std::os::fd::RawFd>,
    },
    /// A symlink, as the host has it (merged-/usr systems: /bin -> usr/bin).
    Symlink { target: PathBuf, link: PathBuf },
    /// A second path for a directory of the new root (`/home/user` for the home): a bind of
    /// it, so that the kernel's own name for it (`getcwd`, `/proc/self/cwd`) is the one the
    /// program went through — with a symlink, Python's `os.getcwd()` in `/home/user` said
    /// `/home/sandbox`.
    Alias { of: PathBuf, at: PathBuf },
    /// A path below a bind that the sandbox must not reach (a profile's `hide`): an empty
    /// read-only directory, or `/dev/null` without device access for a file, mounted over it.
    Hide { dest: PathBuf, is_dir: bool },
    /// With a programs allowlist: a directory of programs (`/usr/bin`, …) bound again over
    /// itself read-only and `noexec`, then each allowed file in it (host paths, symlinks
    /// resolved) bound over itself without `noexec`. Landlock already refuses `execve` of the
    /// others; `noexec` also refuses mapping them executable, which is how the dynamic loader
    /// runs a program named to it (`ld.so /bin/sh`) without an `execve` of its own.
    NoExecDir { dir: PathBuf, allowed: Vec<PathBuf> },
    /// A small file cordon writes (the sandbox's own `/etc/passwd`), bound read-only at `dest`
    /// over whatever the host's `/etc` has there.
    Generated { dest: PathBuf, contents: String },
}

/// Where the kernel shows its boot id (a random UUID drawn at boot).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// A random (version 4) UUID in the kernel's own format, newline included.
fn fresh_boot_id() -> String {
    let mut b = [0u8; 16];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).ok() != Some(16) {
        // Only distinct from the host's and the previous start's is promised, not secrecy.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (t ^ (u128::from(std::process::id()) << 64)).to_ne_bytes();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}\n",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The sandbox's own user database. With the host's `/etc`, uid 1000 would otherwise take the
/// name of the host's uid 1000 (a real person's account, shown in every prompt and `id`);
/// without any, programs that look their user up (`whoami`, pip, git, ssh) find no one.
/// The sandbox user is `sandbox` (uid and gid 1000, home /home/sandbox); root and nobody
/// are there for the ids the user namespace shows files of other owners as.
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n";

/// What a bind with hidden paths below it is granted instead of its whole tree: every entry
/// at each level from the bind down to a hidden path, except the ones leading to it — as
/// (destination, host source) pairs. The bind's own directory and each directory on the way
/// get no rule, so nothing can be created in them, and a hidden path that does not exist yet
/// cannot be made either. Read at sandbox start: an entry made later is not granted.
fn carve(dest: &Path, src: &Path, hidden: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(src.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let r = rel.join(e.file_name());
            if hidden.contains(&r) {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            // A symlink gets no rule: Landlock would open it and grant what it points to,
            // which may be the hidden path itself. Access through it is checked at its target.
            if t.is_symlink() {
                continue;
            }
            let on_the_way = hidden.iter().any(|h| h.starts_with(&r));
            let is_dir = t.is_dir();
            if on_the_way && is_dir {
                todo.push(r);
            } else if !on_the_way {
                out.push((dest.join(&r), src.join(&r)));
            }
            // A file on the way to a hidden path (the path names something below it that
            // cannot exist) gets no rule either.
        }
    }
    out
}

/// Whether `rel` below `base` is a directory, if it exists and is reached without a symlink on
/// the way: a mount over it then lands where the bind shows it, not where a link points (on
/// the host, before the pivot).
fn no_symlink_below(base: &Path, rel: &Path) -> Option<bool> {
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        let m = std::fs::symlink_metadata(&cur).ok()?;
        if m.file_type().is_symlink() {
            return None;
        }
    }
    std::fs::symlink_metadata(&cur).ok().map(|m| m.is_dir())
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    /// The sandbox's PATH, for finding the command.
    pub path: String,
    pub cwd: PathBuf,
    pub hostname: String,
    pub root: Vec<RootEntry>,
    /// Host dir bound at /workspace, or None for a tmpfs.
    pub workspace: Option<PathBuf>,
    /// An idmapped, detached copy of the workspace (an fd the supervisor opened and the
    /// init inherits) to attach instead of binding `workspace`; see `idmap`.
    pub workspace_tree: Option<std::os::fd::RawFd>,
    pub limits: Limits,
    pub landlock: FsRules,
    pub kernel_landlock_abi: u32,
    /// Host ids the sandbox runs as (what its inner ids map to).
    pub host_uid: u32,
    pub host_gid: u32,
    /// The sandbox's one uid and gid inside its user namespace: [`INNER_ID`], or an image
    /// run's `run_as` (Docker's `--user`). The only ids mapped; both map to the host ids.
    pub inner_uid: u32,
    pub inner_gid: u32,
    /// True when cordon runs as host root and must drop to `host_uid` before anything else.
    pub drop_root: bool,
    /// The sandbox gets the egress proxy (its listener, its variables, Landlock's one port).
    pub network: bool,
    /// ... only to report what the payload tried: see [`Plan::report_network_off`].
    pub network_report_only: bool,
    /// Persistent sandbox: the init serves exec requests instead of running one payload.
    pub persistent: bool,
    /// Learn mode: the init stacks [`crate::exec_learn`]'s notifying filter and hands its
    /// listener over with `Confined`.
    pub learn_exec: bool,
    /// The root is an image's layers under a writable layer instead of host binds.
    pub image: Option<ImagePlan>,
    /// The host refused namespaces: the sandbox runs in the host's own (see [`Plan::degrade`]).
    pub no_namespaces: bool,
    /// Landlock rules for a sandbox without a mount namespace: the same grants, on host paths
    /// (`--ro`/`--rw` sources instead of their destinations), completed by `degrade`.
    pub host_landlock: FsRules,
    /// Without namespaces: the per-run host directory that stands in for the scratch mounts
    /// (see [`run_dir_parts`]).
    pub run_dir: Option<PathBuf>,
}

/// Where a sandbox without a mount namespace keeps its scratch space: a per-run host
/// directory (0700, the sandbox's own, removed after the run) in place of the tmpfs mounts.
/// They sit where the sandbox would see them (`tmp`, `home/sandbox`, `workspace`), so that
/// the run directory can serve as the sandbox's root for the files API.
pub fn run_dir_parts(run_dir: &Path) -> [PathBuf; 3] {
    [
        run_dir.join("tmp"),
        run_dir.join(cordon_policy::profile::HOME.trim_start_matches('/')),
        run_dir.join("workspace"),
    ]
}

impl Plan {
    /// Turns the plan into one for the host's own namespaces: scratch dirs, HOME and TMPDIR in
    /// `run_dir`, the working directory on the host (`/workspace…` is the workspace's host
    /// path), Landlock rules on host paths and refusing TCP but to the proxy.
    pub fn degrade(&mut self, run_dir: &Path) {
        self.run_dir = Some(run_dir.to_path_buf());
        let [tmp, home, _] = run_dir_parts(run_dir);
        let workspace = self.host_workspace(run_dir);
        self.host_landlock
            .read_write
            .extend([tmp.clone(), home.clone(), workspace]);
        self.host_landlock.tcp_connect = Some(Vec::new());
        self.cwd = self.host_path(&self.cwd);
        self.set_env("HOME", &home.to_string_lossy());
        self.set_env("TMPDIR", &tmp.to_string_lossy());
        self.no_namespaces = true;
        if self.network_report_only {
            self.network = false;
            self.network_report_only = false;
            for (k, _) in proxy_env(PROXY_PORT) {
                self.unset_env(k);
            }
        }
    }

    /// The workspace's host directory without namespaces: the caller's, or the run dir's.
    fn host_workspace(&self, run_dir: &Path) -> PathBuf {
        let [_, _, scratch_ws] = run_dir_parts(run_dir);
        self.workspace.clone().unwrap_or(scratch_ws)
    }

    /// Where a sandbox path (`/workspace…`, the home, `/tmp…`) is on the host when the sandbox
    /// has no mount namespace; any other path is the host's own (what the sandbox sees), and
    /// so is every path of a sandbox with its namespaces.
    pub fn host_path(&self, path: &Path) -> PathBuf {
        let Some(run_dir) = &self.run_dir else {
            return path.to_path_buf();
        };
        let [tmp, home, _] = run_dir_parts(run_dir);
        let inner_home = Path::new(cordon_policy::profile::HOME);
        if let Ok(rest) = path.strip_prefix("/workspace") {
            self.host_workspace(run_dir).join(rest)
        } else if let Some(rest) = [inner_home, Path::new(HOME_ALIAS)]
            .iter()
            .find_map(|h| path.strip_prefix(h).ok())
        {
            home.join(rest)
        } else if let Ok(rest) = path.strip_prefix("/tmp") {
            tmp.join(rest)
        } else {
            path.to_path_buf()
        }
    }

    /// Sets (or replaces) one variable of the payload's environment.
    /// A one-shot run with the network off gets a proxy that refuses everything, only so
    /// that what the payload tried is reported (`network is off: HOST:PORT was refused`)
    /// instead of a DNS error with no cause. It opens nothing: the proxy's allowlist is empty.
    /// Without namespaces the sandbox would reach that proxy on the host's loopback, and
    /// the host's AF_UNIX sockets stay refused only without one, so [`Plan::degrade`] takes
    /// it back out.
    pub fn report_network_off(&mut self) {
        if self.network || self.persistent {
            return;
        }
        self.network = true;
        self.network_report_only = true;
        for (k, v) in proxy_env(PROXY_PORT) {
            self.set_env(k, &v);
        }
    }

    fn unset_env(&mut self, key: &str) {
        let prefix = format!("{key}=");
        self.env
            .retain(|e| !e.as_bytes().starts_with(prefix.as_bytes()));
    }

    pub fn set_env(&mut self, key: &str, value: &str) {
        let prefix = format!("{key}=");
        self.env
            .retain(|e| !e.as_bytes().starts_with(prefix.as_bytes()));
        let mut bytes = prefix.into_bytes();
        bytes.extend(value.bytes().filter(|b| *b != 0));
        if let Ok(c) = CString::new(bytes) {
            self.env.push(c);
        }
    }
}

/// An image root: its layers (host paths, top first) and, as root, detached idmapped copies
/// of them that the init attaches instead (fds it inherits; see `idmap::layer_trees`).
#[derive(Debug, Clone)]
pub struct ImagePlan {
    pub layers: Vec<PathBuf>,
    pub layer_trees: Vec<std::os::fd::RawFd>,
    /// A host directory as the writable layer (see `RootImage::upper`), else a tmpfs.
    pub upper: Option<PathBuf>,
    /// As root: an idmapped copy of `upper` the init attaches instead (an fd it inherits).
    pub upper_tree: Option<std::os::fd::RawFd>,
    /// Mount the merged root read-only at the end (see `RootImage::read_only`).
    pub read_only: bool,
}

/// An image's layers (top first) with each directory kept only where it is topmost. overlayfs
/// refuses a layer stacked twice (ELOOP), and an image has one whenever two steps made the same
/// content (`RUN ln -s a b` then `RUN ln -sf a b`: one layer in the store, by its digest). The
/// lower copy never decides a path: whatever it holds (a file, a whiteout, an opaque directory)
/// the upper copy holds too, above it — so the merged root is the same without it.
fn distinct_layers(layers: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    layers
        .iter()
        .filter(|l| seen.insert(l.as_path()))
        .cloned()
        .collect()
}

/// Top-level entries of an image root that get their own rules: the union of the layers'
/// top-level directories and files (a whiteout hides one in the merged root; a rule whose
/// path is gone is skipped). `/dev` and `/proc` are cordon's own mounts, with their rules.
fn image_top_level(layers: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs = std::collections::BTreeSet::new();
    let mut files = std::collections::BTreeSet::new();
    for layer in layers {
        let Ok(entries) = std::fs::read_dir(layer) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name == "dev" || name == "proc" {
                continue;
            }
            let dest = Path::new("/").join(&name);
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    dirs.insert(dest);
                }
                Ok(t) if t.is_file() => {
                    files.insert(dest);
                }
                _ => {}
            }
        }
    }
    files.retain(|f| !dirs.contains(f));
    (dirs.into_iter().collect(), files.into_iter().collect())
}

const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// The part of /etc a minimal system view keeps: what the dynamic loader reads, and what
/// the libraries in the system dirs cannot work without. Nothing here is a secret or says who
/// uses the host (no passwd, group, hosts, resolv.conf, machine-id).
/// - `alternatives`: Debian's and Fedora's symlinks to the chosen implementation, through which
///   the system dirs reach `libblas.so.3` (numpy), `awk` or `pager`; they dangle without it.
///   The directory holds only symlinks.
/// - `matplotlibrc`: Debian's matplotlib refuses to import without it.
/// - `fonts`: fontconfig's configuration (matplotlib runs `fc-list`).
/// - `ssl/certs`: the public CA certificates, for TLS through the egress proxy.
const MINIMAL_ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/matplotlibrc",
    "/etc/fonts",
    "/etc/ssl/certs",
];

/// What a sandbox without an image sees of the host's own files besides its binds and
/// workspace: the system dirs, and all of `/etc` or its minimal part (for the gateway, which
/// must refuse a path rule it cannot carve out of these).
pub fn host_system_paths(view: SystemView) -> Vec<&'static str> {
    let mut out = SYSTEM_DIRS.to_vec();
    match view {
        SystemView::Full => out.push("/etc"),
        SystemView::Minimal => out.extend(MINIMAL_ETC),
    }
    out
}

/// The host's directories of programs (as opposed to libraries, which must stay mappable
/// executable): those that are real directories here (on a merged-/usr host, `/bin` and
/// `/sbin` are links into `/usr`).
const PROGRAM_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/games",
    "/usr/local/games",
    "/bin",
    "/sbin",
];

/// Most allowed files one program directory takes as binds of their own; a list allowing
/// more of one (`/usr/bin/*`) leaves that directory mappable (the README says so).
const MAX_EXEC_BINDS_PER_DIR: usize = 64;

/// The [`RootEntry::NoExecDir`]s for the allowed files `allowed` (host paths).
fn program_dirs(allowed: &[PathBuf]) -> Vec<RootEntry> {
    let files: Vec<PathBuf> = allowed
        .iter()
        .filter_map(|f| f.canonicalize().ok())
        .collect();
    PROGRAM_DIRS
        .iter()
        .map(Path::new)
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .filter_map(|dir| {
            let mut mine: Vec<PathBuf> = files
                .iter()
                .filter(|f| f.parent() == Some(dir))
                .cloned()
                .collect();
            mine.sort();
            mine.dedup();
            (mine.len() <= MAX_EXEC_BINDS_PER_DIR).then(|| RootEntry::NoExecDir {
                dir: dir.to_path_buf(),
                allowed: mine,
            })
        })
        .collect()
}

fn cstring(s: &str, what: &str) -> Result<CString, EngineError> {
    CString::new(s).map_err(|_| EngineError::Invalid(format!("{what} contains a NUL byte")))
}

/// The host entry at `path` as a root entry at `dest`, or None if the host lacks it.
fn host_entry(path: &Path, dest: &Path, writable: bool) -> Option<RootEntry> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).ok()?;
        return Some(RootEntry::Symlink {
            target,
            link: dest.to_path_buf(),
        });
    }
    Some(RootEntry::Bind {
        src: path.to_path_buf(),
        dest: dest.to_path_buf(),
        writable,
        is_dir: meta.is_dir(),
        idmap: false,
        tree: None,
    })
}

pub struct PlanInput<'a> {
    pub profile: &'a Profile,
    pub argv: &'a [String],
    pub cwd: Option<&'a str>,
    pub extra_env: &'a BTreeMap<String, String>,
    pub host_uid: u32,
    pub host_gid: u32,
    pub drop_root: bool,
    pub kernel_landlock_abi: u32,
    /// A persistent sandbox has no command of its own.
    pub persistent_ok: bool,
}

/// The variables that point a payload's HTTP clients at the egress proxy on `port`.
pub(crate) fn proxy_env(port: u16) -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut vars: Vec<(&'static str, String)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k, url.clone()))
    .collect();
    for k in ["NO_PROXY", "no_proxy"] {
        vars.push((k, "localhost,127.0.0.1,::1".to_string()));
    }
    vars
}

pub fn build(input: PlanInput<'_>) -> Result<Plan, EngineError> {
    let p = input.profile;
    // A persistent sandbox's commands run as given (`docker exec` does not prepend the
    // entrypoint either).
    let argv_vec = match &p.root_image {
        Some(img) if !input.persistent_ok => img.command(input.argv),
        _ => input.argv.to_vec(),
    };
    if argv_vec.is_empty() && !input.persistent_ok {
        return Err(EngineError::Invalid(match &p.root_image {
            Some(img) => format!(
                "no COMMAND given and the image {} has no Entrypoint or Cmd: put one after --, \
                 e.g. cordon run --image {} -- /bin/sh -c 'echo hi'",
                img.reference, img.reference
            ),
            None => "no COMMAND given: cordon run [OPTIONS] -- COMMAND [ARGS]..., e.g. \
                 cordon run -- python3 -c 'print(1)'"
                .into(),
        }));
    }
    let argv = argv_vec
        .iter()
        .map(|a| cstring(a, "an argument"))
        .collect::<Result<Vec<_>, _>>()?;

    let mut env_map = p.environment(|k| std::env::var(k).ok());
    // Persistent sandboxes always get the proxy (denying everything until the owner allows
    // something), so that their policy can change while they run.
    let network = p.network.is_enabled() || input.persistent_ok;
    if network {
        for (k, v) in proxy_env(PROXY_PORT) {
            env_map.insert(k.to_string(), v);
        }
    }
    for (k, v) in input.extra_env {
        env_map.insert(k.clone(), v.clone());
    }
    let path = env_map.get("PATH").cloned().unwrap_or_default();
    let env = env_map
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}"), "an environment variable"))
        .collect::<Result<Vec<_>, _>>()?;

    let mut root = Vec::new();
    let mut ll = FsRules {
        list_only: vec!["/".into(), "/dev".into()],
        read_only: vec!["/proc".into()],
        read_write: vec![
            "/tmp".into(),
            "/workspace".into(),
            cordon_policy::profile::HOME.into(),
            "/dev/shm".into(),
        ],
        files_rw: ["null", "zero", "full", "random", "urandom"]
            .iter()
            .map(|d| PathBuf::from("/dev").join(d))
            .collect(),
        read_exec: Vec::new(),
        tcp_connect: None,
        exec_only: None,
    };
    // No listing of `/` or `/dev` on the host: beneath them is everything (Landlock rules
    // are hierarchical), and the names of a host's files say much about it.
    let host_files_rw = ll.files_rw.clone();
    // The sandbox's own terminals (its devpts instance, and `/dev/tty`, which names the
    // caller's controlling terminal); not in the no-namespace mode, where they are the host's.
    ll.files_rw
        .extend(["/dev/tty", "/dev/pts"].map(PathBuf::from));
    let mut host_ll = FsRules {
        list_only: Vec::new(),
        read_only: vec!["/proc".into()],
        read_write: Vec::new(),
        files_rw: host_files_rw,
        read_exec: Vec::new(),
        tcp_connect: None,
        exec_only: None,
    };
    let run_as = p
        .root_image
        .as_ref()
        .and_then(|img| img.run_as)
        .unwrap_or((INNER_ID, INNER_ID));
    let image = p.root_image.as_ref().map(|img| ImagePlan {
        layers: distinct_layers(&img.layers),
        layer_trees: Vec::new(),
        upper: img.upper.clone(),
        upper_tree: None,
        read_only: img.read_only,
    });
    if let Some(img) = &image {
        // The image's root is the sandbox's own writable layer: everything in it may be
        // written, as in a container; the host's system dirs are not there at all.
        let (dirs, files) = image_top_level(&img.layers);
        ll.read_write.extend(dirs);
        ll.files_rw.extend(files);
    }
    for dir in SYSTEM_DIRS.iter().filter(|_| image.is_none()) {
        if let Some(e) = host_entry(Path::new(dir), Path::new(dir), false) {
            root.push(e);
            ll.read_exec.push(dir.into());
            host_ll.read_exec.push(dir.into());
        }
    }
    match p.system {
        _ if image.is_some() => {}
        SystemView::Full => {
            if let Some(e) = host_entry(Path::new("/etc"), Path::new("/etc"), false) {
                root.push(e);
                ll.read_exec.push("/etc".into());
                host_ll.read_exec.push("/etc".into());
            }
        }
        SystemView::Minimal => {
            for f in MINIMAL_ETC {
                if let Some(e) = host_entry(Path::new(f), Path::new(f), false) {
                    root.push(e);
                    ll.read_exec.push(f.into());
                    host_ll.read_exec.push(f.into());
                }
            }
        }
    }
    // Over the host's /etc only: an image keeps its own users (its files are owned by them),
    // and the minimal view has no user database at all.
    if image.is_none() && p.system == SystemView::Full {
        for (dest, contents) in [("/etc/passwd", PASSWD), ("/etc/group", GROUP)] {
            // The host's /etc is bound read-only: only a plain file there can be covered.
            if std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file()) {
                root.push(RootEntry::Generated {
                    dest: dest.into(),
                    contents: contents.into(),
                });
            }
        }
    }
    // A boot id of the sandbox's own, new at each start, as LXC gives its containers: the
    // host's is a fingerprint of the machine shared by every sandbox on it, and programs (E2B's
    // tests among them) read a changed one as "this environment was started afresh" — true of
    // a sandbox resumed from its files, false of one resumed from a freeze.
    root.push(RootEntry::Generated {
        dest: BOOT_ID.into(),
        contents: fresh_boot_id(),
    });
    for b in &p.binds {
        let flag = if b.writable { "--rw" } else { "--ro" };
        let meta = std::fs::metadata(&b.source)
            .map_err(|e| EngineError::Invalid(format!("{flag} {}: {e}", b.source.display())))?;
        root.push(RootEntry::Bind {
            src: b.source.clone(),
            dest: b.dest.clone(),
            writable: b.writable,
            is_dir: meta.is_dir(),
            idmap: b.idmap && meta.is_dir(),
            tree: None,
        });
        if b.writable {
            ll.read_write.push(b.dest.clone());
            host_ll.read_write.push(b.source.clone());
        } else {
            ll.read_exec.push(b.dest.clone());
            host_ll.read_exec.push(b.source.clone());
        }
    }
    // Hidden paths below binds: mounted over, and the bind's Landlock grant replaced by its
    // tree minus them — a symlink, a hard link or a path nobody foresaw still meets both.
    for c in p.hidden_in() {
        let Some(b) = p.binds.get(c.bind) else {
            continue;
        };
        let (rules, host_rules) = if b.writable {
            (&mut ll.read_write, &mut host_ll.read_write)
        } else {
            (&mut ll.read_exec, &mut host_ll.read_exec)
        };
        rules.retain(|d| *d != b.dest);
        host_rules.retain(|d| *d != b.source);
        for (dest, src) in carve(&b.dest, &b.source, &c.hidden) {
            rules.push(dest);
            host_rules.push(src);
        }
        for h in &c.hidden {
            // A hidden path that does not exist gets no mount (nothing to cover, and its
            // parent has no Landlock rule to create it with); one behind a symlink neither.
            if let Some(is_dir) = no_symlink_below(&b.source, h) {
                root.push(RootEntry::Hide {
                    dest: b.dest.join(h),
                    is_dir,
                });
            }
        }
    }
    // Programs written for E2B (and other agent tools) expect the user's home at /home/user:
    // there it is the same directory, unless a bind of the profile's own claims the name.
    if !p.binds.iter().any(|b| b.dest.starts_with(HOME_ALIAS)) {
        root.push(RootEntry::Alias {
            of: cordon_policy::profile::HOME.into(),
            at: HOME_ALIAS.into(),
        });
    }
    if let Some(ws) = &p.workspace {
        let meta = std::fs::metadata(ws)
            .map_err(|e| EngineError::Invalid(format!("--workspace {}: {e}", ws.display())))?;
        if !meta.is_dir() {
            return Err(EngineError::Invalid(format!(
                "--workspace {}: not a directory",
                ws.display()
            )));
        }
    }
    // The programs allowlist: enforced by Landlock alone, so a kernel without it cannot run
    // such a sandbox at all (a run that executes anything would be a lie about the profile).
    if let Some(allowed) = crate::exec_allow::resolve(p, &host_system_paths(p.system))? {
        if input.kernel_landlock_abi == 0 {
            return Err(EngineError::Required {
                missing: "landlock".into(),
                hint: "the programs allowlist (--exec-allow, [exec] allow) is enforced by \
                       Landlock (Linux 5.13+, with landlock in the lsm= boot parameter); \
                       run without it, or on a host that has Landlock"
                    .into(),
            });
        }
        root.extend(program_dirs(&allowed.host));
        ll.exec_only = Some(allowed.sandbox);
        host_ll.exec_only = Some(allowed.host);
    }
    let cwd = match (
        input.cwd,
        p.root_image.as_ref().and_then(|i| i.working_dir()),
    ) {
        (Some(c), _) => PathBuf::from(c),
        (None, Some(w)) => w,
        (None, None) => PathBuf::from("/workspace"),
    };
    if !cwd.is_absolute() {
        return Err(EngineError::Invalid(format!(
            "--cwd {}: must be an absolute path inside the sandbox, e.g. /workspace/src",
            cwd.display()
        )));
    }

    Ok(Plan {
        argv,
        env,
        path,
        cwd,
        hostname: p.hostname.clone(),
        root,
        workspace: p.workspace.clone(),
        workspace_tree: None,
        limits: p.limits.clone(),
        landlock: ll,
        kernel_landlock_abi: input.kernel_landlock_abi,
        host_uid: input.host_uid,
        host_gid: input.host_gid,
        inner_uid: run_as.0,
        inner_gid: run_as.1,
        drop_root: input.drop_root,
        network,
        network_report_only: false,
        persistent: false,
        learn_exec: p.learn_exec,
        image,
        no_namespaces: false,
        host_landlock: host_ll,
        run_dir: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_policy::profile::Bind;

    #[test]
    fn each_start_draws_a_boot_id_of_its_own_in_the_kernels_format() {
        let (a, b) = (fresh_boot_id(), fresh_boot_id());
        assert_ne!(a, b);
        let host = std::fs::read_to_string(BOOT_ID).unwrap_or_default();
        assert_ne!(a, host);
        for id in [&a, &b] {
            let parts: Vec<usize> = id.trim_end().split('-').map(str::len).collect();
            assert_eq!(parts, [8, 4, 4, 4, 12], "{id}");
            assert!(id.ends_with('\n') && id.as_bytes()[14] == b'4', "{id}");
        }
    }

    #[test]
    fn a_layer_stacked_twice_is_mounted_once_where_it_is_topmost() {
        let l = |s: &str| PathBuf::from(s);
        assert_eq!(
            distinct_layers(&[l("/a"), l("/b"), l("/a"), l("/c"), l("/b")]),
            vec![l("/a"), l("/b"), l("/c")]
        );
    }

    /// A bind with a hidden subtree and a hidden file: its Landlock grant is the tree minus
    /// them (on the sandbox's paths and, for a sandbox without namespaces, the host's), and
    /// each existing one gets a mount over it.
    #[test]
    fn hidden_paths_are_carved_out_of_the_bind() {
        let dir = std::env::temp_dir().join(format!("cordon-carve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["system/deep", "public/sub", "other"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        for f in ["system/x", "public/secret.txt", "public/ok.txt", "top.txt"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let mut p = Profile::builtin("default").unwrap();
        p.binds.push(Bind {
            source: dir.clone(),
            dest: "/data".into(),
            writable: true,
            idmap: false,
            limit: None,
        });
        p.hide = vec![
            "/data/system".into(),
            "/data/public/secret.txt".into(),
            "/data/missing".into(),
        ];
        p.validate().unwrap();
        let plan = build(PlanInput {
            profile: &p,
            argv: &["true".to_string()],
            cwd: None,
            extra_env: &BTreeMap::new(),
            host_uid: 1000,
            host_gid: 1000,
            drop_root: false,
            kernel_landlock_abi: 6,
            persistent_ok: false,
        })
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut rw: Vec<_> = plan
            .landlock
            .read_write
            .iter()
            .filter(|d| d.starts_with("/data"))
            .cloned()
            .collect();
        rw.sort();
        let want: Vec<PathBuf> = [
            "/data/other",
            "/data/public/ok.txt",
            "/data/public/sub",
            "/data/top.txt",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(rw, want);
        let mut host: Vec<_> = plan
            .host_landlock
            .read_write
            .iter()
            .filter(|d| d.starts_with(&dir))
            .cloned()
            .collect();
        host.sort();
        assert_eq!(
            host,
            want.iter()
                .map(|w| dir.join(w.strip_prefix("/data").unwrap()))
                .collect::<Vec<_>>()
        );
        let hides: Vec<_> = plan
            .root
            .iter()
            .filter_map(|e| match e {
                RootEntry::Hide { dest, is_dir } => Some((dest.clone(), *is_dir)),
                _ => None,
            })
            .collect();
        assert_eq!(
            hides,
            vec![
                ("/data/system".into(), true),
                ("/data/public/secret.txt".into(), false)
            ]
        );
    }

    const CHILD: &str = "CORDON_TEST_CARVE_CHILD";

    /// Landlock alone (no mount over the hidden paths, no mount namespace: what a sandbox
    /// without namespaces gets): the plan's host rules for a bind with a hidden directory and
    /// a hidden file, applied to this process, which then reaches for them by their paths, a
    /// symlink, `..`, `/proc/self/root` and a hard link. Unprivileged: works rootless too.
    #[test]
    fn landlock_alone_fences_the_hidden_paths() {
        if crate::detect::landlock_abi() == 0 {
            eprintln!("Landlock is not enabled in this kernel; nothing to attack");
            return;
        }
        let dir = std::env::temp_dir().join(format!("cordon-carve-ll-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("system")).unwrap();
        std::fs::create_dir_all(dir.join("public")).unwrap();
        std::fs::write(dir.join("system/precious"), "keep me").unwrap();
        std::fs::write(dir.join("public/secret"), "keep me too").unwrap();
        std::fs::write(dir.join("public/ok"), "fine").unwrap();
        std::os::unix::fs::symlink(dir.join("system"), dir.join("public/link")).unwrap();
        std::os::unix::fs::symlink("secret", dir.join("public/link2")).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "plan::tests::carve_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let host_ok = std::fs::read_to_string(dir.join("system/precious")).ok();
        let host_ok2 = std::fs::read_to_string(dir.join("public/secret")).ok();
        let planted = dir.join("system/planted").exists() || dir.join("public/hl").exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let verdict = |what: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("VERDICT {what}: ")))
                .unwrap_or_else(|| panic!("no verdict for {what:?} in:\n{text}"))
                .to_string()
        };
        for attack in [
            "read hidden file",
            "read hidden dir's file",
            "list hidden dir",
            "plant in hidden dir",
            "overwrite hidden file",
            "through a symlink to the dir",
            "through a symlink to the file",
            "dot-dot",
            "proc self root",
            "hard link",
            "plant in the bind's own dir",
        ] {
            assert_ne!(verdict(attack), "allowed", "{attack}:\n{text}");
        }
        for control in ["read a sibling", "write in the sibling dir"] {
            assert_eq!(verdict(control), "allowed", "{control}");
        }
        assert_eq!(host_ok.as_deref(), Some("keep me"));
        assert_eq!(host_ok2.as_deref(), Some("keep me too"));
        assert!(!planted);
    }

    #[test]
    fn carve_child() {
        let Some(dir) = std::env::var_os(CHILD).map(PathBuf::from) else {
            return;
        };
        let mut p = Profile::builtin("default").unwrap();
        p.binds.push(Bind {
            source: dir.clone(),
            dest: "/data".into(),
            writable: true,
            idmap: false,
            limit: None,
        });
        p.hide = vec!["/data/system".into(), "/data/public/secret".into()];
        let plan = build(PlanInput {
            profile: &p,
            argv: &["true".to_string()],
            cwd: None,
            extra_env: &BTreeMap::new(),
            host_uid: 1000,
            host_gid: 1000,
            drop_root: false,
            kernel_landlock_abi: crate::detect::landlock_abi(),
            persistent_ok: false,
        })
        .unwrap();
        let applied =
            crate::landlock_rules::apply(&plan.host_landlock, plan.kernel_landlock_abi).unwrap();
        assert!(applied.abi > 0, "Landlock was not enforced");
        let d = |r: &str| dir.join(r);
        let report = |what: &str, r: std::io::Result<()>| match r {
            Ok(()) => println!("\nVERDICT {what}: allowed"),
            Err(e) => println!("\nVERDICT {what}: {:?}", e.kind()),
        };
        let read = |p: PathBuf| std::fs::read(p).map(|_| ());
        report("read hidden file", read(d("public/secret")));
        report("read hidden dir's file", read(d("system/precious")));
        report(
            "list hidden dir",
            std::fs::read_dir(d("system")).map(|_| ()),
        );
        report(
            "plant in hidden dir",
            std::fs::write(d("system/planted"), "x"),
        );
        report(
            "overwrite hidden file",
            std::fs::write(d("public/secret"), "x"),
        );
        report(
            "through a symlink to the dir",
            read(d("public/link/precious")),
        );
        report("through a symlink to the file", read(d("public/link2")));
        report("dot-dot", read(d("public/../system/precious")));
        report(
            "proc self root",
            read(PathBuf::from(format!(
                "/proc/self/root{}",
                d("system/precious").display()
            ))),
        );
        report(
            "hard link",
            std::fs::hard_link(d("public/secret"), d("public/hl")),
        );
        report(
            "plant in the bind's own dir",
            std::fs::write(d("planted"), "x"),
        );
        report("read a sibling", read(d("public/ok")));
        report(
            "write in the sibling dir",
            std::fs::write(d("public/ok"), "still fine"),
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }

    #[test]
    fn a_hidden_path_outside_every_bind_is_refused() {
        let mut p = Profile::builtin("default").unwrap();
        p.hide = vec!["/etc/shadow".into()];
        assert!(p.validate().unwrap_err().to_string().contains("hide"));
    }
}
