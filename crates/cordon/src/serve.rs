//! `cordon serve` and `cordon keys`: wiring for the HTTP service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use cordon_policy::units::{parse_duration, parse_size};
use cordon_server::{Config, ServeOptions, Service};
use cordon_service::registry::Registry;
use cordon_service::runner::{self, Job, Module, Stdin};

#[derive(Args, Debug)]
#[command(
    after_help = "On first start (no keys yet) an API key is created and printed once; \
create more with `cordon keys create`. Request bodies are JSON, whatever their Content-Type \
says; the whole API is described at /openapi.json.\n\nExample:\n  \
KEY=$(cordon keys create --name me)\n  \
cordon serve --listen 127.0.0.1:8080 &\n  \
until curl -sf http://127.0.0.1:8080/healthz >/dev/null; do sleep 0.2; done\n  \
curl -H \"Authorization: Bearer $KEY\" -d '{}' http://127.0.0.1:8080/v1/sandboxes\n\n\
Templates (--templates FILE): each names an image and a profile with defaults; a request's own \
fields win over them (env variable by variable). `base` and `code-interpreter-v1` are built in \
(the default profile on the host's system directories) and a table of that name replaces them; \
a create naming no known template is a 404 listing the known ones.\n  \
[templates.data-science]\n  \
image = \"my-agent:1\"        # in the store (cordon image build/pull); absent: the host's system\n  \
profile = \"default\"         # a built-in profile: default or strict\n  \
disk = \"2G\"                 # /tmp, /workspace and the home\n  \
memory = \"2G\"\n  \
cpus = 2\n  \
pids = 256\n  \
ttl = \"1h\"\n  \
allow_net = [\"pypi.org\", \"files.pythonhosted.org\"]   # egress allowlist (--allow-net entries)\n  \
hosts = { \"pkgs.internal\" = \"10.0.0.5\" }               # names the proxy resolves itself\n  \
env = { MPLBACKEND = \"Agg\" }\n\
Then: curl -d '{\"template\": \"data-science\"}' …/v1/sandboxes, or E2B's Sandbox.create(\"data-science\")."
)]
pub struct ServeArgs {
    /// Address to listen on. Non-loopback addresses require API keys (no --no-auth).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    data: DataDir,
    /// Serve without authentication (loopback only).
    #[arg(long)]
    no_auth: bool,
    /// Do not serve the web console (`/console`: sandboxes, their use, files, a terminal;
    /// signed in with an API key).
    #[arg(long)]
    no_console: bool,
    /// Name of this node; sandbox ids carry it. [default: the host name]
    #[arg(long)]
    node: Option<String>,
    /// Time to live of a sandbox created without one.
    #[arg(long, default_value = "10m")]
    default_ttl: String,
    /// Longest time to live a client may ask for.
    #[arg(long, default_value = "24h")]
    max_ttl: String,
    /// Largest file upload (and download).
    #[arg(long, default_value = "100M")]
    max_upload: String,
    /// Start even where the host refuses namespaces: one-shot runs and persistent sandboxes
    /// then go on without them (Landlock, seccomp, rlimits, a cgroup where one is writable),
    /// each Outcome's and each sandbox's `enforcement` saying what is missing. Without this
    /// flag the server refuses to start there (exit 125).
    #[arg(long)]
    allow_degraded: bool,
    /// Layers every sandbox must have (as `cordon run --require`): the server refuses to
    /// start on a host without them, and each sandbox is refused rather than run weaker.
    #[arg(long, value_name = "LAYER,…", value_delimiter = ',')]
    require: Vec<String>,
    /// A registry (`HOST:PORT`) that `POST /v1/images/pull` may reach over plain HTTP.
    /// Loopback registries always may; any other must speak HTTPS unless named here.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    insecure_registry: Vec<String>,
    /// Pull only from this registry (`HOST[:PORT]`, `docker.io` for Docker Hub); repeat for
    /// more. A pull makes this server connect wherever the caller says: name the registries
    /// when API keys should not choose. [default: any registry]
    #[arg(long = "pull-from", value_name = "REGISTRY")]
    pull_from: Vec<String>,
    /// A request naming an image the store (<data-dir>/images) lacks: refused (never), or
    /// pulled from its registry first (missing).
    #[arg(long, value_enum, default_value = "never")]
    image_pull: ImagePullArg,
    /// Where E2B sandboxes that ask for internet access (the SDK's `allow_internet_access`,
    /// on by default) may connect, as `--allow-net` entries (e.g. pypi.org,
    /// files.pythonhosted.org); repeat or separate with commas. cordon's egress is an
    /// allowlist: without this flag such sandboxes get no network, and their info says so.
    #[arg(long = "e2b-allow-net", value_name = "ENTRY,…", value_delimiter = ',')]
    e2b_allow_net: Vec<String>,
    /// Where the RUN steps of templates built through the API (E2B's Template SDK) may
    /// connect, as `--allow-net` entries; repeat or separate with commas. Default: nowhere.
    #[arg(
        long = "template-allow-net",
        value_name = "ENTRY,…",
        value_delimiter = ','
    )]
    template_allow_net: Vec<String>,
    /// Named templates a create selects (the native API's `template`, E2B's `templateID`):
    /// a TOML file of `[templates.NAME]` tables, checked at start (see below).
    #[arg(long, value_name = "FILE")]
    templates: Option<PathBuf>,
    /// A PEM file of CA certificates the hosts of stored secrets may present certificates
    /// from, besides the host's trust store (an internal CA). Stored secrets are E2B's
    /// `Secret` API; a sandbox gets a placeholder, the proxy the value (see the README).
    #[arg(long = "secret-ca", value_name = "FILE")]
    secret_ca: Option<PathBuf>,
    /// Serve as a node of a cordon cluster (`cordon cluster up` starts nodes so): a file
    /// holding the cluster's secret, which every request must carry (the cluster's routers
    /// send it), so that clients reach this node only through a router. Keys then come from
    /// the cluster (none is created here).
    #[arg(long, value_name = "FILE", hide = true)]
    cluster_secret_file: Option<PathBuf>,
    /// Serve the Docker Engine API (docker-py, the docker CLI) on this Unix socket, created
    /// mode 0660: whoever may open it gets sandboxes (as the local caller), never the host.
    #[arg(long, value_name = "PATH")]
    docker_socket: Option<PathBuf>,
    /// The Docker socket's group (a name or a gid): its members may use it.
    #[arg(long, value_name = "GROUP", requires = "docker_socket")]
    docker_socket_group: Option<String>,
    /// Serve the Docker Engine API on this TCP address too; every request there needs an
    /// API key (`Authorization: Bearer KEY`).
    #[arg(long, value_name = "ADDR")]
    docker_listen: Option<SocketAddr>,
    /// The domain under which sandboxes' ports are reached through this server (E2B's
    /// `sandboxDomain`): a request for `<port>-<sandbox id>.<domain>` (HTTP or HTTPS, on this
    /// server's port) goes to that port inside that sandbox. Point the names under it at the
    /// server (a wildcard DNS entry). Default: `localhost:<port>`.
    #[arg(long, value_name = "HOST[:PORT]")]
    sandbox_domain: Option<String>,
    /// A host directory under which Docker clients may bind host paths (`-v DIR:/data`);
    /// repeat for more. Without it no host path can be bound; `/`, `/etc`, `/proc`, `/sys`,
    /// `/dev`, `/boot`, `/run` and `/root` never can.
    #[arg(long, value_name = "DIR")]
    docker_bind_root: Vec<PathBuf>,
}

