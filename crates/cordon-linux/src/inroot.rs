//! Paths inside the sandbox's new root while it is built, resolved by descriptor so that no
//! step of the build can leave that root.
//!
//! Threat model: until the second `pivot_root` the host's whole tree is reachable (at
//! `/oldroot`), and what lies in the new root is not ours: an image's root is hostile input,
//! and a bind brings in a host tree that sandboxes may have written. Any directory on the way
//! to a mount point or the working directory may be a symlink (`x -> ../../../../oldroot/tmp`,
//! `/etc -> /oldroot/etc`, a dangling `/etc/hosts -> /oldroot/…`); a path string handed to the
//! kernel would follow it onto the host, where a `mkdir -p` or a file made as a mount point
//! stays after the sandbox is gone.
//!
//! So every path is walked here one name at a time, each looked up relative to the descriptor
//! of its parent without following it (`openat(O_PATH | O_NOFOLLOW)`). A symlink's target is
//! read and walked the same way, with `/` and `..` meaning the new root: the semantics of
//! `openat2(RESOLVE_IN_ROOT)` (which needs Linux 5.6, while a root of host binds is built on
//! older kernels too), including for the magic links of a `/proc`, whose text is walked
//! inside like any other. A missing directory is made with `mkdirat` on its parent's
//! descriptor, a missing file mount point with `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`: what
//! is made is always inside the root. Mounts are then made on the descriptor
//! ([`fd_path`]), never on a path re-read from the tree.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

/// Symlinks followed in one resolution before it fails with `ELOOP` (the kernel's limit).
const MAX_LINKS: u32 = 40;
/// Steps of one resolution (names looked up, directories made) before it fails with `ELOOP`:
/// a bound on a tree that keeps changing under the walk.
const MAX_STEPS: u32 = 1 << 16;

/// Where `/proc/self/fd` is while the root is built: the host's /proc, under the staging
/// root's `/oldroot` (the sandbox's own /proc is mounted later, and inside the new root).
const SELF_FD: &str = "/oldroot/proc/self/fd";

/// What [`InRoot::resolve`] makes of a missing path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Make {
    /// Nothing: a missing name is `ENOENT`.
    Nothing,
    /// Every missing directory, the last one included (`mkdir -p`).
    Dirs,
    /// Missing directories on the way and, if the last name is missing, an empty file.
    File,
}

/// The root being built, by descriptor.
pub(crate) struct InRoot {
    root: OwnedFd,
}

impl InRoot {
    /// Opens `dir` (a path in the staging root, which is ours) as the root to resolve in.
    pub(crate) fn open(dir: &Path) -> io::Result<InRoot> {
        let root = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(InRoot { root })
    }

    /// An `O_PATH` descriptor of the directory `path` names inside the root, made (with its
    /// parents, mode `mode` before the umask) where missing.
    pub(crate) fn dir(&self, path: &Path, mode: u32) -> io::Result<OwnedFd> {
        self.resolve(path, Make::Dirs, mode)
    }

    /// Makes the symlink `link` (its parent directories too) pointing at `target`. The
    /// target is only text here; it is followed inside the sandbox, after the pivot.
    pub(crate) fn symlink(&self, target: &Path, link: &Path) -> io::Result<()> {
        let name = link
            .file_name()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let parent = self.dir(link.parent().unwrap_or(Path::new("/")), 0o755)?;
        Ok(rustix::fs::symlinkat(target, &parent, name)?)
    }

