//! `cordon gateway`: the policy gateway between an agent host and MCP tool servers, and the
//! commands a person answers it with (approve, deny, approvals).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use cordon_gateway::Config as GatewayConfig;
use cordon_server::gateway::state::{Answer, ApprovalAnswer, Registration, StateDir};
use cordon_server::gateway::{Gateway, GatewayOptions};
use cordon_server::{Config, Service};

#[derive(Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "The agent host connects to the gateway only; the gateway connects to the \
upstream servers, each stdio server running inside its own cordon sandbox. A tool no rule \
allows is hidden and refused (default = \"deny\"); every call is checked against the tool's \
own input schema and the rule's args schema, path arguments are normalised before the path \
rules see them, rate limits count per client, and each decision is a record of the \
hash-chained audit log (`cordon audit verify FILE`).\n\n\
A minimal gateway.toml:\n  \
[servers.files]\n  command = [\"python3\", \"/srv/files_server.py\"]\n  ro = [\"/srv\"]\n\n  \
[[rules]]\n  tool = \"files.delete_file\"\n  paths = { path = { deny = [\"/system/**\"] } }\n  \
rate = \"10/minute\"\n\n\
Agent host configuration:\n  \
{\"mcpServers\": {\"tools\": {\"command\": \"cordon\", \"args\": [\"gateway\", \"--config\", \"/etc/cordon/gateway.toml\"]}}}\n\n\
When a server's tool definitions change, its changed tools are withheld until \
`cordon gateway approve SERVER`. A rule with approve = true holds each call until \
`cordon gateway approve call-…` (listed by `cordon gateway approvals`) or `deny call-…`."
)]
pub struct GatewayArgs {
    #[command(subcommand)]
    command: Option<GatewayCommand>,
    /// The gateway's configuration (TOML).
    #[arg(long, default_value = "gateway.toml", global = true)]
    config: PathBuf,
    /// Where the upstream sandboxes' registry lives. [default: a temporary directory,
    /// removed at exit]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Serve streamable HTTP at http://ADDR/mcp (API keys of `cordon serve`, see --keys-dir)
    /// instead of stdio; /metrics counts calls, refusals by reason and latency.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The data directory of `cordon serve`: its API keys are what --listen accepts, and the
    /// gateway registers there, so that server's console shows and answers its held calls.
    /// [default: $CORDON_DATA_DIR, /var/lib/cordon as root, else ~/.local/share/cordon]
    #[arg(long)]
    keys_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum GatewayCommand {
    /// Approve a server's changed tool definitions (SERVER), or a held call (call-…).
    Approve {
        /// A server name from [servers.NAME], or a call id from `cordon gateway approvals`.
        what: String,
    },
    /// Refuse a held call.
    Deny { id: String },
    /// List the calls waiting for a person, and servers with changed definitions.
    Approvals,
    /// Each server's approved and pending definition digests: what `pin = "sha256:…"` takes.
    Pins,
}

fn load(path: &Path) -> Result<(GatewayConfig, StateDir), String> {
    let cfg = GatewayConfig::load(path).map_err(|e| e.to_string())?;
    // Compiled here too: a bad rule is the operator's to fix before anything starts.
    cordon_gateway::Policy::compile(&cfg).map_err(|e| e.to_string())?;
    let state = StateDir::open(&cfg.state_dir(path)).map_err(|e| e.to_string())?;
    Ok((cfg, state))
}

pub fn main(a: GatewayArgs) -> i32 {
    let r = match a.command {
        None => return run(a.config, a.data_dir, a.listen, a.keys_dir),
        Some(GatewayCommand::Approve { what }) => approve(&a.config, &what),
        Some(GatewayCommand::Deny { id }) => answer(&a.config, &id, false),
        Some(GatewayCommand::Approvals) => approvals(&a.config),
        Some(GatewayCommand::Pins) => pins(&a.config),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {e}");
            1
        }
    }
}

fn approve(config: &Path, what: &str) -> Result<(), String> {
    if what.starts_with("call-") {
        return answer(config, what, true);
    }
    let (cfg, state) = load(config)?;
    if !cfg.servers.contains_key(what) {
        return Err(format!(
            "no server '{what}' in {} (and not a call id: those start with call-)",
            config.display()
        ));
    }
    let mut pins = state.load_pins().map_err(|e| e.to_string())?;
    let pending = pins.pending.get(what).cloned();
    if !pins.approve(what) {
        return Err(format!(
            "server '{what}' has no changed definitions waiting"
        ));
    }
    state.save_pins(&pins).map_err(|e| e.to_string())?;
    if let Some(p) = pending {
        println!(
            "approved server {what}: {} tools, digest {}",
            p.tools.len(),
            p.digest()
        );
    }
    Ok(())
}

fn answer(config: &Path, id: &str, grant: bool) -> Result<(), String> {
    let (_, state) = load(config)?;
    let a = state
        .answer(
            id,
            &ApprovalAnswer {
                approve: grant,
                args_digest: None,
                reason: None,
            },
            "cli",
        )
        .map_err(|e| e.message)?;
    println!(
        "{} {id}: {} by {} (arguments {})",
        if grant { "approved" } else { "refused" },
        a.tool,
        a.rule,
        a.args_digest
    );
    Ok(())
}

