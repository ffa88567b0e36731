//! Processes: fork and clone (in a known single-threaded process), exec, wait with resource
//! usage, exit, signals and their handlers, kill, identity (ids, groups), prctl switches and
//! rlimits.

#[allow(unused_imports)]
use super::*;

pub enum Fork {
    Parent(libc::pid_t),
    Child,
}

/// # Safety
/// The caller must be single-threaded, or the child must restrict itself to
/// async-signal-safe calls until it execs.
pub unsafe fn fork() -> io::Result<Fork> {
    // SAFETY: forwarded to the caller's contract above.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Fork::Child),
        p => Ok(Fork::Parent(p)),
    }
}

/// [`fork`], retried while the kernel answers `EAGAIN` for up to ~300 ms, as shells retry
/// theirs: `EAGAIN` is the sandbox's own process limit, which a moment does not change (the
/// retries only delay that answer), but also the host's pid or thread table, or a uid's
/// count that other processes are leaving, which a moment does. Only for forks cordon makes
/// on a command's behalf (starting it), never for the payload's own.
///
/// # Safety
/// As for [`fork`].
pub unsafe fn fork_retrying() -> io::Result<Fork> {
    // SAFETY: forwarded to the caller's contract above.
    retry_eagain(|| unsafe { fork() }, std::thread::sleep)
}

/// `op`, again after 5, 10, 20 … 160 ms (315 ms in all) while it fails with `EAGAIN`; any
/// other result at once. `sleep` is a parameter so that the schedule can be tested.
fn retry_eagain<T>(
    mut op: impl FnMut() -> io::Result<T>,
    mut sleep: impl FnMut(std::time::Duration),
) -> io::Result<T> {
    let mut wait_ms = 5;
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && wait_ms <= 160 => {
                sleep(std::time::Duration::from_millis(wait_ms));
                wait_ms *= 2;
            }
            other => return other,
        }
    }
}

/// `fork`, but the child starts in the new namespaces `flags` asks for (`CLONE_NEW*`), so that
/// with `CLONE_NEWPID` the child itself is the new pid namespace's init. The raw `clone`
/// syscall, as bubblewrap and youki use: glibc's `fork` takes no namespace flags, and
/// `unshare(CLONE_NEWPID)` would only place the caller's *next* child in the namespace —
/// a second fork, and a process in between, on every sandbox start.
///
/// # Safety
/// As for [`fork`], and more: glibc does not know about this child, so its copy of the
/// thread descriptor still names the parent's thread id. The child must not use pthread
/// functions or thread-id–keyed locks (glibc's `raise`/`abort` ask the kernel for the
/// current id and stay correct; Rust's std locks do not use thread ids). Its own children
/// must come from [`fork`], which sets their descriptors right.
pub unsafe fn clone_into(flags: libc::c_int) -> io::Result<Fork> {
    // SAFETY: no new stack (0) means fork semantics: the child continues on a copy of this
    // stack, in a copy of this address space; no tid pointers are passed.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_ulong::from((flags | libc::SIGCHLD) as u32),
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Fork::Child),
        p => Ok(Fork::Parent(p as libc::pid_t)),
    }
}

/// Leaves the current process without returning, skipping Rust destructors and atexit
/// handlers that belong to the parent's copy of the address space.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and takes any int.
    unsafe { libc::_exit(code) }
}

pub fn setgroups_empty() -> io::Result<()> {
    // SAFETY: a zero-length list with a null pointer is the documented way to clear groups.
    cvt(unsafe { libc::setgroups(0, std::ptr::null()) }).map(drop)
}

pub fn setresgid(gid: u32) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::setresgid(gid, gid, gid) }).map(drop)
}

pub fn setresuid(uid: u32) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    cvt(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub fn getegid() -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::getegid() }
}

pub fn getpid() -> libc::pid_t {
    // SAFETY: always succeeds.
    unsafe { libc::getpid() }
}

