//! The sandbox options `cordon run` and `cordon mcp` share, and the one place where they
//! become a `Profile`: a chosen profile (built-in or TOML file) with the flags on top.

use std::path::PathBuf;

use clap::Args;
use cordon_policy::units::{parse_duration, parse_size};
use cordon_policy::{Bind, EnvEntry, Layer, Profile};

#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// Built-in profile (default, strict) or a TOML profile file.
    #[arg(long, value_name = "NAME|FILE", default_value = "default")]
    pub profile: String,
    /// Memory limit for the whole sandbox, no swap (e.g. 256M, 1G). [profile default: 512M]
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU quota in cores, fractions allowed (e.g. 0.5). [profile default: 1]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub cpus: Option<String>,
    /// Maximum processes and threads at once. [profile default: 64]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub pids: Option<String>,
    /// Wall-clock limit (e.g. 500ms, 30s, 5m); for `cordon mcp`, of each command or code cell
    /// that does not ask for its own. [profile default: 30s]
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,
    /// CPU-time limit (e.g. 10s). [profile default: none]
    #[arg(long = "cpu-time", value_name = "DURATION")]
    pub cpu_time: Option<String>,
    /// Size of the writable /tmp and /workspace tmpfs. [profile default: 64M]
    #[arg(long, value_name = "SIZE")]
    pub disk: Option<String>,
    /// Bytes kept per output stream; the rest is drained and dropped. [profile default: 1M]
    #[arg(long = "output-limit", value_name = "SIZE")]
    pub output_limit: Option<String>,
    /// Host directory mounted read-write at /workspace (default: a fresh tmpfs).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Extra read-only bind mount (repeatable).
    #[arg(long, value_name = "PATH[:DEST]")]
    pub ro: Vec<String>,
    /// Extra read-write bind mount (repeatable).
    #[arg(long, value_name = "PATH[:DEST]")]
    pub rw: Vec<String>,
    /// Set a variable, or pass KEY through from cordon's environment (repeatable).
    #[arg(long, value_name = "KEY=VALUE|KEY")]
    pub env: Vec<String>,
    /// Allow egress through the proxy to this domain (repeatable). Default: no network.
    #[arg(long = "allow-net", value_name = "DOMAIN[:PORT]")]
    pub allow_net: Vec<String>,
    /// Bind a secret to hosts (repeatable): the sandbox gets a placeholder in NAME, the egress
    /// proxy puts the value (read here from env:VAR or file:PATH, never given inline) into
    /// request headers of HTTPS requests to HOST only. Each HOST must be in --allow-net.
    #[arg(long, value_name = "NAME=SOURCE@HOST[,HOST…]")]
    pub secret: Vec<String>,
    /// A PEM file of extra CA certificates the upstreams of the --secret hosts may chain to,
    /// besides the host's trust store.
    #[arg(long = "secret-ca", value_name = "FILE")]
    pub secret_ca: Option<PathBuf>,
    /// Resolve NAME to IP in the egress proxy instead of asking DNS (repeatable).
    #[arg(long = "add-host", value_name = "NAME:IP")]
    pub add_host: Vec<String>,
    /// Allow executing only these files (repeatable; absolute paths in the sandbox, `*` and
    /// `?` in the last part, e.g. /usr/lib/git-core/*). Everything else — a binary copied into
    /// /tmp, a script whose #! interpreter is not listed — is refused by the kernel
    /// (Landlock); the dynamic loader each listed program names is added. Adds to the
    /// profile's [exec] allow. [profile default: any file]
    #[arg(long = "exec-allow", value_name = "PATH")]
    pub exec_allow: Vec<PathBuf>,
    /// Run from an OCI image instead of the host's system directories: a name or digest in
    /// the image store (see `cordon image pull`), or a directory (a path starting with / or .).
    #[arg(long, value_name = "REF|DIR")]
    pub image: Option<String>,
    /// Fail (exit 125) rather than run without these layers: user_ns, pid_ns, net_ns,
    /// mount_ns, ipc_ns, uts_ns, cgroup_ns, seccomp, landlock, cgroup, rlimits.
    #[arg(long, value_name = "LAYER,…", value_delimiter = ',')]
    pub require: Vec<String>,
    /// Where the host refuses namespaces and has no Landlock either, run anyway (the host's
    /// files then protected by their permissions only) instead of refusing (exit 125).
    #[arg(long)]
    pub allow_no_landlock: bool,
}

fn bad(flag: &str, msg: impl std::fmt::Display) -> String {
    format!("{flag}: {msg}")
}

