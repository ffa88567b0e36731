//! Shared helpers for the `cordon run` attack suite.
//!
//! Every run goes through [`Cmd`], which enforces a hard deadline (a hung sandbox fails the
//! test instead of hanging the suite), checks that cordon never panicked, and — after the run —
//! checks from outside that cordon left no cgroup directory behind. Python payloads get a
//! unique marker in their argv so the suite can prove no process of the sandbox outlived it.

#![allow(dead_code)]

pub mod hosts;
pub mod payloads;
pub mod upstream;

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub fn cordon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

/// The host's python (the sandbox sees the same file at the same path).
pub const HOST_PYTHON: &str = "/usr/bin/python3";

pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub fn is_root() -> bool {
    euid() == 0
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A string no other test (or earlier run) uses: for markers, file names, tokens.
pub fn unique(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("cordontest-{tag}-{}-{n}-{nanos}", std::process::id())
}

// ---------------------------------------------------------------------------------------------
// Host temp dirs

/// A directory under the host's temp dir, removed on drop. Mode 0755 (so that a sandbox mapped
/// to another host uid, as when the suite runs as root, can traverse it).
pub struct HostDir {
    pub path: PathBuf,
}

impl HostDir {
    pub fn new(tag: &str) -> HostDir {
        let path = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir(&path).expect("create host temp dir");
        set_mode(&path, 0o755);
        HostDir { path }
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    pub fn str(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }

    /// Writes a file with the given mode.
    pub fn file(&self, name: &str, content: &str, mode: u32) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, content).expect("write host file");
        set_mode(&p, mode);
        p
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

pub fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).expect("chown");
}

// ---------------------------------------------------------------------------------------------
// Running cordon (or anything) with a deadline

/// How a process ended, with everything it printed.
#[derive(Debug)]
pub struct Finished {
    pub pid: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Finished {
    /// Parses cordon's `--json` output, insisting that cordon exited 0 (the contract).
    pub fn outcome(&self) -> Outcome {
        assert_eq!(
            self.code,
            Some(0),
            "cordon --json must exit 0 when it produced an Outcome; got {self:?}"
        );
        let v: Value = serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("cordon --json printed no JSON Outcome ({e}): {self:?}"));
        Outcome {
            v,
            cordon_pid: self.pid,
            elapsed: self.elapsed,
        }
    }
}

/// A command line to run, with a deadline. `Cmd::cordon` prefixes the cordon binary.
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    stdin: Option<Vec<u8>>,
    leak: Vec<(OwnedFd, RawFd)>,
    deadline: Duration,
    stdio_fd: Option<OwnedFd>,
    /// Runs cordon (directly, or through a launcher that execs it): checked for panics and
    /// leftover cgroups.
    cordon: bool,
}

