//! A guest run by a confined runtime process: `cordon run` (or the server's one-shot runner)
//! starts `cordon __wasm SPEC`, which confines itself — no privileges, rlimits, Landlock,
//! seccomp, its other fds closed, an environment of exactly the guest's — *before* it looks at
//! the module's bytes, and only then loads, compiles and runs the guest. No process sandbox
//! is built around it: a guest makes no syscall of its own, so namespaces, a new root and a
//! cgroup would guard a process whose only untrusted input is checked by wasmtime, and cost
//! more than the whole run (see the README's Benchmarks). The one namespace pair is
//! `cordon_linux::selfconfine::scratch_tmpfs`'s, for a `--disk`-capped scratch `/workspace`
//! when there is no `--workspace`.
//!
//! The caller's side ([`run`]) reads the module, looks its compiled code up in the cache
//! (checking its HMAC: the key never reaches the runtime), writes what the runtime needs into
//! a private directory, starts the runtime, stops it at the backstop deadline if it has not
//! stopped itself, and turns its report into the Outcome. Nothing the runtime writes is
//! trusted beyond its own run: the report is size-capped and parsed; a compiled artifact is
//! tagged only for the module hash the caller computed from the bytes it handed in, so a
//! compromised runtime can only spoil the cache entry of its own module.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_linux::selfconfine::{self, Held, SelfConfinement};
use cordon_policy::{Backend, CapturedText, Enforcement, LimitHit, Outcome, Profile, Usage};
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::engine::{self, Kind};
use crate::guest::{self, Guest, GuestEnd, GuestLimits, GuestOutput, GuestStdin, Preopen};
use crate::WasmError;

const MODULE: &str = "module.wasm";
const ARTIFACT: &str = "artifact";
const COMPILED: &str = "compiled";
const REPORT: &str = "report";
const HELD: &str = "held";
/// The guest's environment, as JSON: a file, not the spec, because the spec is the runtime's
/// argv, which every user on the host can read in /proc (and `--env` values may be secrets).
const ENV: &str = "env.json";

/// Private writable memory the runtime may hold on top of `--memory` (`RLIMIT_DATA`):
/// wasmtime, Cranelift while it compiles, the guest's stack and the host's buffers. The
/// guest's own memories are held to `--memory` by the runtime.
pub const RUNTIME_MEMORY: u64 = 192 << 20;
/// The backstop: the runtime is killed this long after the guest's wall-clock limit if it has
/// not stopped by itself (its watchdog reports a guest blocked in a host call 200 ms past).
pub const GRACE: Duration = Duration::from_secs(2);
/// Largest report read back, on top of the output it carries.
const MAX_REPORT: u64 = 64 << 10;
/// Largest module or compiled artifact read.
const MAX_ARTIFACT: u64 = 512 << 20;
/// Open files the runtime may hold (the guest's preopens and descriptors count here).
const NOFILE: u64 = 256;

/// What `cordon __wasm` is told (as one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// `"module"` or `"component"`.
    pub kind: String,
    /// The private directory with the module and the report files.
    pub dir: PathBuf,
    pub argv: Vec<String>,
    pub preopens: Vec<Preopen>,
    /// A size-capped scratch `/workspace`: `(bytes, inodes)`.
    pub scratch: Option<(u64, u64)>,
    pub limits: GuestLimits,
    pub output_limit: u64,
    /// Echo the guest's output live to this process's stdout/stderr.
    pub echo: bool,
    pub file_size: u64,
    /// As root: the uid and gid to run as.
    pub run_as: Option<(u32, u32)>,
    /// As root, the `--workspace` is root's: write it through an idmapped copy.
    pub idmap_workspace: bool,
    /// A checked artifact is at `dir/artifact`.
    pub artifact: bool,
    /// Write a fresh compile's artifact to `dir/compiled` if at most this large (0: skip).
    pub write_compiled: u64,
}

/// One captured stream, as the report carries it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Text {
    text: String,
    b64: Option<String>,
    truncated: bool,
}

impl From<CapturedText> for Text {
    fn from(c: CapturedText) -> Text {
        Text {
            text: c.text,
            b64: c.b64,
            truncated: c.truncated,
        }
    }
}

impl From<Text> for CapturedText {
    fn from(t: Text) -> CapturedText {
        CapturedText {
            text: t.text,
            b64: t.b64,
            truncated: t.truncated,
        }
    }
}