impl SandboxArgs {
    /// The chosen profile with the flags applied on top, validated. Host paths are made
    /// absolute against the current directory and must exist.
    pub fn build_profile(&self) -> Result<Profile, String> {
        let a = self;
        let mut p = Profile::resolve(&a.profile).map_err(|e| bad("--profile", e))?;
        let l = &mut p.limits;
        if let Some(v) = &a.memory {
            l.memory = parse_size(v).map_err(|e| bad("--memory", e))?;
        }
        if let Some(v) = &a.cpus {
            l.cpus = v.trim().parse().map_err(|_| {
                bad(
                    "--cpus",
                    format!("'{v}' is not a number of cores, e.g. 1 or 0.5"),
                )
            })?;
        }
        if let Some(v) = &a.pids {
            l.pids = v
                .trim()
                .parse()
                .map_err(|_| bad("--pids", format!("'{v}' is not a whole number, e.g. 64")))?;
        }
        if let Some(v) = &a.timeout {
            l.timeout = parse_duration(v).map_err(|e| bad("--timeout", e))?;
        }
        if let Some(v) = &a.cpu_time {
            l.cpu_time = Some(parse_duration(v).map_err(|e| bad("--cpu-time", e))?);
        }
        if let Some(v) = &a.disk {
            l.disk = parse_size(v).map_err(|e| bad("--disk", e))?;
        }
        if let Some(v) = &a.output_limit {
            l.output_limit = parse_size(v).map_err(|e| bad("--output-limit", e))?;
        }
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the current directory: {e}"))?;
        let absolute = |p: PathBuf| if p.is_absolute() { p } else { cwd.join(p) };
        if let Some(ws) = &a.workspace {
            let abs = absolute(ws.clone());
            let canon = abs
                .canonicalize()
                .map_err(|e| bad("--workspace", format!("{}: {e}", abs.display())))?;
            p.workspace = Some(canon);
        }
        for (specs, writable) in [(&a.ro, false), (&a.rw, true)] {
            for spec in specs {
                let mut b = Bind::parse(spec, writable).map_err(|e| e.to_string())?;
                let flag = if writable { "--rw" } else { "--ro" };
                let src = absolute(b.source.clone());
                b.source = src
                    .canonicalize()
                    .map_err(|e| bad(flag, format!("{}: {e}", src.display())))?;
                if !spec.contains(':') {
                    b.dest = b.source.clone();
                }
                p.binds.push(b);
            }
        }
        for e in &a.env {
            p.env.push(EnvEntry::parse(e).map_err(|e| e.to_string())?);
        }
        for n in &a.allow_net {
            p.network.allow.push(n.clone());
        }
        for h in &a.add_host {
            let (name, ip) = h
                .rsplit_once(':')
                .filter(|(n, _)| !n.is_empty())
                .ok_or_else(|| {
                    bad(
                        "--add-host",
                        format!("'{h}' is not NAME:IP, e.g. api.test:127.0.0.2"),
                    )
                })?;
            let ip = ip
                .trim_matches(|c| c == '[' || c == ']')
                .parse()
                .map_err(|_| bad("--add-host", format!("'{ip}' is not an IP address")))?;
            p.network.hosts.insert(name.to_string(), ip);
        }
        for spec in &a.secret {
            let mut s =
                cordon_policy::secrets::SecretSpec::parse_flag(spec).map_err(|e| e.to_string())?;
            p.secrets.retain(|old| old.name != s.name);
            if let Some(ca) = &a.secret_ca {
                s.ca = Some(absolute(ca.clone()));
            }
            p.secrets.push(s);
        }
        if let Some(ca) = &a.secret_ca {
            let ca = absolute(ca.clone());
            for s in p.secrets.iter_mut().filter(|s| s.ca.is_none()) {
                s.ca = Some(ca.clone());
            }
        }
        for r in &a.require {
            let layer = Layer::parse(r).map_err(|e| bad("--require", e))?;
            if !p.require.contains(&layer) {
                p.require.push(layer);
            }
        }
        if !a.exec_allow.is_empty() {
            p.exec_allow
                .get_or_insert_with(Vec::new)
                .extend(a.exec_allow.iter().cloned());
        }
        if let Some(i) = &a.image {
            p.image = Some(i.clone());
        }
        if a.allow_no_landlock {
            p.allow_no_landlock = true;
        }
        p.validate().map_err(|e| e.to_string())?;
        Ok(p)
    }
}

/// What runs the command: `cordon run`'s `--backend`.
#[derive(Args, Debug, Clone)]
pub struct BackendArgs {
    /// auto: a WebAssembly module (recognised by its first bytes, \0asm) runs in the wasm
    /// runtime, anything else as a process; process or wasm to choose. The wasm runtime
    /// confines itself (seccomp, Landlock, rlimits, no privileges).
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Auto,
    Process,
    Wasm,
}

impl From<BackendChoice> for cordon_service::runner::Backend {
    fn from(c: BackendChoice) -> Self {
        match c {
            BackendChoice::Auto => Self::Auto,
            BackendChoice::Process => Self::Process,
            BackendChoice::Wasm => Self::Wasm,
        }
    }
}

/// Resolves the profile's `image` in the store under `data_dir` and puts what the engine needs
/// into the profile. The returned root holds the image's layers against prune: keep it until
/// the sandbox is gone.
pub fn attach_image(
    profile: &mut cordon_policy::Profile,
    data_dir: &std::path::Path,
) -> Result<Option<cordon_image::ImageRoot>, String> {
    let Some(name) = profile.image.clone() else {
        return Ok(None);
    };
    let root = if cordon_image::store::names_directory(&name) {
        cordon_image::ImageRoot::directory(std::path::Path::new(&name))
    } else {
        cordon_image::Store::open(data_dir)
            .map_err(|e| format!("opening the image store in {}: {e}", data_dir.display()))?
            .resolve(&name)
    }
    .map_err(|e| format!("--image {name}: {e}"))?;
    profile.root_image = Some(root.root_image());
    profile.validate().map_err(|e| e.to_string())?;
    Ok(Some(root))
}