/// The hard limit of `resource` (`RLIM_INFINITY` as `u64::MAX`).
pub fn hard_rlimit(resource: libc::__rlimit_resource_t) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit the call fills in.
    cvt(unsafe { libc::getrlimit(resource, &mut lim) })?;
    Ok(lim.rlim_max)
}

pub fn set_pdeathsig(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS with 1 and zero padding, as documented.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

pub fn set_dumpable(on: bool) -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes 0 or 1.
    cvt(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, on as libc::c_ulong, 0, 0, 0) }).map(drop)
}

pub fn setsid() -> io::Result<()> {
    // SAFETY: no arguments.
    cvt(unsafe { libc::setsid() }).map(drop)
}

pub fn setrlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: lim is a valid rlimit.
    cvt(unsafe { libc::setrlimit(resource, &lim) }).map(drop)
}

pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // pid > 0 is checked so a bug can never signal a process group.
    if pid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: plain integers.
    cvt(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// Sends `sig` to the process group `pgid` (a command's whole tree, if it kept its group).
pub fn kill_group(pgid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // As in `kill`: a bad id must never become "every process" (-1) or our own group (0).
    if pgid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: plain integers.
    cvt(unsafe { libc::kill(-pgid, sig) }).map(drop)
}

/// Sends `sig` to every process this one may signal except itself: run by a pid namespace's
/// init, everything else in the namespace. ESRCH (nobody left) is success.
pub fn kill_all_others(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain integers.
    match cvt(unsafe { libc::kill(-1, sig) }) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other.map(drop),
    }
}

/// Runs `handler` on `sig` (no flags, nothing blocked meanwhile). rustix offers no sigaction.
///
/// # Safety
/// `handler` must be async-signal-safe.
pub unsafe fn set_signal_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: the sigaction struct is zeroed, then given a handler and an empty mask; the
    // caller vouches for the handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

pub struct Exit {
    pub status: libc::c_int,
    pub rusage: libc::rusage,
}

impl Exit {
    /// User and system CPU time of the process and the children it reaped.
    pub fn cpu(&self) -> (std::time::Duration, std::time::Duration) {
        let d = |t: libc::timeval| {
            std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
                + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        (d(self.rusage.ru_utime), d(self.rusage.ru_stime))
    }
}

/// Waits for `pid` (or any child with -1); `None` with WNOHANG when nothing exited.
pub fn wait4(pid: libc::pid_t, nohang: bool) -> io::Result<Option<(libc::pid_t, Exit)>> {
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    let flags = if nohang { libc::WNOHANG } else { 0 } | libc::__WALL;
    loop {
        // SAFETY: status and ru are valid out-pointers.
        let ret = unsafe { libc::wait4(pid, &mut status, flags, ru.as_mut_ptr()) };
        if ret == -1 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if ret == 0 {
            return Ok(None);
        }
        // SAFETY: wait4 returned a pid, so it filled ru.
        let rusage = unsafe { ru.assume_init() };
        return Ok(Some((ret, Exit { status, rusage })));
    }
}

/// How a child ended, as `waitid` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    Exited(i32),
    Signaled(i32),
}

/// Blocks until some child has ended and says which and how, leaving it a zombie (WNOWAIT):
/// its pid stays reserved until it is reaped.
pub fn wait_peek() -> io::Result<(libc::pid_t, ChildEnd)> {
    loop {
        let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: info is a valid out-pointer; P_ALL ignores the id.
        let ret = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                info.as_mut_ptr(),
                libc::WEXITED | libc::WNOWAIT | libc::__WALL,
            )
        };
        if ret == -1 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid succeeded without WNOHANG, so it filled in a child's siginfo.
        let info = unsafe { info.assume_init() };
        // SAFETY: the union fields of a SIGCHLD siginfo, which waitid just filled in.
        let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
        let end = if info.si_code == libc::CLD_EXITED {
            ChildEnd::Exited(status)
        } else {
            ChildEnd::Signaled(status)
        };
        return Ok((pid, end));
    }
}