impl Cmd {
    pub fn new(program: impl Into<OsString>) -> Cmd {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            stdin: None,
            leak: Vec::new(),
            deadline: Duration::from_secs(60),
            stdio_fd: None,
            cordon: false,
        }
    }

    /// The cordon binary — started inside a container's layout (see [`hosts`]) when
    /// `CORDON_TEST_HOST=container`, which scripts/test.sh sets to run a suite again there.
    pub fn cordon() -> Cmd {
        match std::env::var("CORDON_TEST_HOST").as_deref() {
            Ok("container") => hosts::HostLayout::container().cordon(),
            Ok(other) => panic!("CORDON_TEST_HOST={other}: only \"container\" is known"),
            Err(_) => Cmd::new(cordon_bin()).counts_as_cordon(),
        }
    }

    pub fn counts_as_cordon(mut self) -> Cmd {
        self.cordon = true;
        self
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Cmd {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, it: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn env_remove(mut self, k: &str) -> Cmd {
        self.env_remove.push(k.into());
        self
    }

    /// Bytes written to the process's stdin (default: /dev/null).
    pub fn stdin(mut self, data: &[u8]) -> Cmd {
        self.stdin = Some(data.to_vec());
        self
    }

    /// In the child only, duplicate our fd `from` to `to` *without* CLOEXEC: the child (cordon)
    /// starts with a leaked descriptor, as a careless embedding program would hand it.
    pub fn leak_fd(mut self, from: impl AsFd, to: RawFd) -> Cmd {
        let from = from
            .as_fd()
            .try_clone_to_owned()
            .expect("dup the fd to leak");
        self.leak.push((from, to));
        self
    }

    pub fn deadline(mut self, d: Duration) -> Cmd {
        self.deadline = d;
        self
    }

    /// Use this fd (e.g. a pty slave) for the child's stdin, stdout and stderr.
    pub fn stdio_fd(mut self, fd: impl AsFd) -> Cmd {
        self.stdio_fd = Some(fd.as_fd().try_clone_to_owned().expect("dup the stdio fd"));
        self
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.args);
        // Never the repository: relative paths in a test are bugs.
        c.current_dir(std::env::temp_dir());
        for k in &self.env_remove {
            c.env_remove(k);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        if let Some(fd) = &self.stdio_fd {
            let dup = || Stdio::from(fd.try_clone().expect("dup the stdio fd"));
            c.stdin(dup()).stdout(dup()).stderr(dup());
        } else {
            c.stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if !self.leak.is_empty() {
            use command_fds::{CommandFdExt, FdMapping};
            let mappings = self
                .leak
                .iter()
                .map(|(from, to)| FdMapping {
                    parent_fd: from.try_clone().expect("dup the fd to leak"),
                    child_fd: *to,
                })
                .collect();
            c.fd_mappings(mappings).expect("leaked fd numbers collide");
        }
        c
    }

    /// Starts the process; the caller must `wait` it.
    pub fn spawn(&self) -> Running {
        // ETXTBSY: a program a test has just written (a copy of cordon, say) can still be
        // open for writing in the child of another test thread's fork, until that child
        // execs (close-on-exec closes only then). That lasts a moment: try again.
        let mut busy = 0;
        let mut child = loop {
            match self.command().spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && busy < 100 => {
                    busy += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => break r.expect("spawn"),
            }
        };
        let start = Instant::now();
        if let Some(data) = &self.stdin {
            let mut w = child.stdin.take().expect("stdin pipe");
            let data = data.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let _ = w.write_all(&data);
            });
        }
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        Running {
            child,
            out,
            err,
            start,
            deadline: self.deadline,
        }
    }

    /// Runs to completion (or panics at the deadline, killing the process first).
    pub fn run(&self) -> Finished {
        let f = self.spawn().wait();
        if self.cordon {
            assert!(
                !f.stderr.contains("panicked"),
                "cordon panicked: {}",
                f.stderr
            );
            assert_no_cgroup_left(f.pid);
        }
        f
    }
}

fn reader<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

pub struct Running {
    pub child: Child,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
    start: Instant,
    deadline: Duration,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        let sig = rustix::process::Signal::from_named_raw(sig).expect("a named signal");
        let _ = rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), sig);
    }

    pub fn wait(mut self) -> Finished {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if self.start.elapsed() > self.deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "process {} still running after {:?}: the test's deadline (a hung sandbox?)",
                    self.child.id(),
                    self.deadline
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.start.elapsed();
        let text = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            h.map(|h| String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned())
                .unwrap_or_default()
        };
        Finished {
            pid: self.child.id(),
            code: status.code(),
            signal: status.signal(),
            stdout: text(self.out.take()),
            stderr: text(self.err.take()),
            elapsed,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes

/// A parsed `Outcome`, with the pid of the cordon process that printed it.
pub struct Outcome {
    pub v: Value,
    pub cordon_pid: u32,
    pub elapsed: Duration,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut v = self.v.clone();
        // Keep failure messages readable.
        for k in ["stdout", "stderr"] {
            if let Some(Value::String(s)) = v.get_mut(k) {
                if s.len() > 4000 {
                    let cut = s
                        .char_indices()
                        .nth(4000)
                        .map(|(i, _)| i)
                        .unwrap_or(s.len());
                    *s = format!("{}…[{} bytes]", &s[..cut], s.len());
                }
            }
        }
        write!(
            f,
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_default()
        )
    }
}

impl Outcome {
    pub fn status(&self) -> &str {
        self.v["status"].as_str().unwrap_or("?")
    }
    pub fn exit_code(&self) -> Option<i64> {
        self.v["exit_code"].as_i64()
    }
    pub fn signal(&self) -> Option<i64> {
        self.v["signal"].as_i64()
    }
    pub fn stdout(&self) -> &str {
        self.v["stdout"].as_str().unwrap_or("")
    }
    pub fn stderr(&self) -> &str {
        self.v["stderr"].as_str().unwrap_or("")
    }
    pub fn enforcement(&self) -> &Value {
        &self.v["enforcement"]
    }
    /// `"v1"`, `"v2"` or `"none"`.
    pub fn cgroup(&self) -> &str {
        self.v["enforcement"]["cgroup"].as_str().unwrap_or("?")
    }
    pub fn has_cgroup(&self) -> bool {
        self.cgroup() != "none"
    }
    pub fn usage(&self, k: &str) -> u64 {
        self.v["usage"][k].as_u64().unwrap_or(0)
    }
    /// `limits_hit`, as the JSON strings.
    pub fn limits_hit(&self) -> Vec<String> {
        self.v["limits_hit"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
    pub fn hit(&self, limit: &str) -> bool {
        self.limits_hit().iter().any(|l| l == limit)
    }

    /// The payload's report: the last line of stdout, as JSON.
    pub fn data(&self) -> Value {
        let line = self
            .stdout()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| panic!("payload printed nothing:\n{self}"));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("payload output is not JSON ({e}):\n{self}"))
    }

