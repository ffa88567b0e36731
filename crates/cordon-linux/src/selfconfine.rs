//! Confinement a process puts on itself, with no sandbox around it: what cordon's WebAssembly
//! runtime holds while it loads, compiles and runs a guest. A guest makes no syscall of its
//! own (it reaches the host only through WASI), so the process sandbox's namespaces buy it
//! little and cost more than the whole run; these layers are for a bug in the runtime itself:
//! - no privileges: as root, a plain uid first ([`drop_to`]); `no_new_privs`, every
//!   capability dropped;
//! - rlimits: file size, open files, no core dumps, and a data-segment cap for the runtime;
//! - Landlock: read only what it is given, write only what it is given, and (ABI 6) no signal
//!   to, or abstract socket of, any process outside its own domain;
//! - seccomp: the process sandbox's filter, and on top of it no socket, no exec, no new
//!   process (only threads) — installed with TSYNC, before the runtime starts any thread;
//! - every fd beyond stdio and the ones named closed.
//!
//! The one namespace pair it may make is [`scratch_tmpfs`]'s: a user and mount namespace that
//! own a size-capped tmpfs, never mounted anywhere, for a scratch `/workspace` that `--disk`
//! caps.

use std::io;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::path::PathBuf;

use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};

use crate::landlock_rules::{self, FsRules};
use crate::sys;

/// What the process keeps.
#[derive(Debug, Clone, Default)]
pub struct SelfConfinement {
    /// Readable (no write, no exec) beneath each.
    pub read_only: Vec<PathBuf>,
    /// Readable and writable beneath each.
    pub read_write: Vec<PathBuf>,
    /// `RLIMIT_FSIZE`.
    pub file_size: u64,
    /// `RLIMIT_NOFILE`.
    pub nofile: u64,
    /// `RLIMIT_DATA`: the runtime's private writable memory.
    pub data: u64,
    /// Fds beyond stdio that stay open.
    pub keep_fds: Vec<RawFd>,
}

/// What held, for the Outcome's `enforcement`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub landlock_abi: u32,
    pub seccomp: bool,
    pub rlimits: bool,
    pub notes: Vec<String>,
}

/// Runs `child` in a fork of this process named `name`, with `stdio`'s fds (where given) as
/// its fds 0, 1 and 2; the child exits with what `child` returns (125 if it panics) and is
/// killed if this process dies first. The caller gets the child's pid. For the WebAssembly
/// supervisor, whose runtime is this same binary: a fork costs a fraction of a second exec of
/// it (a 24 MB static binary: about a millisecond of every warm run). The child starts with
/// the parent's memory, so the caller forks before it holds anything the child must not (the
/// compiled-code cache's key, a secret-bearing environment).
///
/// Refused unless this process is single-threaded: a fork of a threaded process may inherit a
/// lock some other thread held, and deadlock on its first allocation.
pub fn fork_child(
    name: &std::ffi::CStr,
    stdio: [Option<OwnedFd>; 3],
    child: impl FnOnce() -> i32,
) -> io::Result<libc::pid_t> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse::<u32>().ok());
    if threads != Some(1) {
        return Err(io::Error::other(format!(
            "cannot fork the runtime from a process with {} threads (it needs exactly one)",
            threads.map_or("an unknown number of".to_string(), |t| t.to_string())
        )));
    }
    let parent = sys::getpid();
    // SAFETY: single-threaded, checked just above; the child leaves through `exit`, never
    // back into the caller.
    match unsafe { sys::fork() }? {
        sys::Fork::Child => {
            let ok = sys::set_pdeathsig(libc::SIGKILL).is_ok()
                // The parent died before the signal was armed: nothing would kill us later.
                && rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(parent)
                && stdio.iter().enumerate().all(|(to, fd)| match fd {
                    Some(fd) => sys::dup2(std::os::fd::AsRawFd::as_raw_fd(fd), to as RawFd).is_ok(),
                    None => true,
                });
            if !ok {
                sys::exit_now(125);
            }
            drop(stdio);
            let _ = rustix::thread::set_name(name);
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(125);
            std::process::exit(code)
        }
        sys::Fork::Parent(pid) => Ok(pid),
    }
}

/// As root: become `uid`/`gid` with no supplementary groups, for good. The process stays
/// dumpable, so that it can still write its own `/proc/self` files (the id maps of
/// [`scratch_tmpfs`]); [`confine`] ends that.
pub fn drop_to(uid: u32, gid: u32) -> io::Result<()> {
    sys::setgroups_empty()?;
    sys::setresgid(gid)?;
    sys::setresuid(uid)?;
    sys::set_dumpable(true)
}

