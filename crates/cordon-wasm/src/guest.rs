//! One guest run: its WASI context, its limits, and how it ended.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cordon_policy::{
    classify, CapturedText, EndFacts, Ending, ProcessEnd, Profile, Status, Stopped,
};
use serde::{Deserialize, Serialize};
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Linker, ResourceLimiter, Store, Trap, UpdateDeadline, WasmBacktrace};
use wasmtime_wasi::cli::{InputFile, OutputFile, StdinStream, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::engine::{self, chain, Kind, Program};
use crate::stdio::{Captured, Echo};

/// How often the engine's epoch advances, and so how often a running guest looks at its
/// clocks: a limit is noticed at most this late.
pub const TICK: Duration = Duration::from_millis(10);

/// The exit status `wasmtime run` gives a trap on Unix (as if the program had aborted), so
/// that scripts see a crash, not cordon's own 125.
pub const TRAP_EXIT: i32 = 134;
/// The binary cannot be run at all (invalid, or imports what the host does not provide):
/// the contract's "command not executable".
pub const INVALID_EXIT: i32 = cordon_policy::outcome::exit::NOT_EXECUTABLE;

/// A host directory the guest sees at `guest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

impl Preopen {
    /// A profile's directories as the guest sees them: `--workspace` read-write at
    /// `/workspace`, each bind where the process backend would mount it, with its mode.
    pub fn of_profile(profile: &cordon_policy::Profile) -> Vec<Preopen> {
        let workspace = profile.workspace.iter().map(|ws| Preopen {
            host: ws.clone(),
            guest: "/workspace".into(),
            writable: true,
        });
        let binds = profile.binds.iter().map(|b| Preopen {
            host: b.source.clone(),
            guest: b.dest.to_string_lossy().into_owned(),
            writable: b.writable,
        });
        workspace.chain(binds).collect()
    }
}

/// What the guest reads.
pub enum GuestStdin {
    Empty,
    Bytes(Vec<u8>),
    /// This process's own stdin.
    Inherit,
}

/// Where a guest stream goes.
#[derive(Debug, Clone, Copy)]
pub enum GuestOutput {
    /// Kept up to `limit` bytes (the rest drained), and echoed live when `echo`.
    Capture { limit: u64, echo: bool },
    /// Straight to this process's own stream, whoever reads it caps it (the supervisor of a
    /// process sandbox).
    Inherit,
}

/// The limits the runtime enforces on the guest itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestLimits {
    /// Linear memories and tables together, in bytes (a table element counts a pointer's
    /// worth, as wasmtime stores it).
    pub memory: u64,
    pub timeout: Duration,
    pub cpu_time: Option<Duration>,
}

impl GuestLimits {
    pub fn from_profile(p: &Profile) -> GuestLimits {
        GuestLimits {
            memory: p.limits.memory,
            timeout: p.limits.timeout,
            cpu_time: p.limits.cpu_time,
        }
    }
}

/// Everything one guest run gets.
pub struct Guest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub preopens: Vec<Preopen>,
    pub stdin: GuestStdin,
    pub stdout: GuestOutput,
    pub stderr: GuestOutput,
    pub limits: GuestLimits,
}

/// How a guest run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuestEnd {
    /// `proc_exit`, `wasi:cli/exit`, or a return from `_start`/`run` (0; 1 for a component's
    /// `run` returning an error).
    Exited(i32),
    Timeout,
    CpuTime,
    /// A memory or table growth past `--memory` was refused, and the guest trapped.
    Memory,
    /// Any other trap, with wasmtime's description (and the function it happened in).
    Trap(String),
    /// The binary could not be compiled or instantiated: invalid, truncated, not a WASI
    /// command, or importing what the host does not provide.
    Invalid(String),
    /// The runtime could not set the guest up (a preopen that cannot be opened, …).
    Setup(String),
}

