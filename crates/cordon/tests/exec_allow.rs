//! The programs allowlist (`--exec-allow`, `[exec] allow`) attacked as a payload would: run a
//! program that is not on the list by copying it where it may write, through the dynamic
//! loader, from a memfd or an open descriptor, behind a `#!` line, or as a busybox applet.
//! Every attack's program, had it run, would `touch` a marker in the workspace (a host
//! directory): the proof that it did not is looked for from outside, on the host.
//!
//! The payload is python3, the one program allowed (with its loader): it also shows that an
//! allowed program still works.

mod common;

use std::path::Path;

use common::*;

#[cfg(target_arch = "x86_64")]
const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
#[cfg(target_arch = "aarch64")]
const LOADER: &str = "/lib/ld-linux-aarch64.so.1";

/// Runs each attack and prints `NAME: …` for it: `refused errno N`, or how the program it
/// started ended. Arguments: the loader's path, then the names of the places to copy into.
const ATTACKS: &str = r#"
import os, shutil, subprocess, sys
loader = sys.argv[1]
def attempt(name, argv, **kw):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=20, **kw)
        print(f"{name}: exit {r.returncode} {r.stderr.decode(errors='replace').strip()[:300]!r}")
    except OSError as e:
        print(f"{name}: refused errno {e.errno}")
marker = lambda name: "/workspace/pwned-" + name
for d in ["/tmp", "/workspace", "/dev/shm", "/home/sandbox", "/home/user", "/out"]:
    tag = d.strip("/").replace("/", "-")
    copy = d + "/touch-copy"
    shutil.copy("/usr/bin/touch", copy)
    os.chmod(copy, 0o755)
    attempt("exec " + d, [copy, marker("exec-" + tag)])
    attempt("loader " + d, [loader, copy, marker("loader-" + tag)])
attempt("exec /tools/other/touch", ["/tools/other/touch", marker("ro-bind")])
attempt("loader /bin/sh", [loader, "/bin/sh", "-c", "touch " + marker("loader-sh")])
attempt("sh", ["/bin/sh", "-c", "touch " + marker("sh")])
if os.path.exists("/bin/busybox"):
    attempt("busybox sh", ["/bin/busybox", "sh", "-c", "touch " + marker("busybox")])
else:
    print("busybox sh: refused errno 0 (no busybox on this host)")
try:
    fd = os.memfd_create("payload", 0)
except OSError as e:
    print(f"memfd_create: refused errno {e.errno}")
else:
    os.write(fd, open("/usr/bin/touch", "rb").read())
    print("memfd_create: made")
    attempt("memfd exec", [f"/proc/self/fd/{fd}", marker("memfd")], pass_fds=(fd,))
    attempt("memfd loader", [loader, f"/proc/self/fd/{fd}", marker("memfd-loader")], pass_fds=(fd,))
# fexecve: executing an open descriptor (execveat with AT_EMPTY_PATH).
fd = os.open("/tmp/touch-copy", os.O_RDONLY)
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    try:
        os.execve(fd, ["touch", marker("fexecve")], {})
    except OSError as e:
        print(f"fexecve: refused errno {e.errno}", flush=True)
    os._exit(99)
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if status != 99:
    print(f"fexecve: exit {status}")
for s in sys.argv[2:]:
    attempt("script " + s, [s])
print("done")
"#;

/// A workspace (the markers land there) and the attack script beside it.
struct Setup {
    ws: HostDir,
    dir: HostDir,
    /// A `--rw` bind at /out.
    out: HostDir,
}

fn setup() -> Setup {
    let ws = HostDir::new("exec-allow-ws");
    if is_root() {
        // As root, a root-owned workspace is mounted idmapped (the sandbox's own); as a user,
        // it is the user's.
        set_mode(&ws.path, 0o777);
    }
    let dir = HostDir::new("exec-allow-tools");
    dir.file("attacks.py", ATTACKS, 0o644);
    // A program in a read-only bind (mounted exec: a bind may hold libraries), not allowed:
    // only Landlock stands in the way of its execve.
    std::fs::create_dir(dir.join("other")).expect("mkdir other");
    set_mode(&dir.join("other"), 0o755);
    std::fs::copy("/usr/bin/touch", dir.join("other/touch")).expect("copy touch");
    set_mode(&dir.join("other/touch"), 0o755);
    // A script for an interpreter that is not allowed, and one for python3, which is.
    dir.file(
        "evil.sh",
        "#!/bin/sh\ntouch /workspace/pwned-script\n",
        0o755,
    );
    dir.file(
        "ok.py",
        "#!/usr/bin/python3\nopen('/workspace/ran-ok-py', 'w').write('x')\n",
        0o755,
    );
    let out = HostDir::new("exec-allow-out");
    set_mode(&out.path, 0o777);
    Setup { ws, dir, out }
}

