//! Pausing a sandbox: every process of it stops using CPU and keeps its memory and files, until
//! it is thawed.
//!
//! Where we may create a cgroup in the v1 freezer hierarchy (root), the sandbox's processes are
//! moved into a cgroup of their own there and frozen: the kernel freezes them atomically and
//! processes they fork later are born frozen. Without it (rootless, or no freezer controller),
//! every process of the sandbox gets SIGSTOP, repeated until a pass finds no process left
//! running; a stopped process cannot fork, so the passes end.
//!
//! The sandbox's processes are the init and its descendants (by parent pid, which `/proc` shows
//! in our own pid namespace whatever namespaces they are nested in).
//!
//! Threat model: a v1-frozen process does not die of SIGKILL until it is thawed, so a freezer
//! cgroup nobody thaws keeps its processes for ever. Whoever ends a paused sandbox therefore
//! ends its freezer cgroup first ([`end_frozen_of`], [`end_leftovers`]): freeze (so nothing
//! forks in between), SIGKILL every member, thaw (the kills land), remove. The helper does it
//! when its server dies; the next server, and a clean stop, sweep what is left by name. Names
//! carry a caller-given scope (the server's data directory), so a server only ever touches
//! its own cgroups, never another server's nor anyone else's.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a paused sandbox was frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezeMethod {
    /// The v1 cgroup freezer.
    CgroupFreezer,
    /// SIGSTOP to every process (no freezer cgroup we may create).
    Sigstop,
}

impl FreezeMethod {
    pub fn name(self) -> &'static str {
        match self {
            FreezeMethod::CgroupFreezer => "cgroup-freezer",
            FreezeMethod::Sigstop => "sigstop",
        }
    }
}

/// A frozen sandbox; [`Frozen::thaw`] lets it run again.
#[derive(Debug)]
pub struct Frozen {
    pub method: FreezeMethod,
    /// The freezer cgroup the processes were moved into (freezer method).
    dir: Option<PathBuf>,
    /// Where they came from, to go back on thaw.
    home: Option<PathBuf>,
    init_pid: i32,
}

/// Prefix of the freezer cgroups made here, so a restarted server can find leftovers.
const PREFIX: &str = "cordon-pause-";
/// How long the kernel may take to freeze, or a SIGSTOP pass to settle.
const SETTLE: Duration = Duration::from_secs(5);

/// Parent pid and state letter of each process, from `/proc/<pid>/stat`.
fn processes() -> HashMap<i32, (i32, char)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: the fields follow the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if let Some(ppid) = f.next().and_then(|s| s.parse::<i32>().ok()) {
            out.insert(pid, (ppid, state));
        }
    }
    out
}

/// The init and all its descendants, with their states.
pub(crate) fn tree(init_pid: i32) -> Vec<(i32, char)> {
    let all = processes();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, (ppid, _)) in &all {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut todo = vec![init_pid];
    let mut seen = BTreeSet::new();
    while let Some(p) = todo.pop() {
        if !seen.insert(p) {
            continue;
        }
        if let Some((_, st)) = all.get(&p) {
            out.push((p, *st));
        }
        todo.extend(children.get(&p).into_iter().flatten());
    }
    out
}

/// Our own cgroup in the v1 freezer hierarchy, if there is one.
fn own_freezer() -> Option<PathBuf> {
    freezer_of("self")
}

/// The v1 freezer cgroup of process `who` (a pid, or `self`), if there is one.
fn freezer_of(who: &str) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{who}/cgroup")).ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        if ctrls.split(',').any(|c| c == "freezer") {
            let base = Path::new("/sys/fs/cgroup/freezer");
            let dir = base.join(path.trim_start_matches('/'));
            return dir.is_dir().then_some(dir);
        }
    }
    None
}

fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Moves every process of the tree into `dir`, until a pass finds all of them there.
fn gather(init_pid: i32, dir: &Path) -> io::Result<()> {
    let procs = dir.join("cgroup.procs");
    let deadline = Instant::now() + SETTLE;
    loop {
        let inside: BTreeSet<i32> = std::fs::read_to_string(&procs)?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let outside: Vec<i32> = tree(init_pid)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| !inside.contains(p))
            .collect();
        if outside.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the sandbox's processes kept forking while being gathered",
            ));
        }
        for p in outside {
            // A process that exited meanwhile answers ESRCH; the next pass no longer sees it.
            let _ = std::fs::write(&procs, p.to_string());
        }
    }
}

