//! The persistent-sandbox engine driven directly (the HTTP layer has its own tests).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use cordon_linux::persistent::{ExecSpec, ExitInfo, Sandbox};
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

fn run(sb: &Sandbox, argv: &[&str], stdin: &[u8]) -> (String, String, ExitInfo) {
    let (tx, rx) = mpsc::channel();
    let spec = ExecSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..ExecSpec::default()
    };
    let started = sb
        .exec(
            spec,
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    let mut stdin_f = std::fs::File::from(started.stdin);
    stdin_f.write_all(stdin).expect("stdin");
    drop(stdin_f);
    let mut out = String::new();
    let mut err = String::new();
    std::fs::File::from(started.stdout)
        .read_to_string(&mut out)
        .expect("stdout");
    std::fs::File::from(started.stderr)
        .read_to_string(&mut err)
        .expect("stderr");
    let exit = rx.recv_timeout(Duration::from_secs(20)).expect("exit");
    (out, err, exit)
}

#[test]
fn state_persists_between_commands() {
    let sb = sandbox();
    assert!(sb.enforcement.seccomp && sb.enforcement.user_ns);
    let (_, _, e) = run(
        &sb,
        &[
            "sh",
            "-c",
            "echo hello > /workspace/f; cd /tmp && echo x > y",
        ],
        b"",
    );
    assert_eq!(e.code, Some(0));
    let (out, _, e) = run(&sb, &["cat", "/workspace/f", "/tmp/y"], b"");
    assert_eq!(e.code, Some(0));
    assert_eq!(out, "hello\nx\n");
    let (out, _, _) = run(&sb, &["cat"], b"piped in");
    assert_eq!(out, "piped in");
    let (_, _, e) = run(&sb, &["sh", "-c", "exit 7"], b"");
    assert_eq!(e.code, Some(7));
    let (_, _, e) = run(&sb, &["no-such-command"], b"");
    assert_eq!(e.code, Some(127));
    assert!(e.exec_error.is_some());
    // The filesystem is reachable from the host through the root fd the engine hands over
    // (the init itself is not dumpable, so /proc/<init>/root is closed even to its owner).
    let root = sb.root_dir().expect("root fd");
    let f = format!(
        "/proc/self/fd/{}/workspace/f",
        std::os::fd::AsRawFd::as_raw_fd(&root)
    );
    assert_eq!(std::fs::read_to_string(f).expect("host view"), "hello\n");
}

#[test]
fn shutdown_leaves_nothing() {
    let sb = sandbox();
    let marker = format!("cordon-persist-marker-{}", std::process::id());
    let (tx, _rx) = mpsc::channel();
    let started = sb
        .exec(
            ExecSpec {
                argv: vec!["sh".into(), "-c".into(), format!("sleep 1000 # {marker}")],
                ..ExecSpec::default()
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    drop(started);
    let helper = sb.helper_pid();
    let init = sb.init_pid;
    std::thread::sleep(Duration::from_millis(100));
    sb.shutdown();
    assert!(
        !Path::new(&format!("/proc/{helper}")).exists()
            || std::fs::read_to_string(format!("/proc/{helper}/stat"))
                .unwrap_or_default()
                .contains(") Z")
    );
    assert!(!Path::new(&format!("/proc/{init}/cmdline")).exists());
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmd).contains(&marker),
            "leftover process {:?}",
            entry.path()
        );
    }
}

/// A connection from a socket the sandbox's init made lands on the sandbox's own loopback: a
/// program listening there answers, and a port only the host listens on is refused.
#[test]
fn connect_port_reaches_the_sandboxs_own_loopback_only() {
    let sb = sandbox();
    let host = std::net::TcpListener::bind("127.0.0.1:0").expect("host listener");
    host.set_nonblocking(true).expect("nonblocking");
    let host_port = host.local_addr().expect("addr").port();
    // A listener inside on the same port number, answering one connection.
    let (tx, _rx) = mpsc::channel();
    let script = format!(
        "import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', {host_port})); s.listen(1); print('up', flush=True)\n\
         c, _ = s.accept(); c.sendall(b'inside'); c.close()"
    );
    let started = sb
        .exec(
            ExecSpec {
                argv: vec!["python3".into(), "-c".into(), script],
                ..ExecSpec::default()
            },
            Box::new(move |e| {
                let _ = tx.send(e);
            }),
        )
        .expect("exec");
    let mut up = [0u8; 3];
    std::fs::File::from(started.stdout)
        .read_exact(&mut up)
        .expect("listening inside");
    let connected = |port: u16| -> std::io::Result<std::net::TcpStream> {
        let fd = sb
            .connect_port(port, Duration::from_secs(5))
            .map_err(std::io::Error::from_raw_os_error)?;
        let s = std::net::TcpStream::from(fd);
        s.set_nonblocking(false)?;
        for _ in 0..200 {
            if let Some(e) = s.take_error()? {
                return Err(e);
            }
            if s.peer_addr().is_ok() {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::ErrorKind::TimedOut.into())
    };
    let mut s = connected(host_port).expect("the sandbox's listener");
    let mut got = String::new();
    s.read_to_string(&mut got).expect("read");
    assert_eq!(got, "inside");
    // Nothing listens on this port inside any more (the program took one connection).
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("another");
    let other = free.local_addr().expect("addr").port();
    let err = connected(other).expect_err("a port only the host listens on");
    assert_eq!(err.raw_os_error(), Some(libc::ECONNREFUSED), "{err}");
    assert!(host.accept().is_err(), "the host's listener was reached");
}
