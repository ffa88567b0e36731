//! `cordon volume …`, `cordon snapshot …` and `cordon sandbox fork|create`: clients of a
//! running `cordon serve` over its HTTP API (volumes and snapshots belong to an API key, and
//! a snapshot needs the server's running sandbox), never the data directory directly.
//! Parsing and wiring only: the server validates.
//!
//! Threat model: the key (flag, environment or client config: `client.rs`) is sent only to the server
//! named; it is never printed.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{finish, pretty, ServerArgs};

#[derive(Args, Debug)]
#[command(
    about = "Manage volumes of a running `cordon serve` (talks to it over HTTP: --server, CORDON_API_KEY)",
    long_about = "Volumes are named, size-capped directories of one API key, kept by the server \
under its data directory across restarts and mounted into sandboxes at create \
(`volumes: [{name, path, readonly}]`). These commands talk to a running `cordon serve` over \
HTTP (--server, default http://127.0.0.1:8080; the key from --key or CORDON_API_KEY); they \
never open the data directory themselves.\n\nExamples:\n  cordon volume create datasets --size 10G\n  \
cordon volume list\n  cordon volume rm datasets"
)]
pub struct VolumeArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(subcommand)]
    command: VolumeCommand,
}

#[derive(Subcommand, Debug)]
enum VolumeCommand {
    /// Create an empty volume.
    Create {
        name: String,
        /// Its cap, e.g. 10G (1G when absent).
        #[arg(long)]
        size: Option<String>,
    },
    /// List the key's volumes, their use and who mounts them.
    #[command(alias = "ls")]
    List,
    /// Delete a volume and its files (refused while a sandbox mounts it).
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Args, Debug)]
#[command(
    about = "Manage snapshots of a running `cordon serve` (talks to it over HTTP: --server, CORDON_API_KEY)",
    long_about = "A snapshot copies a sandbox's /workspace, home and /tmp with its processes \
frozen; new sandboxes start from it (`cordon sandbox create --from NAME`). Memory and processes \
are not carried. These commands talk to a running `cordon serve` over HTTP (--server; the key \
from --key or CORDON_API_KEY).\n\nExamples:\n  cordon snapshot create SANDBOX_ID --name after-setup\n  \
cordon snapshot list\n  cordon snapshot rm after-setup"
)]
pub struct SnapshotArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(subcommand)]
    command: SnapshotCommand,
}

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Snapshot a running sandbox's files.
    Create {
        sandbox: String,
        #[arg(long)]
        name: String,
    },
    /// List the key's snapshots.
    #[command(alias = "ls")]
    List,
    /// Delete a snapshot.
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Args, Debug)]
#[command(
    about = "Create and fork sandboxes of a running `cordon serve` (over HTTP: --server, CORDON_API_KEY)",
    long_about = "Examples:\n  cordon sandbox create --from after-setup --volume datasets:/data:ro\n  \
cordon sandbox fork SANDBOX_ID --count 8"
)]
pub struct SandboxArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(subcommand)]
    command: SandboxCommand,
}

