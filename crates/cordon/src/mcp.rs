//! `cordon mcp`: the sandbox as Model Context Protocol tools over stdio.

use std::time::Duration;

use clap::Args;
use cordon_server::{Config, Service};
use cordon_service::Caller;

use crate::sandbox_args::SandboxArgs;

#[derive(Args, Debug)]
#[command(after_help = "Add to an agent host's MCP configuration, e.g.:\n  \
{\"mcpServers\": {\"cordon\": {\"command\": \"cordon\", \"args\": [\"mcp\"]}}}\n\n\
Tools: run_code, run_command, read_file, write_file, list_files, reset_sandbox. One sandbox per \
session, created on first use and deleted when the session ends; the sandbox options are those \
of `cordon run`, e.g.\n  \
cordon mcp --profile ./agent.toml --workspace ./project --allow-net pypi.org --memory 1G")]
pub struct McpArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Where this session keeps its registry and audit log. [default: a private temporary
    /// directory, removed at exit; one left by a killed session is removed by the next]
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
}

pub fn main(a: McpArgs) -> i32 {
    // Before any thread: the session's sandbox may get an egress proxy that resolves names.
    cordon_linux::pin_name_service();
    // Checked now, not at the first tool call: a bad flag or profile file is the user's to fix
    // before an agent host starts relying on the server.
    let mut profile = match a.sandbox.build_profile() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 125;
        }
    };
    if !profile.secrets.is_empty() {
        eprintln!("cordon: --secret: not available with cordon mcp yet (cordon run has it)");
        return 125;
    }
    // The image comes from the store the user pulls into (`--data-dir`, else the default one,
    // not this session's temporary directory), and is held for the whole session.
    let images = a
        .data_dir
        .clone()
        .unwrap_or_else(|| crate::serve::DataDir::default().resolve());
    let _image = match crate::sandbox_args::attach_image(&mut profile, &images) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("cordon: {e}");
            return 125;
        }
    };
    let (dir, session_dir) = match a.data_dir {
        Some(d) => (d, None),
        None => {
            let tmp = std::env::temp_dir();
            // Sessions an agent host killed before they could clean up (see session_dir.rs).
            for gone in crate::session_dir::sweep_stale(&tmp) {
                eprintln!(
                    "cordon: removed {}, left by an ended session",
                    gone.display()
                );
            }
            match crate::session_dir::SessionDir::create(&tmp) {
                Ok(sd) => (sd.path().to_path_buf(), Some(sd)),
                Err(e) => {
                    eprintln!(
                        "cordon: cannot make a data directory under {}: {e} (set TMPDIR, or give --data-dir)",
                        tmp.display()
                    );
                    return 125;
                }
            }
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cordon: cannot find my own executable: {e}");
            return 125;
        }
    };
    let cfg = Config {
        helper_exe: exe,
        data_dir: dir.clone(),
        node: "mcp".into(),
        default_ttl: Duration::from_secs(4 * 3600),
        max_ttl: Duration::from_secs(24 * 3600),
        max_upload: 100 << 20,
        max_download: 100 << 20,
        default_exec_timeout: Duration::from_secs(30),
        // A --timeout beyond the usual cap is the operator's choice: honour it.
        max_exec_timeout: profile.limits.timeout.max(Duration::from_secs(3600)),
        // The session's image comes from its command line, resolved below, never a request.
        image_pull: cordon_server::ImagePull::Never,
        ..Default::default()
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
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
        let service = Service::new(cfg).map_err(|e| e.to_string())?;
        let reaper = service.clone();
        let reaping = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                reaper.reap().await;
            }
        });
        let caller = Caller {
            key_id: "mcp-stdio".into(),
            max_sandboxes: 4,
        };
        let state = cordon_server::mcp::McpState::new(service.clone(), Some(caller), Some(profile));
        // An agent host ends a session by closing stdin, and SIGTERMs a server that has not
        // exited within its grace period (the MCP Python SDK waits 2 s). A signal ends the
        // session the same way stdin's end does — sandboxes shut down, the temporary data
        // directory removed — instead of killing the process with both left behind.
        let r = tokio::select! {
            r = cordon_server::mcp::serve_stdio(state) => r,
            s = end_signal() => {
                eprintln!("cordon: {s}: ending the session");
                Ok(())
            }
        };
        service.shutdown_all().await;
        reaping.abort();
        r
    });
    // Before the directory goes: the runtime's tasks (the reaper, the session's) hold the
    // service, whose registry database still writes its journal there. The stdin reader is a
    // blocking thread a signal leaves waiting; do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(200));
    if let Some(sd) = session_dir {
        if let Err(e) = sd.remove() {
            eprintln!("cordon: cannot remove {}: {e}", dir.display());
        }
    }
    crate::exit_code(result)
}

/// The first of SIGTERM, SIGINT or SIGHUP; never, if none can be watched (the default action
/// then still ends the process).
async fn end_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let watch = |k: SignalKind| signal(k).ok();
    let (mut term, mut int, mut hup) = (
        watch(SignalKind::terminate()),
        watch(SignalKind::interrupt()),
        watch(SignalKind::hangup()),
    );
    async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = next(&mut term) => "SIGTERM",
        _ = next(&mut int) => "SIGINT",
        _ = next(&mut hup) => "SIGHUP",
    }
}
