//! A persistent sandbox's resource use right now, read from the host's `/proc` (the init and
//! its descendants) and from its scratch filesystems — the same in rootless mode, where there is
//! no cgroup to read.

use std::collections::BTreeSet;
use std::os::fd::BorrowedFd;

use rustix::fs::{OFlags, ResolveFlags};

/// What a sandbox uses at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// CPU time of its live processes (user + system), in nanoseconds.
    pub cpu_ns: u64,
    /// Resident memory of its processes together.
    pub memory_bytes: u64,
    /// Used and total bytes of its writable scratch filesystems together.
    pub disk_used_bytes: u64,
    pub disk_total_bytes: u64,
}

/// The clock ticks `/proc/<pid>/stat` counts CPU time in (USER_HZ: 100 on every Linux ABI).
const USER_HZ: u64 = 100;

/// Takes a snapshot of the sandbox whose init is host pid `init_pid` and whose root directory
/// is `root`; `scratch` are the paths (inside the sandbox) of its writable filesystems.
pub fn take(init_pid: i32, root: BorrowedFd<'_>, scratch: &[&str]) -> Snapshot {
    let page = rustix::param::page_size() as u64;
    let mut s = Snapshot::default();
    for (pid, _) in crate::freeze::tree(init_pid) {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) {
                // After the name: state(0) ppid … utime(11) stime(12).
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ticks: u64 = [11, 12]
                    .iter()
                    .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
                    .sum();
                s.cpu_ns += ticks * (1_000_000_000 / USER_HZ);
            }
        }
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm")) {
            if let Some(rss) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
            {
                s.memory_bytes += rss * page;
            }
        }
    }
    // Paths resolve inside the sandbox's root (its own mount namespace), never above it and
    // through no magic link, whatever the sandbox made of them; the same filesystem under two
    // paths counts once.
    let mut seen = BTreeSet::new();
    for p in scratch {
        let Ok(fd) = rustix::fs::openat2(
            root,
            p.trim_start_matches('/'),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        ) else {
            continue;
        };
        if let Ok(v) = rustix::fs::fstatvfs(&fd) {
            if !seen.insert((v.f_fsid, v.f_blocks, v.f_files)) {
                continue;
            }
            s.disk_total_bytes += v.f_blocks * v.f_frsize;
            s.disk_used_bytes += v.f_blocks.saturating_sub(v.f_bfree) * v.f_frsize;
        }
    }
    s
}
