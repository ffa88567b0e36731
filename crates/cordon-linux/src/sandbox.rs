//! The sandbox side: the relay and the init, each a linear sequence of setup steps.
//! Nothing here returns to the caller: every path ends in `exec` or `_exit`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::channel::{Channel, ToSandbox, ToSupervisor};
use crate::plan::{Plan, INNER_ID, PROXY_PORT};
use crate::{caps_drop, landlock_rules, mounts, seccomp, sys};

/// Exit codes of the relay and init (the supervisor reads messages, these are a fallback).
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

/// The relay: forked from the supervisor. Drops host root, enters the namespaces, forks init.
pub fn relay_main(plan: &Plan, ch: Channel, stdio: Stdio, supervisor: libc::pid_t) -> ! {
    // 1. Stop being host root before touching anything else.
    if plan.drop_root {
        if let Err(e) = sys::setgroups_empty()
            .and_then(|_| sys::setresgid(plan.host_gid))
            .and_then(|_| sys::setresuid(plan.host_uid))
        {
            fail(&ch, "dropping host root", e);
        }
        // Changing ids made us non-dumpable, which would lock us out of our own uid_map.
        if let Err(e) = sys::set_dumpable(true) {
            fail(&ch, "set dumpable", e);
        }
    }
    // 2. Die with the supervisor (armed after the id change, which would clear it).
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail(&ch, "set parent-death signal", e);
    }
    if sys::getppid() != supervisor {
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    // 3. stdio.
    for (fd, target) in [(&stdio.stdin, 0), (&stdio.stdout, 1), (&stdio.stderr, 2)] {
        if let Err(e) = sys::dup2(fd.as_raw_fd(), target) {
            fail(&ch, "stdio", e);
        }
    }
    drop(stdio);
    // 4. Wait until the supervisor has put us in our cgroup.
    match ch.recv::<ToSandbox>() {
        Ok(Some((ToSandbox::Go, _))) => {}
        _ => sys::exit_now(EXIT_SETUP_FAILED),
    }
    // Our host ids, read before unshare (inside, they show as the overflow id until mapped).
    let (host_uid, host_gid) = (sys::geteuid(), sys::getegid());
    // 5. New namespaces, all owned by the new user namespace.
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if let Err(e) = sys::unshare(flags) {
        fail(
            &ch,
            "creating namespaces (unshare)",
            format!("{e}; this host refuses unprivileged user namespaces (see `cordon check`)"),
        );
    }
    // 6. Map our one host uid/gid to the sandbox user. setgroups must be denied first.
    let maps = sys::write_file(Path::new("/proc/self/setgroups"), "deny")
        .and_then(|_| {
            sys::write_file(
                Path::new("/proc/self/uid_map"),
                &format!("{INNER_ID} {} 1\n", host_uid),
            )
        })
        .and_then(|_| {
            sys::write_file(
                Path::new("/proc/self/gid_map"),
                &format!("{INNER_ID} {} 1\n", host_gid),
            )
        });
    if let Err(e) = maps {
        fail(&ch, "writing uid/gid maps", e);
    }
    // 7. The first child is PID 1 of the new pid namespace.
    // SAFETY: this process is single-threaded (forked from a single-threaded supervisor).
    match unsafe { sys::fork() } {
        Err(e) => fail(&ch, "fork init", e),
        Ok(sys::Fork::Child) => init_main(plan, ch),
        Ok(sys::Fork::Parent(pid)) => {
            let _ = ch.send(&ToSupervisor::InitPid { pid });
            drop(ch);
            // Nothing else to do: wait for init, whose end is the sandbox's end.
            let code = match sys::wait4(pid, false) {
                Ok(Some((_, exit))) if libc::WIFEXITED(exit.status) => {
                    libc::WEXITSTATUS(exit.status)
                }
                _ => EXIT_SETUP_FAILED,
            };
            sys::exit_now(code)
        }
    }
}

