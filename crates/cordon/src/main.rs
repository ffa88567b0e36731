//! `cordon`: argument parsing and wiring. Business logic lives in the library crates.

// std's runtime setup before `main` is skipped: of what it does, cordon needs two things, done
// by `cordon_linux::process_start`, and it costs every start ~0.1 ms — mostly finding the main
// thread's stack bounds (glibc parses /proc/self/maps) for a stack-overflow message. An agent
// starts `cordon run` thousands of times; bubblewrap, the yardstick, pays nothing of the kind.
// (The test harness brings its own `main`, under which nothing here is reachable.)
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code))]

mod audit;
mod build;
mod check;
mod client;
mod cluster;
mod e2b;
mod gateway;
mod image;
mod mcp;
mod ops;
mod ops_tty;
mod profile_cmd;
mod run;
mod run_tty;
mod sandbox_args;
mod serve;
mod session_dir;
mod state;

use clap::{CommandFactory, Parser, Subcommand};

/// `cordon --version`: the release and the commit it was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CORDON_COMMIT"), ")");

#[derive(Parser)]
#[command(
    name = "cordon",
    version = VERSION,
    about = "Run code that AI agents write without letting it hurt the host",
    long_about = "cordon runs a command in a sandbox: its own user, pid, mount, network, ipc, uts \
and cgroup namespaces, a fresh read-only root, no network, a scrubbed environment, no \
capabilities, Landlock, a seccomp filter, rlimits and cgroup limits. Each layer holds on its own.\n\n\
Examples:\n  cordon run -- python3 -c 'print(1+1)'\n  cordon run --json --timeout 5s -- bash -c 'ls /'\n  \
cordon run --workspace ./job -- python3 job.py\n  cordon check"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one command in a fresh sandbox and report how it ended.
    Run(Box<run::RunArgs>),
    /// Show what this host can enforce, and what each missing piece costs.
    Check(check::CheckArgs),
    /// Explain a profile in plain words, or compare two: `explain PROFILE`, `diff A B`.
    #[command(long_about = profile_cmd::LONG_ABOUT)]
    Profile(profile_cmd::ProfileArgs),
    /// Serve persistent sandboxes over HTTP (files, commands, one-shot runs).
    Serve(serve::ServeArgs),
    /// Serve the sandbox as MCP tools on stdin/stdout, for agent hosts.
    Mcp(Box<mcp::McpArgs>),
    /// Manage API keys of `cordon serve`.
    Keys(serve::KeysArgs),
    /// Point E2B's SDKs at `cordon serve`: `cordon e2b env` prints the variables to export.
    E2b(e2b::E2bArgs),
    /// Time cordon against bare exec, bubblewrap and podman, side by side (runs the separate
    /// `cordon-bench` binary on this cordon; `cordon bench --help` lists its options).
    #[command(disable_help_flag = true)]
    Bench {
        /// Options for cordon-bench (`--iterations N`, `--json`, `--no-serve`, `--no-wasm`,
        /// `--no-images`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Manage OCI images: pull, import, list, inspect, remove, prune, login.
    Image(image::ImageArgs),
    /// An MCP gateway: allowlist, argument and path checks, rate limits, pinning, approvals
    /// and a hash-chained audit log in front of tool servers run in sandboxes.
    Gateway(Box<gateway::GatewayArgs>),
    /// Check a hash-chained audit log (gateway or serve).
    Audit(audit::AuditArgs),
    /// Volumes of a running `cordon serve` (over HTTP): create, list, rm.
    Volume(state::VolumeArgs),
    /// Snapshots of a running `cordon serve`'s sandboxes (over HTTP): create, list, rm.
    Snapshot(state::SnapshotArgs),
    /// Sandboxes of a running `cordon serve` (over HTTP): create (from a snapshot), fork.
    Sandbox(state::SandboxArgs),
    /// A cordon cluster on Ray: `up` (a node on every Ray node and the front door), `router`,
    /// `status`, `drain`, `keys`.
    Cluster(cluster::ClusterArgs),
    /// List the sandboxes of a running `cordon serve` (like `docker ps`).
    Ps(ops::PsArgs),
    /// Run a command in a running sandbox and stream its output.
    Exec(ops::ExecArgs),
    /// A sandbox's command history and output (`-f` to follow).
    Logs(ops::LogsArgs),
    /// What each sandbox uses now: CPU, memory, disk, processes against their limits.
    Top(ops::TopArgs),
    /// End sandboxes of a running `cordon serve`.
    Kill(ops::KillArgs),
    /// Copy files between this machine and a sandbox (SANDBOX:PATH on one side).
    Cp(ops::CpArgs),
    /// Print a shell completion script: `cordon completions bash > /etc/bash_completion.d/cordon`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (cordon.1 and one per command) into a directory.
    Man {
        /// Where to write them (made if missing).
        #[arg(long, default_value = ".")]
        dir: std::path::PathBuf,
    },
}

// The C entry point, called by glibc's start code: `cordon_linux::process_start`, then
// `cordon_main`, stdout flushed, a panic reported as exit 101.
#[cfg(not(test))]
cordon_linux::c_main!(cordon_main);

