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
    /// Its live processes (the init included).
    pub processes: u64,
}

/// The clock ticks `/proc/<pid>/stat` counts CPU time in (USER_HZ: 100 on every Linux ABI).
const USER_HZ: u64 = 100;

/// Takes a snapshot of the sandbox whose init is host pid `init_pid` and whose root directory
/// is `root`; `scratch` are the paths (inside the sandbox) of its writable filesystems.
/// `unmounted_disk`: the sandbox has no filesystems of its own (no mount namespace: its root
/// is a directory on a host filesystem, watched against `--disk` by `watch::DiskWatch`);
/// its disk is then what that directory holds, against this limit — not the host
/// filesystem's totals.
pub fn take(
    init_pid: i32,
    root: BorrowedFd<'_>,
    scratch: &[&str],
    unmounted_disk: Option<u64>,
) -> Snapshot {
    let page = rustix::param::page_size() as u64;
    let mut s = Snapshot::default();
    for (pid, _) in crate::freeze::tree(init_pid) {
        s.processes += 1;
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
    let (used, total) = disk(root, scratch, unmounted_disk);
    s.disk_used_bytes = used;
    s.disk_total_bytes = total;
    s
}

/// Used and total bytes of the sandbox's writable scratch filesystems (see [`take`]): a few
/// `openat2` and `fstatvfs` calls, or, without a mount namespace, a walk of its directory
/// against `unmounted_disk`.
pub fn disk(root: BorrowedFd<'_>, scratch: &[&str], unmounted_disk: Option<u64>) -> (u64, u64) {
    if let Some(limit) = unmounted_disk {
        // A tree too large to walk counts as full, as the watch treats it.
        return (crate::watch::dir_usage(root).unwrap_or(limit), limit);
    }
    let (mut used, mut total) = (0u64, 0u64);
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
            total += v.f_blocks * v.f_frsize;
            used += v.f_blocks.saturating_sub(v.f_bfree) * v.f_frsize;
        }
    }
    (used, total)
}

/// The host pids of a sandbox's processes now: its init and every descendant.
pub fn processes(init_pid: i32) -> Vec<i32> {
    crate::freeze::tree(init_pid)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// One process of a sandbox, as a person listing them wants to see it. Everything here is
/// written by the sandbox (its command line, even its name): callers show it as text.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessRow {
    /// Its pid inside the sandbox (the last of `NSpid`), not the host's.
    pub pid: i32,
    /// Its parent's pid inside the sandbox; 0 for the sandbox's init.
    pub ppid: i32,
    /// The kernel's one-letter state (`R` running, `S` sleeping, `Z` zombie, …).
    pub state: String,
    /// The command line, arguments joined by spaces (its first [`COMMAND_MAX`] bytes, what is
    /// not UTF-8 replaced); `[name]` when it has none (a zombie).
    pub command: String,
    pub cpu_ns: u64,
    pub rss_bytes: u64,
}

/// The longest command line a [`ProcessRow`] carries: a process can make its own as long as
/// its stack (megabytes), which a list of hundreds must not copy whole.
pub const COMMAND_MAX: usize = 1024;

/// The rows of `pids` (host pids, as [`processes`] gives them), those that still run.
pub fn process_rows(pids: &[i32]) -> Vec<ProcessRow> {
    use std::io::Read;
    let mut rows = Vec::new();
    for pid in pids {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or("")
        };
        // NSpid lists the pid in each namespace from the host's down: the last is the
        // sandbox's own. The parent's is found among the rows (its host pid is in PPid).
        let inner = |list: &str| {
            list.split_whitespace()
                .last()
                .and_then(|v| v.parse::<i32>().ok())
        };
        let Some(own) = inner(field("NSpid:")) else {
            continue;
        };
        let host_ppid = field("PPid:").parse::<i32>().unwrap_or(0);
        let state = field("State:").chars().next().unwrap_or('?').to_string();
        let mut raw = Vec::new();
        if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
            let _ = f.take(COMMAND_MAX as u64).read_to_end(&mut raw);
        }
        while raw.last() == Some(&0) {
            raw.pop();
        }
        let command = if raw.is_empty() {
            format!("[{}]", field("Name:"))
        } else {
            String::from_utf8_lossy(&raw).replace('\0', " ")
        };
        let u = usage(&[*pid], false);
        rows.push((
            *pid,
            host_ppid,
            ProcessRow {
                pid: own,
                ppid: 0,
                state,
                command,
                cpu_ns: u.cpu_ns,
                rss_bytes: u.rss_bytes,
            },
        ));
    }
    let inner_of: std::collections::HashMap<i32, i32> =
        rows.iter().map(|(host, _, r)| (*host, r.pid)).collect();
    rows.into_iter()
        .map(|(_, host_ppid, mut r)| {
            r.ppid = inner_of.get(&host_ppid).copied().unwrap_or(0);
            r
        })
        .collect()
}

