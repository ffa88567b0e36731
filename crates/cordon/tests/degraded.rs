//! Hosts that refuse namespaces, reproduced on this machine (see `common::hosts`): Docker's
//! default seccomp profile (`unshare`/`clone` with namespace flags refused), and, rootless, a
//! user namespace whose `user.max_user_namespaces` is 0 (a hardened kernel). cordon runs
//! there without namespaces, and the attacks of the suites that still apply — filesystem,
//! secrets, network, fds, privilege, resources — must fail, checked from outside; what only a
//! namespace could stop (the host's processes in /proc) must be reported in `enforcement`.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use serde_json::{json, Value};

use common::hosts::refusing as hosts;
use common::hosts::HostLayout;
use common::*;

/// Every namespace reported missing, the other layers reported held, a note for each gap.
fn assert_degraded(o: &Outcome) {
    assert_no_namespaces(o.enforcement(), o);
}

#[test]
fn runs_without_namespaces_and_says_so() {
    for (name, layout) in hosts() {
        let o = py_cmd(
            layout.cordon(),
            &[],
            "R['uid'] = os.getuid(); R['home'] = os.environ['HOME']; R['tmp'] = os.environ['TMPDIR']
open(os.path.join(os.environ['HOME'], 'f'), 'w').write('x')
open(os.path.join(os.environ['TMPDIR'], 'f'), 'w').write('x')
R['cwd'] = os.getcwd(); open('in-cwd', 'w').write('x')
out()",
        );
        o.assert_ok();
        assert_degraded(&o);
        let d = o.data();
        assert_ne!(d["uid"], 0, "{name}: {o}");
        // The per-run scratch dir is gone with the run.
        for k in ["home", "tmp", "cwd"] {
            let p = d[k].as_str().unwrap_or_default();
            assert!(
                p.starts_with('/') && p.contains("cordon-run-"),
                "{name}: {k} {p}"
            );
            assert!(
                !std::path::Path::new(p).exists(),
                "{name}: {p} outlived the run"
            );
        }
    }
}

/// Secrets and files outside the grants: a world-readable secret (only Landlock can refuse
/// it), a world-writable host directory (likewise), /etc, the listing of /.
#[test]
fn filesystem_attacks_fail() {
    for (name, layout) in hosts() {
        let dir = HostDir::new("degraded-fs");
        set_mode(&dir.path, 0o777);
        let secret = dir.file("secret", "TOPSECRET-degraded", 0o644);
        let ws = HostDir::new("degraded-ws");
        set_mode(&ws.path, 0o777);
        let o = py_cmd(
            layout.cordon(),
            &["--workspace", ws.str()],
            &format!(
                "d = {dir:?}
def rd(p):
    open(p, 'rb').read()
def wr(p):
    open(p, 'w').write('pwned')
R['read_secret'] = t(rd, {secret:?})
R['write_outside'] = t(wr, d + '/planted')
R['overwrite_secret'] = t(wr, {secret:?})
R['unlink_secret'] = t(os.unlink, {secret:?})
R['write_etc'] = t(wr, '/etc/cordon-planted')
R['list_root'] = t(os.listdir, '/')
R['list_tmp'] = t(os.listdir, '/tmp')
R['symlink_out'] = t(os.symlink, {secret:?}, {ws:?} + '/link')
R['read_via_link'] = t(rd, {ws:?} + '/link')
R['write_workspace'] = t(wr, {ws:?} + '/result')
R['read_system'] = t(rd, '/usr/bin/env')
out()",
                dir = dir.str(),
                secret = secret.to_str().unwrap_or_default(),
                ws = ws.str(),
            ),
        );
        o.assert_ok();
        assert_degraded(&o);
        let d = o.data();
        expect_table(
            &o,
            &d,
            &[
                ("read_secret", libc::EACCES),
                ("write_outside", libc::EACCES),
                ("overwrite_secret", libc::EACCES),
                ("unlink_secret", libc::EACCES),
                ("write_etc", libc::EACCES),
                ("list_root", libc::EACCES),
                ("list_tmp", libc::EACCES),
                ("read_via_link", libc::EACCES),
                ("write_workspace", 0),
                ("read_system", 0),
            ],
        );
        // From outside: nothing planted, the secret intact, the workspace got its file.
        assert!(!dir.join("planted").exists(), "{name}");
        assert!(
            !std::path::Path::new("/etc/cordon-planted").exists(),
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap_or_default(),
            "TOPSECRET-degraded",
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("result")).unwrap_or_default(),
            "pwned",
            "{name}"
        );
    }
}

