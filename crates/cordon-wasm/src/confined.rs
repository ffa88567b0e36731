//! A guest run inside a process sandbox: the runtime itself is the sandbox's payload, so
//! every layer of the process backend (namespaces, seccomp, Landlock, rlimits, cgroup) holds
//! around wasmtime and its compiler, and a bug in them is not a host compromise.
//!
//! The caller (the CLI) does three steps, and only the middle one knows about processes:
//! 1. [`prepare`] reads the module, looks its compiled code up in the cache (checking its
//!    HMAC), writes what the runtime needs into a private host directory and returns the
//!    profile and argv of a process run: the cordon binary re-executed as
//!    `cordon __wasm SPEC` with that directory's files bound at [`DIR`];
//! 2. the caller runs that with the process engine (`cordon_linux::run`);
//! 3. [`Prepared::finish`] reads the runtime's report (how the guest ended), merges it into
//!    the process run's Outcome, and stores freshly compiled code in the cache.
//!
//! Inside, [`inner_main`] runs the guest with its stdio on the process's own (the engine caps
//! and pumps it) and preopens the sandbox's `/workspace` and the profile's binds at their
//! destinations: `--disk` holds there because the sandbox's `/workspace` is the size-capped
//! tmpfs of the process backend, and its watcher reports `disk`/`files` the same way.
//!
//! Nothing the runtime writes is trusted: the report is size-capped and parsed, a compiled
//! artifact is HMAC-tagged only for the module hash the supervisor computed itself from the
//! bytes it handed in (so a compromised runtime can only spoil the cache entry of its own
//! module, which runs confined anyway).

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cordon_policy::{Backend, Bind, Outcome, Profile, Status};
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::engine::{self, Kind};
use crate::guest::{self, Guest, GuestEnd, GuestLimits, GuestOutput, GuestStdin, Preopen};
use crate::WasmError;

/// Where the runtime finds its files inside the sandbox.
pub const DIR: &str = "/run/cordon-wasm";
const EXE: &str = "cordon";
const MODULE: &str = "module.wasm";
const ARTIFACT: &str = "artifact";
const COMPILED: &str = "compiled";
const REPORT: &str = "report";

/// Memory the process sandbox gets on top of `--memory`, for the runtime itself: wasmtime,
/// Cranelift while it compiles, the guest's stack and the host's buffers. The guest's own
/// memories are held to `--memory` by the runtime.
pub const RUNTIME_MEMORY: u64 = 192 << 20;
/// Threads of the runtime (main, epoch ticker, and a few for the async runtime's blocking
/// pool); `--pids` means nothing to a guest, which cannot fork or start threads.
const RUNTIME_PIDS: u32 = 8;
/// The process sandbox's wall-clock and CPU limits are this much longer than the guest's, so
/// that the runtime (which stops the guest at the limit itself) reports how it ended; the
/// process limits are the backstop for a guest blocked in a host call.
pub const GRACE: Duration = Duration::from_secs(2);
/// Largest report read back.
const MAX_REPORT: u64 = 64 << 10;
/// Largest compiled artifact read back.
const MAX_ARTIFACT: u64 = 512 << 20;

/// What `cordon __wasm` is told (as one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// `"module"` or `"component"`.
    pub kind: String,
    pub argv: Vec<String>,
    pub preopens: Vec<Preopen>,
    pub limits: GuestLimits,
    /// A checked artifact is at `DIR/artifact`.
    pub artifact: bool,
    /// Write a fresh compile's artifact to `DIR/compiled` if it is at most this large (the
    /// sandbox's file-size limit; 0 to skip).
    pub write_compiled: u64,
}

/// What `cordon __wasm` reports (as JSON in `DIR/report`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub end: GuestEnd,
    /// Bytes of a fresh artifact written to `DIR/compiled` (0: none).
    pub compiled: u64,
}