fn approvals(config: &Path) -> Result<(), String> {
    let (_, state) = load(config)?;
    let list = state.approvals();
    let pins = state.load_pins().map_err(|e| e.to_string())?;
    if list.is_empty() && pins.pending.is_empty() {
        println!("nothing is waiting");
    }
    for a in list.iter().filter(|a| a.answer == Answer::Pending) {
        println!(
            "{}\t{}\tclient {}\t{}\targuments {}\texpires_ms {}",
            a.id, a.tool, a.client, a.rule, a.args_digest, a.expires_ms
        );
    }
    for (server, p) in &pins.pending {
        println!(
            "server {server}: changed definitions waiting (digest {}): cordon gateway approve {server}",
            p.digest()
        );
    }
    Ok(())
}

fn pins(config: &Path) -> Result<(), String> {
    let (cfg, state) = load(config)?;
    let pins = state.load_pins().map_err(|e| e.to_string())?;
    for (name, server) in &cfg.servers {
        let approved = pins.approved.get(name).map(|p| p.digest());
        let pending = pins.pending.get(name).map(|p| p.digest());
        if approved.is_none() && pending.is_none() {
            println!("{name}\tnot seen yet (its digest is recorded at its first start)");
        }
        if let Some(d) = approved {
            println!("{name}\tapproved\t{d}");
        }
        if let Some(d) = pending {
            println!("{name}\tpending\t{d}");
        }
        if let Some(p) = &server.pin {
            println!("{name}\tpinned in the config\t{p}");
        }
    }
    Ok(())
}

fn run(
    config: PathBuf,
    data_dir: Option<PathBuf>,
    listen: Option<std::net::SocketAddr>,
    keys_dir: Option<PathBuf>,
) -> i32 {
    cordon_linux::pin_name_service();
    let (cfg, _) = match load(&config) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 125;
        }
    };
    let (dir, temporary) = match data_dir {
        Some(d) => (d, false),
        None => (
            std::env::temp_dir().join(format!("cordon-gateway-{}", std::process::id())),
            true,
        ),
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cordon: cannot find my own executable: {e}");
            return 125;
        }
    };
    let audit_path = match &cfg.gateway.audit {
        Some(p) => cfg.resolve(p),
        None => crate::serve::default_data_dir().join("gateway-audit.jsonl"),
    };
    let state_dir = cfg.state_dir(&config);
    // Registered with the server whose data dir this is (if one ever ran there), so that its
    // console shows the calls held here. The note stays when the gateway stops (the console
    // shows it as not running, with its history); the next start of the same gateway
    // rewrites it.
    let server_dir = keys_dir
        .clone()
        .unwrap_or_else(crate::serve::default_data_dir);
    server_dir.join("cordon.db").exists().then(|| {
        cordon_server::gateway::state::register(
            &server_dir,
            &Registration {
                name: config
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "gateway".into()),
                config: std::fs::canonicalize(&config)
                    .unwrap_or_else(|_| config.clone())
                    .display()
                    .to_string(),
                state_dir: std::fs::canonicalize(&state_dir).unwrap_or_else(|_| state_dir.clone()),
                pid: std::process::id(),
            },
        )
        .map_err(|e| {
            eprintln!(
                "cordon gateway: registering with {}: {e}",
                server_dir.display()
            )
        })
        .ok()
    });
    let svc_cfg = Config {
        helper_exe: exe,
        data_dir: dir.clone(),
        node: "gateway".into(),
        default_ttl: Duration::from_secs(365 * 86400),
        max_ttl: Duration::from_secs(365 * 86400),
        max_upload: 100 << 20,
        max_download: 100 << 20,
        default_exec_timeout: Duration::from_secs(30),
        max_exec_timeout: Duration::from_secs(3600),
        ..Default::default()
    };
    // Room for the nested futures of a checked, audited, forwarded call (debug builds keep
    // every local of every await point).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 125;
        }
    };
    let result = rt.block_on(async {
        let service = Service::new(svc_cfg).map_err(|e| e.message)?;
        let gw = Gateway::start(
            service.clone(),
            GatewayOptions {
                config: cfg,
                config_path: config.clone(),
                audit_path,
                state_dir,
            },
        )
        .await?;
        let r = match listen {
            None => cordon_server::gateway::serve_stdio(gw.clone()).await,
            Some(addr) => {
                let keys = keys_dir.unwrap_or_else(crate::serve::default_data_dir);
                let registry = cordon_service::registry::Registry::open(&keys.join("cordon.db"))
                    .map_err(|e| format!("API keys in {}: {}", keys.display(), e.message))?;
                cordon_server::gateway::serve_http(gw.clone(), Arc::new(registry), addr, |a| {
                    println!("cordon gateway listening on http://{a}/mcp");
                })
                .await
            }
        };
        gw.stop().await;
        service.shutdown_all().await;
        r
    });
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    crate::exit_code(result)
}
