//! How runs end: daemons, cordon itself killed or interrupted, terminal injection under a real
//! pty, exit-code propagation, stdin sources.

mod common;

use std::os::fd::OwnedFd;
use std::time::Duration;

use common::*;

#[test]
fn daemonized_grandchild_dies_with_the_run() {
    let marker = unique("daemon");
    let o = py(
        &[],
        &format!(
            r#"
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        # A detached daemon with its own session, stdio closed, signals ignored.
        import signal
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        for fd in (0, 1, 2):
            os.close(fd)
        os.execvp("python3", ["python3", "-c", "import time; time.sleep(100000)", {marker:?}])
    os._exit(0)
# Wait until the daemon is up, then leave it behind.
deadline = time.time() + 10
while time.time() < deadline:
    if any({marker:?}.encode() in open("/proc/%s/cmdline" % p, "rb").read()
           for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())):
        break
    time.sleep(0.02)
R["daemon_started"] = True
out()
"#
        ),
    );
    o.assert_ok();
    assert_eq!(o.data()["daemon_started"], true);
    assert_no_process_with(&marker, Duration::from_secs(2));
}

#[test]
fn sigkilled_cordon_takes_the_whole_sandbox_with_it() {
    let marker = unique("orphan");
    let run = Cmd::cordon()
        .args([
            "run",
            "--timeout",
            "60s",
            "--",
            "python3",
            "-c",
            "import os, time\nos.fork(); os.fork()\ntime.sleep(100000)",
            &marker,
        ])
        .deadline(Duration::from_secs(30))
        .spawn();
    let cordon_pid = run.pid();
    wait_for_process(&marker, "python3", Duration::from_secs(10))
        .expect("the payload never started");
    // Let all four sleepers exist.
    std::thread::sleep(Duration::from_millis(200));
    assert!(procs_with(&marker).len() >= 4);
    // The leftover-cgroup check below can see this run's cgroups while it lives.
    if check_report()["cgroup"] != "none" {
        assert!(
            !cgroups_of(cordon_pid).is_empty(),
            "cannot see cordon's cgroups"
        );
    }
    run.signal(libc::SIGKILL);
    let f = run.wait();
    assert_eq!(f.signal, Some(libc::SIGKILL));
    assert_no_process_with(&marker, Duration::from_secs(2));

    // Its cgroups could not be removed by a dead cordon; the next run sweeps them.
    let next = run_json(&["--", "true"]);
    next.assert_ok();
    assert_no_cgroup_left(cordon_pid);
}

#[test]
fn sigterm_to_cordon_ends_the_sandbox_and_still_reports() {
    let marker = unique("term");
    let run = Cmd::cordon()
        .args([
            "run",
            "--json",
            "--timeout",
            "60s",
            "--",
            "python3",
            "-c",
            "import time; time.sleep(100000)",
            &marker,
        ])
        .deadline(Duration::from_secs(30))
        .spawn();
    wait_for_process(&marker, "python3", Duration::from_secs(10))
        .expect("the payload never started");
    run.signal(libc::SIGTERM);
    let f = run.wait();
    assert!(!f.stderr.contains("panicked"), "{f:?}");
    let o = f.outcome();
    assert_eq!(o.status(), "error", "{o}");
    assert!(
        o.v["error"].as_str().unwrap_or("").contains("signal 15"),
        "{o}"
    );
    assert_no_process_with(&marker, Duration::from_secs(2));
    assert_no_cgroup_left(o.cordon_pid);
}

/// A pty pair with the slave in raw mode (no echo, no line buffering).
struct Pty {
    master: OwnedFd,
    slave: OwnedFd,
}

