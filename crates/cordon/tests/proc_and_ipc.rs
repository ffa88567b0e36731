//! Seeing and touching the host from inside: processes, signals, environment, loopback TCP/UDP,
//! abstract and path unix sockets, SysV IPC, /dev/shm, hostname, host uid.

mod common;

use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

/// A host process that must survive the sandbox; killed on drop.
struct HostSleeper(std::process::Child);

impl HostSleeper {
    fn new() -> HostSleeper {
        HostSleeper(
            Command::new("sleep")
                .arg("1000")
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn host sleep"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn host_processes_are_invisible_and_cannot_be_signalled() {
    let mut victim = HostSleeper::new();
    let pid = victim.pid();
    let me = std::process::id();
    let o = py(
        &[],
        &format!(
            r#"
import subprocess, signal
victim, tester = {pid}, {me}
R["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
R["me"] = os.getpid()
R["ppid"] = os.getppid()
R["proc_victim"] = t(os.stat, "/proc/%d" % victim)
R["kill0"] = t(os.kill, victim, 0)
R["kill_term"] = t(os.kill, victim, signal.SIGTERM)
R["kill_kill"] = t(os.kill, victim, signal.SIGKILL)
R["kill_tester"] = t(os.kill, tester, signal.SIGKILL)
R["pidfd_open"] = sc(434, victim, 0)
R["tgkill"] = sc({tgkill}, victim, victim, 9)
R["ps"] = subprocess.run(["ps", "-eo", "pid=,comm="], capture_output=True, text=True).stdout.split("\n")
out()
"#,
            tgkill = libc::SYS_tgkill
        ),
    );
    o.assert_ok();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("proc_victim", libc::ENOENT),
            ("kill0", libc::ESRCH),
            ("kill_term", libc::ESRCH),
            ("kill_kill", libc::ESRCH),
            ("kill_tester", libc::ESRCH),
            ("pidfd_open", libc::ESRCH),
            ("tgkill", libc::ESRCH),
        ],
    );
    // Its own pid namespace: init is 1, the payload 2, nothing of the host.
    assert_eq!(d["me"], 2, "{o}");
    assert_eq!(d["ppid"], 1, "{o}");
    let pids: Vec<u64> = d["pids"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(pids.contains(&1) && pids.contains(&2), "{o}");
    assert!(
        pids.iter().all(|p| *p < 20),
        "host pids visible: {pids:?}\n{o}"
    );
    let ps: Vec<&str> = d["ps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        ps.len() <= 5 && !ps.iter().any(|l| l.contains("sleep")),
        "ps shows more than the sandbox: {ps:?}"
    );
    assert!(victim.alive(), "the host process was killed from inside");
}

#[test]
fn environment_is_scrubbed_and_env_flags_work() {
    let secret = unique("secret");
    let o = py_cmd(
        Cmd::cordon()
            .env("SECRET_TOKEN", &secret)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("PASSME", "passed-through")
            .env_remove("ABSENT_VAR"),
        &[
            "--env",
            "PASSME",
            "--env",
            "SETME=value=with=equals",
            "--env",
            "ABSENT_VAR",
            "--env",
            "EMPTY=",
        ],
        r#"
R["env"] = dict(os.environ)
R["bash_env"] = __import__("subprocess").run(["bash", "-c", "env"], capture_output=True, text=True).stdout
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    let env = d["env"].as_object().unwrap();
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort_unstable();
    // The proxy's variables: with the network off, its proxy refuses everything and says so.
    let proxy = [
        "ALL_PROXY",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "NO_PROXY",
        "all_proxy",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ];
    keys.retain(|k| !proxy.contains(k));
    assert_eq!(
        keys,
        ["EMPTY", "HOME", "LANG", "PASSME", "PATH", "SETME", "TERM"],
        "{o}"
    );
    for k in proxy {
        assert!(env.contains_key(k), "{k}: {o}");
    }
    assert_eq!(env["PASSME"], "passed-through");
    assert_eq!(env["SETME"], "value=with=equals");
    assert_eq!(env["EMPTY"], "");
    assert_eq!(env["HOME"], "/home/sandbox");
    assert!(
        !o.stdout().contains(&secret) && !o.stderr().contains(&secret),
        "secret leaked:\n{o}"
    );
}

#[test]
fn host_environment_is_not_readable_through_the_sandbox_init() {
    let secret = unique("secret");
    let rev: String = secret.chars().rev().collect();
    let o = py_cmd(
        Cmd::cordon().env("SECRET_TOKEN", &secret),
        &[],
        &format!(
            r#"
# The script carries the secret reversed, so finding it in a command line or in our own
# memory would prove nothing; the payload's own process is skipped.
secret = {rev:?}[::-1].encode()
found = []
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == os.getpid():
        continue
    for f in ("environ", "cmdline"):
        try:
            if secret in open("/proc/%s/%s" % (p, f), "rb").read():
                found.append("%s/%s" % (p, f))
        except OSError:
            pass
    try:
        mem = open("/proc/%s/mem" % p, "rb", 0)
        for line in open("/proc/%s/maps" % p):
            a, b = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1]:
                continue
            try:
                mem.seek(a)
                if secret in mem.read(b - a):
                    found.append("%s/mem" % p)
                    break
            except (OSError, ValueError, OverflowError):
                pass
    except OSError:
        pass
R["found"] = sorted(set(found))
R["environ1"] = t(lambda: open("/proc/1/environ", "rb").read())
R["mem1"] = t(lambda: open("/proc/1/mem", "rb").read(0))
out()
"#
        ),
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(
        d["found"],
        serde_json::json!([]),
        "cordon's environment is readable inside the sandbox:\n{o}"
    );
}

#[test]
fn host_loopback_tcp_and_udp_are_unreachable() {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tport = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let uport = udp.local_addr().unwrap().port();
    let o = py(
        &[],
        &format!(
            r#"
import socket
def connect(host):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(3)
    s.connect((host, {tport}))
R["tcp"] = t(connect, "127.0.0.1")
R["tcp_localhost"] = t(connect, "localhost")
R["tcp6"] = t(connect, "::1")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
R["udp_send"] = t(u.sendto, b"hello-from-sandbox", ("127.0.0.1", {uport}))
R["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
# Its own loopback works: a server and a client inside the sandbox.
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
cli = socket.create_connection(srv.getsockname(), timeout=3)
conn, _ = srv.accept(); cli.sendall(b"ping")
R["own_loopback"] = conn.recv(4).decode()
out()
"#
        ),
    );
    o.assert_ok();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("tcp", libc::ECONNREFUSED),
            ("tcp_localhost", libc::ECONNREFUSED),
            ("tcp6", libc::ECONNREFUSED),
            // Sent into the sandbox's own loopback, where nobody listens.
            ("udp_send", 0),
        ],
    );
    assert_eq!(d["ifaces"], serde_json::json!(["lo"]), "{o}");
    assert_eq!(d["own_loopback"], "ping");
    match tcp.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the host listener saw a connection: {other:?}"),
    }
    let mut buf = [0u8; 64];
    match udp.recv_from(&mut buf) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the host UDP socket received: {other:?}"),
    }
}

