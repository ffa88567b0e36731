//! File operations inside a live sandbox, performed from the host, that cannot reach the host.
//!
//! A [`SandboxFs`] holds an `O_PATH` descriptor of the sandbox's root (normally opened through
//! `/proc/<init_pid>/root`) and resolves every path relative to it with `openat2(2)` and
//! `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`: the kernel treats that descriptor as `/` for the
//! whole walk, so `..`, absolute paths and absolute symlink targets are clamped inside the
//! sandbox, and `/proc/<pid>/root`-style magic links (the one kind of link that could jump out)
//! are refused. Nothing is ever string-joined with a host path.
//!
//! Rules that hold for every operation:
//! - Paths are sandbox paths: relative ones start at [`WORKSPACE`], absolute ones at the sandbox
//!   root. `..` above the root stays at the root (as it does inside the sandbox), so
//!   `../../etc/passwd` names the *sandbox's* `/etc/passwd`.
//! - Operations on a final component (create, replace, remove, rename, `stat`) first open the
//!   parent directory with `openat2` (`O_PATH | O_DIRECTORY`), then act on the last name
//!   relative to that descriptor with calls that do not follow it (`unlinkat`, `mkdirat`,
//!   `renameat2`, `fstatat(AT_SYMLINK_NOFOLLOW)`, `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`). A
//!   descriptor pins a directory that lies inside the root, so swapping a directory for a
//!   symlink after the parent was opened redirects nothing.
//! - `.` and `..` cannot be the final component of a create, remove or rename, and the sandbox
//!   root itself can be neither removed nor renamed.
//! - Kernel interface file systems (proc, sysfs, cgroup, debugfs, ...) visible in the sandbox
//!   are neither read nor modified: the server runs with host privileges, which there would
//!   mean host data (`/proc/kcore`, ...). Only regular files are read; a FIFO, socket or device
//!   answers [`FsError::NotAFile`] without being opened for reading.
//!
//! Symlinks, operation by operation:
//! - [`SandboxFs::read`], [`SandboxFs::open_read`] and [`SandboxFs::list`] follow symlinks,
//!   including a final one, *inside the root* (a link to `/etc` lists the sandbox's `/etc`).
//! - [`SandboxFs::stat`] and the entries of [`SandboxFs::list`] describe a final symlink itself
//!   (`lstat`), with its target text.
//! - [`SandboxFs::write`] replaces a final symlink with the new file (the link is renamed over,
//!   never written through); [`SandboxFs::remove`] removes the link, never its target;
//!   [`SandboxFs::rename`] moves or replaces the link itself.
//! - Symlinks in the *middle* of a path are followed inside the root for every operation.
//!
//! Writes go to a fresh temporary file (`.cordon-upload-<random>`, created with `O_EXCL`) in
//! the destination directory, which is then renamed over the destination: readers never see a
//! partial file, and a failure (limit exceeded, no space, reader error) removes the temporary
//! file. New files and directories are `fchown`ed to the sandbox owner given to
//! [`SandboxFs::open`].
//!
//! Recursive removal walks with descriptors only: each directory is opened relative to its
//! parent's descriptor with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)`
//! and emptied with `unlinkat` on that descriptor. It does not cross into other mounts (a mount
//! point answers [`FsError::Busy`]) and refuses trees deeper than [`MAX_REMOVE_DEPTH`].
//!
//! Requires Linux 5.6 (`openat2`); on older kernels [`SandboxFs::open`] answers
//! [`FsError::Unsupported`] instead of falling back to a weaker resolution.
//!
//! All calls are blocking; an async server runs them on a blocking thread pool.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags, Stat};
use rustix::fs::{Gid, Uid};
use rustix::io::Errno;
use rustix::rand::GetRandomFlags;

use crate::sys;

/// The sandbox's working directory: relative paths start here.
pub const WORKSPACE: &str = "/workspace";
/// [`SandboxFs::list`] answers [`FsError::TooLarge`] for a directory with more entries.
pub const LIST_LIMIT: usize = 100_000;
/// [`SandboxFs::remove`] refuses to descend deeper than this (each level holds a descriptor).
pub const MAX_REMOVE_DEPTH: usize = 256;
/// [`SandboxFs::remove`] gives up after removing this many entries in one call (a sandbox that
/// keeps creating files must not pin a server thread forever).
pub const REMOVE_LIMIT: u64 = 4 << 20;
/// The extended-attribute namespace of a file's user metadata ([`Entry::metadata`]).
pub const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// At most this many bytes of attribute names are looked at, and of one value: what a
/// sandbox program sets beyond that is not shown (never an error, never a large allocation).
const METADATA_READ_LIMIT: usize = 64 * 1024;

/// Longest accepted path, in bytes, after the implicit `/workspace/` prefix (PATH_MAX - 1).
const MAX_PATH: usize = 4095;
const NAME_MAX: usize = 255;
/// Full-path resolution: the root descriptor is `/` for the whole walk; no magic links.
const RESOLVE: u64 = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
/// One-name steps of a recursive removal: no symlink, nothing outside the directory, no mount.
const RESOLVE_STEP: u64 = libc::RESOLVE_BENEATH
    | libc::RESOLVE_NO_SYMLINKS
    | libc::RESOLVE_NO_MAGICLINKS
    | libc::RESOLVE_NO_XDEV;
/// How often a resolution or removal is retried when the sandbox changes the tree under it.
const RETRIES: usize = 64;
const COPY_CHUNK: usize = 64 << 10;
const TEMP_PREFIX: &str = ".cordon-upload-";