    /// An `O_PATH` descriptor of what `path` names inside the root: every symlink on the way
    /// (the last name's too) followed inside it, `..` stopping at it. Missing names are made
    /// as `make` says (directories with `mode`, files with 0644, both before the umask).
    pub(crate) fn resolve(&self, path: &Path, make: Make, mode: u32) -> io::Result<OwnedFd> {
        // The directories walked through, the root first: `..` is the one below the top.
        let mut stack = vec![self.root.try_clone()?];
        // Names still to walk, the next one last.
        let mut todo: Vec<OsString> = names(path.as_os_str());
        let (mut links, mut steps) = (0, 0);
        while let Some(name) = todo.pop() {
            steps += 1;
            if steps > MAX_STEPS {
                return Err(Errno::LOOP.into());
            }
            match name.as_bytes() {
                b"." => continue,
                b".." => {
                    if stack.len() > 1 {
                        stack.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let last = todo.is_empty();
            let cur = stack.last().ok_or(Errno::INVAL)?;
            let found = rustix::fs::openat(
                cur,
                &name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            let fd = match found {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match make {
                        Make::Nothing => return Err(Errno::NOENT.into()),
                        Make::File if last => match rustix::fs::openat(
                            cur,
                            &name,
                            OFlags::CREATE
                                | OFlags::EXCL
                                | OFlags::WRONLY
                                | OFlags::NOFOLLOW
                                | OFlags::CLOEXEC,
                            Mode::from_raw_mode(0o644),
                        ) {
                            Ok(_) | Err(Errno::EXIST) => {}
                            Err(e) => return Err(e.into()),
                        },
                        Make::Dirs | Make::File => {
                            match rustix::fs::mkdirat(cur, &name, Mode::from_raw_mode(mode)) {
                                Ok(()) | Err(Errno::EXIST) => {}
                                Err(e) => return Err(e.into()),
                            }
                        }
                    }
                    // Looked up again: whatever is there now (made here or meanwhile) is
                    // walked like anything else.
                    todo.push(name);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
            match kind {
                FileType::Directory => stack.push(fd),
                FileType::Symlink => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(Errno::LOOP.into());
                    }
                    let target = rustix::fs::readlinkat(&fd, c"", Vec::new())?;
                    if target.as_bytes().first() == Some(&b'/') {
                        stack.truncate(1);
                    }
                    todo.extend(names(OsStr::from_bytes(target.as_bytes())));
                }
                _ if last && make != Make::Dirs => return Ok(fd),
                _ => return Err(Errno::NOTDIR.into()),
            }
        }
        stack.pop().ok_or_else(|| Errno::INVAL.into())
    }
}

/// The names of `path`, the first one last (the order [`InRoot::resolve`] pops them in).
/// Empty names (`//`, a leading or trailing `/`) are dropped; `.` and `..` are kept for the
/// walk to interpret.
fn names(path: &OsStr) -> Vec<OsString> {
    path.as_bytes()
        .split(|b| *b == b'/')
        .filter(|n| !n.is_empty())
        .rev()
        .map(|n| OsStr::from_bytes(n).to_os_string())
        .collect()
}

/// A path the kernel resolves to exactly what `fd` holds (its `/proc/self/fd` entry, a magic
/// link): what `mount(2)` and `statvfs(2)` take to act on a descriptor. For a mount point
/// that was just mounted on, resolve it again first: the descriptor still holds what is
/// beneath the new mount.
pub(crate) fn fd_path(fd: &impl AsFd) -> PathBuf {
    Path::new(SELF_FD).join(fd.as_fd().as_raw_fd().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cordon-inroot-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    /// Links that leave the root by `..` or an absolute target, and a dangling last name,
    /// are all followed inside it; nothing is made beside it. Unprivileged.
    #[test]
    fn links_out_of_the_root_are_followed_inside_it() {
        let base = scratch("links");
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        let abs_out = format!("{}", outside.display());
        let rel_out = format!("../../../../../../../..{}", outside.display());
        std::os::unix::fs::symlink(&rel_out, root.join("x")).expect("link");
        std::os::unix::fs::symlink(&abs_out, root.join("y")).expect("link");
        std::os::unix::fs::symlink(&abs_out, root.join("etc/hosts")).expect("link");
        let r = InRoot::open(&root).expect("open");

        r.dir(Path::new("/x/a/b"), 0o755).expect("x/a/b");
        r.dir(Path::new("/y/c"), 0o755).expect("y/c");
        r.resolve(Path::new("/etc/hosts"), Make::File, 0o755)
            .expect("hosts");
        r.symlink(Path::new("sandbox"), Path::new("/y/user"))
            .expect("symlink");
        assert!(std::fs::symlink_metadata(&outside).is_err(), "made outside");
        let inside = root.join(outside.strip_prefix("/").expect("absolute"));
        assert!(inside.join("a/b").is_dir());
        assert!(inside.join("c").is_dir());
        assert!(inside.is_dir());
        assert!(std::fs::symlink_metadata(inside.join("user")).is_ok());

        // A file where a directory is wanted, and a loop, are errors.
        std::fs::write(root.join("f"), "").expect("file");
        assert!(r.dir(Path::new("/f/a"), 0o755).is_err());
        assert!(r.dir(Path::new("/f"), 0o755).is_err());
        std::os::unix::fs::symlink("loop", root.join("loop")).expect("link");
        let e = r.dir(Path::new("/loop/a"), 0o755).expect_err("loop");
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        // `..` stops at the root.
        r.dir(Path::new("/../../z"), 0o755).expect("z");
        assert!(root.join("z").is_dir());
        assert!(!base.join("z").exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