/// Parses the command line and runs it; returns the process's exit status (0-255).
fn cordon_main() -> i32 {
    // The per-sandbox helper of `cordon serve` is this binary re-executed. Dispatch before
    // anything can start a thread: it forks the sandbox.
    if std::env::args_os().nth(1).is_some_and(|a| a == "__sandbox") {
        return cordon_linux::persistent::helper_main().clamp(0, 255);
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "__oneshot") {
        return serve::oneshot_main().clamp(0, 255);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if let Some(hint) = command_before_dashes(&e) {
                eprintln!("{hint}");
            }
            // Help and version are successes; every other parse error is cordon's failure (125).
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
                _ => 125,
            };
        }
    };
    let code = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Bench { args } => bench_launcher(args),
        Command::Check(args) => check::main(args),
        Command::Profile(args) => profile_cmd::main(args),
        Command::Serve(args) => serve::serve_main(args),
        Command::Keys(args) => serve::keys_main(args),
        Command::E2b(args) => e2b::main(args),
        Command::Mcp(args) => mcp::main(*args),
        Command::Image(args) => image::main(args),
        Command::Audit(args) => audit::main(args),
        Command::Gateway(args) => gateway::main(*args),
        Command::Volume(args) => state::volume_main(args),
        Command::Snapshot(args) => state::snapshot_main(args),
        Command::Sandbox(args) => state::sandbox_main(args),
        Command::Cluster(args) => cluster::cluster_main(args),
        Command::Ps(args) => ops::ps_main(args),
        Command::Exec(args) => ops::exec_main(args),
        Command::Logs(args) => ops::logs_main(args),
        Command::Top(args) => ops::top_main(args),
        Command::Kill(args) => ops::kill_main(args),
        Command::Cp(args) => ops::cp_main(args),
        Command::Completions { shell } => {
            // Into memory first: clap_complete panics on a write error, and `| head` is one.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cordon", &mut script);
            use std::io::Write;
            let _ = std::io::stdout().write_all(&script);
            0
        }
        Command::Man { dir } => exit_code(write_man_pages(&dir)),
    };
    code.clamp(0, 255)
}

/// Writes `cordon.1` and `cordon-<command>.1` (and `cordon-<command>-<sub>.1`) into `dir`.
fn write_man_pages(dir: &std::path::Path) -> Result<(), String> {
    fn write(cmd: clap::Command, name: &str, dir: &std::path::Path) -> Result<(), String> {
        // clap takes a command's name as a `'static` str (without its `string` feature); this
        // process writes a few dozen pages and exits.
        let cmd = cmd.name(&*Box::leak(name.to_string().into_boxed_str()));
        let path = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut page)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, page).map_err(|e| format!("{}: {e}", path.display()))?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            if sub.get_name() == "help" {
                continue;
            }
            write(sub.clone(), &format!("{name}-{}", sub.get_name()), dir)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    write(cmd, "cordon", dir)
}

/// `cordon bench …`: execs `cordon-bench --cordon <this binary> …` (beside cordon, else on
/// PATH). The benchmarks live in their own binary so that cordon carries none of their code.
fn bench_launcher(args: Vec<std::ffi::OsString>) -> i32 {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().ok();
    let beside = me
        .as_ref()
        .and_then(|m| m.parent().map(|d| d.join("cordon-bench")))
        .filter(|p| p.is_file());
    let bench = beside.unwrap_or_else(|| std::path::PathBuf::from("cordon-bench"));
    let mut cmd = std::process::Command::new(&bench);
    if let Some(me) = me {
        cmd.arg("--cordon").arg(me);
    }
    let e = cmd.args(args).exec();
    eprintln!(
        "cordon: cannot run {}: {e}; the benchmarks are the separate cordon-bench binary \
         (scripts/build-release.sh builds it beside cordon)",
        bench.display()
    );
    125
}

/// `cordon run python3 x.py`: clap sees `python3` as an argument `run` does not take (the
/// command must follow `--`, so that its own flags are never read as cordon's). Names the fix
/// with the user's own line, when the unexpected argument is a word rather than a flag.
fn command_before_dashes(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sub = args.first()?;
    if sub != "run" || bad.starts_with('-') || args.iter().any(|a| a == "--") {
        return None;
    }
    let at = args.iter().skip(1).position(|a| a == bad)? + 1;
    let quote = |a: &String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c));
        if plain {
            a.clone()
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    let options: Vec<String> = args[..at].iter().map(quote).collect();
    let command: Vec<String> = args[at..].iter().map(quote).collect();
    Some(format!(
        "hint: the command goes after --, so that its own options are not read as cordon's:\n  \
         cordon {} -- {}",
        options.join(" "),
        command.join(" ")
    ))
}

/// The exit status of a command: 0, or 125 (a failure on cordon's side, not the program's)
/// with the error on stderr.
pub(crate) fn exit_code(r: Result<(), impl std::fmt::Display>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {e}");
            125
        }
    }
}
