//! The init: PID 1 of the sandbox, cloned by the launcher into fresh namespaces. Its setup is
//! one linear sequence of steps (`init_entry`, `init_main`); then it either starts the payload
//! and waits for it (`one_shot`) or serves commands, each under a sub-init (`persistent`).
//! Nothing here returns to the caller: every path ends in `exec` or `_exit`.

mod one_shot;
mod persistent;
mod proctree;

use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::channel::{Channel, ToSandbox, ToSupervisor, Watched};
use crate::error::StepFailure;
use crate::landlock_rules::FsRules;
use crate::plan::{Plan, PROXY_PORT};
use crate::{caps_drop, landlock_rules, mounts, seccomp, sys};

/// Exit code of the init when setup fails (the supervisor reads messages, this is a fallback).
const EXIT_SETUP_FAILED: i32 = 125;

pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

fn fail(ch: &Channel, step: &str, failure: impl StepFailure) -> ! {
    let _ = ch.send(&ToSupervisor::SetupFailed {
        step: step.to_string(),
        message: failure.to_string(),
        errno: failure.errno(),
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
        .chain(
            plan.image
                .iter()
                .flat_map(|i| i.layer_trees.iter().copied().chain(i.upper_tree)),
        )
        .chain(plan.root.iter().filter_map(|e| match e {
            crate::plan::RootEntry::Bind { tree, .. } => *tree,
            _ => None,
        }))
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
    if plan.drop_root && plan.no_namespaces {
        // No user namespace: we are host root itself. The bounding set goes while we still
        // may drop it; giving up uid 0 then clears every other capability.
        if let Err(e) = caps_drop::drop_bounding() {
            fail(&ch, "dropping capabilities", e);
        }
        if let Err(e) = sys::setresgid(plan.host_gid).and_then(|_| sys::setresuid(plan.host_uid)) {
            fail(&ch, "taking on the sandbox identity", e);
        }
    } else if plan.drop_root {
        if let Err(e) = sys::setresgid(plan.inner_gid).and_then(|_| sys::setresuid(plan.inner_uid))
        {
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
    if plan.no_namespaces {
        init_main_degraded(plan.clone(), ch)
    }
    init_main(plan, ch)
}

/// The init of a sandbox the host gave no namespaces (see `launcher::spawn_init`): it lives in
/// the host's process, mount and network namespaces, so what those would have done is done
/// with what needs none — a subreaper keeps the tree under it, Landlock fences the host's
/// filesystem (and TCP but to the proxy), a second seccomp filter the socket families, and
/// the scratch dirs are a per-run host directory the supervisor made.
/// What the supervisor's go says.
struct Go {
    /// The sandbox is in a cgroup.
    in_cgroup: bool,
    /// Count the tasks when the payload ends (see `ToSandbox::Go`).
    count_at_end: bool,
}

/// Waits for the supervisor's go and joins the cgroup it names (if any). Until then nothing
/// runs on the sandbox's behalf; joining while this is still the only thread, with no child
/// yet, puts everything the sandbox ever runs inside.
fn wait_for_go(ch: &Channel) -> Go {
    match ch.recv::<ToSandbox>() {
        Ok(Some((
            ToSandbox::Go {
                cgroup,
                count_at_end,
            },
            files,
        ))) => {
            if cgroup && files.is_empty() {
                fail(ch, "joining the cgroup", "no cgroup files came with go");
            }
            if let Err(e) = crate::cgroup::join(&files) {
                fail(ch, "joining the cgroup", e);
            }
            // These carry cordon's authority over the cgroup: gone before anything else runs.
            drop(files);
            Go {
                in_cgroup: cgroup,
                count_at_end,
            }
        }
        _ => sys::exit_now(EXIT_SETUP_FAILED),
    }
}

fn init_main_degraded(mut plan: Plan, ch: Channel) -> ! {
    if let Err(e) = sys::set_child_subreaper() {
        fail(&ch, "becoming the sandbox's subreaper", e);
    }
    let go = wait_for_go(&ch);
    let in_cgroup = go.in_cgroup;
    let mut landlock = plan.host_landlock.clone();
    if plan.network {
        // No loopback of our own: the proxy listens on the host's, on a port the kernel
        // picks; the payload's proxy variables and Landlock's one allowed port follow it.
        let port = hand_over_proxy_listener(&ch, 0);
        for (k, v) in crate::plan::proxy_env(port) {
            plan.set_env(k, &v);
        }
        if let Some(ports) = landlock.tcp_connect.as_mut() {
            ports.push(port);
        }
    }
    let plan = &plan;
    let mut notes = Vec::new();
    if !in_cgroup && !plan.drop_root {
        notes.push(format!(
            "pids: without a cgroup or a user namespace, RLIMIT_NPROC counts every process of \
             host uid {}: the sandbox got --pids on top of what that uid ran when it started \
             (a persistent sandbox: when each command started), so the uid's other processes \
             starting or ending meanwhile move its share",
            sys::geteuid()
        ));
    }
    confine(
        plan,
        &ch,
        Confinement {
            landlock: &landlock,
            namespaces: false,
            in_cgroup,
            notes,
            watch: (Vec::new(), Vec::new()),
        },
    );
    payload_or_commands(plan, ch, in_cgroup, go.count_at_end)
}

/// PID 1 of the sandbox: builds the root, confines itself, spawns the payload, reaps.
fn init_main(plan: &Plan, ch: Channel) -> ! {
    let writable = match mounts::build_root(plan) {
        Ok(w) => w,
        Err(e) => fail(&ch, &e.step, e.error),
    };
    if let Err(e) = sys::sethostname(&plan.hostname) {
        fail(&ch, "sethostname", e);
    }
    if let Err(e) = sys::loopback_up() {
        fail(&ch, "bringing up loopback", e);
    }
    // The supervisor creates the cgroup while we built the root. Nothing runs on the sandbox's
    // behalf before it says go: then we join the cgroup (still our only thread, no child yet,
    // so everything the sandbox ever runs is born inside) and root a cgroup namespace there.
    let go = wait_for_go(&ch);
    let in_cgroup = go.in_cgroup;
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
                // The image's writable layer goes with it (what a commit reads); both are
                // closed here once sent, before anything of the sandbox's runs.
                let mut fds = vec![root.as_raw_fd()];
                fds.extend(writable.as_ref().map(|w| w.as_raw_fd()));
                if let Err(e) = ch.send_with_fds(&ToSupervisor::RootFd, &fds) {
                    fail(&ch, "handing the root to the supervisor", e);
                }
            }
            Err(e) => fail(&ch, "opening the new root", e),
        }
    }
    drop(writable);
    if plan.network {
        hand_over_proxy_listener(&ch, PROXY_PORT);
    }
    // Opened while nothing restricts us yet; close-on-exec, and closed once handed over.
    let watch = open_watched(plan, in_cgroup);
    confine(
        plan,
        &ch,
        Confinement {
            landlock: &plan.landlock,
            namespaces: true,
            in_cgroup,
            notes: Vec::new(),
            watch,
        },
    );
    payload_or_commands(plan, ch, in_cgroup, go.count_at_end)
}

/// Binds the egress proxy's listener on this side's loopback (`port` 0: one the kernel picks)
/// and hands it to the supervisor, which serves it from outside. Returns the port.
fn hand_over_proxy_listener(ch: &Channel, port: u16) -> u16 {
    let bound = std::net::TcpListener::bind(("127.0.0.1", port)).and_then(|l| {
        let port = l.local_addr()?.port();
        Ok((l, port))
    });
    match bound {
        Ok((l, port)) => {
            if let Err(e) = ch.send_with_fds(&ToSupervisor::ProxyListener, &[l.as_raw_fd()]) {
                fail(ch, "handing the proxy socket to the supervisor", e);
            }
            port
        }
        Err(e) => fail(ch, "proxy listener", e),
    }
}

/// What differs between the two inits' confinement; the sequence itself does not.
struct Confinement<'a> {
    /// Landlock's rules: the sandbox's paths, or (without a mount namespace) the host's.
    landlock: &'a FsRules,
    /// The sandbox has its namespaces. Without them: capabilities are dropped as a process
    /// outside a user namespace loses them, and a second seccomp filter stands in for the
    /// network namespace (TCP only where Landlock can hold it to the proxy's port).
    namespaces: bool,
    in_cgroup: bool,
    /// What the report adds for the user (`enforcement.notes`).
    notes: Vec<String>,
    /// What the supervisor watches the run through, handed over with the report.
    watch: (Vec<Watched>, Vec<OwnedFd>),
}

