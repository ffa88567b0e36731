//! Learn mode (`cordon run --learn FILE`): from what one run did (its [`Outcome`]) and the
//! profile it ran under, a TOML profile that `extends` the starting built-in and allows what
//! the run needed — the network destinations it reached or was refused, limits at its observed
//! peaks plus a margin, the programs it executed (`Outcome::executed`, recorded by the engine)
//! with its own allowlist and a command that list refused, the host files and directories it
//! asked for beyond its sandbox (`Outcome::files`) as read-only or read-write binds — each
//! entry with a comment saying what needed it. Learning onto an
//! existing file widens it (the union of entries, the larger of each limit). Pure data → text:
//! the run itself is never changed by learning.
//!
//! Threat model: what the run did is the sandboxed program's doing, so hostile input: a host
//! name it sent the proxy, a reason text built from it. Every value is written as a TOML string
//! by the TOML serializer, every comment is cut to one line of printable characters, and every
//! network entry must parse as an allowlist entry, and every learned path must be a plain
//! absolute path without `:` or control characters, or is left out — so a program cannot smuggle
//! a key (`[filesystem] rw = ["/"]`) into the profile it is learned into. The file never holds
//! a secret: `[env] set` values and secrets are not written (the header says to give them again).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use crate::network::{special_range, AllowEntry};
use crate::units::parse_size;
use crate::{LimitHit, Outcome, Profile};

/// Observed peaks are multiplied by this (and rounded up) to make a limit.
pub const MARGIN: f64 = 1.5;

/// No learned limit is below these, however little the run used: a run's usage varies, and a
/// limit at a tiny peak would fail the next run for nothing.
pub const FLOOR_MEMORY: u64 = 64 << 20;
pub const FLOOR_PIDS: u64 = 16;
pub const FLOOR_TIMEOUT: Duration = Duration::from_secs(10);
pub const FLOOR_CPU_TIME: Duration = Duration::from_secs(5);
pub const FLOOR_OUTPUT: u64 = 64 << 10;

/// Longest comment written after an entry.
const MAX_COMMENT: usize = 160;

/// Why a profile could not be learned.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error("{0}")]
    Existing(String),
}

/// One learning run.
pub struct Run<'a> {
    /// The built-in the learned profile extends.
    pub base: &'a str,
    /// The profile the run had (flags applied): its binds, workspace and `[network] hosts`
    /// are carried into the learned profile, which a replay needs as much as the allowances.
    pub profile: &'a Profile,
    pub outcome: &'a Outcome,
    pub command: &'a [String],
    /// Whether the Outcome holds the run's output (not streamed), so its size is known.
    pub output_captured: bool,
}

/// A limit's value, comparable across runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Size(u64),
    Count(u64),
    Time(Duration),
}

impl Value {
    fn amount(self) -> f64 {
        match self {
            Value::Size(b) | Value::Count(b) => b as f64,
            Value::Time(d) => d.as_secs_f64(),
        }
    }

    fn toml(self) -> String {
        match self {
            Value::Size(b) if b >= 1 << 20 => format!("\"{}M\"", b.div_ceil(1 << 20)),
            Value::Size(b) => format!("\"{}K\"", b.div_ceil(1 << 10)),
            Value::Count(n) => n.to_string(),
            Value::Time(d) => format!("\"{}s\"", d.as_secs_f64().ceil() as u64),
        }
    }
}

/// A learned profile, before it is written.
#[derive(Debug, Default)]
struct Learned {
    extends: String,
    name: Option<String>,
    system: Option<String>,
    workspace: Option<String>,
    image: Option<String>,
    ro: BTreeMap<String, String>,
    rw: BTreeMap<String, String>,
    network: BTreeMap<String, String>,
    hosts: BTreeMap<String, String>,
    /// `[exec] allow`; `None`: no allowlist (any file may be executed).
    exec: Option<BTreeMap<String, String>>,
    require: BTreeSet<String>,
    hostname: Option<String>,
    allow_no_landlock: bool,
    /// Keyed by the `[limits]` key.
    limits: BTreeMap<&'static str, (Value, String)>,
    notes: BTreeSet<String>,
}

const LIMIT_KEYS: [&str; 5] = ["memory", "pids", "cpu_time", "timeout", "output_limit"];

fn key_of(k: &str) -> Option<&'static str> {
    LIMIT_KEYS.iter().copied().find(|x| *x == k)
}

/// One line of printable text, at most [`MAX_COMMENT`] characters: what follows a `#`.
fn comment(text: &str) -> String {
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_COMMENT)
        .collect();
    one.trim().to_string()
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn grow(peak: f64) -> f64 {
    (peak * MARGIN).ceil()
}