/// `cordon run -- yes | head -1` ends as `yes | head -1` does: when whoever reads cordon's
/// output goes away, the program inside meets a broken pipe (SIGPIPE, 128+13) instead of
/// running on, unread, until the timeout.
#[test]
fn a_reader_that_goes_away_ends_the_writer_inside() {
    use std::io::BufRead;
    let marker = unique("epipe");
    let start = std::time::Instant::now();
    let mut child = std::process::Command::new(cordon_bin())
        .args([
            "run",
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            "exec yes",
            &marker,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "y\n");
    drop(out);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("cordon kept running after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGPIPE), "stderr: {err}");
    assert_eq!(err, "");
    assert_no_process_with(&marker, Duration::from_secs(3));
}

impl Pty {
    fn open() -> Pty {
        use rustix::fs::{Mode, OFlags};
        use rustix::pty::OpenptFlags;
        use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
        let master =
            rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
                .expect("posix_openpt");
        rustix::pty::grantpt(&master).expect("grantpt");
        rustix::pty::unlockpt(&master).expect("unlockpt");
        let name = rustix::pty::ptsname(&master, Vec::new()).expect("ptsname");
        let slave = rustix::fs::open(
            name.as_c_str(),
            OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open the pty's slave");
        let mut tio = tcgetattr(&slave).expect("tcgetattr");
        tio.make_raw();
        tcsetattr(&slave, OptionalActions::Now, &tio).expect("tcsetattr");
        Pty { master, slave }
    }

    /// Everything readable on `fd` right now.
    fn drain(fd: &OwnedFd) -> Vec<u8> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let wait = Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        loop {
            let mut p = [PollFd::new(fd, PollFlags::IN)];
            if poll(&mut p, Some(&wait)).unwrap_or(0) == 0
                || !p[0].revents().contains(PollFlags::IN)
            {
                return out;
            }
            match rustix::io::read(fd, &mut buf) {
                Ok(n) if n > 0 => out.extend_from_slice(&buf[..n]),
                _ => return out,
            }
        }
    }
}

#[test]
fn tiocsti_under_a_real_pty_injects_nothing() {
    let pty = Pty::open();
    let code = format!(
        "{PRELUDE}\n{}",
        r#"
import fcntl, termios
for fd in (0, 1, 2):
    R["tiocsti_%d" % fd] = t(fcntl.ioctl, fd, termios.TIOCSTI, b"x")
R["dev_tty"] = t(os.open, "/dev/tty", os.O_RDWR)
R["isatty"] = [os.isatty(fd) for fd in (0, 1, 2)]
R["own_session"] = os.getsid(0) == os.getpid()
out()
"#
    );
    // cordon's stdin, stdout and stderr are the pty; its payload must not reach the terminal.
    let f = Cmd::cordon()
        .args(["run", "--", "python3", "-c", &code])
        .stdio_fd(&pty.slave)
        .run();
    assert_eq!(f.code, Some(0), "{f:?}");
    let printed = String::from_utf8_lossy(&Pty::drain(&pty.master)).into_owned();
    let line = printed
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no report on the pty: {printed:?}"));
    let d: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    for fd in 0..3 {
        assert_eq!(d[format!("tiocsti_{fd}")], libc::EPERM, "{d}");
    }
    // `/dev/tty` exists (for payloads on a terminal of their own, `cordon run -t`), and names
    // the opener's controlling terminal: this payload has none, the host's stays outside.
    assert_eq!(d["dev_tty"], libc::ENXIO, "{d}");
    assert_eq!(d["isatty"], serde_json::json!([false, false, false]), "{d}");
    assert_eq!(d["own_session"], true);
    // Nothing was pushed into the terminal's input queue.
    let injected = Pty::drain(&pty.slave);
    assert!(injected.is_empty(), "injected into the pty: {injected:?}");
    // Control: input written by the "user" does arrive, so the check above can see it.
    rustix::io::write(&pty.master, b"ctl").expect("write to the pty's master");
    assert_eq!(Pty::drain(&pty.slave), b"ctl");
}

#[test]
fn exit_codes_follow_the_contract() {
    let cases: &[(&[&str], i32)] = &[
        (&["bash", "-c", "exit 3"], 3),
        (&["bash", "-c", "exit 0"], 0),
        (&["bash", "-c", "kill -TERM $$"], 128 + libc::SIGTERM),
        (
            &["python3", "-c", "import os; os.kill(os.getpid(), 9)"],
            128 + libc::SIGKILL,
        ),
        (
            &["python3", "-c", "import os; os.abort()"],
            128 + libc::SIGABRT,
        ),
        (&["no-such-command-anywhere"], 127),
        (&["/etc/passwd"], 126),
        (&["/usr"], 126),
        (&["sleep", "10"], 124),
    ];
    for (cmd, want) in cases {
        let f = Cmd::cordon()
            .args(["run", "--timeout", "1s", "--"])
            .args(cmd.iter().copied())
            .run();
        assert_eq!(f.code, Some(*want), "{cmd:?}: {f:?}");
        // With --json: always 0, and the same facts in the Outcome.
        let o = run_json(&[&["--timeout", "1s", "--"], *cmd].concat());
        match *want {
            124 => assert_eq!(o.status(), "timeout", "{o}"),
            126 | 127 => {
                assert_eq!(o.status(), "error", "{o}");
                assert_eq!(o.exit_code(), Some(i64::from(*want)), "{o}");
            }
            w if w > 128 => {
                assert_eq!(o.status(), "signaled", "{o}");
                assert_eq!(o.signal(), Some(i64::from(w - 128)), "{o}");
            }
            w => {
                o.assert_exited(i64::from(w)).assert_fully_confined();
            }
        }
    }
}

#[test]
fn stdin_from_a_file_and_from_cordons_stdin_reaches_the_payload() {
    // Reads exactly what was sent (no reliance on EOF; see the test below for that).
    let dir = HostDir::new("stdin");
    let input = dir.file("input.txt", "line one\nline two\n", 0o644);
    let o = run_json(&[
        "--timeout",
        "20s",
        "--stdin",
        input.to_str().unwrap(),
        "--",
        "head",
        "-c",
        "18",
    ]);
    o.assert_ok();
    assert_eq!(o.stdout(), "line one\nline two\n");

    let big: String = "0123456789abcdef".repeat(64 * 1024); // 1M through the pipe
    let f = Cmd::cordon()
        .args([
            "run", "--json", "--timeout", "20s", "--stdin", "-", "--", "python3", "-c",
            "import sys, hashlib; d = sys.stdin.buffer.read(1 << 20); print(len(d), hashlib.sha256(d).hexdigest()[:16])",
        ])
        .stdin(big.as_bytes())
        .run();
    let o = f.outcome();
    o.assert_ok();
    let want = {
        let f = Cmd::new(HOST_PYTHON)
            .args([
                "-c",
                "import sys, hashlib; d = sys.stdin.buffer.read(); print(len(d), hashlib.sha256(d).hexdigest()[:16])",
            ])
            .stdin(big.as_bytes())
            .run();
        f.stdout
    };
    assert_eq!(o.stdout(), want);
}

#[test]
fn stdin_reaches_eof_empty_file_and_pipe() {
    let dir = HostDir::new("stdineof");
    let input = dir.file("input.txt", "line one\nline two\n", 0o644);
    let o = run_json(&[
        "--timeout",
        "10s",
        "--stdin",
        input.to_str().unwrap(),
        "--",
        "cat",
    ]);
    o.assert_ok();
    assert_eq!(o.stdout(), "line one\nline two\n");

    let f = Cmd::cordon()
        .args([
            "run",
            "--json",
            "--timeout",
            "10s",
            "--stdin",
            "-",
            "--",
            "wc",
            "-c",
        ])
        .stdin(b"12345")
        .run();
    let o = f.outcome();
    o.assert_ok();
    assert_eq!(o.stdout().trim(), "5");

    // Default: empty stdin, so a reader ends at once instead of hanging.
    let o = run_json(&["--timeout", "10s", "--", "cat"]);
    o.assert_ok();
    assert_eq!(o.stdout(), "");
    assert!(o.elapsed < Duration::from_secs(5));
}

#[test]
fn non_utf8_output_is_carried_exactly() {
    let o = run_json(&[
        "--",
        "python3",
        "-c",
        "import os; os.write(1, b'ok\\xff\\xfe')",
    ]);
    o.assert_ok();
    assert_eq!(o.v["stdout_b64"], "b2v//g==", "{o}");
}