/// As root, for a root-owned `workspace` the runtime (running as `uid`/`gid`) must write: a
/// detached, idmapped copy of its mount on which root's files are `uid`'s, and what it
/// creates is root's on disk — the process backend's idmapped workspace. Single-threaded
/// callers only.
pub fn idmapped_workspace(
    workspace: &std::path::Path,
    uid: u32,
    gid: u32,
) -> Result<OwnedFd, String> {
    // The namespace's short-lived child is reaped here: it leaves as soon as we hold the
    // mapping, and the runtime has nothing else to do meanwhile.
    let (tree, _child) = crate::idmap::workspace_tree(workspace, uid, gid)?;
    Ok(tree)
}

/// A fresh tmpfs of `size` bytes and `inodes` inodes, mode 0700 and owned by the caller,
/// mounted nowhere: the returned fd is its root. Makes the calling process a user and mount
/// namespace of its own (single-threaded callers only), in which it holds capabilities until
/// [`confine`] drops them.
pub fn scratch_tmpfs(size: u64, inodes: u64) -> io::Result<OwnedFd> {
    let (uid, gid) = (sys::geteuid(), sys::getegid());
    sys::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)?;
    sys::write_file("/proc/self/setgroups".as_ref(), "deny")?;
    sys::write_file("/proc/self/uid_map".as_ref(), &format!("0 {uid} 1\n"))?;
    sys::write_file("/proc/self/gid_map".as_ref(), &format!("0 {gid} 1\n"))?;
    let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "size", size.max(4096).to_string())?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "nr_inodes", inodes.max(16).to_string())?;
    rustix::mount::fsconfig_set_string(fs.as_fd(), "mode", "0700")?;
    rustix::mount::fsconfig_create(fs.as_fd())?;
    let mnt = rustix::mount::fsmount(
        fs.as_fd(),
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV
            | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )?;
    Ok(mnt)
}

/// Whether a scratch tmpfs is full: `(no space left, no inode left)`.
pub fn scratch_full(root: &OwnedFd) -> (bool, bool) {
    match rustix::fs::fstatfs(root) {
        Ok(s) => (s.f_bavail == 0, s.f_ffree == 0),
        Err(_) => (false, false),
    }
}

/// Confines the calling process for the rest of its life. Call it single-threaded: Landlock
/// holds for the calling thread and those it starts later (the seccomp filters are installed
/// with TSYNC, so they hold for every thread either way).
pub fn confine(c: &SelfConfinement) -> Result<Held, String> {
    let mut held = Held::default();
    let step = |what: &str, e: io::Error| format!("{what}: {e}");
    sys::setrlimit(libc::RLIMIT_FSIZE, c.file_size, c.file_size)
        .map_err(|e| step("RLIMIT_FSIZE", e))?;
    sys::setrlimit(libc::RLIMIT_CORE, 0, 0).map_err(|e| step("RLIMIT_CORE", e))?;
    sys::setrlimit(libc::RLIMIT_NOFILE, c.nofile, c.nofile)
        .map_err(|e| step("RLIMIT_NOFILE", e))?;
    sys::setrlimit(libc::RLIMIT_DATA, c.data, c.data).map_err(|e| step("RLIMIT_DATA", e))?;
    held.rlimits = true;
    sys::close_fds_except(&c.keep_fds).map_err(|e| step("closing inherited fds", e))?;
    // Capabilities exist here only in scratch_tmpfs's user namespace (or for root that kept
    // its uid): drop them all. Without any, there is nothing to drop and no right to.
    let caps = rustix::thread::capabilities(None).map_err(|e| step("capget", e.into()))?;
    if !caps.permitted.is_empty() || !caps.effective.is_empty() {
        crate::caps_drop::drop_all()?;
    }
    sys::set_no_new_privs().map_err(|e| step("no_new_privs", e))?;
    let rules = FsRules {
        read_only: c.read_only.clone(),
        read_write: c.read_write.clone(),
        // A static binary's getrandom cannot find the libc function (no dlsym) and reads
        // /dev/urandom instead, after polling /dev/random once for the pool being ready (an
        // EACCES there failed every run of the static cordon-wasm): WASI's random and
        // wasmtime's own need them. Writing either only mixes bytes in, with no credit.
        files_rw: vec!["/dev/urandom".into(), "/dev/random".into()],
        ..FsRules::default()
    };
    let abi = crate::detect::landlock_abi();
    let applied = landlock_rules::apply(&rules, abi).map_err(|e| format!("Landlock: {e}"))?;
    held.landlock_abi = applied.abi;
    if applied.abi == 0 {
        held.notes.push(
            "Landlock is not available: the runtime's filesystem access is not fenced".into(),
        );
    } else if applied.partial {
        held.notes.push(landlock_rules::partial_note(abi));
    }
    if applied.abi < 6 {
        held.notes.push(
            "without Landlock ABI 6 the runtime is not fenced from signalling its user's other processes"
                .into(),
        );
    }
    crate::seccomp::install_runtime().map_err(|e| e.to_string())?;
    held.seccomp = true;
    // Other processes of the same uid may no longer read its memory or open its fds.
    sys::set_dumpable(false).map_err(|e| step("PR_SET_DUMPABLE", e))?;
    Ok(held)
}
