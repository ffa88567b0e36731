//! Persistent sandboxes: a sandbox that stays up and runs many commands.
//!
//! The server (multi-threaded) never forks a sandbox itself: it spawns `cordon __sandbox`, a
//! single-threaded helper that is this sandbox's supervisor. The helper builds the sandbox
//! exactly as a one-shot run does (same profile, same layers), except that the init serves
//! exec requests. Commands' pipes are created inside the sandbox and passed, as fds, through
//! the helper to the server, which pumps them; the helper only routes small messages.
//!
//! Lifetime: the helper lives as long as the sandbox. When the server goes away (even by
//! SIGKILL) the helper sees EOF on its control socket, kills the sandbox and removes its
//! cgroup, so no sandbox outlives the server that owned it.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use cordon_policy::{Enforcement, Profile};
use serde::{Deserialize, Serialize};

use crate::channel::{Channel, ToSandbox, ToSupervisor};
use crate::error::EngineError;
use crate::sandbox::Stdio;
use crate::supervisor::{apply_confined, prepare, spawn_init};
use crate::sys;

/// The fd number on which the helper finds its control socket.
const CONTROL_FD: RawFd = 3;
/// How long a new sandbox may take to confine itself before its creation fails.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Server → helper.
#[derive(Debug, Serialize, Deserialize)]
enum ToHelper {
    Create {
        profile: Box<Profile>,
        env: BTreeMap<String, String>,
    },
    Exec {
        id: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    Signal {
        id: u64,
        signal: i32,
    },
    /// What command `id` has used so far (answered with `FromHelper::Usage`).
    Usage {
        id: u64,
    },
    Shutdown,
}

/// Helper → server.
#[derive(Debug, Serialize, Deserialize)]
enum FromHelper {
    Ready {
        enforcement: Box<Enforcement>,
        init_pid: i32,
        host_uid: u32,
        host_gid: u32,
    },
    Failed {
        message: String,
    },
    Sandbox(ToSupervisor),
    /// Command `id` ended (the init's report, with what its accounting domain counted).
    Exit {
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
        cpu_user_us: u64,
        cpu_system_us: u64,
        max_rss_kb: u64,
        usage: CommandUsage,
    },
    /// The answer to `ToHelper::Usage`; `None` for a command the helper does not know.
    Usage {
        id: u64,
        usage: Option<CommandUsage>,
    },
    Ended {
        reason: String,
    },
}

/// What one command of a persistent sandbox used and ran into, as its accounting domain
/// (its cgroup, or without one the init's samples) counted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandUsage {
    /// Peak memory of the command's processes together; 0 without a cgroup.
    pub peak_memory_bytes: u64,
    /// Most processes and threads of the command at once.
    pub peak_pids: u64,
    /// Processes of the command the OOM killer killed.
    pub oom_kills: u64,
    /// Forks or threads the process limit refused. Without a cgroup, the samples that
    /// found the sandbox at its limit (`RLIMIT_NPROC`, where every fork fails) while this
    /// command held the most tasks.
    pub pids_refused: u64,
    /// The command's CPU time passed the profile's `cpu_time`, and it was killed for it.
    pub cpu_time_exceeded: bool,
    /// A scratch filesystem (`/tmp`, the workspace tmpfs, `/dev/shm`) was seen out of space,
    /// or out of inodes, while the command ran.
    pub disk_full: bool,
    pub inodes_exhausted: bool,
}

/// The helper's view of one running command.
struct HelperCommand {
    cgroup: Option<crate::cgroup::Cgroup>,
    /// The init said it started (until then, an exec failure is its end).
    started: bool,
    /// Without a cgroup: the init's latest samples (peak pids, samples at the limit).
    sampled: (u64, u64),
    cpu_time_exceeded: bool,
    /// A scratch filesystem was seen full (blocks, inodes) while the command ran.
    disk_full: bool,
    inodes_exhausted: bool,
    /// A usage question waits for the init's next sample.
    asked: bool,
}