/// What `cordon __wasm` reports (as JSON in `dir/report`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    end: GuestEnd,
    /// Bytes of a fresh artifact written to `dir/compiled` (0: none).
    compiled: u64,
    stdout: Text,
    stderr: Text,
    peak_memory: u64,
    cpu_user_ms: u64,
    cpu_system_ms: u64,
    disk_full: bool,
    files_full: bool,
}

/// What held, written by the runtime once it is confined and before it reads the module, so
/// that a guest that compromised the runtime cannot rewrite it (the file is closed by then).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct HeldReport {
    landlock_abi: u32,
    seccomp: bool,
    rlimits: bool,
    scratch_namespaces: bool,
    host_uid: u32,
    notes: Vec<String>,
}

/// Where the guest's stdin comes from.
pub enum Stdin {
    Empty,
    Bytes(Vec<u8>),
    File(PathBuf),
    /// The caller's own stdin.
    Inherit,
}

/// One confined run.
pub struct Request<'a> {
    pub profile: &'a Profile,
    /// The module on this host.
    pub module: &'a Path,
    /// The guest's argv; `argv[0]` is the name the user gave.
    pub argv: Vec<String>,
    /// Environment on top of the profile's.
    pub extra_env: Vec<(String, String)>,
    pub stdin: Stdin,
    /// Echo output live (what is kept is capped either way).
    pub echo: bool,
    /// The cordon binary, re-executed as `cordon __wasm`.
    pub exe: &'a Path,
    pub cache: Option<Cache>,
}