/// PID 1 of the sandbox: builds the root, confines itself, forks the payload, reaps.
fn init_main(plan: &Plan, ch: Channel) -> ! {
    if let Err(e) = sys::set_pdeathsig(libc::SIGKILL) {
        fail(&ch, "set parent-death signal", e);
    }
    if let Err(e) = mounts::build_root(plan) {
        fail(&ch, &e.step, e.error);
    }
    if let Err(e) = sys::sethostname(&plan.hostname) {
        fail(&ch, "sethostname", e);
    }
    if let Err(e) = sys::loopback_up() {
        fail(&ch, "bringing up loopback", e);
    }
    if plan.network {
        match std::net::TcpListener::bind(("127.0.0.1", PROXY_PORT)) {
            Ok(l) => {
                if let Err(e) = ch.send_with_fd(&ToSupervisor::ProxyListener, Some(l.as_raw_fd())) {
                    fail(&ch, "handing the proxy socket to the supervisor", e);
                }
            }
            Err(e) => fail(&ch, "proxy listener", e),
        }
    }
    // The payload, not its init, should be the OOM killer's choice; descendants inherit it.
    let _ = sys::write_file(Path::new("/proc/self/oom_score_adj"), "1000");

    let mut notes = Vec::new();
    if let Err(e) = apply_rlimits(plan) {
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
    let _ = ch.send(&ToSupervisor::Confined {
        landlock_abi,
        landlock_partial,
        seccomp: true,
        rlimits: true,
        notes,
    });

    // SAFETY: single-threaded process.
    let payload = match unsafe { sys::fork() } {
        Err(e) => fail(&ch, "fork payload", e),
        Ok(sys::Fork::Child) => payload_main(plan, &ch),
        Ok(sys::Fork::Parent(pid)) => pid,
    };
    // Reap everything; report the payload's end; our exit tears the namespace down.
    loop {
        match sys::wait4(-1, false) {
            Ok(Some((pid, exit))) if pid == payload => {
                let msg = if libc::WIFSIGNALED(exit.status) {
                    ToSupervisor::Signaled {
                        signal: libc::WTERMSIG(exit.status),
                    }
                } else {
                    ToSupervisor::Exited {
                        code: libc::WEXITSTATUS(exit.status),
                    }
                };
                let _ = ch.send(&msg);
                sys::exit_now(0);
            }
            Ok(_) => continue,
            Err(_) => sys::exit_now(EXIT_SETUP_FAILED),
        }
    }
}

fn apply_rlimits(plan: &Plan) -> std::io::Result<()> {
    let l = &plan.limits;
    sys::setrlimit(libc::RLIMIT_NOFILE, l.nofile, l.nofile)?;
    sys::setrlimit(libc::RLIMIT_FSIZE, l.file_size, l.file_size)?;
    sys::setrlimit(libc::RLIMIT_CORE, 0, 0)?;
    if let Some(cpu) = l.cpu_time {
        let secs = cpu.as_secs().max(1);
        // SIGXCPU at the soft limit, SIGKILL a second later if it is caught.
        sys::setrlimit(libc::RLIMIT_CPU, secs, secs + 1)?;
    }
    if plan.rlimit_fallback {
        // Without a cgroup these per-process limits are the best the host allows.
        let procs = u64::from(l.pids) + 2;
        sys::setrlimit(libc::RLIMIT_NPROC, procs, procs)?;
        sys::setrlimit(libc::RLIMIT_DATA, l.memory, l.memory)?;
    }
    Ok(())
}

/// The payload process: a new session, then exec.
fn payload_main(plan: &Plan, ch: &Channel) -> ! {
    let _ = sys::setsid();
    if let Err(e) = std::env::set_current_dir(&plan.cwd) {
        let _ = ch.send(&ToSupervisor::SetupFailed {
            step: format!("chdir {}", plan.cwd.display()),
            message: e.to_string(),
        });
        sys::exit_now(EXIT_SETUP_FAILED);
    }
    let prog = plan.argv[0].as_bytes();
    let candidates: Vec<CString> = if prog.contains(&b'/') {
        vec![plan.argv[0].clone()]
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
    // Like execvp: remember a permission error over a not-found one.
    let mut errno = libc::ENOENT;
    let mut tried = String::from_utf8_lossy(prog).into_owned();
    for c in &candidates {
        let e = sys::execve(c, &plan.argv, &plan.env);
        let code = e.raw_os_error().unwrap_or(libc::ENOENT);
        if code != libc::ENOENT && code != libc::ENOTDIR {
            errno = code;
            tried = c.to_string_lossy().into_owned();
            break;
        }
    }
    let _ = ch.send(&ToSupervisor::ExecFailed { errno, path: tried });
    sys::exit_now(if errno == libc::ENOENT { 127 } else { 126 })
}

use std::os::unix::ffi::OsStringExt;