/// A group name or number from `--docker-socket-group`, as a gid.
fn group_id(g: &str) -> Result<u32, String> {
    if let Ok(n) = g.parse::<u32>() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid = f.nth(1)?.parse::<u32>().ok()?;
            (name == g).then_some(gid)
        })
        .next()
        .ok_or_else(|| format!("--docker-socket-group: no group '{g}' in /etc/group"))
}

/// Whether this host gives sandboxes what the server's configuration accepts: every required
/// layer, and every namespace unless `allow_degraded`. Says why not.
fn host_accepts(
    report: &cordon_linux::detect::HostReport,
    require: &[cordon_policy::Layer],
    allow_degraded: bool,
) -> Result<(), String> {
    use cordon_policy::Layer;
    let namespaces = report.mode == "full";
    let missing: Vec<&str> = require
        .iter()
        .filter(|l| match l {
            Layer::Landlock => report.landlock_abi == 0,
            Layer::Cgroup => report.cgroup == "none",
            Layer::Seccomp => !report.feature("seccomp").is_none_or(|f| f.available),
            Layer::Rlimits => false,
            _ => !namespaces,
        })
        .map(|l| l.name())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "this host cannot provide the required layer(s) {} (see `cordon check`)",
            missing.join(",")
        ));
    }
    match report.mode {
        "full" => Ok(()),
        _ if allow_degraded => Ok(()),
        "no_namespaces" => Err(
            "this host refuses namespaces: sandboxes would run without them (Landlock, seccomp and \
             rlimits only; see `cordon check`). Start with --allow-degraded to accept that (every \
             Outcome's and sandbox's enforcement then says what is missing), or give cordon \
             namespaces"
                .to_string(),
        ),
        _ => Err(
            "this host cannot sandbox (see `cordon check`); --allow-degraded starts the server \
             anyway, and each sandbox is refused"
                .to_string(),
        ),
    }
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum ImagePullArg {
    Never,
    Missing,
}