fn cordon_run(s: &Setup, allow: &[&str], argv: &[&str]) -> Finished {
    let mut cmd = Cmd::cordon()
        .args(["run", "--json", "--workspace", s.ws.str()])
        .arg("--ro")
        .arg(format!("{}:/tools", s.dir.str()))
        .arg("--rw")
        .arg(format!("{}:/out", s.out.str()));
    for a in allow {
        cmd = cmd.arg("--exec-allow").arg(*a);
    }
    cmd.arg("--").args(argv.iter().copied()).run()
}

/// What the payload printed for `name`.
fn verdict<'a>(o: &'a Outcome, name: &str) -> &'a str {
    let prefix = format!("{name}: ");
    o.stdout()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no verdict for {name:?}:\n{o}"))
}

/// The markers a program that ran left in the workspace, seen from the host.
fn markers(ws: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(ws)
        .expect("read workspace")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned-"))
        .collect();
    out.sort();
    out
}

#[test]
fn only_allowed_programs_run_whatever_way_the_payload_tries() {
    let s = setup();
    let f = cordon_run(
        &s,
        &["/usr/bin/python3", "/tools/*"],
        &[
            "python3",
            "/tools/attacks.py",
            LOADER,
            "/tools/evil.sh",
            "/tools/ok.py",
        ],
    );
    let o = f.outcome();
    assert_eq!(o.status(), "exited", "{o}");
    assert!(o.stdout().contains("done"), "the allowed python3 ran: {o}");
    let eacces = "refused errno 13";
    for name in [
        "exec /tmp",
        "exec /workspace",
        "exec /dev/shm",
        "exec /home/sandbox",
        "exec /home/user",
        "exec /out",
        "exec /tools/other/touch",
        "sh",
        "script /tools/evil.sh",
    ] {
        assert_eq!(verdict(&o, name), eacces, "{name}:\n{o}");
    }
    let busybox = verdict(&o, "busybox sh");
    assert!(busybox.starts_with("refused errno "), "{busybox}\n{o}");
    // The loader is allowed (every dynamic program needs it), but maps nothing executable
    // from a noexec mount: each writable place, and the program directories.
    for name in [
        "loader /tmp",
        "loader /workspace",
        "loader /dev/shm",
        "loader /home/sandbox",
        "loader /home/user",
        "loader /out",
        "loader /bin/sh",
    ] {
        let v = verdict(&o, name);
        assert!(
            v.starts_with("exit 127") && v.contains("failed to map segment"),
            "{name}: {v}\n{o}"
        );
    }
    assert_eq!(verdict(&o, "memfd_create"), "refused errno 1", "{o}");
    assert!(verdict(&o, "fexecve").starts_with("refused errno "), "{o}");
    // A script whose interpreter is allowed runs: the allowlist is not "nothing runs".
    assert_eq!(verdict(&o, "script /tools/ok.py"), "exit 0 ''", "{o}");
    assert!(s.ws.join("ran-ok-py").exists(), "{o}");
    // From outside: no program that was not allowed ran.
    assert_eq!(markers(&s.ws.path), Vec::<String>::new(), "{o}");
}

/// The command itself not on the list: refused by the kernel, and the Outcome says which
/// rule refused it.
#[test]
fn a_command_not_on_the_list_is_refused_and_the_outcome_names_the_allowlist() {
    let s = setup();
    let f = cordon_run(
        &s,
        &["/usr/bin/python3"],
        &["sh", "-c", "touch /workspace/pwned-command"],
    );
    let o = f.outcome();
    assert_eq!(o.status(), "error", "{o}");
    assert_eq!(o.exit_code(), Some(126), "{o}");
    let error = o.v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("sh (not in the programs allowlist"),
        "{error}\n{o}"
    );
    assert_eq!(markers(&s.ws.path), Vec::<String>::new(), "{o}");
}