impl GuestEnd {
    /// The Outcome's ending fields, from the one classifier every door uses. A trap, an
    /// invalid binary and a setup failure are `error` with their message and the exit code
    /// the command line uses for them (134, 126, 125).
    pub fn ending(&self, output_truncated: bool) -> Ending {
        let facts = EndFacts {
            output_truncated,
            ..EndFacts::default()
        };
        let with = |f: EndFacts| classify(&f);
        match self {
            GuestEnd::Exited(code) => with(EndFacts {
                end: Some(ProcessEnd::Exited(*code)),
                ..facts
            }),
            GuestEnd::Timeout => with(EndFacts {
                stopped: Some(Stopped::Timeout),
                ..facts
            }),
            GuestEnd::CpuTime => with(EndFacts {
                stopped: Some(Stopped::CpuTime),
                ..facts
            }),
            // As the process backend's OOM kill: status `oom`, signal 9, `limits_hit: memory`.
            GuestEnd::Memory => with(EndFacts {
                oom_kills: 1,
                ..facts
            }),
            GuestEnd::Trap(msg) if msg.starts_with("wasm trap") => {
                error_ending(facts, msg.clone(), TRAP_EXIT)
            }
            GuestEnd::Trap(msg) => error_ending(facts, format!("wasm trap: {msg}"), TRAP_EXIT),
            GuestEnd::Invalid(msg) => error_ending(facts, msg.clone(), INVALID_EXIT),
            GuestEnd::Setup(msg) => error_ending(
                facts,
                msg.clone(),
                cordon_policy::outcome::exit::CORDON_FAILED,
            ),
        }
    }
}

fn error_ending(facts: EndFacts, message: String, code: i32) -> Ending {
    // The classifier still decides limits_hit (output cut while the guest ran).
    let mut e = classify(&facts);
    e.status = Status::Error;
    e.exit_code = Some(code);
    e.signal = None;
    e.error = Some(message);
    e
}

/// CPU time of the thread that ran the guest (compile included).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub user_ms: u64,
    pub system_ms: u64,
}

/// What a run produced.
pub struct Ran {
    pub end: GuestEnd,
    /// Empty for streams that were not captured here.
    pub stdout: CapturedText,
    pub stderr: CapturedText,
    pub output_truncated: bool,
    /// Largest total of linear memories and tables the guest held.
    pub peak_memory: u64,
    pub cpu: Cpu,
    /// A freshly compiled artifact, for the cache (none when the cached one was used).
    pub new_artifact: Option<Vec<u8>>,
}

/// Why the runtime stopped the guest itself.
#[derive(Debug, thiserror::Error)]
enum Stop {
    #[error("the wall-clock limit was reached")]
    Timeout,
    #[error("the CPU-time limit was reached")]
    CpuTime,
    #[error("the memory limit ({limit} bytes) refused growing to {wanted} bytes")]
    Memory { limit: u64, wanted: u64 },
}

/// `--memory` over all the guest's memories and tables.
struct Budget {
    limit: u64,
    used: u64,
    peak: u64,
    hit: bool,
}

/// What wasmtime keeps per table element.
const TABLE_ELEMENT_BYTES: u64 = std::mem::size_of::<usize>() as u64;

impl Budget {
    fn grow(&mut self, more: u64) -> wasmtime::Result<bool> {
        let wanted = self.used.saturating_add(more);
        if wanted > self.limit {
            self.hit = true;
            // An error, not `Ok(false)`: the guest traps at once instead of seeing a failed
            // `memory.grow` (which C's malloc turns into NULL, and many programs into a
            // crash far from the cause).
            return Err(wasmtime::Error::new(Stop::Memory {
                limit: self.limit,
                wanted,
            }));
        }
        self.used = wanted;
        self.peak = self.peak.max(wanted);
        Ok(true)
    }
}