/// The confinement every init ends its setup with, one sequence for both: rlimits → close
/// inherited fds → capabilities → no_new_privs → Landlock → seccomp, then the report. The
/// order matters: fds before anything runs that could inherit one, capabilities before
/// no_new_privs (which keeps them from coming back at exec), Landlock before seccomp (whose
/// filter refuses the calls Landlock's setup makes).
fn confine(plan: &Plan, ch: &Channel, c: Confinement<'_>) {
    let Confinement {
        landlock,
        namespaces,
        in_cgroup,
        mut notes,
        watch: (mut watch, mut watch_fds),
    } = c;
    if let Err(e) = apply_rlimits(plan, !in_cgroup) {
        fail(ch, "rlimits", e);
    }
    if let Err(e) = sys::cloexec_from(3) {
        fail(ch, "closing inherited fds", e);
    }
    let caps = if namespaces {
        caps_drop::drop_all()
    } else {
        caps_drop::drop_without_userns()
    };
    if let Err(e) = caps {
        fail(ch, "dropping capabilities", e);
    }
    if let Err(e) = sys::set_no_new_privs() {
        fail(ch, "no_new_privs", e);
    }
    let (landlock_abi, landlock_partial) = if plan.kernel_landlock_abi > 0 {
        match landlock_rules::apply(landlock, plan.kernel_landlock_abi) {
            Ok(a) => (a.abi, a.partial),
            Err(e) => fail(ch, "landlock", e),
        }
    } else {
        notes.push("Landlock is not available on this kernel".to_string());
        (0, false)
    };
    // Learn mode's filter goes first: the sandbox's own refuses `seccomp`. It only notifies
    // (the supervisor answers "continue"), so the run is confined exactly as without it.
    if plan.learn_exec {
        match crate::exec_learn::install_listener() {
            Ok(fd) => {
                watch.push(Watched::ExecNotify);
                watch_fds.push(fd);
            }
            Err(e) => notes.push(format!(
                "learn mode: the programs executed and the files used are not recorded \
                 (seccomp user notification: {e})"
            )),
        }
    }
    if let Err(e) = seccomp::install() {
        fail(ch, "seccomp", e);
    }
    if !namespaces {
        if let Err(e) = seccomp::install_no_netns(plan.network && landlock_abi >= 4) {
            fail(ch, "seccomp", e);
        }
    }
    if landlock.exec_only.is_some() {
        // The plan refused a kernel without Landlock; one that has it but did not enforce
        // the ruleset (disabled at boot after detection) must not run the payload either.
        if landlock_abi == 0 {
            fail(
                ch,
                "landlock",
                "the programs allowlist (--exec-allow) needs Landlock, which the kernel did \
                 not enforce",
            );
        }
        if let Err(e) = seccomp::install_exec_allowlist() {
            fail(ch, "seccomp", e);
        }
        if !namespaces {
            notes.push(
                "programs allowlist without a mount namespace: the scratch directories cannot \
                 be mounted noexec, so the dynamic loader can still run a program written \
                 there (ld.so /tmp/prog); execve of it is refused"
                    .to_string(),
            );
        }
    }
    let raw: Vec<RawFd> = watch_fds.iter().map(|f| f.as_raw_fd()).collect();
    // Without this report the supervisor would show none of the layers just applied (and a
    // persistent sandbox would never be ready): its loss is a setup failure, not a detail.
    let confined = ToSupervisor::Confined {
        landlock_abi,
        landlock_partial,
        seccomp: true,
        rlimits: true,
        notes,
        watch,
    };
    if let Err(e) = ch.send_with_fds(&confined, &raw) {
        fail(ch, "reporting the confinement", e);
    }
}

