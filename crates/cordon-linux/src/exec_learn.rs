//! Learn mode's view of what a run executes and which files it asks for: a seccomp filter of
//! its own, stacked on the sandbox's, that hands every `execve`/`execveat` and every call naming
//! a path to open, create, remove, rename or look at (`open`, `openat`, `openat2`, `creat`,
//! `mkdir(at)`, `unlink(at)`, `rmdir`, `rename(at,at2)`, `stat`, `lstat`, `newfstatat`, `statx`,
//! `access`, `faccessat(2)`) to a listener (seccomp user notification); the
//! supervisor reads the path from the caller's memory (`process_vm_readv`), records it, and answers
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`, so the kernel then runs the call exactly as without
//! learning — Landlock, the mounts, the other filters and the programs allowlist still decide.
//! A path is recorded as a file need only if the sandbox lacks it (looked up through
//! `/proc/PID/root` before the call runs) and the host has it: what the starting profile
//! grants and what the run creates in its own scratch space are not needs.
//!
//! Threat model: the path is read from hostile memory after the fact (another thread may change
//! it before the kernel reads it: a TOCTOU a learner accepts, since nothing is enforced from
//! what is read here — a program can make the learned profile name any path, which is why the
//! file is for review). Only what exists as an executable regular file in the sandbox is
//! recorded as a program; a read is capped at `PATH_MAX`, the records at [`MAX_RECORDED`]. If
//! the supervisor is gone, the kernel answers the call `ENOSYS`: learning fails closed, never
//! open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cordon_policy::outcome::{FileAccess, FileUse};

/// `_IOWR('!', 0, struct seccomp_notif)`: receive one notification.
const NOTIF_RECV: libc::c_ulong = 0xC050_2100;
/// `_IOWR('!', 1, struct seccomp_notif_resp)`: answer one.
const NOTIF_SEND: libc::c_ulong = 0xC018_2101;

/// `_IOW('!', 4, __u64)`: set the listener's flags.
const NOTIF_SET_FLAGS: libc::c_ulong = 0x4008_2104;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`.
const SYNC_WAKE_UP: u64 = 1;

/// Most programs, and most file needs, one run records (a fork bomb of execs or a loop of
/// opens must not grow the supervisor).
const MAX_RECORDED: usize = 4096;

/// What a learning run was seen to do.
#[derive(Debug, Default)]
pub struct Observed {
    /// Programs executed (sandbox paths) and `#!` interpreters.
    pub executed: BTreeSet<PathBuf>,
    /// File needs beyond the sandbox, the first program to have each.
    pub files: Vec<FileAccess>,
}