/// The limits the run's usage calls for.
fn limits_of(run: &Run, out: &mut Learned) {
    let o = run.outcome;
    let u = &o.usage;
    let l = &run.profile.limits;
    let hit = |h: LimitHit| o.limits_hit.contains(&h);
    let said = |what: &str, peak: String, h: LimitHit, limit: String| {
        if hit(h) {
            format!(
                "the run hit its {what} limit ({limit}): raised by x{MARGIN}; learn again to \
                 see its real need"
            )
        } else {
            format!("observed peak {peak} x{MARGIN}, at least the floor")
        }
    };
    let mem_peak = if hit(LimitHit::Memory) {
        u.peak_memory_bytes.max(l.memory)
    } else {
        u.peak_memory_bytes
    };
    let memory = (grow(mem_peak as f64) as u64).max(FLOOR_MEMORY);
    // Without a cgroup the limit is each process's data rlimit, which counts address space a
    // program reserves (OpenBLAS's buffers, a JIT's heap) that the resident peak does not:
    // a limit at that peak would starve the replay. The run's own limit stays.
    let (memory, why) = if o.enforcement.cgroup == "none" && !hit(LimitHit::Memory) {
        (
            memory.max(l.memory),
            format!(
                "no cgroup measured this run (memory is a per-process data rlimit, which the \
                 resident peak {} does not bound): the run's own limit, at least",
                crate::units::format_size(u.peak_memory_bytes)
            ),
        )
    } else {
        (
            memory,
            said(
                "memory",
                crate::units::format_size(u.peak_memory_bytes),
                LimitHit::Memory,
                crate::units::format_size(l.memory),
            ),
        )
    };
    out.limits.insert("memory", (Value::Size(memory), why));
    let pid_peak = if hit(LimitHit::Pids) {
        u.peak_pids.max(u64::from(l.pids))
    } else {
        u.peak_pids
    };
    let pids = (grow(pid_peak as f64) as u64).clamp(FLOOR_PIDS, 1_000_000);
    out.limits.insert(
        "pids",
        (
            Value::Count(pids),
            said(
                "pids",
                format!("{} processes and threads", u.peak_pids),
                LimitHit::Pids,
                l.pids.to_string(),
            ),
        ),
    );
    let cpu_ms = u.cpu_user_ms.saturating_add(u.cpu_system_ms);
    let mut cpu = Duration::from_millis(cpu_ms);
    if hit(LimitHit::CpuTime) {
        cpu = cpu.max(l.cpu_time.unwrap_or_default());
    }
    let cpu = Duration::from_secs_f64(grow(cpu.as_secs_f64())).max(FLOOR_CPU_TIME);
    out.limits.insert(
        "cpu_time",
        (
            Value::Time(cpu),
            said(
                "cpu_time",
                format!("{cpu_ms}ms of CPU"),
                LimitHit::CpuTime,
                l.cpu_time
                    .map_or("none".into(), crate::units::format_duration),
            ),
        ),
    );
    let mut wall = Duration::from_millis(u.wall_ms);
    if hit(LimitHit::WallTime) {
        wall = wall.max(l.timeout);
    }
    let wall = Duration::from_secs_f64(grow(wall.as_secs_f64())).max(FLOOR_TIMEOUT);
    out.limits.insert(
        "timeout",
        (
            Value::Time(wall),
            said(
                "timeout",
                format!("{}ms of wall time", u.wall_ms),
                LimitHit::WallTime,
                crate::units::format_duration(l.timeout),
            ),
        ),
    );
    if run.output_captured || hit(LimitHit::Output) {
        let len = |text: &str, b64: &Option<String>| {
            b64.as_ref()
                .map_or(text.len() as u64, |b| (b.len() as u64 / 4) * 3)
        };
        let mut peak = len(&o.stdout, &o.stdout_b64).max(len(&o.stderr, &o.stderr_b64));
        if hit(LimitHit::Output) {
            peak = peak.max(l.output_limit);
        }
        let output = (grow(peak as f64) as u64).max(FLOOR_OUTPUT);
        out.limits.insert(
            "output_limit",
            (
                Value::Size(output),
                said(
                    "output",
                    format!("{peak} bytes on one stream"),
                    LimitHit::Output,
                    crate::units::format_size(l.output_limit),
                ),
            ),
        );
    }
}

/// `host:port` as an allowlist entry (IPv6 addresses in brackets); `None` if it would not
/// parse as one (a hostile or malformed name the proxy refused).
fn entry(host: &str, port: u16) -> Option<String> {
    let text = match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    AllowEntry::parse(&text).ok().map(|_| text)
}

