//! Descriptor-relative file operations shared by the unpacker and the store: nothing here joins
//! an untrusted name onto a path string and hands it to a path-walking call.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, ResolveFlags};

/// Every walk below a directory descriptor: no `..` above it, no symlink (not even a final
/// one), no magic link, no other mount.
pub(crate) const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

pub(crate) fn os(name: &[u8]) -> &OsStr {
    OsStr::from_bytes(name)
}

/// Opens the directory `name` (one component or a relative path) below `dir`, refusing
/// symlinks anywhere on the way.
pub(crate) fn open_dir_beneath(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat2(
        dir,
        os(name),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        RESOLVE,
    )?)
}

/// Opens a directory by host path (a path cordon chose, not one from an image).
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `lstat` of `name` in `dir`: `None` when absent.
pub(crate) fn lstat_at(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, os(name), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn is_dir(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// Removes `name` in `dir` whatever it is; a directory with everything in it. Directories are
/// opened relative to their parent's descriptor without following symlinks, and made
/// writable first (an image may ship `0555` directories; rootless, the owner needs `w` to
/// empty them). `depth` bounds the recursion.
pub(crate) fn remove_at(dir: BorrowedFd<'_>, name: &[u8], depth: usize) -> io::Result<()> {
    let Some(st) = lstat_at(dir, name)? else {
        return Ok(());
    };
    if !is_dir(&st) {
        return Ok(rustix::fs::unlinkat(dir, os(name), AtFlags::empty())?);
    }
    if depth == 0 {
        return Err(io::Error::other("directory tree too deep to remove"));
    }
    let child = open_dir_beneath(dir, name)?;
    empty_dir(child.as_fd(), depth - 1)?;
    Ok(rustix::fs::unlinkat(dir, os(name), AtFlags::REMOVEDIR)?)
}

/// Removes everything inside the directory `dir`.
pub(crate) fn empty_dir(dir: BorrowedFd<'_>, depth: usize) -> io::Result<()> {
    // Owner rwx so that its entries can be listed and removed; harmless as root.
    let _ = rustix::fs::fchmod(dir, Mode::from_raw_mode(0o700));
    let mut names = Vec::new();
    let mut it = rustix::fs::Dir::read_from(dir)?;
    while let Some(ent) = it.read() {
        let ent = ent?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(n.to_vec());
        }
    }
    for n in names {
        remove_at(dir, &n, depth)?;
    }
    Ok(())
}

/// Removes the tree at a host path cordon chose (a store directory).
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other("refusing to remove a root path"));
    };
    let pfd = open_dir(parent)?;
    remove_at(pfd.as_fd(), name.as_bytes(), MAX_REMOVE_DEPTH)
}

/// Deeper than anything the unpacker creates (it refuses paths of more components).
pub(crate) const MAX_REMOVE_DEPTH: usize = 512;

/// Creates a directory (and its parents) with mode 0700, leaving existing ones as they are.
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory (mode 0600),
/// fsync, rename over. Readers see the old content or the new, never a mix.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        unique()
    ));
    let result = (|| {
        let mut f = create_new_private(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new file (fails if it exists), mode 0600.
pub(crate) fn create_new_private(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A number that differs on every call in this process (temporary names).
pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    (N.fetch_add(1, Ordering::Relaxed) << 32) ^ nanos
}

/// An advisory lock (`flock`) on a lock file, released when dropped (or when the process
/// dies: the kernel drops it with the descriptor, so a killed `cordon` never leaves a stale
/// lock behind).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    fn open(path: &Path) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    /// Waits for the lock.
    pub(crate) fn acquire(path: &Path, exclusive: bool) -> io::Result<FileLock> {
        let f = Self::open(path)?;
        let op = if exclusive {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::LockShared
        };
        rustix::fs::flock(&f, op)?;
        Ok(FileLock { _file: f })
    }

    /// Takes the lock if nobody holds a conflicting one; `None` otherwise.
    pub(crate) fn try_acquire(path: &Path, exclusive: bool) -> io::Result<Option<FileLock>> {
        let f = Self::open(path)?;
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        match rustix::fs::flock(&f, op) {
            Ok(()) => Ok(Some(FileLock { _file: f })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// Reads a small file cordon wrote (at most 1 MiB).
pub(crate) fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    File::open(path)?.take(1 << 20).read_to_end(&mut out)?;
    Ok(out)
}