#[test]
fn host_unix_sockets_abstract_and_path_are_unreachable() {
    let name = unique("abstract");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let abs = UnixListener::bind_addr(&addr).unwrap();
    abs.set_nonblocking(true).unwrap();
    let dir = HostDir::new("sock");
    let path = dir.join("host.sock");
    let named = UnixListener::bind(&path).unwrap();
    named.set_nonblocking(true).unwrap();
    let o = py(
        &[],
        &format!(
            r#"
import socket
def connect(a):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(a)
R["abstract"] = t(connect, "\0" + {name:?})
R["path"] = t(connect, {path:?})
R["dgram"] = t(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", "\0" + {name:?}))
out()
"#,
            path = path.to_str().unwrap(),
        ),
    );
    o.assert_ok();
    expect_table(
        &o,
        &o.data(),
        &[
            ("abstract", libc::ECONNREFUSED),
            ("path", libc::ENOENT),
            ("dgram", libc::ECONNREFUSED),
        ],
    );
    for (what, l) in [("abstract", &abs), ("path", &named)] {
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("the host {what} socket saw a connection: {other:?}"),
        }
    }
}

/// Runs `code` in the host's python, with ctypes' libc as `libc`; what it printed, if it
/// succeeded. SysV IPC has no safe Rust binding, and this suite has no `unsafe`.
fn host_py(code: &str) -> Result<String, String> {
    let out = Command::new(HOST_PYTHON)
        .args([
            "-c",
            &format!("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n{code}"),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// SysV objects in the host's IPC namespace, removed on drop.
struct SysV {
    shm: i32,
    msg: i32,
    sem: i32,
}

impl SysV {
    fn create(key: i32) -> SysV {
        let flags = libc::IPC_CREAT | libc::IPC_EXCL | 0o666;
        let out = host_py(&format!(
            "print(libc.shmget({key}, ctypes.c_size_t(4096), {flags}), \
             libc.msgget({key}, {flags}), libc.semget({key}, 1, {flags}))"
        ))
        .unwrap_or_else(|e| panic!("host python: {e}"));
        let ids: Vec<i32> = out
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(
            ids.len() == 3 && ids.iter().all(|id| *id >= 0),
            "could not create host SysV objects for key {key:#x}: {out}"
        );
        SysV {
            shm: ids[0],
            msg: ids[1],
            sem: ids[2],
        }
    }
}

impl Drop for SysV {
    fn drop(&mut self) {
        let rm = libc::IPC_RMID;
        let _ = host_py(&format!(
            "libc.shmctl({}, {rm}, None); libc.msgctl({}, {rm}, None); libc.semctl({}, 0, {rm})",
            self.shm, self.msg, self.sem
        ));
    }
}

/// Column `col` of the host's /proc/sysvipc/`kind` row whose column `id_col` is `id`.
fn sysvipc(kind: &str, id_col: &str, id: i32, col: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")).expect("/proc/sysvipc");
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let pos = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in /proc/sysvipc/{kind}: {header:?}"))
    };
    let (i, c) = (pos(id_col), pos(col));
    let id = id.to_string();
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(i) == Some(&id.as_str()))
        .and_then(|f| f.get(c).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("{kind} {id} is not in the host's /proc/sysvipc/{kind}"))
}

#[test]
fn host_sysv_ipc_is_invisible() {
    // A key unlikely to collide with anything else on the host.
    let key = 0x5e00_0000 | (std::process::id() as i32 & 0x00ff_ffff);
    let ipc = SysV::create(key);
    let o = py(
        &[],
        &format!(
            r#"
key, shmid, msgid = {key}, {shm}, {msg}
def ipc(fn, *a):
    ctypes.set_errno(0)
    f = getattr(libc, fn)
    f.restype = ctypes.c_ssize_t if fn == "shmat" else ctypes.c_int
    r = f(*[ctypes.c_long(x) for x in a])
    return ctypes.get_errno() if r == -1 else "ok"
R["shmget"] = ipc("shmget", key, 0, 0)
R["msgget"] = ipc("msgget", key, 0)
R["semget"] = ipc("semget", key, 0, 0)
R["shmat_by_id"] = ipc("shmat", shmid, 0, 0)
R["msgsnd_by_id"] = ipc("msgsnd", msgid, BUF(), 8, 0o4000)
R["sysvipc_shm"] = open("/proc/sysvipc/shm").read().strip().split("\n")[1:]
R["own_shm"] = ipc("shmget", key, 4096, 0o1000 | 0o600)
out()
"#,
            shm = ipc.shm,
            msg = ipc.msg,
        ),
    );
    o.assert_ok();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("shmget", libc::ENOENT),
            ("msgget", libc::ENOENT),
            ("semget", libc::ENOENT),
            ("shmat_by_id", libc::EINVAL),
            ("msgsnd_by_id", libc::EINVAL),
            // The sandbox has its own IPC namespace, where it may create its own objects.
            ("own_shm", 0),
        ],
    );
    assert_eq!(d["sysvipc_shm"], serde_json::json!([]), "{o}");
    // From outside: the host segment was never attached, the queue got no message, and the
    // sandbox's own segment did not land in the host's namespace.
    assert_eq!(
        sysvipc("shm", "shmid", ipc.shm, "nattch"),
        0,
        "the host segment was attached"
    );
    assert_eq!(
        sysvipc("msg", "msqid", ipc.msg, "qnum"),
        0,
        "the host queue received a message"
    );
}