/// What a known set of processes used so far: cheap enough to read around every call (a few
/// `/proc` files per process, no scan of `/proc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    /// User + system CPU of the processes, and of the children they reaped (`cutime` and
    /// `cstime`: a tool's subprocess that ended during the call still counts), in nanoseconds;
    /// the kernel counts in 10 ms ticks.
    pub cpu_ns: u64,
    /// Resident memory of the processes together.
    pub rss_bytes: u64,
    /// Their resident high-water marks (`VmHWM`) together: the peak since each started.
    pub peak_rss_bytes: u64,
}

/// `peak`: also read the high-water marks (`/proc/<pid>/status`, the largest of the files);
/// a sample taken before a call does not need them.
pub fn usage(pids: &[i32], peak: bool) -> ProcessUsage {
    let page = rustix::param::page_size() as u64;
    let mut u = ProcessUsage::default();
    for pid in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) {
                // After the name: state(0) ppid … utime(11) stime(12) cutime(13) cstime(14).
                let f: Vec<&str> = rest.split_whitespace().collect();
                let ticks: u64 = [11, 12, 13, 14]
                    .iter()
                    .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
                    .sum();
                u.cpu_ns += ticks * (1_000_000_000 / USER_HZ);
            }
        }
        if let Ok(statm) = std::fs::read_to_string(format!("/proc/{pid}/statm")) {
            if let Some(rss) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
            {
                u.rss_bytes += rss * page;
            }
        }
        if !peak {
            continue;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(kb) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                u.peak_rss_bytes += kb * 1024;
            }
        }
    }
    u
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    /// A process tree as a person sees it: each command line, its parent, long lines cut.
    #[test]
    fn rows_name_each_process_its_parent_and_cut_a_huge_command_line() {
        let long = "x".repeat(COMMAND_MAX * 4);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 31; wait", &long])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let rows = loop {
            let rows = process_rows(&processes(pid));
            if rows.len() >= 3 || std::time::Instant::now() > deadline {
                break rows;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let _ = std::process::Command::new("pkill")
            .args(["-P", &pid.to_string()])
            .status();
        let _ = child.kill();
        let _ = child.wait();
        let sh = rows.iter().find(|r| r.pid == pid).unwrap();
        assert!(sh.command.starts_with("sh -c sleep 30"), "{sh:?}");
        assert!(sh.command.len() <= COMMAND_MAX, "{}", sh.command.len());
        let sleeps: Vec<_> = rows
            .iter()
            .filter(|r| r.command.starts_with("sleep 3"))
            .collect();
        assert_eq!(
            sleeps.len(),
            2,
            "{:?}",
            rows.iter()
                .map(|r| (
                    r.pid,
                    r.ppid,
                    r.command.chars().take(40).collect::<String>()
                ))
                .collect::<Vec<_>>()
        );
        assert!(sleeps.iter().all(|r| r.ppid == pid), "{rows:?}");
        assert!(sleeps.iter().all(|r| r.state == "S"), "{rows:?}");
    }

    /// A child that burns CPU and holds memory shows both, read from outside.
    #[test]
    fn a_busy_process_shows_cpu_and_memory() {
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import time\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nt = time.time()\nwhile time.time() - t < 0.5: pass\nprint('done', flush=True)\ntime.sleep(30)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let u = usage(&processes(pid), true);
        let _ = child.kill();
        let _ = child.wait();
        assert!(u.cpu_ns >= 300_000_000, "{u:?}");
        assert!(u.rss_bytes >= 60 << 20, "{u:?}");
        assert!(u.peak_rss_bytes >= u.rss_bytes, "{u:?}");
        assert_eq!(
            usage(&[pid], true),
            ProcessUsage::default(),
            "a reaped process uses nothing"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn without_filesystems_of_its_own_the_disk_is_the_directory_against_the_limit() {
        let dir = std::env::temp_dir().join(format!("cordon-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("workspace")).expect("dir");
        std::fs::write(dir.join("workspace/big"), vec![7u8; 3 << 20]).expect("write");
        let root = rustix::fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .expect("open");
        let me = std::process::id() as i32;
        let s = take(me, root.as_fd(), &["/workspace"], Some(64 << 20));
        assert_eq!(s.disk_total_bytes, 64 << 20);
        assert!(
            (3 << 20..8 << 20).contains(&s.disk_used_bytes),
            "{}",
            s.disk_used_bytes
        );
        // With filesystems of its own, the totals are theirs (here: the host's, far more).
        let host = take(me, root.as_fd(), &["/workspace"], None);
        assert_ne!(host.disk_total_bytes, 64 << 20);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
