//! Hostile image roots against the host. While the sandbox's root is built the host's tree is
//! reachable at `/oldroot`; an image plants symlinks to it (by `..` or absolutely) on every
//! path the build makes something at: the working directory, the tmpfs mount points (`/tmp`,
//! `/workspace`, the home, `/dev`, `/proc`), a bind's directory and file mount points, and
//! `/home/user`. Each run is checked from outside: the host paths the links name do not exist
//! afterwards, and inside the sandbox the path works (it lands in the image's own root). One
//! case goes through the server's `POST /v1/sandboxes {"image": …}` and `DELETE`.
//!
//! Root and rootless: scripts/test.sh runs this suite as an unprivileged user too. busybox and
//! umoci come from scripts/test.sh's apt list; a test whose tool is missing skips with a
//! message, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

mod serve;

fn cordon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

/// Whether `tool` is on PATH; if not, says so and (outside CI) lets the test skip.
fn have(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{tool} is not installed (scripts/test.sh installs it; CI=true fails instead of skipping)");
        }
        eprintln!("SKIPPED: {tool} is not installed (apt-get install it, or run scripts/test.sh)");
    }
    found
}

static N: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    format!(
        "cordon-attack-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A path removed (with what is beneath it) on drop: a work directory, or a host path an
/// attack aims at, so that a failing run leaves nothing behind.
struct Tmp(PathBuf);

impl Tmp {
    fn dir(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&p).expect("temp dir");
        Tmp(p)
    }
    /// A host directory an attack aims at: empty and, like /tmp, writable by anyone (so
    /// that the sandbox's host uid could write there). It must stay empty.
    fn target(tag: &str) -> Tmp {
        use std::os::unix::fs::PermissionsExt;
        let t = Tmp::dir(tag);
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        t
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwX")
            .arg(&self.0)
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What appeared in the host directory `dir` (nothing, when the attack was stopped).
fn planted(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("the target directory is still there")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// The host path `host` as the root being built sees it: under `/oldroot`, absolutely.
fn via_oldroot(host: &Path) -> String {
    format!("/oldroot{}", host.display())
}

/// The same, by enough `..` to climb out of any directory of the root first.
fn via_dotdot(host: &Path) -> String {
    format!("../../../../../../../..{}", via_oldroot(host))
}

fn busybox() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("busybox")
}

/// A busybox root at `root` (/bin/busybox, /bin/sh) with `links` planted: (path, target).
fn plant(root: &Path, links: &[(&str, String)]) {
    std::fs::create_dir_all(root.join("bin")).expect("mkdir");
    std::fs::copy(busybox(), root.join("bin/busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    for (path, target) in links {
        let at = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(target, &at).expect("plant link");
    }
}

fn run_cordon(args: &[&str]) -> Output {
    let out = Command::new(cordon_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "cordon panicked: {err}");
    out
}

/// The working directory is `/x/a/b` (the sandbox's user cannot write there: it was made by
/// the sandbox's root, as Docker makes a missing `WorkingDir`).
const SAME_DIR: &str =
    "[ \"$(/bin/busybox stat -c %d:%i .)\" = \"$(/bin/busybox stat -c %d:%i /x/a/b)\" ] && echo ok";

/// `cordon run --json ARGS…`.
fn run_json(args: &[&str]) -> Output {
    run_cordon(&[&["run", "--json"][..], args].concat())
}

/// Whether the run worked and printed `want`; if not, what happened.
fn ran(out: &Output, want: &str) -> Result<(), String> {
    if !out.status.success() {
        return Err(format!(
            "cordon run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let o: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))?;
    if o["status"] != "exited" || o["exit_code"] != 0 || o["stdout"] != want {
        return Err(format!("expected {want:?}: {o:#}"));
    }
    Ok(())
}

fn assert_ran(out: &Output, want: &str) {
    if let Err(e) = ran(out, want) {
        panic!("{e}");
    }
}

/// One planted link per place the root's build makes something at, each in a directory root
/// of its own: the link points at an empty host directory (by `..` or absolutely, through
/// `/oldroot`), or at a name in it, the sandbox uses the path, and from outside the host
/// directory must still be empty afterwards. (A link *on the way* to what the build makes
/// is what reached the host; a link that is itself a mount point only put the mount over a
/// host directory, in the sandbox's own mount namespace — and left the sandbox's path broken.)
#[test]
fn links_to_the_host_on_the_roots_mount_points_and_working_directory_stay_inside_the_image() {
    if !have("busybox") {
        return;
    }
    let work = Tmp::dir("work");
    let host_dir = work.path().join("host-dir");
    std::fs::create_dir_all(&host_dir).expect("mkdir");
    std::fs::write(host_dir.join("file"), "from-host\n").expect("write");
    let host_file = work.path().join("host-file");
    std::fs::write(&host_file, "from-host\n").expect("write");
    let ro_dir = |dest: &str| format!("{}:{dest}", host_dir.display());
    let ro_file = |dest: &str| format!("{}:{dest}", host_file.display());

    let cwd = |d: &str| vec!["--cwd".to_string(), d.to_string()];
    let ro = |bind: String| vec!["--ro".to_string(), bind];
    let write_read = |p: &str| format!("echo ok > {p} && /bin/busybox cat {p}");
    // What is attacked; the planted link's path; whether it points absolutely (else by `..`);
    // run flags; the script that uses the path; what it prints. A link named `/etc/hosts`
    // points at `hosts` in the host directory (which does not exist); every other link at the
    // directory itself.
    type Case<'a> = (&'a str, &'a str, bool, Vec<String>, String, &'a str);
    let cases: Vec<Case> = vec![
        (
            "working directory (by ..)",
            "/x",
            false,
            cwd("/x/a/b"),
            SAME_DIR.into(),
            "ok\n",
        ),
        (
            "working directory (absolute)",
            "/x",
            true,
            cwd("/x/a/b"),
            SAME_DIR.into(),
            "ok\n",
        ),
        (
            "/tmp tmpfs",
            "/tmp",
            true,
            vec![],
            write_read("/tmp/f"),
            "ok\n",
        ),
        (
            "/workspace tmpfs",
            "/workspace",
            false,
            vec![],
            write_read("/workspace/f"),
            "ok\n",
        ),
        (
            "home tmpfs and /home/user",
            "/home",
            true,
            vec![],
            "echo ok > /home/sandbox/f && /bin/busybox cat /home/user/f".into(),
            "ok\n",
        ),
        (
            "/dev tmpfs and its device binds",
            "/dev",
            true,
            vec![],
            "echo x > /dev/null && /bin/busybox head -c 3 /dev/zero | /bin/busybox wc -c".into(),
            "3\n",
        ),
        (
            "/proc",
            "/proc",
            false,
            vec![],
            "/bin/busybox grep -c ^Pid: /proc/self/status".into(),
            "1\n",
        ),
        (
            "a bind's directory mount point",
            "/data",
            true,
            ro(ro_dir("/data/in")),
            "/bin/busybox cat /data/in/file".into(),
            "from-host\n",
        ),
        (
            "a file mount point below a link",
            "/etc",
            false,
            ro(ro_file("/etc/conf")),
            "/bin/busybox cat /etc/conf".into(),
            "from-host\n",
        ),
        (
            "a file mount point that is a dangling link",
            "/etc/hosts",
            true,
            ro(ro_file("/etc/hosts")),
            "/bin/busybox cat /etc/hosts".into(),
            "from-host\n",
        ),
    ];
    let mut failed = Vec::new();
    for (what, link, absolute, extra, script, want) in cases {
        let target = Tmp::target("host");
        let t = target.path();
        let aim = if link == "/etc/hosts" {
            t.join("hosts")
        } else {
            t.to_path_buf()
        };
        let to = if absolute {
            via_oldroot(&aim)
        } else {
            via_dotdot(&aim)
        };
        let root = work.path().join(unique("root"));
        plant(&root, &[(link, to.clone())]);
        let mut args = vec!["--image", root.to_str().expect("utf-8 path")];
        args.extend(extra.iter().map(String::as_str));
        args.extend(["--", "/bin/sh", "-c", &script]);
        let out = run_json(&args);
        // From outside first: nothing was made in the host directory.
        let made = planted(t);
        if !made.is_empty() {
            failed.push(format!(
                "{what}: {made:?} made on the host in {} through {link} -> {to}",
                t.display()
            ));
        }
        // And inside, the path works: it lies in the image's own root.
        if let Err(e) = ran(&out, want) {
            failed.push(format!("{what}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// An OCI layout at `<dir>/oci`, tag `t`: busybox and `x -> ../…/oldroot<target>` in one
/// layer, `WorkingDir=/x/a/b`, imported into the store at `<dir>/data` as `localhost/oci:t`.
fn import_working_dir_attack(dir: &Path, target: &Path) -> (PathBuf, &'static str) {
    let oci = dir.join("oci");
    let bundle = dir.join("bundle");
    let layout = format!("{}:t", oci.display());
    let ok = |c: &mut Command| {
        let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    ok(Command::new("umoci").arg("init").arg("--layout").arg(&oci));
    ok(Command::new("umoci").args(["new", "--image", &layout]));
    ok(Command::new("umoci")
        .args(["unpack", "--rootless", "--image", &layout])
        .arg(&bundle));
    plant(&bundle.join("rootfs"), &[("/x", via_dotdot(target))]);
    ok(Command::new("umoci")
        .args(["repack", "--refresh-bundle", "--image", &layout])
        .arg(&bundle));
    ok(Command::new("umoci").args([
        "config",
        "--image",
        &layout,
        "--config.workingdir",
        "/x/a/b",
    ]));
    let data = dir.join("data");
    let out = run_cordon(&[
        "image",
        "import",
        oci.to_str().expect("utf-8"),
        "--json",
        "--data-dir",
        data.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (data, "localhost/oci:t")
}

/// The issue's own case: an image whose `WorkingDir` goes through a link out of its root.
#[test]
fn an_images_working_dir_through_a_link_to_the_host_is_made_inside_the_image() {
    if !have("busybox") || !have("umoci") {
        return;
    }
    let work = Tmp::dir("wd");
    let target = Tmp::target("host");
    let (data, image) = import_working_dir_attack(work.path(), target.path());
    let data = data.to_str().expect("utf-8");
    let args = [
        "--data-dir",
        data,
        "--image",
        image,
        "--",
        "/bin/sh",
        "-c",
        SAME_DIR,
    ];
    let out = run_json(&args);
    let made = planted(target.path());
    assert!(
        made.is_empty(),
        "{made:?} made on the host in {}: {}",
        target.path().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ran(&out, "ok\n");
}

/// Through the server, as any API key could: create a sandbox from the image, use its working
/// directory, delete it; the host directory stays empty all along.
#[test]
fn the_server_makes_an_images_working_dir_inside_the_image() {
    if !have("busybox") || !have("umoci") {
        return;
    }
    let work = Tmp::dir("srv");
    let target = Tmp::target("host");
    let t = target.path();
    let (data, image) = import_working_dir_attack(work.path(), t);
    let s = serve::Server::start_in(data, &[]);
    let (status, created) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(serde_json::json!({ "image": image })),
    );
    assert_eq!(planted(t), [""; 0], "made on the host at create");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id");
    let (status, o) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(serde_json::json!({
            "cmd": ["/bin/sh", "-c", SAME_DIR]
        })),
    );
    assert_eq!(status, 200, "{o}");
    assert_eq!(o["stdout"], "ok\n", "{o:#}");
    assert_eq!(planted(t), [""; 0], "made on the host");
    let (status, o) = s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert!((200..300).contains(&status), "{status} {o}");
    assert_eq!(planted(t), [""; 0], "made on the host, after delete");
}
