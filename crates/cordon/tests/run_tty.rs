//! `cordon run -t` driven from a terminal the test opens (a host pty whose slave is cordon's
//! controlling terminal, as in an interactive shell): echo through, window size and its
//! changes, the Outcome, the host terminal restored, and no way from the payload to it.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::termios::{self, LocalModes, Winsize};

mod term;
use term::{host_term, wait};

#[test]
fn input_and_output_go_through_and_the_terminal_is_restored() {
    let mut t = host_term(33, 77);
    let before = t.modes();
    assert!(before.contains(LocalModes::ICANON | LocalModes::ECHO));
    let c = t.spawn(&[
        "--json",
        "--",
        "sh",
        "-c",
        "tty; stty size; printf 'ready> '; read line; echo \"got=$line\"; exit 5",
    ]);
    let shown = t.read_until("ready> ");
    assert!(
        shown.contains("/dev/pts/0"),
        "a pty of the sandbox's own: {shown:?}"
    );
    assert!(
        shown.contains("33 77"),
        "the host terminal's size: {shown:?}"
    );
    // Raw mode on the host side while the session runs: no echo or line editing there.
    let during = t.modes();
    assert!(!during.intersects(LocalModes::ICANON | LocalModes::ECHO));
    t.master.write_all(b"hello\r").expect("type");
    let shown = t.read_until("}\r\n");
    assert_eq!(wait(c), 0, "with --json cordon exits 0: {shown:?}");
    assert!(shown.contains("got=hello"), "{shown:?}");
    let json = shown
        .lines()
        .find(|l| l.contains("\"status\""))
        .expect("an Outcome line");
    let o: serde_json::Value =
        serde_json::from_str(&json[json.find('{').expect("json")..]).expect("Outcome json");
    assert_eq!(o["exit_code"], 5, "{o}");
    assert!(
        o["stdout"].as_str().unwrap_or("").contains("got=hello"),
        "the Outcome's stdout is the terminal's output: {o}"
    );
    assert_eq!(t.modes(), before, "the host terminal is as it was");
}

#[test]
fn a_resize_of_the_host_terminal_reaches_the_payload() {
    let mut t = host_term(24, 80);
    let c = t.spawn(&[
        "--",
        "sh",
        "-c",
        "stty size; printf 'wait> '; while read x; do stty size; done; exit 0",
    ]);
    t.read_until("wait> ");
    // The kernel sends SIGWINCH to cordon (its terminal's foreground), which follows it.
    termios::tcsetwinsize(
        &t.master,
        Winsize {
            ws_row: 50,
            ws_col: 132,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .expect("resize");
    // The signal and the keystroke race in cordon's relay: ask again until the size shows.
    let mut seen = String::new();
    for _ in 0..100 {
        t.master.write_all(b"\r").expect("type");
        seen += &t.try_read_until("50 132", Duration::from_millis(200));
        if seen.contains("50 132") {
            break;
        }
    }
    assert!(
        seen.contains("50 132"),
        "the new size never showed: {seen:?}"
    );
    t.master.write_all(&[4]).expect("^D");
    assert_eq!(wait(c), 0);
}

#[test]
fn the_payload_cannot_reach_the_host_terminal() {
    let mut t = host_term(24, 80);
    let before = t.modes();
    // TIOCSTI on its own terminal (which would reach no further anyway) is refused; the
    // host terminal is not in the sandbox: not among its ptys, not as an open fd.
    let c = t.spawn(&[
        "--",
        "python3",
        "-c",
        "
import fcntl, termios, os
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('sti-allowed')
except OSError as e:
    print('sti-refused', e.errno)
print('pts', sorted(os.listdir('/dev/pts')))
print('fds', [os.readlink('/proc/self/fd/%d' % f) for f in (0, 1, 2)])
print('done')
",
    ]);
    let shown = t.read_until("done");
    assert_eq!(wait(c), 0, "{shown:?}");
    assert!(shown.contains("sti-refused 1"), "{shown:?}");
    assert!(shown.contains("pts ['0', 'ptmx']"), "{shown:?}");
    assert!(
        shown.contains("fds ['/dev/pts/0', '/dev/pts/0', '/dev/pts/0']"),
        "its stdio is its own terminal: {shown:?}"
    );
    assert!(!shown.contains("sti-allowed"), "{shown:?}");
    assert_eq!(t.modes(), before);
}

#[test]
fn without_a_terminal_it_says_what_to_do() {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["run", "-t", "--", "sh"])
        .stdin(Stdio::null())
        .output()
        .expect("run cordon");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tty needs a terminal on stdin"), "{err}");
    assert!(err.contains("--stdin"), "{err}");
}

#[test]
fn cordon_told_to_stop_ends_the_payload_and_restores_the_terminal() {
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let mut t = host_term(24, 80);
        let before = t.modes();
        let c = t.spawn(&["--", "sh", "-c", "echo started; exec sleep 30"]);
        t.read_until("started");
        assert_ne!(t.modes(), before, "raw during the session");
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("signal cordon");
        let t0 = Instant::now();
        let code = wait(c);
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert_eq!(
            code,
            128 + libc::SIGKILL,
            "the payload was killed ({sig:?})"
        );
        assert_eq!(
            t.modes(),
            before,
            "the host terminal is as it was ({sig:?})"
        );
    }
}