#[test]
fn host_dev_shm_is_not_shared() {
    let host_shm = std::path::Path::new("/dev/shm");
    let theirs = unique("shm-host");
    let mine = unique("shm-sandbox");
    let host_file = host_shm.join(&theirs);
    let have_host_shm = std::fs::write(&host_file, "host").is_ok();
    let o = py(
        &[],
        &format!(
            r#"
R["host_file"] = t(lambda: open("/dev/shm/" + {theirs:?}).read())
open("/dev/shm/" + {mine:?}, "w").write("sandbox")
R["listing"] = os.listdir("/dev/shm")
out()
"#
        ),
    );
    if have_host_shm {
        let _ = std::fs::remove_file(&host_file);
    }
    o.assert_ok();
    let d = o.data();
    expect_table(&o, &d, &[("host_file", libc::ENOENT)]);
    assert_eq!(d["listing"], serde_json::json!([mine]), "{o}");
    assert!(
        !host_shm.join(&mine).exists(),
        "sandbox file landed in the host's /dev/shm"
    );
}

#[test]
fn hostname_is_private() {
    let before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let o = py(
        &[],
        &format!(
            r#"
R["nodename"] = os.uname().nodename
R["sethostname"] = sc({sethostname}, S(b"pwned"), 5)
R["setdomainname"] = sc({setdomainname}, S(b"pwned"), 5)
out()
"#,
            sethostname = libc::SYS_sethostname,
            setdomainname = libc::SYS_setdomainname
        ),
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(d["nodename"], "cordon");
    expect_table(
        &o,
        &d,
        &[("sethostname", libc::EPERM), ("setdomainname", libc::EPERM)],
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        before
    );
}

#[test]
fn sandbox_processes_run_as_an_unprivileged_host_uid() {
    // Seen from outside, while it runs: never host root, and our own uid when rootless —
    // the payload and its init alike (the init starts with cordon's credentials and must shed
    // them before it does anything), and without host root's supplementary groups.
    let marker = unique("uid");
    // As root, cordon is given supplementary groups of its own to lose.
    let cmd = if is_root() {
        Cmd::new("setpriv").args(["--groups", "4,27", "--", cordon_bin()])
    } else {
        Cmd::cordon()
    };
    let run = cmd
        .args([
            "run",
            "--json",
            "--",
            "python3",
            "-c",
            "import os, time; print(os.getuid(), os.getgid(), os.getgroups(), \
             open('/proc/self/setgroups').read().strip()); time.sleep(1.5)",
            &marker,
        ])
        .spawn();
    let pid = wait_for_process(&marker, "python3", Duration::from_secs(10))
        .expect("the payload never appeared");
    let status = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |status: &str, key: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap()
            .trim()
            .to_string()
    };
    let ids = |status: &str, key: &str| -> Vec<u32> {
        field(status, key)
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let payload = status(pid);
    let init_pid: u32 = field(&payload, "PPid:").parse().unwrap();
    let init = status(init_pid);
    let our_groups = ids(&status(std::process::id()), "Groups:");
    let f = run.wait();
    let o = f.outcome();
    o.assert_ok();
    for (who, st) in [("payload", &payload), ("init", &init)] {
        let (uids, gids, groups) = (ids(st, "Uid:"), ids(st, "Gid:"), ids(st, "Groups:"));
        assert!(
            uids.iter().all(|u| *u != 0),
            "{who} has host uid 0: {uids:?}"
        );
        assert!(
            gids.iter().all(|g| *g != 0),
            "{who} has host gid 0: {gids:?}"
        );
        if is_root() {
            assert!(uids.iter().all(|u| *u >= 1_000_000), "{who}: {uids:?}");
            assert!(groups.is_empty(), "{who} kept host groups {groups:?}");
        } else {
            assert!(uids.iter().all(|u| *u == euid()), "{who}: {uids:?}");
            // An unprivileged caller cannot shed its groups, and gains none.
            assert!(
                groups.iter().all(|g| our_groups.contains(g)),
                "{who} has groups {groups:?}, the caller {our_groups:?}"
            );
        }
        assert_eq!(field(st, "CapEff:"), "0000000000000000", "{who}");
        assert_eq!(
            o.enforcement()["host_uid"].as_u64(),
            Some(u64::from(uids[0])),
            "{who}"
        );
    }
    // Inside, it is the ordinary user 1000, and it can never change its groups.
    let inside = o.stdout().trim().to_string();
    assert!(inside.starts_with("1000 1000 "), "{inside}");
    assert!(inside.ends_with(" deny"), "{inside}");
    if is_root() {
        assert!(inside.contains(" [] "), "{inside}");
    }
    assert_no_process_with(&marker, Duration::from_secs(3));
}