/// Runs the module in a confined runtime process and reports it as an [`Outcome`].
pub fn run(req: Request<'_>) -> Result<Outcome, WasmError> {
    let started = Instant::now();
    let profile = req.profile;
    let bytes = read_module(req.module)?;
    let kind = engine::detect(&bytes).ok_or_else(|| {
        WasmError::Invalid(format!(
            "{}: not a WebAssembly module or component (its header is neither)",
            req.module.display()
        ))
    })?;
    let cache = match req.cache {
        Some(c) => {
            let key = crate::cache::key(kind, &bytes);
            Some((c, key))
        }
        None => None,
    };
    let artifact = cache.as_ref().and_then(|(c, k)| c.lookup(k));
    let (owner, store_compiled) = exchange_owner(profile);
    let dir = PrivateDir(private_dir(owner)?);
    let file = |name: &str, data: &[u8]| -> Result<(), WasmError> {
        let path = dir.0.join(name);
        write_private(&path, data, owner)
            .map_err(|e| WasmError::Io(format!("cannot prepare {}: {e}", path.display())))
    };
    file(MODULE, &bytes)?;
    drop(bytes);
    if let Some(a) = &artifact {
        file(ARTIFACT, a)?;
    }
    for name in [COMPILED, REPORT, HELD] {
        file(name, b"")?;
    }

    let preopens = Preopen::of_profile(profile);
    let disk = profile.limits.disk;
    let mut env: Vec<(String, String)> = profile
        .environment(|k| std::env::var(k).ok())
        .into_iter()
        .collect();
    for (k, v) in req.extra_env {
        env.retain(|(ek, _)| *ek != k);
        env.push((k, v));
    }
    env.sort();
    file(
        ENV,
        &serde_json::to_vec(&env).map_err(|e| WasmError::Io(e.to_string()))?,
    )?;
    let spec = Spec {
        kind: kind.name().into(),
        dir: dir.0.clone(),
        argv: req.argv,
        preopens,
        scratch: profile
            .workspace
            .is_none()
            .then_some((disk, (disk / 4096).max(64))),
        limits: GuestLimits::from_profile(profile),
        output_limit: profile.limits.output_limit,
        echo: req.echo,
        file_size: profile.limits.file_size,
        run_as: owner,
        idmap_workspace: owner.is_some()
            && profile
                .workspace
                .as_ref()
                .and_then(|w| std::fs::metadata(w).ok())
                .is_some_and(|m| m.uid() == 0),
        artifact: artifact.is_some(),
        write_compiled: if cache.is_some() && store_compiled {
            profile.limits.file_size.min(MAX_ARTIFACT)
        } else {
            0
        },
    };
    let spec_json = serde_json::to_string(&spec).map_err(|e| WasmError::Io(e.to_string()))?;
    let mut cmd = Command::new(req.exe);
    cmd.arg("__wasm").arg(spec_json).env_clear();
    let mut feed = None;
    match req.stdin {
        Stdin::Empty => cmd.stdin(Stdio::null()),
        Stdin::Inherit => cmd.stdin(Stdio::inherit()),
        Stdin::File(p) => {
            let f = File::open(&p)
                .map_err(|e| WasmError::Io(format!("--stdin {}: {e}", p.display())))?;
            cmd.stdin(f)
        }
        Stdin::Bytes(b) => {
            feed = Some(b);
            cmd.stdin(Stdio::piped())
        }
    };
    // Without echo, nothing the runtime prints reaches the caller's streams (which may carry
    // the Outcome itself): what the guest wrote comes back in the report.
    let out = |echo: bool| {
        if echo {
            Stdio::inherit()
        } else {
            Stdio::null()
        }
    };
    cmd.stdout(out(req.echo)).stderr(out(req.echo));
    let mut child = cmd.spawn().map_err(|e| {
        WasmError::Io(format!(
            "cannot start the wasm runtime {}: {e}",
            req.exe.display()
        ))
    })?;
    if let (Some(b), Some(mut sink)) = (feed, child.stdin.take()) {
        // A guest that stops reading is no reason to hang: the writer goes on its own.
        std::thread::spawn(move || {
            let _ = sink.write_all(&b);
        });
    }
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let backstop = profile.limits.timeout + GRACE;
    let killer = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(backstop) {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                // Still unreaped (the waiter has not said so), so still ours.
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            return true;
        }
        false
    });
    let status = child.wait();
    drop(tx);
    let killed = killer.join().unwrap_or(false);
    let wall_ms = started.elapsed().as_millis() as u64;

    let held = read_capped(&dir.0.join(HELD), MAX_REPORT)
        .and_then(|b| serde_json::from_slice::<HeldReport>(&b).ok());
    let max = MAX_REPORT + 8 * profile.limits.output_limit.min(64 << 20);
    let report = read_capped(&dir.0.join(REPORT), max)
        .and_then(|b| serde_json::from_slice::<Report>(&b).ok());
    let mut enforcement = Enforcement {
        backend: Some(Backend::Wasm),
        cgroup: "none".into(),
        ..Enforcement::default()
    };
    if let Some(h) = &held {
        enforcement.user_ns = h.scratch_namespaces;
        enforcement.mount_ns = h.scratch_namespaces;
        enforcement.seccomp = h.seccomp;
        enforcement.landlock_abi = h.landlock_abi;
        enforcement.rlimits = h.rlimits;
        enforcement.host_uid = Some(h.host_uid);
        enforcement.notes = h.notes.clone();
    }
    let Some(report) = report else {
        let why = if killed {
            "the wasm runtime did not stop at the guest's limit and was killed".to_string()
        } else if held.is_none() {
            "the wasm runtime could not confine itself".to_string()
        } else {
            format!("the wasm runtime ended ({status:?}) without reporting how the guest ended")
        };
        let end = if killed {
            GuestEnd::Timeout
        } else {
            GuestEnd::Setup(why)
        };
        let ending = end.ending(false);
        let usage = Usage {
            wall_ms,
            ..Usage::default()
        };
        return Ok(Outcome::from_ending(
            ending,
            CapturedText::default(),
            CapturedText::default(),
            usage,
            enforcement,
            Vec::new(),
        ));
    };
    if report.compiled > 0 && store_compiled {
        if let Some((cache, key)) = &cache {
            if let Some(a) = read_capped(&dir.0.join(COMPILED), MAX_ARTIFACT) {
                if a.len() as u64 == report.compiled {
                    // Not cached costs the next run a compile, nothing else.
                    let _ = cache.store(key, &a);
                }
            }
        }
    }
    let truncated = report.stdout.truncated || report.stderr.truncated;
    let mut ending = report.end.ending(truncated);
    if report.disk_full {
        ending.limits_hit.push(LimitHit::Disk);
    }
    if report.files_full {
        ending.limits_hit.push(LimitHit::Files);
    }
    ending.limits_hit.sort();
    ending.limits_hit.dedup();
    let usage = Usage {
        wall_ms,
        cpu_user_ms: report.cpu_user_ms,
        cpu_system_ms: report.cpu_system_ms,
        peak_memory_bytes: report.peak_memory,
        peak_pids: 1,
    };
    Ok(Outcome::from_ending(
        ending,
        report.stdout.into(),
        report.stderr.into(),
        usage,
        enforcement,
        Vec::new(),
    ))
}

/// Removed when the run is over, whatever happened.
struct PrivateDir(PathBuf);

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn read_module(path: &Path) -> Result<Vec<u8>, WasmError> {
    let read = |e| WasmError::Read {
        path: path.to_path_buf(),
        source: e,
    };
    let f = File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    f.take(MAX_ARTIFACT).read_to_end(&mut bytes).map_err(read)?;
    Ok(bytes)
}

