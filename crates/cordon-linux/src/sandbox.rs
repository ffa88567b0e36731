//! The sandbox side: the init (and, from it, the payload), a linear sequence of setup steps.
//! Nothing here returns to the caller: every path ends in `exec` or `_exit`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::channel::{Channel, ToSandbox, ToSupervisor, Watched};
use crate::plan::{Plan, INNER_ID, PROXY_PORT};
use crate::{caps_drop, landlock_rules, mounts, proctree, seccomp, sys};

/// Exit code of the init when setup fails (the supervisor reads messages, this is a fallback).
const EXIT_SETUP_FAILED: i32 = 125;

pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

fn fail(ch: &Channel, step: &str, message: impl std::fmt::Display) -> ! {
    let _ = ch.send(&ToSupervisor::SetupFailed {
        step: step.to_string(),
        message: message.to_string(),
    });
    sys::exit_now(EXIT_SETUP_FAILED)
}

/// The init's first steps, right after the supervisor cloned it into fresh user, mount, pid,
/// network, IPC and UTS namespaces (the cgroup namespace comes later: it must be rooted at the
/// cgroup the init joins on go). Takes its stdio, waits for the supervisor to write its id
/// maps, takes on the sandbox identity, then goes on as PID 1.
pub fn init_entry(plan: &Plan, ch: Channel, stdio: Stdio) -> ! {
    // 1. stdio.
    for (fd, target) in [(&stdio.stdin, 0), (&stdio.stdout, 1), (&stdio.stderr, 2)] {
        if let Err(e) = sys::dup2(fd.as_raw_fd(), target) {
            fail(&ch, "stdio", e);
        }
    }
    // Whatever the supervisor had open (its ends of our pipes, fds cordon inherited) must not
    // reach the sandbox: an open pipe end would also keep the payload from seeing EOF.
    std::mem::forget(stdio);
    let keep: Vec<RawFd> = std::iter::once(ch.raw())
        .chain(plan.workspace_tree)
        .collect();
    if let Err(e) = sys::close_fds_except(&keep) {
        fail(&ch, "closing inherited fds", e);
    }
    // 2. Wait for the maps. A supervisor that died meanwhile shows as the channel's end.
    match ch.recv::<ToSandbox>() {
        Ok(Some((ToSandbox::Mapped, _))) => {}
        _ => sys::exit_now(EXIT_SETUP_FAILED),
    }
    // Whatever runs in the sandbox is the OOM killer's first choice (descendants inherit it).
    // Written now: once our ids change or we turn non-dumpable, /proc/self belongs to root.
    let _ = sys::write_file(Path::new("/proc/self/oom_score_adj"), "1000");
    // 3. Identity. Run by host root, we are still host root's uid and gid (with all
    // capabilities, but only in our own user namespace): become the one mapped id, so that
    // nothing from here on, mounts included, acts as host root. (The supervisor dropped its
    // supplementary groups before the clone; setgroups is denied in here for good.) Run by
    // an ordinary user, our ids are already the mapped ones.
    if plan.drop_root {
        if let Err(e) = sys::setresgid(INNER_ID).and_then(|_| sys::setresuid(INNER_ID)) {
            fail(&ch, "taking on the sandbox identity", e);
        }
    }
    // 4. Die with the supervisor (armed after the id change, which clears it). Our parent is
    // outside our pid namespace, so `getppid` says 0 either way: whether the supervisor is
    // still there shows on the channel instead.
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail(&ch, "set parent-death signal", e);
    }
    if ch.poll_now(0) & libc::POLLHUP != 0 {
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    // From here on nothing in the sandbox may read our memory (cordon's environment is in
    // it) or reach our fds through /proc/<pid>/.
    if let Err(e) = sys::set_dumpable(false) {
        fail(&ch, "set non-dumpable", e);
    }
    init_main(plan, ch)
}

