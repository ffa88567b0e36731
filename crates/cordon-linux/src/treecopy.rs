//! Copying a sandbox's scratch trees out to a snapshot store and back into a new sandbox.
//!
//! Threat model: the tree copied out was made by hostile code — symlinks to host paths,
//! FIFOs, device nodes, setuid bits, hard links, deep or huge trees, mount points (volumes)
//! inside it. Nothing here ever follows a symlink or leaves the tree: every directory is opened
//! from the tree's root by its relative path with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_XDEV`, every entry is looked at with `AT_SYMLINK_NOFOLLOW` and created with
//! `O_EXCL | O_NOFOLLOW`; a regular file is opened only after `statat` says it is one, with
//! `O_NONBLOCK | O_NOFOLLOW`, and checked again on the open fd. Only directories, regular files
//! and symlinks (as their text, never resolved) are carried; FIFOs, sockets and device nodes
//! are skipped and named; setuid, setgid and sticky bits are dropped; another filesystem
//! mounted inside (a volume) is not entered. The byte and entry budgets bound what a copy
//! costs whatever the tree holds.

use std::ffi::CStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

/// How much one copy may take.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Bytes of regular files (each hard link counts on its own).
    pub max_bytes: u64,
    /// Entries of every kind.
    pub max_entries: u64,
}

/// What a copy carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Paths (relative to the tree) not carried, each with why; at most [`SKIPPED_NAMED`].
    pub skipped: Vec<String>,
    pub skipped_count: u64,
}

/// Skipped entries named in [`CopyStats::skipped`]; the rest are only counted.
pub const SKIPPED_NAMED: usize = 50;

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the tree holds more than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the tree holds more than {limit} entries")]
    TooMany { limit: u64 },
    #[error("no space left where the copy goes ({path})")]
    NoSpace { path: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

fn io_err(path: &[u8], e: impl Into<io::Error>) -> CopyError {
    let e: io::Error = e.into();
    let path = String::from_utf8_lossy(path).into_owned();
    if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT) {
        return CopyError::NoSpace { path };
    }
    CopyError::Io { path, source: e }
}

fn beneath(dir: BorrowedFd<'_>, path: &[u8]) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat2(
        dir,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )
}

