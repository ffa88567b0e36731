//! The one-shot supervisor: starts a sandbox through the launcher, pumps its output under
//! byte caps, enforces time limits, kills the whole tree on every ending, and reports an
//! `Outcome`.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cordon_policy::{
    classify, EndFacts, Enforcement, ExecFailure, Layer, NetworkEvent, Outcome, ProcessEnd,
    Profile, Stopped, Usage,
};

use crate::cgroup::Cgroup;
use crate::channel::{Channel, ToSandbox, ToSupervisor, Watched};
use crate::error::EngineError;
use crate::init::Stdio;
use crate::launcher::{prepare, spawn_init};
use crate::output::{Capture, Echo};
use crate::setup_heard::{Heard, SetupHeard};
use crate::sys;
use crate::watch::{DiskWatch, Watch};

/// What the payload reads on stdin.
pub enum StdinSource {
    Empty,
    Bytes(Vec<u8>),
    File(PathBuf),
    /// cordon's own stdin.
    Inherit,
}

/// Whether output is only captured, or also echoed live to cordon's stdout/stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    Capture,
    Stream,
}

/// A running egress proxy serving the sandbox's listener; `finish` stops it.
pub trait Egress: Send {
    fn finish(self: Box<Self>) -> Vec<NetworkEvent>;
}

/// Starts an egress proxy on the listening socket created inside the sandbox.
pub type EgressFactory = Box<dyn FnOnce(std::net::TcpListener) -> Result<Box<dyn Egress>, String>>;

pub struct RunRequest {
    pub profile: Profile,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    /// Variables set on top of the profile's environment.
    pub env: BTreeMap<String, String>,
    pub stdin: StdinSource,
    pub output: OutputMode,
    pub egress: Option<EgressFactory>,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INTERRUPT_SIGNAL: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPT_SIGNAL.store(sig as u32, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM/SIGHUP to cordon end the sandbox cleanly instead of orphaning its cgroup.
fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe { sys::set_signal_handler(sig, on_signal) };
    }
}

/// If cordon was interrupted, the signal that did it.
pub fn interrupted_by() -> Option<i32> {
    INTERRUPTED
        .load(Ordering::SeqCst)
        .then(|| INTERRUPT_SIGNAL.load(Ordering::SeqCst) as i32)
}

/// Runs one sandbox to completion. The calling process must be single-threaded.
pub fn run(req: RunRequest) -> Result<Outcome, EngineError> {
    let profile = &req.profile;
    let mut prepared = prepare(profile, &req.argv, req.cwd.as_deref(), &req.env, false)?;
    if req.egress.is_some() {
        prepared.plan.report_network_off();
    }
    let io = |what: &str| {
        let what = what.to_string();
        move |e: std::io::Error| EngineError::io(what, e)
    };
    let (stdin_r, stdin_w) = sys::pipe().map_err(io("stdin pipe"))?;
    let (stdout_r, stdout_w) = sys::pipe().map_err(io("stdout pipe"))?;
    let (stderr_r, stderr_w) = sys::pipe().map_err(io("stderr pipe"))?;
    install_signal_handlers();
    let start = Instant::now();
    let (init, chan) = spawn_init(
        &mut prepared,
        Stdio {
            stdin: stdin_r,
            stdout: stdout_w,
            stderr: stderr_w,
        },
    )?;
    // A build step's writable layer is a host directory, not a capped tmpfs: watched
    // against --disk from outside, as a degraded run's scratch directory is.
    let upper = prepared.plan.image.as_ref().and_then(|i| i.upper.clone());
    let mut disk = prepared
        .run_dir
        .as_ref()
        .or(upper.as_ref())
        .and_then(|dir| {
            DiskWatch::open(dir, profile.limits.disk)
                .map_err(|e| {
                    prepared
                        .notes
                        .push(format!("--disk is not watched: the scratch directory: {e}"))
                })
                .ok()
        });
    let enforcement = prepared.enforcement();
    let mut sup = Supervision::new(
        req.output,
        profile.limits.output_limit,
        init,
        start,
        prepared.cgroup.take(),
    );
    if prepared.degraded() {
        sup.degraded = Some(prepared.plan.network);
    }
    if prepared.degraded() || upper.is_some() {
        sup.disk = disk.take().map(|w| (w, false));
    }
    let stdin_thread = feed_stdin(req.stdin, stdin_w);
    let mut outcome = sup.supervise(chan, stdout_r, stderr_r, profile, req.egress, enforcement);
    drop(stdin_thread);
    outcome.image = profile
        .root_image
        .as_ref()
        .map(|i| cordon_policy::ImageRef {
            reference: i.reference.clone(),
            digest: i.digest.clone(),
        });
    // Nothing of the sandbox runs any more (see `Supervision::kill`).
    prepared.cleanup();
    Ok(outcome)
}