/// PID 1 of the sandbox: builds the root, confines itself, spawns the payload, reaps.
fn init_main(plan: &Plan, ch: Channel) -> ! {
    if let Err(e) = mounts::build_root(plan) {
        fail(&ch, &e.step, e.error);
    }
    if let Err(e) = sys::sethostname(&plan.hostname) {
        fail(&ch, "sethostname", e);
    }
    if let Err(e) = sys::loopback_up() {
        fail(&ch, "bringing up loopback", e);
    }
    // The supervisor creates the cgroup while we built the root. Nothing runs on the sandbox's
    // behalf before it says go: then we join the cgroup (still our only thread, no child yet,
    // so everything the sandbox ever runs is born inside) and root a cgroup namespace there.
    let in_cgroup = match ch.recv::<ToSandbox>() {
        Ok(Some((ToSandbox::Go { cgroup }, files))) => {
            if cgroup && files.is_empty() {
                fail(&ch, "joining the cgroup", "no cgroup files came with go");
            }
            if let Err(e) = crate::cgroup::join(&files) {
                fail(&ch, "joining the cgroup", e);
            }
            // These carry cordon's authority over the cgroup: gone before anything else runs.
            drop(files);
            cgroup
        }
        _ => sys::exit_now(EXIT_SETUP_FAILED),
    };
    if let Err(e) = sys::unshare(libc::CLONE_NEWCGROUP) {
        fail(&ch, "creating the cgroup namespace", e);
    }
    if plan.persistent {
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open("/")
        {
            Ok(root) => {
                if let Err(e) = ch.send_with_fds(&ToSupervisor::RootFd, &[root.as_raw_fd()]) {
                    fail(&ch, "handing the root to the supervisor", e);
                }
            }
            Err(e) => fail(&ch, "opening the new root", e),
        }
    }
    if plan.network {
        match std::net::TcpListener::bind(("127.0.0.1", PROXY_PORT)) {
            Ok(l) => {
                if let Err(e) = ch.send_with_fds(&ToSupervisor::ProxyListener, &[l.as_raw_fd()]) {
                    fail(&ch, "handing the proxy socket to the supervisor", e);
                }
            }
            Err(e) => fail(&ch, "proxy listener", e),
        }
    }

    // Opened while nothing restricts us yet; close-on-exec, and closed once handed over.
    let (watch, watch_fds) = open_watched(plan, in_cgroup);
    let mut notes = Vec::new();
    if let Err(e) = apply_rlimits(plan, !in_cgroup) {
        fail(&ch, "rlimits", e);
    }
    if let Err(e) = sys::cloexec_from(3) {
        fail(&ch, "closing inherited fds", e);
    }
    if let Err(e) = caps_drop::drop_all() {
        fail(&ch, "dropping capabilities", e);
    }
    if let Err(e) = sys::set_no_new_privs() {
        fail(&ch, "no_new_privs", e);
    }
    let (landlock_abi, landlock_partial) = if plan.kernel_landlock_abi > 0 {
        match landlock_rules::apply(&plan.landlock, plan.kernel_landlock_abi) {
            Ok(a) => (a.abi, a.partial),
            Err(e) => fail(&ch, "landlock", e),
        }
    } else {
        notes.push("Landlock is not available on this kernel".to_string());
        (0, false)
    };
    if let Err(e) = seccomp::install() {
        fail(&ch, "seccomp", e);
    }
    let raw: Vec<RawFd> = watch_fds.iter().map(|f| f.as_raw_fd()).collect();
    let _ = ch.send_with_fds(
        &ToSupervisor::Confined {
            landlock_abi,
            landlock_partial,
            seccomp: true,
            rlimits: true,
            notes,
            watch,
        },
        &raw,
    );
    drop(watch_fds);

    if plan.persistent {
        serve_loop(plan, ch, in_cgroup);
    }
    let payload = start_payload(plan, &ch);
    one_shot_wait(&ch, payload)
}

/// The descriptors the supervisor watches the run through (see `Watched`): each scratch tmpfs
/// and, where no cgroup counts processes, the sandbox's /proc. One that cannot be opened is
/// left out: the supervisor then knows less, and nothing else changes.
fn open_watched(plan: &Plan, in_cgroup: bool) -> (Vec<Watched>, Vec<OwnedFd>) {
    let mut kinds = Vec::new();
    let mut fds = Vec::new();
    let mut scratch = vec!["/tmp", "/dev/shm", cordon_policy::profile::HOME];
    if plan.workspace.is_none() {
        scratch.push("/workspace");
    }
    let open = |path: &str, flags: libc::c_int| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags | libc::O_DIRECTORY)
            .open(path)
            .map(OwnedFd::from)
    };
    for path in scratch {
        if let Ok(fd) = open(path, libc::O_PATH) {
            kinds.push(Watched::Scratch);
            fds.push(fd);
        }
    }
    if !in_cgroup {
        if let Ok(fd) = open("/proc", 0) {
            kinds.push(Watched::Proc);
            fds.push(fd);
        }
    }
    (kinds, fds)
}

/// The message that reports how the payload ended.
fn end_message(exit: &sys::Exit) -> ToSupervisor {
    if libc::WIFSIGNALED(exit.status) {
        ToSupervisor::Signaled {
            signal: libc::WTERMSIG(exit.status),
        }
    } else {
        ToSupervisor::Exited {
            code: libc::WEXITSTATUS(exit.status),
        }
    }
}