/// A prepared confined run: the process run to start, and what `finish` needs.
pub struct Prepared {
    /// The profile for the process engine: the caller's, with the runtime's files bound and
    /// room for the runtime in its limits.
    pub profile: Profile,
    /// The process engine's argv: `DIR/cordon __wasm SPEC`.
    pub argv: Vec<String>,
    dir: PathBuf,
    cache: Option<(Cache, String)>,
    /// The engine must not write compiled code back: someone other than this process's user
    /// could have written it (see `exchange_owner`).
    store_compiled: bool,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Prepares a confined run of the module at `module` (a host path) with `args` after its
/// name `argv0`. `exe` is the cordon binary to re-execute inside the sandbox.
pub fn prepare(
    profile: &Profile,
    module: &Path,
    argv0: &str,
    args: &[String],
    exe: &Path,
    cache: Option<Cache>,
) -> Result<Prepared, WasmError> {
    let bytes = read_module(module)?;
    let kind = engine::detect(&bytes).ok_or_else(|| {
        WasmError::Invalid(format!(
            "{}: not a WebAssembly module or component (its header is neither)",
            module.display()
        ))
    })?;
    let cache = match cache {
        Some(c) => {
            let engine = engine::new_engine()?;
            let key = crate::cache::key(&engine, kind, &bytes);
            Some((c, key))
        }
        None => None,
    };
    let artifact = cache.as_ref().and_then(|(c, k)| c.lookup(k));

    let (owner, store_compiled) = exchange_owner(profile);
    let dir = private_dir(owner)?;
    let mut prepared = Prepared {
        profile: profile.clone(),
        argv: Vec::new(),
        dir: dir.clone(),
        cache,
        store_compiled,
    };
    let file = |name: &str, data: &[u8]| -> Result<PathBuf, WasmError> {
        let path = dir.join(name);
        write_private(&path, data, owner)
            .map_err(|e| WasmError::Io(format!("cannot prepare {}: {e}", path.display())))?;
        Ok(path)
    };
    let mut binds = Vec::new();
    let mut bind = |src: PathBuf, name: &str, writable: bool| {
        binds.push(Bind {
            source: src,
            dest: Path::new(DIR).join(name),
            writable,
        });
    };
    bind(
        exe.canonicalize()
            .map_err(|e| WasmError::Io(format!("the cordon binary {}: {e}", exe.display())))?,
        EXE,
        false,
    );
    bind(file(MODULE, &bytes)?, MODULE, false);
    if let Some(a) = &artifact {
        bind(file(ARTIFACT, a)?, ARTIFACT, false);
    }
    bind(file(COMPILED, b"")?, COMPILED, true);
    bind(file(REPORT, b"")?, REPORT, true);

    let p = &mut prepared.profile;
    let mut preopens = vec![Preopen {
        host: "/workspace".into(),
        guest: "/workspace".into(),
        writable: true,
    }];
    for b in &profile.binds {
        let guest = b.dest.to_string_lossy().into_owned();
        preopens.push(Preopen {
            host: b.dest.clone(),
            guest,
            writable: b.writable,
        });
    }
    p.binds.extend(binds);
    let limits = GuestLimits::from_profile(profile);
    p.limits.memory = profile.limits.memory.saturating_add(RUNTIME_MEMORY);
    p.limits.pids = profile.limits.pids.max(RUNTIME_PIDS);
    p.limits.timeout = profile.limits.timeout + GRACE;
    p.limits.cpu_time = profile.limits.cpu_time.map(|t| t + GRACE);
    let spec = Spec {
        kind: kind.name().into(),
        argv: std::iter::once(argv0.to_string())
            .chain(args.iter().cloned())
            .collect(),
        preopens,
        limits,
        artifact: artifact.is_some(),
        write_compiled: if prepared.cache.is_some() && store_compiled {
            profile.limits.file_size.min(MAX_ARTIFACT)
        } else {
            0
        },
    };
    let spec = serde_json::to_string(&spec).map_err(|e| WasmError::Io(e.to_string()))?;
    prepared.argv = vec![
        Path::new(DIR).join(EXE).to_string_lossy().into_owned(),
        "__wasm".into(),
        spec,
    ];
    Ok(prepared)
}

fn read_module(path: &Path) -> Result<Vec<u8>, WasmError> {
    let read = |e| WasmError::Read {
        path: path.to_path_buf(),
        source: e,
    };
    let f = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    f.take(MAX_ARTIFACT).read_to_end(&mut bytes).map_err(read)?;
    Ok(bytes)
}

/// Who must own the exchange files so that the sandbox — which drops to its own host uid
/// before it mounts anything — can reach them, and nobody else can. As root, the process
/// engine runs a sandbox as the workspace's owner (when not root) or as a uid of its own,
/// 2000000000 + the supervisor's pid (`cordon_linux` supervisor.rs, `ROOT_MODE_UID_BASE`:
/// keep the two in step). In the first case that user's own processes could tamper with
/// what the runtime writes, so compiled code is not cached from such a run.
fn exchange_owner(profile: &Profile) -> (Option<(u32, u32)>, bool) {
    if !rustix::process::geteuid().is_root() {
        return (None, true);
    }
    if let Some(Ok(m)) = profile.workspace.as_ref().map(std::fs::metadata) {
        if m.uid() != 0 {
            return (Some((m.uid(), m.gid())), false);
        }
    }
    let unique = 2_000_000_000 + std::process::id();
    (Some((unique, unique)), true)
}

fn private_dir(owner: Option<(u32, u32)>) -> Result<PathBuf, WasmError> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir() && !rustix::process::geteuid().is_root())
        .unwrap_or_else(std::env::temp_dir);
    let mut rnd = [0u8; 16];
    getrandom::getrandom(&mut rnd).map_err(|e| WasmError::Io(e.to_string()))?;
    let dir = base.join(format!("cordon-wasm-{}", hex::encode(rnd)));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| WasmError::Io(format!("cannot create {}: {e}", dir.display())))?;
    if let Some((uid, gid)) = owner {
        chown(&dir, uid, gid)
            .map_err(|e| WasmError::Io(format!("cannot hand {} over: {e}", dir.display())))?;
    }
    Ok(dir)
}