impl ResourceLimiter for Budget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            // Past the memory's own declared maximum: wasmtime refuses it; nothing to count.
            return Ok(false);
        }
        self.grow(desired.saturating_sub(current) as u64)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        let elements = desired.saturating_sub(current) as u64;
        self.grow(elements.saturating_mul(TABLE_ELEMENT_BYTES))
    }
}

struct ModuleState {
    wasi: WasiP1Ctx,
    budget: Budget,
}

struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
    budget: Budget,
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// Advances the engine's epoch every [`TICK`] until dropped.
struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(engine: &Engine) -> Result<Ticker, String> {
        let (tx, rx) = mpsc::channel::<()>();
        let engine = engine.clone();
        let thread = std::thread::Builder::new()
            .name("cordon-wasm-epoch".into())
            .stack_size(64 << 10)
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(TICK) {
                    engine.increment_epoch();
                }
            })
            .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
        Ok(Ticker {
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The calling thread's CPU clock.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// User and system CPU of the calling thread, from `/proc/thread-self/stat` (fields 14 and
/// 15, in clock ticks); zero where it cannot be read.
fn thread_usage() -> Cpu {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return Cpu::default();
    };
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Cpu::default();
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3.
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
    let hz = rustix::param::clock_ticks_per_second().max(1);
    match (ticks(14), ticks(15)) {
        (Some(u), Some(s)) => Cpu {
            user_ms: u * 1000 / hz,
            system_ms: s * 1000 / hz,
        },
        _ => Cpu::default(),
    }
}

fn sub(a: Cpu, b: Cpu) -> Cpu {
    Cpu {
        user_ms: a.user_ms.saturating_sub(b.user_ms),
        system_ms: a.system_ms.saturating_sub(b.system_ms),
    }
}

/// Turns the program's bytes into code: the cached artifact when there is one wasmtime
/// accepts, else a fresh compile (whose artifact is returned for the cache).
fn load(
    engine: &Engine,
    kind: Kind,
    bytes: &[u8],
    cached: Option<Vec<u8>>,
) -> Result<(Program, Option<Vec<u8>>), GuestEnd> {
    if let Some(p) = cached.and_then(|a| engine::deserialize_trusted(engine, kind, &a)) {
        return Ok((p, None));
    }
    let program = engine::compile(engine, kind, bytes).map_err(GuestEnd::Invalid)?;
    let artifact = engine::serialize(&program);
    Ok((program, artifact))
}

/// Compiles (or loads) and runs one guest on the calling thread, under its limits. `started`
/// is when the run began for the caller: the wall-clock limit counts from there.
pub fn run(
    engine: &Engine,
    kind: Kind,
    bytes: &[u8],
    cached: Option<Vec<u8>>,
    guest: Guest,
    started: Instant,
) -> Ran {
    let cpu_start = thread_cpu();
    let usage_start = thread_usage();
    let mut stdout_cap = None;
    let mut stderr_cap = None;
    let mut ran = Ran {
        end: GuestEnd::Setup(String::new()),
        stdout: CapturedText::default(),
        stderr: CapturedText::default(),
        output_truncated: false,
        peak_memory: 0,
        cpu: Cpu::default(),
        new_artifact: None,
    };
    ran.end = (|| {
        let (program, artifact) = load(engine, kind, bytes, cached)?;
        ran.new_artifact = artifact;
        let mut b = WasiCtxBuilder::new();
        b.args(&guest.argv)
            .envs(&guest.env)
            .allow_blocking_current_thread(true)
            // No network: preview 1 cannot open sockets, and a component's are refused.
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        match guest.stdin {
            GuestStdin::Empty => b.stdin(tokio::io::empty()),
            GuestStdin::Bytes(v) => b.stdin(MemoryInputPipe::new(v)),
            GuestStdin::Inherit => b.stdin(inherit_stdin().map_err(GuestEnd::Setup)?),
        };
        let out = output(guest.stdout, Echo::Stdout, &mut stdout_cap).map_err(GuestEnd::Setup)?;
        b.stdout(BoxedOut(out));
        let err = output(guest.stderr, Echo::Stderr, &mut stderr_cap).map_err(GuestEnd::Setup)?;
        b.stderr(BoxedOut(err));
        for p in &guest.preopens {
            let perms = if p.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            b.preopened_dir(&p.host, &p.guest, perms).map_err(|e| {
                GuestEnd::Setup(format!(
                    "cannot preopen {} for {}: {}",
                    p.host.display(),
                    p.guest,
                    chain(&e)
                ))
            })?;
        }
        let budget = Budget {
            limit: guest.limits.memory,
            used: 0,
            peak: 0,
            hit: false,
        };
        let _ticker = Ticker::start(engine).map_err(GuestEnd::Setup)?;
        let deadline = started + guest.limits.timeout;
        let cpu_limit = guest.limits.cpu_time;
        let check = move || -> wasmtime::Result<UpdateDeadline> {
            if Instant::now() >= deadline {
                return Err(wasmtime::Error::new(Stop::Timeout));
            }
            if cpu_limit.is_some_and(|l| thread_cpu().saturating_sub(cpu_start) >= l) {
                return Err(wasmtime::Error::new(Stop::CpuTime));
            }
            Ok(UpdateDeadline::Continue(1))
        };
        // Timers only: the signal driver would make a socketpair (tokio's self-pipe), which the
        // confined runtime's seccomp filter refuses, and WASI here needs no I/O driver.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| GuestEnd::Setup(format!("cannot start the async runtime: {e}")))?;
        let (end, peak) = match program {
            Program::Module(module) => {
                let mut store = Store::new(
                    engine,
                    ModuleState {
                        wasi: b.build_p1(),
                        budget,
                    },
                );
                store.limiter(|s| &mut s.budget);
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(move |_| check());
                let end = rt.block_on(run_module(engine, &module, &mut store));
                let b = &store.data().budget;
                (settle(end, b.hit), b.peak)
            }
            Program::Component(component) => {
                let mut store = Store::new(
                    engine,
                    ComponentState {
                        ctx: b.build(),
                        table: ResourceTable::new(),
                        budget,
                    },
                );
                store.limiter(|s| &mut s.budget);
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(move |_| check());
                let end = rt.block_on(run_component(engine, &component, &mut store));
                let b = &store.data().budget;
                (settle(end, b.hit), b.peak)
            }
        };
        ran.peak_memory = peak;
        Ok::<GuestEnd, GuestEnd>(end)
    })()
    .unwrap_or_else(|e| e);
    ran.cpu = sub(thread_usage(), usage_start);
    for (cap, text) in [(stdout_cap, &mut ran.stdout), (stderr_cap, &mut ran.stderr)] {
        if let Some(c) = cap {
            ran.output_truncated |= c.truncated();
            *text = c.text();
        }
    }
    ran
}

/// A memory refusal shows up as whatever error wasmtime wrapped it in; the budget knows.
fn settle(end: GuestEnd, memory_hit: bool) -> GuestEnd {
    match end {
        GuestEnd::Exited(_) => end,
        _ if memory_hit => GuestEnd::Memory,
        _ => end,
    }
}

/// A boxed stream as one `StdoutStream`.
struct BoxedOut(Box<dyn StdoutStream>);

impl wasmtime_wasi::cli::IsTerminal for BoxedOut {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for BoxedOut {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        self.0.async_stream()
    }

    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        self.0.p2_stream()
    }
}

