//! The server's handle on a persistent sandbox (`Sandbox`): starts the helper process, sends
//! it requests, and turns its events into started commands and exit callbacks.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use cordon_policy::{EndFacts, Enforcement, ExecFailure, ProcessEnd, Profile, Stopped, Usage};

use super::{CommandUsage, FromHelper, ToHelper, CONTROL_FD};
use crate::channel::{Channel, ExecSpec, ToSupervisor};
use crate::error::EngineError;
use crate::sys;

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

impl ExitInfo {
    /// The facts `cordon_policy::classify` judges a command's end by: every front end that
    /// runs a persistent command (the service's exec, `cordon run -t`) reads them from here,
    /// so a command ends the same way whichever door started it.
    pub fn end_facts(&self, timed_out: bool, output_truncated: bool) -> EndFacts {
        EndFacts {
            end: match (self.code, self.signal) {
                (_, Some(sig)) => Some(ProcessEnd::Signaled(sig)),
                (Some(code), None) => Some(ProcessEnd::Exited(code)),
                (None, None) => None,
            },
            stopped: if timed_out {
                Some(Stopped::Timeout)
            } else if self.usage.cpu_time_exceeded {
                Some(Stopped::CpuTime)
            } else {
                None
            },
            exec_failure: self
                .exec_error
                .clone()
                .map(|(errno, path, cwd)| ExecFailure { errno, path, cwd }),
            sandbox_ended: self.sandbox_ended.clone(),
            oom_kills: self.usage.oom_kills,
            pids_refused: self.usage.pids_refused,
            output_truncated,
            disk_full: self.usage.disk_full,
            inodes_exhausted: self.usage.inodes_exhausted,
            ..EndFacts::default()
        }
    }

    /// The command's usage as an Outcome reports it, `wall` being what its caller timed.
    pub fn usage(&self, wall: Duration) -> Usage {
        Usage {
            wall_ms: wall.as_millis() as u64,
            cpu_user_ms: self.cpu_user_us / 1000,
            cpu_system_ms: self.cpu_system_us / 1000,
            // The command's cgroup counts all of its processes together; without one, the
            // largest single process is what is known.
            peak_memory_bytes: match self.usage.peak_memory_bytes {
                0 => self.max_rss_kb * 1024,
                n => n,
            },
            peak_pids: self.usage.peak_pids,
        }
    }
}