/// A loopback TCP listener and a world-writable unix socket of the host: neither may be
/// reached; nor UDP, raw or netlink sockets made.
#[test]
fn network_attacks_fail() {
    for (name, layout) in hosts() {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("listener");
        tcp.set_nonblocking(true).expect("nonblocking");
        let port = tcp.local_addr().expect("addr").port();
        let dir = HostDir::new("degraded-unix");
        set_mode(&dir.path, 0o777);
        let sock_path = dir.join("s.sock");
        let unix = UnixListener::bind(&sock_path).expect("unix listener");
        unix.set_nonblocking(true).expect("nonblocking");
        set_mode(&sock_path, 0o777);
        let o = py_cmd(
            layout.cordon(),
            &[],
            &format!(
                "import socket
def tcp(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect(addr)
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect({sock:?})
def dgram():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'x', {sock:?})
R['tcp4'] = t(tcp, socket.AF_INET, ('127.0.0.1', {port}))
R['tcp6'] = t(tcp, socket.AF_INET6, ('::1', {port}))
R['udp'] = t(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
R['netlink'] = t(socket.socket, socket.AF_NETLINK, socket.SOCK_RAW, 0)
R['packet'] = t(socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0)
R['unix_connect'] = t(unix)
R['unix_dgram'] = t(dgram)
R['pair'] = t(socket.socketpair)
out()",
                sock = sock_path.to_str().unwrap_or_default(),
            ),
        );
        o.assert_ok();
        assert_degraded(&o);
        let d = o.data();
        expect_table(
            &o,
            &d,
            &[
                ("tcp4", libc::EPERM),
                ("tcp6", libc::EPERM),
                ("udp", libc::EPERM),
                ("netlink", libc::EPERM),
                ("packet", libc::EPERM),
                ("unix_connect", libc::EPERM),
                ("unix_dgram", libc::EPERM),
                ("pair", 0),
            ],
        );
        assert!(
            tcp.accept().is_err(),
            "{name}: the TCP listener was reached"
        );
        assert!(
            unix.accept().is_err(),
            "{name}: the unix socket was reached"
        );
    }
}

/// With a network policy: the egress proxy (on the host's loopback) is the one way out — a
/// loopback listener the policy lists is reached through it, one it does not list is
/// refused, and connecting to either directly is refused by Landlock.
#[test]
fn with_a_network_policy_only_the_proxy_is_reachable() {
    for (name, layout) in hosts() {
        let allowed = TcpListener::bind("127.0.0.1:0").expect("listener");
        let other = TcpListener::bind("127.0.0.1:0").expect("listener");
        other.set_nonblocking(true).expect("nonblocking");
        let (ap, op) = (
            allowed.local_addr().expect("addr").port(),
            other.local_addr().expect("addr").port(),
        );
        let server = std::thread::spawn(move || {
            allowed.set_nonblocking(false).ok();
            let (mut c, _) = allowed.accept().ok()?;
            c.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut buf = [0u8; 4096];
            let n = c.read(&mut buf).ok()?;
            let _ = c.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n");
            Some(String::from_utf8_lossy(&buf[..n]).into_owned())
        });
        let allow = format!("127.0.0.1:{ap}");
        let o = py_cmd(
            layout.cordon(),
            &["--allow-net", &allow],
            &format!(
                "import socket, urllib.request
proxy = os.environ['HTTP_PROXY']
# NO_PROXY names 127.0.0.1 (right for a sandbox's own loopback): here it would bypass the proxy.
os.environ.pop('NO_PROXY', None); os.environ.pop('no_proxy', None)
op = urllib.request.build_opener(urllib.request.ProxyHandler({{'http': proxy}}))
R['via_proxy'] = op.open('http://127.0.0.1:{ap}/x', timeout=10).read().decode()
try:
    op.open('http://127.0.0.1:{op}/x', timeout=10).read(); R['other_via_proxy'] = 'ok'
except Exception as e:
    R['other_via_proxy'] = str(e)
def tcp(port):
    s = socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', port))
R['direct_allowed'] = t(tcp, {ap})
R['direct_other'] = t(tcp, {op})
R['udp'] = t(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
out()"
            ),
        );
        o.assert_ok();
        assert_degraded(&o);
        let d = o.data();
        assert_eq!(d["via_proxy"], "hello\n", "{name}: {o}");
        assert_ne!(d["other_via_proxy"], "ok", "{name}: {o}");
        expect_table(
            &o,
            &d,
            &[
                ("direct_allowed", libc::EACCES),
                ("direct_other", libc::EACCES),
                ("udp", libc::EPERM),
            ],
        );
        assert!(
            other.accept().is_err(),
            "{name}: the unlisted listener was reached"
        );
        let got = server.join().ok().flatten().unwrap_or_default();
        assert!(got.starts_with("GET /x"), "{name}: {got:?}");
        assert!(
            o.v["network"].to_string().contains("deny"),
            "{name}: the refusal is not in the Outcome: {o}"
        );
    }
}

/// An fd cordon inherited (a host file opened for writing) never reaches the payload.
#[test]
fn inherited_fds_are_closed() {
    for (name, layout) in hosts() {
        let dir = HostDir::new("degraded-fd");
        let target = dir.file("target", "original", 0o600);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .expect("open");
        let o = py_cmd(
            layout.cordon().leak_fd(f, 9),
            &[],
            "R['fds'] = sorted(int(x) for x in os.listdir('/proc/self/fd'))
R['write9'] = t(os.write, 9, b'pwned')
out()",
        );
        o.assert_ok();
        let d = o.data();
        let fds: Vec<i64> = d["fds"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        // 0-2 and the descriptor listdir itself holds.
        assert!(fds.len() <= 4 && fds.iter().all(|f| *f != 9), "{name}: {o}");
        expect_table(&o, &d, &[("write9", libc::EBADF)]);
        assert_eq!(
            std::fs::read_to_string(&target).unwrap_or_default(),
            "original",
            "{name}"
        );
    }
}

/// No capability, no way back to root or into a namespace, no tracing or signalling what is
/// outside the sandbox — the test process itself, which runs as the same uid rootless.
#[test]
fn privilege_attacks_fail() {
    for (name, layout) in hosts() {
        let me = std::process::id();
        let o = py_cmd(
            layout.cordon(),
            &[],
            &format!(
                "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)
R['caps'] = [st['CapEff'].strip(), st['CapPrm'].strip(), st['CapAmb'].strip()]
R['nnp'] = st['NoNewPrivs'].strip(); R['seccomp'] = st['Seccomp'].strip()
R['setuid0'] = t(os.setuid, 0)
R['unshare_user'] = sc({unshare}, 0x10000000)
R['ptrace_outside'] = sc({ptrace}, 16, {me}, 0, 0)
R['signal_outside'] = t(os.kill, {me}, 0)
R['signal_init'] = t(os.kill, 1, 0)
R['shmget'] = sc({shmget}, 0x1234, 4096, 0o1666)
R['mq_open'] = sc({mq_open}, S(b'q'), 0o102, 0o600, 0)
R['sid'] = os.getsid(0) == os.getpid()
out()",
                unshare = libc::SYS_unshare,
                ptrace = libc::SYS_ptrace,
                shmget = libc::SYS_shmget,
                mq_open = libc::SYS_mq_open,
            ),
        );
        o.assert_ok();
        let d = o.data();
        assert_eq!(
            d["caps"],
            json!(["0000000000000000", "0000000000000000", "0000000000000000"]),
            "{name}: {o}"
        );
        assert_eq!(d["nnp"], "1", "{name}: {o}");
        // EPERM, or EINVAL where uid 0 is not even mapped (inside a user namespace).
        assert_ne!(d["setuid0"], "ok", "{name}: {o}");
        assert_eq!(d["seccomp"], "2", "{name}: {o}");
        assert_eq!(
            d["sid"], true,
            "{name}: the payload must lead its own session: {o}"
        );
        expect_table(
            &o,
            &d,
            &[
                ("unshare_user", libc::EPERM),
                ("ptrace_outside", libc::EPERM),
                ("signal_outside", libc::EPERM),
                ("signal_init", libc::EPERM),
                ("shmget", libc::EPERM),
                ("mq_open", libc::EPERM),
            ],
        );
    }
}

/// Limits hold without namespaces, and every ending takes the whole tree — a daemonized
/// grandchild too, which no pid namespace kills here.
#[test]
fn resource_attacks_fail_and_nothing_outlives_the_run() {
    for (name, layout) in hosts() {
        // A fork bomb under --pids.
        let o = py_cmd(
            layout.cordon(),
            &["--pids", "16", "--timeout", "10s"],
            &format!("{FORK_BOMB_PY}\nout()"),
        );
        o.assert_ok();
        let d = o.data();
        assert_eq!(d["refused"], libc::EAGAIN, "{name}: {o}");
        if o.has_cgroup() || is_root() {
            // A cgroup, or as root a host uid of the sandbox's own: exact.
            assert!(d["forked"].as_i64().unwrap_or(99) <= 16, "{name}: {o}");
        } else {
            // Rootless without a cgroup the uid's count is shared with the host's processes
            // of that uid (the test's other threads fork too): bounded, and said so.
            assert!(
                o.enforcement()["notes"]
                    .to_string()
                    .contains("RLIMIT_NPROC counts every process"),
                "{name}: {o}"
            );
        }
        if !o.has_cgroup() {
            // No /proc of its own to watch here: the children still running when the payload
            // exited, and the payload, are what the init counted at its end.
            let forked = d["forked"].as_u64().unwrap_or(0);
            assert!(o.usage("peak_pids") > forked, "{name}: {o}");
        }
        // Memory under --memory.
        let o = py_cmd(
            layout.cordon(),
            &["--memory", "64M"],
            "try:
    b = bytearray(512 << 20); R['got'] = len(b)
except MemoryError:
    R['got'] = 'refused'
out()",
        );
        if o.status() == "exited" {
            assert_eq!(o.data()["got"], "refused", "{name}: {o}");
        } else {
            assert_eq!(o.status(), "oom", "{name}: {o}");
        }
        // A timeout with a daemonized grandchild in its own session.
        let marker = unique("degraded-daemon");
        let run = layout
            .cordon()
            .args([
                "run",
                "--json",
                "--timeout",
                "1s",
                "--",
                "sh",
                "-c",
                &format!(
                    "setsid sh -c 'exec python3 -c \"import time; time.sleep(60)\" {marker}' \
                     </dev/null >/dev/null 2>&1 & exec sleep 60"
                ),
            ])
            .spawn();
        // The daemon runs (GNU sleep would refuse the marker as an argument), then the
        // timeout must end it with the rest.
        assert!(
            wait_for_process(&marker, "python3", Duration::from_secs(5)).is_some(),
            "{name}: the daemon never started"
        );
        let o = run.wait().outcome();
        assert_eq!(o.status(), "timeout", "{name}: {o}");
        assert_degraded(&o);
        assert_no_process_with(&marker, Duration::from_secs(3));
    }
}

/// What only a pid namespace could hide — the host's processes — is visible, and reported.
#[test]
fn host_processes_are_visible_and_reported() {
    for (name, layout) in hosts() {
        let me = std::process::id();
        let o = py_cmd(
            layout.cordon(),
            &[],
            &format!("R['sees_host'] = os.path.exists('/proc/{me}'); out()"),
        );
        o.assert_ok();
        assert_eq!(o.data()["sees_host"], true, "{name}: {o}");
        assert_eq!(o.enforcement()["pid_ns"], false, "{name}: {o}");
        assert!(
            o.enforcement()["notes"]
                .to_string()
                .contains("the host's processes are visible in /proc"),
            "{name}: {o}"
        );
    }
}

/// `--require` with each layer name: where the layer is missing, 125 naming it; where it is
/// there, the run goes on. On this machine's own host every namespace is there.
#[test]
fn require_refuses_each_missing_layer() {
    let full = HostLayout::default();
    for (name, layout) in hosts().into_iter().chain([("this host", full)]) {
        let degraded = name != "this host";
        for layer in NAMESPACES
            .into_iter()
            .chain(["seccomp", "landlock", "rlimits", "cgroup"])
        {
            let f = layout
                .cordon()
                .args(["run", "--require", layer, "--", "true"])
                .run();
            let missing = match layer {
                "seccomp" | "landlock" | "rlimits" => false,
                "cgroup" => !has_writable_cgroup(),
                _ => degraded,
            };
            assert_no_run_dir_left(f.pid);
            if missing {
                assert_eq!(f.code, Some(125), "{name}: --require {layer}: {f:?}");
                assert!(
                    f.stderr.contains(layer) && f.stderr.contains("required"),
                    "{name}: --require {layer} must name it: {}",
                    f.stderr
                );
            } else {
                assert_eq!(f.code, Some(0), "{name}: --require {layer}: {f:?}");
            }
        }
    }
}

/// The per-run scratch dirs (`$TMPDIR/cordon-run-<pid>-…`) of the cordon processes `f`
/// names: none may be left, whichever way the run ended.
fn assert_no_run_dir_left(pid: u32) {
    let prefix = format!("cordon-run-{pid}-");
    let left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "scratch dirs left behind: {left:?}");
}

/// Whether runs here get a cgroup (root on this cgroup v1 host; rootless gets none).
fn has_writable_cgroup() -> bool {
    run_json(&["--", "true"]).has_cgroup()
}

/// As root, uid 0 of a user namespace mapping only uid 0 (here: one whose
/// max_user_namespaces is 0) cannot become an unprivileged uid: cordon refuses rather than
/// run the payload as that uid 0.
#[test]
fn as_root_in_a_partial_user_namespace() {
    if !is_root() {
        eprintln!("skipped: only root meets this host (rootless runs there without namespaces: see the other tests)");
        return;
    }
    let layout = HostLayout {
        max_user_namespaces: Some(0),
        ..HostLayout::default()
    };
    let f = layout.cordon().args(["run", "--", "true"]).run();
    assert_eq!(f.code, Some(125), "{f:?}");
}

/// Without Landlock as well (its syscalls answering ENOSYS, as before Linux 5.13), nothing
/// fences the host's files: cordon refuses unless told --allow-no-landlock, and then says so.
#[test]
fn no_landlock_either_refuses_unless_waived() {
    let layout = HostLayout {
        docker_seccomp: true,
        refuse: vec![(libc::SYS_landlock_create_ruleset, libc::ENOSYS)],
        ..HostLayout::default()
    };
    let f = layout.cordon().args(["run", "--", "true"]).run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr.contains("landlock") && f.stderr.contains("--allow-no-landlock"),
        "{}",
        f.stderr
    );
    let o = py_cmd(
        layout.cordon(),
        &["--allow-no-landlock"],
        "R['ok'] = 1; out()",
    );
    o.assert_ok();
    assert_eq!(o.enforcement()["landlock_abi"], 0, "{o}");
    assert_eq!(o.enforcement()["user_ns"], false, "{o}");
    assert!(
        o.enforcement()["notes"]
            .to_string()
            .contains("protected by their permissions only"),
        "{o}"
    );
}

/// `cordon serve` on such a host: refuses to start (125) unless --allow-degraded; then a
/// one-shot run and a persistent sandbox carry the honest enforcement.
#[test]
fn serve_refuses_to_start_degraded_unless_allowed() {
    let (_, layout) = hosts().remove(0);
    let data = HostDir::new("degraded-serve");
    let f = layout
        .cordon()
        .args([
            "serve",
            "--no-auth",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data.str())
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("--allow-degraded"), "{}", f.stderr);

    let mut cmd = layout.exec(cordon_bin()).command();
    let mut child = cmd
        .args([
            "serve",
            "--no-auth",
            "--allow-degraded",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data.join("d"))
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start cordon serve");
    let mut out = child.stdout.take().expect("stdout");
    let mut url = String::new();
    let mut buf = [0u8; 4096];
    let mut text = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let n = out.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some(u) = text
            .lines()
            .find_map(|l| l.strip_prefix("cordon serving on "))
        {
            if text.contains("authentication disabled") {
                url = u.trim().to_string();
                break;
            }
        }
    }
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = out.read_to_end(&mut sink);
    });
    let result = std::panic::catch_unwind(|| {
        assert!(url.starts_with("http://127.0.0.1:"), "{text}");
        let post = |path: &str, body: Value| -> (u16, Value) {
            let r = ureq::post(&format!("{url}{path}"))
                .timeout(Duration::from_secs(60))
                .send_json(body);
            let resp = match r {
                Ok(r) => r,
                Err(ureq::Error::Status(_, r)) => r,
                Err(e) => panic!("{path}: {e}"),
            };
            let status = resp.status();
            (status, resp.into_json().unwrap_or(Value::Null))
        };
        let (status, o) = post("/v1/run", json!({"cmd": ["id", "-u"]}));
        assert_eq!(status, 200, "{o}");
        assert_eq!(o["status"], "exited", "{o}");
        for k in NAMESPACES {
            assert_eq!(o["enforcement"][k], false, "{o}");
        }
        assert!(
            o["enforcement"]["landlock_abi"].as_u64().unwrap_or(0) > 0,
            "{o}"
        );
        // A persistent sandbox too, as honest (degraded_serve.rs runs the attacks there).
        let (status, e) = post("/v1/sandboxes", json!({}));
        assert_eq!(status, 201, "a persistent sandbox without namespaces: {e}");
        for k in NAMESPACES {
            assert_eq!(e["enforcement"][k], false, "{e}");
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// An image's root needs a mount namespace: on a host that refuses namespaces, `--image`
/// is refused (125, saying why) rather than run on the host's root.
#[test]
fn an_image_root_is_refused_without_namespaces() {
    let root = std::env::temp_dir().join(format!("cordon-degraded-image-{}", std::process::id()));
    std::fs::create_dir_all(root.join("bin")).expect("image dir");
    for (name, layout) in hosts() {
        let f = layout
            .cordon()
            .args(["run", "--image"])
            .arg(root.to_str().expect("utf-8 path"))
            .args(["--", "/bin/true"])
            .run();
        assert_eq!(f.code, Some(125), "{name}: {f:?}");
        // As root the idmapped copies of its layers, which need a user namespace, are
        // refused first; rootless, the clone is.
        assert!(
            f.stderr.contains("needs a mount namespace") || f.stderr.contains("CLONE_NEWUSER"),
            "{name}: {}",
            f.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Without its own pid namespace the payload could read cordon's `/proc/PID/environ`, where an
/// `env:` secret is: a run with secrets refuses to run without namespaces, saying which.
#[test]
fn a_run_with_secrets_refuses_to_run_without_namespaces() {
    const VALUE: &str = "sk-degraded-test-value-91c2";
    for (name, layout) in hosts() {
        let f = layout
            .cordon()
            .env("CORDON_TEST_SECRET", VALUE)
            .args([
                "run",
                "--allow-net",
                "api.test",
                "--secret",
                "KEY=env:CORDON_TEST_SECRET@api.test",
                "--",
                "sh",
                "-c",
                "cat /proc/*/environ",
            ])
            .run();
        assert_no_run_dir_left(f.pid);
        assert_eq!(f.code, Some(125), "{name}: {f:?}");
        assert!(
            f.stderr.contains("pid_ns") && f.stderr.contains("required"),
            "{name}: {}",
            f.stderr
        );
        assert!(
            !f.stdout.contains(VALUE) && !f.stderr.contains(VALUE),
            "{name}: {f:?}"
        );
    }
}
