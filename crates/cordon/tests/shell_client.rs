//! The commands for a person at a shell — `cordon ps`, `exec`, `logs`, `top`, `kill`, `cp` —
//! run as a user runs them, against a real `cordon serve` on loopback; the key from the
//! environment or the client config file (refused when others may read it, never printed);
//! a sandbox's hostile symlink not followed by `cp` on the way out (checked on the host);
//! `cordon exec -t` on a terminal the test opens, and the terminal WebSocket's refusals (a
//! foreign page's Origin, another key's sandbox, a left session's command ended);
//! completions, man pages and `--version` generated from the clap definitions.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

mod serve;
use serve::Server;
mod term;

fn cordon() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cordon"));
    // Nothing of the caller's own setup may leak in.
    c.env_remove("CORDON_API_KEY")
        .env_remove("CORDON_SERVER")
        .env("CORDON_CONFIG", "/nonexistent/cordon-client.toml");
    c
}

/// `cordon ARGS` against `s` with its key in the environment.
fn run(s: &Server, args: &[&str]) -> Output {
    cordon()
        .args(args)
        .env("CORDON_SERVER", &s.url)
        .env("CORDON_API_KEY", &s.key)
        .stdin(Stdio::null())
        .output()
        .expect("run cordon")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn new_sandbox(s: &Server, body: Value) -> String {
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(body));
    assert_eq!(st, 201, "{v}");
    v["id"].as_str().expect("id").to_string()
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "cordon-shell-{tag}-{}-{}",
        std::process::id(),
        serve::unique()
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

#[test]
fn ps_lists_the_keys_sandboxes_with_ids_only_and_by_metadata() {
    let s = Server::start();
    let a = new_sandbox(&s, json!({"metadata": {"owner": "alice"}}));
    let b = new_sandbox(&s, json!({"metadata": {"owner": "bob"}}));

    let out = run(&s, &["ps"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains(&a) && table.contains(&b), "{table}");
    assert!(
        table.contains("running") && table.contains("owner=alice"),
        "{table}"
    );

    let out = run(&s, &["ps", "-q", "--filter", "owner=bob"]);
    assert_eq!(text(&out.stdout).trim(), b);

    let out = run(&s, &["ps", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["sandboxes"].as_array().map(Vec::len), Some(2));
}

#[test]
fn exec_streams_output_and_exits_with_the_commands_status() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));

    let out = run(
        &s,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");

    let out = run(
        &s,
        &[
            "exec",
            "-w",
            "/tmp",
            "-e",
            "GREETING=hi",
            &id,
            "--",
            "sh",
            "-c",
            "echo $GREETING; pwd",
        ],
    );
    assert_eq!(text(&out.stdout), "hi\n/tmp\n", "{}", text(&out.stderr));

    let mut child = cordon()
        .args(["exec", "-i", &id, "--", "tr", "a-z", "A-Z"])
        .env("CORDON_SERVER", &s.url)
        .env("CORDON_API_KEY", &s.key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"shout\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(text(&out.stdout), "SHOUT\n");

    let out = run(&s, &["exec", "--timeout", "1s", &id, "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));

    let out = run(&s, &["exec", "no-such-sandbox", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("404"), "{}", text(&out.stderr));
}

#[test]
fn logs_show_each_command_with_its_output_and_ending() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    assert!(run(&s, &["exec", &id, "--", "sh", "-c", "echo first"])
        .status
        .success());
    let _ = run(&s, &["exec", &id, "--", "sh", "-c", "echo second; exit 7"]);

    let out = run(&s, &["logs", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    let first = log.find("first").expect("first command's output");
    let second = log.find("second").expect("second command's output");
    assert!(first < second, "{log}");
    assert!(
        log.contains("ended: exit 0") && log.contains("ended: exit 7"),
        "{log}"
    );
}

#[test]
fn top_shows_use_against_limits_and_kill_ends_the_sandbox() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({"memory": "256M", "pids": 50}));
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sleep", "60"], "background": true})),
    );
    assert_eq!(st, 202);

    let out = run(&s, &["top", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("no row for {id}: {table}"));
    assert!(row.contains("/ 256M"), "{row}");
    assert!(row.trim_end().ends_with("/50"), "{row}");
    let (st, m) = s.call("GET", &format!("/v1/sandboxes/{id}/metrics"), None);
    assert_eq!(st, 200, "{m}");
    assert!(m["processes"].as_u64().unwrap_or(0) >= 2, "{m}");
    assert_eq!(m["processes_max"], 50);

    let out = run(&s, &["kill", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(v["state"], "deleted");
    assert!(text(&run(&s, &["ps", "-q"]).stdout).trim().is_empty());
    let out = run(&s, &["kill", &id]);
    assert_eq!(out.status.code(), Some(1), "a second kill is an error");
}

#[test]
fn cp_copies_files_and_directories_both_ways_and_stdin_stdout() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    let d = scratch("cp");
    std::fs::create_dir_all(d.join("up/sub")).expect("mkdir");
    std::fs::write(d.join("up/a.txt"), "alpha").expect("write");
    std::fs::write(d.join("up/sub/b.bin"), [0u8, 159, 255]).expect("write");

    let up = d.join("up");
    let out = run(
        &s,
        &[
            "cp",
            up.to_str().expect("utf-8"),
            &format!("{id}:/workspace/up"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&s, &["exec", &id, "--", "cat", "/workspace/up/a.txt"]);
    assert_eq!(text(&out.stdout), "alpha");

    let down = d.join("down");
    let out = run(
        &s,
        &["cp", &format!("{id}:up"), down.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read(down.join("sub/b.bin")).expect("read"),
        [0u8, 159, 255]
    );
    assert_eq!(
        std::fs::read_to_string(down.join("a.txt")).expect("read"),
        "alpha"
    );

    let out = run(&s, &["cp", &format!("{id}:/workspace/up/a.txt"), "-"]);
    assert_eq!(text(&out.stdout), "alpha");

    let out = run(&s, &["cp", "a.txt", "b.txt"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("SANDBOX:PATH"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cp_out_of_a_sandbox_does_not_follow_the_sandboxes_symlinks_on_the_host() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    // Hostile code plants links where a copy-out would follow them: to the host's (and the
    // sandbox's) /etc/passwd, and to a directory above.
    let out = run(
        &s,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "mkdir -p /workspace/loot && echo mine > /workspace/loot/ok.txt && \
           ln -s /etc/passwd /workspace/loot/passwd && ln -s / /workspace/loot/root",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d = scratch("cp-links");
    let to = d.join("loot");
    let out = run(
        &s,
        &[
            "cp",
            &format!("{id}:/workspace/loot"),
            to.to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(to.join("ok.txt")).expect("ok"),
        "mine\n"
    );
    // From outside: nothing but the regular file was written, and nothing as a link.
    let names: Vec<String> = std::fs::read_dir(&to)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["ok.txt"], "{names:?}");
    assert!(
        text(&out.stderr).contains("skipped"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_key_comes_from_a_private_config_file_and_is_never_printed() {
    let s = Server::start();
    let d = scratch("config");
    let cfg = d.join("client.toml");
    std::fs::write(
        &cfg,
        format!("server = \"{}\"\nkey = \"{}\"\n", s.url, s.key),
    )
    .expect("cfg");

    // Readable by others: refused, naming the file and the fix, not the key.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = cordon()
        .args(["ps"])
        .env("CORDON_CONFIG", &cfg)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("chmod 600") && err.contains(cfg.to_str().expect("utf-8")),
        "{err}"
    );
    assert!(!err.contains(&s.key), "the key was printed: {err}");

    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = cordon()
        .args(["ps"])
        .env("CORDON_CONFIG", &cfg)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));

    // No key anywhere: the server's 401, with where a key goes.
    let out = cordon()
        .args(["ps", "--server", &s.url])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("401") && text(&out.stderr).contains("CORDON_API_KEY"));

    // A wrong key is not echoed back either.
    let out = cordon()
        .args(["ps", "--server", &s.url, "--key", "cdn_not-a-real-key-123"])
        .output()
        .expect("run");
    assert!(
        !text(&out.stderr).contains("cdn_not-a-real-key-123"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn version_names_the_commit_and_completions_and_man_pages_come_from_the_cli() {
    let out = cordon().arg("--version").output().expect("run");
    let v = text(&out.stdout);
    // `cordon 0.1.0 (0123456789ab)`: the commit (or `unknown` outside a git checkout).
    let inner = v
        .trim()
        .rsplit_once('(')
        .and_then(|(_, c)| c.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no commit in {v:?}"));
    assert!(
        inner == "unknown" || (inner.len() >= 7 && inner.chars().all(|c| c.is_ascii_hexdigit())),
        "{v:?}"
    );

    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef cordon"),
        ("fish", "complete -c cordon"),
    ] {
        let out = cordon().args(["completions", shell]).output().expect("run");
        assert!(out.status.success());
        let script = text(&out.stdout);
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..script.len().min(200)]
        );
        assert!(
            script.contains("exec") && script.contains("snapshot"),
            "{shell}"
        );
    }

    let d = scratch("man");
    let out = cordon()
        .args(["man", "--dir"])
        .arg(&d)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for page in [
        "cordon.1",
        "cordon-run.1",
        "cordon-ps.1",
        "cordon-image-build.1",
    ] {
        let body = std::fs::read_to_string(d.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(body.contains(".TH"), "{page} is not a man page");
    }
    assert!(!Path::new(&d.join("cordon-help.1")).exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn exec_t_gives_a_terminal_into_the_sandbox_and_its_exit_status() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    let mut t = term::host_term(31, 91);
    let env = [
        ("CORDON_SERVER", s.url.as_str()),
        ("CORDON_API_KEY", s.key.as_str()),
    ];
    let c = t.spawn_cordon(
        &[
            "exec",
            "-t",
            &id,
            "--",
            "sh",
            "-c",
            "tty; stty size; printf 'ready> '; read line; echo \"got=$line\"; exit 4",
        ],
        &env,
    );
    let shown = t.read_until("ready> ");
    assert!(
        shown.contains("/dev/pts/"),
        "a pty of the sandbox's own: {shown:?}"
    );
    assert!(shown.contains("31 91"), "this terminal's size: {shown:?}");
    use std::io::Write;
    t.master.write_all(b"hello\r").expect("type");
    t.read_until("got=hello");
    assert_eq!(term::wait(c), 4);
}

/// Sends a WebSocket upgrade for sandbox `id`'s terminal by hand; the status line's code.
fn upgrade(s: &Server, id: &str, key: &str, origin: Option<&str>) -> u16 {
    use std::io::{Read, Write};
    let addr = s.url.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    write!(
        c,
        "GET /v1/sandboxes/{id}/terminal HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{origin}\r\n"
    )
    .expect("send");
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).expect("read");
    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {line:?}"))
}

#[test]
fn the_terminal_socket_refuses_foreign_pages_other_keys_and_unknown_sandboxes() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    let own = s.url.clone();
    assert_eq!(upgrade(&s, &id, &s.key, None), 101, "a CLI sends no Origin");
    assert_eq!(
        upgrade(&s, &id, &s.key, Some(&own)),
        101,
        "this server's own page"
    );
    assert_eq!(upgrade(&s, &id, &s.key, Some("http://evil.test")), 403);
    assert_eq!(upgrade(&s, &id, &s.key, Some("null")), 403);
    assert_eq!(upgrade(&s, &id, "cdn_wrong", None), 401);
    assert_eq!(upgrade(&s, "no-such-sandbox", &s.key, None), 404);

    // Another key's sandbox is not there for this key.
    let out = cordon()
        .args(["keys", "create", "--name", "other", "--data-dir"])
        .arg(&s.data_dir)
        .output()
        .expect("keys create");
    let other = text(&out.stdout).trim().to_string();
    assert!(other.starts_with("cdn_"), "{}", text(&out.stderr));
    assert_eq!(upgrade(&s, &id, &other, None), 404);
}

#[test]
fn a_terminal_left_without_a_goodbye_ends_its_command() {
    let s = Server::start();
    let id = new_sandbox(&s, json!({}));
    let mut t = term::host_term(24, 80);
    let env = [
        ("CORDON_SERVER", s.url.as_str()),
        ("CORDON_API_KEY", s.key.as_str()),
    ];
    let mut c = t.spawn_cordon(
        &[
            "exec",
            "-t",
            &id,
            "--",
            "sh",
            "-c",
            "echo started; exec sleep 300",
        ],
        &env,
    );
    t.read_until("started");
    // The person's side is gone at once (as a closed laptop lid): no close message is sent.
    let _ = c.kill();
    let _ = c.wait();
    let running = || {
        let (_, v) = s.call("GET", &format!("/v1/sandboxes/{id}/commands"), None);
        v["commands"]
            .as_array()
            .map(|a| a.iter().any(|c| c["running"] == true))
            .unwrap_or(false)
    };
    serve::wait_until("the terminal's command to end", || !running());
    let out = run(
        &s,
        &[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "ps -eo args | grep -c '^sleep 300' || true",
        ],
    );
    assert_eq!(text(&out.stdout).trim(), "0", "{}", text(&out.stderr));
}