/// The network destinations of the run, from the proxy's decisions.
fn network_of(run: &Run, out: &mut Learned) {
    // entry → (allowed, refused, a refusal's reason)
    let mut seen: BTreeMap<String, (u32, u32, String)> = BTreeMap::new();
    let mut invalid = 0u32;
    for ev in &run.outcome.network {
        if ev.host.is_empty() || ev.port == 0 {
            continue;
        }
        let Some(e) = entry(&ev.host, ev.port) else {
            invalid += 1;
            continue;
        };
        let allowed = ev.verdict == "allow";
        let s = seen.entry(e).or_default();
        if allowed {
            s.0 += 1;
        } else {
            s.1 += 1;
            s.2 = ev.reason.clone();
        }
        // A name pinned in [network] hosts to a special address (loopback, private) is
        // reached only if an IP entry allows that address too: learn it as well.
        if let Some(ip) = run.profile.network.hosts.get(&ev.host.to_ascii_lowercase()) {
            if special_range(*ip).is_some() {
                if let Some(ipe) = entry(&ip.to_string(), ev.port) {
                    out.network.entry(ipe).or_insert_with(|| {
                        comment(&format!(
                            "the address {} is pinned to ([network] hosts): a special range, \
                             reached only if an IP entry allows it",
                            ev.host
                        ))
                    });
                }
                out.hosts
                    .insert(ev.host.to_ascii_lowercase(), ip.to_string());
            }
        }
    }
    for (e, (allowed, refused, reason)) in seen {
        let why = match (allowed, refused) {
            (a, 0) => format!("reached {a} time(s) during learning"),
            (0, r) => format!("refused {r} time(s) during learning ({reason}): now allowed"),
            (a, r) => format!("reached {a} time(s), refused {r} time(s) during learning"),
        };
        out.network.insert(e, comment(&why));
    }
    if invalid > 0 {
        out.notes.insert(format!(
            "{invalid} destination(s) the program asked for were not valid host names: left out"
        ));
    }
}

/// What the run had besides what is learned, and a replay needs too.
fn carried_of(run: &Run, out: &mut Learned) {
    let p = run.profile;
    let base = Profile::builtin(run.base).ok();
    for b in p.binds.iter().filter(|b| !b.idmap && b.limit.is_none()) {
        let spec = if b.source == b.dest {
            b.source.display().to_string()
        } else {
            format!("{}:{}", b.source.display(), b.dest.display())
        };
        let map = if b.writable { &mut out.rw } else { &mut out.ro };
        map.insert(spec, "the learning run's bind".to_string());
    }
    if let Some(ws) = &p.workspace {
        out.workspace = Some(ws.display().to_string());
    }
    if base.as_ref().is_some_and(|b| b.system != p.system) {
        out.system = Some(
            match p.system {
                crate::SystemView::Full => "full",
                crate::SystemView::Minimal => "minimal",
            }
            .to_string(),
        );
    }
    if let Some(i) = &p.image {
        out.image = Some(i.clone());
    }
    if let Some(list) = &p.exec_allow {
        let mut exec: BTreeMap<String, String> = list
            .iter()
            .map(|e| {
                (
                    e.display().to_string(),
                    "the learning run's [exec] allow".to_string(),
                )
            })
            .collect();
        if let Some(path) = refused_exec(run.outcome, p) {
            exec.insert(
                path,
                "refused during learning (not in the programs allowlist): now allowed".into(),
            );
        }
        out.exec = Some(exec);
    }
    let executed: Vec<String> = run
        .outcome
        .executed
        .iter()
        .filter_map(|e| listable(e, p))
        .collect();
    if !executed.is_empty() {
        let exec = out.exec.get_or_insert_with(BTreeMap::new);
        for e in executed {
            exec.entry(e).or_insert_with(|| {
                "executed during learning (a program, or a script's #! interpreter)".to_string()
            });
        }
    }
    out.require = p.require.iter().map(|l| l.name().to_string()).collect();
    if base.as_ref().is_some_and(|b| b.hostname != p.hostname) {
        out.hostname = Some(p.hostname.clone());
    }
    out.allow_no_landlock = p.allow_no_landlock;
    if !p.env.is_empty() || !p.secrets.is_empty() {
        out.notes.insert(
            "not written: the run's [env] and secrets (values may be secret): give them again"
                .to_string(),
        );
    }
}

/// Sandbox paths that are never learned as binds: the kernel's views, the system directories
/// every profile sees (read-only), the sandbox's own home and workspace, and the host system's
/// state (a program runs without the host's caches — fontconfig probes `/var/cache/fontconfig`
/// — and one bound read-write would let the sandbox poison them for the host).
const NOT_BOUND: [&str; 20] = [
    "/proc",
    "/sys",
    "/dev",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    crate::profile::HOME,
    "/workspace",
    "/run",
    "/var/run",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/spool",
    "/boot",
];

/// Directories (three levels deep or more) with this many learned entries in them become one
/// entry.
const COLLAPSE_AT: usize = 3;

/// What learned paths were used for, and by which programs.
#[derive(Default)]
struct Uses {
    how: BTreeSet<crate::outcome::FileUse>,
    programs: BTreeSet<String>,
    paths: usize,
}

impl Uses {
    fn add(&mut self, other: Uses) {
        self.how.extend(other.how);
        self.programs.extend(other.programs);
        self.paths += other.paths;
    }