fn freeze_cgroup(init_pid: i32, name: &str) -> io::Result<Frozen> {
    let home = own_freezer().ok_or_else(|| io::Error::other("no freezer hierarchy"))?;
    let dir = home.join(cgroup_name(name));
    std::fs::create_dir(&dir)?;
    let frozen = Frozen {
        method: FreezeMethod::CgroupFreezer,
        dir: Some(dir.clone()),
        home: Some(home),
        init_pid,
    };
    let done = gather(init_pid, &dir)
        .and_then(|()| std::fs::write(dir.join("freezer.state"), "FROZEN"))
        .and_then(|()| {
            let deadline = Instant::now() + SETTLE;
            loop {
                let st = std::fs::read_to_string(dir.join("freezer.state"))?;
                if st.trim() == "FROZEN" {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the kernel did not finish freezing the sandbox",
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
    match done {
        Ok(()) => Ok(frozen),
        Err(e) => {
            frozen.thaw();
            Err(e)
        }
    }
}

fn freeze_sigstop(init_pid: i32) -> io::Result<Frozen> {
    let frozen = Frozen {
        method: FreezeMethod::Sigstop,
        dir: None,
        home: None,
        init_pid,
    };
    let deadline = Instant::now() + SETTLE;
    loop {
        // 'T' stopped, 't' traced, 'Z'/'X' dead: none of these runs code any more.
        let running: Vec<i32> = tree(init_pid)
            .into_iter()
            .filter(|(_, st)| !matches!(st, 'T' | 't' | 'Z' | 'X'))
            .map(|(p, _)| p)
            .collect();
        if running.is_empty() {
            return Ok(frozen);
        }
        if Instant::now() > deadline {
            frozen.thaw();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the sandbox's processes did not all stop",
            ));
        }
        for p in running {
            signal(p, rustix::process::Signal::STOP);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Freezes the sandbox whose init is `init_pid`; `name` names its freezer cgroup (unique per
/// sandbox). Tries the cgroup freezer first, then SIGSTOP.
pub fn freeze(init_pid: i32, name: &str) -> io::Result<Frozen> {
    match freeze_cgroup(init_pid, name) {
        Ok(f) => Ok(f),
        Err(_) => freeze_sigstop(init_pid),
    }
}

impl Frozen {
    /// Lets every process run again; the freezer cgroup is emptied back into ours and removed.
    pub fn thaw(&self) {
        match (&self.dir, &self.home) {
            (Some(dir), Some(home)) => thaw_dir(dir, home),
            _ => {
                for (p, _) in tree(self.init_pid) {
                    signal(p, rustix::process::Signal::CONT);
                }
            }
        }
    }
}

fn thaw_dir(dir: &Path, home: &Path) {
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    let procs = home.join("cgroup.procs");
    for _ in 0..100 {
        let pids: Vec<String> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        for p in &pids {
            let _ = std::fs::write(&procs, p);
        }
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn members(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Ends every process in the freezer cgroup `dir` and removes it: frozen, so that nothing
/// forks between the look and the kill; killed, the kill pending; thawed, so it lands. Bounded:
/// a member that will not die (stuck in the kernel) leaves the cgroup in place.
fn end_dir(dir: &Path) {
    let state = dir.join("freezer.state");
    let deadline = Instant::now() + SETTLE;
    loop {
        let _ = std::fs::write(&state, "FROZEN");
        // FREEZING (not all held yet) still ends in the kills below; the next pass looks again.
        let pids = members(dir);
        for p in &pids {
            signal(*p, rustix::process::Signal::KILL);
        }
        let _ = std::fs::write(&state, "THAWED");
        if pids.is_empty() {
            match std::fs::remove_dir(dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                Err(_) => {}
            }
        }
        if Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Ends the freezer cgroup process `pid` is held in, if it is one of ours (the sandbox whose
/// init it is was paused): every member is killed and thawed, and the cgroup removed. The
/// sandbox's helper calls it before it kills the init, whose death it then waits for: a frozen
/// init would never die, and the helper would wait for ever.
pub fn end_frozen_of(pid: i32) {
    let Some(dir) = freezer_of(&pid.to_string()) else {
        return;
    };
    if dir
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(PREFIX))
    {
        end_dir(&dir);
    }
}

/// The freezer cgroup name a sandbox paused as `name` gets.
pub fn cgroup_name(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// Ends the freezer cgroups a previous server of the same scope left (it died, or was killed,
/// with sandboxes paused): those named `<PREFIX><scope>-…` and those named exactly
/// `<PREFIX><name>` for each of `names` (sandboxes it knew, paused by a server that named
/// its cgroups without a scope). Every process in them is killed: a frozen process cannot
/// even die of SIGKILL until thawed, and a paused sandbox does not survive its server.
pub fn end_leftovers(scope: &str, names: &[String]) {
    let Some(home) = own_freezer() else {
        return;
    };
    let Ok(dir) = std::fs::read_dir(&home) else {
        return;
    };
    let scoped = format!("{PREFIX}{scope}-");
    for e in dir.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let ours = (!scope.is_empty() && n.starts_with(&scoped))
            || names.iter().any(|m| n == cgroup_name(m));
        if ours && e.path().is_dir() {
            end_dir(&e.path());
        }
    }
}
