//! Terminals in sandboxes: a command on a pty of the sandbox's own devpts, driven through the
//! persistent engine as the server drives it, and attacks on terminals from inside.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cordon_linux::persistent::{ExecSpec, ExitInfo, PtySize, Sandbox};
use cordon_policy::Profile;

fn sandbox() -> Sandbox {
    let profile = Profile::builtin("default").expect("builtin");
    Sandbox::create(
        Path::new(env!("CARGO_BIN_EXE_cordon")),
        &profile,
        &BTreeMap::new(),
        None,
    )
    .expect("create sandbox")
}

struct Term {
    master: std::fs::File,
    exit: mpsc::Receiver<ExitInfo>,
}

/// Starts `script` under `sh -c` on a pty of `rows`x`cols`.
fn start(sb: &Sandbox, script: &str, rows: u16, cols: u16) -> Term {
    let (tx, rx) = mpsc::channel();
    let started = sb
        .exec(
            ExecSpec {
                argv: vec!["sh".into(), "-c".into(), script.into()],
                pty: Some(PtySize { rows, cols }),
                ..ExecSpec::default()
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    assert!(
        rustix::termios::isatty(&started.stdin),
        "the command's input end is a terminal master"
    );
    // stdout is the same master; stderr an empty pipe.
    let mut err = String::new();
    std::fs::File::from(started.stderr)
        .read_to_string(&mut err)
        .expect("stderr");
    assert_eq!(err, "", "a terminal's output is all on stdout");
    drop(started.stdout);
    Term {
        master: std::fs::File::from(started.stdin),
        exit: rx,
    }
}

impl Term {
    /// Reads until the terminal closes (EIO once every slave fd is gone) or `until` is seen.
    fn read_until(&mut self, until: Option<&str>) -> String {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let mut p = [rustix::event::PollFd::new(
                &self.master,
                rustix::event::PollFlags::IN,
            )];
            let _ = rustix::event::poll(
                &mut p,
                Some(&rustix::event::Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                }),
            );
            if p[0].revents().is_empty() {
                continue;
            }
            match self.master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
            if until.is_some_and(|u| String::from_utf8_lossy(&all).contains(u)) {
                break;
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    }

    fn exit(&self) -> ExitInfo {
        self.exit
            .recv_timeout(Duration::from_secs(20))
            .expect("the command's exit")
    }
}

#[test]
fn command_on_pty_has_its_terminal_size_and_controlling_tty() {
    let sb = sandbox();
    let mut t = start(
        &sb,
        "tty; stty size; echo ==; ls -1 /dev/pts; echo ==; echo via-dev-tty > /dev/tty; ps -o tty= -p $$",
        30,
        100,
    );
    let out = t.read_until(None);
    let e = t.exit();
    assert_eq!(e.code, Some(0), "{out}");
    assert!(
        out.contains("/dev/pts/0"),
        "the slave of its own devpts: {out}"
    );
    assert!(
        out.contains("30 100"),
        "stty size sees the size asked for: {out}"
    );
    // The sandbox's devpts holds its own ptys only: this one, and the ptmx node.
    let listing: Vec<&str> = out
        .split("==")
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(listing, ["0", "ptmx"], "{out}");
    assert!(
        out.trim_end().ends_with("pts/0"),
        "the terminal is the command's controlling one: {out}"
    );
    assert!(
        out.contains("via-dev-tty"),
        "/dev/tty is the command's own terminal, read by the relay: {out}"
    );
}

#[test]
fn input_is_typed_and_resize_reaches_the_command() {
    let sb = sandbox();
    let mut t = start(
        &sb,
        "trap 'echo got-winch' WINCH; read line; echo \"line=$line\"; stty size; read x; stty size",
        24,
        80,
    );
    t.master.write_all(b"hello\n").expect("type");
    let out = t.read_until(Some("24 80"));
    assert!(out.contains("line=hello"), "{out}");
    rustix::termios::tcsetwinsize(
        t.master.as_fd(),
        rustix::termios::Winsize {
            ws_row: 50,
            ws_col: 132,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .expect("resize");
    t.master.write_all(b"\n").expect("type");
    let out = t.read_until(None);
    assert!(out.contains("50 132"), "the new size: {out}");
    assert_eq!(t.exit().code, Some(0));
}

#[test]
fn ctrl_c_on_the_terminal_interrupts_the_command() {
    let sb = sandbox();
    let mut t = start(&sb, "echo ready; exec sleep 30", 24, 80);
    t.read_until(Some("ready"));
    std::thread::sleep(Duration::from_millis(200));
    t.master.write_all(&[3]).expect("^C");
    let e = t.exit();
    assert_eq!(e.signal, Some(libc::SIGINT), "the terminal's ^C: {e:?}");
}

#[test]
fn terminal_injection_is_refused_inside() {
    let sb = sandbox();
    // TIOCSTI would push input into the terminal as if typed (CVE-2017-5226); TIOCLINUX
    // reads and writes the console. Both are refused on the sandbox's own terminal too.
    let mut t = start(
        &sb,
        "python3 -c '
import fcntl, termios, errno
for name, req, arg in [(\"TIOCSTI\", termios.TIOCSTI, b\"x\"), (\"TIOCLINUX\", 0x541C, b\"\\x02\" + bytes(16))]:
    try:
        fcntl.ioctl(0, req, arg)
        print(name, \"allowed\")
    except OSError as e:
        print(name, \"refused\", errno.errorcode.get(e.errno))
'",
        24,
        80,
    );
    let out = t.read_until(None);
    t.exit();
    assert!(out.contains("TIOCSTI refused EPERM"), "{out}");
    assert!(out.contains("TIOCLINUX refused EPERM"), "{out}");
    assert!(!out.contains("allowed"), "{out}");
}

/// A host pty, open in the test, and a pty of another sandbox: neither is visible nor
/// openable from inside a sandbox.
#[test]
fn host_and_other_sandbox_ptys_are_unreachable() {
    let host_master: OwnedFd =
        rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY)
            .expect("host pty");
    rustix::pty::unlockpt(&host_master).expect("unlockpt");
    let name = rustix::pty::ptsname(&host_master, Vec::new()).expect("ptsname");
    let host_slave = name.to_string_lossy().into_owned();
    let host_n = host_slave.trim_start_matches("/dev/pts/").to_string();

    let a = sandbox();
    let b = sandbox();
    // Sandbox A holds a pty (its /dev/pts/0) while B looks.
    let mut ta = start(&a, "echo a-ready; read x", 24, 80);
    ta.read_until(Some("a-ready"));

    let script = format!(
        "ls -1 /dev/pts; for p in /dev/pts/{host_n} /dev/pts/0 /dev/pts/1; do \
         (echo x > $p) 2>/dev/null && echo \"wrote $p\" || echo \"no $p\"; done; \
         (echo x > /dev/tty) 2>/dev/null && echo wrote-tty || echo no-tty"
    );
    let (tx, rx) = mpsc::channel();
    let started = b
        .exec(
            ExecSpec {
                argv: vec!["sh".into(), "-c".into(), script],
                ..ExecSpec::default()
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    drop(started.stdin);
    let mut out = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut out)
        .expect("stdout");
    let e = rx.recv_timeout(Duration::from_secs(20)).expect("exit");
    assert_eq!(e.code, Some(0), "{out}");
    assert_eq!(
        out.lines().next().map(str::trim),
        Some("ptmx"),
        "B's devpts is empty but for ptmx: {out}"
    );
    assert!(!out.contains("wrote"), "{out}");
    assert!(
        out.contains("no-tty"),
        "without a terminal of its own, /dev/tty names none: {out}"
    );
    // Nothing reached the host's pty.
    let mut p = [rustix::event::PollFd::new(
        &host_master,
        rustix::event::PollFlags::IN,
    )];
    let n = rustix::event::poll(
        &mut p,
        Some(&rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 200_000_000,
        }),
    )
    .expect("poll");
    assert_eq!(n, 0, "the host pty {host_slave} got nothing");
    ta.master.write_all(b"\n").expect("type");
    ta.read_until(None);
    assert_eq!(ta.exit().code, Some(0));
}

/// A sandbox opening pty after pty is held to its devpts instance's cap (64), so it cannot use
/// up the host's (`/proc/sys/kernel/pty/max`); the host's count is back once it is done.
#[test]
fn pty_exhaustion_stops_at_the_sandbox_cap() {
    let host_before = std::fs::read_to_string("/proc/sys/kernel/pty/nr").expect("pty/nr");
    let sb = sandbox();
    let (tx, rx) = mpsc::channel();
    let started = sb
        .exec(
            ExecSpec {
                argv: vec![
                    "python3".into(),
                    "-c".into(),
                    "
import os, errno
fds, err = [], None
for _ in range(200):
    try:
        fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        err = errno.errorcode.get(e.errno)
        break
print(len(fds), err)
"
                    .into(),
                ],
                ..ExecSpec::default()
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    drop(started.stdin);
    let mut out = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut out)
        .expect("stdout");
    let e = rx.recv_timeout(Duration::from_secs(20)).expect("exit");
    assert_eq!(e.code, Some(0), "{out}");
    let (n, err) = out.trim().split_once(' ').expect("count and error");
    assert_eq!(n, "64", "{out}");
    assert_eq!(err, "ENOSPC", "{out}");
    drop(sb);
    // The kernel's count of ptys in use is back (within what other tests hold meanwhile).
    let after: i64 = std::fs::read_to_string("/proc/sys/kernel/pty/nr")
        .expect("pty/nr")
        .trim()
        .parse()
        .expect("number");
    let before: i64 = host_before.trim().parse().expect("number");
    assert!(after < before + 32, "ptys left behind: {before} -> {after}");
}