    fn why(&self) -> String {
        use crate::outcome::FileUse;
        let verbs: Vec<&str> = self
            .how
            .iter()
            .map(|h| match h {
                FileUse::Read => "read",
                FileUse::Write => "written in",
                FileUse::Exec => "executed",
            })
            .collect();
        let mut progs: Vec<&str> = self
            .programs
            .iter()
            .filter(|p| !p.is_empty())
            .map(String::as_str)
            .take(3)
            .collect();
        if progs.is_empty() {
            progs.push("the run");
        }
        let more = if self.programs.len() > 3 { ", ..." } else { "" };
        let paths = if self.paths > 1 {
            format!(" ({} paths in it)", self.paths)
        } else {
            String::new()
        };
        format!(
            "{} during learning by {}{more}{paths}",
            verbs.join(", "),
            progs.join(", ")
        )
    }
}

/// Depth of a path: `/a/b` is 2. A bind shallower than 2 (`/`, `/var`) is never proposed.
fn depth(p: &std::path::Path) -> usize {
    p.components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count()
}

/// The host files and directories the run asked for beyond its sandbox (`Outcome::files`),
/// as binds: a write's directory read-write (a read-only bind of the run written in stays so,
/// with a note), what was read or executed read-only, path sets collapsed to their directory
/// where [`COLLAPSE_AT`] entries share one. Each entry names the programs that needed it.
fn files_of(run: &Run, out: &mut Learned) {
    use crate::outcome::FileUse;
    use std::path::{Path, PathBuf};
    let p = run.profile;
    let mut rw: BTreeMap<PathBuf, Uses> = BTreeMap::new();
    let mut ro: BTreeMap<PathBuf, Uses> = BTreeMap::new();
    let mut left_out = 0usize;
    for f in &run.outcome.files {
        let path = f.path.as_path();
        let Some(text) = path.to_str() else {
            left_out += 1;
            continue;
        };
        // A `:` would split a bind spec; a relative or `..` path is no host path of ours; a
        // control character has no place in a reviewed file.
        if text.contains(':')
            || text.chars().any(char::is_control)
            || crate::lexical::resolve("", text) != text
        {
            left_out += 1;
            continue;
        }
        if NOT_BOUND.iter().any(|n| path.starts_with(n)) {
            continue;
        }
        let uses = Uses {
            how: [f.how].into(),
            programs: [comment(&f.program)].into(),
            paths: 1,
        };
        if let Some(b) = p.binds.iter().find(|b| path.starts_with(&b.dest)) {
            // Written in a read-only bind of the run: read-only was the starting profile's
            // choice, which learning does not overturn; the note says how to.
            if f.how == FileUse::Write && !b.writable {
                out.notes.insert(format!(
                    "the read-only bind {} was written in during learning by {}: left \
                     read-only (make it rw to allow that)",
                    b.dest.display(),
                    comment(&f.program)
                ));
            }
            continue;
        }
        if depth(path) < 2 {
            left_out += 1;
            continue;
        }
        let into = if f.how == FileUse::Write {
            &mut rw
        } else {
            &mut ro
        };
        into.entry(path.to_path_buf()).or_default().add(uses);
        if f.how == FileUse::Exec && !f.is_dir {
            if let Some(e) = listable(path, p) {
                out.exec
                    .get_or_insert_with(BTreeMap::new)
                    .entry(e)
                    .or_insert_with(|| {
                        "executed during learning (a file bound by learning)".to_string()
                    });
            }
        }
    }
    let under =
        |p: &Path, set: &BTreeMap<PathBuf, Uses>| set.keys().any(|k| k != p && p.starts_with(k));
    let collapse = |set: &mut BTreeMap<PathBuf, Uses>, others: &BTreeMap<PathBuf, Uses>| loop {
        // Entries under another entry of this set or of `others` go into it.
        let inner: Vec<PathBuf> = set
            .keys()
            .filter(|k| under(k, set) || under(k, others))
            .cloned()
            .collect();
        for k in &inner {
            if let Some(u) = set.remove(k) {
                if let Some((_, into)) = set.iter_mut().find(|(d, _)| k.starts_with(d)) {
                    into.add(u);
                }
            }
        }
        let mut by_dir: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for k in set.keys() {
            // Never into a home (`/home/u`) or top directory: it holds more than what was read.
            if let Some(d) = k.parent().filter(|d| depth(d) >= 3) {
                *by_dir.entry(d.to_path_buf()).or_default() += 1;
            }
        }
        let Some(dir) = by_dir
            .into_iter()
            .find(|(_, n)| *n >= COLLAPSE_AT)
            .map(|(d, _)| d)
        else {
            if inner.is_empty() {
                break;
            }
            continue;
        };
        let mut uses = Uses::default();
        let kids: Vec<PathBuf> = set
            .keys()
            .filter(|k| k.parent() == Some(&dir))
            .cloned()
            .collect();
        for k in kids {
            if let Some(u) = set.remove(&k) {
                uses.add(u);
            }
        }
        set.insert(dir, uses);
    };
    collapse(&mut rw, &BTreeMap::new());
    collapse(&mut ro, &rw);
    for (set, into) in [(rw, &mut out.rw), (ro, &mut out.ro)] {
        for (path, uses) in set {
            into.entry(path.display().to_string())
                .or_insert_with(|| comment(&uses.why()));
        }
    }
    if left_out > 0 {
        out.notes.insert(format!(
            "{left_out} path(s) the run asked for were not learned (not a plain absolute path, or \
             a bind of a top-level directory)"
        ));
    }
}