/// Why a file operation failed. [`FsError::code`] is a stable machine-readable name (front
/// ends map it to their own statuses); messages name sandbox paths only, never host paths.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path}: no such file or directory")]
    NotFound { path: String },
    #[error("{path}: {reason}")]
    PermissionDenied { path: String, reason: &'static str },
    #[error("{path}: read-only file system")]
    ReadOnly { path: String },
    #[error("{path}: path escapes the sandbox (a /proc magic link) or has too many levels of symbolic links")]
    Escapes { path: String },
    #[error("{path}: not a directory")]
    NotADirectory { path: String },
    #[error("{path}: is a directory")]
    IsADirectory { path: String },
    #[error("{path}: not a regular file")]
    NotAFile { path: String },
    #[error("{path}: already exists")]
    AlreadyExists { path: String },
    #[error("{path}: directory not empty")]
    NotEmpty { path: String },
    #[error("{path}: {reason}")]
    Busy { path: String, reason: &'static str },
    #[error("{path}: only regular files can be moved across file systems")]
    CrossDevice { path: String },
    #[error("{path}: no space left in the sandbox")]
    NoSpace { path: String },
    #[error("{path}: {detail}")]
    TooLarge { path: String, detail: String },
    #[error("invalid path {path}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("file operations unsupported on this host: {reason}")]
    Unsupported { reason: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl FsError {
    /// A stable machine-readable code for the JSON error body.
    pub fn code(&self) -> &'static str {
        match self {
            FsError::NotFound { .. } => "not_found",
            FsError::PermissionDenied { .. } => "permission_denied",
            FsError::ReadOnly { .. } => "read_only",
            FsError::Escapes { .. } => "escapes_sandbox",
            FsError::NotADirectory { .. } => "not_a_directory",
            FsError::IsADirectory { .. } => "is_a_directory",
            FsError::NotAFile { .. } => "not_a_file",
            FsError::AlreadyExists { .. } => "already_exists",
            FsError::NotEmpty { .. } => "not_empty",
            FsError::Busy { .. } => "busy",
            FsError::CrossDevice { .. } => "cross_device",
            FsError::NoSpace { .. } => "no_space",
            FsError::TooLarge { .. } => "too_large",
            FsError::InvalidPath { .. } => "invalid_path",
            FsError::Unsupported { .. } => "unsupported",
            FsError::Io { .. } => "io_error",
        }
    }

    /// An I/O error on `path` (as the sandbox names it), as the API reports it.
    pub fn from_io(err: io::Error, path: &str) -> FsError {
        let path = path.to_owned();
        match err.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound { path },
            Some(libc::EACCES | libc::EPERM) => FsError::PermissionDenied {
                path,
                reason: "permission denied",
            },
            Some(libc::EROFS) => FsError::ReadOnly { path },
            Some(libc::ELOOP) => FsError::Escapes { path },
            Some(libc::ENOTDIR) => FsError::NotADirectory { path },
            Some(libc::EISDIR) => FsError::IsADirectory { path },
            Some(libc::EEXIST) => FsError::AlreadyExists { path },
            Some(libc::ENOTEMPTY) => FsError::NotEmpty { path },
            Some(libc::EBUSY) => FsError::Busy {
                path,
                reason: "busy (a mount point, or in use)",
            },
            Some(libc::EAGAIN) => FsError::Busy {
                path,
                reason: "the path kept changing during resolution; try again",
            },
            Some(libc::EXDEV) => FsError::CrossDevice { path },
            Some(libc::ENOSPC | libc::EDQUOT) => FsError::NoSpace { path },
            Some(libc::EFBIG) => FsError::TooLarge {
                path,
                detail: "file too large for the file system".into(),
            },
            Some(libc::ENAMETOOLONG) => FsError::InvalidPath {
                path,
                reason: "name too long",
            },
            Some(libc::EINVAL) => FsError::InvalidPath {
                path,
                reason:
                    "invalid operation for this path (for example, moving a directory into itself)",
            },
            Some(libc::ENXIO | libc::ENODEV) => FsError::NotAFile { path },
            Some(libc::ENOSYS) => FsError::Unsupported {
                reason: format!("{path}: {err}"),
            },
            _ => FsError::Io { path, source: err },
        }
    }
}

/// What an entry is; serialized in lowercase (`"file"`, `"dir"`, `"symlink"`, `"other"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One file system entry, as [`SandboxFs::list`] and [`SandboxFs::stat`] report it. A symlink
/// is described itself (not its target); names that are not UTF-8 are shown lossily.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// Last component (`/` for the sandbox root).
    pub name: String,
    /// Absolute path inside the sandbox, `.` and `..` resolved lexically.
    pub path: String,
    /// Serialized as `"type"`.
    pub r#type: EntryType,
    /// Bytes (for a symlink: the length of its target).
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Last modification, in seconds since the Unix epoch.
    pub modified: u64,
    /// For a symlink, the target text as stored (not resolved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A file's or directory's user metadata: its `user.e2b.<key>` extended attributes, keys
    /// without the prefix (E2B's file metadata; set by uploads or by programs inside). `None`
    /// when it has none. Not part of the native API's entry (yet): only the E2B door shows it.
    #[serde(skip)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// A handle on one sandbox's file system, confined to its root. Cheap to share between threads
/// (`Send + Sync`); every call resolves its paths afresh.
#[derive(Debug)]
pub struct SandboxFs {
    root: OwnedFd,
    owner: (u32, u32),
}

impl SandboxFs {
    /// Like [`SandboxFs::open`], from an already-open directory fd of the sandbox's root (the
    /// persistent engine hands one over, so no `/proc/<pid>/root` access is needed).
    pub fn from_root_fd(root: OwnedFd, owner: (u32, u32)) -> Result<SandboxFs, FsError> {
        // Probe openat2 once: no fallback to a resolution that could be raced outside.
        match openat2(
            root.as_fd(),
            c"/",
            libc::O_PATH | libc::O_DIRECTORY,
            RESOLVE,
        ) {
            Ok(_) => Ok(SandboxFs { root, owner }),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)
                ) =>
            {
                Err(FsError::Unsupported {
                    reason: format!(
                        "openat2 with RESOLVE_IN_ROOT (Linux 5.6 or later) is required: {e}"
                    ),
                })
            }
            Err(e) => Err(FsError::from_io(e, "/")),
        }
    }

    /// Opens the sandbox whose root directory is `root` (the host path of its `/`, normally
    /// `/proc/<init_pid>/root`). New files and directories get the host `owner` (uid, gid).
    ///
    /// The descriptor keeps the sandbox's mount tree reachable while it lives: drop the
    /// `SandboxFs` when the sandbox goes away.
    pub fn open(root: &Path, owner: (u32, u32)) -> Result<SandboxFs, FsError> {
        let c = CString::new(root.as_os_str().as_encoded_bytes()).map_err(|_| {
            FsError::InvalidPath {
                path: "/".into(),
                reason: "the sandbox root path contains a NUL byte",
            }
        })?;
        let root = rustix::fs::open(
            c.as_c_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FsError::from_io(e.into(), "/"))?;
        SandboxFs::from_root_fd(root, owner)
    }

    /// Reads a whole regular file; [`FsError::TooLarge`] if it holds more than `max_bytes`.
    pub fn read(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, FsError> {
        let (file, meta) = self.open_read(path)?;
        let shown = SPath::parse(path)?.shown;
        let too_large = || FsError::TooLarge {
            path: shown.clone(),
            detail: format!("file is larger than the limit of {max_bytes} bytes"),
        };
        if meta.len() > max_bytes {
            return Err(too_large());
        }
        let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| FsError::from_io(e, &shown))?;
        if buf.len() as u64 > max_bytes {
            return Err(too_large());
        }
        Ok(buf)
    }

    /// Opens a regular file for reading (for streaming). Symlinks are followed inside the root.
    pub fn open_read(&self, path: &str) -> Result<(File, Metadata), FsError> {
        let p = SPath::parse(path)?;
        let full = p.full();
        let dir_flag = if p.dir_only { libc::O_DIRECTORY } else { 0 };
        // Look first without opening (O_PATH): a FIFO or device is never opened for reading.
        let probe = openat2(self.root.as_fd(), &full, libc::O_PATH | dir_flag, RESOLVE)
            .map_err(|e| p.err(e))?;
        let st = fstat(probe.as_fd()).map_err(|e| p.err(e))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(FsError::IsADirectory { path: p.shown }),
            _ => return Err(FsError::NotAFile { path: p.shown }),
        }
        check_fs(probe.as_fd(), &p.shown)?;
        // O_NONBLOCK: if the sandbox swaps a FIFO in between, the open does not hang.
        let fd = openat2(
            self.root.as_fd(),
            &full,
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_LARGEFILE,
            RESOLVE,
        )
        .map_err(|e| p.err(e))?;
        let st2 = fstat(fd.as_fd()).map_err(|e| p.err(e))?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(FsError::Busy {
                path: p.shown,
                reason: "the file was replaced while being opened; try again",
            });
        }
        set_blocking(fd.as_fd()).map_err(|e| p.err(e))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| p.err(e))?;
        Ok((file, meta))
    }

    /// Writes `data` to `path` atomically (temporary file + rename), at most `max_bytes` of it,
    /// returning the number of bytes written. `create_parents` creates missing directories like
    /// `mkdir -p`. An existing file is replaced (keeping its permission bits), an existing
    /// symlink is replaced by the file (never written through), an existing directory answers
    /// [`FsError::IsADirectory`]. Over the limit: [`FsError::TooLarge`]; out of space:
    /// [`FsError::NoSpace`]; either way nothing is left behind and the old file is intact.
    pub fn write(
        &self,
        path: &str,
        data: &mut dyn Read,
        max_bytes: u64,
        create_parents: bool,
    ) -> Result<u64, FsError> {
        self.write_with_metadata(path, data, max_bytes, create_parents, &BTreeMap::new())
    }

    /// [`SandboxFs::write`], the new file given `metadata` as `user.e2b.<key>` attributes
    /// before it replaces the old one (so an overwrite without metadata clears the old file's:
    /// the attributes belong to the file that is replaced). Keys and values are the caller's
    /// to have checked; a file system without user attributes answers its error and nothing is
    /// written.
    pub fn write_with_metadata(
        &self,
        path: &str,
        data: &mut dyn Read,
        max_bytes: u64,
        create_parents: bool,
        metadata: &BTreeMap<String, String>,
    ) -> Result<u64, FsError> {
        let p = SPath::parse(path)?;
        if p.dir_only {
            return Err(FsError::InvalidPath {
                path: p.shown,
                reason: "a file path cannot end with '/'",
            });
        }
        let name = p.final_name()?;
        let parent = if create_parents {
            self.ensure_dirs(&p.comps[..p.comps.len() - 1])?
        } else {
            self.open_parent(&p)?
        };
        check_fs(parent.as_fd(), &p.shown)?;
        let limit = Limit::Upload(max_bytes);
        let attrs = NewFile {
            mode: None,
            metadata,
        };
        self.write_in(parent.as_fd(), &name, data, limit, attrs, &p.shown)
    }

    /// An `O_PATH` descriptor of the directory at `path` (symlinks followed inside the root,
    /// never out of it), for handing the directory itself to another process: refused unless
    /// it is a directory of the sandbox's own user, so that what was planted there (a
    /// symlink to a directory the sandbox's user does not own) is never handed on.
    pub fn own_dir(&self, path: &str) -> Result<OwnedFd, FsError> {
        let p = SPath::parse(path)?;
        let fd = openat2(
            self.root.as_fd(),
            &p.full(),
            libc::O_PATH | libc::O_DIRECTORY,
            RESOLVE,
        )
        .map_err(|e| p.err(e))?;
        let st = fstat(fd.as_fd()).map_err(|e| p.err(e))?;
        if st.st_uid != self.owner.0 {
            return Err(FsError::PermissionDenied {
                path: p.shown,
                reason: "not a directory of the sandbox's own user",
            });
        }
        Ok(fd)
    }

    /// Lists a directory (following symlinks inside the root to reach it), sorted by name.
    pub fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        let p = SPath::parse(path)?;
        let fd = openat2(
            self.root.as_fd(),
            &p.full(),
            libc::O_RDONLY | libc::O_DIRECTORY,
            RESOLVE,
        )
        .map_err(|e| p.err(e))?;
        let mut dir = Dir::new(fd).map_err(|e| p.err(e))?;
        let mut out = Vec::new();
        while let Some(name) = dir.next_name() {
            let name = name.map_err(|e| p.err(e))?;
            if out.len() >= LIST_LIMIT {
                return Err(FsError::TooLarge {
                    path: p.shown,
                    detail: format!("directory has more than {LIST_LIMIT} entries"),
                });
            }
            let child = join_shown(&p.shown, &String::from_utf8_lossy(name.to_bytes()));
            match dir.fd().and_then(|fd| entry_at(fd, &name, &child)) {
                Ok(entry) => out.push(entry),
                // Removed since readdir saw it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(FsError::from_io(e, &child)),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Describes one entry; a final symlink is described itself (with its target), unless the
    /// path ends with `/`, `.` or `..`, which resolve it.
    pub fn stat(&self, path: &str) -> Result<Entry, FsError> {
        let p = SPath::parse(path)?;
        match p.comps.last() {
            Some(&name) if !p.dir_only && name != "." && name != ".." => {
                let parent = self.open_parent(&p)?;
                entry_at(parent.as_fd(), &cstring(name), &p.shown).map_err(|e| p.err(e))
            }
            _ => {
                let dir_flag = if p.dir_only { libc::O_DIRECTORY } else { 0 };
                let fd = openat2(
                    self.root.as_fd(),
                    &p.full(),
                    libc::O_PATH | dir_flag,
                    RESOLVE,
                )
                .map_err(|e| p.err(e))?;
                entry_at(fd.as_fd(), c"", &p.shown).map_err(|e| p.err(e))
            }
        }
    }

    /// Creates a directory. With `parents`, missing parents are created and an existing
    /// directory (or symlink to one inside the root) is not an error, like `mkdir -p`.
    pub fn mkdir(&self, path: &str, parents: bool) -> Result<(), FsError> {
        let p = SPath::parse(path)?;
        let name = p.final_name()?;
        let parent = if parents {
            self.ensure_dirs(&p.comps[..p.comps.len() - 1])?
        } else {
            self.open_parent(&p)?
        };
        check_fs(parent.as_fd(), &p.shown)?;
        match mkdirat(parent.as_fd(), &name) {
            Ok(()) => self.adopt_dir(parent.as_fd(), &name, &p.shown),
            Err(e) if parents && e.raw_os_error() == Some(libc::EEXIST) => {
                match openat2(
                    self.root.as_fd(),
                    &p.full(),
                    libc::O_PATH | libc::O_DIRECTORY,
                    RESOLVE,
                ) {
                    Ok(_) => Ok(()),
                    Err(_) => Err(FsError::AlreadyExists { path: p.shown }),
                }
            }
            Err(e) => Err(p.err(e)),
        }
    }

    /// Creates a symlink at `path` whose text is `target`; an entry already there that is not
    /// a directory is replaced (as tar extraction does). The link belongs to the sandbox
    /// owner. Its target is only text: every operation here resolves it inside the root, so
    /// an absolute or climbing target names the sandbox's own files, never the host's.
    pub fn symlink(&self, path: &str, target: &str) -> Result<(), FsError> {
        let p = SPath::parse(path)?;
        let name = p.final_name()?;
        if target.is_empty() || target.contains('\0') {
            return Err(FsError::InvalidPath {
                path: p.shown,
                reason: "a symlink's target must be non-empty text without NUL",
            });
        }
        let parent = self.open_parent(&p)?;
        check_fs(parent.as_fd(), &p.shown)?;
        match fstatat(parent.as_fd(), &name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                return Err(FsError::IsADirectory { path: p.shown })
            }
            Ok(_) => unlinkat(parent.as_fd(), &name, 0).map_err(|e| p.err(e))?,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(p.err(e)),
        }
        rustix::fs::symlinkat(target, parent.as_fd(), name.as_c_str())
            .map_err(|e| p.err(e.into()))?;
        let (uid, gid) = self.owner;
        rustix::fs::chownat(
            parent.as_fd(),
            name.as_c_str(),
            Some(Uid::from_raw(uid)),
            Some(Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| p.err(e.into()))
    }

    /// Moves `from` to `to` with `rename(2)` semantics: an existing file at `to` is replaced,
    /// an empty directory can be replaced by a directory, a symlink is moved or replaced
    /// itself. Across file systems (say `/tmp` to `/workspace`) a regular file is copied and
    /// the original removed; anything else answers [`FsError::CrossDevice`].
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let pf = SPath::parse(from)?;
        let pt = SPath::parse(to)?;
        let from_name = pf.final_name()?;
        let to_name = pt.final_name()?;
        let from_dir = self.open_parent(&pf)?;
        check_fs(from_dir.as_fd(), &pf.shown)?;
        let to_dir = self.open_parent(&pt)?;
        check_fs(to_dir.as_fd(), &pt.shown)?;
        if pf.dir_only || pt.dir_only {
            let st = fstatat(from_dir.as_fd(), &from_name, libc::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| pf.err(e))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(FsError::NotADirectory { path: pf.shown });
            }
        }
        match renameat2(from_dir.as_fd(), &from_name, to_dir.as_fd(), &to_name, 0) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => self.move_across(
                from_dir.as_fd(),
                &from_name,
                &pf.shown,
                to_dir.as_fd(),
                &to_name,
                &pt.shown,
            ),
            // The kernel reports a missing source or destination parent the same way; the
            // parents were opened already, so it is the source.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(pf.err(e)),
            Err(e) => Err(pt.err(e)),
        }
    }

    /// Sets the permission bits of a regular file or directory (never through a symlink: one
    /// is refused, as anything but a file or directory is). Set-user-ID and set-group-ID bits
    /// are dropped: nothing made here may carry them, whoever owns it.
    pub fn set_mode(&self, path: &str, mode: u32) -> Result<(), FsError> {
        let p = SPath::parse(path)?;
        let fd = match p.comps.last() {
            Some(&name) if name != "." && name != ".." => {
                let parent = self.open_parent(&p)?;
                check_fs(parent.as_fd(), &p.shown)?;
                openat_raw(
                    parent.as_fd(),
                    &cstring(name),
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                    0,
                )
            }
            _ => openat2(
                self.root.as_fd(),
                &p.full(),
                libc::O_RDONLY | libc::O_DIRECTORY,
                RESOLVE,
            ),
        }
        .map_err(|e| match e.raw_os_error() {
            // O_NOFOLLOW on a symlink.
            Some(libc::ELOOP) => FsError::NotAFile {
                path: p.shown.clone(),
            },
            _ => p.err(e),
        })?;
        let st = fstat(fd.as_fd()).map_err(|e| FsError::from_io(e, &p.shown))?;
        if !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR) {
            return Err(FsError::NotAFile { path: p.shown });
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o1777))
            .map_err(|e| FsError::from_io(e.into(), &p.shown))
    }

    /// Removes a file, symlink (never its target) or empty directory; with `recursive`, a
    /// directory and everything under it (not crossing into other mounts).
    pub fn remove(&self, path: &str, recursive: bool) -> Result<(), FsError> {
        let p = SPath::parse(path)?;
        let name = p.final_name()?;
        let parent = self.open_parent(&p)?;
        check_fs(parent.as_fd(), &p.shown)?;
        if p.dir_only {
            let st =
                fstatat(parent.as_fd(), &name, libc::AT_SYMLINK_NOFOLLOW).map_err(|e| p.err(e))?;
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(FsError::NotADirectory { path: p.shown });
            }
        }
        let mut budget = REMOVE_LIMIT;
        remove_entry(parent.as_fd(), &name, &p.shown, recursive, 0, &mut budget)
    }

    /// Opens the directory holding the last component of `p`.
    fn open_parent(&self, p: &SPath<'_>) -> Result<OwnedFd, FsError> {
        openat2(
            self.root.as_fd(),
            &p.parent(),
            libc::O_PATH | libc::O_DIRECTORY,
            RESOLVE,
        )
        .map_err(|e| p.err(e))
    }

    /// `mkdir -p` for `comps` (from the root); returns an `O_PATH` descriptor of the last one.
    /// Every prefix is resolved from the root with `openat2`; a missing one is created with
    /// `mkdirat` relative to the descriptor of its (already resolved) parent.
    fn ensure_dirs(&self, comps: &[&str]) -> Result<OwnedFd, FsError> {
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let mut cur = openat2(self.root.as_fd(), c"/", flags, RESOLVE)
            .map_err(|e| FsError::from_io(e, "/"))?;
        for i in 0..comps.len() {
            let prefix = SPath::from_comps(comps[..=i].to_vec());
            match openat2(self.root.as_fd(), &prefix.full(), flags, RESOLVE) {
                Ok(fd) => {
                    cur = fd;
                    continue;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !is_dot(comps[i]) => {}
                Err(e) => return Err(prefix.err(e)),
            }
            check_fs(cur.as_fd(), &prefix.shown)?;
            let name = cstring(comps[i]);
            match mkdirat(cur.as_fd(), &name) {
                Ok(()) => self.adopt_dir(cur.as_fd(), &name, &prefix.shown)?,
                // Created meanwhile (or a dangling symlink: the reopen below says which).
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(prefix.err(e)),
            }
            cur = openat2(self.root.as_fd(), &prefix.full(), flags, RESOLVE)
                .map_err(|e| prefix.err(e))?;
        }
        Ok(cur)
    }

    /// Gives a directory this call just created its owner and mode.
    fn adopt_dir(&self, parent: BorrowedFd<'_>, name: &CStr, shown: &str) -> Result<(), FsError> {
        let fd = openat_raw(
            parent,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| FsError::from_io(e, shown))?;
        self.adopt(fd.as_fd(), 0o755)
            .map_err(|e| FsError::from_io(e, shown))
    }

    fn adopt(&self, fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
        let st = fstat(fd)?;
        if (st.st_uid, st.st_gid) != self.owner {
            let (uid, gid) = self.owner;
            rustix::fs::fchown(fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
        }
        // An explicit mode, so the server's umask does not matter.
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode))?;
        Ok(())
    }

    /// Writes `data` into a new temporary file in `parent` and renames it over `name`.
    fn write_in(
        &self,
        parent: BorrowedFd<'_>,
        name: &CStr,
        data: &mut dyn Read,
        limit: Limit,
        attrs: NewFile<'_>,
        shown: &str,
    ) -> Result<u64, FsError> {
        let NewFile { mode, metadata } = attrs;
        let err = |e: io::Error| FsError::from_io(e, shown);
        let mode = match fstatat(parent, name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                return Err(FsError::IsADirectory { path: shown.into() })
            }
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
                mode.unwrap_or(st.st_mode & 0o777)
            }
            Ok(_) => mode.unwrap_or(0o644),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => mode.unwrap_or(0o644),
            Err(e) => return Err(err(e)),
        };
        let (tmp, mut file) = create_temp(parent).map_err(err)?;
        self.adopt(file.as_fd(), mode).map_err(err)?;
        let mut buf = vec![0u8; COPY_CHUNK];
        let mut total: u64 = 0;
        loop {
            let n = match data.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(err(e)),
            };
            total += n as u64;
            if let Limit::Upload(max) = limit {
                if total > max {
                    return Err(FsError::TooLarge {
                        path: shown.into(),
                        detail: format!("upload exceeds the limit of {max} bytes"),
                    });
                }
            }
            file.write_all(&buf[..n]).map_err(err)?;
        }
        for (key, value) in metadata {
            let name = format!("{METADATA_XATTR_PREFIX}{key}");
            rustix::fs::fsetxattr(
                &file,
                name.as_str(),
                value.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            )
            .map_err(|e| err(e.into()))?;
        }
        close_checked(file).map_err(err)?;
        renameat2(parent, &tmp.name, parent, name, 0).map_err(err)?;
        tmp.keep();
        Ok(total)
    }

    /// The cross-file-system half of [`SandboxFs::rename`]: copy a regular file, then unlink
    /// the source if it is still the file that was copied.
    fn move_across(
        &self,
        from_dir: BorrowedFd<'_>,
        from_name: &CStr,
        from_shown: &str,
        to_dir: BorrowedFd<'_>,
        to_name: &CStr,
        to_shown: &str,
    ) -> Result<(), FsError> {
        let cross = || FsError::CrossDevice {
            path: from_shown.into(),
        };
        let src = match openat_raw(from_dir, from_name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
            Ok(fd) => fd,
            Err(e) => return Err(FsError::from_io(e, from_shown)),
        };
        let st = fstat(src.as_fd()).map_err(|e| FsError::from_io(e, from_shown))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(cross());
        }
        check_fs(src.as_fd(), from_shown)?;
        let fd = openat_raw(
            from_dir,
            from_name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )
        .map_err(|e| FsError::from_io(e, from_shown))?;
        let st2 = fstat(fd.as_fd()).map_err(|e| FsError::from_io(e, from_shown))?;
        if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
            return Err(FsError::Busy {
                path: from_shown.into(),
                reason: "the file was replaced while being moved; try again",
            });
        }
        let metadata = metadata_of(fd.as_fd()).unwrap_or_default();
        let mut file = File::from(fd);
        self.write_in(
            to_dir,
            to_name,
            &mut file,
            Limit::None,
            NewFile {
                mode: Some(st.st_mode & 0o777),
                metadata: &metadata,
            },
            to_shown,
        )?;
        // Remove the source only if it is still the file that was copied.
        match fstatat(from_dir, from_name, libc::AT_SYMLINK_NOFOLLOW) {
            Ok(now) if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) => {
                unlinkat(from_dir, from_name, 0).map_err(|e| FsError::from_io(e, from_shown))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Clone, Copy)]