#[derive(Subcommand, Debug)]
enum SandboxCommand {
    /// Create a sandbox; prints its id.
    Create {
        /// A snapshot whose files it starts with.
        #[arg(long)]
        from: Option<String>,
        /// A volume to mount: NAME:PATH or NAME:PATH:ro (repeatable).
        #[arg(long = "volume")]
        volumes: Vec<String>,
        /// Time to live, e.g. 30m.
        #[arg(long)]
        ttl: Option<String>,
    },
    /// New sandboxes with a running sandbox's files (not its memory or processes); prints
    /// their ids.
    Fork {
        sandbox: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Pause a sandbox: its processes frozen, memory kept (its files also kept on disk, so a
    /// restart of the server finds it paused). With --to-disk: its files kept, its memory,
    /// processes and quota slot released; `resume` starts it afresh with them.
    Pause {
        sandbox: String,
        /// Give up memory and processes: keep only the files (E2B's keep_memory=False).
        #[arg(long)]
        to_disk: bool,
    },
    /// Resume a paused sandbox (one paused to disk starts afresh with its files, same id).
    Resume { sandbox: String },
}

/// One JSON call to the server the flags, environment or config name.
fn call(s: &ServerArgs, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
    s.resolve()?.call(method, path, body)
}

pub fn volume_main(a: VolumeArgs) -> i32 {
    let s = &a.server;
    match a.command {
        VolumeCommand::Create { name, size } => {
            let mut body = json!({ "name": name });
            if let Some(size) = size {
                body["size"] = json!(size);
            }
            finish(call(s, "POST", "/v1/volumes", Some(body)), pretty)
        }
        VolumeCommand::List => finish(call(s, "GET", "/v1/volumes", None), |v| {
            println!("{:<24} {:>14} {:>14}  MOUNTED BY", "NAME", "SIZE", "USED");
            for vol in v["volumes"].as_array().into_iter().flatten() {
                println!(
                    "{:<24} {:>14} {:>14}  {}",
                    vol["name"].as_str().unwrap_or(""),
                    vol["size_bytes"],
                    vol["used_bytes"],
                    vol["mounted_by"]
                        .as_array()
                        .map(|a| a
                            .iter()
                            .filter_map(|x| x.as_str())
                            .collect::<Vec<_>>()
                            .join(","))
                        .unwrap_or_default()
                );
            }
        }),
        VolumeCommand::Rm { name } => finish(
            call(s, "DELETE", &format!("/v1/volumes/{name}"), None),
            |_| {},
        ),
    }
}

pub fn snapshot_main(a: SnapshotArgs) -> i32 {
    let s = &a.server;
    match a.command {
        SnapshotCommand::Create { sandbox, name } => finish(
            call(
                s,
                "POST",
                &format!("/v1/sandboxes/{sandbox}/snapshots"),
                Some(json!({ "name": name })),
            ),
            pretty,
        ),
        SnapshotCommand::List => finish(call(s, "GET", "/v1/snapshots", None), pretty),
        SnapshotCommand::Rm { name } => finish(
            call(s, "DELETE", &format!("/v1/snapshots/{name}"), None),
            |_| {},
        ),
    }
}

pub fn sandbox_main(a: SandboxArgs) -> i32 {
    let s = &a.server;
    match a.command {
        SandboxCommand::Create { from, volumes, ttl } => {
            let mut mounts = Vec::new();
            for v in &volumes {
                let parts: Vec<&str> = v.split(':').collect();
                let m = match parts.as_slice() {
                    [name, path] => json!({"name": name, "path": path}),
                    [name, path, "ro"] => json!({"name": name, "path": path, "readonly": true}),
                    [name, path, "rw"] => json!({"name": name, "path": path}),
                    _ => {
                        eprintln!("cordon: --volume {v}: NAME:PATH or NAME:PATH:ro");
                        return 125;
                    }
                };
                mounts.push(m);
            }
            let mut body = json!({ "volumes": mounts });
            if let Some(f) = from {
                body["from"] = json!(f);
            }
            if let Some(t) = ttl {
                body["ttl"] = json!(t);
            }
            finish(call(s, "POST", "/v1/sandboxes", Some(body)), |v| {
                println!("{}", v["id"].as_str().unwrap_or(""))
            })
        }
        SandboxCommand::Pause { sandbox, to_disk } => finish(
            call(
                s,
                "POST",
                &format!("/v1/sandboxes/{sandbox}/pause"),
                Some(if to_disk {
                    json!({"keep_memory": false})
                } else {
                    json!({})
                }),
            ),
            |v| {
                println!(
                    "{} paused ({})",
                    v["id"].as_str().unwrap_or(""),
                    v["paused_by"].as_str().unwrap_or("")
                );
                if let Some(n) = v["ended_reason"].as_str() {
                    eprintln!("cordon: {n}");
                }
            },
        ),
        SandboxCommand::Resume { sandbox } => finish(
            call(s, "POST", &format!("/v1/sandboxes/{sandbox}/resume"), None),
            |v| {
                println!(
                    "{} {}",
                    v["id"].as_str().unwrap_or(""),
                    v["state"].as_str().unwrap_or("")
                )
            },
        ),
        SandboxCommand::Fork { sandbox, count } => finish(
            call(
                s,
                "POST",
                &format!("/v1/sandboxes/{sandbox}/fork"),
                Some(json!({ "count": count })),
            ),
            |v| {
                for sb in v["sandboxes"].as_array().into_iter().flatten() {
                    println!("{}", sb["id"].as_str().unwrap_or(""));
                }
                if let Some(n) = v["note"].as_str() {
                    eprintln!("cordon: {n} (frozen {} ms)", v["frozen_ms"]);
                }
            },
        ),
    }
}
