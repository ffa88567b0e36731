//! Watching a run from outside: whether a scratch tmpfs filled up (blocks or inodes), and —
//! where no cgroup counts them — how many processes and threads the sandbox has. What the
//! sandbox could refuse itself (an `ENOSPC`, a fork's `EAGAIN`) leaves no trace the supervisor
//! could read, so the states that cause them are looked at instead: each tick of the
//! supervisor's loop and once more after everything in the sandbox has ended.
//!
//! The descriptors come from the init (see `channel::Watched`). Nothing read through them is
//! trusted beyond the Outcome of the sandbox that sent them, and each is checked to be what it
//! claims (tmpfs, procfs) before it is used.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Dir, StatFs};

use crate::channel::Watched;

/// What the watch saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// A scratch tmpfs had no free block left.
    pub disk_full: bool,
    /// A scratch tmpfs had no free inode left.
    pub inodes_exhausted: bool,
    /// Most tasks (processes and threads) seen at once, the init not counted; `None` when
    /// nothing was counted (a cgroup counts instead).
    pub peak_tasks: Option<u64>,
}

pub struct Watch {
    scratch: Vec<OwnedFd>,
    proc_: Option<Dir>,
    seen: Seen,
}

fn is(s: &StatFs, magic: libc::__fsword_t) -> bool {
    s.f_type == magic
}

impl Watch {
    pub fn none() -> Watch {
        Watch {
            scratch: Vec::new(),
            proc_: None,
            seen: Seen::default(),
        }
    }

    /// Takes the descriptors sent with `Confined`; `kinds` says what each is. Descriptors of
    /// the wrong kind, and any beyond `kinds`, are closed.
    pub fn adopt(kinds: &[Watched], fds: Vec<OwnedFd>) -> Watch {
        let mut w = Watch::none();
        for (kind, fd) in kinds.iter().zip(fds) {
            let Ok(st) = rustix::fs::fstatfs(&fd) else {
                continue;
            };
            match kind {
                // An image's root is an overlay, whose free space is its writable tmpfs'.
                Watched::Scratch
                    if is(&st, libc::TMPFS_MAGIC) || is(&st, libc::OVERLAYFS_SUPER_MAGIC) =>
                {
                    w.scratch.push(fd)
                }
                Watched::Proc if is(&st, libc::PROC_SUPER_MAGIC) && w.proc_.is_none() => {
                    w.proc_ = Dir::new(fd).ok();
                }
                _ => {}
            }
        }
        w
    }

    /// Looks once: the scratch filesystems' free space and inodes, and the task count.
    pub fn sample(&mut self) {
        for fd in &self.scratch {
            let Ok(st) = rustix::fs::fstatfs(fd) else {
                continue;
            };
            if st.f_blocks > 0 && st.f_bavail == 0 {
                self.seen.disk_full = true;
            }
            if st.f_files > 0 && st.f_ffree == 0 {
                self.seen.inodes_exhausted = true;
            }
        }
        if let Some(n) = self.count_tasks() {
            self.saw_tasks(n);
        }
    }

    /// A count of the sandbox's tasks made elsewhere (the init's at the payload's end).
    pub fn saw_tasks(&mut self, n: u64) {
        let peak = self.seen.peak_tasks.get_or_insert(0);
        *peak = (*peak).max(n);
    }