    pub fn assert_exited(&self, code: i64) -> &Self {
        assert!(
            self.status() == "exited" && self.exit_code() == Some(code),
            "expected the payload to exit with {code}:\n{self}"
        );
        self
    }

    pub fn assert_ok(&self) -> &Self {
        self.assert_exited(0)
    }

    /// Every layer the contract promises on this host is reported as enforced.
    pub fn assert_fully_confined(&self) -> &Self {
        let e = self.enforcement();
        for k in NAMESPACES.iter().chain(&["seccomp", "rlimits"]) {
            assert_eq!(e[k], Value::Bool(true), "enforcement.{k} not true:\n{self}");
        }
        if let Some(uid) = e["host_uid"].as_u64() {
            assert_ne!(uid, 0, "the sandbox must never be host root:\n{self}");
        }
        self
    }
}

/// The namespace layers of `enforcement`.
pub const NAMESPACES: [&str; 7] = [
    "user_ns",
    "pid_ns",
    "net_ns",
    "mount_ns",
    "ipc_ns",
    "uts_ns",
    "cgroup_ns",
];

/// An `enforcement` without namespaces (a host that refused them): every namespace reported
/// missing, the other layers held, never host root, a note for each gap. `what` names the
/// run in failure messages.
pub fn assert_no_namespaces(e: &Value, what: &dyn std::fmt::Display) {
    for k in NAMESPACES {
        assert_eq!(
            e[k],
            Value::Bool(false),
            "enforcement.{k} must be false:\n{what}"
        );
    }
    assert_eq!(e["seccomp"], Value::Bool(true), "{what}");
    assert_eq!(e["rlimits"], Value::Bool(true), "{what}");
    assert!(e["landlock_abi"].as_u64().unwrap_or(0) > 0, "{what}");
    assert_ne!(e["host_uid"].as_u64(), Some(0), "never host root:\n{what}");
    let notes = e["notes"].to_string();
    for want in [
        "refused namespaces",
        "no pid namespace: the host's processes are visible in /proc",
        "no mount namespace",
        "--disk is watched, not capped",
        "no network namespace",
        "no ipc or uts namespace: System V IPC and POSIX message queues are refused",
    ] {
        assert!(notes.contains(want), "note {want:?} missing:\n{what}");
    }
}

/// A Python fork bomb for the suites' script runners: forks up to 200 sleepers, sets
/// `R['refused']` to the errno of the first refused fork and `R['forked']` to how many it got.
pub const FORK_BOMB_PY: &str = "n = 0
for i in range(200):
    try:
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        n += 1
    except OSError as e:
        R['refused'] = e.errno; break
R['forked'] = n";

/// `cordon run --json ARGS…` → its Outcome.
pub fn run_json(args: &[&str]) -> Outcome {
    Cmd::cordon()
        .args(["run", "--json"])
        .args(args.iter().copied())
        .run()
        .outcome()
}

// ---------------------------------------------------------------------------------------------
// Python payloads

/// Helpers every Python payload starts with. `R` is the report, printed as JSON by `out()`.
/// `sc(nr, *args)` makes a raw syscall and returns its errno, or `"ok"`. `t(f, *a)` calls `f`
/// and returns the `OSError` errno, or `"ok"`. `S(b"…")` returns a C string's address.
pub const PRELUDE: &str = r#"
import ctypes, os, sys, json, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
R = {}
_keep = []
def S(b):
    buf = ctypes.create_string_buffer(b)
    _keep.append(buf)
    return ctypes.addressof(buf)
def BUF(n=4096):
    buf = ctypes.create_string_buffer(n)
    _keep.append(buf)
    return ctypes.addressof(buf)