/// The program the Outcome says the programs allowlist refused to start, if it can be listed:
/// a valid entry outside the scratch directories (empty at start, nothing there can be listed).
fn refused_exec(o: &Outcome, p: &Profile) -> Option<String> {
    let rest = o.error.as_deref()?.strip_prefix("cannot execute ")?;
    let (path, _) = rest.split_once(" (not in the programs allowlist")?;
    listable(std::path::Path::new(path), p)
}

/// `path` as an `[exec] allow` entry, if it can be one: a valid entry naming one file outside
/// the scratch directories (empty at start, nothing there can be listed).
fn listable(path: &std::path::Path, p: &Profile) -> Option<String> {
    crate::exec::validate_entry(path, "exec.allow").ok()?;
    let scratch = ["/tmp", "/dev/shm", crate::profile::HOME]
        .iter()
        .any(|s| path.starts_with(s))
        || (p.workspace.is_none() && path.starts_with("/workspace"));
    (!scratch && !crate::exec::is_glob(path)).then(|| path.display().to_string())
}

/// Reads back a file [`render`] wrote (or a hand-edited one): its entries with their comments.
fn parse_existing(text: &str) -> Result<Learned, LearnError> {
    let bad = |m: String| LearnError::Existing(m);
    let table: toml::Table =
        toml::from_str(text).map_err(|e| bad(format!("is not TOML: {}", e.message())))?;
    let comment_of = |q: &str| -> String {
        text.lines()
            .map(str::trim)
            .find(|l| l.starts_with(q))
            .and_then(|l| l[q.len()..].split_once('#'))
            .map(|(_, c)| comment(c))
            .unwrap_or_else(|| "from the file learned into".to_string())
    };
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Learned {
        extends: table
            .get("extends")
            .and_then(|v| v.as_str())
            .unwrap_or("default")
            .to_string(),
        name: table
            .get("name")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        ..Learned::default()
    };
    let get = |t: &str| table.get(t).and_then(|v| v.as_table());
    if let Some(fs) = get("filesystem") {
        for s in strings(fs.get("ro")) {
            let c = comment_of(&format!("{},", quoted(&s)));
            out.ro.insert(s, c);
        }
        for s in strings(fs.get("rw")) {
            let c = comment_of(&format!("{},", quoted(&s)));
            out.rw.insert(s, c);
        }
        out.workspace = fs
            .get("workspace")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        out.system = fs
            .get("system")
            .and_then(|v| v.as_str())
            .map(str::to_string);
    }
    if let Some(x) = get("exec") {
        let mut exec = BTreeMap::new();
        for s in strings(x.get("allow")) {
            let c = comment_of(&format!("{},", quoted(&s)));
            exec.insert(s, c);
        }
        out.exec = Some(exec);
    }
    out.require = strings(table.get("require")).into_iter().collect();
    out.hostname = table
        .get("hostname")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    out.allow_no_landlock = table
        .get("allow_no_landlock")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    out.image = table
        .get("image")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    if let Some(n) = get("network") {
        for s in strings(n.get("allow")) {
            let c = comment_of(&format!("{},", quoted(&s)));
            out.network.insert(s, c);
        }
        if let Some(h) = n.get("hosts").and_then(|v| v.as_table()) {
            for (k, v) in h {
                if let Some(ip) = v.as_str() {
                    out.hosts.insert(k.clone(), ip.to_string());
                }
            }
        }
    }
    if let Some(l) = get("limits") {
        for (k, v) in l {
            let Some(key) = key_of(k) else { continue };
            let value = match (key, v) {
                ("pids", toml::Value::Integer(n)) => Value::Count((*n).max(0) as u64),
                ("cpu_time" | "timeout", toml::Value::String(s)) => Value::Time(
                    crate::units::parse_duration(s)
                        .map_err(|e| bad(format!("[limits] {k}: {e}")))?,
                ),
                (_, toml::Value::String(s)) => {
                    Value::Size(parse_size(s).map_err(|e| bad(format!("[limits] {k}: {e}")))?)
                }
                (_, toml::Value::Integer(n)) => Value::Size((*n).max(0) as u64),
                _ => continue,
            };
            let c = comment_of(&format!("{key} = "));
            out.limits.insert(key, (value, c));
        }
    }
    Ok(out)
}