#[derive(Args, Debug, Clone, Default)]
pub struct DataDir {
    /// Where the registry (SQLite), audit log and keys live.
    /// [default: $CORDON_DATA_DIR, /var/lib/cordon as root, else ~/.local/share/cordon]
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
}

/// cordon's data directory when none is given: $CORDON_DATA_DIR, /var/lib/cordon as root,
/// else ~/.local/share/cordon.
pub(crate) fn default_data_dir() -> PathBuf {
    DataDir { data_dir: None }.resolve()
}

impl DataDir {
    pub(crate) fn resolve(&self) -> PathBuf {
        if let Some(d) = &self.data_dir {
            return d.clone();
        }
        if let Some(d) = std::env::var_os("CORDON_DATA_DIR") {
            return PathBuf::from(d);
        }
        if rustix::process::geteuid().is_root() {
            return PathBuf::from("/var/lib/cordon");
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        home.join(".local/share/cordon")
    }
}

#[derive(Args, Debug)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
    #[command(flatten)]
    data: DataDir,
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Create a key; its secret is printed once and stored only as a hash.
    Create {
        /// A label for the key.
        #[arg(long, default_value = "default")]
        name: String,
        /// Sandboxes this key may run at once.
        #[arg(long, default_value_t = cordon_service::DEFAULT_MAX_SANDBOXES)]
        max_sandboxes: u32,
        /// Requests per second this key may make.
        #[arg(long, default_value_t = cordon_service::DEFAULT_RPS)]
        rps: u32,
        /// An admin key: may see and answer the gateways' held calls, the keys and the host's
        /// enforcement (a data directory's first key is one).
        #[arg(long)]
        admin: bool,
    },
    /// List keys (ids and limits, never secrets).
    List,
    /// Revoke a key by id.
    Revoke { id: String },
    /// Take a cluster's keys (a JSON array of `{id, name, hash, max_sandboxes, rps, revoked}`
    /// on stdin; hashes only, never secrets): add the missing ones, revoke the revoked ones.
    /// A cluster node's supervisor calls this whenever the cluster's keys change.
    #[command(hide = true)]
    Sync,
}

/// A key as a cluster hands it to its nodes: its hash, never its secret.
#[derive(serde::Deserialize)]
struct SyncedKey {
    id: String,
    name: String,
    hash: String,
    max_sandboxes: u32,
    rps: u32,
    #[serde(default)]
    revoked: bool,
}

fn sync_keys(reg: &Registry) -> Result<(), cordon_service::error::ServiceError> {
    use cordon_service::error::ServiceError;
    let mut buf = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut buf)
        .map_err(|e| ServiceError::bad_request(format!("reading stdin: {e}")))?;
    let keys: Vec<SyncedKey> = serde_json::from_str(&buf)
        .map_err(|e| ServiceError::bad_request(format!("keys on stdin: {e}")))?;
    let (mut added, mut revoked) = (0, 0);
    for k in keys {
        if k.hash.len() != 64 || !k.hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ServiceError::bad_request(format!(
                "key {}: not a SHA-256 hash",
                k.id
            )));
        }
        let known = reg.key_by_id(&k.id)?;
        if known.is_none() {
            reg.add_key(&k.id, &k.name, &k.hash, k.max_sandboxes, k.rps)?;
            added += 1;
        }
        if k.revoked && !known.is_some_and(|r| r.revoked) {
            reg.revoke_key(&k.id)?;
            revoked += 1;
        }
    }
    eprintln!("keys: {added} added, {revoked} revoked");
    Ok(())
}

fn open_registry(dir: &std::path::Path) -> Result<Registry, String> {
    if let Some(warning) =
        cordon_service::datadir::prepare(dir).map_err(|e| format!("{}: {e}", dir.display()))?
    {
        eprintln!("cordon: warning: {warning}");
    }
    Registry::open(&dir.join("cordon.db")).map_err(|e| e.to_string())
}