/// The system calls notified, by number (besides `newfstatat` and `statx` naming a path).
fn notified() -> Vec<libc::c_long> {
    let common = [
        libc::SYS_execve,
        libc::SYS_execveat,
        libc::SYS_openat,
        libc::SYS_openat2,
        libc::SYS_mkdirat,
        libc::SYS_unlinkat,
        libc::SYS_renameat,
        libc::SYS_renameat2,
        libc::SYS_faccessat,
        libc::SYS_faccessat2,
    ];
    // The legacy path calls exist on x86_64 only.
    #[cfg(target_arch = "x86_64")]
    let legacy = [
        libc::SYS_stat,
        libc::SYS_lstat,
        libc::SYS_access,
        libc::SYS_open,
        libc::SYS_creat,
        libc::SYS_mkdir,
        libc::SYS_unlink,
        libc::SYS_rmdir,
        libc::SYS_rename,
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let legacy: [libc::c_long; 0] = [];
    [&common[..], &legacy[..]].concat()
}

/// Installs the notifying filter on the calling thread (needs `no_new_privs`; before the
/// sandbox's own filter, which refuses `seccomp`). Returns the listener.
pub fn install_listener() -> io::Result<OwnedFd> {
    const LD_NR: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LD_ARG: u16 = LD_NR;
    const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    // The low half of argument `i` (little-endian: the first 4 of its 8 bytes).
    let arg = |i: u32| 16 + 8 * i;
    let nrs = notified();
    let n = nrs.len();
    // [nr] [JEQ each → NOTIFY] [JEQ newfstatat → NF] [JEQ statx → SX] [ALLOW] [NOTIFY] [NF]
    // [SX]: a stat of an fd (AT_EMPTY_PATH, as glibc's fstat) names no path and is let by.
    let mut prog = vec![ins(LD_NR, 0, 0, 0)];
    for (i, nr) in nrs.iter().enumerate() {
        prog.push(ins(JEQ, (n + 2 - i) as u8, 0, *nr as u32));
    }
    prog.push(ins(JEQ, 3, 0, libc::SYS_newfstatat as u32));
    prog.push(ins(JEQ, 6, 0, libc::SYS_statx as u32));
    prog.push(ins(RET, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog.push(ins(RET, 0, 0, libc::SECCOMP_RET_USER_NOTIF));
    for flags_arg in [3, 2] {
        prog.push(ins(LD_ARG, 0, 0, arg(flags_arg)));
        prog.push(ins(JSET, 0, 1, libc::AT_EMPTY_PATH as u32));
        prog.push(ins(RET, 0, 0, libc::SECCOMP_RET_ALLOW));
        prog.push(ins(RET, 0, 0, libc::SECCOMP_RET_USER_NOTIF));
    }
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

/// Answers the listener's notifications until no task uses the filter any more; returns what
/// the run was seen to do.
pub fn serve(listener: OwnedFd) -> std::thread::JoinHandle<Observed> {
    let sync = wake_synchronously(&listener);
    std::thread::spawn(move || {
        let mut seen = Observed::default();
        let mut files: BTreeMap<(PathBuf, FileUse), FileAccess> = BTreeMap::new();
        answer(&listener, sync, |found| {
            if seen.executed.len() < MAX_RECORDED {
                seen.executed.extend(found.executed);
            }
            for f in found.files {
                if files.len() < MAX_RECORDED {
                    files.entry((f.path.clone(), f.how)).or_insert(f);
                }
            }
        });
        seen.files = files.into_values().collect();
        seen
    })
}

/// What a persistent sandbox's commands were seen to do so far, each file need once (the
/// first program to have it).
#[derive(Debug, Default)]
pub struct Learned {
    pub executed: BTreeSet<PathBuf>,
    pub files: BTreeMap<(PathBuf, FileUse), FileAccess>,
}

/// As [`serve`], for a sandbox that stays up (persistent): the record of programs and file
/// needs is shared, readable while it grows (each call is in it before the kernel runs it).
pub fn serve_shared(listener: OwnedFd) -> Arc<Mutex<Learned>> {
    let sync = wake_synchronously(&listener);
    let seen = Arc::new(Mutex::new(Learned::default()));
    let record = seen.clone();
    std::thread::spawn(move || {
        answer(&listener, sync, |found| {
            if let Ok(mut seen) = record.lock() {
                if seen.executed.len() < MAX_RECORDED {
                    seen.executed.extend(found.executed);
                }
                for f in found.files {
                    if seen.files.len() < MAX_RECORDED {
                        seen.files.entry((f.path.clone(), f.how)).or_insert(f);
                    }
                }
            }
        })
    });
    seen
}

/// Kernel 6.6+: the caller's wake-up switches straight to the answering thread (and back), the
/// round trip of a notification without a trip through the scheduler; older kernels refuse
/// the flag and keep the ordinary wake-up (`false`).
fn wake_synchronously(listener: &OwnedFd) -> bool {
    let flags: u64 = SYNC_WAKE_UP;
    // SAFETY: SET_FLAGS reads one u64 by value.
    unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_SET_FLAGS as _, flags) == 0 }
}

/// Answers every notification with "continue", handing what each showed to `record`, until no
/// task uses the filter any more.
///
/// `blocking` (a kernel that took [`SYNC_WAKE_UP`], 6.6+): the thread waits in `NOTIF_RECV`
/// itself, which those kernels end (`ENOENT`) once the filter has no task left, the same
/// moment `poll` would see `POLLHUP`; one system call less per notification than a `poll`
/// first. Older kernels can leave a waiting `NOTIF_RECV` asleep after the last task is gone:
/// they are polled.
fn answer(listener: &OwnedFd, blocking: bool, mut record: impl FnMut(Observed)) {
    let mut decided = HashMap::new();
    if blocking {
        loop {
            match receive_and_continue(listener, &mut decided) {
                Ok(found) => record(found),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // No notification: the filter has no task left, or the caller was killed
                // between its wake-up and ours (then there are tasks, and we wait again).
                Err(_) => {
                    if orphaned(listener) {
                        break;
                    }
                }
            }
        }
        return;
    }
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
            if let Ok(found) = receive_and_continue(listener, &mut decided) {
                record(found);
            }
            continue;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            break;
        }
    }
}