fn chown(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    rustix::fs::chown(
        path,
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
    )
    .map_err(std::io::Error::from)
}

fn write_private(path: &Path, data: &[u8], owner: Option<(u32, u32)>) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    if let Some((uid, gid)) = owner {
        chown(path, uid, gid)?;
    }
    Ok(())
}

fn read_capped(path: &Path, max: u64) -> Option<Vec<u8>> {
    let f = std::fs::File::open(path).ok()?;
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= max).then_some(data)
}

impl Prepared {
    /// The Outcome of the confined run: the process run's output, usage, enforcement and
    /// limits (output, disk, files, and the backstop timeout or OOM kill), with how the guest
    /// ended as the runtime reported it. Stores freshly compiled code in the cache.
    pub fn finish(self, mut outer: Outcome) -> Outcome {
        outer.enforcement.backend = Some(Backend::Wasm);
        let report = read_capped(&self.dir.join(REPORT), MAX_REPORT)
            .and_then(|b| serde_json::from_slice::<Report>(&b).ok());
        let Some(report) = report else {
            // No word from the runtime: the process run's own verdict stands (a timeout or
            // OOM kill of the whole runtime, a crash). A clean exit without a report is the
            // runtime failing before the guest ran.
            if outer.status == Status::Exited {
                let code = outer.exit_code.unwrap_or_default();
                let stderr = outer.stderr.trim();
                outer.status = Status::Error;
                outer.error = Some(format!(
                    "the wasm runtime ended (exit {code}) without reporting how the guest \
                     ended{}",
                    if stderr.is_empty() {
                        String::new()
                    } else {
                        format!(": {stderr}")
                    }
                ));
                outer.exit_code = Some(cordon_policy::outcome::exit::CORDON_FAILED);
            }
            return outer;
        };
        if report.compiled > 0 && self.store_compiled {
            if let Some((cache, key)) = &self.cache {
                if let Some(a) = read_capped(&self.dir.join(COMPILED), MAX_ARTIFACT) {
                    if a.len() as u64 == report.compiled {
                        // Not cached costs the next run a compile, nothing else.
                        let _ = cache.store(key, &a);
                    }
                }
            }
        }
        let ending = report
            .end
            .ending(outer.stdout_truncated || outer.stderr_truncated);
        outer.status = ending.status;
        outer.exit_code = ending.exit_code;
        outer.signal = ending.signal;
        outer.error = ending.error;
        outer.limits_hit.extend(ending.limits_hit);
        outer.limits_hit.sort();
        outer.limits_hit.dedup();
        outer
    }
}