pub fn keys_main(a: KeysArgs) -> i32 {
    let dir = a.data.resolve();
    let reg = match open_registry(&dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 125;
        }
    };
    let result = match a.command {
        KeysCommand::Create { name, max_sandboxes, rps, admin } => cordon_service::create_key(&reg, &name, max_sandboxes, rps).and_then(|(secret, id)| {
            if admin {
                reg.set_admin(&id, true)?;
            }
            let is_admin = reg.key_by_id(&id)?.is_some_and(|k| k.admin);
            println!("{secret}");
            eprintln!("created {}key {id} ({name}): at most {max_sandboxes} sandboxes, {rps} requests/s. The secret above is shown only once.", if is_admin { "admin " } else { "" });
            Ok(())
        }),
        KeysCommand::List => reg.list_keys().map(|keys| {
            for k in keys {
                println!("{}\t{}\tmax_sandboxes={}\trps={}\t{}{}", k.id, k.name, k.max_sandboxes, k.requests_per_second, if k.revoked { "revoked" } else { "active" }, if k.admin { "\tadmin" } else { "" });
            }
        }),
        KeysCommand::Sync => sync_keys(&reg),
        KeysCommand::Revoke { id } => reg.revoke_key(&id).map(|found| {
            if found {
                eprintln!("revoked {id}");
            } else {
                eprintln!("no key {id}");
            }
        }),
    };
    crate::exit_code(result)
}

pub fn serve_main(a: ServeArgs) -> i32 {
    // Before any thread: every sandbox may get an egress proxy that resolves names.
    cordon_linux::pin_name_service();
    crate::exit_code(serve(a))
}