fn output(
    how: GuestOutput,
    echo: Echo,
    keep: &mut Option<Captured>,
) -> Result<Box<dyn StdoutStream>, String> {
    match how {
        GuestOutput::Capture { limit, echo: live } => {
            let c = Captured::new(limit, if live { echo } else { Echo::None });
            *keep = Some(c.clone());
            Ok(Box::new(c))
        }
        GuestOutput::Inherit => {
            let fd = match echo {
                Echo::Stderr => std::io::stderr().as_fd().try_clone_to_owned(),
                _ => std::io::stdout().as_fd().try_clone_to_owned(),
            }
            .map_err(|e| format!("cannot duplicate the output descriptor: {e}"))?;
            Ok(Box::new(OutputFile::new(File::from(fd))))
        }
    }
}

fn inherit_stdin() -> Result<impl StdinStream, String> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("cannot duplicate stdin: {e}"))?;
    Ok(InputFile::new(File::from(fd)))
}

async fn run_module(
    engine: &Engine,
    module: &wasmtime::Module,
    store: &mut Store<ModuleState>,
) -> GuestEnd {
    let mut linker: Linker<ModuleState> = Linker::new(engine);
    if let Err(e) = wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s| &mut s.wasi) {
        return GuestEnd::Setup(format!("cannot link WASI: {}", chain(&e)));
    }
    for import in module.imports() {
        if linker.get_by_import(&mut *store, &import).is_none() {
            return GuestEnd::Invalid(format!(
                "the module imports `{}::{}`, which cordon does not provide (a WASI command may \
                 import only wasi_snapshot_preview1)",
                import.module(),
                import.name()
            ));
        }
    }
    let instance = match linker.instantiate_async(&mut *store, module).await {
        Ok(i) => i,
        Err(e) => return failed(e, "cannot instantiate the module", true),
    };
    let start = match instance.get_typed_func::<(), ()>(&mut *store, "_start") {
        Ok(f) => f,
        Err(_) => {
            return GuestEnd::Invalid(
                "the module exports no `_start` function: it is not a WASI command (a library \
                 or reactor module cannot be run)"
                    .into(),
            )
        }
    };
    match start.call_async(&mut *store, ()).await {
        Ok(()) => GuestEnd::Exited(0),
        Err(e) => failed(e, "the module failed", false),
    }
}