/// Whether no task uses the listener's filter any more (`POLLHUP`), without waiting.
fn orphaned(listener: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted
        || pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// One notification: what it shows, then the answer that lets the kernel go on with the call.
/// What is looked at before answering is the state before the call.
fn receive_and_continue(listener: &OwnedFd, decided: &mut Decided) -> io::Result<Observed> {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: NOTIF_RECV fills exactly a seccomp_notif.
    if unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_RECV as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let found = lookup(&req, decided);
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: NOTIF_SEND reads exactly a seccomp_notif_resp. A failure (the caller died) needs
    // no answer.
    let _ = unsafe { libc::ioctl(listener.as_raw_fd(), NOTIF_SEND as _, &mut resp) };
    Ok(found)
}

/// What a call asks of one path.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Asks {
    Exec,
    /// `access(X_OK)`: a program looked for before it is run (collect2 finding `ld`), which a
    /// programs allowlist would answer "no" so that it is never run, nor learned.
    Probe,
    Read,
    Write,
}

impl Asks {
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The paths already looked at, each with the [`Asks::bit`]s it was looked at for.
type Decided = HashMap<PathBuf, u8>;

/// The paths a call names: (directory fd or `AT_FDCWD`, address of the path, what it asks).
fn named(req: &libc::seccomp_notif) -> Vec<(i32, u64, Asks)> {
    let a = req.data.args;
    let nr = libc::c_long::from(req.data.nr);
    let cwd = libc::AT_FDCWD;
    let open = |flags: u64| {
        let f = flags as libc::c_int;
        // O_TMPFILE includes O_DIRECTORY's bit: only both together make a file.
        let writes = f & libc::O_ACCMODE != libc::O_RDONLY
            || f & (libc::O_CREAT | libc::O_TRUNC) != 0
            || f & libc::O_TMPFILE == libc::O_TMPFILE;
        if writes {
            Asks::Write
        } else {
            Asks::Read
        }
    };
    let access = |mode: u64| {
        if mode as libc::c_int & libc::X_OK != 0 {
            Asks::Probe
        } else {
            Asks::Read
        }
    };
    #[cfg(target_arch = "x86_64")]
    {
        match nr {
            libc::SYS_open => return vec![(cwd, a[0], open(a[1]))],
            libc::SYS_creat | libc::SYS_mkdir | libc::SYS_unlink | libc::SYS_rmdir => {
                return vec![(cwd, a[0], Asks::Write)]
            }
            libc::SYS_rename => return vec![(cwd, a[0], Asks::Write), (cwd, a[1], Asks::Write)],
            libc::SYS_stat | libc::SYS_lstat => return vec![(cwd, a[0], Asks::Read)],
            libc::SYS_access => return vec![(cwd, a[0], access(a[1]))],
            _ => {}
        }
    }
    match nr {
        libc::SYS_execve => vec![(cwd, a[0], Asks::Exec)],
        libc::SYS_execveat => vec![(a[0] as i32, a[1], Asks::Exec)],
        libc::SYS_openat => vec![(a[0] as i32, a[1], open(a[2]))],
        // `struct open_how` begins with its flags (u64).
        libc::SYS_openat2 => match read_u64(req.pid, a[2]) {
            Some(flags) => vec![(a[0] as i32, a[1], open(flags))],
            None => Vec::new(),
        },
        libc::SYS_mkdirat | libc::SYS_unlinkat => vec![(a[0] as i32, a[1], Asks::Write)],
        // A path that is only looked at (a compiler's include directory, a repository found
        // by its `.git`) is needed as much as one opened.
        libc::SYS_newfstatat | libc::SYS_statx => vec![(a[0] as i32, a[1], Asks::Read)],
        libc::SYS_faccessat | libc::SYS_faccessat2 => vec![(a[0] as i32, a[1], access(a[2]))],
        libc::SYS_renameat | libc::SYS_renameat2 => vec![
            (a[0] as i32, a[1], Asks::Write),
            (a[2] as i32, a[3], Asks::Write),
        ],
        _ => Vec::new(),
    }
}

/// Most (path, what was asked) pairs remembered as looked at; then the memory starts over.
const MAX_DECIDED: usize = 65536;

fn lookup(req: &libc::seccomp_notif, decided: &mut Decided) -> Observed {
    let mut out = Observed::default();
    for (dirfd, addr, asks) in named(req) {
        let Some(path) = resolve(req.pid, dirfd, addr) else {
            continue;
        };
        // A build opens the same libraries and headers thousands of times: each pair is
        // looked at once (what it showed is recorded already), which keeps the round trip
        // short. A path that appears or goes later is not looked at again: learning may miss
        // it, never change what the call does.
        // (Looked up before inserting: the path is cloned for the map only when new.)
        match decided.get_mut(&path) {
            Some(bits) if *bits & asks.bit() != 0 => continue,
            Some(bits) => *bits |= asks.bit(),
            None => {
                if decided.len() >= MAX_DECIDED {
                    decided.clear();
                }
                decided.insert(path.clone(), asks.bit());
            }
        }
        let root = PathBuf::from(format!("/proc/{}/root", req.pid));
        let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
        if asks == Asks::Exec || asks == Asks::Probe {
            if let Some(progs) = program(&inside(&path), &path) {
                out.executed.extend(progs);
                continue;
            }
        }
        if let Some(how) = need(&path, asks, &inside) {
            out.files.push(FileAccess {
                path: how.0,
                is_dir: how.1,
                how: how.2,
                program: comm(req.pid),
            });
        }
    }
    out
}

/// The path a call names, absolute in the sandbox: a relative one is under the caller's
/// working directory or its directory fd, which the kernel shows from outside as their paths in
/// the sandbox's own root (the old root is gone after pivot_root).
fn resolve(pid: u32, dirfd: i32, addr: u64) -> Option<PathBuf> {
    let path = read_path(pid, addr)?;
    if path.is_absolute() {
        return Some(path);
    }
    let dir = if dirfd == libc::AT_FDCWD {
        std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?
    } else if dirfd >= 0 {
        std::fs::read_link(format!("/proc/{pid}/fd/{dirfd}")).ok()?
    } else {
        return None;
    };
    if !dir.is_absolute() {
        return None;
    }
    lexical_join(&dir, &path)
}

/// A program executed: the path (and a script's interpreter), if it is an executable regular
/// file in the sandbox.
fn program(inside: &Path, path: &Path) -> Option<Vec<PathBuf>> {
    let meta = std::fs::metadata(inside).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return None;
    }
    let mut out = vec![path.to_path_buf()];
    if let Some(interp) = shebang(inside) {
        out.push(interp);
    }
    Some(out)
}