/// The init's last step: serve a persistent sandbox's commands, or start the one payload and
/// wait for it.
fn payload_or_commands(plan: &Plan, ch: Channel, in_cgroup: bool, count_at_end: bool) -> ! {
    if plan.persistent {
        persistent::serve_loop(plan, ch, in_cgroup);
    }
    let payload = start_payload(plan, &ch);
    one_shot::wait(&ch, payload, plan.no_namespaces, count_at_end)
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
    // An image's root: overlayfs reports its writable layer's tmpfs, capped the same way.
    if plan.image.is_some() {
        scratch.push("/");
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
        // Without a cgroup these per-process limits are the best the host allows. Without a
        // user namespace the kernel counts every task of our uid, the host's included: the
        // sandbox gets its own share on top of what the uid already runs.
        // A persistent sandbox's init keeps the limit it inherited: each command's sub-init
        // sets one from the uid's count at that command's start (see `persistent::fresh_nproc`),
        // which a limit lowered here for good could not be raised to.
        if !(plan.no_namespaces && plan.persistent) {
            let nproc = if plan.no_namespaces {
                nproc_limit(plan) + sys::tasks_of_uid(sys::geteuid())
            } else {
                nproc_limit(plan)
            };
            sys::setrlimit(libc::RLIMIT_NPROC, nproc, nproc)?;
        }
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
/// `pids`, as a cgroup would give it (see `launcher::prepare`).
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
    // Learn mode reads each exec's path from the caller's memory, from outside: the child
    // starts as a copy of us, non-dumpable, which refuses that rootless. Dumpable only while
    // it starts (no program of the sandbox runs yet; once exec'd it is dumpable anyway).
    if plan.learn_exec {
        let _ = sys::set_dumpable(true);
    }
    let started = search_path(plan, first, |c| {
        sys::exists(c)?;
        sys::spawn(c, &plan.argv, &plan.env, &[libc::SIGPIPE], true)
    });
    if plan.learn_exec {
        if let Err(e) = sys::set_dumpable(false) {
            fail(ch, "set non-dumpable", e);
        }
    }
    match started {
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
                    let mut path = c.to_string_lossy().into_owned();
                    // Landlock's refusal is an EACCES like a missing x bit: say which rule.
                    if code == libc::EACCES && plan.landlock.exec_only.is_some() {
                        path.push_str(
                            " (not in the programs allowlist, --exec-allow / [exec] allow; \
                             a script's #! interpreter must be listed too)",
                        );
                    }
                    return Err((code, path));
                }
            }
        }
    }
    Err((libc::ENOENT, String::from_utf8_lossy(prog).into_owned()))
}

