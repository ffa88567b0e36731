//! Learn mode's view of the programs a run executes: a seccomp filter of its own, stacked on
//! the sandbox's, that hands every `execve`/`execveat` to a listener (seccomp user
//! notification); the supervisor reads the path from the caller's memory, records it, and
//! answers `SECCOMP_USER_NOTIF_FLAG_CONTINUE`, so the kernel then runs the call exactly as
//! without learning — Landlock, the other filters and the programs allowlist still decide.
//!
//! Threat model: the path is read from hostile memory after the fact (another thread may change
//! it before the kernel reads it: a TOCTOU a learner accepts, since nothing is enforced from
//! what is read here). Only what exists as an executable regular file in the sandbox (looked up
//! through `/proc/PID/root`) is recorded; a read is capped at `PATH_MAX`. If the supervisor is
//! gone, the kernel answers the call `ENOSYS`: learning fails closed, never open.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// `_IOWR('!', 0, struct seccomp_notif)`: receive one notification.
const NOTIF_RECV: libc::c_ulong = 0xC050_2100;
/// `_IOWR('!', 1, struct seccomp_notif_resp)`: answer one.
const NOTIF_SEND: libc::c_ulong = 0xC018_2101;

/// Most programs one run records (a fork bomb of execs must not grow the supervisor).
const MAX_RECORDED: usize = 4096;

/// Installs the notifying filter on the calling thread (needs `no_new_privs`; before the
/// sandbox's own filter, which refuses `seccomp`). Returns the listener.
pub fn install_listener() -> io::Result<OwnedFd> {
    const LD_NR: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        ins(LD_NR, 0, 0, 0),
        ins(JEQ, 2, 0, libc::SYS_execve as u32),
        ins(JEQ, 1, 0, libc::SYS_execveat as u32),
        ins(RET, 0, 0, libc::SECCOMP_RET_ALLOW),
        ins(RET, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor (close-on-exec) that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Answers the listener's notifications until no task uses the filter any more; returns the
/// programs executed (sandbox paths) and, for a `#!` script, its interpreter.
pub fn serve(listener: OwnedFd) -> std::thread::JoinHandle<BTreeSet<PathBuf>> {
    std::thread::spawn(move || {
        let seen = Mutex::new(BTreeSet::new());
        answer(&listener, &seen);
        seen.into_inner().unwrap_or_default()
    })
}

/// As [`serve`], for a sandbox that stays up (persistent): the record is shared, readable
/// while it grows (each exec is in it before the kernel runs the call).
pub fn serve_shared(listener: OwnedFd) -> Arc<Mutex<BTreeSet<PathBuf>>> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let record = seen.clone();
    std::thread::spawn(move || answer(&listener, &record));
    seen
}

fn answer(listener: &OwnedFd, seen: &Mutex<BTreeSet<PathBuf>>) {
    loop {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 250) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if pfd.revents & libc::POLLIN != 0 {
            if let Some(path) = receive_and_continue(listener) {
                if let Ok(mut seen) = seen.lock() {
                    if seen.len() < MAX_RECORDED {
                        seen.extend(path);
                    }
                }
            }
            continue;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            break;
        }
    }
}

/// One notification: the path it names (and a script's interpreter), then the answer that
/// lets the kernel go on with the call.
fn receive_and_continue(listener: &OwnedFd) -> Option<Vec<PathBuf>> {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: NOTIF_RECV fills exactly a seccomp_notif.
    if unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_RECV as _, &mut req) } < 0 {
        return None;
    }
    let found = lookup(&req);
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: NOTIF_SEND reads exactly a seccomp_notif_resp. A failure (the caller died) needs
    // no answer.
    let _ = unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_SEND as _, &mut resp) };
    found
}

fn lookup(req: &libc::seccomp_notif) -> Option<Vec<PathBuf>> {
    let addr = if i64::from(req.data.nr) == libc::SYS_execveat {
        req.data.args[1]
    } else {
        req.data.args[0]
    };
    let mut path = read_path(req.pid, addr)?;
    // A relative path (`./task.sh`) is under the caller's working directory, which the kernel
    // shows from outside as its path in the sandbox's own root (the old root is gone after
    // pivot_root); checked below like any path: what does not exist there is not recorded.
    // Relative to another directory fd (`execveat`): not recorded.
    if !path.is_absolute() {
        let at_cwd =
            i64::from(req.data.nr) == libc::SYS_execve || req.data.args[0] as i32 == libc::AT_FDCWD;
        if !at_cwd {
            return None;
        }
        let cwd = std::fs::read_link(format!("/proc/{}/cwd", req.pid)).ok()?;
        path = lexical_join(&cwd, &path)?;
    }
    let root = PathBuf::from(format!("/proc/{}/root", req.pid));
    let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let meta = std::fs::metadata(inside(&path)).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return None;
    }
    let mut out = vec![path.clone()];
    if let Some(interp) = shebang(&inside(&path)) {
        out.push(interp);
    }
    Some(out)
}

/// `rel` under `dir`, `.` and `..` resolved by name (a `..` above the root: `None`).
fn lexical_join(dir: &Path, rel: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for c in dir.components().chain(rel.components()) {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The NUL-terminated string at `addr` in `pid`'s memory, at most `PATH_MAX` bytes.
fn read_path(pid: u32, addr: u64) -> Option<PathBuf> {
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < libc::PATH_MAX as usize {
        // Up to the page's end: the next page may not be mapped.
        let room = (4096 - (at % 4096)) as usize;
        let mut buf = vec![0u8; room.min(libc::PATH_MAX as usize - out.len())];
        let n = mem.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(PathBuf::from(std::ffi::OsString::from_vec(out)));
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// The interpreter a `#!` file names.
fn shebang(path: &Path) -> Option<PathBuf> {
    let f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 256];
    let n = f.read_at(&mut head, 0).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    let first = text.split_whitespace().next()?;
    first.starts_with('/').then(|| PathBuf::from(first))
}