async fn run_component(
    engine: &Engine,
    component: &wasmtime::component::Component,
    store: &mut Store<ComponentState>,
) -> GuestEnd {
    let mut linker = wasmtime::component::Linker::<ComponentState>::new(engine);
    if let Err(e) = wasmtime_wasi::p2::add_to_linker_async(&mut linker) {
        return GuestEnd::Setup(format!("cannot link WASI: {}", chain(&e)));
    }
    let command = match wasmtime_wasi::p2::bindings::Command::instantiate_async(
        &mut *store,
        component,
        &linker,
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return failed(e, "cannot instantiate the component", true),
    };
    match command.wasi_cli_run().call_run(&mut *store).await {
        Ok(Ok(())) => GuestEnd::Exited(0),
        Ok(Err(())) => GuestEnd::Exited(1),
        Err(e) => failed(e, "the component failed", false),
    }
}

/// What an error out of instantiation or the guest's code means. Past the limits, exits and
/// traps, an error while instantiating is the binary's fault (an import the host does not
/// provide, no `wasi:cli/run` export): it cannot be run.
fn failed(e: wasmtime::Error, context: &str, instantiating: bool) -> GuestEnd {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return GuestEnd::Exited(exit.0);
    }
    if let Some(stop) = e.downcast_ref::<Stop>() {
        return match stop {
            Stop::Timeout => GuestEnd::Timeout,
            Stop::CpuTime => GuestEnd::CpuTime,
            Stop::Memory { .. } => GuestEnd::Memory,
        };
    }
    if let Some(trap) = e.downcast_ref::<Trap>() {
        let place = e
            .downcast_ref::<WasmBacktrace>()
            .and_then(|bt| bt.frames().first().and_then(|f| f.func_name()))
            .map(|name| format!(" (in {name})"))
            .unwrap_or_default();
        return GuestEnd::Trap(format!("{trap}{place}"));
    }
    let message = chain(&e);
    if instantiating {
        return GuestEnd::Invalid(format!("{context}: {message}"));
    }
    GuestEnd::Trap(format!("{context}: {message}"))
}