enum Limit {
    Upload(u64),
    None,
}

/// A parsed sandbox path: components from the root (`.` and `..` kept for the kernel to
/// resolve) and the lexically normalized form used in entries and messages.
struct SPath<'a> {
    comps: Vec<&'a str>,
    shown: String,
    dir_only: bool,
}

impl<'a> SPath<'a> {
    fn parse(input: &'a str) -> Result<SPath<'a>, FsError> {
        let invalid = |reason| FsError::InvalidPath {
            path: sanitize(input),
            reason,
        };
        if input.is_empty() {
            return Err(invalid("empty path"));
        }
        if input.contains('\0') {
            return Err(invalid("contains a NUL byte"));
        }
        let relative = !input.starts_with('/');
        if input.len() + if relative { WORKSPACE.len() + 1 } else { 0 } > MAX_PATH {
            return Err(invalid("path too long"));
        }
        let mut comps = Vec::new();
        if relative {
            comps.push(&WORKSPACE[1..]);
        }
        for c in input.split('/').filter(|c| !c.is_empty()) {
            if c.len() > NAME_MAX {
                return Err(invalid("a path component is longer than 255 bytes"));
            }
            comps.push(c);
        }
        let mut p = SPath::from_comps(comps);
        p.dir_only = input.ends_with('/') && !p.comps.is_empty();
        Ok(p)
    }

    fn from_comps(comps: Vec<&'a str>) -> SPath<'a> {
        let mut norm: Vec<&str> = Vec::new();
        for c in &comps {
            match *c {
                "." => {}
                ".." => {
                    norm.pop();
                }
                c => norm.push(c),
            }
        }
        SPath {
            shown: format!("/{}", norm.join("/")),
            comps,
            dir_only: false,
        }
    }

    /// The whole path, absolute (the root descriptor is `/` under RESOLVE_IN_ROOT).
    fn full(&self) -> CString {
        cstring(&format!("/{}", self.comps.join("/")))
    }

    /// The path of the directory holding the last component.
    fn parent(&self) -> CString {
        let n = self.comps.len().saturating_sub(1);
        cstring(&format!("/{}", self.comps[..n].join("/")))
    }

    /// The last component, for operations that create, remove or rename it.
    fn final_name(&self) -> Result<CString, FsError> {
        match self.comps.last() {
            None => Err(FsError::InvalidPath {
                path: self.shown.clone(),
                reason: "the sandbox root cannot be created, replaced, moved or removed",
            }),
            Some(&c) if is_dot(c) => Err(FsError::InvalidPath {
                path: self.shown.clone(),
                reason: "the last component cannot be '.' or '..'",
            }),
            Some(&c) => Ok(cstring(c)),
        }
    }

    fn err(&self, e: io::Error) -> FsError {
        FsError::from_io(e, &self.shown)
    }
}

fn is_dot(c: &str) -> bool {
    c == "." || c == ".."
}

fn join_shown(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// A caller's invalid path, made printable and short for an error message.
fn sanitize(input: &str) -> String {
    let short: String = input.chars().take(200).collect();
    let mut s = format!("{:?}", short);
    if short.len() < input.len() {
        s.push_str("...");
    }
    s
}

/// Only for strings already checked to hold no NUL byte.
fn cstring(s: &str) -> CString {
    CString::new(s).expect("sandbox paths are checked for NUL bytes")
}

/// Magic numbers (`statfs.f_type`) of kernel interface file systems: through them the host
/// privileges of the server would read or change host state, so they are off limits.
const PSEUDO_FS: &[u32] = &[
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x0027_e0eb, // cgroup
    0x6367_7270, // cgroup2
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x7363_6673, // securityfs
    0xcafe_4a11, // bpf
    0x6165_676c, // pstore
    0xde5e_81e4, // efivarfs
    0x6265_6570, // configfs
    0x4249_4e4d, // binfmt_misc
    0xf97c_ff8c, // selinuxfs
    0x4341_5d53, // smackfs
    0x6573_5543, // fusectl
    0x6e73_6673, // nsfs
    0x1cd1,      // devpts
];

fn check_fs(fd: BorrowedFd<'_>, shown: &str) -> Result<(), FsError> {
    let st = rustix::fs::fstatfs(fd).map_err(|e| FsError::from_io(e.into(), shown))?;
    // The magic is a 32-bit value stored in a word whose width and sign vary by architecture.
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as u32;
    if PSEUDO_FS.contains(&magic) {
        return Err(FsError::PermissionDenied {
            path: shown.into(),
            reason: "kernel interface file systems (proc, sysfs, cgroup, ...) are not accessible through the file API",
        });
    }
    Ok(())
}

/// `openat2(2)`, retried while the kernel answers EAGAIN (a rename or mount raced a `..`
/// under RESOLVE_IN_ROOT) or EINTR.
fn openat2(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    let resolve = ResolveFlags::from_bits_retain(resolve);
    for _ in 0..RETRIES {
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
            Ok(fd) => return Ok(fd),
            Err(Errno::AGAIN | Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// Plain `openat` of one name relative to `dir` (callers pass O_NOFOLLOW or O_EXCL).
fn openat_raw(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> io::Result<OwnedFd> {
    let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(mode),
    )?)
}

fn fstatat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<Stat> {
    Ok(rustix::fs::statat(
        dir,
        name,
        AtFlags::from_bits_retain(flags as u32),
    )?)
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    fstatat(fd, c"", libc::AT_EMPTY_PATH)
}

/// Never follows a final symlink.
fn mkdirat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))?)
}

/// Removes the name itself, never a link's target.
fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(
        dir,
        name,
        AtFlags::from_bits_retain(flags as u32),
    )?)
}