/// Opens `path` (e.g. `workspace`) inside a sandbox whose root directory is `root`, resolved
/// as the sandbox would (`RESOLVE_IN_ROOT`); `None` unless it is a tmpfs directory (a
/// scratch filesystem of the sandbox's own, not a volume or a host directory bound there).
pub fn open_scratch(root: BorrowedFd<'_>, path: &str) -> Option<OwnedFd> {
    let fd = rustix::fs::openat2(
        root,
        path.trim_start_matches('/'),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstatfs(&fd).ok()?;
    (st.f_type == libc::TMPFS_MAGIC).then_some(fd)
}

/// Opens a host directory (a snapshot store's) to copy from or into.
pub fn open_dir(path: &std::path::Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Flushes the filesystem `dir` is on (one `syncfs` for a whole copy rather than an `fsync`
/// per file).
pub fn sync_fs(dir: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::fs::syncfs(dir)?)
}

/// Runs `f` with this thread's filesystem ids set to `ids` (when given), and puts the
/// previous ones back after, even if `f` panics. A sandbox's tmpfs belongs to its user
/// namespace, where host root has no id: what is made there must be made as the sandbox's
/// host ids, while the store it is copied from is readable by the server's user only.
fn as_fs_ids<T>(ids: Option<(u32, u32)>, f: impl FnOnce() -> T) -> T {
    struct Restore(u32, u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: setfsuid/setfsgid take plain ids and change only this thread's
            // filesystem credentials; these are the ones it had.
            unsafe {
                libc::setfsuid(self.0);
                libc::setfsgid(self.1);
            }
        }
    }
    let Some((uid, gid)) = ids else {
        return f();
    };
    // SAFETY: as above; each call returns the previous id, kept to be restored. The group
    // goes first: once the fs uid is not 0 the capability to set it is gone.
    let (old_gid, old_uid) = unsafe { (libc::setfsgid(gid), libc::setfsuid(uid)) };
    let _restore = Restore(old_uid as u32, old_gid as u32);
    f()
}

/// Copies the tree under `src` into the directory `dst` (which exists), never following a
/// symlink on either side and never entering another filesystem. With `owner`, everything
/// made in `dst` is made as those host ids (a new sandbox's: its tmpfs has no id for host
/// root), while `src` is read as the caller.
pub fn copy_tree(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    owner: Option<(u32, u32)>,
    budget: Budget,
) -> Result<CopyStats, CopyError> {
    let mut stats = CopyStats::default();
    let mut entries = 0u64;
    let mut stack: Vec<Vec<u8>> = vec![b".".to_vec()];
    while let Some(path) = stack.pop() {
        let sdir = match beneath(src, &path) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::XDEV) => {
                skip(&mut stats, &path, "another filesystem mounted there");
                continue;
            }
            Err(e) => return Err(io_err(&path, e)),
        };
        let ddir = match as_fs_ids(owner, || beneath(dst, &path)) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::XDEV) => {
                skip(
                    &mut stats,
                    &path,
                    "another filesystem mounted at the destination",
                );
                continue;
            }
            Err(e) => return Err(io_err(&path, e)),
        };
        let mut dir = rustix::fs::Dir::read_from(&sdir).map_err(|e| io_err(&path, e))?;
        while let Some(e) = dir.read() {
            let e = e.map_err(|e| io_err(&path, e))?;
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            entries += 1;
            if entries > budget.max_entries {
                return Err(CopyError::TooMany {
                    limit: budget.max_entries,
                });
            }
            let mut child = path.clone();
            child.push(b'/');
            child.extend_from_slice(name.to_bytes());
            let Ok(st) = rustix::fs::statat(&sdir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                // Gone since it was listed: nothing to carry.
                continue;
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    as_fs_ids(owner, || {
                        match rustix::fs::mkdirat(&ddir, name, Mode::from_raw_mode(0o700)) {
                            Ok(()) => {}
                            Err(rustix::io::Errno::EXIST)
                                if rustix::fs::statat(&ddir, name, AtFlags::SYMLINK_NOFOLLOW)
                                    .is_ok_and(|d| {
                                        FileType::from_raw_mode(d.st_mode) == FileType::Directory
                                    }) => {}
                            Err(e) => return Err(io_err(&child, e)),
                        }
                        if let Ok(made) = beneath(ddir.as_fd(), name.to_bytes()) {
                            // The owner keeps rwx: the copy goes on inside it, and a later
                            // copy back must be able to enter it.
                            let mode = (st.st_mode & 0o777) | 0o700;
                            rustix::fs::fchmod(&made, Mode::from_raw_mode(mode))
                                .map_err(|e| io_err(&child, e))?;
                        }
                        Ok(())
                    })?;
                    stats.dirs += 1;
                    stack.push(child);
                }
                FileType::RegularFile => {
                    copy_file(&sdir, &ddir, name, &st, &child, budget, &mut stats, owner)?
                }
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(&sdir, name, Vec::new())
                        .map_err(|e| io_err(&child, e))?;
                    as_fs_ids(owner, || {
                        make_fresh(&ddir, name, &child, |d| {
                            rustix::fs::symlinkat(target.as_c_str(), d, name)
                        })
                    })?;
                    stats.symlinks += 1;
                }
                FileType::Fifo => skip(&mut stats, &child, "a FIFO"),
                FileType::Socket => skip(&mut stats, &child, "a socket"),
                FileType::CharacterDevice | FileType::BlockDevice => {
                    skip(&mut stats, &child, "a device node")
                }
                FileType::Unknown => skip(&mut stats, &child, "of an unknown kind"),
            }
        }
    }
    Ok(stats)
}

/// The deletions an overlayfs upper directory records: its whiteouts (character devices
/// 0/0), as paths relative to it (`etc/motd`), at most `max` of them. Walked as `copy_tree`
/// walks: no link followed, no other filesystem entered.
pub fn whiteouts(upper: BorrowedFd<'_>, max: usize) -> Result<Vec<Vec<u8>>, CopyError> {
    let mut found = Vec::new();
    let mut stack: Vec<Vec<u8>> = vec![b".".to_vec()];
    while let Some(path) = stack.pop() {
        let dir = match beneath(upper, &path) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::XDEV) => continue,
            Err(e) => return Err(io_err(&path, e)),
        };
        let mut entries = rustix::fs::Dir::read_from(&dir).map_err(|e| io_err(&path, e))?;
        while let Some(e) = entries.read() {
            let e = e.map_err(|e| io_err(&path, e))?;
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let mut child = path.clone();
            child.push(b'/');
            child.extend_from_slice(name.to_bytes());
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => stack.push(child),
                FileType::CharacterDevice if st.st_rdev == 0 => {
                    if found.len() >= max {
                        return Err(CopyError::TooMany { limit: max as u64 });
                    }
                    found.push(child.strip_prefix(b"./").unwrap_or(&child).to_vec());
                }
                _ => {}
            }
        }
    }
    Ok(found)
}

/// Removes `path` (relative, e.g. `etc/motd`) below `root`, a directory tree with everything
/// in it, without following a link or leaving `root`'s filesystem: what a whiteout recorded
/// by [`whiteouts`] deletes again in a new sandbox's root. Missing is not an error.
pub fn remove_beneath(root: BorrowedFd<'_>, path: &[u8]) -> io::Result<()> {
    let (parent, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b"."[..], path),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Ok(());
    }
    let dir = match beneath(root, parent) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::XDEV) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    remove_entry(&dir, name, 0)
}

/// Deepest directory nesting [`remove_beneath`] descends into.
const REMOVE_DEPTH: usize = 256;