/// A started command: write its stdin, read its stdout and stderr.
pub struct Started {
    pub id: u64,
    /// Its process id in the sandbox's pid namespace (what `kill` and `ps` there name).
    pub pid: i32,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

type OnExit = Box<dyn FnOnce(ExitInfo) + Send>;

struct Pending {
    started: Option<mpsc::Sender<Result<Started, EngineError>>>,
    on_exit: Option<OnExit>,
    exec_error: Option<(i32, String, bool)>,
}

/// Sockets asked of the init at once (at most what one message carries), and how few left
/// in the pool make the server ask for more.
const SOCKETS_BATCH: u8 = 8;
const SOCKETS_LOW: usize = 2;

/// Sockets of the sandbox's network namespace, made ahead (see [`Sandbox::connect_port`]).
#[derive(Default)]
struct SocketPool {
    fds: Vec<OwnedFd>,
    /// A request for more is under way.
    asked: bool,
    /// The init refuses to make them (EPERM: no network namespace of its own).
    refused: Option<i32>,
}

/// Called with the listening socket inside the sandbox when its profile allows egress.
pub type OnProxyListener = Box<dyn FnOnce(std::net::TcpListener) + Send>;

/// What a learning sandbox's helper recorded so far.
#[derive(Debug, Clone, Default)]
pub struct LearnedSoFar {
    /// Programs executed (sandbox paths, a script's interpreter included).
    pub executed: Vec<PathBuf>,
    /// File needs beyond the sandbox (host paths), the first program to have each.
    pub files: Vec<cordon_policy::outcome::FileAccess>,
}

/// Callers waiting for a command's usage, by command id.
type UsageWaiters = HashMap<u64, Vec<mpsc::Sender<Option<CommandUsage>>>>;

struct Shared {
    pending: Mutex<HashMap<u64, Pending>>,
    /// Unconnected sockets of the sandbox's network namespace, made ahead by its init.
    sockets: Mutex<SocketPool>,
    /// Told when sockets come (or the sandbox ends).
    sockets_came: std::sync::Condvar,
    usage: Mutex<UsageWaiters>,
    /// Callers waiting for the programs executed and the files needed (learn mode).
    executed: Mutex<Vec<mpsc::Sender<LearnedSoFar>>>,
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
    /// With an image: O_PATH fd of the directory holding its writable layer (`upper/`).
    writable: Option<OwnedFd>,
    /// Set while the sandbox is paused.
    frozen: Mutex<Option<crate::freeze::Frozen>>,
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
            cmd.pre_exec(move || sys::dup2(theirs_raw, CONTROL_FD));
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
            learn: profile.learn_exec,
        }) {
            return Err(fail(
                &mut child,
                EngineError::io("talking to the sandbox helper", e),
            ));
        }
        let mut on_proxy = on_proxy;
        let (enforcement, init_pid, host_uid, host_gid, root, writable) = loop {
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
                    let mut fds = fds.into_iter();
                    let Some(root) = fds.next() else {
                        return Err(fail(
                            &mut child,
                            EngineError::Setup {
                                step: "creating the sandbox".into(),
                                message: "no root directory was handed over".into(),
                                errno: None,
                            },
                        ));
                    };
                    break (*enforcement, init_pid, host_uid, host_gid, root, fds.next());
                }
                Ok(Some((FromHelper::Sandbox(ToSupervisor::ProxyListener), fds))) => {
                    if let (Some(cb), Some(fd)) = (on_proxy.take(), fds.into_iter().next()) {
                        cb(std::net::TcpListener::from(fd));
                    }
                }
                Ok(Some((FromHelper::Failed { message, errno }, _))) => {
                    return Err(fail(
                        &mut child,
                        EngineError::Setup {
                            step: "creating the sandbox".into(),
                            message,
                            errno,
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
                            errno: None,
                        },
                    ))
                }
            }
        };
        let control = Arc::new(control);
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            sockets: Mutex::new(SocketPool::default()),
            sockets_came: std::sync::Condvar::new(),
            usage: Mutex::new(HashMap::new()),
            executed: Mutex::new(Vec::new()),
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
            writable,
            frozen: Mutex::new(None),
        })
    }

    /// A new fd for the sandbox's root directory (for [`crate::fsview::SandboxFs::from_root_fd`]).
    pub fn root_dir(&self) -> std::io::Result<OwnedFd> {
        self.root.try_clone()
    }

    /// The overlayfs upper directory of a sandbox made from an image — what it changed in the
    /// image's root (whiteouts as overlayfs writes them: 0/0 character devices and
    /// `user.overlay.opaque`) — opened for reading; `None` for a sandbox without an image.
    /// Opened beneath the directory the init handed over, following no symlink and staying
    /// on its filesystem; what it holds is the sandbox's and hostile (see
    /// `cordon_image::commit`). Read it with the sandbox paused for a consistent view.
    pub fn writable_layer(&self) -> Option<std::io::Result<OwnedFd>> {
        let dir = self.writable.as_ref()?;
        Some(
            rustix::fs::openat2(
                dir,
                "upper",
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
                rustix::fs::ResolveFlags::BENEATH
                    | rustix::fs::ResolveFlags::NO_SYMLINKS
                    | rustix::fs::ResolveFlags::NO_XDEV,
            )
            .map_err(std::io::Error::from),
        )
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
        let msg = ToHelper::Exec { id, spec };
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
                    errno: None,
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

    /// Learn mode (`Profile::learn_exec`): the programs the sandbox's commands executed so
    /// far, each with a `#!` script's interpreter (sandbox paths); `None` if the sandbox does
    /// not answer within a second (it ended).
    pub fn executed(&self) -> Option<Vec<PathBuf>> {
        self.learned().map(|l| l.executed)
    }

    /// Learn mode: the programs executed (as [`Sandbox::executed`]) and the host files and
    /// directories the commands asked for beyond the sandbox (see `exec_learn`).
    pub fn learned(&self) -> Option<LearnedSoFar> {
        let (tx, rx) = mpsc::channel();
        if let Ok(mut w) = self.shared.executed.lock() {
            w.push(tx);
        }
        if self.control.send(&ToHelper::Executed).is_err() {
            return None;
        }
        rx.recv_timeout(Duration::from_secs(1)).ok()
    }

    /// A TCP socket connecting to `127.0.0.1:port` inside the sandbox's network namespace.
    /// The socket was made there by the sandbox's init (a socket's namespace is the one it
    /// was made in), ahead of time, a few at once: no thread of the server ever enters the
    /// namespace, the server needs no privilege over it, and a connection costs no round trip
    /// to the sandbox. The socket is non-blocking and its connect may still be under way: wait
    /// for it to become writable and read `SO_ERROR`. Err(errno): the kernel's refusal
    /// (ECONNREFUSED: nothing listens; EPERM: the sandbox has no network namespace of its
    /// own), EHOSTUNREACH for a paused or ended sandbox, ETIMEDOUT when it does not answer.
    pub fn connect_port(&self, port: u16, wait: Duration) -> Result<OwnedFd, i32> {
        self.connect_port_within(port, Some(wait))
    }

    /// [`Sandbox::connect_port`] without waiting: `Err(EWOULDBLOCK)` when no socket is at hand
    /// yet (more are asked for), so an async caller only goes to a blocking thread then.
    pub fn try_connect_port(&self, port: u16) -> Result<OwnedFd, i32> {
        self.connect_port_within(port, None)
    }

    fn connect_port_within(&self, port: u16, wait: Option<Duration>) -> Result<OwnedFd, i32> {
        if !self.is_alive() || self.paused().is_some() {
            return Err(libc::EHOSTUNREACH);
        }
        let deadline = std::time::Instant::now() + wait.unwrap_or_default();
        let mut pool = self.shared.sockets.lock().map_err(|_| libc::EIO)?;
        let fd = loop {
            if let Some(e) = pool.refused {
                return Err(e);
            }
            if pool.fds.len() <= SOCKETS_LOW && !pool.asked {
                let id = self.next_id.fetch_add(1, Ordering::SeqCst);
                let ask = ToHelper::Sockets {
                    id,
                    count: SOCKETS_BATCH,
                };
                if self.control.send(&ask).is_err() {
                    return Err(libc::EHOSTUNREACH);
                }
                pool.asked = true;
            }
            if let Some(fd) = pool.fds.pop() {
                break fd;
            }
            if wait.is_none() {
                return Err(libc::EWOULDBLOCK);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || !self.is_alive() {
                // Whoever asks next asks again.
                pool.asked = false;
                return Err(libc::ETIMEDOUT);
            }
            pool = self
                .shared
                .sockets_came
                .wait_timeout(pool, left.min(Duration::from_millis(200)))
                .map_err(|_| libc::EIO)?
                .0;
        };
        drop(pool);
        let to = rustix::net::SocketAddrV4::new([127, 0, 0, 1].into(), port);
        match rustix::net::connect(&fd, &to) {
            Ok(()) | Err(rustix::io::Errno::INPROGRESS) => Ok(fd),
            Err(e) => Err(e.raw_os_error()),
        }
    }

    /// Freezes every process of the sandbox (see [`crate::freeze`]); `name` is unique to it.
    /// Pausing a paused sandbox changes nothing.
    pub fn pause(&self, name: &str) -> Result<crate::freeze::FreezeMethod, EngineError> {
        if !self.is_alive() {
            return Err(EngineError::Invalid("the sandbox has ended".into()));
        }
        let mut f = self
            .frozen
            .lock()
            .map_err(|_| EngineError::Invalid("pause state poisoned".into()))?;
        if let Some(fr) = f.as_ref() {
            return Ok(fr.method);
        }
        let fr = crate::freeze::freeze(self.init_pid, name)
            .map_err(|e| EngineError::io("pausing the sandbox", e))?;
        let m = fr.method;
        *f = Some(fr);
        Ok(m)
    }

    /// Lets a paused sandbox run again; true if it was paused.
    pub fn resume(&self) -> bool {
        let fr = self.frozen.lock().ok().and_then(|mut f| f.take());
        match fr {
            Some(fr) => {
                fr.thaw();
                true
            }
            None => false,
        }
    }

    /// How the sandbox is paused, if it is.
    pub fn paused(&self) -> Option<crate::freeze::FreezeMethod> {
        self.frozen
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|f| f.method))
    }

    /// Kills the sandbox and everything in it; waits for the helper to clean up.
    pub fn shutdown(&self) {
        // A frozen process does not even die of SIGKILL until thawed.
        self.resume();
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
            Ok(Some((FromHelper::Sandbox(ToSupervisor::Sockets { errno, .. }), fds))) => {
                if let Ok(mut pool) = shared.sockets.lock() {
                    pool.asked = false;
                    if errno != 0 {
                        pool.refused = Some(errno);
                    }
                    // What the init attached is the sandbox's word: sockets only.
                    pool.fds.extend(fds.into_iter().filter(|fd| {
                        rustix::fs::fstat(fd).is_ok_and(|st| {
                            rustix::fs::FileType::from_raw_mode(st.st_mode).is_socket()
                        })
                    }));
                }
                shared.sockets_came.notify_all();
            }
            Ok(Some((FromHelper::Sandbox(msg), fds))) => dispatch(shared, msg, fds),
            Ok(Some((FromHelper::Exit { id, end, usage }, _))) => {
                let Some(mut p) = shared.pending.lock().ok().and_then(|mut p| p.remove(&id)) else {
                    continue;
                };
                if let Some(cb) = p.on_exit.take() {
                    cb(ExitInfo {
                        code: end.code,
                        signal: end.signal,
                        cpu_user_us: end.cpu_user_us,
                        cpu_system_us: end.cpu_system_us,
                        max_rss_kb: end.max_rss_kb,
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
            Ok(Some((FromHelper::Executed { paths, files }, _))) => {
                let waiting = shared
                    .executed
                    .lock()
                    .map(|mut w| std::mem::take(&mut *w))
                    .unwrap_or_default();
                for tx in waiting {
                    let _ = tx.send(LearnedSoFar {
                        executed: paths.clone(),
                        files: files.clone(),
                    });
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
    if let Ok(mut w) = shared.executed.lock() {
        w.clear();
    }
    if let Ok(mut e) = shared.ended.lock() {
        *e = Some(reason.clone());
    }
    // Nobody will make sockets now: drop those made, and let the waiters go.
    if let Ok(mut pool) = shared.sockets.lock() {
        pool.fds.clear();
    }
    shared.sockets_came.notify_all();
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
        ToSupervisor::Started { id, pid } => {
            let Some(p) = pending.get_mut(&id) else {
                return;
            };
            let mut it = fds.into_iter();
            let started = match (it.next(), it.next(), it.next()) {
                (Some(stdin), Some(stdout), Some(stderr)) => Ok(Started {
                    id,
                    pid,
                    stdin,
                    stdout,
                    stderr,
                }),
                _ => Err(EngineError::Setup {
                    step: "starting the command".into(),
                    message: "the sandbox sent no pipes".into(),
                    errno: None,
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
                            "cannot start another process: the kernel refused the fork (EAGAIN) for 300 ms; \
                             the sandbox is at its process limit (pids), or the \
                             host is out of processes".to_string()
                        } else {
                            format!("{what}: {}", std::io::Error::from_raw_os_error(errno))
                        },
                        errno: Some(errno),
                    }));
                    pending.remove(&id);
                }
                None => p.exec_error = Some((errno, what, cwd)),
            }
        }
        _ => {}
    }
}
