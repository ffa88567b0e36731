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

/// One piece of the new root, in the order it is built.
#[derive(Debug, Clone)]
pub enum RootEntry {
    /// Bind host `src` at `dest`; read-only unless `writable`.
    Bind {
        src: PathBuf,
        dest: PathBuf,
        writable: bool,
        is_dir: bool,
    },
    /// A symlink, as the host has it (merged-/usr systems: /bin -> usr/bin).
    Symlink { target: PathBuf, link: PathBuf },
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
    /// Host ids the sandbox runs as (what its inner uid 1000 maps to).
    pub host_uid: u32,
    pub host_gid: u32,
    /// True when cordon runs as host root and must drop to `host_uid` before anything else.
    pub drop_root: bool,
    pub network: bool,
    /// Persistent sandbox: the init serves exec requests instead of running one payload.
    pub persistent: bool,
    /// The root is an image's layers under a writable layer instead of host binds.
    pub image: Option<ImagePlan>,
    /// The host refused namespaces: the sandbox runs in the host's own (see [`Plan::degrade`]).
    pub no_namespaces: bool,
    /// Landlock rules for a sandbox without a mount namespace: the same grants, on host paths
    /// (`--ro`/`--rw` sources instead of their destinations), completed by `degrade`.
    pub host_landlock: FsRules,
}

/// Where a sandbox without a mount namespace keeps its scratch space: a per-run host
/// directory (0700, the sandbox's own, removed after the run) in place of the tmpfs mounts.
pub fn run_dir_parts(run_dir: &Path) -> [PathBuf; 3] {
    [
        run_dir.join("tmp"),
        run_dir.join("home"),
        run_dir.join("workspace"),
    ]
}

impl Plan {
    /// Turns the plan into one for the host's own namespaces: scratch dirs, HOME and TMPDIR in
    /// `run_dir`, the working directory on the host (`/workspace…` is the workspace's host
    /// path), Landlock rules on host paths and refusing TCP but to the proxy.
    pub fn degrade(&mut self, run_dir: &Path) {
        let [tmp, home, scratch_ws] = run_dir_parts(run_dir);
        let workspace = self.workspace.clone().unwrap_or(scratch_ws);
        self.host_landlock
            .read_write
            .extend([tmp.clone(), home.clone(), workspace.clone()]);
        self.host_landlock.tcp_connect = Some(Vec::new());
        let inner_home = Path::new(cordon_policy::profile::HOME);
        let cwd = &self.cwd;
        self.cwd = if let Ok(rest) = cwd.strip_prefix("/workspace") {
            workspace.join(rest)
        } else if let Ok(rest) = cwd.strip_prefix(inner_home) {
            home.join(rest)
        } else if let Ok(rest) = cwd.strip_prefix("/tmp") {
            tmp.join(rest)
        } else {
            cwd.clone()
        };
        self.set_env("HOME", &home.to_string_lossy());
        self.set_env("TMPDIR", &tmp.to_string_lossy());
        self.no_namespaces = true;
    }

    /// Sets (or replaces) one variable of the payload's environment.
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
        let url = format!("http://127.0.0.1:{PROXY_PORT}");
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            env_map.insert(k.to_string(), url.clone());
        }
        for k in ["NO_PROXY", "no_proxy"] {
            env_map.insert(k.to_string(), "localhost,127.0.0.1,::1".to_string());
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
    };
    // No listing of `/` or `/dev` on the host: beneath them is everything (Landlock rules
    // are hierarchical), and the names of a host's files say much about it.
    let mut host_ll = FsRules {
        list_only: Vec::new(),
        read_only: vec!["/proc".into()],
        read_write: Vec::new(),
        files_rw: ll.files_rw.clone(),
        read_exec: Vec::new(),
        tcp_connect: None,
    };
    let image = p.root_image.as_ref().map(|img| ImagePlan {
        layers: img.layers.clone(),
        layer_trees: Vec::new(),
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
    for b in &p.binds {
        let flag = if b.writable { "--rw" } else { "--ro" };
        let meta = std::fs::metadata(&b.source)
            .map_err(|e| EngineError::Invalid(format!("{flag} {}: {e}", b.source.display())))?;
        root.push(RootEntry::Bind {
            src: b.source.clone(),
            dest: b.dest.clone(),
            writable: b.writable,
            is_dir: meta.is_dir(),
        });
        if b.writable {
            ll.read_write.push(b.dest.clone());
            host_ll.read_write.push(b.source.clone());
        } else {
            ll.read_exec.push(b.dest.clone());
            host_ll.read_exec.push(b.source.clone());
        }
    }
    // Programs written for E2B (and other agent tools) expect the user's home at /home/user:
    // there it is the same directory, unless a bind of the profile's own claims the name.
    if !p.binds.iter().any(|b| b.dest.starts_with("/home/user")) {
        root.push(RootEntry::Symlink {
            target: "sandbox".into(),
            link: "/home/user".into(),
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
        drop_root: input.drop_root,
        network,
        persistent: false,
        image,
        no_namespaces: false,
        host_landlock: host_ll,
    })
}