/// Writes the payload's stdin from a thread, so a payload that never reads cannot block us.
fn feed_stdin(src: StdinSource, w: OwnedFd) -> Option<std::thread::JoinHandle<()>> {
    let mut file = std::fs::File::from(w);
    match src {
        StdinSource::Empty => None,
        StdinSource::Bytes(data) => Some(std::thread::spawn(move || {
            let _ = file.write_all(&data);
        })),
        StdinSource::File(path) => Some(std::thread::spawn(move || {
            if let Ok(mut f) = std::fs::File::open(path) {
                let _ = std::io::copy(&mut f, &mut file);
            }
        })),
        StdinSource::Inherit => Some(std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            let mut stdin = std::io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if file.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
        })),
    }
}

enum Ended {
    Timeout,
    CpuTime,
    Interrupted(i32),
    /// Setting up failed after the init was started (the reason is in `setup_error`).
    Setup,
    /// Without a tmpfs, the scratch directory grew past `--disk` (see `DiskWatch`): the
    /// payload is killed, and the Outcome says so in `limits_hit`.
    Disk,
}

/// How long the init has, once told to stop, to kill and reap everything and report. Past
/// that it is killed, and the CPU time of whatever it had not reaped goes uncounted.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How often the watch (scratch filesystems, the task count without a cgroup) looks.
const WATCH_EVERY: Duration = Duration::from_millis(10);

struct Supervision {
    stdout: Capture,
    stderr: Capture,
    init: libc::pid_t,
    init_exit: Option<(Instant, sys::Exit)>,
    start: Instant,
    cgroup: Option<Cgroup>,
    killed: Option<Ended>,
    /// When the init was told to stop (see `end`).
    stop_sent: Option<Instant>,
    /// The cgroup was swept after the init was reaped (see `kill`).
    swept: bool,
    watch: Watch,
    watched_at: Option<Instant>,
    /// The sandbox has no namespaces (`Some(has a network policy)`): no pid namespace ends
    /// the tree with its init, we (a subreaper) do.
    degraded: Option<bool>,
    /// No tmpfs: the run directory's usage against `--disk`, and whether it grew past it.
    disk: Option<(DiskWatch, bool)>,
    /// Learn mode: the thread answering the exec and file notifications (see `exec_learn`).
    exec_learn: Option<std::thread::JoinHandle<crate::exec_learn::Observed>>,
}

impl Supervision {
    fn new(
        mode: OutputMode,
        limit: u64,
        init: libc::pid_t,
        start: Instant,
        cgroup: Option<Cgroup>,
    ) -> Self {
        type Echo = Option<Box<dyn Write>>;
        let (out, err): (Echo, Echo) = match mode {
            OutputMode::Capture => (None, None),
            OutputMode::Stream => (
                Some(Box::new(std::io::stdout())),
                Some(Box::new(std::io::stderr())),
            ),
        };
        Supervision {
            stdout: Capture::new(limit, out),
            stderr: Capture::new(limit, err),
            init,
            init_exit: None,
            start,
            cgroup,
            killed: None,
            stop_sent: None,
            swept: false,
            watch: Watch::none(),
            watched_at: None,
            degraded: None,
            disk: None,
            exec_learn: None,
        }
    }

    /// Kills the whole tree at once: the init's death takes its pid namespace with it; the
    /// cgroup sweep catches anything in between. Once the init is reaped nothing can start in
    /// the sandbox any more, so one sweep after that is enough.
    fn kill(&mut self) {
        if self.init_exit.is_none() {
            let _ = sys::kill(self.init, libc::SIGKILL);
        } else if self.swept {
            return;
        }
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
        if self.degraded.is_some() {
            self.sweep_tree();
        }
        self.swept = self.init_exit.is_some();
    }

