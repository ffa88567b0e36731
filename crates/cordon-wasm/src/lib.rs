//! cordon's WebAssembly backend: WASI preview 1 modules and preview 2 components run by
//! wasmtime under the same `Profile` → `Outcome` contract as the process backend.
//!
//! What a guest gets is only what WASI hands it: its arguments, the environment it is given,
//! stdin, stdout and stderr, the preopened directories (`/workspace` and the profile's
//! `--ro`/`--rw` binds, with the same read-only or read-write meaning), clocks and random
//! numbers. No sockets: preview 1 has no way to open one, and a component's `wasi:sockets`
//! calls are refused. Limits are mapped, not dropped (see [`guest`]):
//! - `--memory` caps the sum of the guest's linear memories and tables: a growth past it traps
//!   and the run ends `oom` with `limits_hit: ["memory"]`;
//! - `--timeout` and `--cpu-time` by epoch interruption: a ticker thread advances the engine's
//!   epoch every [`guest::TICK`], and at each tick the running guest checks the wall clock and
//!   its thread's CPU clock. Epochs, not fuel: fuel counts instructions, not time, and its
//!   bookkeeping slows every loop (the CPU-bound target is half of native speed); an epoch
//!   check is one load and compare at loop heads and function entries;
//! - `--output-limit` through the same [`cordon_policy::OutputCap`] as every other door.
//!
//! Two ways to run: [`run`] runs a module in the calling process (tests, and embedders that
//! bring their own confinement); [`confined`] runs it in a runtime process that confines
//! itself first (seccomp, Landlock, rlimits, no privileges) — what `cordon run` does.
//!
//! Compiled code is cached ([`cache`]): content-addressed, written with write-then-rename,
//! and checked with an HMAC before `deserialize` ever sees it.

pub mod cache;
pub mod confined;
mod engine;
pub mod guest;
mod stdio;

use std::path::PathBuf;
use std::time::Instant;

use cordon_policy::{Backend, Enforcement, Outcome, Profile, Usage};

pub use engine::{detect, is_wasm, Kind};
pub use guest::{GuestEnd, GuestLimits, GuestOutput, GuestStdin, Preopen};

/// What went wrong before a guest could run, in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("the WebAssembly engine: {0}")]
    Engine(String),
    #[error("compiled-code cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
    #[error("{0}")]
    Io(String),
}

/// One run of a module in this process.
pub struct WasmRequest {
    pub profile: Profile,
    /// The module or component's bytes.
    pub module: Vec<u8>,
    /// The guest's argv; `argv[0]` is the program's name as the user wrote it.
    pub argv: Vec<String>,
    pub stdin: GuestStdin,
    /// Echo output live to this process's stdout/stderr (what is kept is capped either way).
    pub echo: bool,
    /// Where compiled code is kept; `None` compiles every time.
    pub cache: Option<cache::Cache>,
}

/// Runs a module or component in this process with the profile's limits, preopens and
/// environment, and reports it as an [`Outcome`]. Nothing but the WASI boundary confines it
/// here: `enforcement` claims no process layer, only `"backend": "wasm"`.
///
/// The profile's `--workspace` is preopened read-write at `/workspace`; without one the guest
/// has no `/workspace` (there is no scratch filesystem outside a process sandbox). `--disk` is
/// not enforced here: it is the size of the process sandbox's scratch filesystems, which
/// [`confined`] preopens.
pub fn run(req: WasmRequest) -> Result<Outcome, WasmError> {
    let started = Instant::now();
    let profile = &req.profile;
    let env: Vec<(String, String)> = profile
        .environment(|k| std::env::var(k).ok())
        .into_iter()
        .collect();
    let preopens = Preopen::of_profile(profile);
    let engine = engine::new_engine()?;
    let kind = detect(&req.module).ok_or_else(|| {
        WasmError::Invalid("not a WebAssembly module or component (no \\0asm header)".into())
    })?;
    let key = req.cache.as_ref().map(|_| cache::key(kind, &req.module));
    let cached = match (&req.cache, &key) {
        (Some(c), Some(k)) => c.lookup(k),
        _ => None,
    };
    let limits = GuestLimits::from_profile(profile);
    let guest = guest::Guest {
        argv: req.argv.clone(),
        env,
        preopens,
        stdin: req.stdin,
        stdout: GuestOutput::Capture {
            limit: profile.limits.output_limit,
            echo: req.echo,
        },
        stderr: GuestOutput::Capture {
            limit: profile.limits.output_limit,
            echo: req.echo,
        },
        limits,
    };
    let ran = guest::run(&engine, kind, &req.module, cached, guest, started);
    if let (Some(c), Some(k), Some(artifact)) = (&req.cache, &key, &ran.new_artifact) {
        // A cache that cannot be written costs the next run a compile, nothing more.
        let _ = c.store(k, artifact);
    }
    let mut enforcement = Enforcement {
        backend: Some(Backend::Wasm),
        ..Enforcement::default()
    };
    enforcement.notes.push(
        "wasm in the calling process: only the WASI boundary and the runtime's limits hold \
         (no process sandbox around the runtime)"
            .into(),
    );
    let ending = ran.end.ending(ran.output_truncated);
    let usage = Usage {
        wall_ms: started.elapsed().as_millis() as u64,
        cpu_user_ms: ran.cpu.user_ms,
        cpu_system_ms: ran.cpu.system_ms,
        peak_memory_bytes: ran.peak_memory,
        peak_pids: 1,
    };
    Ok(Outcome::from_ending(
        ending,
        ran.stdout,
        ran.stderr,
        usage,
        enforcement,
        Vec::new(),
    ))
}