/// Widens `into` by `more`: the union of entries (a comment kept from the earlier run), the
/// larger of each limit.
fn merge(into: &mut Learned, more: Learned) {
    for (a, b) in [
        (&mut into.ro, more.ro),
        (&mut into.rw, more.rw),
        (&mut into.network, more.network),
    ] {
        for (k, v) in b {
            a.entry(k).or_insert(v);
        }
    }
    into.hosts.extend(more.hosts);
    for (k, (v, c)) in more.limits {
        match into.limits.get(k) {
            Some((old, _)) if old.amount() >= v.amount() => {}
            _ => {
                into.limits.insert(k, (v, c));
            }
        }
    }
    into.exec = match (into.exec.take(), more.exec) {
        (Some(mut a), Some(b)) => {
            for (k, v) in b {
                a.entry(k).or_insert(v);
            }
            Some(a)
        }
        (Some(_), None) => {
            into.notes.insert(
                "[exec] allow dropped: a run learned into this file had no programs allowlist \
                 (any file could be executed)"
                    .to_string(),
            );
            None
        }
        (None, _) => None,
    };
    into.require.extend(more.require);
    into.hostname = into.hostname.take().or(more.hostname);
    into.allow_no_landlock |= more.allow_no_landlock;
    into.workspace = into.workspace.take().or(more.workspace);
    into.system = into.system.take().or(more.system);
    into.image = into.image.take().or(more.image);
    into.notes.extend(more.notes);
}

fn render(l: &Learned, command: &[String]) -> String {
    let mut out = String::new();
    let cmd = comment(&command.join(" "));
    let _ = writeln!(
        out,
        "# Learned by `cordon run --learn` (last from: {cmd}).\n\
         # What the runs needed beyond `{}`, each entry saying why; limits are the observed\n\
         # peaks x{MARGIN}, never below a floor. Review it (`cordon profile explain`) before use;\n\
         # learning onto this file again widens it.",
        l.extends
    );
    for n in &l.notes {
        let _ = writeln!(out, "# Note: {}", comment(n));
    }
    if let Some(n) = &l.name {
        let _ = writeln!(out, "name = {}", quoted(n));
    }
    let _ = writeln!(out, "extends = {}", quoted(&l.extends));
    if let Some(h) = &l.hostname {
        let _ = writeln!(out, "hostname = {}", quoted(h));
    }
    if !l.require.is_empty() {
        let r: Vec<String> = l.require.iter().map(|x| quoted(x)).collect();
        let _ = writeln!(out, "require = [{}]", r.join(", "));
    }
    if l.allow_no_landlock {
        let _ = writeln!(out, "allow_no_landlock = true  # the learning run's");
    }
    if let Some(i) = &l.image {
        let _ = writeln!(out, "image = {}", quoted(i));
    }
    let list = |out: &mut String, key: &str, items: &BTreeMap<String, String>| {
        if items.is_empty() {
            return;
        }
        let _ = writeln!(out, "{key} = [");
        for (v, c) in items {
            let _ = writeln!(out, "  {},  # {}", quoted(v), comment(c));
        }
        out.push_str("]\n");
    };
    let fs = l.workspace.is_some() || l.system.is_some() || !l.ro.is_empty() || !l.rw.is_empty();
    if fs {
        out.push_str("\n[filesystem]\n");
        if let Some(s) = &l.system {
            let _ = writeln!(out, "system = {}", quoted(s));
        }
        if let Some(w) = &l.workspace {
            let _ = writeln!(out, "workspace = {}  # the learning run's", quoted(w));
        }
        list(&mut out, "ro", &l.ro);
        list(&mut out, "rw", &l.rw);
    }
    if !l.network.is_empty() {
        out.push_str("\n[network]\n");
        list(&mut out, "allow", &l.network);
        if !l.hosts.is_empty() {
            out.push_str("\n[network.hosts]\n");
            for (k, v) in &l.hosts {
                let _ = writeln!(out, "{} = {}", quoted(k), quoted(v));
            }
        }
    }
    if let Some(exec) = &l.exec {
        out.push_str("\n[exec]\n");
        if exec.is_empty() {
            out.push_str("allow = []\n");
        }
        list(&mut out, "allow", exec);
    }
    if !l.limits.is_empty() {
        out.push_str("\n[limits]\n");
        for k in LIMIT_KEYS {
            if let Some((v, c)) = l.limits.get(k) {
                let _ = writeln!(out, "{k} = {}  # {}", v.toml(), comment(c));
            }
        }
    }
    out
}

