//! `cordon run`: flags → Profile → engine → exit code or JSON Outcome.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cordon_policy::outcome::exit;
use cordon_service::runner::{self, Job, Stdin};

use cordon_policy::Outcome;

use crate::sandbox_args::{BackendArgs, SandboxArgs};

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: the program's own; 128+N if killed by signal N; 124 on timeout; \
125 if cordon itself failed; 126 if the command is not executable; 127 if not found. \
With --json, cordon exits 0 whenever it printed an Outcome.\n\n\
Examples:\n  cordon run -- python3 -c 'import sys; print(sys.version)'\n  \
cordon run --memory 256M --timeout 10s --json -- node -e 'console.log(1)'\n  \
cordon run --workspace ./job --env API_URL=http://x -- python3 job.py\n  \
cordon run -t --rw ./src -- bash"
)]
pub struct RunArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// Print one JSON Outcome on stdout instead of streaming the program's output.
    #[arg(long)]
    json: bool,
    /// What the program reads on stdin: a file, or - for cordon's own stdin. Default: empty.
    #[arg(long, value_name = "FILE|-")]
    stdin: Option<String>,
    /// Give the program a terminal (for shells, REPLs, editors): a pty of the sandbox's own,
    /// whose input and output cordon relays to the terminal cordon runs on (raw mode for the
    /// session, restored after; window size followed). The host terminal itself never enters
    /// the sandbox. Needs a terminal on stdin. With --json the Outcome's stdout is the
    /// terminal's output up to --output-limit (the terminal itself shows all of it).
    #[arg(short = 't', long, conflicts_with = "stdin")]
    tty: bool,
    /// Working directory inside the sandbox. [default: the image's WorkingDir, else /workspace]
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// The command and its arguments (with --image, optional: the image's Entrypoint and
    /// Cmd run then, as with `docker run`).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    /// Learn mode: run exactly as without it (same profile, same enforcement), then write FILE:
    /// a profile that `extends` the starting one's built-in and allows what the run needed —
    /// the network destinations it reached or was refused (from the egress proxy), the
    /// programs it executed (`[exec] allow`), the host files and directories it asked for
    /// beyond its sandbox (`[filesystem] ro`/`rw`: read or executed, written in; collapsed to
    /// directories), limits at its peaks x1.5 (never below a floor) —
    /// each entry with a comment saying why. Onto an existing FILE it widens (merges) instead
    /// of overwriting.
    #[arg(long, value_name = "FILE")]
    learn: Option<PathBuf>,
    #[command(flatten)]
    data: crate::serve::DataDir,
}