/// Whether child `pid` has ended, without reaping it (WNOHANG | WNOWAIT): until it is reaped
/// its zombie keeps its pid and its place in the uid's process count.
pub fn has_ended(pid: libc::pid_t) -> bool {
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: info is a valid out-pointer, zeroed so that "nothing ended" (WNOHANG leaves it
    // untouched or zeroes si_pid) reads as si_pid 0.
    let ret = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            info.as_mut_ptr(),
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL,
        )
    };
    // SAFETY: zeroed at first, possibly filled in by waitid: initialised either way.
    let info = unsafe { info.assume_init() };
    // SAFETY: si_pid of a SIGCHLD siginfo (or of the zeroed one).
    ret == 0 && unsafe { info.si_pid() } == pid
}

/// Marks this process a child subreaper: orphans of its descendants become its children
/// instead of the pid namespace's init's.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// Ends this process the way a child of it ended: the same exit code, or death by the same
/// signal (set to its default and unblocked first; 128 + N if the signal did not kill).
pub fn exit_like(end: ChildEnd) -> ! {
    match end {
        ChildEnd::Exited(code) => exit_now(code),
        ChildEnd::Signaled(sig) => {
            let _ = default_signal(sig);
            // SAFETY: a set with one signal, then plain integer syscalls on ourselves.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
            }
            exit_now(128 + sig)
        }
    }
}

pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: both arrays are NULL-terminated and their strings outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// Whether `path` names something (following symlinks): the errors are `access(2)`'s, so a
/// missing file is ENOENT or ENOTDIR and an unsearchable directory on the way EACCES.
pub fn exists(path: &CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; F_OK asks for existence only.
    cvt(unsafe { libc::access(path.as_ptr(), libc::F_OK) }).map(drop)
}

/// glibc's internal signals (SIGRTMIN as the kernel numbers it, and the next).
const GLIBC_SIGCANCEL: libc::c_int = 32;
const GLIBC_SIGSETXID: libc::c_int = 33;

/// Starts `path` in a new process, as `posix_spawn(3)`: the child borrows this address space
/// (`CLONE_VM | CLONE_VFORK`, this process waits) until it execs, so nothing of it is copied.
/// A `fork` copies the page tables and then both sides fault in private copies of every page
/// either writes before the exec (~30 faults and a page-table teardown on every sandbox
/// start, measured). glibc's implementation is used as it is: it blocks signals around the
/// clone, resets handlers in the child, and returns the exec's error, after reaping the child
/// that failed. `default_signals` start at their default disposition even where ignored
/// here; `new_session` puts the child in a session of its own (`setsid`). The child
/// inherits the signal mask, cwd and fds (only those without close-on-exec survive).
pub fn spawn(
    path: &CStr,
    argv: &[CString],
    envp: &[CString],
    default_signals: &[libc::c_int],
    new_session: bool,
) -> io::Result<libc::pid_t> {
    let mut a: Vec<*mut libc::c_char> = argv.iter().map(|s| s.as_ptr().cast_mut()).collect();
    a.push(std::ptr::null_mut());
    let mut e: Vec<*mut libc::c_char> = envp.iter().map(|s| s.as_ptr().cast_mut()).collect();
    e.push(std::ptr::null_mut());
    // SAFETY: the attribute object is initialised by posix_spawnattr_init before any use and
    // destroyed once; the signal set is initialised by sigemptyset before its first word
    // (a c_ulong at offset 0 of sigset_t on Linux, sigset_t being at least that large) is
    // written directly below; posix_spawn gets NULL-terminated arrays of strings that outlive
    // the call (it never writes through them) and a valid pid out-pointer.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let rc = libc::posix_spawnattr_init(&mut attr);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in default_signals {
            libc::sigaddset(&mut set, *sig);
        }
        // glibc's child sets glibc's own two signals (32 and 33, used for thread
        // cancellation and set*id) to "ignore" while it shares our memory, and an ignored
        // signal stays ignored across exec: named in the default set they start at their
        // default, as after fork and exec. sigaddset refuses them, so their bits (the
        // kernel's layout: bit N-1 for signal N) are set directly.
        let words = std::ptr::addr_of_mut!(set).cast::<libc::c_ulong>();
        *words |= (1 << (GLIBC_SIGCANCEL - 1)) | (1 << (GLIBC_SIGSETXID - 1));
        let mut flags = libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
        if new_session {
            flags |= libc::POSIX_SPAWN_SETSID;
        }
        let mut rc = libc::posix_spawnattr_setsigdefault(&mut attr, &set);
        if rc == 0 {
            rc = libc::posix_spawnattr_setflags(&mut attr, flags);
        }
        let mut pid: libc::pid_t = 0;
        if rc == 0 {
            rc = libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                std::ptr::null(),
                &attr,
                a.as_ptr(),
                e.as_ptr(),
            );
        }
        libc::posix_spawnattr_destroy(&mut attr);
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(pid)
    }
}