#[test]
fn the_outcome_keeps_the_terminal_output_under_the_cap() {
    let mut t = host_term(24, 80);
    let c = t.spawn(&[
        "--json",
        "--output-limit",
        "1K",
        "--",
        "sh",
        "-c",
        "head -c 100000 /dev/zero | tr '\\0' x; echo; echo end-of-output",
    ]);
    let shown = t.read_until("}\r\n");
    assert_eq!(wait(c), 0);
    // The person at the terminal saw all of it; the Outcome keeps what the cap allows.
    assert!(shown.contains("end-of-output"), "relayed whole");
    let json = shown
        .lines()
        .find(|l| l.contains("\"status\""))
        .expect("an Outcome line");
    let o: serde_json::Value =
        serde_json::from_str(&json[json.find('{').expect("json")..]).expect("Outcome json");
    assert_eq!(o["stdout_truncated"], true, "{o}");
    assert!(o["stdout"].as_str().unwrap_or("").len() <= 1024, "{o}");
    assert!(
        o["limits_hit"]
            .as_array()
            .is_some_and(|a| a.iter().any(|h| h == "output")),
        "{o}"
    );
    assert_eq!(o["exit_code"], 0, "{o}");
}

/// With a network policy the payload on its terminal reaches what the policy allows through
/// cordon's egress proxy, and the Outcome lists each request (loopback upstream only).
#[test]
fn network_policy_holds_on_a_terminal_too() {
    use std::net::TcpListener;
    let l = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nupstream\n",
            );
        }
    });
    let mut t = host_term(24, 80);
    let allowed = format!("allowed.test:{port}");
    let script = format!(
        "
import urllib.request
for url in ['http://allowed.test:{port}/', 'http://denied.test:{port}/']:
    try:
        print('got', urllib.request.urlopen(url, timeout=10).read().decode().strip())
    except Exception as e:
        print('refused', url)
print('done')
"
    );
    let c = t.spawn(&[
        "--json",
        "--allow-net",
        &allowed,
        "--allow-net",
        "127.0.0.2:*",
        "--add-host",
        "allowed.test:127.0.0.2",
        "--",
        "python3",
        "-c",
        &script,
    ]);
    let shown = t.read_until("}\r\n");
    assert_eq!(wait(c), 0, "{shown:?}");
    assert!(shown.contains("got upstream"), "{shown:?}");
    assert!(shown.contains("refused http://denied.test"), "{shown:?}");
    let json = shown
        .lines()
        .find(|l| l.contains("\"status\""))
        .expect("an Outcome line");
    let o: serde_json::Value =
        serde_json::from_str(&json[json.find('{').expect("json")..]).expect("Outcome json");
    let net = o["network"].as_array().cloned().unwrap_or_default();
    assert!(
        net.iter()
            .any(|e| e["host"] == "allowed.test" && e["verdict"] == "allow"),
        "{o}"
    );
    assert!(
        net.iter()
            .any(|e| e["host"] == "denied.test" && e["verdict"] == "deny"),
        "{o}"
    );
}

/// `cordon run -t --learn FILE`: the session on a terminal is learned as a run without one is —
/// the destinations reached and the programs executed (by the persistent engine's helper,
/// which serves learn mode's exec notifications) — and the learned file replays the task while
/// a program the session never ran is refused.
#[test]
fn learn_mode_on_a_terminal_records_programs_and_destinations() {
    use std::net::TcpListener;
    let l = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nupstream\n",
            );
        }
    });
    let dir = std::env::temp_dir().join(format!(
        "cordon-tty-learn-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("learned.toml");
    let fetch = format!(
        "import urllib.request; print('got', urllib.request.urlopen('http://a.test:{port}/', \
         timeout=10).read().decode().strip())"
    );
    let task = format!("python3 -c \"{fetch}\"; echo finished");
    let mut t = host_term(24, 80);
    let c = t.spawn(&[
        "--learn",
        file.to_str().unwrap(),
        "--allow-net",
        "a.test:*",
        "--allow-net",
        "127.0.0.2:*",
        "--add-host",
        "a.test:127.0.0.2",
        "--",
        "/bin/sh",
        "-c",
        &task,
    ]);
    let shown = t.read_until("learned profile written");
    assert_eq!(wait(c), 0, "{shown:?}");
    assert!(shown.contains("got upstream"), "{shown:?}");
    let text = std::fs::read_to_string(&file).expect("learned file");
    for program in ["\"/bin/sh\"", "\"/usr/bin/python3\""] {
        assert!(text.contains(program), "{program} not learned:\n{text}");
    }
    assert!(
        text.contains(&format!("\"a.test:{port}\",  # reached")),
        "{text}"
    );
    let replay = |cmd: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(["run", "--json", "--profile"])
            .arg(&file)
            .args(["--", "/bin/sh", "-c", cmd])
            .stdin(Stdio::null())
            .output()
            .expect("replay");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("Outcome")
    };
    let o = replay(&task);
    assert_eq!(o["exit_code"], 0, "{o}");
    assert!(
        o["stdout"].as_str().unwrap_or("").contains("got upstream"),
        "{o}"
    );
    let o = replay("/usr/bin/id -u && echo RAN");
    assert!(!o["stdout"].as_str().unwrap_or("").contains("RAN"), "{o}");
    let _ = std::fs::remove_dir_all(&dir);
}