/// Moves names, following no final link.
fn renameat2(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    let flags = RenameFlags::from_bits_retain(flags);
    Ok(rustix::fs::renameat_with(
        from_dir, from, to_dir, to, flags,
    )?)
}

fn readlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    Ok(rustix::fs::readlinkat(dir, name, Vec::new())?.into_bytes())
}

fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let fl = rustix::fs::fcntl_getfl(fd)?;
    Ok(rustix::fs::fcntl_setfl(fd, fl - OFlags::NONBLOCK)?)
}

/// Closes a written file and reports the error `drop` would swallow (some file systems report
/// a full disk only there).
fn close_checked(file: File) -> io::Result<()> {
    sys::close_checked(file.into())
}

fn random_suffix() -> u64 {
    let mut buf = [0u8; 8];
    if let Ok(8) = rustix::rand::getrandom(&mut buf, GetRandomFlags::NONBLOCK) {
        return u64::from_ne_bytes(buf);
    }
    // O_EXCL keeps a predictable name safe; it only costs retries.
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32) ^ COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// A temporary file being written; unlinked (by name, relative to its directory) unless kept.
struct Temp<'a> {
    dir: BorrowedFd<'a>,
    name: CString,
    keep: bool,
}

impl Temp<'_> {
    fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if !self.keep {
            let _ = unlinkat(self.dir, &self.name, 0);
        }
    }
}