pub fn main(a: RunArgs) -> i32 {
    let mut profile = match a.sandbox.build_profile() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {e}");
            return exit::CORDON_FAILED;
        }
    };
    // Held until the run is over: the image's layers must not be pruned under it.
    let _image = match crate::sandbox_args::attach_image(&mut profile, &a.data.resolve()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("cordon: {e}");
            return exit::CORDON_FAILED;
        }
    };
    if a.tty && !profile.secrets.is_empty() {
        eprintln!("cordon: --secret: not available with --tty yet");
        return exit::CORDON_FAILED;
    }
    // Learn mode records the programs executed and the files used too (the engine's
    // notifying filter, which changes nothing the run may do).
    profile.learn_exec = a.learn.is_some();
    let learn = match a
        .learn
        .as_ref()
        .map(|f| Learner::new(f, &a.sandbox.profile, &profile))
    {
        Some(Err(e)) => {
            eprintln!("cordon: --learn: {e}");
            return exit::CORDON_FAILED;
        }
        Some(Ok(l)) => Some(l),
        None => None,
    };
    if a.tty {
        return run_tty(&a, &profile, learn.as_ref());
    }
    let stdin = match a.stdin.as_deref() {
        None => Stdin::Empty,
        Some("-") => Stdin::Inherit,
        Some(f) => {
            let path = PathBuf::from(f);
            if let Err(e) = std::fs::File::open(&path) {
                eprintln!("cordon: --stdin {f}: {e}");
                return exit::CORDON_FAILED;
            }
            Stdin::File(path)
        }
    };
    let limits = profile.limits.clone();
    let workspace = profile.workspace.clone();
    // A WebAssembly module runs in the separate cordon-wasm binary (see runner::wasm).
    let module = match runner::module_for(a.backend.backend.into(), &a.command, &profile) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("cordon: {e}");
            return exit::CORDON_FAILED;
        }
    };
    let ran = runner::execute(Job {
        profile,
        argv: a.command.clone(),
        cwd: a.cwd.clone(),
        env: BTreeMap::new(),
        stdin,
        stream: !a.json,
        module,
    });
    match ran {
        Ok(mut outcome) => {
            if let Some(l) = &learn {
                if let Err(e) = l.write(&outcome, &a.command, a.json) {
                    eprintln!("cordon: --learn: {e}");
                    return exit::CORDON_FAILED;
                }
            }
            if let Some(hint) = not_in_sandbox_hint(&outcome, &a.command, workspace.as_deref()) {
                if let Some(e) = outcome.error.as_mut() {
                    e.push_str(&hint);
                }
            }
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
                for line in cordon_policy::notices::notices(&outcome, Some(&limits)) {
                    eprintln!("cordon: {line}");
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

/// A command given as a relative path (`./s.sh`) that the sandbox did not find, but that is
/// there on the host: the host's current directory is not the sandbox's (a fresh /workspace,
/// unless it was shared). Says so, and how to share it, instead of leaving the user to
/// search the sandbox's PATH.
fn not_in_sandbox_hint(
    o: &Outcome,
    command: &[String],
    workspace: Option<&std::path::Path>,
) -> Option<String> {
    let prog = command.first()?;
    let not_found = o.exit_code == Some(exit::NOT_FOUND)
        && o.error
            .as_deref()
            .is_some_and(|e| e.starts_with("command not found"));
    if !not_found || !prog.contains('/') || prog.starts_with('/') {
        return None;
    }
    let here = std::env::current_dir().ok()?.canonicalize().ok()?;
    if workspace == Some(here.as_path()) || !std::path::Path::new(prog).exists() {
        return None;
    }
    let here = here.display();
    Some(format!(
        "; {prog} exists on the host, in {here}, but that directory is not in the sandbox \
         (the sandbox starts in its own /workspace): share it with --workspace . (read-write \
         at /workspace, where {prog} is then found), or read-only with --ro {here} --cwd {here}"
    ))
}

/// `cordon run -t`: the payload on a terminal of the sandbox's own (see `run_tty`).
fn run_tty(a: &RunArgs, profile: &cordon_policy::Profile, learn: Option<&Learner>) -> i32 {
    let outcome = match crate::run_tty::run(profile, a.command.clone(), a.cwd.clone()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            return exit::CORDON_FAILED;
        }
    };
    if let Some(l) = learn {
        if let Err(e) = l.write(&outcome, &a.command, a.json) {
            eprintln!("cordon: --learn: {e}");
            return exit::CORDON_FAILED;
        }
    }
    if a.json {
        match serde_json::to_string(&outcome) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cordon: cannot encode the outcome: {e}");
                return exit::CORDON_FAILED;
            }
        }
        return 0;
    }
    for line in cordon_policy::notices::notices(&outcome, Some(&profile.limits)) {
        eprintln!("cordon: {line}");
    }
    outcome.cli_exit_code()
}

/// `--learn FILE`: what the learned profile extends, and the profile the run had, kept to
/// write FILE once the run is over. Nothing here changes the run.
struct Learner {
    file: PathBuf,
    base: String,
    profile: cordon_policy::Profile,
}

impl Learner {
    /// `profile_arg` is `--profile` as given: a built-in is what the learned file extends; a
    /// file's own `extends` (its binds and hosts are carried in the profile the run has).
    fn new(
        file: &std::path::Path,
        profile_arg: &str,
        profile: &cordon_policy::Profile,
    ) -> Result<Learner, String> {
        let base = if cordon_policy::profile::BUILTINS.contains(&profile_arg) {
            profile_arg.to_string()
        } else {
            let text = std::fs::read_to_string(profile_arg)
                .map_err(|e| format!("cannot read {profile_arg}: {e}"))?;
            let table: toml::Table =
                toml::from_str(&text).map_err(|e| format!("{profile_arg}: {}", e.message()))?;
            table
                .get("extends")
                .and_then(|v| v.as_str())
                .unwrap_or("default")
                .to_string()
        };
        if file.is_dir() {
            return Err(format!("{} is a directory", file.display()));
        }
        Ok(Learner {
            file: file.to_path_buf(),
            base,
            profile: profile.clone(),
        })
    }

    /// Writes (or widens) the learned profile; the file is replaced whole, never left half
    /// written.
    fn write(&self, outcome: &Outcome, command: &[String], captured: bool) -> Result<(), String> {
        let shown = self.file.display();
        let existing = match std::fs::read_to_string(&self.file) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {shown}: {e}")),
        };
        let text = cordon_policy::learn::learn(
            &cordon_policy::learn::Run {
                base: &self.base,
                profile: &self.profile,
                outcome,
                command,
                output_captured: captured,
            },
            existing.as_deref(),
        )
        .map_err(|e| format!("{shown} {e}"))?;
        let tmp = self.file.with_extension("toml.learning");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &self.file))
            .map_err(|e| format!("cannot write {shown}: {e}"))?;
        let verb = if existing.is_some() {
            "widened"
        } else {
            "written"
        };
        eprintln!(
            "cordon: learned profile {verb}: {shown} (review it: cordon profile explain {shown})"
        );
        Ok(())
    }
}