/// Who the runtime runs as, and so who owns its files, when cordon runs as root: never root
/// itself. The owner of a `--workspace` that is not root's (so that it can write there, as
/// the process backend's sandbox does), else a uid of its own, 2000000000 + this process's
/// pid (as the process backend's `ROOT_MODE_UID_BASE`). In the first case that user's own
/// processes could tamper with what the runtime writes, so compiled code is not cached from
/// such a run.
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
    let f = File::open(path).ok()?;
    let mut data = Vec::new();
    f.take(max + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= max && !data.is_empty()).then_some(data)
}

/// The report file, written once: by the guest's end or by the watchdog, whichever first.
static REPORT_FILE: Mutex<Option<File>> = Mutex::new(None);

/// Writes the report unless it was written already, and returns the exit code to leave with.
fn report_once(report: &Report) -> i32 {
    let mut slot = REPORT_FILE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut f) = slot.take() else {
        // The other writer won and is ending the process.
        drop(slot);
        loop {
            std::thread::park();
        }
    };
    let code = match &report.end {
        GuestEnd::Exited(c) => *c,
        other => other.ending(false).exit_code.unwrap_or(125),
    };
    let written = serde_json::to_vec(report)
        .map_err(|e| e.to_string())
        .and_then(|json| f.write_all(&json).map_err(|e| e.to_string()));
    if let Err(e) = written {
        eprintln!("cordon: the wasm runtime cannot write its report: {e}");
        return cordon_policy::outcome::exit::CORDON_FAILED;
    }
    code
}

fn empty_report(end: GuestEnd) -> Report {
    Report {
        end,
        compiled: 0,
        stdout: Text::default(),
        stderr: Text::default(),
        peak_memory: 0,
        cpu_user_ms: 0,
        cpu_system_ms: 0,
        disk_full: false,
        files_full: false,
    }
}

/// `cordon __wasm SPEC`: confines this process, runs the guest, writes the report, and exits
/// with the guest's exit code (or the CLI's code for how it ended otherwise).
pub fn inner_main(spec: &str) -> i32 {
    let started = Instant::now();
    let spec = match serde_json::from_str::<Spec>(spec) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cordon: the wasm runtime got a bad spec: {e}");
            return cordon_policy::outcome::exit::CORDON_FAILED;
        }
    };
    // As root, while still root: the idmapped workspace (a failure leaves it read-only).
    let mut idmapped: Option<OwnedFd> = None;
    let mut notes = Vec::new();
    if let (true, Some((uid, gid))) = (spec.idmap_workspace, spec.run_as) {
        if let Some(ws) = spec.preopens.iter().find(|p| p.guest == "/workspace") {
            match selfconfine::idmapped_workspace(&ws.host, uid, gid) {
                Ok(fd) => idmapped = Some(fd),
                Err(e) => notes.push(format!(
                    "the root-owned --workspace is read-only to the module (no idmapped mount: {e})"
                )),
            }
        }
    }
    if let Some((uid, gid)) = spec.run_as {
        if let Err(e) = selfconfine::drop_to(uid, gid) {
            eprintln!("cordon: the wasm runtime cannot drop root: {e}");
            return cordon_policy::outcome::exit::CORDON_FAILED;
        }
    }
    let open_w = |name: &str| {
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(spec.dir.join(name))
    };
    let (report, held_file, compiled) = match (open_w(REPORT), open_w(HELD), open_w(COMPILED)) {
        (Ok(r), Ok(h), Ok(c)) => (r, h, c),
        _ => {
            eprintln!("cordon: the wasm runtime cannot open its report files");
            return cordon_policy::outcome::exit::CORDON_FAILED;
        }
    };
    *REPORT_FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
    match confined_main(spec, held_file, compiled, idmapped, notes, started) {
        Ok(code) => code,
        Err(setup) => report_once(&empty_report(GuestEnd::Setup(setup))),
    }
}