/// `cordon __wasm SPEC` inside the sandbox: runs the guest, writes the report, and exits with
/// the guest's exit code (or the CLI's code for how it ended otherwise).
pub fn inner_main(spec: &str) -> i32 {
    let started = Instant::now();
    let (end, compiled) = match serde_json::from_str::<Spec>(spec) {
        Ok(spec) => {
            let _watchdog = Watchdog::start(started + spec.limits.timeout);
            run_inner(spec, started)
        }
        Err(e) => (
            GuestEnd::Setup(format!("the wasm runtime got a bad spec: {e}")),
            0,
        ),
    };
    report_once(&Report { end, compiled })
}

/// Whether the report was written (by the guest's end or by the watchdog): only the first
/// writes it.
static REPORTED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Writes the report unless it was written already, and returns the exit code to leave with.
fn report_once(report: &Report) -> i32 {
    let mut done = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        // The watchdog reported a timeout and is ending the process.
        drop(done);
        loop {
            std::thread::park();
        }
    }
    *done = true;
    let code = match &report.end {
        GuestEnd::Exited(c) => *c,
        other => other.ending(false).exit_code.unwrap_or(125),
    };
    let written = serde_json::to_vec(report)
        .map_err(|e| e.to_string())
        .and_then(|json| {
            std::fs::write(Path::new(DIR).join(REPORT), json).map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        eprintln!("cordon: the wasm runtime cannot write its report: {e}");
        return cordon_policy::outcome::exit::CORDON_FAILED;
    }
    code
}

/// A guest blocked in a host call (a read from a pipe that never ends) sees no epoch: past
/// its deadline (and a little more, for a guest about to notice by itself), the watchdog
/// reports the timeout and ends the runtime, instead of the process sandbox's backstop
/// [`GRACE`] later.
struct Watchdog {
    stop: Option<std::sync::mpsc::Sender<()>>,
}

/// How long past the deadline a guest may take to stop by itself.
const WATCHDOG_SLACK: Duration = Duration::from_millis(200);

impl Watchdog {
    fn start(deadline: Instant) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("cordon-wasm-watchdog".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let wait = deadline.saturating_duration_since(Instant::now()) + WATCHDOG_SLACK;
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                    let code = report_once(&Report {
                        end: GuestEnd::Timeout,
                        compiled: 0,
                    });
                    std::process::exit(code);
                }
            });
        Watchdog {
            // Without a watchdog thread, the process sandbox's backstop still holds.
            stop: spawned.ok().map(|_| tx),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
    }
}

fn run_inner(spec: Spec, started: Instant) -> (GuestEnd, u64) {
    let kind = match spec.kind.as_str() {
        "module" => Kind::Module,
        "component" => Kind::Component,
        other => return (GuestEnd::Setup(format!("unknown kind '{other}'")), 0),
    };
    let dir = Path::new(DIR);
    let bytes = match std::fs::read(dir.join(MODULE)) {
        Ok(b) => b,
        Err(e) => return (GuestEnd::Setup(format!("cannot read the module: {e}")), 0),
    };
    // Checked by the supervisor before it was handed in (see `prepare`).
    let cached = spec
        .artifact
        .then(|| std::fs::read(dir.join(ARTIFACT)).ok())
        .flatten();
    let engine = match engine::new_engine() {
        Ok(e) => e,
        Err(e) => return (GuestEnd::Setup(e.to_string()), 0),
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let guest = Guest {
        argv: spec.argv,
        env,
        preopens: spec
            .preopens
            .into_iter()
            .filter(|p| p.host.is_dir())
            .collect(),
        stdin: GuestStdin::Inherit,
        stdout: GuestOutput::Inherit,
        stderr: GuestOutput::Inherit,
        limits: spec.limits,
    };
    let ran = guest::run(&engine, kind, &bytes, cached, guest, started);
    let mut compiled = 0;
    if let Some(a) = &ran.new_artifact {
        let len = a.len() as u64;
        if spec.write_compiled > 0
            && len <= spec.write_compiled
            && std::fs::write(dir.join(COMPILED), a).is_ok()
        {
            compiled = len;
        }
    }
    (ran.end, compiled)
}
