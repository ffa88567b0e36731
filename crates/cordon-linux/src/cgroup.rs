//! Per-sandbox cgroups: limits (memory without swap, pids, CPU quota), accounting, kill, cleanup.
//! Both the v1 layout (one hierarchy per controller) and the unified v2 layout are handled;
//! which one is used is decided at run time from `/proc/self/cgroup` and where the hierarchies
//! are mounted.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup layout this host offers for our limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// Where the controllers live.
#[derive(Debug, Clone)]
pub enum Layout {
    /// v1: the directory of our own cgroup in each controller's hierarchy.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
    },
    /// v2: the directory under which sandbox cgroups are created.
    V2 { base: PathBuf },
}

impl Layout {
    pub fn version(&self) -> Version {
        match self {
            Layout::V1 { .. } => Version::V1,
            Layout::V2 { .. } => Version::V2,
        }
    }
}

struct MountEntry {
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_opts: String,
}

fn mounts() -> io::Result<Vec<MountEntry>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in text.lines() {
        // Format: id parent maj:min root mount_point opts [optional...] - fstype source super_opts
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        out.push(MountEntry {
            root: unescape(l[3]),
            mount_point: PathBuf::from(unescape(l[4])),
            fstype: r[0].to_string(),
            super_opts: r[2].to_string(),
        });
    }
    Ok(out)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Our own cgroup paths: (controllers field, path) from /proc/self/cgroup.
fn own_cgroups() -> io::Result<Vec<(String, String)>> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrl = parts.next()?.to_string();
            let path = parts.next()?.to_string();
            Some((ctrl, path))
        })
        .collect())
}

fn join_cgroup(mount: &MountEntry, cg_path: &str) -> PathBuf {
    // When the hierarchy is mounted from a sub-cgroup (containers), strip that prefix.
    let rel = cg_path
        .strip_prefix(mount.root.trim_end_matches('/'))
        .unwrap_or(cg_path);
    mount.mount_point.join(rel.trim_start_matches('/'))
}

/// A sandbox's cgroup seen from outside it, found once from its init's `/proc/PID/cgroup`:
/// the two small files whose counters cover the whole sandbox (every command's child cgroup
/// included), so that sampling it costs two reads, not a scan of `/proc`.
#[derive(Debug, Clone)]
pub struct UsageProbe {
    /// `cpuacct.usage` (v1, nanoseconds) or `cpu.stat` (v2, `usage_usec`).
    cpu: Option<(PathBuf, bool)>,
    /// `memory.usage_in_bytes` (v1) or `memory.current` (v2).
    memory: Option<PathBuf>,
    /// `pids.current` (v1 and v2).
    pids: Option<PathBuf>,
}