fn confined_main(
    spec: Spec,
    mut held_file: File,
    mut compiled_file: File,
    idmapped: Option<OwnedFd>,
    mut notes: Vec<String>,
    started: Instant,
) -> Result<i32, String> {
    let kind = match spec.kind.as_str() {
        "module" => Kind::Module,
        "component" => Kind::Component,
        other => return Err(format!("unknown kind '{other}'")),
    };
    // Read before confining, looked at only after: the runtime never opens the directory again.
    let bytes =
        std::fs::read(spec.dir.join(MODULE)).map_err(|e| format!("cannot read the module: {e}"))?;
    let env: Vec<(String, String)> = std::fs::read(spec.dir.join(ENV))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("cannot read the guest's environment")?;
    // Checked by the caller before it was handed in.
    let cached = spec
        .artifact
        .then(|| std::fs::read(spec.dir.join(ARTIFACT)).ok())
        .flatten();
    let scratch: Option<OwnedFd> = match spec.scratch {
        Some((size, inodes)) => Some(
            selfconfine::scratch_tmpfs(size, inodes)
                .map_err(|e| format!("cannot make the scratch /workspace: {e}"))?,
        ),
        None => None,
    };
    let mut preopens: Vec<Preopen> = spec
        .preopens
        .into_iter()
        .filter(|p| p.host.is_dir())
        .collect();
    if let Some(fd) = &idmapped {
        for p in preopens.iter_mut().filter(|p| p.guest == "/workspace") {
            p.host = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        }
    }
    if let Some(fd) = &scratch {
        preopens.insert(
            0,
            Preopen {
                host: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                guest: "/workspace".into(),
                writable: true,
            },
        );
    }
    let mut c = SelfConfinement {
        file_size: spec.file_size,
        nofile: NOFILE,
        data: spec.limits.memory.saturating_add(RUNTIME_MEMORY),
        // The guest's CPU is read from this thread's stat (see guest::thread_usage).
        read_only: vec!["/proc/thread-self".into()],
        ..SelfConfinement::default()
    };
    for p in &preopens {
        if p.writable {
            c.read_write.push(p.host.clone());
        } else {
            c.read_only.push(p.host.clone());
        }
    }
    c.keep_fds = [
        REPORT_FILE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|f| f.as_raw_fd()),
        Some(held_file.as_raw_fd()),
        Some(compiled_file.as_raw_fd()),
        scratch.as_ref().map(|f| f.as_raw_fd()),
        idmapped.as_ref().map(|f| f.as_raw_fd()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let held: Held = selfconfine::confine(&c)?;
    notes.extend(held.notes);
    let hr = HeldReport {
        landlock_abi: held.landlock_abi,
        seccomp: held.seccomp,
        rlimits: held.rlimits,
        scratch_namespaces: scratch.is_some(),
        host_uid: spec
            .run_as
            .map(|(u, _)| u)
            .unwrap_or_else(|| rustix::process::getuid().as_raw()),
        notes,
    };
    let json = serde_json::to_vec(&hr).map_err(|e| e.to_string())?;
    held_file
        .write_all(&json)
        .map_err(|e| format!("cannot report the confinement: {e}"))?;
    drop(held_file);

    let _watchdog = Watchdog::start(started + spec.limits.timeout);
    let engine = engine::new_engine().map_err(|e| e.to_string())?;
    let guest = Guest {
        argv: spec.argv,
        env,
        preopens,
        stdin: GuestStdin::Inherit,
        stdout: GuestOutput::Capture {
            limit: spec.output_limit,
            echo: spec.echo,
        },
        stderr: GuestOutput::Capture {
            limit: spec.output_limit,
            echo: spec.echo,
        },
        limits: spec.limits,
    };
    let ran = guest::run(&engine, kind, &bytes, cached, guest, started);
    let mut compiled = 0;
    if let Some(a) = &ran.new_artifact {
        let len = a.len() as u64;
        if spec.write_compiled > 0
            && len <= spec.write_compiled
            && compiled_file.write_all(a).is_ok()
        {
            compiled = len;
        }
    }
    let (disk_full, files_full) = scratch
        .as_ref()
        .map(selfconfine::scratch_full)
        .unwrap_or((false, false));
    Ok(report_once(&Report {
        end: ran.end,
        compiled,
        stdout: ran.stdout.into(),
        stderr: ran.stderr.into(),
        peak_memory: ran.peak_memory,
        cpu_user_ms: ran.cpu.user_ms,
        cpu_system_ms: ran.cpu.system_ms,
        disk_full,
        files_full,
    }))
}

/// A guest blocked in a host call (a read from a pipe that never ends) sees no epoch: past
/// its deadline (and a little more, for a guest about to notice by itself), the watchdog
/// reports the timeout and ends the runtime, instead of the caller's backstop [`GRACE`]
/// later.
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
                    let code = report_once(&empty_report(GuestEnd::Timeout));
                    std::process::exit(code);
                }
            });
        Watchdog {
            // Without a watchdog thread, the caller's backstop still holds.
            stop: spawned.ok().map(|_| tx),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
    }
}
