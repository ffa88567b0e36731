//! The sandbox's processes as its init sees them through the sandbox's own `/proc`: who is
//! whose child, and how many tasks each holds. A persistent sandbox's init uses it to end
//! what a command left behind and, where no cgroup counts for it, to see a command's
//! processes and the sandbox's process limit.

use std::collections::{HashMap, HashSet};

/// One process: its parent and how many tasks (threads) it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub ppid: libc::pid_t,
    /// At least 1: a zombie still holds its slot under `RLIMIT_NPROC` until it is reaped.
    pub tasks: u64,
}

/// Parses `/proc/<pid>/stat`: the parent pid (field 4) and the thread count (field 20). The
/// command name (field 2) may hold spaces and parentheses, so fields are counted from the
/// last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Proc> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state).
    let ppid = fields.get(1)?.parse().ok()?;
    let tasks: u64 = fields.get(17)?.parse().ok()?;
    Some(Proc {
        ppid,
        tasks: tasks.max(1),
    })
}

/// Every process of the sandbox now. Processes that end while this reads are skipped.
pub(crate) fn scan() -> HashMap<libc::pid_t, Proc> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some(p) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        {
            out.insert(pid, p);
        }
    }
    out
}

/// The calling thread's children (the init is single-threaded, so all of its children),
/// zombies included. Where the kernel has no `children` file (CONFIG_PROC_CHILDREN), every
/// process's parent is looked up instead.
pub(crate) fn own_children() -> Vec<libc::pid_t> {
    match std::fs::read_to_string("/proc/thread-self/children") {
        Ok(t) => t
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        Err(_) => {
            let me = crate::sys::getpid();
            scan()
                .into_iter()
                .filter(|(_, p)| p.ppid == me)
                .map(|(pid, _)| pid)
                .collect()
        }
    }
}

/// Tasks per owner: for each process, the nearest ancestor in `roots` (itself excluded), or
/// `None` for a process under no root. `skip` (the init) is counted nowhere.
pub(crate) fn tasks_by_root(
    procs: &HashMap<libc::pid_t, Proc>,
    roots: &HashSet<libc::pid_t>,
    skip: libc::pid_t,
) -> HashMap<Option<libc::pid_t>, u64> {
    let mut owner: HashMap<libc::pid_t, Option<libc::pid_t>> = HashMap::new();
    let mut out: HashMap<Option<libc::pid_t>, u64> = HashMap::new();
    for (&pid, p) in procs {
        if pid == skip || roots.contains(&pid) {
            continue;
        }
        // Walk up until a root, the init, or a process already placed; the walk is bounded
        // by the table's size (a parent that vanished mid-scan ends it).
        let mut chain = vec![pid];
        let mut at = p.ppid;
        let found = loop {
            if roots.contains(&at) {
                break Some(at);
            }
            if let Some(o) = owner.get(&at) {
                break *o;
            }
            match procs.get(&at) {
                Some(parent) if at != skip && chain.len() <= procs.len() => {
                    chain.push(at);
                    at = parent.ppid;
                }
                _ => break None,
            }
        };
        for c in chain {
            owner.insert(c, found);
        }
        *out.entry(found).or_insert(0) += p.tasks;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_hostile_command_name() {
        let line = "42 (a) b) (c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 123 \
                    1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(parse_stat(line), Some(Proc { ppid: 7, tasks: 3 }));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) Z 0"), None);
    }

    #[test]
    fn zombies_hold_a_slot() {
        let line = "9 (sh) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 0 0 5 0 0 0 0 0 0";
        assert_eq!(parse_stat(line).map(|p| p.tasks), Some(1));
    }

    #[test]
    fn tasks_go_to_the_nearest_root() {
        let p = |ppid, tasks| Proc { ppid, tasks };
        let procs: HashMap<libc::pid_t, Proc> = [
            (1, p(0, 1)),
            // Command A: sub-init 10, its leader 11 with a child 12 (4 threads).
            (10, p(1, 1)),
            (11, p(10, 1)),
            (12, p(11, 4)),
            // Command B: sub-init 20, leader 21.
            (20, p(1, 1)),
            (21, p(20, 2)),
            // A stray reparented to the init, with a child.
            (30, p(1, 1)),
            (31, p(30, 1)),
        ]
        .into_iter()
        .collect();
        let roots: HashSet<libc::pid_t> = [10, 20].into_iter().collect();
        let by = tasks_by_root(&procs, &roots, 1);
        assert_eq!(by.get(&Some(10)), Some(&5));
        assert_eq!(by.get(&Some(20)), Some(&2));
        assert_eq!(by.get(&None), Some(&2));
    }

    #[test]
    fn a_parent_loop_ends() {
        // Cannot happen in a real /proc, but a scan mixes moments: it must not hang.
        let procs: HashMap<libc::pid_t, Proc> = [
            (5, Proc { ppid: 6, tasks: 1 }),
            (6, Proc { ppid: 5, tasks: 1 }),
        ]
        .into_iter()
        .collect();
        let by = tasks_by_root(&procs, &HashSet::new(), 1);
        assert_eq!(by.get(&None), Some(&2));
    }

    #[test]
    fn a_child_is_among_our_children() {
        // Spawned from this thread, so it is this thread's child.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let pid = child.id() as libc::pid_t;
        let found = own_children();
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{pid} not in {found:?}");
    }

    #[test]
    fn this_process_is_in_its_own_scan() {
        let me = std::process::id() as libc::pid_t;
        let procs = scan();
        let p = procs.get(&me).expect("own pid in /proc");
        assert!(p.tasks >= 1);
    }
}