    /// Without a pid namespace, what the init left (it was killed, or died) was reparented to
    /// us, its subreaper: kill and reap until nothing is below us. Only once the init is gone:
    /// while it lives, it does this itself and counts their CPU.
    fn sweep_tree(&mut self) {
        if self.init_exit.is_none() {
            match sys::wait4(self.init, false) {
                Ok(Some((_, exit))) => self.init_exit = Some((Instant::now(), exit)),
                _ => return,
            }
        }
        sys::end_descendants();
    }

    /// Ends the run for `why`. The init is asked to do it (it kills and reaps everything, so
    /// the CPU time of every process is counted, then reports and exits); it is killed
    /// outright if it cannot be asked or does not finish within `STOP_GRACE`.
    fn end(&mut self, why: Ended, chan: Option<&Channel>) {
        if self.killed.is_none() {
            self.killed = Some(why);
        }
        if self.init_exit.is_some() {
            self.kill();
            return;
        }
        if self.stop_sent.is_some() {
            return;
        }
        match chan.map(|c| c.send(&ToSandbox::Stop)) {
            Some(Ok(())) => self.stop_sent = Some(Instant::now()),
            _ => self.kill(),
        }
    }

    /// Looks at what the watch covers, at most every `WATCH_EVERY` (or now, with `force`).
    fn look(&mut self, force: bool) {
        let now = Instant::now();
        if force
            || self
                .watched_at
                .is_none_or(|t| now.duration_since(t) >= WATCH_EVERY)
        {
            self.watched_at = Some(now);
            self.watch.sample();
            if let Some((w, over)) = &mut self.disk {
                *over |= w.grew_over(force);
            }
            if let Some(cg) = &mut self.cgroup {
                cg.sample();
            }
        }
    }