/// `gate`: a pipe whose other end the parent closes once it has reported the command as
/// started; a failure is reported only after that, so the supervisor never hears of a
/// command's failure before it hears of the command. `ctty`: fd 0 is a terminal to take as
/// the controlling one of the command's new session.
#[allow(clippy::too_many_arguments)]
fn exec_command(
    plan: &Plan,
    ch: &Channel,
    id: u64,
    argv: &[CString],
    env: &[CString],
    cwd: &Path,
    gate: Option<OwnedFd>,
    ctty: bool,
) -> ! {
    let wait_gate = || {
        if let Some(g) = &gate {
            let _ = sys::read_byte(g.as_raw_fd());
        }
    };
    let _ = sys::setsid();
    // A command on a pty: its terminal (fd 0, the slave) becomes the new session's controlling
    // terminal, so that job control, `/dev/tty` and ^C work as in a terminal on the host.
    if ctty {
        if let Err(e) = sys::set_controlling_tty(0) {
            wait_gate();
            let _ = ch.send(&ToSupervisor::ExecFailed {
                id,
                errno: e.raw_os_error().unwrap_or(libc::EIO),
                path: "the command's terminal (TIOCSCTTY)".into(),
                cwd: false,
            });
            sys::exit_now(EXIT_SETUP_FAILED);
        }
    }
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
    // Learn mode reads the path of each exec from this process's memory, from outside: the
    // init's non-dumpable state (inherited) would refuse that rootless. The program about to
    // be executed is dumpable anyway once exec'd; until then only cordon's code runs here.
    if plan.learn_exec {
        let _ = sys::set_dumpable(true);
    }
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
