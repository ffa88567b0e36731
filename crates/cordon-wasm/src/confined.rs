//! A guest run by a confined runtime process: the supervisor (`cordon-wasm run`, started by
//! `cordon run` or the server's one-shot runner) forks the runtime, which confines itself — no
//! privileges, rlimits, Landlock, seccomp, its other fds closed, an empty environment — *before*
//! it looks at the module's bytes, and only then loads, compiles and runs the guest. No process
//! sandbox is built around it: a guest makes no syscall of its own, so namespaces, a new root
//! and a cgroup would guard a process whose only untrusted input is checked by wasmtime, and
//! cost more than the whole run (see the README's Benchmarks). The one namespace pair is
//! `cordon_linux::selfconfine::scratch_tmpfs`'s, for a `--disk`-capped scratch `/workspace`
//! when there is no `--workspace`.
//!
//! The supervisor's side ([`run`]) forks the runtime first — before it reads the cache's key,
//! so the runtime never holds it — then reads the module, looks its compiled code up in the
//! cache (checking its HMAC), hands spec, module and checked artifact down a pipe, stops the
//! runtime at the backstop deadline if it has not stopped itself, and turns what it wrote back
//! (memory files: report, what held, fresh compiled code) into the Outcome. Nothing the runtime
//! writes is trusted beyond its own run: the report is size-capped and parsed; a compiled
//! artifact is tagged only for the module hash the supervisor computed from the bytes it
//! handed in, so a compromised runtime can only spoil the cache entry of its own module.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_linux::selfconfine::{self, Held, SelfConfinement};
use cordon_policy::{Backend, CapturedText, Enforcement, LimitHit, Outcome, Profile, Usage};
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::engine::{self, Kind};
use crate::guest::{self, Guest, GuestEnd, GuestLimits, GuestOutput, GuestStdin, Preopen};
use crate::WasmError;

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

/// What the runtime is told (as JSON, through a pipe from the supervisor).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// `"module"` or `"component"`.
    pub kind: String,
    pub argv: Vec<String>,
    /// The guest's whole environment (never on a command line: `--env` values may be secrets).
    pub env: Vec<(String, String)>,
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
    /// Write a fresh compile's artifact to the compiled-code file if at most this large (0:
    /// skip).
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

/// What the runtime reports (as JSON, in its report file).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    end: GuestEnd,
    /// Bytes of a fresh artifact written to the compiled-code file (0: none).
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
    /// Where compiled code is kept (`None`: compile every time). Opened only once the runtime
    /// is forked, so that the runtime never holds the cache's key.
    pub cache_dir: Option<PathBuf>,
}