impl HelperCommand {
    fn usage(&self) -> CommandUsage {
        match &self.cgroup {
            Some(cg) => CommandUsage {
                peak_memory_bytes: cg.peak_memory().unwrap_or(0),
                // The sub-init is the command's cgroup's first member, not the command's.
                peak_pids: cg.peak_pids().saturating_sub(1),
                oom_kills: cg.oom_kills(),
                pids_refused: cg.pids_refused(),
                cpu_time_exceeded: self.cpu_time_exceeded,
                disk_full: self.disk_full,
                inodes_exhausted: self.inodes_exhausted,
            },
            None => CommandUsage {
                peak_pids: self.sampled.0,
                pids_refused: self.sampled.1,
                cpu_time_exceeded: self.cpu_time_exceeded,
                disk_full: self.disk_full,
                inodes_exhausted: self.inodes_exhausted,
                ..CommandUsage::default()
            },
        }
    }
}

/// Entry point of `cordon __sandbox`. Call before any thread is started.
pub fn helper_main() -> i32 {
    // SAFETY: the server starts us with the control socket on fd 3; nothing else owns it.
    let control = Channel::new(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) });
    let (profile, env) = match control.recv::<ToHelper>() {
        Ok(Some((ToHelper::Create { profile, env }, _))) => (profile, env),
        _ => return 2,
    };
    let failed = |control: &Channel, message: String| {
        let _ = control.send(&FromHelper::Failed { message });
        1
    };
    let mut prepared = match prepare(&profile, &[], None, &env, true) {
        Ok(p) => p,
        Err(e) => return failed(&control, e.to_string()),
    };
    let null = |w: bool| {
        std::fs::OpenOptions::new()
            .read(!w)
            .write(w)
            .open("/dev/null")
            .map(OwnedFd::from)
    };
    let stdio = match (null(false), null(true), null(true)) {
        (Ok(stdin), Ok(stdout), Ok(stderr)) => Stdio {
            stdin,
            stdout,
            stderr,
        },
        _ => return failed(&control, "cannot open /dev/null".into()),
    };
    let (init_pid, chan) = match spawn_init(&mut prepared, stdio) {
        Ok(r) => r,
        Err(e) => return failed(&control, e.to_string()),
    };
    let mut enforcement = prepared.enforcement();
    let (host_uid, host_gid) = (prepared.plan.host_uid, prepared.plan.host_gid);
    let cgroup = prepared.cgroup;
    let mut domains = Domains {
        init_pid,
        reaped: false,
        cgroup,
        commands: HashMap::new(),
        command_pids: u64::from(profile.limits.pids) + 1,
        cpu_time: profile.limits.cpu_time,
        scratch: Vec::new(),
    };

    // Setup: wait for the init's root and its confinement report.
    let mut root_fd: Option<OwnedFd> = None;
    let mut confined = false;
    // Bounded, and watching the server: a helper whose server is gone must not wait on.
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while !confined {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            domains.kill();
            return failed(
                &control,
                format!(
                    "the sandbox did not finish its setup within {}s",
                    SETUP_TIMEOUT.as_secs()
                ),
            );
        }
        let mut pfds = [
            libc::pollfd {
                fd: chan.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
            // Only hang-up and errors: the server sends nothing before Ready.
            libc::pollfd {
                fd: control.raw(),
                events: 0,
                revents: 0,
            },
        ];
        if sys::poll(&mut pfds, left.as_millis().min(1000) as i32).is_err() {
            continue;
        }
        if pfds[1].revents != 0 {
            domains.kill();
            return 1;
        }
        if pfds[0].revents == 0 {
            continue;
        }
        match chan.recv::<ToSupervisor>() {
            Ok(Some((ToSupervisor::RootFd, fds))) => root_fd = fds.into_iter().next(),
            Ok(Some((ToSupervisor::ProxyListener, fds))) => {
                let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
                let _ =
                    control.send_with_fds(&FromHelper::Sandbox(ToSupervisor::ProxyListener), &raw);
            }
            Ok(Some((msg @ ToSupervisor::Confined { .. }, fds))) => {
                if let ToSupervisor::Confined { watch, .. } = &msg {
                    domains.scratch = scratch_fds(watch, fds);
                }
                apply_confined(&mut enforcement, &msg);
                confined = true;
            }
            Ok(Some((ToSupervisor::SetupFailed { step, message }, _))) => {
                domains.kill();
                return failed(
                    &control,
                    format!("sandbox setup failed at {step}: {message}"),
                );
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                domains.kill();
                return failed(&control, "the sandbox died during setup".into());
            }
        }
    }
    let Some(root_fd) = root_fd else {
        domains.kill();
        return failed(&control, "the sandbox did not hand over its root".into());
    };
    if profile.require.contains(&cordon_policy::Layer::Landlock) && enforcement.landlock_abi == 0 {
        domains.kill();
        return failed(&control, "Landlock was required but is not enforced".into());
    }
    let ready = FromHelper::Ready {
        enforcement: Box::new(enforcement),
        init_pid,
        host_uid,
        host_gid,
    };
    if control
        .send_with_fds(&ready, &[root_fd.as_raw_fd()])
        .is_err()
    {
        domains.kill();
        return 1;
    }

    // Routing: requests down, events (with their fds) up, until either side goes away.
    let init_fd = sys::pidfd_open(init_pid).ok();
    let reason = loop {
        let mut pfds = vec![
            libc::pollfd {
                fd: control.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: chan.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if let Some(fd) = &init_fd {
            pfds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        if sys::poll(&mut pfds, domains.tick_ms()).is_err() {
            break "poll failed".to_string();
        }
        if init_fd.is_none() {
            if let Ok(Some(_)) = sys::wait4(init_pid, true) {
                domains.reaped = true;
                break "the sandbox's init exited".to_string();
            }
        }
        if pfds.get(2).is_some_and(|p| p.revents != 0) {
            break "the sandbox's init exited".to_string();
        }
        domains.tick(&chan);
        if pfds[0].revents != 0 {
            match control.recv::<ToHelper>() {
                Ok(Some((ToHelper::Exec { id, argv, env, cwd }, _))) => {
                    let (files, cgroup) = domains.open(id);
                    let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
                    let msg = ToSandbox::Exec {
                        id,
                        argv,
                        env,
                        cwd,
                        cgroup,
                    };
                    if chan.send_with_fds(&msg, &raw).is_err() {
                        break "the sandbox stopped answering".to_string();
                    }
                }
                Ok(Some((ToHelper::Signal { id, signal }, _))) => {
                    let _ = chan.send(&ToSandbox::Signal { id, signal });
                }
                Ok(Some((ToHelper::Usage { id }, _))) => {
                    if let Some(answer) = domains.ask(id, &chan) {
                        let _ = control.send(&answer);
                    }
                }
                Ok(Some((ToHelper::Shutdown, _))) => break "shut down".to_string(),
                Ok(Some((ToHelper::Create { .. }, _))) => {}
                // A message we cannot read is the server's bug, not a reason to kill the sandbox.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Ok(None) | Err(_) => break "the server went away".to_string(),
            }
        }
        if pfds[1].revents != 0 {
            match chan.recv::<ToSupervisor>() {
                Ok(Some((msg, fds))) => {
                    let up = domains.route(msg);
                    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
                    if up.iter().any(|m| control.send_with_fds(m, &raw).is_err()) {
                        break "the server went away".to_string();
                    }
                }
                Ok(None) | Err(_) => break "the sandbox's init exited".to_string(),
            }
        }
    };
    domains.kill();
    let _ = control.send(&FromHelper::Ended { reason });
    0
}

/// The helper's side of the sandbox's kill and accounting domains: the sandbox's cgroup, and
/// one child cgroup per running command where there is a cgroup.
struct Domains {
    init_pid: libc::pid_t,
    /// Once the init is reaped its pid may be anyone's: never signal it again.
    reaped: bool,
    cgroup: Option<crate::cgroup::Cgroup>,
    commands: HashMap<u64, HelperCommand>,
    /// A command's own process limit (its sub-init is the `+ 1`).
    command_pids: u64,
    cpu_time: Option<Duration>,
    /// The sandbox's scratch tmpfs (`/tmp`, a workspace tmpfs, `/dev/shm`), opened by the
    /// init: looked at while commands run, for whether one filled up.
    scratch: Vec<OwnedFd>,
}

/// The scratch filesystems among the descriptors the init handed over with `Confined`, each
/// checked to be a tmpfs (what the init says is not trusted).
fn scratch_fds(kinds: &[crate::channel::Watched], fds: Vec<OwnedFd>) -> Vec<OwnedFd> {
    kinds
        .iter()
        .zip(fds)
        .filter(|(kind, fd)| {
            **kind == crate::channel::Watched::Scratch
                && rustix::fs::fstatfs(fd).is_ok_and(|st| st.f_type == libc::TMPFS_MAGIC)
        })
        .map(|(_, fd)| fd)
        .collect()
}

/// Whether any of the scratch filesystems is out of blocks, and whether any is out of
/// inodes, right now.
fn scratch_full(scratch: &[OwnedFd]) -> (bool, bool) {
    let mut full = (false, false);
    for fd in scratch {
        if let Ok(st) = rustix::fs::fstatfs(fd) {
            full.0 |= st.f_blocks > 0 && st.f_bavail == 0;
            full.1 |= st.f_files > 0 && st.f_ffree == 0;
        }
    }
    full
}

impl Domains {
    /// Kills the sandbox: the init's death takes its pid namespace along; then the cgroups
    /// go, the commands' before the sandbox's.
    fn kill(&mut self) {
        if !std::mem::replace(&mut self.reaped, true) {
            let _ = sys::kill(self.init_pid, libc::SIGKILL);
            let _ = sys::wait4(self.init_pid, false);
        }
        for (_, mut c) in self.commands.drain() {
            if let Some(cg) = c.cgroup.as_mut() {
                cg.kill_all();
                cg.remove();
            }
        }
        if let Some(cg) = self.cgroup.as_mut() {
            cg.kill_all();
            cg.remove();
        }
    }

    /// A new command's domain: its cgroup's join files, and whether it has one. Without a
    /// cgroup for it (none on this host, or creating it failed) the command still runs; its
    /// usage then comes from the init's rusage and samples.
    fn open(&mut self, id: u64) -> (Vec<OwnedFd>, bool) {
        let cgroup = self.cgroup.as_ref().and_then(|parent| {
            let cg = parent
                .command(&format!("cmd-{id}"), self.command_pids)
                .ok()?;
            let files = cg.join_files().ok()?;
            Some((cg, files))
        });
        let (cgroup, files) = match cgroup {
            Some((cg, files)) => (Some(cg), files),
            None => (None, Vec::new()),
        };
        let has = cgroup.is_some();
        self.commands.insert(
            id,
            HelperCommand {
                cgroup,
                started: false,
                sampled: (0, 0),
                cpu_time_exceeded: false,
                disk_full: false,
                inodes_exhausted: false,
                asked: false,
            },
        );
        (files, has)
    }

    /// How long to wait for messages before the next `tick`: often while a command's cgroup
    /// needs watching (a CPU-time limit; pids peaks on kernels that keep none), else rarely.
    fn tick_ms(&self) -> i32 {
        let watch = self.commands.values().any(|c| {
            c.cgroup
                .as_ref()
                .is_some_and(|cg| self.cpu_time.is_some() || !cg.keeps_peak_pids())
        });
        if watch {
            20
        } else if !self.commands.is_empty() {
            // The scratch filesystems, while something may be filling them.
            100
        } else {
            1000
        }
    }

    /// Samples the commands' cgroups and the scratch filesystems; kills a command whose CPU
    /// time passed the limit.
    fn tick(&mut self, chan: &Channel) {
        if !self.commands.is_empty() {
            let (disk, inodes) = scratch_full(&self.scratch);
            for c in self.commands.values_mut() {
                c.disk_full |= disk;
                c.inodes_exhausted |= inodes;
            }
        }
        for (id, c) in self.commands.iter_mut() {
            let Some(cg) = c.cgroup.as_mut() else {
                continue;
            };
            cg.sample();
            let Some(limit) = self.cpu_time else {
                continue;
            };
            if c.cpu_time_exceeded {
                continue;
            }
            if let Some((u, s)) = cg.cpu_usage() {
                if Duration::from_nanos(u.saturating_add(s)) > limit {
                    c.cpu_time_exceeded = true;
                    let _ = chan.send(&ToSandbox::Signal {
                        id: *id,
                        signal: libc::SIGKILL,
                    });
                }
            }
        }
    }

    /// The answer to a usage question now, or `None` when it must wait for the init's sample
    /// (no cgroup: the init counts).
    fn ask(&mut self, id: u64, chan: &Channel) -> Option<FromHelper> {
        let Some(c) = self.commands.get_mut(&id) else {
            return Some(FromHelper::Usage { id, usage: None });
        };
        if c.cgroup.is_some() {
            return Some(FromHelper::Usage {
                id,
                usage: Some(c.usage()),
            });
        }
        if chan.send(&ToSandbox::Sample { id }).is_err() {
            return Some(FromHelper::Usage {
                id,
                usage: Some(c.usage()),
            });
        }
        c.asked = true;
        None
    }

    /// What the server hears of a message from the init.
    fn route(&mut self, msg: ToSupervisor) -> Vec<FromHelper> {
        match msg {
            ToSupervisor::Started { id, .. } => {
                if let Some(c) = self.commands.get_mut(&id) {
                    c.started = true;
                }
            }
            // Refused before it started: there will be no exit report.
            ToSupervisor::ExecFailed { id, .. }
                if self.commands.get(&id).is_some_and(|c| !c.started) =>
            {
                self.commands.remove(&id);
            }
            ToSupervisor::CommandUsage {
                id,
                peak_pids,
                pids_at_limit,
            } => {
                let Some(c) = self.commands.get_mut(&id) else {
                    return Vec::new();
                };
                c.sampled = (peak_pids, pids_at_limit);
                if std::mem::take(&mut c.asked) {
                    return vec![FromHelper::Usage {
                        id,
                        usage: Some(c.usage()),
                    }];
                }
                return Vec::new();
            }
            ToSupervisor::ExecExit {
                id,
                code,
                signal,
                cpu_user_us,
                cpu_system_us,
                max_rss_kb,
                peak_pids,
                pids_at_limit,
            } => {
                let Some(mut c) = self.commands.remove(&id) else {
                    return Vec::new();
                };
                c.sampled = (c.sampled.0.max(peak_pids), c.sampled.1.max(pids_at_limit));
                let (disk, inodes) = scratch_full(&self.scratch);
                c.disk_full |= disk;
                c.inodes_exhausted |= inodes;
                let usage = c.usage();
                if let Some(cg) = c.cgroup.as_mut() {
                    // The init ended the command's tree; anything still in its cgroup is
                    // ended here, before the cgroup goes.
                    cg.kill_all();
                    cg.remove();
                }
                let mut up = Vec::new();
                if c.asked {
                    up.push(FromHelper::Usage {
                        id,
                        usage: Some(usage.clone()),
                    });
                }
                up.push(FromHelper::Exit {
                    id,
                    code,
                    signal,
                    cpu_user_us,
                    cpu_system_us,
                    max_rss_kb,
                    usage,
                });
                return up;
            }
            _ => {}
        }
        vec![FromHelper::Sandbox(msg)]
    }
}

/// How a command of a persistent sandbox ended.
#[derive(Debug, Clone, Default)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_user_us: u64,
    pub cpu_system_us: u64,
    pub max_rss_kb: u64,
    /// The command could not be executed: (errno, what, whether the working directory was
    /// the problem).
    pub exec_error: Option<(i32, String, bool)>,
    /// The sandbox itself ended while the command ran.
    pub sandbox_ended: Option<String>,
    /// What the command's accounting domain counted.
    pub usage: CommandUsage,
}

/// A started command: write its stdin, read its stdout and stderr.
pub struct Started {
    pub id: u64,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// What to run in a persistent sandbox.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
}

type OnExit = Box<dyn FnOnce(ExitInfo) + Send>;

struct Pending {
    started: Option<mpsc::Sender<Result<Started, EngineError>>>,
    on_exit: Option<OnExit>,
    exec_error: Option<(i32, String, bool)>,
}

/// Called with the listening socket inside the sandbox when its profile allows egress.
pub type OnProxyListener = Box<dyn FnOnce(std::net::TcpListener) + Send>;

/// Callers waiting for a command's usage, by command id.
type UsageWaiters = HashMap<u64, Vec<mpsc::Sender<Option<CommandUsage>>>>;

struct Shared {
    pending: Mutex<HashMap<u64, Pending>>,
    usage: Mutex<UsageWaiters>,
    alive: AtomicBool,
    ended: Mutex<Option<String>>,
}

/// A live persistent sandbox, owned by the server.
pub struct Sandbox {
    control: Arc<Channel>,
    helper: Mutex<std::process::Child>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    pub enforcement: Enforcement,
    /// Host pid of the sandbox's init: `/proc/<init_pid>/root` is the sandbox's filesystem.
    pub init_pid: i32,
    pub host_uid: u32,
    pub host_gid: u32,
    /// O_PATH fd of the sandbox's root directory (in its own mount namespace).
    root: OwnedFd,
}

impl Sandbox {
    /// Starts a sandbox by running `helper_exe __sandbox`, and waits until it is ready.
    pub fn create(
        helper_exe: &Path,
        profile: &Profile,
        env: &BTreeMap<String, String>,
        on_proxy: Option<OnProxyListener>,
    ) -> Result<Sandbox, EngineError> {
        profile
            .validate()
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let (ours, theirs) =
            sys::seqpacket_pair().map_err(|e| EngineError::io("control socket", e))?;
        let theirs_raw = theirs.as_raw_fd();
        let mut cmd = std::process::Command::new(helper_exe);
        cmd.arg("__sandbox")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        // SAFETY: between fork and exec the closure only calls dup2, which is async-signal-safe;
        // dup2 also clears FD_CLOEXEC on fd 3, so exactly this socket is inherited.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(theirs_raw, CONTROL_FD) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| EngineError::io(format!("starting {}", helper_exe.display()), e))?;
        drop(theirs);
        let control = Channel::new(ours);
        let fail = |child: &mut std::process::Child, e: EngineError| {
            let _ = child.kill();
            let _ = child.wait();
            e
        };
        if let Err(e) = control.send(&ToHelper::Create {
            profile: Box::new(profile.clone()),
            env: env.clone(),
        }) {
            return Err(fail(
                &mut child,
                EngineError::io("talking to the sandbox helper", e),
            ));
        }
        let mut on_proxy = on_proxy;
        let (enforcement, init_pid, host_uid, host_gid, root) = loop {
            match control.recv::<FromHelper>() {
                Ok(Some((
                    FromHelper::Ready {
                        enforcement,
                        init_pid,
                        host_uid,
                        host_gid,
                    },
                    fds,
                ))) => {
                    let Some(root) = fds.into_iter().next() else {
                        return Err(fail(
                            &mut child,
                            EngineError::Setup {
                                step: "creating the sandbox".into(),
                                message: "no root directory was handed over".into(),
                            },
                        ));
                    };
                    break (*enforcement, init_pid, host_uid, host_gid, root);
                }
                Ok(Some((FromHelper::Sandbox(ToSupervisor::ProxyListener), fds))) => {
                    if let (Some(cb), Some(fd)) = (on_proxy.take(), fds.into_iter().next()) {
                        cb(std::net::TcpListener::from(fd));
                    }
                }
                Ok(Some((FromHelper::Failed { message }, _))) => {
                    return Err(fail(
                        &mut child,
                        EngineError::Setup {
                            step: "creating the sandbox".into(),
                            message,
                        },
                    ))
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    return Err(fail(
                        &mut child,
                        EngineError::Setup {
                            step: "creating the sandbox".into(),
                            message: "the sandbox helper exited".into(),
                        },
                    ))
                }
            }
        };
        let control = Arc::new(control);
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            usage: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            ended: Mutex::new(None),
        });
        let reader_control = control.clone();
        let reader_shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("cordon-sandbox-{init_pid}"))
            .spawn(move || read_events(&reader_control, &reader_shared))
            .map_err(|e| EngineError::io("starting the sandbox reader thread", e))?;
        Ok(Sandbox {
            control,
            helper: Mutex::new(child),
            shared,
            next_id: AtomicU64::new(1),
            enforcement,
            init_pid,
            host_uid,
            host_gid,
            root,
        })
    }

    /// A new fd for the sandbox's root directory (for [`crate::fsview::SandboxFs::from_root_fd`]).
    pub fn root_dir(&self) -> std::io::Result<OwnedFd> {
        self.root.try_clone()
    }

    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Why the sandbox ended, once it has.
    pub fn ended(&self) -> Option<String> {
        self.shared.ended.lock().ok().and_then(|g| g.clone())
    }

    /// Host pid of the helper that supervises this sandbox.
    pub fn helper_pid(&self) -> u32 {
        self.helper.lock().map(|c| c.id()).unwrap_or(0)
    }

    /// Starts a command. `on_exit` is called exactly once, from another thread, when it ends.
    pub fn exec(&self, spec: ExecSpec, on_exit: OnExit) -> Result<Started, EngineError> {
        if !self.is_alive() {
            return Err(EngineError::Invalid(format!(
                "the sandbox has ended: {}",
                self.ended().unwrap_or_default()
            )));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(
                id,
                Pending {
                    started: Some(tx),
                    on_exit: Some(on_exit),
                    exec_error: None,
                },
            );
        }
        let msg = ToHelper::Exec {
            id,
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
        };
        if let Err(e) = self.control.send(&msg) {
            self.forget(id);
            return Err(EngineError::io("sending the command to the sandbox", e));
        }
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(r) => r,
            Err(_) => {
                self.forget(id);
                Err(EngineError::Setup {
                    step: "starting the command".into(),
                    message: "the sandbox did not answer".into(),
                })
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.remove(&id);
        }
    }

    /// Signals command `id` and its process group; SIGKILL ends everything it started.
    pub fn signal(&self, id: u64, signal: i32) {
        let _ = self.control.send(&ToHelper::Signal { id, signal });
    }

    /// What running command `id` has used so far; `None` if it is not running (or the
    /// sandbox does not answer within a second).
    pub fn usage(&self, id: u64) -> Option<CommandUsage> {
        let (tx, rx) = mpsc::channel();
        if let Ok(mut w) = self.shared.usage.lock() {
            w.entry(id).or_default().push(tx);
        }
        if self.control.send(&ToHelper::Usage { id }).is_err() {
            return None;
        }
        rx.recv_timeout(Duration::from_secs(1)).ok().flatten()
    }

    /// Kills the sandbox and everything in it; waits for the helper to clean up.
    pub fn shutdown(&self) {
        let _ = self.control.send(&ToHelper::Shutdown);
        if let Ok(mut child) = self.helper.lock() {
            // The helper removes the cgroup itself; give it a moment, then insist.
            for _ in 0..200 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn read_events(control: &Channel, shared: &Shared) {
    let reason = loop {
        match control.recv::<FromHelper>() {
            Ok(Some((FromHelper::Sandbox(msg), fds))) => dispatch(shared, msg, fds),
            Ok(Some((
                FromHelper::Exit {
                    id,
                    code,
                    signal,
                    cpu_user_us,
                    cpu_system_us,
                    max_rss_kb,
                    usage,
                },
                _,
            ))) => {
                let Some(mut p) = shared.pending.lock().ok().and_then(|mut p| p.remove(&id)) else {
                    continue;
                };
                if let Some(cb) = p.on_exit.take() {
                    cb(ExitInfo {
                        code,
                        signal,
                        cpu_user_us,
                        cpu_system_us,
                        max_rss_kb,
                        exec_error: p.exec_error.take(),
                        sandbox_ended: None,
                        usage,
                    });
                }
            }
            Ok(Some((FromHelper::Usage { id, usage }, _))) => {
                let waiting = shared
                    .usage
                    .lock()
                    .ok()
                    .and_then(|mut w| w.remove(&id))
                    .unwrap_or_default();
                for tx in waiting {
                    let _ = tx.send(usage.clone());
                }
            }
            Ok(Some((FromHelper::Ended { reason }, _))) => break reason,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break "the sandbox helper exited".to_string(),
        }
    };
    shared.alive.store(false, Ordering::SeqCst);
    // Nobody will answer a usage question now: let the askers go.
    if let Ok(mut w) = shared.usage.lock() {
        w.clear();
    }
    if let Ok(mut e) = shared.ended.lock() {
        *e = Some(reason.clone());
    }
    let pending: Vec<Pending> = shared
        .pending
        .lock()
        .map(|mut p| p.drain().map(|(_, v)| v).collect())
        .unwrap_or_default();
    for p in pending {
        if let Some(tx) = p.started {
            let _ = tx.send(Err(EngineError::Invalid(format!(
                "the sandbox has ended: {reason}"
            ))));
        }
        if let Some(cb) = p.on_exit {
            cb(ExitInfo {
                signal: Some(libc::SIGKILL),
                sandbox_ended: Some(reason.clone()),
                exec_error: p.exec_error,
                ..ExitInfo::default()
            });
        }
    }
}

fn dispatch(shared: &Shared, msg: ToSupervisor, fds: Vec<OwnedFd>) {
    let Ok(mut pending) = shared.pending.lock() else {
        return;
    };
    match msg {
        ToSupervisor::Started { id, .. } => {
            let Some(p) = pending.get_mut(&id) else {
                return;
            };
            let mut it = fds.into_iter();
            let started = match (it.next(), it.next(), it.next()) {
                (Some(stdin), Some(stdout), Some(stderr)) => Ok(Started {
                    id,
                    stdin,
                    stdout,
                    stderr,
                }),
                _ => Err(EngineError::Setup {
                    step: "starting the command".into(),
                    message: "the sandbox sent no pipes".into(),
                }),
            };
            if let Some(tx) = p.started.take() {
                let _ = tx.send(started);
            }
        }
        ToSupervisor::ExecFailed {
            id,
            errno,
            path,
            cwd,
        } => {
            let Some(p) = pending.get_mut(&id) else {
                return;
            };
            let what: String = path.chars().take(4096).collect();
            match p.started.take() {
                // Failed before it could start: the caller hears it now.
                Some(tx) => {
                    let _ = tx.send(Err(EngineError::Setup {
                        step: "starting the command".into(),
                        message: if errno == libc::EAGAIN {
                            "cannot start another process: the sandbox reached its process limit (pids)".to_string()
                        } else {
                            format!("{what}: {}", std::io::Error::from_raw_os_error(errno))
                        },
                    }));
                    pending.remove(&id);
                }
                None => p.exec_error = Some((errno, what, cwd)),
            }
        }
        _ => {}
    }
}