/// What a written file gets besides its bytes: its permission bits (`None`: those of the file
/// it replaces, else 0644) and its user metadata.
struct NewFile<'a> {
    mode: Option<u32>,
    metadata: &'a BTreeMap<String, String>,
}

fn create_temp(dir: BorrowedFd<'_>) -> io::Result<(Temp<'_>, File)> {
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..16 {
        let name = cstring(&format!("{TEMP_PREFIX}{:016x}", random_suffix()));
        match openat_raw(
            dir,
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
            0o600,
        ) {
            Ok(fd) => {
                let temp = Temp {
                    dir,
                    name,
                    keep: false,
                };
                return Ok((temp, File::from(fd)));
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn entry_at(dir: BorrowedFd<'_>, name: &CStr, shown: &str) -> io::Result<Entry> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    let st = fstatat(dir, name, flags)?;
    let r#type = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => EntryType::File,
        libc::S_IFDIR => EntryType::Dir,
        libc::S_IFLNK => EntryType::Symlink,
        _ => EntryType::Other,
    };
    let target = if r#type == EntryType::Symlink && !name.is_empty() {
        Some(String::from_utf8_lossy(&readlinkat(dir, name)?).into_owned())
    } else {
        None
    };
    let metadata = match r#type {
        EntryType::File | EntryType::Dir if name.is_empty() => metadata_of(dir),
        EntryType::File | EntryType::Dir => {
            openat_raw(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0)
                .ok()
                .and_then(|fd| metadata_of(fd.as_fd()))
        }
        _ => None,
    };
    let entry_name = match shown.rsplit('/').next() {
        Some("") | None => "/".to_owned(),
        Some(n) => n.to_owned(),
    };
    Ok(Entry {
        name: entry_name,
        path: shown.to_owned(),
        r#type,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        modified: u64::try_from(st.st_mtime).unwrap_or(0),
        target,
        metadata,
    })
}

/// The `user.e2b.*` attributes of what `fd` (any descriptor, `O_PATH` included) refers to;
/// `None` when there are none or they cannot be read (a file the sandbox's user may not read,
/// a file system without attributes): metadata is shown when there is some, never an error.
/// Through `/proc/self/fd` because the `f*xattr` calls refuse `O_PATH` descriptors; the link
/// names the very inode the descriptor holds, so nothing is resolved by name again.
fn metadata_of(fd: BorrowedFd<'_>) -> Option<BTreeMap<String, String>> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let mut names = vec![0u8; METADATA_READ_LIMIT];
    let n = rustix::fs::listxattr(path.as_str(), &mut names).ok()?;
    let mut out = BTreeMap::new();
    let mut value = vec![0u8; METADATA_READ_LIMIT];
    for name in names[..n.min(names.len())].split(|&b| b == 0) {
        let Some(key) = name.strip_prefix(METADATA_XATTR_PREFIX.as_bytes()) else {
            continue;
        };
        if key.is_empty() {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if let Ok(len) = rustix::fs::getxattr(path.as_str(), name, &mut value) {
            out.insert(
                String::from_utf8_lossy(key).into_owned(),
                String::from_utf8_lossy(&value[..len.min(value.len())]).into_owned(),
            );
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Removes `name` in `parent`: unlink it; if it is a directory, empty it first when
/// `recursive`, then rmdir it. Every step acts on a descriptor, so a directory swapped for a
/// symlink at any moment is unlinked as a link, never followed.
fn remove_entry(
    parent: BorrowedFd<'_>,
    name: &CStr,
    shown: &str,
    recursive: bool,
    depth: usize,
    budget: &mut u64,
) -> Result<(), FsError> {
    let err = |e: io::Error| FsError::from_io(e, shown);
    for _ in 0..RETRIES {
        match unlinkat(parent, name, 0) {
            Ok(()) => return Ok(()),
            // Linux answers EISDIR for a directory.
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
            Err(e) => return Err(err(e)),
        }
        if recursive {
            if depth >= MAX_REMOVE_DEPTH {
                return Err(FsError::TooLarge {
                    path: shown.into(),
                    detail: format!("directory tree deeper than {MAX_REMOVE_DEPTH} levels"),
                });
            }
            match openat2(
                parent,
                name,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                RESOLVE_STEP,
            ) {
                Ok(fd) => empty_dir(fd, shown, depth + 1, budget)?,
                // Swapped for a symlink or a file since the unlink: start over.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    return Err(FsError::Busy {
                        path: shown.into(),
                        reason: "is a mount point; recursive removal does not cross mounts",
                    })
                }
                Err(e) => return Err(err(e)),
            }
        }
        match unlinkat(parent, name, libc::AT_REMOVEDIR) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => continue,
            Err(e)
                if recursive
                    && matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) =>
            {
                continue
            }
            Err(e) => return Err(err(e)),
        }
    }
    Err(FsError::Busy {
        path: shown.into(),
        reason: "kept changing during removal; try again",
    })
}

