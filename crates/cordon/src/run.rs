//! `cordon run`: flags → Profile → engine → exit code or JSON Outcome.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cordon_linux::{OutputMode, RunRequest, StdinSource};
use cordon_policy::outcome::exit;

use crate::sandbox_args::SandboxArgs;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the program's own; 128+N if killed by signal N; 124 on timeout; \
125 if cordon itself failed; 126 if the command is not executable; 127 if not found. \
With --json, cordon exits 0 whenever it printed an Outcome.\n\n\
Examples:\n  cordon run -- python3 -c 'import sys; print(sys.version)'\n  \
cordon run --memory 256M --timeout 10s --json -- node -e 'console.log(1)'\n  \
cordon run --workspace ./job --env API_URL=http://x -- python3 job.py"
)]
pub struct RunArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Print one JSON Outcome on stdout instead of streaming the program's output.
    #[arg(long)]
    json: bool,
    /// What the program reads on stdin: a file, or - for cordon's own stdin. Default: empty.
    #[arg(long, value_name = "FILE|-")]
    stdin: Option<String>,
    /// Working directory inside the sandbox. [default: /workspace]
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub fn main(a: RunArgs) -> i32 {
    let profile = match a.sandbox.build_profile() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {e}");
            return exit::CORDON_FAILED;
        }
    };
    let stdin = match a.stdin.as_deref() {
        None => StdinSource::Empty,
        Some("-") => StdinSource::Inherit,
        Some(f) => {
            let path = PathBuf::from(f);
            if let Err(e) = std::fs::File::open(&path) {
                eprintln!("cordon: --stdin {f}: {e}");
                return exit::CORDON_FAILED;
            }
            StdinSource::File(path)
        }
    };
    let egress = if profile.network.is_enabled() {
        match crate::run_egress::factory(&profile) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("cordon: --allow-net: {e}");
                return exit::CORDON_FAILED;
            }
        }
    } else {
        None
    };
    let req = RunRequest {
        profile,
        argv: a.command.clone(),
        cwd: a.cwd.clone(),
        env: BTreeMap::new(),
        stdin,
        output: if a.json {
            OutputMode::Capture
        } else {
            OutputMode::Stream
        },
        egress,
    };
    match cordon_linux::run(req) {
        Ok(outcome) => {
            if a.json {
                match serde_json::to_string(&outcome) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("cordon: cannot encode the outcome: {e}");
                        return exit::CORDON_FAILED;
                    }
                }
                0
            } else {
                if let Some(err) = &outcome.error {
                    eprintln!("cordon: {err}");
                }
                if outcome.status == cordon_policy::Status::Timeout {
                    eprintln!(
                        "cordon: timed out after {}",
                        cordon_policy::units::format_duration(std::time::Duration::from_millis(
                            outcome.usage.wall_ms
                        ))
                    );
                }
                if outcome.status == cordon_policy::Status::Oom {
                    eprintln!(
                        "cordon: killed: out of memory (limit {})",
                        a.sandbox.memory.as_deref().unwrap_or("of the profile")
                    );
                }
                outcome.cli_exit_code()
            }
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            exit::CORDON_FAILED
        }
    }
}