    fn supervise(
        &mut self,
        chan: Channel,
        stdout: OwnedFd,
        stderr: OwnedFd,
        profile: &Profile,
        egress_factory: Option<crate::EgressFactory>,
        mut enforcement: Enforcement,
    ) -> Outcome {
        let limits = &profile.limits;
        let deadline = self.start + limits.timeout;
        let _ = sys::set_nonblocking(stdout.as_raw_fd());
        let _ = sys::set_nonblocking(stderr.as_raw_fd());
        let mut out_fd = Some(stdout);
        let mut err_fd = Some(stderr);
        let mut chan = Some(chan);
        let mut heard = Reported::new(egress_factory);
        // Not zeroed: only what `read` fills is ever looked at, and a zeroed 64 KiB would
        // touch (fault in) sixteen pages on every start whatever the program prints.
        let mut buf = Box::<[u8]>::new_uninit_slice(64 * 1024);
        // Wakes the poll the moment the init exits (pidfds need Linux 5.3; else we tick).
        let init_fd = sys::pidfd_open(self.init).ok();

        loop {
            let now = Instant::now();
            if self.killed.is_none() {
                if now >= deadline {
                    self.end(Ended::Timeout, chan.as_ref());
                } else if let Some(sig) = interrupted_by() {
                    self.end(Ended::Interrupted(sig), chan.as_ref());
                }
            }
            if let (Some(limit), Some(cg)) = (limits.cpu_time, &self.cgroup) {
                if let Some((u, s)) = cg.cpu_usage() {
                    if self.killed.is_none() && Duration::from_nanos(u + s) > limit {
                        self.end(Ended::CpuTime, chan.as_ref());
                    }
                }
            }
            if self.init_exit.is_none() && self.stop_sent.is_some_and(|t| t.elapsed() > STOP_GRACE)
            {
                self.kill();
            }
            self.look(false);
            if self.killed.is_none() && self.disk.as_ref().is_some_and(|(_, over)| *over) {
                self.end(Ended::Disk, chan.as_ref());
            }
            if self.init_exit.is_none() {
                if let Ok(Some((_, exit))) = sys::wait4(self.init, true) {
                    self.init_exit = Some((Instant::now(), exit));
                    // The init's death kills the tree; make sure of it.
                    self.kill();
                }
            }
            if let Some((t, _)) = &self.init_exit {
                let streams_done = out_fd.is_none() && err_fd.is_none() && chan.is_none();
                if streams_done || t.elapsed() > Duration::from_secs(2) {
                    break;
                }
            }

            let mut pfds = Vec::with_capacity(3);
            for fd in [&out_fd, &err_fd].into_iter().flatten() {
                pfds.push(sys::pollfd(fd.as_raw_fd(), libc::POLLIN));
            }
            if let Some(c) = &chan {
                pfds.push(sys::pollfd(c.raw(), libc::POLLIN));
            }
            if let (Some(fd), None) = (&init_fd, &self.init_exit) {
                pfds.push(sys::pollfd(fd.as_raw_fd(), libc::POLLIN));
            }
            if let Some(l) = &heard.setup.listener {
                pfds.push(sys::pollfd(l.as_raw_fd(), libc::POLLIN));
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(20));
            let wait_ms = if self.killed.is_some() {
                20
            } else {
                wait.as_millis().max(1) as i32
            };
            let _ = sys::poll(&mut pfds, wait_ms);

            self.pump(&mut out_fd, &mut err_fd, &mut buf);
            let knocked = heard.setup.listener.as_ref().is_some_and(|l| {
                pfds.iter()
                    .any(|p| p.fd == l.as_raw_fd() && p.revents & libc::POLLIN != 0)
            });
            if knocked {
                if let Err(why) = heard.start_egress() {
                    self.end(why, chan.as_ref());
                }
            }

            let readable = chan.as_ref().is_some_and(|c| {
                pfds.iter().any(|p| {
                    p.fd == c.raw()
                        && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                })
            });
            let received = match chan.as_ref().filter(|_| readable) {
                Some(c) => c.recv::<ToSupervisor>(),
                None => continue,
            };
            match received {
                Ok(None) | Err(_) => chan = None,
                Ok(Some((msg, fds))) => {
                    if let Err(why) = self.hear(&mut heard, msg, fds, profile, &mut enforcement) {
                        self.end(why, chan.as_ref());
                    }
                }
            }
        }
        // Whatever is left must not outlive us.
        self.kill();
        if self.init_exit.is_none() {
            if let Ok(Some((_, exit))) = sys::wait4(self.init, false) {
                self.init_exit = Some((Instant::now(), exit));
            }
        }
        let network = heard.egress.map(|e| e.finish()).unwrap_or_default();
        let ended = Ending {
            setup_error: heard
                .setup
                .failure
                .map(|f| f.to_string())
                .or(heard.egress_error),
            exec_failed: heard.exec_failed,
            payload_end: heard.payload_end,
        };
        self.finish(
            enforcement,
            ended,
            network,
            heard.setup.confined,
            limits.pids,
        )
    }

    /// Reads what the payload wrote into its captures, bounded per round so that one flooding
    /// stream cannot starve the other; a stream that ended (or whose reader left) is closed.
    fn pump(
        &mut self,
        out_fd: &mut Option<OwnedFd>,
        err_fd: &mut Option<OwnedFd>,
        buf: &mut [std::mem::MaybeUninit<u8>],
    ) {
        for (slot, is_out) in [(out_fd, true), (err_fd, false)] {
            let Some(fd) = slot.as_ref() else { continue };
            for _ in 0..16 {
                match rustix::io::read(fd, &mut *buf) {
                    Ok((data, _)) if !data.is_empty() => {
                        let echo = if is_out {
                            self.stdout.push(data)
                        } else {
                            self.stderr.push(data)
                        };
                        if echo == Echo::Gone {
                            // Our reader left: closing the pipe passes that on to the writer.
                            *slot = None;
                            break;
                        }
                        continue;
                    }
                    // The end of the stream.
                    Ok(_) => *slot = None,
                    Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {}
                    Err(_) => *slot = None,
                }
                break;
            }
        }
    }