/// A script named on the list whose `#!` interpreter is not: refused before anything runs
/// (exit 125), with the entry to add.
#[test]
fn a_listed_script_needs_its_interpreter_listed_too() {
    let s = setup();
    let f = Cmd::cordon()
        .args(["run", "--workspace", s.ws.str()])
        .arg("--ro")
        .arg(format!("{}:/tools", s.dir.str()))
        .args(["--exec-allow", "/tools/evil.sh", "--", "/tools/evil.sh"])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr.contains("is a script for /bin/sh") && f.stderr.contains("--exec-allow /bin/sh"),
        "{f:?}"
    );
    assert_eq!(markers(&s.ws.path), Vec::<String>::new());
}

/// A profile file's `[exec] allow` is the same list as the flag.
#[test]
fn a_profile_files_exec_allow_is_enforced_like_the_flag() {
    let s = setup();
    let profile = s
        .dir
        .file("p.toml", "[exec]\nallow = [\"/usr/bin/python3\"]\n", 0o644);
    let f = Cmd::cordon()
        .args(["run", "--json", "--workspace", s.ws.str()])
        .arg("--profile")
        .arg(&profile)
        .args([
            "--",
            "python3",
            "-c",
            "import subprocess\ntry:\n subprocess.run(['/usr/bin/touch', '/workspace/pwned-p'])\nexcept OSError as e:\n print('refused', e.errno)",
        ])
        .run();
    let o = f.outcome();
    assert_eq!(o.stdout().trim(), "refused 13", "{o}");
    assert_eq!(markers(&s.ws.path), Vec::<String>::new(), "{o}");
}

/// A host without Landlock cannot enforce the list: the run is refused (exit 125) and says
/// why, instead of running with every file executable.
#[test]
fn without_landlock_the_run_is_refused_not_run_unenforced() {
    let s = setup();
    let layout = common::hosts::HostLayout {
        refuse: vec![(libc::SYS_landlock_create_ruleset, libc::ENOSYS)],
        ..Default::default()
    };
    let f = layout
        .cordon()
        .args(["run", "--workspace", s.ws.str()])
        .args(["--exec-allow", "/usr/bin/python3", "--"])
        .args(["sh", "-c", "touch /workspace/pwned-no-landlock"])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr.contains("landlock") && f.stderr.contains("programs allowlist"),
        "{f:?}"
    );
    assert_eq!(markers(&s.ws.path), Vec::<String>::new());
}

/// Without namespaces (Docker's default seccomp profile refuses them) there are no noexec
/// mounts, but Landlock still refuses every execve off the list; the gap left (the loader
/// mapping a program from a writable place) is said in `enforcement.notes`.
#[test]
fn without_namespaces_execve_is_still_refused_and_the_gap_is_reported() {
    let s = setup();
    let layout = common::hosts::HostLayout {
        docker_seccomp: true,
        ..Default::default()
    };
    let f = layout
        .cordon()
        .args(["run", "--json", "--workspace", s.ws.str()])
        .args(["--exec-allow", "/usr/bin/python3", "--", "python3", "-c"])
        .arg(
            "import subprocess\nfor p in ['/bin/sh', '/usr/bin/touch']:\n try:\n  \
             subprocess.run([p, '-c', 'touch /workspace/pwned-degraded'])\n except OSError as e:\n  \
             print(p, 'refused', e.errno)",
        )
        .run();
    let o = f.outcome();
    assert_eq!(o.enforcement()["user_ns"], false, "{o}");
    assert_eq!(
        o.stdout(),
        "/bin/sh refused 13\n/usr/bin/touch refused 13\n",
        "{o}"
    );
    assert!(
        o.enforcement()["notes"]
            .to_string()
            .contains("programs allowlist without a mount namespace"),
        "{o}"
    );
    assert_eq!(markers(&s.ws.path), Vec::<String>::new(), "{o}");
}