/// What the host must grant for `path` to be there as the call asks, if the sandbox lacks it:
/// (host path, is a directory, how). A read or exec needs the path itself, where the sandbox
/// has no such name and the host has; a write needs the directory it is made in, where the
/// sandbox has none or only a read-only one — the nearest directory the host has.
fn need(
    path: &Path,
    asks: Asks,
    inside: &dyn Fn(&Path) -> PathBuf,
) -> Option<(PathBuf, bool, FileUse)> {
    let in_sandbox = std::fs::symlink_metadata(inside(path)).is_ok();
    match asks {
        Asks::Read | Asks::Exec | Asks::Probe => {
            if in_sandbox {
                return None;
            }
            let host = std::fs::metadata(path).ok()?;
            let how = if asks != Asks::Read {
                FileUse::Exec
            } else {
                FileUse::Read
            };
            Some((path.to_path_buf(), host.is_dir(), how))
        }
        Asks::Write => {
            let dir = path.parent()?;
            let present = if in_sandbox { path } else { dir };
            let writable = std::fs::symlink_metadata(inside(present)).is_ok()
                && crate::sys::statvfs_flags(&inside(present))
                    .is_ok_and(|f| f & libc::ST_RDONLY == 0);
            if writable {
                return None;
            }
            let host = dir
                .ancestors()
                .find(|d| std::fs::metadata(d).is_ok_and(|m| m.is_dir()))?;
            Some((host.to_path_buf(), true, FileUse::Write))
        }
    }
}

/// The caller's `comm` (its own choice of name: hostile text, cut by the learner).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The 8 bytes at `addr` in `pid`'s memory.
fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (read_mem(pid, addr, &mut b)? == 8).then(|| u64::from_ne_bytes(b))
}

/// Up to `buf.len()` bytes at `addr` in `pid`'s memory (one system call, no file to open:
/// this runs once per notified call), as many as were readable.
fn read_mem(pid: u32, addr: u64, buf: &mut [u8]) -> Option<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, alive and writable for the call; `remote` is only an
    // address in the other process, which the kernel checks (and may refuse: `-1`).
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    usize::try_from(n).ok().filter(|n| *n > 0)
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
    let mut out = Vec::new();
    let mut at = addr;
    let mut buf = [0u8; 4096];
    // Most paths are short: a first read of up to 256 bytes copies less of the caller's page.
    let mut chunk = 256;
    while out.len() < libc::PATH_MAX as usize {
        // Up to the page's end: the next page may not be mapped.
        let room = (4096 - (at % 4096)) as usize;
        let want = room.min(chunk).min(libc::PATH_MAX as usize - out.len());
        chunk = 4096;
        let n = read_mem(pid, at, &mut buf[..want])?;
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