def sc(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    return ctypes.get_errno() if r == -1 else "ok"
def t(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        return e.errno
def out():
    print(json.dumps(R), flush=True)
"#;

/// Runs a Python payload (prelude + `script`) under `cordon run --json FLAGS…`, with a unique
/// marker as `sys.argv[1]`, and checks afterwards that no process carrying the marker is left.
pub fn py(flags: &[&str], script: &str) -> Outcome {
    py_cmd(Cmd::cordon(), flags, script)
}

/// Like [`py`], starting from a prepared `Cmd` (for env, leaked fds, stdin…).
pub fn py_cmd(base: Cmd, flags: &[&str], script: &str) -> Outcome {
    let marker = unique("py");
    let code = format!("{PRELUDE}\n{script}");
    let f = base
        .args(["run", "--json"])
        .args(flags.iter().copied())
        .args(["--", "python3", "-c", code.as_str(), marker.as_str()])
        .run();
    let o = f.outcome();
    assert_no_process_with(&marker, Duration::from_secs(3));
    o
}

// ---------------------------------------------------------------------------------------------
// errno checks

pub fn errno_name(n: i64) -> String {
    let name = match n as i32 {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTTY => "ENOTTY",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EXDEV => "EXDEV",
        _ => "",
    };
    format!("{n} {name}")
}

/// Checks `data[key] == expected` for every row, reporting all mismatches at once.
/// `expected` is an errno, or 0 for `"ok"`.
pub fn expect_table(o: &Outcome, data: &Value, rows: &[(&str, i32)]) {
    let mut bad = Vec::new();
    for (key, want) in rows {
        let got = &data[*key];
        let ok = if *want == 0 {
            got == "ok"
        } else {
            got.as_i64() == Some(i64::from(*want))
        };
        if !ok {
            let got_s = match got.as_i64() {
                Some(n) => errno_name(n),
                None => got.to_string(),
            };
            let want_s = if *want == 0 {
                "ok".to_string()
            } else {
                errno_name(i64::from(*want))
            };
            bad.push(format!("  {key}: expected {want_s}, got {got_s}"));
        }
    }
    assert!(
        bad.is_empty(),
        "unexpected results:\n{}\nfull outcome:\n{o}",
        bad.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Checks from outside

/// Pids (other than ours) whose command line contains `marker`.
pub fn procs_with(marker: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmd.contains(marker) {
            found.push((pid, cmd));
        }
    }
    found
}

/// Waits up to `within` for every process carrying `marker` to be gone; panics otherwise.
pub fn assert_no_process_with(marker: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let left = procs_with(marker);
        if left.is_empty() {
            return;
        }
        if start.elapsed() > within {
            panic!("sandbox processes outlived the run ({marker}): {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `within` for a process carrying `marker` whose argv[0] is `argv0`.
pub fn wait_for_process(marker: &str, argv0: &str, within: Duration) -> Option<u32> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some((pid, _)) = procs_with(marker)
            .into_iter()
            .find(|(_, c)| c.split(' ').next() == Some(argv0))
        {
            return Some(pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Our own cgroup directories (where cordon creates `cordon-<pid>` children): one per v1
/// controller cordon uses, or the v2 directory.
pub fn own_cgroup_dirs() -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let (root, mnt, fstype, opts) = (l[3], l[4], r[0], r[2]);
        let path = match fstype {
            "cgroup" => {
                let ctrls = ["memory", "pids", "cpu", "cpuacct"];
                if !opts.split(',').any(|o| ctrls.contains(&o)) {
                    continue;
                }
                own.lines().find_map(|cl| {
                    let mut p = cl.splitn(3, ':');
                    let _ = p.next()?;
                    let c = p.next()?;
                    let path = p.next()?;
                    let shared = c.split(',').any(|x| opts.split(',').any(|o| o == x));
                    shared.then(|| path.to_string())
                })
            }
            "cgroup2" => own
                .lines()
                .find_map(|cl| cl.strip_prefix("0::").map(str::to_string)),
            _ => None,
        };
        let Some(path) = path else { continue };
        let rel = path
            .strip_prefix(root.trim_end_matches('/'))
            .unwrap_or(&path);
        let d = Path::new(mnt).join(rel.trim_start_matches('/'));
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// Cgroup directories cordon process `pid` created and did not remove.
pub fn cgroups_of(pid: u32) -> Vec<PathBuf> {
    let exact = format!("cordon-{pid}");
    let prefix = format!("cordon-{pid}-");
    let mut left = Vec::new();
    for d in own_cgroup_dirs() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == exact || name.starts_with(&prefix) {
                left.push(e.path());
            }
        }
    }
    left
}

pub fn assert_no_cgroup_left(pid: u32) {
    let left = cgroups_of(pid);
    assert!(
        left.is_empty(),
        "cordon (pid {pid}) left cgroup directories behind: {left:?}"
    );
}

/// `cordon check --json`.
pub fn check_report() -> Value {
    let f = Cmd::cordon().args(["check", "--json"]).run();
    assert_eq!(f.code, Some(0), "cordon check --json: {f:?}");
    serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("check --json: {e}: {f:?}"))
}

/// Free bytes on the filesystem holding `p`.
pub fn free_bytes(p: &Path) -> u64 {
    let s = rustix::fs::statvfs(p).expect("statvfs");
    s.f_bavail * s.f_frsize
}