impl UsageProbe {
    /// The probe of the cgroup process `pid` (a sandbox's init) is in; `None` when it has no
    /// cgroup with a CPU or memory counter (no cgroups on this host, or none delegated).
    pub fn of_init(pid: i32) -> Option<UsageProbe> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let mounts = mounts().ok()?;
        let (mut cpu, mut memory, mut pids) = (None, None, None);
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            if ctrls.is_empty() {
                let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") else {
                    continue;
                };
                let mut dir = join_cgroup(m, path);
                // A persistent sandbox's init has a leaf of its own (`nest_for_commands`).
                if dir.file_name().is_some_and(|n| n == "init") {
                    if let Some(parent) = dir.parent() {
                        dir = parent.to_path_buf();
                    }
                }
                if cpu.is_none() && dir.join("cpu.stat").is_file() {
                    cpu = Some((dir.join("cpu.stat"), true));
                }
                if memory.is_none() && dir.join("memory.current").is_file() {
                    memory = Some(dir.join("memory.current"));
                }
                if pids.is_none() && dir.join("pids.current").is_file() {
                    pids = Some(dir.join("pids.current"));
                }
                continue;
            }
            let v1 = |ctrl: &str| {
                ctrls.split(',').any(|c| c == ctrl).then(|| {
                    mounts
                        .iter()
                        .find(|m| {
                            m.fstype == "cgroup" && m.super_opts.split(',').any(|o| o == ctrl)
                        })
                        .map(|m| join_cgroup(m, path))
                })?
            };
            if let Some(dir) = v1("cpuacct").filter(|d| d.join("cpuacct.usage").is_file()) {
                cpu = Some((dir.join("cpuacct.usage"), false));
            }
            if let Some(dir) = v1("memory").filter(|d| d.join("memory.usage_in_bytes").is_file()) {
                memory = Some(dir.join("memory.usage_in_bytes"));
            }
            if let Some(dir) = v1("pids").filter(|d| d.join("pids.current").is_file()) {
                pids = Some(dir.join("pids.current"));
            }
        }
        (cpu.is_some() || memory.is_some()).then_some(UsageProbe { cpu, memory, pids })
    }

    /// Processes in the cgroup now (`None` without a pids counter).
    pub fn processes(&self) -> Option<u64> {
        self.pids
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok()?.trim().parse().ok())
    }

    /// (CPU time used in nanoseconds, memory in use in bytes) now; either is `None` when its
    /// counter is missing or gone (the sandbox ended).
    pub fn read(&self) -> (Option<u64>, Option<u64>) {
        let cpu = self.cpu.as_ref().and_then(|(path, v2)| {
            let text = fs::read_to_string(path).ok()?;
            if *v2 {
                text.lines()
                    .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
                    .map(|us| us.saturating_mul(1000))
            } else {
                text.trim().parse().ok()
            }
        });
        let memory = self
            .memory
            .as_ref()
            .and_then(|p| fs::read_to_string(p).ok()?.trim().parse().ok());
        (cpu, memory)
    }
}

/// Where systemd (and most distributions without it) mount the hierarchies: v1 ones at
/// `/sys/fs/cgroup/<controllers>`, the v2 one at `/sys/fs/cgroup` itself.
const STANDARD_ROOT: &str = "/sys/fs/cgroup";
// linux/magic.h
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Finds the layout this host offers, or why there is none.
pub fn detect() -> Result<Layout, String> {
    let own = own_cgroups().map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    match standard_layout(&own) {
        Some(Standard::V1(layout)) => Ok(layout),
        Some(Standard::V2(base)) => v2_layout(base),
        None => detect_from_mountinfo(&own),
    }
}

enum Standard {
    V1(Layout),
    V2(PathBuf),
}

/// The layout, found without reading mountinfo — which the kernel writes out line by line for
/// every mount, ~0.1 ms of each sandbox's start — when the hierarchies are where systemd puts
/// them: each candidate must be a cgroup file system holding our own cgroup. `None` as soon as
/// anything is elsewhere or otherwise; `detect` then reads mountinfo.
fn standard_layout(own: &[(String, String)]) -> Option<Standard> {
    let root = Path::new(STANDARD_ROOT);
    // statfs fails on a path that does not exist, so this also says the directory is there.
    let is_cgroup_dir = |dir: &Path, magic: i64| crate::sys::fs_type(dir).ok() == Some(magic);
    // Ok(None): this controller has no v1 hierarchy; Err: it has one, but not where expected.
    let v1 = |ctrl: &str| -> Result<Option<PathBuf>, ()> {
        let Some((field, path)) = own.iter().find(|(c, _)| c.split(',').any(|x| x == ctrl)) else {
            return Ok(None);
        };
        let dir = root.join(field).join(path.trim_start_matches('/'));
        if is_cgroup_dir(&dir, CGROUP_SUPER_MAGIC) {
            Ok(Some(dir))
        } else {
            Err(())
        }
    };
    match (v1("memory"), v1("pids")) {
        (Ok(Some(memory)), Ok(Some(pids))) => {
            return Some(Standard::V1(Layout::V1 {
                memory,
                pids,
                cpu: v1("cpu").ok()?,
                cpuacct: v1("cpuacct").ok()?,
            }))
        }
        (Ok(None), Ok(None)) => {}
        _ => return None,
    }
    let (_, path) = own.iter().find(|(c, _)| c.is_empty())?;
    let base = root.join(path.trim_start_matches('/'));
    is_cgroup_dir(&base, CGROUP2_SUPER_MAGIC).then_some(Standard::V2(base))
}