/// Removes everything in the directory open as `fd`, in batches (re-reading from the start
/// after each batch, so a huge directory needs no huge memory).
fn empty_dir(fd: OwnedFd, shown: &str, depth: usize, budget: &mut u64) -> Result<(), FsError> {
    let mut dir = Dir::new(fd).map_err(|e| FsError::from_io(e, shown))?;
    loop {
        let mut batch = Vec::new();
        while batch.len() < 1024 {
            match dir.next_name() {
                None => break,
                Some(Ok(name)) => batch.push(name),
                Some(Err(e)) => return Err(FsError::from_io(e, shown)),
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        for name in &batch {
            if *budget == 0 {
                return Err(FsError::TooLarge {
                    path: shown.into(),
                    detail: format!("more than {REMOVE_LIMIT} entries to remove"),
                });
            }
            *budget -= 1;
            let child = join_shown(shown, &String::from_utf8_lossy(name.to_bytes()));
            let fd = dir.fd().map_err(|e| FsError::from_io(e, shown))?;
            match remove_entry(fd, name, &child, true, depth, budget) {
                Ok(()) | Err(FsError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        dir.rewind();
    }
}

/// A directory stream over a descriptor, yielding names other than `.`/`..`.
struct Dir {
    stream: rustix::fs::Dir,
}

impl Dir {
    fn new(fd: OwnedFd) -> io::Result<Dir> {
        Ok(Dir {
            stream: rustix::fs::Dir::new(fd)?,
        })
    }

    /// The stream's descriptor, for calls that do not move its position (`*at` calls).
    fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        Ok(self.stream.fd()?)
    }

    fn next_name(&mut self) -> Option<io::Result<CString>> {
        loop {
            match self.stream.read()? {
                Err(e) => return Some(Err(e.into())),
                Ok(ent) => {
                    let name = ent.file_name();
                    if name == c"." || name == c".." {
                        continue;
                    }
                    return Some(Ok(name.to_owned()));
                }
            }
        }
    }

    fn rewind(&mut self) {
        self.stream.rewind()
    }
}

/// Runs `f` on a fresh thread that carries the sandbox user's identity (uid, gid, no
/// supplementary groups) instead of the server's. A server running as root would otherwise
/// act inside the sandbox with root's rights — and could not even create files there, since
/// host uid 0 has no mapping in the sandbox's user namespace (EOVERFLOW).
///
/// The kernel's calls on purpose (rustix's `thread` ones): glibc's setresuid/setgroups change
/// every thread of the process; the kernel's change only the calling one, which is wanted here.
pub fn as_sandbox_user<T: Send>(
    owner: (u32, u32),
    f: impl FnOnce() -> T + Send,
) -> Result<T, FsError> {
    if sys::geteuid() != 0 || owner.0 == 0 {
        return Ok(f());
    }
    std::thread::scope(|scope| {
        let handle = scope.spawn(move || {
            // This thread ends when `f` returns, so nothing else ever runs with these
            // credentials.
            let (uid, gid) = (Uid::from_raw(owner.0), Gid::from_raw(owner.1));
            rustix::thread::set_thread_groups(&[])
                .and_then(|_| rustix::thread::set_thread_res_gid(gid, gid, gid))
                .and_then(|_| rustix::thread::set_thread_res_uid(uid, uid, uid))
                .map_err(|e| FsError::from_io(e.into(), "/"))?;
            Ok(f())
        });
        handle.join().unwrap_or_else(|_| {
            Err(FsError::Io {
                path: "/".into(),
                source: io::Error::other("file operation thread panicked"),
            })
        })
    })
}