/// One-shot: reaps orphans until the payload ends or the supervisor says stop; then ends
/// everything else in the sandbox itself, reaps it, reports the payload's end and exits.
///
/// Ending the rest here rather than leaving it to the kernel (which kills a pid namespace's
/// processes when its init exits) is what gets their CPU time counted: a process is counted
/// in its reaper's rusage, and the supervisor reads ours — the kernel's kill at our exit
/// leaves them reaped by no one.
fn one_shot_wait(ch: &Channel, payload: libc::pid_t) -> ! {
    let mut end: Option<ToSupervisor> = None;
    // Made after the payload is spawned, so the payload never starts with SIGCHLD blocked; an
    // exit before it is found by the first reaping pass.
    let sigchld = sys::signalfd_sigchld().ok();
    let reap = |end: &mut Option<ToSupervisor>| loop {
        match sys::wait4(-1, true) {
            Ok(Some((pid, exit))) => {
                if pid == payload && end.is_none() {
                    *end = Some(end_message(&exit));
                }
            }
            Ok(None) => return true,
            // ECHILD: nothing left to wait for.
            Err(_) => return false,
        }
    };
    loop {
        reap(&mut end);
        if end.is_some() {
            break;
        }
        let mut pfds = [
            libc::pollfd {
                fd: ch.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigchld.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a signalfd, look at the children every 10 ms.
        let timeout = if sigchld.is_some() { -1 } else { 10 };
        if sys::poll(&mut pfds, timeout).is_err() {
            continue;
        }
        if let Some(fd) = &sigchld {
            if pfds[1].revents != 0 {
                sys::drain_signalfd(fd);
            }
        }
        if pfds[0].revents != 0 {
            match ch.recv::<ToSandbox>() {
                Ok(Some((ToSandbox::Stop, _))) => break,
                Ok(Some(_)) => {}
                // The supervisor is gone (and our parent-death signal on its way).
                _ => sys::exit_now(EXIT_SETUP_FAILED),
            }
        }
    }
    // Everything else goes now. A process forking at this very moment is caught by the next
    // round: kill(-1) again whenever a child is reaped, until none is left.
    loop {
        let _ = sys::kill_all_others(libc::SIGKILL);
        if !reap(&mut end) {
            break;
        }
        let mut pfds = [libc::pollfd {
            fd: sigchld.as_ref().map_or(-1, |f| f.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        }];
        let _ = sys::poll(&mut pfds, 10);
        if let Some(fd) = &sigchld {
            sys::drain_signalfd(fd);
        }
    }
    if let Some(msg) = end {
        let _ = ch.send(&msg);
    }
    sys::exit_now(0)
}

/// `fallback`: there is no cgroup, so per-process limits stand in for memory and pids.
fn apply_rlimits(plan: &Plan, fallback: bool) -> std::io::Result<()> {
    let l = &plan.limits;
    sys::setrlimit(libc::RLIMIT_NOFILE, l.nofile, l.nofile)?;
    sys::setrlimit(libc::RLIMIT_FSIZE, l.file_size, l.file_size)?;
    sys::setrlimit(libc::RLIMIT_CORE, 0, 0)?;
    // A persistent sandbox's init lives as long as the sandbox, and its CPU is its own, not a
    // command's: each command's sub-init sets the limit for the command instead.
    if !plan.persistent {
        apply_cpu_rlimit(plan)?;
    }
    if fallback {
        // Without a cgroup these per-process limits are the best the host allows.
        sys::setrlimit(libc::RLIMIT_NPROC, nproc_limit(plan), nproc_limit(plan))?;
        sys::setrlimit(libc::RLIMIT_DATA, l.memory, l.memory)?;
    }
    Ok(())
}

fn apply_cpu_rlimit(plan: &Plan) -> std::io::Result<()> {
    if let Some(cpu) = plan.limits.cpu_time {
        let secs = cpu.as_secs().max(1);
        // SIGXCPU at the soft limit, SIGKILL a second later if it is caught.
        sys::setrlimit(libc::RLIMIT_CPU, secs, secs + 1)?;
    }
    Ok(())
}

/// `RLIMIT_NPROC` without a cgroup. The count is of the sandbox's one user, so it includes
/// the init (and, in a persistent sandbox, the running command's sub-init): the payload gets
/// `pids`, as a cgroup would give it (see `supervisor::prepare`).
fn nproc_limit(plan: &Plan) -> u64 {
    u64::from(plan.limits.pids) + 1 + u64::from(plan.persistent)
}

/// Starts the payload: a session of its own, SIGPIPE at its default, in `plan.cwd`, the first
/// PATH candidate that exists (as `exec_command`, which a persistent sandbox forks for). It
/// is spawned rather than forked (see `sys::spawn`); a failure is reported as a forked child
/// would have: `ExecFailed`, then the exit code the child would have ended with.
fn start_payload(plan: &Plan, ch: &Channel) -> libc::pid_t {
    let failed = |errno: i32, path: String, cwd: bool, code: i32| -> ! {
        let _ = ch.send(&ToSupervisor::ExecFailed {
            id: 0,
            errno,
            path,
            cwd,
        });
        let _ = ch.send(&ToSupervisor::Exited { code });
        sys::exit_now(0)
    };
    // The child inherits our working directory; nothing of ours depends on it any more.
    if let Err(e) = std::env::set_current_dir(&plan.cwd) {
        failed(
            e.raw_os_error().unwrap_or(libc::ENOENT),
            plan.cwd.display().to_string(),
            true,
            EXIT_SETUP_FAILED,
        );
    }
    let Some(first) = plan.argv.first() else {
        fail(ch, "starting the command", "no command")
    };
    // Each spawn that fails costs a process (and a pid): look for the file before starting
    // one, so that the payload is the sandbox's pid 2 wherever in PATH it is found.
    match search_path(plan, first, |c| {
        sys::exists(c)?;
        sys::spawn(c, &plan.argv, &plan.env, &[libc::SIGPIPE], true)
    }) {
        Ok(pid) => pid,
        Err((errno, path)) => failed(errno, path, false, not_started_code(errno)),
    }
}

/// The exit code of a command that could not be started, as a shell's: 127 not found, 126
/// found but not executable.
fn not_started_code(errno: i32) -> i32 {
    if errno == libc::ENOENT {
        127
    } else {
        126
    }
}

/// Tries `start` on each place the program `first` names could be, like execvp: itself if
/// it has a slash, else each directory of the sandbox's PATH in turn. A candidate that does
/// not exist moves on to the next; any other error ends the search (a permission error wins
/// over a not-found one). Gives the errno and the path it concerns.
fn search_path<T>(
    plan: &Plan,
    first: &CString,
    mut start: impl FnMut(&CString) -> std::io::Result<T>,
) -> Result<T, (i32, String)> {
    let prog = first.as_bytes();
    let candidates: Vec<CString> = if prog.contains(&b'/') {
        vec![first.clone()]
    } else {
        plan.path
            .split(':')
            .filter(|d| !d.is_empty())
            .filter_map(|d| {
                let mut p = Path::new(d)
                    .join(std::ffi::OsStr::from_bytes(prog))
                    .into_os_string()
                    .into_vec();
                p.retain(|b| *b != 0);
                CString::new(p).ok()
            })
            .collect()
    };
    for c in &candidates {
        match start(c) {
            Ok(v) => return Ok(v),
            Err(e) => {
                let code = e.raw_os_error().unwrap_or(libc::ENOENT);
                if code != libc::ENOENT && code != libc::ENOTDIR {
                    return Err((code, c.to_string_lossy().into_owned()));
                }
            }
        }
    }
    Err((libc::ENOENT, String::from_utf8_lossy(prog).into_owned()))
}

/// `gate`: a pipe whose other end the parent closes once it has reported the command as
/// started; a failure is reported only after that, so the supervisor never hears of a
/// command's failure before it hears of the command.
fn exec_command(
    plan: &Plan,
    ch: &Channel,
    id: u64,
    argv: &[CString],
    env: &[CString],
    cwd: &Path,
    gate: Option<OwnedFd>,
) -> ! {
    let wait_gate = || {
        if let Some(g) = &gate {
            let _ = sys::read_byte(g.as_raw_fd());
        }
    };
    let _ = sys::setsid();
    // Start the command as a host shell would: Rust's runtime (ours) ignores SIGPIPE, and an
    // ignored signal stays ignored across exec — `yes | head -1` would complain of a broken
    // pipe instead of ending quietly.
    let _ = sys::default_signal(libc::SIGPIPE);
    if let Err(e) = std::env::set_current_dir(cwd) {
        wait_gate();
        let _ = ch.send(&ToSupervisor::ExecFailed {
            id,
            errno: e.raw_os_error().unwrap_or(libc::ENOENT),
            path: cwd.display().to_string(),
            cwd: true,
        });
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    let Some(first) = argv.first() else {
        sys::exit_now(EXIT_SETUP_FAILED)
    };
    // execve returns only when it failed.
    let Err((errno, tried)) = search_path(plan, first, |c| {
        Err::<Infallible, _>(sys::execve(c, argv, env))
    });
    wait_gate();
    let _ = ch.send(&ToSupervisor::ExecFailed {
        id,
        errno,
        path: tried,
        cwd: false,
    });
    sys::exit_now(not_started_code(errno))
}

/// Persistent sandbox: serve exec and signal requests until the supervisor goes away.
/// `in_cgroup`: the sandbox has a cgroup, and the supervisor gives each command one of its
/// own; without, the init samples `/proc` for what a cgroup would have counted.
fn serve_loop(plan: &Plan, ch: Channel, in_cgroup: bool) -> ! {
    // Child exits arrive on a signalfd, so one poll covers requests and exits.
    let sigchld = match sys::signalfd_sigchld() {
        Ok(fd) => fd,
        Err(e) => fail(&ch, "signalfd", e),
    };
    let base_env: Vec<(Vec<u8>, Vec<u8>)> = plan
        .env
        .iter()
        .filter_map(|kv| {
            let b = kv.as_bytes();
            let eq = b.iter().position(|c| *c == b'=')?;
            Some((b[..eq].to_vec(), b[eq + 1..].to_vec()))
        })
        .collect();
    let mut cmds = Commands {
        running: HashMap::new(),
        sampling: !in_cgroup,
        nproc: nproc_limit(plan),
        last_sample: None,
    };
    loop {
        let mut pfds = [
            libc::pollfd {
                fd: ch.raw(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigchld.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if sys::poll(&mut pfds, cmds.poll_timeout_ms()).is_err() {
            sys::exit_now(EXIT_SETUP_FAILED);
        }
        if pfds[1].revents != 0 {
            sys::drain_signalfd(&sigchld);
            cmds.reap(&ch, &sigchld);
        }
        if cmds.sample_due() {
            cmds.sample(None);
            cmds.report(&ch, None);
        }
        if pfds[0].revents == 0 {
            continue;
        }
        let (msg, files) = match ch.recv::<ToSandbox>() {
            Ok(Some(m)) => m,
            // The supervisor is gone: our exit takes the whole sandbox with us.
            _ => sys::exit_now(0),
        };
        match msg {
            ToSandbox::Mapped | ToSandbox::Go { .. } => {}
            // Our exit takes every process of the sandbox with us.
            ToSandbox::Stop => sys::exit_now(0),
            ToSandbox::Signal { id, signal } => cmds.signal(id, signal),
            ToSandbox::Sample { id } => {
                cmds.sample(None);
                cmds.report(&ch, Some(id));
            }
            ToSandbox::Exec {
                id,
                argv,
                env,
                cwd,
                cgroup,
            } => {
                let to_c = |s: Vec<u8>| CString::new(s).ok();
                let argv: Option<Vec<CString>> =
                    argv.into_iter().map(|a| to_c(a.into_bytes())).collect();
                let mut merged = base_env.clone();
                for (k, v) in env {
                    merged.retain(|(bk, _)| *bk != k.as_bytes());
                    merged.push((k.into_bytes(), v.into_bytes()));
                }
                let envp: Option<Vec<CString>> = merged
                    .into_iter()
                    .map(|(mut k, v)| {
                        k.push(b'=');
                        k.extend(v);
                        to_c(k)
                    })
                    .collect();
                let cwd = std::path::PathBuf::from(std::ffi::OsString::from_vec(
                    cwd.unwrap_or_else(|| plan.cwd.display().to_string())
                        .into_bytes(),
                ));
                let exec_failed = |errno: i32, path: &str| {
                    let _ = ch.send(&ToSupervisor::ExecFailed {
                        id,
                        errno,
                        path: path.into(),
                        cwd: false,
                    });
                };
                let (Some(argv), Some(envp)) = (argv, envp) else {
                    exec_failed(libc::EINVAL, "argument with NUL byte");
                    continue;
                };
                if argv.is_empty() {
                    exec_failed(libc::ENOENT, "");
                    continue;
                }
                if cgroup && files.is_empty() {
                    exec_failed(libc::EIO, "no cgroup files came with the command");
                    continue;
                }
                let spec = CommandSpec {
                    id,
                    argv: &argv,
                    envp: &envp,
                    cwd: &cwd,
                };
                match spawn_command(plan, &ch, &spec, files) {
                    Ok(started) => {
                        cmds.running.insert(
                            started.subinit,
                            Command {
                                id,
                                leader: started.leader,
                                started: Instant::now(),
                                peak_pids: 0,
                                pids_at_limit: 0,
                                reported: (0, 0),
                            },
                        );
                        let raw = started.pipes.each_ref().map(|f| f.as_raw_fd());
                        let _ = ch.send_with_fds(
                            &ToSupervisor::Started {
                                id,
                                pid: started.leader,
                            },
                            &raw,
                        );
                        drop(started.gate); // now the command may report an exec failure
                    }
                    Err(e) => exec_failed(e.raw_os_error().unwrap_or(libc::EIO), "spawning"),
                }
            }
        }
    }
}

/// How long the init goes on killing what an ended command left behind before it reports
/// the end anyway (a process stuck in the kernel cannot be hurried).
const SWEEP_LIMIT: Duration = Duration::from_secs(2);

/// One running command of a persistent sandbox.
struct Command {
    id: u64,
    /// The command's own process. Its sub-init leaves it unreaped when it ends, so its pid
    /// (and process group id) names nothing else until the init has reaped it.
    leader: libc::pid_t,
    started: Instant,
    /// Without a cgroup: the most tasks the samples saw in the command's tree.
    peak_pids: u64,
    /// Without a cgroup: samples that found the sandbox at its process limit while this
    /// command had the most tasks.
    pids_at_limit: u64,
    /// What was last reported of the two above.
    reported: (u64, u64),
}

/// The init's running commands, keyed by the pid of each one's sub-init.
struct Commands {
    running: HashMap<libc::pid_t, Command>,
    sampling: bool,
    nproc: u64,
    last_sample: Option<Instant>,
}

impl Commands {
    /// How often to sample without a cgroup: often while a command is young (where fork
    /// bombs go off), then rarely — a long-lived code kernel must not cost the sandbox much.
    fn sample_every(&self) -> Duration {
        let young = self
            .running
            .values()
            .any(|c| c.started.elapsed() < Duration::from_secs(2));
        Duration::from_millis(if young { 100 } else { 500 })
    }

    fn poll_timeout_ms(&self) -> i32 {
        if !self.sampling || self.running.is_empty() {
            return -1;
        }
        let every = self.sample_every();
        let waited = self.last_sample.map_or(every, |t| t.elapsed());
        every.saturating_sub(waited).as_millis() as i32
    }

    fn sample_due(&self) -> bool {
        self.sampling && !self.running.is_empty() && self.poll_timeout_ms() == 0
    }

    /// Counts every process of the sandbox and charges each to its command. `ending`: a
    /// command whose sub-init is gone; what it left behind (now the init's children) is its.
    fn sample(&mut self, ending: Option<&mut Command>) {
        self.last_sample = Some(Instant::now());
        let procs = proctree::scan();
        let total: u64 = procs.values().map(|p| p.tasks).sum();
        let roots: std::collections::HashSet<libc::pid_t> = self.running.keys().copied().collect();
        let by_root = proctree::tasks_by_root(&procs, &roots, 1);
        let mut counted: Vec<(&mut Command, u64)> = self
            .running
            .iter_mut()
            .map(|(sub, c)| (c, by_root.get(&Some(*sub)).copied().unwrap_or(0)))
            .collect();
        if let Some(e) = ending {
            counted.push((e, by_root.get(&None).copied().unwrap_or(0)));
        }
        let most = counted.iter().map(|(_, n)| *n).max().unwrap_or(0);
        for (c, n) in counted {
            c.peak_pids = c.peak_pids.max(n);
            // At the limit every fork fails; the likeliest to have tried is the largest.
            if total >= self.nproc && n == most && n > 0 {
                c.pids_at_limit += 1;
            }
        }
    }

    /// Sends what changed since the last report (and command `id`'s usage in any case).
    fn report(&mut self, ch: &Channel, id: Option<u64>) {
        for c in self.running.values_mut() {
            let now = (c.peak_pids, c.pids_at_limit);
            if now != c.reported || Some(c.id) == id {
                c.reported = now;
                let _ = ch.send(&ToSupervisor::CommandUsage {
                    id: c.id,
                    peak_pids: now.0,
                    pids_at_limit: now.1,
                });
            }
        }
    }

    /// Signals a command's process group; SIGKILL also ends its sub-init, so that nothing
    /// the command did to it (stopping it, say) keeps its tree alive.
    fn signal(&self, id: u64, signal: i32) {
        let Some((sub, c)) = self.running.iter().find(|(_, c)| c.id == id) else {
            return;
        };
        // SAFETY: plain integers; the leader's pid is reserved until we reap it (see
        // `Command::leader`), so the group is the command's.
        unsafe { libc::kill(-c.leader, signal) };
        let _ = sys::kill(c.leader, signal);
        if signal == libc::SIGKILL {
            let _ = sys::kill(*sub, libc::SIGKILL);
        }
    }

    /// Reaps ended sub-inits: ends what each command left behind, then reports its end.
    fn reap(&mut self, ch: &Channel, sigchld: &OwnedFd) {
        let mut queue: std::collections::VecDeque<(libc::pid_t, sys::Exit)> = Default::default();
        // Processes of an ended command that died with its sub-init (a SIGKILL for the command
        // ends both at once) come to us, and may be reaped here, before any sweep.
        let mut orphans = Leftovers::default();
        loop {
            // Asked again every round: a sweep may have consumed the wake-up of a later exit.
            while let Ok(Some((pid, exit))) = sys::wait4(-1, true) {
                if self.running.contains_key(&pid) {
                    queue.push_back((pid, exit));
                } else {
                    orphans.add(&exit);
                }
            }
            let Some((pid, exit)) = queue.pop_front() else {
                return;
            };
            let Some(mut cmd) = self.running.remove(&pid) else {
                continue;
            };
            if self.sampling {
                self.sample(Some(&mut cmd));
            }
            let mut left = self.sweep(sigchld, &mut queue);
            left.merge(std::mem::take(&mut orphans));
            let (user, system) = exit.cpu();
            let (code, signal) = if libc::WIFSIGNALED(exit.status) {
                (None, Some(libc::WTERMSIG(exit.status)))
            } else {
                (Some(libc::WEXITSTATUS(exit.status)), None)
            };
            let _ = ch.send(&ToSupervisor::ExecExit {
                id: cmd.id,
                code,
                signal,
                cpu_user_us: (user + left.user).as_micros() as u64,
                cpu_system_us: (system + left.system).as_micros() as u64,
                max_rss_kb: (exit.rusage.ru_maxrss.max(0) as u64).max(left.max_rss_kb),
                // The samples may all have missed a short command; its own process it had.
                peak_pids: cmd.peak_pids.max(1),
                pids_at_limit: cmd.pids_at_limit,
            });
        }
    }

    /// Kills and reaps every child of the init that is not a running command's sub-init:
    /// what an ended command left behind (its sub-init is gone, so its orphans came to us).
    /// Each kill hands the victim's own children to us for the next round. Returns what the
    /// reaped processes used; sub-inits that end meanwhile go to `ended`.
    fn sweep(
        &self,
        sigchld: &OwnedFd,
        ended: &mut std::collections::VecDeque<(libc::pid_t, sys::Exit)>,
    ) -> Leftovers {
        let mut used = Leftovers::default();
        let deadline = Instant::now() + SWEEP_LIMIT;
        loop {
            let strays: Vec<libc::pid_t> = proctree::own_children()
                .into_iter()
                .filter(|p| !self.running.contains_key(p))
                .collect();
            if strays.is_empty() {
                return used;
            }
            for p in &strays {
                let _ = sys::kill(*p, libc::SIGKILL);
            }
            let mut reaped = false;
            while let Ok(Some((pid, exit))) = sys::wait4(-1, true) {
                reaped = true;
                if self.running.contains_key(&pid) {
                    ended.push_back((pid, exit));
                } else {
                    used.add(&exit);
                }
            }
            if Instant::now() >= deadline {
                return used;
            }
            if !reaped {
                let mut p = [libc::pollfd {
                    fd: sigchld.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = sys::poll(&mut p, 10);
                sys::drain_signalfd(sigchld);
            }
        }
    }
}

/// What the processes an ended command left behind used (see `Commands::sweep`).
#[derive(Default)]
struct Leftovers {
    user: Duration,
    system: Duration,
    max_rss_kb: u64,
}

impl Leftovers {
    /// A reaped process: its CPU and that of the children it reaped.
    fn add(&mut self, exit: &sys::Exit) {
        let (u, s) = exit.cpu();
        self.user += u;
        self.system += s;
        self.max_rss_kb = self.max_rss_kb.max(exit.rusage.ru_maxrss.max(0) as u64);
    }

    fn merge(&mut self, other: Leftovers) {
        self.user += other.user;
        self.system += other.system;
        self.max_rss_kb = self.max_rss_kb.max(other.max_rss_kb);
    }
}

struct CommandSpec<'a> {
    id: u64,
    argv: &'a [CString],
    envp: &'a [CString],
    cwd: &'a Path,
}

/// A command just started: its sub-init and leader, our pipe ends (stdin write, stdout read,
/// stderr read), and the gate to drop once it is reported started.
struct StartedCommand {
    subinit: libc::pid_t,
    leader: libc::pid_t,
    pipes: [OwnedFd; 3],
    gate: OwnedFd,
}

/// Starts one command of a persistent sandbox under a sub-init of its own (see `subinit`).
/// `cgroup_files`: where the sub-init joins the command's cgroup, if it has one.
fn spawn_command(
    plan: &Plan,
    ch: &Channel,
    spec: &CommandSpec,
    cgroup_files: Vec<OwnedFd>,
) -> std::io::Result<StartedCommand> {
    let (gate_r, gate_w) = sys::pipe()?;
    let (in_r, in_w) = sys::pipe()?;
    let (out_r, out_w) = sys::pipe()?;
    let (err_r, err_w) = sys::pipe()?;
    let (pid_r, pid_w) = sys::pipe()?;
    // SAFETY: the init is single-threaded.
    match unsafe { sys::fork() }? {
        sys::Fork::Child => {
            drop((in_w, out_r, err_r, pid_r));
            let stdio = Stdio {
                stdin: in_r,
                stdout: out_w,
                stderr: err_w,
            };
            subinit(plan, ch, spec, cgroup_files, stdio, gate_r, gate_w, pid_w)
        }
        sys::Fork::Parent(sub) => {
            // Only the sub-init may hold these: the cgroup files carry cordon's authority,
            // and a pipe end left open here would keep the command from seeing EOF.
            drop((cgroup_files, in_r, out_w, err_w, pid_w, gate_r));
            let mut b = [0u8; 4];
            let said = sys::read_exact(pid_r.as_raw_fd(), &mut b);
            let leader = i32::from_ne_bytes(b);
            if !said || leader == 0 {
                let _ = sys::kill(sub, libc::SIGKILL);
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            if leader < 0 {
                // The sub-init could not start the command and exits; it is reaped as a
                // stranger (it is in no table).
                return Err(std::io::Error::from_raw_os_error(-leader));
            }
            Ok(StartedCommand {
                subinit: sub,
                leader,
                pipes: [in_w, out_r, err_r],
                gate: gate_w,
            })
        }
    }
}

/// The sub-init of one command: a subreaper, so everything the command starts stays in its
/// tree however it daemonizes, and the tree is the command's kill and accounting domain. It
/// joins the command's cgroup, starts the command, reaps whatever else ends, and when the
/// command itself ends, ends the same way at once — leaving the command unreaped, so that its
/// pid still names it — and what is left of the tree falls to the init, which kills it
/// (`Commands::sweep`). Its confinement is the init's, which the command gets unchanged.
#[allow(clippy::too_many_arguments)]
fn subinit(
    plan: &Plan,
    ch: &Channel,
    spec: &CommandSpec,
    cgroup_files: Vec<OwnedFd>,
    stdio: Stdio,
    gate_r: OwnedFd,
    gate_w: OwnedFd,
    pid_w: OwnedFd,
) -> ! {
    let refuse = |e: std::io::Error| -> ! {
        let errno = e.raw_os_error().unwrap_or(libc::EIO).max(1);
        let _ = sys::write_all(pid_w.as_raw_fd(), &(-errno).to_ne_bytes());
        sys::exit_now(EXIT_SETUP_FAILED)
    };
    if let Err(e) = sys::set_child_subreaper() {
        refuse(e);
    }
    if let Err(e) = crate::cgroup::join(&cgroup_files) {
        refuse(e);
    }
    drop(cgroup_files);
    if let Err(e) = apply_cpu_rlimit(plan) {
        refuse(e);
    }
    // SAFETY: the sub-init is single-threaded (a fork of the single-threaded init).
    let leader = match unsafe { sys::fork() } {
        Err(e) => refuse(e),
        Ok(sys::Fork::Child) => {
            if sys::unblock_all_signals().is_err()
                || sys::dup2(stdio.stdin.as_raw_fd(), 0).is_err()
                || sys::dup2(stdio.stdout.as_raw_fd(), 1).is_err()
                || sys::dup2(stdio.stderr.as_raw_fd(), 2).is_err()
            {
                sys::exit_now(EXIT_SETUP_FAILED);
            }
            drop((stdio, gate_w, pid_w));
            exec_command(
                plan,
                ch,
                spec.id,
                spec.argv,
                spec.envp,
                spec.cwd,
                Some(gate_r),
            )
        }
        Ok(sys::Fork::Parent(pid)) => pid,
    };
    drop((stdio, gate_r, gate_w));
    // The channel is the init's; nothing here speaks on it.
    // SAFETY: closing our copy of an fd this process never uses again.
    unsafe { libc::close(ch.raw()) };
    if sys::write_all(pid_w.as_raw_fd(), &leader.to_ne_bytes()).is_err() {
        let _ = sys::kill(leader, libc::SIGKILL);
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    drop(pid_w);
    loop {
        match sys::wait_peek() {
            Ok((pid, end)) if pid == leader => sys::exit_like(end),
            Ok((pid, _)) => {
                let _ = sys::wait4(pid, false);
            }
            // Only if the leader were not our child; it is.
            Err(_) => sys::exit_now(EXIT_SETUP_FAILED),
        }
    }
}