/// Runs the module in a confined runtime process and reports it as an [`Outcome`]. The
/// caller must be single-threaded (the runtime is a fork of it: see
/// `cordon_linux::selfconfine::fork_child`), and its environment holds nothing the runtime
/// may not see (the guest's is computed from the profile; `cordon` hands over only the
/// variables that locate the cache and scratch directories).
pub fn run(req: Request<'_>) -> Result<Outcome, WasmError> {
    let started = Instant::now();
    let profile = req.profile;
    let io = |what: &str, e: std::io::Error| WasmError::Io(format!("{what}: {e}"));
    // The runtime's stdio, then the runtime itself: forked before anything else is read.
    let null = |write: bool| {
        std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| io("/dev/null", e))
    };
    let mut feed = None;
    let stdin = match req.stdin {
        Stdin::Empty => Some(null(false)?),
        Stdin::Inherit => None,
        Stdin::File(p) => {
            Some(OwnedFd::from(File::open(&p).map_err(|e| {
                WasmError::Io(format!("--stdin {}: {e}", p.display()))
            })?))
        }
        Stdin::Bytes(b) => {
            let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| io("a pipe for stdin", e.into()))?;
            feed = Some((w, b));
            Some(r)
        }
    };
    // Without echo, nothing the runtime prints reaches the caller's streams (which may carry
    // the Outcome itself): what the guest wrote comes back in the report.
    let (out, err) = if req.echo {
        (None, None)
    } else {
        (Some(null(true)?), Some(null(true)?))
    };
    // What the runtime writes back: memory files it inherits (nothing on a disk, where the
    // filesystem's writeback of a rewritten file and its unlink cost more than the guest's run).
    let memfd = |name: &std::ffi::CStr| {
        rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
            .map(File::from)
            .map_err(|e| io("a memory file for the runtime's report", e.into()))
    };
    let mut back = RuntimeFiles {
        report: memfd(c"cordon-wasm-report")?,
        held: memfd(c"cordon-wasm-held")?,
        compiled: memfd(c"cordon-wasm-compiled")?,
    };
    let theirs = back
        .try_clone()
        .map_err(|e| io("a memory file for the runtime's report", e))?;
    let (spec_r, spec_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| io("a pipe for the spec", e.into()))?;
    let pid = selfconfine::fork_child(c"cordon-wasm-rt", [stdin, out, err], move || {
        runtime_main(spec_r, theirs)
    })
    .map_err(|e| io("cannot start the wasm runtime", e))?;
    let mut runtime = RuntimeChild { pid, reaped: false };

    let bytes = read_module(req.module)?;
    let kind = engine::detect(&bytes).ok_or_else(|| {
        WasmError::Invalid(format!(
            "{}: not a WebAssembly module or component (its header is neither)",
            req.module.display()
        ))
    })?;
    let cache = match req.cache_dir.as_deref().map(Cache::open) {
        Some(Ok(c)) => {
            let key = crate::cache::key(kind, &bytes);
            Some((c, key))
        }
        Some(Err(e)) => {
            eprintln!("cordon: {e}; compiling without a cache");
            None
        }
        None => None,
    };
    let artifact = cache.as_ref().and_then(|(c, k)| c.lookup(k));
    let (owner, store_compiled) = runtime_identity(profile);

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
    let spec = Spec {
        kind: kind.name().into(),
        argv: req.argv,
        env,
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
        write_compiled: if cache.is_some() && store_compiled {
            profile.limits.file_size.min(MAX_ARTIFACT)
        } else {
            0
        },
    };
    let spec_json = serde_json::to_vec(&spec).map_err(|e| WasmError::Io(e.to_string()))?;
    // Spec, module, checked artifact: each a little-endian length, then the bytes.
    let mut spec_w = File::from(spec_w);
    [
        &spec_json[..],
        &bytes[..],
        artifact.as_deref().unwrap_or_default(),
    ]
    .iter()
    .try_for_each(|part| {
        spec_w.write_all(&(part.len() as u64).to_le_bytes())?;
        spec_w.write_all(part)
    })
    .map_err(|e| io("handing the module to the wasm runtime", e))?;
    drop((spec_w, bytes, artifact));
    if let Some((w, b)) = feed {
        // A guest that stops reading is no reason to hang: the writer goes on its own.
        std::thread::spawn(move || {
            let _ = File::from(w).write_all(&b);
        });
    }
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let backstop = profile.limits.timeout + GRACE;
    let killer = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(backstop) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                // Still unreaped (the waiter has not said so), so still ours.
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            return true;
        }
        false
    });
    let status = runtime.wait();
    drop(tx);
    let killed = killer.join().unwrap_or(false);
    let wall_ms = started.elapsed().as_millis() as u64;

    let held = read_capped(&mut back.held, MAX_REPORT)
        .and_then(|b| serde_json::from_slice::<HeldReport>(&b).ok());
    let max = MAX_REPORT + 8 * profile.limits.output_limit.min(64 << 20);
    let report =
        read_capped(&mut back.report, max).and_then(|b| serde_json::from_slice::<Report>(&b).ok());
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
            if let Some(a) = read_capped(&mut back.compiled, MAX_ARTIFACT) {
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

/// The forked runtime: killed and reaped if the run ends before it is waited for (an error
/// while preparing its files, say), so that no runtime is left waiting for its spec.
struct RuntimeChild {
    pid: i32,
    reaped: bool,
}

impl RuntimeChild {
    fn wait(&mut self) -> Option<rustix::process::WaitStatus> {
        let pid = rustix::process::Pid::from_raw(self.pid)?;
        loop {
            match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                Err(rustix::io::Errno::INTR) => continue,
                r => {
                    self.reaped = true;
                    return r.ok().flatten().map(|(_, s)| s);
                }
            }
        }
    }
}

