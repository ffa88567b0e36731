//! `cordon cluster`: wiring for a cordon cluster on Ray. Membership, node supervision and the
//! cluster's keys live in Ray (Python: `cordon_sdk.ray`, run as `python -m
//! cordon_sdk.ray.cli`); the router is `cordon-cluster`. Nothing here decides anything.

use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Args, Debug, Clone)]
struct RayArgs {
    /// The Ray cluster (`auto` for the one this host has joined, or `HOST:PORT` of its head).
    #[arg(long, default_value = "auto")]
    ray: String,
    /// The Python that has `cordon_sdk` with its `ray` extra (`pip install 'cordon-sdk[ray]'`).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Start a cordon node on every Ray node (now and as nodes join), then the front door.
    Up {
        #[command(flatten)]
        ray: RayArgs,
        /// Where the front door (router) listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Each node's data directory is DIR/<node>.
        #[arg(long, default_value = "/var/lib/cordon/cluster")]
        data_root: PathBuf,
        /// Sandboxes a node holds at once.
        #[arg(long, default_value_t = 64)]
        slots: u32,
        /// Start nodes even where the host refuses namespaces (as `cordon serve
        /// --allow-degraded`).
        #[arg(long)]
        allow_degraded: bool,
    },
    /// One more front door (routers are stateless: run as many as you like).
    Router {
        #[command(flatten)]
        ray: RayArgs,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Nodes, their health, capacity and sandboxes.
    Status {
        #[command(flatten)]
        ray: RayArgs,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Take no new sandboxes on NODE (its sandboxes run to their end); `--undo` reopens it.
    Drain {
        node: String,
        #[command(flatten)]
        ray: RayArgs,
        #[arg(long)]
        undo: bool,
    },
    /// The cluster's API keys: accepted by every node, revoked everywhere within seconds.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Create a key; its secret is printed once (the cluster stores only its hash).
    Create {
        #[command(flatten)]
        ray: RayArgs,
        #[arg(long, default_value = "default")]
        name: String,
        #[arg(long, default_value_t = cordon_service::DEFAULT_MAX_SANDBOXES)]
        max_sandboxes: u32,
        #[arg(long, default_value_t = cordon_service::DEFAULT_RPS)]
        rps: u32,
    },
    /// Revoke a key by id.
    Revoke {
        id: String,
        #[command(flatten)]
        ray: RayArgs,
    },
}

/// `python -m cordon_sdk.ray.cli SUB --ray ADDR ARGS…`
fn py(ray: &RayArgs, sub: &str, args: &[OsString]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        ray.python.clone().into(),
        "-m".into(),
        "cordon_sdk.ray.cli".into(),
        sub.into(),
        "--ray".into(),
        ray.ray.clone().into(),
    ];
    v.extend_from_slice(args);
    v
}

/// Runs a `cordon_sdk.ray.cli` command with `stdin`, returning its stdout.
fn run_py(argv: &[OsString], stdin: Option<&str>) -> Result<String, String> {
    let (prog, args) = argv.split_first().ok_or("no command")?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{}: {e}", prog.to_string_lossy()))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(stdin.unwrap_or("").as_bytes())
            .map_err(|e| format!("writing to {}: {e}", prog.to_string_lossy()))?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("cordon_sdk.ray.cli failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A new key as the cluster stores it (its hash) and the secret to print once.
fn new_key(name: &str, max_sandboxes: u32, rps: u32) -> Result<(String, String, String), String> {
    let (secret, id) = cordon_service::keys::generate().map_err(|e| e.to_string())?;
    let record = serde_json::json!({
        "id": id, "name": name, "hash": cordon_service::keys::hash(&secret),
        "max_sandboxes": max_sandboxes, "rps": rps, "revoked": false,
    });
    Ok((secret, id, record.to_string()))
}

fn router(
    membership: Vec<OsString>,
    listen: SocketAddr,
    first_key: Option<(String, String)>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(cordon_cluster::serve(
        cordon_cluster::RouterOptions { listen, membership },
        move |addr| {
            println!("cordon cluster router on http://{addr}");
            if let Some((secret, id)) = first_key {
                println!("API key ({id}, shown once): {secret}");
            }
            let _ = std::io::stdout().flush();
        },
    ))
    .map_err(|e| e.to_string())
}

pub fn cluster_main(a: ClusterArgs) -> i32 {
    crate::exit_code(cluster(a))
}

fn cluster(a: ClusterArgs) -> Result<(), String> {
    match a.command {
        ClusterCommand::Up {
            ray,
            listen,
            data_root,
            slots,
            allow_degraded,
        } => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find my own executable: {e}"))?;
            // The cluster's first key, if it has none yet.
            let (secret, id, record) = new_key(
                "default",
                cordon_service::DEFAULT_MAX_SANDBOXES,
                cordon_service::DEFAULT_RPS,
            )?;
            let added = run_py(&py(&ray, "add-key", &["--if-none".into()]), Some(&record))?;
            let first = (added.trim() == "added").then_some((secret, id));
            let mut args: Vec<OsString> = vec![
                "--ensure-nodes".into(),
                "--cordon".into(),
                exe.into(),
                "--data-root".into(),
                data_root.into(),
                "--slots".into(),
                slots.to_string().into(),
            ];
            if allow_degraded {
                args.push("--allow-degraded".into());
            }
            router(py(&ray, "membership", &args), listen, first)
        }
        ClusterCommand::Router { ray, listen } => router(py(&ray, "membership", &[]), listen, None),
        ClusterCommand::Status { ray, json } => {
            let mut args: Vec<OsString> = vec![];
            if json {
                args.push("--json".into());
            }
            print!("{}", run_py(&py(&ray, "status", &args), None)?);
            Ok(())
        }
        ClusterCommand::Drain { node, ray, undo } => {
            let mut args: Vec<OsString> = vec![node.into()];
            if undo {
                args.push("--undo".into());
            }
            print!("{}", run_py(&py(&ray, "drain", &args), None)?);
            Ok(())
        }
        ClusterCommand::Keys {
            command:
                KeysCommand::Create {
                    ray,
                    name,
                    max_sandboxes,
                    rps,
                },
        } => {
            let (secret, id, record) = new_key(&name, max_sandboxes, rps)?;
            run_py(&py(&ray, "add-key", &[]), Some(&record))?;
            println!("{secret}");
            eprintln!("created key {id} ({name}) for the whole cluster: at most {max_sandboxes} sandboxes, {rps} requests/s. The secret above is shown only once.");
            Ok(())
        }
        ClusterCommand::Keys {
            command: KeysCommand::Revoke { id, ray },
        } => {
            print!("{}", run_py(&py(&ray, "revoke-key", &[id.into()]), None)?);
            Ok(())
        }
    }
}