fn remove_entry(dir: &OwnedFd, name: &[u8], depth: usize) -> io::Result<()> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let st = match rustix::fs::statat(dir, cname.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if depth >= REMOVE_DEPTH {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let sub = match beneath(dir.as_fd(), name) {
            Ok(fd) => fd,
            // A mount point: not this filesystem's to remove.
            Err(rustix::io::Errno::XDEV) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut names = Vec::new();
        let mut entries = rustix::fs::Dir::read_from(&sub)?;
        while let Some(e) = entries.read() {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(n.to_vec());
            }
        }
        for n in names {
            remove_entry(&sub, &n, depth + 1)?;
        }
        rustix::fs::unlinkat(dir, cname.as_c_str(), AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, cname.as_c_str(), AtFlags::empty())?;
    }
    Ok(())
}

fn skip(stats: &mut CopyStats, path: &[u8], why: &str) {
    stats.skipped_count += 1;
    if stats.skipped.len() < SKIPPED_NAMED {
        let p = String::from_utf8_lossy(path.strip_prefix(b"./").unwrap_or(path)).into_owned();
        stats.skipped.push(format!("{p}: {why}"));
    }
}

/// Runs `make` to create `name` in `dir`; what a fresh destination already holds there (a
/// file, a symlink) is replaced once.
fn make_fresh(
    dir: &OwnedFd,
    name: &CStr,
    path: &[u8],
    make: impl Fn(BorrowedFd<'_>) -> rustix::io::Result<()>,
) -> Result<(), CopyError> {
    match make(dir.as_fd()) {
        Err(rustix::io::Errno::EXIST) => {
            rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|e| io_err(path, e))?;
            make(dir.as_fd()).map_err(|e| io_err(path, e))
        }
        r => r.map_err(|e| io_err(path, e)),
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_file(
    sdir: &OwnedFd,
    ddir: &OwnedFd,
    name: &CStr,
    st: &rustix::fs::Stat,
    path: &[u8],
    budget: Budget,
    stats: &mut CopyStats,
    owner: Option<(u32, u32)>,
) -> Result<(), CopyError> {
    // O_NONBLOCK: were it swapped for a FIFO since `statat`, the open must not hang.
    let fd = match rustix::fs::openat(
        sdir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) => {
            skip(stats, path, "not readable by its owner");
            return Ok(());
        }
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(io_err(path, e)),
    };
    let now = rustix::fs::fstat(&fd).map_err(|e| io_err(path, e))?;
    if FileType::from_raw_mode(now.st_mode) != FileType::RegularFile
        || now.st_ino != st.st_ino
        || now.st_dev != st.st_dev
    {
        skip(stats, path, "replaced while it was copied");
        return Ok(());
    }
    let left = budget.max_bytes.saturating_sub(stats.bytes);
    let mut src = std::fs::File::from(fd).take(left.saturating_add(1));
    let n = as_fs_ids(owner, || write_copy(ddir, name, path, &mut src, &now))?;
    if n > left {
        return Err(CopyError::TooLarge {
            limit: budget.max_bytes,
        });
    }
    stats.bytes += n;
    stats.files += 1;
    Ok(())
}

/// Makes `name` in `ddir` with what `src` gives, `st`'s permission bits (no setuid, setgid or
/// sticky) and times; the number of bytes written.
fn write_copy(
    ddir: &OwnedFd,
    name: &CStr,
    path: &[u8],
    src: &mut impl Read,
    now: &rustix::fs::Stat,
) -> Result<u64, CopyError> {
    let out = {
        let mk = |d: BorrowedFd<'_>| {
            rustix::fs::openat(
                d,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map(|_| ())
        };
        make_fresh(ddir, name, path, mk)?;
        rustix::fs::openat(
            ddir,
            name,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err(path, e))?
    };
    let mut dst = std::fs::File::from(out);
    let n = io::copy(src, &mut dst).map_err(|e| io_err(path, e))?;
    // Setuid, setgid and sticky never travel.
    rustix::fs::fchmod(&dst, Mode::from_raw_mode(now.st_mode & 0o777))
        .map_err(|e| io_err(path, e))?;
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: now.st_atime as _,
            tv_nsec: now.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: now.st_mtime as _,
            tv_nsec: now.st_mtime_nsec as _,
        },
    };
    let _ = rustix::fs::futimens(&dst, &times);
    Ok(n)
}

/// Bytes and entries a host directory tree holds (a volume's usage), on its own filesystem
/// only, symlinks not followed; `None` when it is too large to walk (see `watch`).
pub fn usage(path: &std::path::Path) -> Option<u64> {
    let fd = open_dir(path).ok()?;
    crate::watch::dir_usage(fd.as_fd())
}

/// Reads at most `max` bytes of a small host file (a store's metadata) without following a
/// symlink.
pub fn read_small(path: &std::path::Path, max: u64) -> io::Result<Vec<u8>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut v = Vec::new();
    std::fs::File::from(fd).take(max).read_to_end(&mut v)?;
    Ok(v)
}