    /// One message of the sandbox side, taken where the handshake (`channel.rs`) has its
    /// place: the setup messages through [`SetupHeard`] (once each, before the payload runs);
    /// the payload's end once, after. Anything else, or again, is the sandbox's doing and
    /// ignored. `Err`: the run must end (a setup failure the init did not report itself).
    fn hear(
        &mut self,
        heard: &mut Reported,
        msg: ToSupervisor,
        fds: Vec<OwnedFd>,
        profile: &Profile,
        enforcement: &mut Enforcement,
    ) -> Result<(), Ended> {
        let require_landlock = profile.require.contains(&Layer::Landlock);
        let degraded = self.degraded;
        let msg = match heard
            .setup
            .take(msg, fds, enforcement, degraded, require_landlock)
        {
            Heard::Taken => {
                if let Some((mut kinds, mut fds)) = heard.setup.watched.take() {
                    // Only a run that asked to learn takes a listener; one sent unasked is
                    // closed (nothing of the sandbox's may make us wait on it).
                    if let Some(i) = kinds.iter().position(|k| *k == Watched::ExecNotify) {
                        kinds.remove(i);
                        if i < fds.len() {
                            let fd = fds.remove(i);
                            if profile.learn_exec && self.exec_learn.is_none() {
                                self.exec_learn = Some(crate::exec_learn::serve(fd));
                            }
                        }
                    }
                    self.watch = Watch::adopt(&kinds, fds);
                    if heard.setup.failure.is_some() {
                        return Err(Ended::Setup);
                    }
                }
                return Ok(());
            }
            Heard::Other(msg) => msg,
        };
        let confined = heard.setup.confined;
        match &msg {
            ToSupervisor::ExecFailed {
                errno, path, cwd, ..
            } if confined && heard.exec_failed.is_none() => {
                heard.exec_failed = Some((*errno, path.chars().take(4096).collect(), *cwd));
            }
            ToSupervisor::TasksAtEnd { tasks } if confined && heard.payload_end.is_none() => {
                match &mut self.cgroup {
                    // The cgroup's count has the init in it too.
                    Some(cg) => cg.saw_pids(tasks.saturating_add(1)),
                    None => self.watch.saw_tasks(*tasks),
                }
            }
            ToSupervisor::Exited { .. } | ToSupervisor::Signaled { .. }
                if confined && heard.payload_end.is_none() =>
            {
                heard.payload_end = Some(msg.clone());
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(
        &mut self,
        enforcement: Enforcement,
        ended: Ending,
        network: Vec<NetworkEvent>,
        confined: bool,
        pids_limit: u32,
    ) -> Outcome {
        let Ending {
            setup_error,
            exec_failed,
            payload_end,
        } = ended;
        // A last look, with everything in the sandbox gone: the scratch filesystems outlive it
        // as long as the watch holds them, so what a program left there still shows.
        self.look(true);
        let seen = self.watch.seen();
        let wall = self
            .init_exit
            .as_ref()
            .map(|(t, _)| t.duration_since(self.start))
            .unwrap_or_else(|| self.start.elapsed());
        let rusage = self.init_exit.as_ref().map(|(_, e)| e.rusage);
        // The init reaped every process of the sandbox before it exited (see
        // `init::one_shot::wait`), so its rusage covers them all, killed ones included.
        let (cpu_user_ms, cpu_system_ms) = match self.cgroup.as_ref().and_then(|c| c.cpu_usage()) {
            Some((u, s)) => (u / 1_000_000, s / 1_000_000),
            None => self
                .init_exit
                .as_ref()
                .map(|(_, e)| {
                    let (u, s) = e.cpu();
                    (u.as_millis() as u64, s.as_millis() as u64)
                })
                .unwrap_or((0, 0)),
        };
        let peak_memory_bytes = self
            .cgroup
            .as_ref()
            .and_then(|c| c.peak_memory())
            .or_else(|| rusage.map(|r| r.ru_maxrss as u64 * 1024))
            .unwrap_or(0);
        let ran = u64::from(payload_end.is_some());
        let peak_pids = match (&self.cgroup, seen.peak_tasks) {
            (Some(c), _) => c.peak_pids().saturating_sub(1),
            (None, Some(n)) => n.max(ran),
            (None, None) => ran,
        };
        // With a cgroup the kernel counts refused forks; without one (RLIMIT_NPROC) a refusal
        // leaves no trace outside the process that got EAGAIN, so the count reaching the limit
        // is what is reported.
        let pids_refused = match (&self.cgroup, seen.peak_tasks) {
            (Some(c), _) => c.pids_refused(),
            (None, Some(n)) => u64::from(n >= u64::from(pids_limit)),
            (None, None) => 0,
        };
        let facts = EndFacts {
            end: match &payload_end {
                Some(ToSupervisor::Exited { code }) => Some(ProcessEnd::Exited(*code)),
                Some(ToSupervisor::Signaled { signal }) => Some(ProcessEnd::Signaled(*signal)),
                _ => None,
            },
            stopped: self.killed.as_ref().and_then(|k| match k {
                Ended::Timeout => Some(Stopped::Timeout),
                Ended::CpuTime => Some(Stopped::CpuTime),
                Ended::Setup => Some(Stopped::Setup),
                Ended::Interrupted(sig) => Some(Stopped::Interrupted(*sig)),
                // The payload's own end (killed) stands, with the disk limit named.
                Ended::Disk => None,
            }),
            setup_error,
            exec_failure: exec_failed.map(|(errno, path, cwd)| ExecFailure { errno, path, cwd }),
            sandbox_ended: None,
            oom_kills: self.cgroup.as_ref().map_or(0, |c| c.oom_kills()),
            pids_refused,
            output_truncated: self.stdout.truncated() || self.stderr.truncated(),
            disk_full: seen.disk_full || self.disk.as_ref().is_some_and(|(_, over)| *over),
            inodes_exhausted: seen.inodes_exhausted,
        };
        let ending = classify(&facts);
        let mut enforcement = enforcement;
        if !confined {
            // Nothing ran confined; claim nothing.
            let keep = (
                enforcement.cgroup.clone(),
                enforcement.host_uid,
                std::mem::take(&mut enforcement.notes),
            );
            enforcement = Enforcement {
                cgroup: keep.0,
                host_uid: keep.1,
                notes: keep.2,
                ..Enforcement::default()
            };
        }
        let stdout = std::mem::replace(&mut self.stdout, Capture::new(0, None)).finish();
        let stderr = std::mem::replace(&mut self.stderr, Capture::new(0, None)).finish();
        if let Some(cg) = &mut self.cgroup {
            cg.remove();
        }
        let usage = Usage {
            wall_ms: wall.as_millis() as u64,
            cpu_user_ms,
            cpu_system_ms,
            peak_memory_bytes,
            peak_pids,
        };
        let mut outcome = Outcome::from_ending(ending, stdout, stderr, usage, enforcement, network);
        if let Some(t) = self.exec_learn.take() {
            // Every task of the sandbox is gone, so the listener hangs up; a thread still
            // answering after this is left to end on its own, its record lost.
            let deadline = Instant::now() + Duration::from_secs(2);
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                if let Ok(seen) = t.join() {
                    outcome.executed = seen.executed.into_iter().collect();
                    outcome.files = seen.files;
                }
            }
        }
        outcome
    }
}

/// What the sandbox side reported about the payload's end.
/// What the sandbox side has said so far (see [`Supervision::hear`]).
struct Reported {
    /// The setup messages (the proxy's listener, until its first connection starts the
    /// proxy; the confinement report).
    setup: SetupHeard,
    /// Starts the egress proxy on the listener the init hands over (taken when it starts).
    egress_factory: Option<crate::EgressFactory>,
    egress: Option<Box<dyn Egress>>,
    /// The egress proxy could not start.
    egress_error: Option<String>,
    exec_failed: Option<(i32, String, bool)>,
    payload_end: Option<ToSupervisor>,
}

impl Reported {
    fn new(egress_factory: Option<crate::EgressFactory>) -> Self {
        Reported {
            setup: SetupHeard::new(egress_factory.is_some()),
            egress_factory,
            egress: None,
            egress_error: None,
            exec_failed: None,
            payload_end: None,
        }
    }

    /// Starts the egress proxy on the kept listener (once).
    fn start_egress(&mut self) -> Result<(), Ended> {
        let (Some(fd), Some(factory)) = (self.setup.listener.take(), self.egress_factory.take())
        else {
            return Ok(());
        };
        match factory(std::net::TcpListener::from(fd)) {
            Ok(e) => {
                self.egress = Some(e);
                Ok(())
            }
            Err(e) => {
                self.egress_error = Some(format!("starting the egress proxy: {e}"));
                Err(Ended::Setup)
            }
        }
    }
}

struct Ending {
    setup_error: Option<String>,
    exec_failed: Option<(i32, String, bool)>,
    payload_end: Option<ToSupervisor>,
}
