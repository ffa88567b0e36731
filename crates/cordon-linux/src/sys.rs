//! The narrow syscall layer: thin, checked wrappers over `libc`, each `unsafe` justified.
//!
//! Written by hand because the sandbox needs a few calls that the safe crates do not offer in
//! the form required here (`fork` and `clone` in a known single-threaded process, `setgroups`, mounts with
//! arbitrary flag sets and data, `wait4` with resource usage, SCM_RIGHTS on a seqpacket pair).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

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

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare only changes this process's namespaces; callers are single-threaded.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    let fs = fstype.map(CString::new).transpose()?;
    let dat = data.map(CString::new).transpose()?;
    // SAFETY: every pointer is either null or a valid NUL-terminated string that outlives the call.
    cvt(unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            dat.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    })
    .map(drop)
}

pub fn umount_detach(target: &Path) -> io::Result<()> {
    let t = cstr(target)?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let n = cstr(new_root)?;
    let o = cstr(put_old)?;
    // SAFETY: valid C strings; pivot_root has no libc wrapper.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) };
    cvt(ret as libc::c_int).map(drop)
}

/// The file system type (statfs `f_type`, e.g. `CGROUP_SUPER_MAGIC`) of the mount holding
/// `path`, following symlinks.
pub fn fs_type(path: &Path) -> io::Result<i64> {
    let p = cstr(path)?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: st is a valid out-pointer of the right type.
    cvt(unsafe { libc::statfs(p.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statfs succeeded and filled the struct.
    let f_type = unsafe { st.assume_init() }.f_type;
    // Its width differs across architectures (i64 here, u32 or i32 elsewhere).
    #[allow(clippy::unnecessary_cast)]
    Ok(f_type as i64)
}

/// Flags of the mount that holds `path` (`ST_RDONLY`, `ST_NOSUID`, …).
pub fn statvfs_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let p = cstr(path)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: st is a valid out-pointer of the right type.
    cvt(unsafe { libc::statvfs(p.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded and filled the struct.
    Ok(unsafe { st.assume_init() }.f_flag)
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

pub fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: pointer and length describe `name`.
    cvt(unsafe { libc::sethostname(name.as_ptr() as *const libc::c_char, name.len()) }).map(drop)
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

/// Marks every fd from `first` upward close-on-exec, so nothing leaks into the payload.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on fds.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret == 0 {
        return Ok(());
    }
    // Fallback for kernels without close_range: walk /proc/self/fd.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &RawFd| *fd >= first as RawFd)
        .collect();
    for fd in fds {
        // SAFETY: setting FD_CLOEXEC on an fd number is harmless even if it was just closed.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
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

/// Closes the fd number `fd` without an owner's say: for a forked child dropping its copy of
/// an fd that its parent's code owns.
///
/// # Safety
/// Nothing in this process may use `fd` afterwards.
pub unsafe fn close_raw(fd: RawFd) {
    // SAFETY: the caller guarantees the fd is not used again here.
    unsafe { libc::close(fd) };
}

/// Closes `fd` and reports the error that dropping it would swallow (some file systems report
/// a full disk only there). rustix's close returns nothing.
pub fn close_checked(fd: OwnedFd) -> io::Result<()> {
    let raw = fd.into_raw_fd();
    // SAFETY: `raw` came from into_raw_fd, so it is open and owned by nothing else; after
    // close it is gone whatever the result (Linux never leaves it open on EINTR).
    cvt(unsafe { libc::close(raw) }).map(drop)
}

/// Async-signal-safe (a plain syscall), so it may run between fork and exec.
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: plain integers; dup2 clears CLOEXEC on `to`, which is what stdio needs.
    cvt(unsafe { libc::dup2(from, to) }).map(drop)
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

/// Reads exactly `buf.len()` bytes (a few, from a pipe); false at end of file or on error.
pub fn read_exact(fd: RawFd, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of a valid buffer.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        match n {
            n if n > 0 => got += n as usize,
            -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return false,
        }
    }
    true
}

pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes one small message whole (a few bytes to a pipe: never partial).
pub fn write_all(fd: RawFd, data: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: writing from a valid buffer of the given length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n == data.len() as isize {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if n >= 0 || e.raw_os_error() != Some(libc::EINTR) {
            return Err(if n >= 0 {
                io::ErrorKind::WriteZero.into()
            } else {
                e
            });
        }
    }
}

/// Blocks for one byte; `None` at end of file or on error.
pub fn read_byte(fd: RawFd) -> Option<u8> {
    let mut b = 0u8;
    loop {
        // SAFETY: reading one byte into a valid local.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        match n {
            1 => return Some(b),
            -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return None,
        }
    }
}

pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // Room for large messages (see channel::MAX_MESSAGE); best effort, capped by wmem_max.
    for fd in fds {
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            let size: libc::c_int = 1 << 20;
            // SAFETY: setsockopt with a pointer to a live c_int of the stated size.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &size as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
        }
    }
    // SAFETY: socketpair returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an fd we own.
    let fl = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
}

/// Most fds one message carries. The init's `Confined` carries the most: four scratch
/// filesystems and, without a cgroup, its /proc — at 4, a rootless run's report was refused
/// ("too many fds") and its `enforcement` came out all false.
pub const MAX_FDS: usize = 8;

/// Sends one datagram, carrying up to [`MAX_FDS`] fds.
pub fn send_packet(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr is plain data; zeroed is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        // SAFETY: msg_control points at CMSG_SPACE(payload) bytes, so the first header and
        // `fds.len()` fds fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as usize;
            let data = libc::CMSG_DATA(cmsg) as *mut RawFd;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), *fd);
            }
        }
    }
    loop {
        // SAFETY: msg and everything it points to are valid for the call.
        let ret = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if ret >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Waits for the next datagram and returns its full length without consuming it (0 at EOF).
pub fn peek_packet_len(sock: RawFd) -> io::Result<usize> {
    let mut reset_seen = false;
    loop {
        // SAFETY: a zero-length read into no buffer; MSG_TRUNC makes the kernel report the
        // datagram's real length, MSG_PEEK leaves it (and any fds it carries) queued.
        let ret = unsafe {
            libc::recv(
                sock,
                std::ptr::null_mut(),
                0,
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let e = io::Error::last_os_error();
        // A peer that closed with messages of ours unread (an init that failed before reading
        // `Go`) leaves ECONNRESET on our socket, and the kernel reports it before what the
        // peer sent first — its setup report, lost about one run in twelve. Reporting the
        // error clears it: ask once more.
        if e.raw_os_error() == Some(libc::ECONNRESET) && !reset_seen {
            reset_seen = true;
            continue;
        }
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Receives one datagram into `buf`; returns its length (0 at EOF) and the fds it carried.
pub fn recv_packet(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((std::mem::size_of::<RawFd>() * MAX_FDS) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: zeroed msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space;
    let n = loop {
        // SAFETY: msg points at valid buffers; MSG_CMSG_CLOEXEC keeps received fds from leaking.
        let ret = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if ret >= 0 {
            break ret as usize;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    };
    let mut received = Vec::new();
    // SAFETY: walking the control buffer the kernel filled, with the CMSG_* helpers; every fd
    // in an SCM_RIGHTS message is new and ours to own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let count =
                    ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    received.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, received, msg.msg_flags & libc::MSG_TRUNC != 0))
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

/// Brings the loopback interface up (a fresh network namespace starts with it down).
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket only for the interface ioctls; closed by OwnedFd.
    let sock =
        cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd from socket().
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags union member of a valid ifreq.
    unsafe {
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

/// A poll entry asking for `events` on `fd` (an fd of -1 is an entry poll skips).
pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: fds is a valid slice of pollfd.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if ret == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(ret as usize)
}

/// Whether this process may create entries in `dir` (access(2) with W_OK: it honours
/// read-only mounts, and for root only those).
pub fn writable(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path and a flag constant.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

pub fn write_file(path: &Path, data: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
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

/// Closes every fd except 0-2 and `keep` (close_range over the gaps; /proc/self/fd fallback).
pub fn close_fds_except(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut start: u32 = 3;
    let mut ranges = Vec::new();
    for k in &keep {
        if (*k as u32) > start {
            ranges.push((start, *k as u32 - 1));
        }
        start = *k as u32 + 1;
    }
    ranges.push((start, u32::MAX));
    for (lo, hi) in ranges {
        // SAFETY: close_range only closes fds in [lo, hi]; none of them is in use by Rust
        // objects we keep (callers pass every fd they still need in `keep`).
        let ret = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
        if ret != 0 {
            let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|fd: &RawFd| *fd as u32 >= lo && (*fd as u32) <= hi)
                .collect();
            for fd in fds {
                // SAFETY: as above.
                unsafe { libc::close(fd) };
            }
        }
    }
    Ok(())
}

// New mount API (Linux 5.12+ for idmapped mounts). libc has the syscall numbers but not all
// the constants and structs; these are the kernel's uapi values (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cpath(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A detached copy of the mount at `path` (not recursive, like MS_BIND), close-on-exec.
pub fn open_tree_clone(path: &Path) -> io::Result<OwnedFd> {
    let c = cpath(path)?;
    // SAFETY: valid NUL-terminated path and flag constants; a non-negative result is a new fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// Makes the detached mount `tree` idmapped through `userns` (and nosuid, nodev).
pub fn idmap_tree(tree: &OwnedFd, userns: &OwnedFd) -> io::Result<()> {
    idmap_tree_with(tree, userns, false)
}

/// [`idmap_tree`], and read-only too with `readonly`.
pub fn idmap_tree_with(tree: &OwnedFd, userns: &OwnedFd, readonly: bool) -> io::Result<()> {
    let ro = if readonly { MOUNT_ATTR_RDONLY } else { 0 };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | ro,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid fd, an empty path with AT_EMPTY_PATH, and a pointer to a mount_attr of
    // the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `MOUNT_ATTR_RDONLY`, `_NOSUID`, `_NODEV`, `_NOEXEC`, from the `MS_*` flags of the same
/// meaning.
pub fn mount_attr_from_ms(flags: libc::c_ulong) -> u64 {
    [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ]
    .iter()
    .filter(|(ms, _)| flags & ms != 0)
    .fold(0, |acc, (_, attr)| acc | attr)
}

/// Adds `attr_set` (`MOUNT_ATTR_*`) to the mount `at` holds (its root) and every mount
/// beneath it, in one call (`AT_RECURSIVE`; Linux 5.12+, `ENOSYS` before). Flags are only
/// added, so a lock the kernel holds on a flag is never in the way.
pub fn mount_setattr_recursive(at: BorrowedFd<'_>, attr_set: u64) -> io::Result<()> {
    const AT_RECURSIVE: libc::c_int = 0x8000;
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a valid fd with an empty path (AT_EMPTY_PATH) and a pointer to a mount_attr of
    // the size passed, both alive for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            at.as_raw_fd(),
            c"".as_ptr(),
            AT_RECURSIVE | libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached mount `tree` on the directory `dest` holds.
pub fn move_mount_to(tree: RawFd, dest: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: two valid fds, each with an empty path (F_EMPTY_PATH, T_EMPTY_PATH).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            dest.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What std's runtime does before `main` that cordon relies on, for a binary that skips that
/// runtime (`#![no_main]`; see the cordon binary's entry point for why): fds 0-2 are open
/// (on /dev/null if the caller closed them, so that no pipe or socket of ours lands on them
/// and gets mistaken for stdio), and SIGPIPE is ignored (a write to a reader that left fails
/// with EPIPE, which the supervisor and the server handle, instead of killing cordon).
pub fn process_start() {
    let mut fds = [0, 1, 2].map(|fd| pollfd(fd, 0));
    // Nothing can be done about a failing poll this early; std ignores it too.
    let _ = poll(&mut fds, 0);
    for p in fds {
        if p.revents & libc::POLLNVAL != 0 {
            // SAFETY: a constant NUL-terminated path; the fd returned is the lowest free one,
            // which is `p.fd` since it is closed, and it is meant to stay open for good.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
    // SAFETY: installs SIG_IGN, which involves no handler code in this process.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Defines the C `main` of a `#![no_main]` binary, which glibc's start code calls: it runs
/// [`process_start`], then `$run` (a `fn() -> i32` returning the exit status) with a panic
/// reported as exit 101 instead of an abort, and flushes stdout on the way out — what std's
/// `main` would add. std still has the arguments (glibc hands them to std's own .init_array
/// hook) and the allocator.
///
/// A macro so that the one `unsafe` attribute this takes (`no_mangle`: the symbol `main` must
/// be this function and nothing else's) is written here, in the engine, the one crate allowed
/// `unsafe`, and not in the binary, which forbids it.
#[macro_export]
macro_rules! c_main {
    ($run:path) => {
        // SAFETY: `main` is defined once per binary (a second definition fails to link), and
        // a `#![no_main]` binary leaves the symbol to us.
        #[unsafe(no_mangle)]
        pub extern "C" fn main(
            _argc: ::std::ffi::c_int,
            _argv: *const *const ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            $crate::process_start();
            let code = ::std::panic::catch_unwind($run).unwrap_or(101);
            let _ = ::std::io::Write::flush(&mut ::std::io::stdout());
            code
        }
    };
}

/// A statically linked cordon (the release build, see scripts/build-release.sh) resolves names
/// with glibc's built-in `files` and `dns` sources only. Anything else nsswitch.conf lists
/// (nss-resolve, mdns, …) would be dlopen'ed from the system into cordon — code built against
/// whatever glibc the host has now, not the one linked into cordon, which glibc does not
/// support. The egress proxy is the only user of the name service, and /etc/hosts plus
/// resolv.conf's servers is all it needs.
///
/// Call it before the first name lookup, while no other thread can be resolving: the
/// commands that may start an egress proxy do, first thing. Not at every start: glibc reads
/// nsswitch.conf when asked, and most runs never resolve a name. Later calls do nothing.
pub fn pin_name_service() {
    #[cfg(all(target_env = "gnu", target_feature = "crt-static"))]
    {
        unsafe extern "C" {
            // glibc's own (exported, long-standing) way to set one database's sources.
            fn __nss_configure_lookup(
                db: *const std::ffi::c_char,
                line: *const std::ffi::c_char,
            ) -> std::ffi::c_int;
        }
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: two constant NUL-terminated strings; the caller guarantees no lookup runs
        // concurrently, and `ONCE` that it happens once.
        ONCE.call_once(|| unsafe {
            __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
        });
    }
}

/// Every process below `root` (children, their children, …), read from the host's /proc. A
/// process that ends or forks meanwhile is missed: callers kill, reap and ask again until
/// nothing is left (a subreaper's tree cannot leave it, so the loop ends).
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    // Each task's `children` file (CONFIG_PROC_CHILDREN) names its children: a walk of the
    // tree alone, instead of reading every process of the host.
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        match children_of(found[i]) {
            Some(kids) => {
                for k in kids {
                    if !found.contains(&k) {
                        found.push(k);
                    }
                }
            }
            None if i == 0 => return descendants_by_scan(root),
            // Ended meanwhile: its children come to the subreaper, seen on the next call.
            None => {}
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// The children of every thread of `pid`, or None where /proc has no `children` files.
fn children_of(pid: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    let mut kids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).ok()?;
        kids.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
    }
    Some(kids)
}

/// [`descendants`] from every process's `stat` (its parent), where `children` is missing.
fn descendants_by_scan(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses; the last ')' ends it.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<libc::pid_t>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for (pid, ppid) in &parent_of {
            if *ppid == p && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// SIGKILLs every process below `root` (see [`descendants`]) once; says how many it found.
/// Callers reap and ask again until none is left.
pub fn kill_descendants(root: libc::pid_t) -> usize {
    let below = descendants(root);
    for pid in &below {
        let _ = kill(*pid, libc::SIGKILL);
    }
    below.len()
}

/// Kills and reaps every process below the calling process, a subreaper whose other children
/// are all gone, until none is left: a tree without a pid namespace to end it all at once
/// (each kill hands the victim's children to us for the next round, and a fork bomb runs out
/// of processes that have not been killed yet).
pub fn end_descendants() {
    let me = getpid();
    for _ in 0..100_000 {
        let found = kill_descendants(me);
        let mut reaped = false;
        while let Ok(Some(_)) = wait4(-1, true) {
            reaped = true;
        }
        if found == 0 && !reaped {
            return;
        }
        if !reaped {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// How many tasks (threads included, as RLIMIT_NPROC counts them) run under real uid `uid` in
/// this process's user namespace: the kernel checks the limit against that namespace's count
/// (a task of the same uid number in another user namespace is another user). The namespace
/// is told by its uid map as this process reads it (the kernel shows each map relative to the
/// reader), not by `/proc/PID/ns/user`, which needs ptrace access — which Landlock refuses
/// outside the sandbox's own domain. A task whose map cannot be read is counted.
pub fn tasks_of_uid(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let own_ns = std::fs::read("/proc/self/uid_map").ok();
    let mut n = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(|s| s.parse::<u32>().ok()).is_none() {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let real = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok());
        let elsewhere = || match (&own_ns, std::fs::read(entry.path().join("uid_map"))) {
            (Some(own), Ok(theirs)) => *own != theirs,
            _ => false,
        };
        if real == Some(uid) && !elsewhere() {
            n += entry
                .path()
                .join("task")
                .read_dir()
                .map_or(1, |d| d.count() as u64);
        }
    }
    n
}

/// A new pseudo-terminal pair from `/dev/ptmx` (inside a sandbox: its own devpts instance),
/// both ends close-on-exec, the master not becoming anyone's controlling terminal. The slave is
/// opened through the master (`TIOCGPTPEER`), so no path lookup can hand us another one.
pub fn open_pty(rows: u16, cols: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: a constant NUL-terminated path; the result is checked.
    let m = cvt(unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: open returned a fresh fd that we now own.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a valid pointer.
    cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd.
    let s = cvt(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the ioctl returned a fresh fd that we now own.
    let slave = unsafe { OwnedFd::from_raw_fd(s) };
    set_winsize(master.as_raw_fd(), rows, cols)?;
    Ok((master, slave))
}

/// Sets a terminal's window size (either end of a pty pair).
pub fn set_winsize(fd: RawFd, rows: u16, cols: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(drop)
}

/// Makes the terminal on `fd` the controlling terminal of this process's (new) session.
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an int by value (0: do not steal it from another session).
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
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