/// A v2 layout under `base`, if the memory and pids controllers are delegated there.
fn v2_layout(base: PathBuf) -> Result<Layout, String> {
    let controllers = fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
    for needed in ["memory", "pids"] {
        if !controllers.split_whitespace().any(|c| c == needed) {
            return Err(format!(
                "cgroup v2 at {} lacks the {needed} controller (delegate it, e.g. systemd Delegate=yes)",
                base.display()
            ));
        }
    }
    Ok(Layout::V2 { base })
}

/// `detect` for hierarchies mounted anywhere (containers, hand-made mounts).
fn detect_from_mountinfo(own: &[(String, String)]) -> Result<Layout, String> {
    let mounts = mounts().map_err(|e| format!("cannot read mountinfo: {e}"))?;
    let v1_dir = |ctrl: &str| -> Option<PathBuf> {
        let m = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.super_opts.split(',').any(|o| o == ctrl))?;
        let (_, path) = own.iter().find(|(c, _)| c.split(',').any(|x| x == ctrl))?;
        Some(join_cgroup(m, path))
    };
    if let (Some(memory), Some(pids)) = (v1_dir("memory"), v1_dir("pids")) {
        return Ok(Layout::V1 {
            memory,
            pids,
            cpu: v1_dir("cpu"),
            cpuacct: v1_dir("cpuacct"),
        });
    }
    if let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") {
        let (_, path) = own
            .iter()
            .find(|(c, _)| c.is_empty())
            .ok_or("no cgroup v2 entry in /proc/self/cgroup")?;
        return v2_layout(join_cgroup(m, path));
    }
    Err("no cgroup v1 memory+pids hierarchies and no cgroup v2 mount".to_string())
}

/// Why sandbox cgroups cannot be created under `layout`, if they cannot (rootless on v1, an
/// undelegated v2 subtree): checked before anything is forked, so the plan knows.
pub fn cannot_create(layout: &Layout) -> Option<String> {
    let parents: Vec<&PathBuf> = match layout {
        Layout::V1 { memory, pids, .. } => vec![memory, pids],
        Layout::V2 { base } => vec![base],
    };
    parents
        .into_iter()
        .find(|d| !crate::sys::writable(d))
        .map(|d| format!("{} is not writable by this user", d.display()))
}

/// Times one cgroup move of the calling thread (v1 only), made the way a sandbox's init joins
/// its cgroup (see `join`): what every sandbox start pays for it on this host. `cordon check`
/// reports it.
pub fn time_move(layout: &Layout) -> Option<Duration> {
    let Layout::V1 { pids, .. } = layout else {
        return None;
    };
    let file = fs::OpenOptions::new()
        .write(true)
        .open(pids.join("tasks"))
        .ok()?;
    let start = Instant::now();
    join(&[file.into()]).ok()?;
    Some(start.elapsed())
}

/// Moves the calling thread into the cgroup behind each of `files` (from
/// `Cgroup::join_files`); the caller closes them afterwards. The caller must be
/// single-threaded, so its one thread is the whole process, and must not fork before this
/// returns.
///
/// Why the sandbox moves itself, by writing "0", instead of cordon writing its pid: a cgroup
/// v1 move by pid takes the kernel's global threadgroup lock for writing, and the first writer
/// after a quiet spell waits for an RCU grace period (7-15 ms measured on a 2-vCPU VM, longer
/// than bubblewrap's whole start). Since Linux 6.17 a thread that moves itself skips that lock;
/// older kernels take it either way. Permission is checked against whoever opened the file
/// (cordon), so the sandbox's own unprivileged user needs none.
pub fn join(files: &[OwnedFd]) -> io::Result<()> {
    for f in files {
        crate::sys::write_all(f.as_raw_fd(), b"0")?;
    }
    Ok(())
}

/// Limits to apply to one sandbox's cgroup.
#[derive(Debug, Clone)]
pub struct CgroupLimits {
    pub memory: u64,
    pub pids: u64,
    pub cpus: f64,
    /// Whether the tree's CPU time must be readable while it runs (a CPU-time limit). On v1
    /// that costs a cpuacct cgroup per sandbox; without it, usage comes from the init's
    /// rusage when the sandbox ends.
    pub cpu_time: bool,
}