/// A pidfd for our child `pid`: readable once it has exited, and immune to pid reuse.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; a non-negative return is a fresh fd we own.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// Blocks SIGCHLD and returns a signalfd that becomes readable when a child changes state.
pub fn signalfd_sigchld() -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local, then sigprocmask/signalfd with valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        cvt(libc::sigprocmask(
            libc::SIG_BLOCK,
            &set,
            std::ptr::null_mut(),
        ))?;
        let fd = cvt(libc::signalfd(
            -1,
            &set,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Reads every pending siginfo from a signalfd (they only say "look at your children").
pub fn drain_signalfd(fd: &OwnedFd) {
    let mut buf = [0u8; 128 * 8];
    loop {
        // SAFETY: reading into a local buffer from an fd we own.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n <= 0 {
            break;
        }
    }
}

/// Puts `sig` back to its default disposition.
pub fn default_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: installs SIG_DFL, which involves no handler code in this process.
    if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clears the signal mask (a blocked mask survives exec and would confuse the payload).
pub fn unblock_all_signals() -> io::Result<()> {
    // SAFETY: an empty set and SIG_SETMASK with valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        cvt(libc::sigprocmask(
            libc::SIG_SETMASK,
            &set,
            std::ptr::null_mut(),
        ))
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn eagain() -> io::Error {
        io::Error::from_raw_os_error(libc::EAGAIN)
    }

    #[test]
    fn eagain_is_retried_with_backoff_until_the_operation_succeeds() {
        let mut failures = 3;
        let mut slept = Vec::new();
        let r = retry_eagain(
            || {
                if failures > 0 {
                    failures -= 1;
                    Err(eagain())
                } else {
                    Ok(7)
                }
            },
            |d| slept.push(d),
        );
        assert_eq!(r.ok(), Some(7));
        assert_eq!(slept, [5, 10, 20].map(Duration::from_millis));
    }

    #[test]
    fn eagain_gives_up_after_the_last_wait_with_the_kernels_answer() {
        let mut calls = 0;
        let mut slept = Duration::ZERO;
        let r: io::Result<()> = retry_eagain(
            || {
                calls += 1;
                Err(eagain())
            },
            |d| slept += d,
        );
        assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::EAGAIN));
        assert_eq!(calls, 7);
        assert_eq!(slept, Duration::from_millis(315));
    }

    #[test]
    fn other_errors_are_not_retried() {
        let mut calls = 0;
        let r: io::Result<()> = retry_eagain(
            || {
                calls += 1;
                Err(io::Error::from_raw_os_error(libc::ENOMEM))
            },
            |_| panic!("slept on ENOMEM"),
        );
        assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::ENOMEM));
        assert_eq!(calls, 1);
    }
}