impl Drop for RuntimeChild {
    fn drop(&mut self) {
        if !self.reaped {
            if let Some(p) = rustix::process::Pid::from_raw(self.pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            let _ = self.wait();
        }
    }
}

/// The memory files the runtime writes back to the supervisor through: its report, what held
/// (written once, and closed, before the guest's bytes are looked at), and a fresh compile.
struct RuntimeFiles {
    report: File,
    held: File,
    compiled: File,
}

impl RuntimeFiles {
    fn try_clone(&self) -> std::io::Result<RuntimeFiles> {
        Ok(RuntimeFiles {
            report: self.report.try_clone()?,
            held: self.held.try_clone()?,
            compiled: self.compiled.try_clone()?,
        })
    }
}

/// The forked runtime's first steps: an empty environment, then what the supervisor hands
/// over once it has looked the cache up (the spec, the module, a checked artifact), then
/// [`inner_main`].
fn runtime_main(spec_r: OwnedFd, files: RuntimeFiles) -> i32 {
    for (k, _) in std::env::vars_os() {
        std::env::remove_var(k);
    }
    let mut from = File::from(spec_r);
    let mut part = |max: u64| -> Option<Vec<u8>> {
        let mut len = [0u8; 8];
        from.read_exact(&mut len).ok()?;
        let len = u64::from_le_bytes(len);
        if len > max {
            return None;
        }
        let mut data = Vec::new();
        (&mut from).take(len).read_to_end(&mut data).ok()?;
        (data.len() as u64 == len).then_some(data)
    };
    let (Some(spec), Some(module), Some(artifact)) =
        (part(64 << 20), part(MAX_ARTIFACT), part(MAX_ARTIFACT))
    else {
        // The supervisor gave up before the run (and kills us anyway).
        return cordon_policy::outcome::exit::CORDON_FAILED;
    };
    drop(from);
    match String::from_utf8(spec) {
        Ok(spec) => inner_main(
            &spec,
            module,
            (!artifact.is_empty()).then_some(artifact),
            files,
        ),
        Err(_) => {
            eprintln!("cordon: the wasm runtime got a bad spec");
            cordon_policy::outcome::exit::CORDON_FAILED
        }
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

/// Who the runtime runs as when cordon runs as root: never root itself. The owner of a `--workspace` that is not root's (so that it can write there, as
/// the process backend's sandbox does), else a uid of its own, 2000000000 + this process's
/// pid (as the process backend's `ROOT_MODE_UID_BASE`). In the first case that user's own
/// processes could tamper with the runtime before it confines itself, so compiled code is not
/// cached from such a run.
fn runtime_identity(profile: &Profile) -> (Option<(u32, u32)>, bool) {
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

/// What the runtime wrote to `f` (one of its [`RuntimeFiles`]), if it is at most `max` bytes.
fn read_capped(f: &mut File, max: u64) -> Option<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    // The runtime shared this file's offset and left it at the end.
    f.seek(SeekFrom::Start(0)).ok()?;
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

/// The runtime, given its spec: confines this process, runs the guest, writes the report, and exits
/// with the guest's exit code (or the CLI's code for how it ended otherwise).
fn inner_main(spec: &str, module: Vec<u8>, artifact: Option<Vec<u8>>, files: RuntimeFiles) -> i32 {
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
    // Every other directory the guest gets is opened now, with the caller's credentials, as
    // the process backend mounts its binds before it drops them: a path only those reach (a
    // persistent sandbox's workspace as `cordon serve` holds it open, `/proc/SERVER/fd/N`,
    // which neither the dropped uid nor, once confined, Landlock's ptrace rule lets this
    // process follow) still reaches the guest. What does not open stays a path, for
    // `confined_main` to drop if it is no directory.
    let mut spec = spec;
    let mut opened: Vec<OwnedFd> = Vec::new();
    for p in spec.preopens.iter_mut() {
        if let Some(fd) = idmapped.as_ref().filter(|_| p.guest == "/workspace") {
            p.host = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            continue;
        }
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if let Ok(fd) = rustix::fs::open(&p.host, flags, Mode::empty()) {
            p.host = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            opened.push(fd);
        }
    }
    if let Some((uid, gid)) = spec.run_as {
        if let Err(e) = selfconfine::drop_to(uid, gid) {
            eprintln!("cordon: the wasm runtime cannot drop root: {e}");
            return cordon_policy::outcome::exit::CORDON_FAILED;
        }
    }
    let RuntimeFiles {
        report,
        held,
        compiled,
    } = files;
    *REPORT_FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
    let handed = Handed { module, artifact };
    opened.extend(idmapped);
    match confined_main(spec, handed, held, compiled, opened, notes, started) {
        Ok(code) => code,
        Err(setup) => report_once(&empty_report(GuestEnd::Setup(setup))),
    }
}

/// What the supervisor handed over with the spec: read before confining, looked at only after.
struct Handed {
    module: Vec<u8>,
    /// Compiled code the supervisor checked against its key.
    artifact: Option<Vec<u8>>,
}

fn confined_main(
    spec: Spec,
    handed: Handed,
    mut held_file: File,
    mut compiled_file: File,
    opened: Vec<OwnedFd>,
    mut notes: Vec<String>,
    started: Instant,
) -> Result<i32, String> {
    let kind = match spec.kind.as_str() {
        "module" => Kind::Module,
        "component" => Kind::Component,
        other => return Err(format!("unknown kind '{other}'")),
    };
    let Handed {
        module: bytes,
        artifact: cached,
    } = handed;
    let env = spec.env;
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
    ]
    .into_iter()
    .flatten()
    .chain(opened.iter().map(|f| f.as_raw_fd()))
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