/// One sandbox's cgroup (one directory per v1 hierarchy, or one v2 directory).
pub struct Cgroup {
    layout: Layout,
    /// v1: memory, pids, cpu?, cpuacct? (without repeats); v2: one dir.
    dirs: Vec<PathBuf>,
    /// Which directory holds each controller's files.
    ctl: ControllerDirs,
    peak_pids: u64,
    /// Whether the kernel keeps `pids.peak` (Linux 6.1+); if not, `sample` stands in.
    kernel_peak_pids: bool,
    /// v2 with command cgroups below (see `nest_for_commands`): the leaf the init joins,
    /// since a v2 cgroup that hands controllers to children may hold no process itself.
    init_leaf: Option<PathBuf>,
}

#[derive(Default)]
struct ControllerDirs {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
}

const PREFIX: &str = "cordon-";

impl Cgroup {
    /// Creates `cordon-<pid>-<n>` cgroups and applies the limits.
    pub fn create(layout: &Layout, name: &str, limits: &CgroupLimits) -> io::Result<Cgroup> {
        let mut cg = Cgroup {
            layout: layout.clone(),
            dirs: Vec::new(),
            ctl: ControllerDirs::default(),
            peak_pids: 0,
            kernel_peak_pids: false,
            init_leaf: None,
        };
        let result = cg.create_inner(name, limits);
        if let Err(e) = result {
            cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    fn create_inner(&mut self, name: &str, limits: &CgroupLimits) -> io::Result<()> {
        let dirname = format!("{PREFIX}{name}");
        match self.layout.clone() {
            Layout::V1 {
                memory,
                pids,
                cpu,
                cpuacct,
            } => {
                let mem = memory.join(&dirname);
                make_dir(&mem)?;
                self.dirs.push(mem.clone());
                self.ctl.memory = Some(mem.clone());
                write(
                    &mem.join("memory.limit_in_bytes"),
                    &limits.memory.to_string(),
                )?;
                // Without this, the limit covers RAM only and the sandbox can push into swap.
                // (Absent when the kernel accounts no swap: then there is nothing to cap.)
                match write(
                    &mem.join("memory.memsw.limit_in_bytes"),
                    &limits.memory.to_string(),
                ) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    other => other?,
                }
                let _ = write(&mem.join("memory.swappiness"), "0");
                let p = pids.join(&dirname);
                make_dir(&p)?;
                self.dirs.push(p.clone());
                self.ctl.pids = Some(p.clone());
                write(&p.join("pids.max"), &limits.pids.to_string())?;
                self.kernel_peak_pids = p.join("pids.peak").exists();
                if let Some(cpu) = cpu {
                    let c = cpu.join(&dirname);
                    if !self.dirs.contains(&c) {
                        make_dir(&c)?;
                        self.dirs.push(c.clone());
                    }
                    self.ctl.cpu = Some(c.clone());
                    let period = 100_000u64;
                    let quota = ((limits.cpus * period as f64) as u64).max(1000);
                    write(&c.join("cpu.cfs_period_us"), &period.to_string())?;
                    write(&c.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
                if let Some(acct) = cpuacct.filter(|_| limits.cpu_time) {
                    let a = acct.join(&dirname);
                    if !self.dirs.contains(&a) {
                        make_dir(&a)?;
                        self.dirs.push(a.clone());
                    }
                    self.ctl.cpuacct = Some(a);
                }
            }
            Layout::V2 { base } => {
                // Controllers must be enabled in the parent for the child to get them.
                let _ = write(&base.join("cgroup.subtree_control"), "+memory +pids +cpu");
                let d = base.join(&dirname);
                make_dir(&d)?;
                self.dirs.push(d.clone());
                self.ctl = ControllerDirs {
                    memory: Some(d.clone()),
                    pids: Some(d.clone()),
                    cpu: Some(d.clone()),
                    cpuacct: Some(d.clone()),
                };
                write(&d.join("memory.max"), &limits.memory.to_string())?;
                let _ = write(&d.join("memory.swap.max"), "0");
                let _ = write(&d.join("memory.oom.group"), "1");
                write(&d.join("pids.max"), &limits.pids.to_string())?;
                self.kernel_peak_pids = d.join("pids.peak").exists();
                let period = 100_000u64;
                let quota = ((limits.cpus * period as f64) as u64).max(1000);
                let _ = write(&d.join("cpu.max"), &format!("{quota} {period}"));
            }
        }
        Ok(())
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Readies a persistent sandbox's cgroup to hold one child cgroup per command (see
    /// `command`); before anything joins it. v1 needs nothing. v2: the init gets a leaf of its
    /// own, the controllers are handed down, and an OOM kill takes one command's processes
    /// (`memory.oom.group` moves to the commands), not the whole sandbox.
    pub fn nest_for_commands(&mut self) -> io::Result<()> {
        let Layout::V2 { .. } = self.layout else {
            return Ok(());
        };
        let Some(d) = self.dirs.first().cloned() else {
            return Ok(());
        };
        let leaf = d.join("init");
        make_dir(&leaf)?;
        self.dirs.push(leaf.clone());
        self.init_leaf = Some(leaf);
        // The CPU quota stays on the sandbox's cgroup, for all of it together.
        write(&d.join("cgroup.subtree_control"), "+memory +pids")?;
        let _ = write(&d.join("memory.oom.group"), "0");
        Ok(())
    }

    /// A child cgroup for one command of a persistent sandbox: `name` under each of this
    /// cgroup's memory, pids (and, if kept, cpuacct) directories. It inherits every limit
    /// from this one; `pids` caps the command's own processes too, so that it is the cgroup
    /// found over its limit when the command forks too much. Its counters are the command's.
    pub fn command(&self, name: &str, pids: u64) -> io::Result<Cgroup> {
        let mut cg = Cgroup {
            layout: self.layout.clone(),
            dirs: Vec::new(),
            ctl: ControllerDirs::default(),
            peak_pids: 0,
            kernel_peak_pids: false,
            init_leaf: None,
        };
        let result = cg.command_inner(self, name, pids);
        if let Err(e) = result {
            cg.remove();
            return Err(e);
        }
        Ok(cg)
    }

    fn command_inner(&mut self, parent: &Cgroup, name: &str, pids: u64) -> io::Result<()> {
        let dirs = &mut self.dirs;
        let mut child = |parent_dir: &Option<PathBuf>| -> io::Result<Option<PathBuf>> {
            let Some(pd) = parent_dir else {
                return Ok(None);
            };
            let d = pd.join(name);
            if !dirs.contains(&d) {
                make_dir(&d)?;
                dirs.push(d.clone());
            }
            Ok(Some(d))
        };
        let memory = child(&parent.ctl.memory)?;
        let pids_dir = child(&parent.ctl.pids)?;
        let cpuacct = child(&parent.ctl.cpuacct)?;
        self.ctl.memory = memory;
        self.ctl.pids = pids_dir;
        self.ctl.cpuacct = cpuacct;
        if self.version() == Version::V2 {
            self.ctl.cpu = self.ctl.memory.clone();
            if let Some(d) = &self.ctl.memory {
                let _ = write(&d.join("memory.oom.group"), "1");
            }
        }
        if let Some(p) = &self.ctl.pids {
            write(&p.join("pids.max"), &pids.to_string())?;
            self.kernel_peak_pids = p.join("pids.peak").exists();
        }
        Ok(())
    }

    pub fn version(&self) -> Version {
        self.layout.version()
    }

    /// Opens, for writing, the file through which a process joins this cgroup, in every
    /// directory: what `join` needs. Whoever holds these can move its own processes in with
    /// cordon's authority, so only the sandbox's init gets them, and closes them before it
    /// runs anything.
    pub fn join_files(&self) -> io::Result<Vec<OwnedFd>> {
        let file = match self.layout {
            Layout::V1 { .. } => "tasks",
            Layout::V2 { .. } => "cgroup.procs",
        };
        let dirs = match &self.init_leaf {
            Some(leaf) => std::slice::from_ref(leaf),
            None => &self.dirs[..],
        };
        dirs.iter()
            .map(|d| {
                let path = d.join(file);
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
            })
            .collect()
    }

    /// The path of a control file. Its prefix names the controller, and so the directory:
    /// nothing is probed (this runs in the supervisor's loop and at every exit).
    fn find(&self, file: &str) -> Option<PathBuf> {
        let dir = match file.split('.').next()? {
            "memory" => &self.ctl.memory,
            "pids" => &self.ctl.pids,
            "cpu" => &self.ctl.cpu,
            "cpuacct" => &self.ctl.cpuacct,
            // v1 has no cgroup.kill; other cgroup.* files are in every directory.
            "cgroup" if file == "cgroup.kill" && self.version() == Version::V1 => return None,
            "cgroup" => &self.ctl.memory,
            _ => return None,
        };
        dir.as_ref().map(|d| d.join(file))
    }

    fn read_u64(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.find(file)?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Samples values that have no kernel-side peak (pids on v1).
    pub fn sample(&mut self) {
        if self.kernel_peak_pids {
            return;
        }
        if let Some(n) = self.read_u64("pids.current") {
            self.peak_pids = self.peak_pids.max(n);
        }
    }

    /// A count of the cgroup's tasks made elsewhere (the init's at the payload's end).
    pub fn saw_pids(&mut self, n: u64) {
        self.peak_pids = self.peak_pids.max(n);
    }

    /// Whether the kernel keeps the pids peak itself (else `sample` must be called often).
    pub fn keeps_peak_pids(&self) -> bool {
        self.kernel_peak_pids
    }

    pub fn peak_pids(&self) -> u64 {
        self.read_u64("pids.peak").unwrap_or(0).max(self.peak_pids)
    }

    pub fn peak_memory(&self) -> Option<u64> {
        match self.layout {
            Layout::V1 { .. } => self.read_u64("memory.max_usage_in_bytes"),
            Layout::V2 { .. } => self
                .read_u64("memory.peak")
                .or_else(|| self.read_u64("memory.current")),
        }
    }

    /// How many processes the kernel's OOM killer killed in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.layout {
            Layout::V1 { .. } => "memory.oom_control",
            Layout::V2 { .. } => "memory.events",
        };
        let Some(text) = self.find(file).and_then(|p| fs::read_to_string(p).ok()) else {
            return 0;
        };
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// How many forks and threads the pids limit refused (`pids.events`, `max N`; v1 and v2).
    pub fn pids_refused(&self) -> u64 {
        self.find("pids.events")
            .and_then(|p| fs::read_to_string(p).ok())
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Whether the memory limit was hit at all (v1 `failcnt`, v2 `max` events).
    pub fn memory_limit_hit(&self) -> bool {
        match self.layout {
            Layout::V1 { .. } => self.read_u64("memory.failcnt").unwrap_or(0) > 0,
            Layout::V2 { .. } => {
                self.find("memory.events")
                    .and_then(|p| fs::read_to_string(p).ok())
                    .and_then(|t| {
                        t.lines()
                            .find_map(|l| l.strip_prefix("max ")?.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0)
                    > 0
            }
        }
    }

    /// CPU time used by the whole tree: (user, system) in nanoseconds.
    pub fn cpu_usage(&self) -> Option<(u64, u64)> {
        match self.layout {
            Layout::V1 { .. } => {
                let user = self.read_u64("cpuacct.usage_user")?;
                let sys = self.read_u64("cpuacct.usage_sys")?;
                Some((user, sys))
            }
            Layout::V2 { .. } => {
                let text = fs::read_to_string(self.find("cpu.stat")?).ok()?;
                let get = |k: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
                };
                Some((get("user_usec ")? * 1000, get("system_usec ")? * 1000))
            }
        }
    }

    /// The processes in the cgroup. One directory tells: a sandbox joins all of them at once,
    /// before it has a child.
    fn procs(&self) -> Vec<i32> {
        self.find("cgroup.procs")
            .and_then(|p| fs::read_to_string(p).ok())
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the cgroup.
    pub fn kill_all(&self) {
        if let Some(kill) = self.find("cgroup.kill") {
            let _ = write(&kill, "1");
            return;
        }
        // v1 has no cgroup.kill; the pid-namespace init's death does the real work, this
        // sweep only catches stragglers.
        for _ in 0..10 {
            let procs = self.procs();
            if procs.is_empty() {
                return;
            }
            for p in procs {
                let _ = crate::sys::kill(p, libc::SIGKILL);
            }
        }
    }

    /// Removes the cgroup directories, waiting for dying processes to leave. A directory that
    /// stays busy is swept again (a process still listed there is killed): on a loaded host
    /// an exiting task can take a while to leave, and one that lingers must not keep the
    /// directory for ever.
    pub fn remove(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in std::mem::take(&mut self.dirs).into_iter().rev() {
            let mut tries = 0u32;
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) if Instant::now() < deadline => {
                        tries += 1;
                        if tries.is_multiple_of(20) {
                            for p in procs_in(&d) {
                                let _ = crate::sys::kill(p, libc::SIGKILL);
                            }
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The processes in the cgroup directory `dir`.
fn procs_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Removes cgroups left by cordon processes that died without cleaning up (e.g. SIGKILL).
pub fn remove_stale(layout: &Layout) {
    let bases: Vec<PathBuf> = match layout {
        Layout::V1 {
            memory,
            pids,
            cpu,
            cpuacct,
        } => [Some(memory), Some(pids), cpu.as_ref(), cpuacct.as_ref()]
            .into_iter()
            .flatten()
            .cloned()
            .collect(),
        Layout::V2 { base } => vec![base.clone()],
    };
    let me = std::process::id();
    for base in bases {
        let Ok(entries) = fs::read_dir(&base) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
                continue;
            };
            let Some(owner) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if owner != me && !Path::new(&format!("/proc/{owner}")).exists() {
                let _ = remove_tree(&e.path());
            }
        }
    }
}

/// Creates one of our cgroup directories. Its name holds our pid, so one that exists already
/// was left by a dead process that had the same pid (`remove_stale` runs later, off the start
/// path): take it over.
fn make_dir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            remove_tree(path)?;
            fs::create_dir(path)
        }
        other => other,
    }
}

/// Removes a cgroup directory of a dead cordon process and the cgroups below it (a persistent
/// sandbox's per-command `cmd-N`), deepest first: cgroupfs refuses to remove a cgroup that has
/// children, and their files go with their directory.
fn remove_tree(path: &Path) -> io::Result<()> {
    if let Ok(entries) = fs::read_dir(path) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path())?;
            }
        }
    }
    fs::remove_dir(path)
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Real cgroups: these need a hierarchy this user may write (root on a v1 host, or a
/// delegated v2 subtree); elsewhere they say so and pass.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn writable_layout() -> Option<Layout> {
        let layout = detect().ok()?;
        match cannot_create(&layout) {
            None => Some(layout),
            Some(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }

    fn limits() -> CgroupLimits {
        CgroupLimits {
            memory: 64 << 20,
            pids: 8,
            cpus: 1.0,
            cpu_time: false,
        }
    }

    /// The shortcut past mountinfo must find exactly what mountinfo says, or step aside.
    #[test]
    fn the_standard_places_agree_with_mountinfo() {
        let own = own_cgroups().expect("/proc/self/cgroup");
        let slow = detect_from_mountinfo(&own);
        let fast = match standard_layout(&own) {
            Some(Standard::V1(layout)) => Ok(layout),
            Some(Standard::V2(base)) => v2_layout(base),
            None => {
                eprintln!("hierarchies not at the standard places here: nothing to compare");
                return;
            }
        };
        assert_eq!(format!("{fast:?}"), format!("{slow:?}"));
    }

    /// A command's cgroup counts what its processes do: a fork refused by the limit (the
    /// command's own, or the sandbox's) shows in the command's counters; then the command's
    /// cgroup goes, and the sandbox's after it.
    #[test]
    fn a_command_cgroup_counts_its_own_refused_forks() {
        let Some(layout) = writable_layout() else {
            return;
        };
        let name = format!("{}-nested", std::process::id());
        let mut sandbox = Cgroup::create(&layout, &name, &limits()).unwrap();
        sandbox.nest_for_commands().unwrap();
        let mut cmd = sandbox.command("cmd-1", 4).unwrap();
        let files = cmd.join_files().unwrap();
        let (done_r, done_w) = sys::pipe().unwrap();
        // SAFETY: the child makes raw syscalls only (write, fork, read, _exit).
        let child = match unsafe { sys::fork() }.unwrap() {
            sys::Fork::Child => {
                drop(done_r);
                if join(&files).is_err() {
                    sys::exit_now(2);
                }
                // Fork until refused; the forked children wait for the parent's end.
                let mut n = 0u8;
                loop {
                    // SAFETY: as above.
                    match unsafe { sys::fork() } {
                        Ok(sys::Fork::Child) => {
                            let _ = sys::read_byte(0);
                            sys::exit_now(0);
                        }
                        Ok(sys::Fork::Parent(_)) => n += 1,
                        Err(_) => break,
                    }
                }
                let _ = sys::write_all(done_w.as_raw_fd(), &[n]);
                sys::exit_now(0)
            }
            sys::Fork::Parent(pid) => pid,
        };
        drop((files, done_w));
        let forked = sys::read_byte(done_r.as_raw_fd()).expect("the child's report");
        // The command's limit of 4: the child and three of its own.
        assert_eq!(forked, 3);
        assert!(cmd.pids_refused() > 0, "no refusal counted");
        assert_eq!(cmd.peak_pids(), 4);
        cmd.kill_all();
        let _ = sys::wait4(child, false);
        cmd.remove();
        sandbox.remove();
        assert!(sandbox.dirs.iter().all(|d| !d.exists()));
    }

    #[test]
    fn a_directory_left_under_our_name_is_taken_over() {
        let Some(layout) = writable_layout() else {
            return;
        };
        let name = format!("{}-takeover", std::process::id());
        let first = Cgroup::create(&layout, &name, &limits()).unwrap();
        let dirs = first.dirs.clone();
        // As if its owner had been SIGKILLed: nothing removes it.
        std::mem::forget(first);
        assert!(dirs.iter().all(|d| d.is_dir()));
        let mut second = Cgroup::create(&layout, &name, &limits()).unwrap();
        assert_eq!(second.dirs, dirs);
        second.remove();
        assert!(dirs.iter().all(|d| !d.exists()));
    }

    #[test]
    fn a_process_that_writes_zero_through_the_files_joins_every_directory() {
        let Some(layout) = writable_layout() else {
            return;
        };
        let name = format!("{}-join", std::process::id());
        let mut cg = Cgroup::create(&layout, &name, &limits()).unwrap();
        let files = cg.join_files().unwrap();
        let (joined_r, joined_w) = sys::pipe().unwrap();
        let (hold_r, hold_w) = sys::pipe().unwrap();
        // SAFETY: the child only makes raw syscalls (write, read, _exit) before exiting.
        let child = match unsafe { sys::fork() }.unwrap() {
            sys::Fork::Child => {
                // Only the parent may hold the write end, or our read would never end.
                drop((hold_w, joined_r));
                let ok = join(&files).is_ok();
                let _ = sys::write_all(joined_w.as_raw_fd(), &[u8::from(ok)]);
                let _ = sys::read_byte(hold_r.as_raw_fd());
                sys::exit_now(0)
            }
            sys::Fork::Parent(pid) => pid,
        };
        drop((files, joined_w, hold_r));
        assert_eq!(sys::read_byte(joined_r.as_raw_fd()), Some(1), "join failed");
        let file = match layout {
            Layout::V1 { .. } => "tasks",
            Layout::V2 { .. } => "cgroup.procs",
        };
        for d in &cg.dirs {
            let members = fs::read_to_string(d.join(file)).unwrap();
            assert!(
                members.lines().any(|l| l.trim() == child.to_string()),
                "{} does not list {child}: {members:?}",
                d.display()
            );
        }
        drop(hold_w);
        sys::wait4(child, false).unwrap();
        cg.remove();
    }
}
