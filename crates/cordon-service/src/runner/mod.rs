//! One run in this process, assembled once: the egress proxy (always there, refusing
//! everything when the network is off, so that what was tried is reported), a WebAssembly
//! module or a process, and the Outcome. `cordon run`, the server's one-shot worker
//! (`cordon __oneshot`) and `cordon run -t` (its egress) call it; none assembles a run itself.
//!
//! The engine forks: call [`execute`] from a single-threaded process (see `cordon-linux`).
//!
//! Threat model: the payload is hostile; its confinement is the engine's (or the wasm
//! runtime's). What a caller hands in (profile, argv, environment) was already validated by
//! the door or the CLI that built it.

pub mod egress;
pub mod secrets;
pub mod wasm;

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_linux::{OutputMode, RunRequest, StdinSource};
use cordon_policy::{Backend as OutcomeBackend, Outcome, Profile};

/// Which runtime a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A WebAssembly module when the command names a file that starts like one, else a process.
    Auto,
    Process,
    Wasm,
}

/// What the program reads on stdin.
pub enum Stdin {
    Empty,
    Bytes(Vec<u8>),
    File(PathBuf),
    /// The caller's own stdin.
    Inherit,
}

/// The module of a WebAssembly run.
pub enum Module {
    /// A file on this host.
    File(PathBuf),
    /// Base64 bytes from a client (the server's one-shot runs).
    Base64(String),
}

/// One run.
pub struct Job {
    pub profile: Profile,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    /// Variables set on top of the profile's environment.
    pub env: BTreeMap<String, String>,
    pub stdin: Stdin,
    /// Stream the program's output to this process's stdout/stderr as it comes (`cordon run`
    /// without `--json`), or capture it into the Outcome.
    pub stream: bool,
    /// `Some` for a WebAssembly module (see [`module_for`]), `None` for a process.
    pub module: Option<Module>,
}

/// Why a run could not happen; the text is for a person.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The network policy does not compile (a bad `--allow-net` entry).
    #[error("--allow-net: {0}")]
    Network(String),
    #[error("--cwd: a WebAssembly module has no working directory to set")]
    WasmCwd,
    #[error("{0}")]
    Wasm(String),
    /// A secret could not be made ready (its message names the secret, never a value).
    #[error("{0}")]
    Secrets(String),
    #[error("{0}")]
    Engine(#[from] cordon_linux::EngineError),
}

/// The module `command` names for `backend`, if it is to run as WebAssembly.
pub fn module_for(
    backend: Backend,
    command: &[String],
    profile: &Profile,
) -> Result<Option<Module>, String> {
    wasm::module_for(backend, command, profile).map(|m| m.map(Module::File))
}

/// Runs `job` to its end.
pub fn execute(job: Job) -> Result<Outcome, RunError> {
    match job.module {
        Some(module) => {
            if job.cwd.is_some() {
                return Err(RunError::WasmCwd);
            }
            if !job.profile.secrets.is_empty() {
                return Err(RunError::Secrets(
                    "--secret: a WebAssembly module has no egress proxy to inject secrets at; \
                     use --backend process"
                        .into(),
                ));
            }
            let stdin = match job.stdin {
                Stdin::Empty => wasm::Stdin::Empty,
                Stdin::Bytes(b) => wasm::Stdin::Bytes(b),
                Stdin::File(p) => wasm::Stdin::File(p),
                Stdin::Inherit => wasm::Stdin::Inherit,
            };
            match module {
                Module::File(path) => {
                    wasm::run(&job.profile, &path, &job.argv, &job.env, stdin, job.stream)
                }
                Module::Base64(b64) => {
                    wasm::run_bytes(&job.profile, &b64, &job.argv, &job.env, stdin)
                }
            }
            .map_err(RunError::Wasm)
        }
        None => {
            // Always a proxy, even with the network off: then it refuses everything, and what
            // the payload tried is reported (see the engine's `Plan::report_network_off`).
            let mut profile = job.profile;
            let mut env = job.env;
            // Held until the run is over: the proxy keeps the values, the directory the CA.
            let secrets = secrets::prepare(&mut profile).map_err(RunError::Secrets)?;
            if let Some(s) = &secrets {
                env.extend(s.env.clone());
            }
            let egress =
                egress::factory_with(&profile, secrets.as_ref().map(|s| s.interception.clone()))
                    .map_err(RunError::Network)?;
            let req = RunRequest {
                profile,
                argv: job.argv,
                cwd: job.cwd,
                env,
                stdin: match job.stdin {
                    Stdin::Empty => StdinSource::Empty,
                    Stdin::Bytes(b) => StdinSource::Bytes(b),
                    Stdin::File(p) => StdinSource::File(p),
                    Stdin::Inherit => StdinSource::Inherit,
                },
                output: if job.stream {
                    OutputMode::Stream
                } else {
                    OutputMode::Capture
                },
                egress: Some(egress),
            };
            let mut o = cordon_linux::run(req)?;
            drop(secrets);
            o.enforcement.backend = Some(OutcomeBackend::Process);
            Ok(o)
        }
    }
}