fn serve(a: ServeArgs) -> Result<(), String> {
    if a.no_auth && !a.listen.ip().is_loopback() {
        return Err(format!("refusing to serve {} without authentication: drop --no-auth (keys are created for you) or listen on 127.0.0.1", a.listen));
    }
    let mut require = Vec::new();
    for r in &a.require {
        let layer = cordon_policy::Layer::parse(r).map_err(|e| format!("--require: {e}"))?;
        if !require.contains(&layer) {
            require.push(layer);
        }
    }
    // Before any thread: the probe forks.
    host_accepts(&cordon_linux::detect::probe(), &require, a.allow_degraded)?;
    let dir = a.data.resolve();
    let dur = |flag: &str, v: &str| parse_duration(v).map_err(|e| format!("--{flag}: {e}"));
    let max_upload = parse_size(&a.max_upload).map_err(|e| format!("--max-upload: {e}"))?;
    let node = a.node.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "node".into())
    });
    let node: String = node
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(32)
        .collect();
    let cfg = Config {
        helper_exe: std::env::current_exe()
            .map_err(|e| format!("cannot find my own executable: {e}"))?,
        data_dir: dir.clone(),
        node: if node.is_empty() { "node".into() } else { node },
        default_ttl: dur("default-ttl", &a.default_ttl)?,
        max_ttl: dur("max-ttl", &a.max_ttl)?,
        max_upload,
        max_download: max_upload,
        default_exec_timeout: Duration::from_secs(30),
        max_exec_timeout: Duration::from_secs(3600),
        require,
        images: cordon_service::ImagesConfig {
            insecure: a.insecure_registry.clone(),
            registries: (!a.pull_from.is_empty()).then(|| a.pull_from.clone()),
        },
        image_pull: match a.image_pull {
            ImagePullArg::Never => cordon_server::ImagePull::Never,
            ImagePullArg::Missing => cordon_server::ImagePull::Missing,
        },
        templates: match &a.templates {
            Some(f) => {
                let t = cordon_service::templates::Templates::load(f)
                    .map_err(|e| format!("--templates {e}"))?;
                warn_missing_images(&t, &dir);
                t
            }
            None => Default::default(),
        },
        e2b_allow_net: {
            let p = cordon_policy::network::NetworkPolicy {
                allow: a.e2b_allow_net.clone(),
                ..Default::default()
            };
            p.validate().map_err(|e| format!("--e2b-allow-net: {e}"))?;
            p.allow
        },
        template_build_allow_net: {
            let p = cordon_policy::network::NetworkPolicy {
                allow: a.template_allow_net.clone(),
                ..Default::default()
            };
            p.validate()
                .map_err(|e| format!("--template-allow-net: {e}"))?;
            p.allow
        },
        bind_roots: a.docker_bind_root.clone(),
        secret_ca: match &a.secret_ca {
            Some(f) if !f.is_absolute() || !f.is_file() => {
                return Err(format!(
                    "--secret-ca {}: not a file (give the absolute path of a PEM file)",
                    f.display()
                ))
            }
            other => other.clone(),
        },
    };
    if a.no_auth {
        if let Some(l) = a.docker_listen.filter(|l| !l.ip().is_loopback()) {
            return Err(format!("refusing to serve the Docker API on {l} without authentication: drop --no-auth or listen on 127.0.0.1"));
        }
    }
    let docker = cordon_server::docker::DockerOptions {
        socket: a.docker_socket.clone(),
        socket_gid: a.docker_socket_group.as_deref().map(group_id).transpose()?,
        listen: a.docker_listen,
    };
    let cluster_secret = match &a.cluster_secret_file {
        Some(f) => {
            let s = std::fs::read_to_string(f)
                .map_err(|e| format!("--cluster-secret-file {}: {e}", f.display()))?;
            let s = s.trim().to_string();
            if s.len() < 32 {
                return Err(
                    "--cluster-secret-file: the secret is shorter than 32 characters".into(),
                );
            }
            Some(s)
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(async move {
        let service = Service::new(cfg).map_err(|e| e.to_string())?;
        let mut first_key = None;
        let in_cluster = cluster_secret.is_some();
        if !a.no_auth && !in_cluster && service.active_keys().map_err(|e| e.to_string())? == 0 {
            let (secret, id) = service
                .create_key(
                    "default",
                    cordon_service::DEFAULT_MAX_SANDBOXES,
                    cordon_service::DEFAULT_RPS,
                )
                .map_err(|e| e.to_string())?;
            first_key = Some((secret, id));
        }
        let opts = ServeOptions {
            listen: a.listen,
            open: a.no_auth,
            cluster_secret,
            console: !a.no_console,
            docker,
            sandbox_domain: a.sandbox_domain.clone(),
        };
        let console = !a.no_console;
        cordon_server::serve(service, opts, move |addr| {
            println!("cordon serving on http://{addr}");
            println!("data in {}", dir.display());
            if console {
                println!("console: http://{addr}/console (sign in with an API key)");
            }
            match first_key {
                Some((secret, id)) => println!("API key ({id}, shown once): {secret}"),
                None if a.no_auth => println!("authentication disabled (loopback only)"),
                None if in_cluster => println!("API keys: the cluster's"),
                None => println!(
                    "API keys: see `cordon keys list`; create one with `cordon keys create`"
                ),
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
        })
        .await
        .map_err(|e| e.to_string())
    })
}

/// Says which templates name an image the store lacks (a create naming them is refused until
/// it is built or pulled, or pulled then with --image-pull missing): not an error, since the
/// operator may build it after starting the server.
fn warn_missing_images(t: &cordon_service::templates::Templates, dir: &std::path::Path) {
    let Ok(store) = cordon_image::Store::open(dir) else {
        return;
    };
    for (name, t) in t.iter() {
        if let Some(image) = &t.image {
            if matches!(
                store.resolve(image),
                Err(cordon_image::ImageError::NotFound { .. })
            ) {
                eprintln!(
                    "cordon: warning: template {name}: image {image} is not in the store yet \
                     (cordon image build/pull {image} --data-dir {})",
                    dir.display()
                );
            }
        }
    }
}

/// `cordon __oneshot`: one run for the server, request on stdin, Outcome JSON on stdout.
pub fn oneshot_main() -> i32 {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut buf) {
        eprintln!("cordon: reading the request: {e}");
        return 125;
    }
    let req: cordon_service::oneshot::OneShot = match serde_json::from_slice(&buf) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cordon: bad request: {e}");
            return 125;
        }
    };
    let stdin = match req.stdin {
        Some(text) => Stdin::Bytes(text.into_bytes()),
        None => Stdin::Empty,
    };
    let ran = runner::execute(Job {
        profile: req.profile,
        argv: req.argv,
        cwd: req.cwd,
        env: req.env,
        stdin,
        stream: false,
        module: req.wasm.map(Module::Base64),
    });
    match ran {
        Ok(o) => match serde_json::to_string(&o) {
            Ok(s) => {
                println!("{s}");
                0
            }
            Err(e) => {
                eprintln!("cordon: {e}");
                125
            }
        },
        Err(e) => {
            eprintln!("cordon: {e}");
            125
        }
    }
}
