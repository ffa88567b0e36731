//! Walkers of the host's `/proc`: a process's descendants (to end every one of them) and the
//! tasks a uid runs.

#[allow(unused_imports)]
use super::*;

/// Every process below `root` (children, their children, …), read from the host's /proc. A
/// process that ends or forks meanwhile is missed: callers kill, reap and ask again until
/// nothing is left (a subreaper's tree cannot leave it, so the loop ends).
pub fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    // Each task's `children` file (CONFIG_PROC_CHILDREN) names its children: a walk of the
    // tree alone, instead of reading every process of the host.
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        match children_of(found[i]) {
            Some(kids) => {
                for k in kids {
                    if !found.contains(&k) {
                        found.push(k);
                    }
                }
            }
            None if i == 0 => return descendants_by_scan(root),
            // Ended meanwhile: its children come to the subreaper, seen on the next call.
            None => {}
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// The children of every thread of `pid`, or None where /proc has no `children` files.
fn children_of(pid: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    let mut kids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).ok()?;
        kids.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
    }
    Some(kids)
}

/// [`descendants`] from every process's `stat` (its parent), where `children` is missing.
fn descendants_by_scan(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent_of = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses; the last ')' ends it.
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<libc::pid_t>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        for (pid, ppid) in &parent_of {
            if *ppid == p && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found.remove(0);
    found
}

/// SIGKILLs every process below `root` (see [`descendants`]) once; says how many it found.
/// Callers reap and ask again until none is left.
pub fn kill_descendants(root: libc::pid_t) -> usize {
    let below = descendants(root);
    for pid in &below {
        let _ = kill(*pid, libc::SIGKILL);
    }
    below.len()
}

/// Kills and reaps every process below the calling process, a subreaper whose other children
/// are all gone, until none is left: a tree without a pid namespace to end it all at once
/// (each kill hands the victim's children to us for the next round, and a fork bomb runs out
/// of processes that have not been killed yet).
pub fn end_descendants() {
    let me = getpid();
    for _ in 0..100_000 {
        let found = kill_descendants(me);
        let mut reaped = false;
        while let Ok(Some(_)) = wait4(-1, true) {
            reaped = true;
        }
        if found == 0 && !reaped {
            return;
        }
        if !reaped {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// How many tasks (threads included, as RLIMIT_NPROC counts them) run under real uid `uid` in
/// this process's user namespace: the kernel checks the limit against that namespace's count
/// (a task of the same uid number in another user namespace is another user). The namespace
/// is told by its uid map as this process reads it (the kernel shows each map relative to the
/// reader), not by `/proc/PID/ns/user`, which needs ptrace access — which Landlock refuses
/// outside the sandbox's own domain. A task whose map cannot be read is counted.
pub fn tasks_of_uid(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let own_ns = std::fs::read("/proc/self/uid_map").ok();
    let mut n = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(|s| s.parse::<u32>().ok()).is_none() {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let real = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u32>().ok());
        let elsewhere = || match (&own_ns, std::fs::read(entry.path().join("uid_map"))) {
            (Some(own), Ok(theirs)) => *own != theirs,
            _ => false,
        };
        if real == Some(uid) && !elsewhere() {
            n += entry
                .path()
                .join("task")
                .read_dir()
                .map_or(1, |d| d.count() as u64);
        }
    }
    n
}