    /// Tasks in the sandbox's pid namespace but its init: for each process there, the
    /// threads its `task` directory holds (procfs gives that directory 2 + threads links).
    fn count_tasks(&mut self) -> Option<u64> {
        let dir = self.proc_.as_mut()?;
        dir.rewind();
        let mut pids = Vec::new();
        while let Some(Ok(entry)) = dir.read() {
            let name = entry.file_name().to_bytes();
            if name != b"1" && !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
                pids.push(entry.file_name().to_owned());
            }
        }
        let fd = dir.fd().ok()?;
        let mut tasks = 0u64;
        for pid in pids {
            let mut path = pid.into_bytes();
            path.extend_from_slice(b"/task");
            // A process that ended since the listing is simply not counted.
            if let Ok(st) =
                rustix::fs::statat(fd, path.as_slice(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            {
                // nlink_t is narrower than u64 on some architectures.
                #[allow(clippy::useless_conversion)]
                let links = u64::from(st.st_nlink);
                tasks += links.saturating_sub(2).max(1);
            }
        }
        Some(tasks)
    }

    pub fn seen(&self) -> Seen {
        self.seen
    }
}

/// Entries the disk watch looks at per walk, past which the tree counts as over the limit:
/// a sandbox must not make the walk itself its weapon.
const DISK_WALK_ENTRIES: u64 = 1 << 20;

/// The `--disk` limit where no tmpfs can be mounted (no mount namespace): the scratch
/// directory's usage, walked from outside every so often. Not a cap — between two looks a
/// program can write past it (each file stays under RLIMIT_FSIZE) — but what is running
/// when a look finds the usage over the limit and still growing is ended, and says
/// `limits_hit: ["disk"]`. Over but not growing (a command that cleans up) ends nothing.
pub struct DiskWatch {
    root: OwnedFd,
    limit: u64,
    next: std::time::Instant,
    /// What the last look found (`u64::MAX`: a tree too large to walk).
    used: u64,
}

impl DiskWatch {
    /// Watches the directory `dir` (opened now: renaming it later changes nothing).
    pub fn open(dir: &std::path::Path, limit: u64) -> std::io::Result<DiskWatch> {
        let root = rustix::fs::open(
            dir,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(DiskWatch {
            root,
            limit,
            next: std::time::Instant::now(),
            used: 0,
        })
    }

    /// Looks when a look is due (a walk costs in proportion to the tree: the next waits ten
    /// times as long as this one took, at least 100 ms, or now with `force`); says whether
    /// this look found the usage over the limit and higher than the previous look did.
    pub fn grew_over(&mut self, force: bool) -> bool {
        let now = std::time::Instant::now();
        if !force && now < self.next {
            return false;
        }
        let used = dir_usage(self.root.as_fd()).unwrap_or(u64::MAX);
        let took = now.elapsed();
        self.next =
            std::time::Instant::now() + (took * 10).max(std::time::Duration::from_millis(100));
        let grew = used > self.used || used == u64::MAX;
        self.used = used;
        grew && used > self.limit
    }
}

/// Bytes the tree under `root` occupies (allocated blocks, each inode once), on `root`'s
/// filesystem only, symlinks not followed. One directory is open at a time: each is opened
/// from `root` by its relative path, beneath it, through no symlink and no other mount.
/// `None`: the tree cannot be walked whole (more than `DISK_WALK_ENTRIES` entries, or a path
/// too long to open) — a sandbox cannot hide usage there.
pub(crate) fn dir_usage(root: BorrowedFd<'_>) -> Option<u64> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    let mut seen_inodes = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut entries = 0u64;
    let mut stack: Vec<Vec<u8>> = vec![b".".to_vec()];
    while let Some(path) = stack.pop() {
        let fd = match rustix::fs::openat2(
            root,
            path.as_slice(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NAMETOOLONG) => return None,
            // Removed or replaced since it was listed: not counted.
            Err(_) => continue,
        };
        let Ok(mut dir) = Dir::read_from(&fd) else {
            continue;
        };
        while let Some(Ok(e)) = dir.read() {
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            entries += 1;
            if entries > DISK_WALK_ENTRIES {
                return None;
            }
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            // nlink_t and blkcnt_t are narrower than u64 on some architectures.
            #[allow(clippy::useless_conversion)]
            let nlink = u64::from(st.st_nlink);
            if nlink <= 1 || seen_inodes.insert((st.st_dev, st.st_ino)) {
                total = total.saturating_add((st.st_blocks as u64).saturating_mul(512));
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                let mut child = path.clone();
                child.push(b'/');
                child.extend_from_slice(name.to_bytes());
                stack.push(child);
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's blocks count once however many links it has; a symlink to a large file
    /// outside is not followed; growing past the limit is seen, and not seen again until the
    /// usage grows once more.
    #[test]
    fn the_disk_watch_counts_what_the_tree_holds() {
        let base = std::env::temp_dir().join(format!("cordon-diskwatch-{}", std::process::id()));
        let dir = base.join("run");
        std::fs::create_dir_all(dir.join("a/b")).expect("dirs");
        let outside = base.join("outside");
        std::fs::write(&outside, vec![1u8; 4 << 20]).expect("outside file");
        std::os::unix::fs::symlink(&outside, dir.join("link")).expect("symlink");
        std::fs::write(dir.join("a/b/f"), vec![1u8; 1 << 20]).expect("file");
        std::fs::hard_link(dir.join("a/b/f"), dir.join("a/g")).expect("hard link");
        let root = rustix::fs::open(
            &dir,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("open");
        let used = dir_usage(root.as_fd()).expect("walked");
        assert!(
            (1 << 20..2 << 20).contains(&used),
            "1 MiB linked twice, a symlink to 4 MiB: {used}"
        );
        let mut w = DiskWatch::open(&dir, 1 << 19).expect("watch");
        assert!(w.grew_over(true), "over the limit, and grown from nothing");
        assert!(!w.grew_over(true), "over, but not growing");
        std::fs::write(dir.join("h"), vec![1u8; 1 << 20]).expect("more");
        assert!(w.grew_over(true), "grown again");
        let _ = std::fs::remove_dir_all(&base);
    }
}
