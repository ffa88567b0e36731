//! Watching a run from outside: whether a scratch tmpfs filled up (blocks or inodes), and —
//! where no cgroup counts them — how many processes and threads the sandbox has. What the
//! sandbox could refuse itself (an `ENOSPC`, a fork's `EAGAIN`) leaves no trace the supervisor
//! could read, so the states that cause them are looked at instead: each tick of the
//! supervisor's loop and once more after everything in the sandbox has ended.
//!
//! The descriptors come from the init (see `channel::Watched`). Nothing read through them is
//! trusted beyond the Outcome of the sandbox that sent them, and each is checked to be what it
//! claims (tmpfs, procfs) before it is used.

use std::os::fd::OwnedFd;

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
            let peak = self.seen.peak_tasks.get_or_insert(0);
            *peak = (*peak).max(n);
        }
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