/// The learned profile's text: what `run` needed, widened onto `existing` (a file learned into
/// before) if given. Errors: `existing` does not parse, or extends another built-in.
pub fn learn(run: &Run, existing: Option<&str>) -> Result<String, LearnError> {
    let mut fresh = Learned {
        extends: run.base.to_string(),
        ..Learned::default()
    };
    carried_of(run, &mut fresh);
    files_of(run, &mut fresh);
    network_of(run, &mut fresh);
    limits_of(run, &mut fresh);
    let learned = match existing {
        None => fresh,
        Some(text) => {
            let mut old = parse_existing(text)?;
            if old.extends != fresh.extends {
                return Err(LearnError::Existing(format!(
                    "extends '{}', this run's profile is '{}': learn into another file",
                    old.extends, fresh.extends
                )));
            }
            merge(&mut old, fresh);
            old
        }
    };
    Ok(render(&learned, run.command))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Enforcement, NetworkEvent, Usage};
    use std::path::Path;

    fn outcome(events: &[(&str, u16, &str)], usage: Usage) -> Outcome {
        let mut o = Outcome::error("x", Enforcement::default());
        o.error = None;
        o.usage = usage;
        o.network = events
            .iter()
            .map(|(h, p, v)| NetworkEvent {
                time_ms: 0,
                host: h.to_string(),
                port: *p,
                verdict: v.to_string(),
                reason: "not in the allowlist".into(),
                bytes: 0,
            })
            .collect();
        o
    }

    fn learned(p: &Profile, o: &Outcome, existing: Option<&str>) -> (String, Profile) {
        let cmd = vec!["python3".to_string(), "job.py".to_string()];
        let text = learn(
            &Run {
                base: "default",
                profile: p,
                outcome: o,
                command: &cmd,
                output_captured: true,
            },
            existing,
        )
        .expect("learn");
        let back = Profile::from_toml(&text, Path::new("learned.toml"))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        (text, back)
    }

    #[test]
    fn destinations_and_peaks_become_entries_with_reasons_and_margins() {
        let mut p = Profile::builtin("default").unwrap();
        p.network.allow = vec!["*.test:*".into(), "127.0.0.2:*".into()];
        p.network
            .hosts
            .insert("a.test".into(), "127.0.0.2".parse().unwrap());
        let o = outcome(
            &[("a.test", 8080, "allow"), ("b.example", 443, "deny")],
            Usage {
                wall_ms: 2000,
                cpu_user_ms: 100,
                cpu_system_ms: 0,
                peak_memory_bytes: 100 << 20,
                peak_pids: 20,
            },
        );
        let (text, back) = learned(&p, &o, None);
        assert_eq!(
            back.network.allow,
            vec!["127.0.0.2:8080", "a.test:8080", "b.example:443"],
            "{text}"
        );
        assert!(text.contains("reached 1 time(s)"), "{text}");
        assert!(text.contains("refused 1 time(s)"), "{text}");
        assert_eq!(back.limits.memory, 150 << 20, "{text}");
        assert_eq!(back.limits.pids, 30);
        assert_eq!(back.limits.timeout, FLOOR_TIMEOUT);
        assert_eq!(back.limits.cpu_time, Some(FLOOR_CPU_TIME));
        assert_eq!(back.limits.output_limit, FLOOR_OUTPUT);
    }

    #[test]
    fn learning_again_widens_and_keeps_earlier_entries() {
        let p = Profile::builtin("default").unwrap();
        let big = Usage {
            peak_memory_bytes: 200 << 20,
            ..Usage::default()
        };
        let (first, _) = learned(&p, &outcome(&[("a.test", 1, "allow")], big), None);
        let (second, back) = learned(
            &p,
            &outcome(&[("b.test", 2, "deny")], Usage::default()),
            Some(&first),
        );
        assert_eq!(back.network.allow, vec!["a.test:1", "b.test:2"], "{second}");
        assert_eq!(back.limits.memory, 300 << 20, "{second}");
        assert!(second.contains("reached 1 time(s)"), "{second}");
        let mut other = Profile::builtin("strict").unwrap();
        other.name = "strict".into();
        let err = learn(
            &Run {
                base: "strict",
                profile: &other,
                outcome: &outcome(&[], Usage::default()),
                command: &[],
                output_captured: false,
            },
            Some(&first),
        )
        .expect_err("another base");
        assert!(err.to_string().contains("learn into another file"), "{err}");
    }

    #[test]
    fn a_programs_allowlist_is_kept_and_a_refused_program_added() {
        let mut p = Profile::builtin("default").unwrap();
        p.exec_allow = Some(vec!["/usr/bin/python3".into()]);
        p.require = vec![crate::Layer::Seccomp];
        let mut o = outcome(&[], Usage::default());
        o.error = Some(
            "cannot execute /usr/bin/git (not in the programs allowlist, --exec-allow / [exec] \
             allow; a script's #! interpreter must be listed too): Permission denied"
                .into(),
        );
        let (text, back) = learned(&p, &o, None);
        assert_eq!(
            back.exec_allow,
            Some(vec!["/usr/bin/git".into(), "/usr/bin/python3".into()]),
            "{text}"
        );
        assert_eq!(back.require, vec![crate::Layer::Seccomp], "{text}");
        o.error = Some("cannot execute /tmp/x (not in the programs allowlist)".into());
        let (text, back) = learned(&p, &o, Some(&text));
        assert_eq!(back.exec_allow.map(|v| v.len()), Some(2), "{text}");
        // A run without an allowlist learned into the file widens it to any file.
        let (text, back) = learned(&Profile::builtin("default").unwrap(), &o, Some(&text));
        assert_eq!(back.exec_allow, None, "{text}");
        assert!(text.contains("[exec] allow dropped"), "{text}");
    }

    #[test]
    fn executed_programs_become_the_allowlist_but_not_from_scratch_directories() {
        let p = Profile::builtin("default").unwrap();
        let mut o = outcome(&[], Usage::default());
        o.executed = [
            "/usr/bin/python3",
            "/bin/sh",
            "/tmp/mine",
            "/home/sandbox/x",
            "/workspace/t",
        ]
        .map(std::path::PathBuf::from)
        .to_vec();
        let (text, back) = learned(&p, &o, None);
        assert_eq!(
            back.exec_allow,
            Some(vec!["/bin/sh".into(), "/usr/bin/python3".into()]),
            "{text}"
        );
        assert!(text.contains("executed during learning"), "{text}");
    }

    #[test]
    fn without_a_cgroup_memory_is_not_learned_below_the_runs_own_limit() {
        let p = Profile::builtin("default").unwrap();
        let mut o = outcome(
            &[],
            Usage {
                peak_memory_bytes: 90 << 20,
                ..Usage::default()
            },
        );
        o.enforcement.cgroup = "none".into();
        let (text, back) = learned(&p, &o, None);
        assert_eq!(back.limits.memory, p.limits.memory, "{text}");
        assert!(text.contains("no cgroup measured this run"), "{text}");
    }

    #[test]
    fn files_used_become_binds_collapsed_to_directories_with_the_programs_named() {
        use crate::outcome::{FileAccess, FileUse};
        let mut p = Profile::builtin("default").unwrap();
        p.binds.push(crate::Bind {
            source: "/srv/in".into(),
            dest: "/srv/in".into(),
            writable: false,
            idmap: false,
            limit: None,
        });
        let mut o = outcome(&[], Usage::default());
        let f = |path: &str, is_dir: bool, how: FileUse, program: &str| FileAccess {
            path: path.into(),
            is_dir,
            how,
            program: program.into(),
        };
        o.files = vec![
            f("/srv/data/set/a.csv", false, FileUse::Read, "python3"),
            f("/srv/data/set/b.csv", false, FileUse::Read, "python3"),
            f("/srv/data/set/c.csv", false, FileUse::Read, "cat"),
            f("/data/one.txt", false, FileUse::Read, "python3"),
            f("/data/out", true, FileUse::Write, "make"),
            f("/data/out/sub/x", false, FileUse::Read, "make"),
            f("/opt/tool/bin/run", false, FileUse::Exec, "sh"),
            f("/srv/in/x", true, FileUse::Write, "sh"),
            f("/proc/1/status", false, FileUse::Read, "ps"),
            f("/usr/lib/x", false, FileUse::Read, "ld"),
            f("/var", true, FileUse::Write, "sh"),
            f("/var/cache/fontconfig", true, FileUse::Write, "fc-list"),
            f("/data/a:b", false, FileUse::Read, "sh"),
            f("/data/../etc/shadow", false, FileUse::Read, "sh"),
            f(
                "/data/evil\"]\n[filesystem]\nrw = [\"/\"]",
                false,
                FileUse::Read,
                "x\n[y]",
            ),
        ];
        let (text, back) = learned(&p, &o, None);
        let binds: Vec<(String, bool)> = back
            .binds
            .iter()
            .map(|b| (b.source.display().to_string(), b.writable))
            .collect();
        for want in [
            ("/srv/data/set", false),
            ("/data/one.txt", false),
            ("/data/out", true),
            ("/opt/tool/bin/run", false),
            ("/srv/in", false),
        ] {
            assert!(
                binds.contains(&(want.0.to_string(), want.1)),
                "{want:?}\n{text}"
            );
        }
        assert!(
            !binds
                .iter()
                .any(|b| b.0 == "/data/out/sub/x" || b.0 == "/var" || b.0 == "/"),
            "{text}"
        );
        assert!(
            !text.contains("/proc") && !text.contains("/usr/lib/x"),
            "{text}"
        );
        assert!(!text.contains("a:b") && !text.contains("shadow"), "{text}");
        assert!(
            text.contains("read during learning by cat, python3 (3 paths in it)"),
            "{text}"
        );
        assert!(
            text.contains("written in during learning by make"),
            "{text}"
        );
        assert!(
            text.contains("/opt/tool/bin/run\",  # executed during learning"),
            "{text}"
        );
        assert!(text.contains("not learned"), "{text}");
        assert!(
            text.contains("the read-only bind /srv/in was written in"),
            "{text}"
        );
    }

    /// The program chooses the host names the proxy logs: none may add a key to the profile.
    #[test]
    fn hostile_host_names_cannot_inject_into_the_learned_profile() {
        let p = Profile::builtin("default").unwrap();
        let evil = "x\"]\n[filesystem]\nrw = [\"/\"]\n#";
        let mut o = outcome(
            &[(evil, 443, "deny"), ("ok.test", 443, "deny")],
            Usage::default(),
        );
        o.network[1].reason = "a\n[filesystem]\nrw = [\"/etc\"]".into();
        let (text, back) = learned(&p, &o, None);
        assert!(back.binds.is_empty(), "{text}");
        assert_eq!(back.network.allow, vec!["ok.test:443"], "{text}");
        assert!(text.contains("not valid host names"), "{text}");
    }
}
