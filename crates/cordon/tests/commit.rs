//! `cordon image commit` end to end, against a real `cordon serve` on loopback: a base image
//! made in the test (a directory with a statically linked busybox, through `cordon image
//! build`), a sandbox made from it that writes and deletes files, the commit, and the image
//! run by `cordon run --image`, pushed to a loopback `docker-registry` and pulled back. Then
//! hostile sandboxes — symlinks to host paths, device nodes, `..`-laden names, many files — and
//! the host checked from outside; another key's commit of the sandbox is a 404.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

mod fixtures;
use fixtures::Tmp;
mod serve;
use serve::Server;

fn cordon_bin() -> &'static str {
    env!("CARGO_BIN_EXE_cordon")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A data directory whose store holds `base:1`: busybox in `/bin`, `/etc/greeting`, a
/// directory `/etc/sub` with a file, `ENV GREETING=hello`, `WORKDIR /app`.
fn base_image(t: &Tmp) -> Option<PathBuf> {
    let bb = fixtures::busybox()?;
    let ctx = t.0.join("ctx");
    let root = ctx.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc/sub")).unwrap();
    std::fs::copy(&bb, root.join("bin/busybox")).unwrap();
    for tool in [
        "sh", "cat", "echo", "mkdir", "rm", "ls", "touch", "test", "ln", "readlink", "mknod",
        "mkfifo", "wc", "find", "dd", "stat", "seq", "xargs", "grep", "pwd", "chmod",
    ] {
        symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(root.join("etc/greeting"), "hi\n").unwrap();
    std::fs::write(root.join("etc/sub/old"), "old\n").unwrap();
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM ./rootfs\nENV GREETING=hello\nWORKDIR /app\nCMD [\"cat\", \"/etc/greeting\"]\n",
    )
    .unwrap();
    let data = t.0.join("data");
    let out = Command::new(cordon_bin())
        .args(["image", "build", "-t", "base:1"])
        .arg(&ctx)
        .arg("--data-dir")
        .arg(&data)
        .stdin(Stdio::null())
        .output()
        .expect("cordon image build");
    ok(&out, "building the base image");
    Some(data)
}

impl Server {
    fn new_sandbox(&self, body: Value) -> String {
        let (s, v) = self.call("POST", "/v1/sandboxes", Some(body));
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().expect("id").to_string()
    }

    /// Runs `sh -c cmd` in the sandbox; (exit code, stdout, stderr).
    fn sh(&self, id: &str, cmd: &str) -> (i64, String, String) {
        let (s, v) = self.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({ "cmd": ["/bin/sh", "-c", cmd], "timeout": "120s" })),
        );
        assert_eq!(s, 200, "{v}");
        (
            v["exit_code"].as_i64().unwrap_or(-1),
            v["stdout"].as_str().unwrap_or("").to_string(),
            v["stderr"].as_str().unwrap_or("").to_string(),
        )
    }

    fn commit(&self, id: &str, body: Value) -> (u16, Value) {
        self.call("POST", &format!("/v1/sandboxes/{id}/commit"), Some(body))
    }
}

/// `cordon run --image REF -- sh -c cmd` on `data`'s store: stdout.
fn run_image(data: &Path, reference: &str, cmd: &str) -> String {
    let out = Command::new(cordon_bin())
        .args(["run", "--image", reference, "--data-dir"])
        .arg(data)
        .args(["--", "/bin/sh", "-c", cmd])
        .stdin(Stdio::null())
        .output()
        .expect("cordon run");
    ok(&out, &format!("cordon run --image {reference}"))
}

const CHANGES: &str = "echo made > /etc/made && mkdir -p /app/d && echo v2 > /app/d/v \
    && rm /etc/greeting && rm -r /etc/sub && mkdir /etc/sub && echo new > /etc/sub/n \
    && echo scratch > /workspace/w";

const CHECK: &str = "cat /etc/made /app/d/v; test -e /etc/greeting || echo greeting-gone; \
    test -e /etc/sub/old || echo old-gone; cat /etc/sub/n; echo \"$GREETING $MODE\"; \
    ls /workspace; pwd";

const EXPECTED: &str = "made\nv2\ngreeting-gone\nold-gone\nnew\nhello committed\n/app\n";

#[test]
fn a_committed_sandbox_runs_with_its_writes_and_without_the_files_it_deleted() {
    let t = Tmp::new("basic");
    let Some(data) = base_image(&t) else { return };
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1"}));
    let (code, _, err) = s.sh(&id, CHANGES);
    assert_eq!(code, 0, "{err}");

    let (st, v) = s.commit(
        &id,
        json!({"reference": "app:2", "changes": ["ENV MODE=committed"]}),
    );
    assert_eq!(st, 201, "{v}");
    assert!(v["digest"].as_str().unwrap().starts_with("sha256:"), "{v}");
    assert_eq!(
        v["layers"], 3,
        "base (rootfs, WORKDIR) + the sandbox's: {v}"
    );
    assert!(v["not_carried"].to_string().contains("/workspace"), "{v}");

    // The committed image, run on its own: the writes, the deletions (a file, and a
    // directory replaced whole), the base's config plus the change; /workspace is fresh.
    assert_eq!(run_image(&data, "app:2", CHECK), EXPECTED);
    // The base image is unchanged, and the sandbox was thawed and runs on.
    assert_eq!(
        run_image(&data, "base:1", "cat /etc/greeting /etc/sub/old"),
        "hi\nold\n"
    );
    assert_eq!(s.sh(&id, "echo alive").1, "alive\n");
    // A paused sandbox is read as it is and stays paused.
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/pause"), None);
    assert_eq!(st, 200, "{v}");
    let (st, v) = s.commit(&id, json!({"reference": "app:paused"}));
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["frozen_ms"], 0, "{v}");
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(v["state"], "paused", "{v}");
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{id}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(run_image(&data, "app:paused", "cat /etc/made"), "made\n");

    // A name the store has is not replaced.
    let (st, v) = s.commit(&id, json!({"reference": "base:1"}));
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "already_exists", "{v}");
    assert_eq!(run_image(&data, "base:1", "cat /etc/greeting"), "hi\n");
    // A digest is not a name; a change that is no config change is refused by name.
    let (st, v) = s.commit(&id, json!({"reference": "app@sha256:0000000000000000000000000000000000000000000000000000000000000000"}));
    assert_eq!(st, 400, "{v}");
    let (st, v) = s.commit(
        &id,
        json!({"reference": "app:9", "changes": ["RUN rm -rf /"]}),
    );
    assert_eq!(st, 422, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("RUN"),
        "{v}"
    );

    // The CLI: a client of the same server.
    let out = Command::new(cordon_bin())
        .args([
            "image", "commit", &id, "app:3", "--server", &s.url, "--key", &s.key,
        ])
        .output()
        .unwrap();
    let said = ok(&out, "cordon image commit");
    assert!(said.starts_with("committed app:3 sha256:"), "{said}");
    let ls = Command::new(cordon_bin())
        .args(["image", "ls", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(ok(&ls, "cordon image ls").contains("app"));
    // Refused: exit 1 and the server's sentence.
    let out = Command::new(cordon_bin())
        .args([
            "image", "commit", &id, "app:3", "--server", &s.url, "--key", &s.key,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already"));
}

#[test]
fn a_committed_image_pushed_to_a_registry_is_pulled_back_and_runs_the_same() {
    let t = Tmp::new("push");
    let Some(data) = base_image(&t) else { return };
    let Some(reg) = registry(&t) else { return };
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1"}));
    assert_eq!(s.sh(&id, CHANGES).0, 0);
    let (st, v) = s.commit(
        &id,
        json!({"reference": "app:2", "changes": ["ENV MODE=committed"]}),
    );
    assert_eq!(st, 201, "{v}");
    let dest = format!("127.0.0.1:{}/team/app:2", reg.port);
    let out = Command::new(cordon_bin())
        .args(["image", "push", "app:2", &dest, "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    ok(&out, "cordon image push");
    let other = t.0.join("other");
    let out = Command::new(cordon_bin())
        .args(["image", "pull", &dest, "--data-dir"])
        .arg(&other)
        .output()
        .unwrap();
    ok(&out, "cordon image pull");
    assert_eq!(run_image(&other, &dest, CHECK), EXPECTED);
}

#[test]
fn a_hostile_sandboxs_links_devices_odd_names_and_many_files_never_reach_the_host() {
    let t = Tmp::new("hostile");
    let Some(data) = base_image(&t) else { return };
    // A host directory and file the sandbox points symlinks at.
    let host = t.0.join("host");
    std::fs::create_dir_all(&host).unwrap();
    let secret = host.join("secret.txt");
    std::fs::write(&secret, "HOST-SECRET-CONTENTS").unwrap();
    let mtime = std::fs::metadata(&secret).unwrap().mtime();
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1", "disk": "256M"}));
    let h = host.display();
    let plant = format!(
        "ln -s {h}/secret.txt /etc/leak && ln -s {h} /app/hostdir && ln -s / /app/root \
         && ln -s /app/loop /app/loop && rm -r /etc/sub && ln -s {h} /etc/sub \
         && mkfifo /app/fifo && (mknod /app/null c 1 3 2>/dev/null || true) \
         && touch /etc/..x '/app/...' '/app/a..b' && mkdir '/app/..d' && echo in > '/app/..d/f' \
         && mkdir /app/many && cd /app/many && seq 1 20000 | xargs touch && echo planted"
    );
    let (code, out, err) = s.sh(&id, &plant);
    assert_eq!((code, out.as_str()), (0, "planted\n"), "{err}");

    let started = std::time::Instant::now();
    let (st, v) = s.commit(&id, json!({"reference": "evil:1"}));
    assert_eq!(st, 201, "{v}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "20,000 files took {:?}",
        started.elapsed()
    );

    // The image holds the links as links (their text, never what they point at), the odd
    // names as names, every file, and no device.
    let seen = run_image(
        &data,
        "evil:1",
        "readlink /etc/leak; readlink /app/hostdir; readlink /etc/sub; cat /etc/leak 2>/dev/null || echo no-secret; \
         ls -a /etc | grep -c '^\\.\\.x$'; cat '/app/..d/f'; ls /app/many | wc -l; \
         test -c /app/null && echo DEVICE; test -e /app/null || echo no-device",
    );
    assert_eq!(
        seen,
        format!("{h}/secret.txt\n{h}\n{h}\nno-secret\n1\nin\n20000\nno-device\n")
    );
    // Nothing of the host went into the store, and the host was not touched.
    let grep = Command::new("grep")
        .args(["-rl", "HOST-SECRET-CONTENTS"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "the host's file was copied into the store: {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "HOST-SECRET-CONTENTS"
    );
    assert_eq!(std::fs::metadata(&secret).unwrap().mtime(), mtime);
    let mut names: Vec<_> = std::fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, vec![std::ffi::OsString::from("secret.txt")]);
    for stray in ["..x", "...", "a..b", "..d", "many", "leak"] {
        assert!(
            !t.0.join(stray).exists() && !data.join(stray).exists(),
            "{stray}"
        );
    }
}

#[test]
fn another_key_cannot_commit_a_sandbox_and_one_without_an_image_is_refused_with_what_to_do() {
    let t = Tmp::new("keys");
    let Some(data) = base_image(&t) else { return };
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1"}));
    let out = Command::new(cordon_bin())
        .args(["keys", "create", "--name", "other", "--data-dir"])
        .arg(&data)
        .output()
        .expect("cordon keys create");
    let other = ok(&out, "cordon keys create").trim().to_string();
    let r = ureq::post(&format!("{}/v1/sandboxes/{id}/commit", s.url))
        .set("Authorization", &format!("Bearer {other}"))
        .send_json(json!({"reference": "stolen:1"}));
    let status = match r {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(c, _)) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(status, 404);
    let ls = Command::new(cordon_bin())
        .args(["image", "ls", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!ok(&ls, "cordon image ls").contains("stolen"));

    // No image: the host's system directories are never an image's; the answer says what to do.
    let plain = s.new_sandbox(json!({}));
    let (st, v) = s.commit(&plain, json!({"reference": "host:1"}));
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "no_image", "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("image") && m.contains("snapshot"), "{m}");
    // An unknown sandbox is a 404 too.
    let (st, _) = s.commit("nope", json!({"reference": "x:1"}));
    assert_eq!(st, 404);
}

/// docker-registry on a free 127.0.0.1 port, killed on drop.
struct Registry {
    child: std::process::Child,
    port: u16,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry(t: &Tmp) -> Option<Registry> {
    fixtures::on_path("docker-registry")?;
    let dir = t.0.join("registry");
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let cfg = dir.join("config.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the registry did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Some(Registry { child, port })
}

#[test]
fn a_directory_the_sandbox_made_unreadable_is_carried_as_root_and_refused_rootless_with_what_to_do()
{
    let t = Tmp::new("locked");
    let Some(data) = base_image(&t) else { return };
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1"}));
    let (code, _, err) = s.sh(
        &id,
        "mkdir /app/locked && echo x > /app/locked/f && chmod 000 /app/locked",
    );
    assert_eq!(code, 0, "{err}");
    let (st, v) = s.commit(&id, json!({"reference": "locked:1"}));
    if rustix::process::geteuid().is_root() {
        assert_eq!(st, 201, "{v}");
        assert_eq!(
            run_image(&data, "locked:1", "stat -c %a /app/locked"),
            "0\n"
        );
    } else {
        assert_eq!(st, 422, "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("/app/locked") && m.contains("chmod"), "{m}");
        // Made readable, it commits.
        assert_eq!(s.sh(&id, "chmod 700 /app/locked").0, 0);
        let (st, v) = s.commit(&id, json!({"reference": "locked:1"}));
        assert_eq!(st, 201, "{v}");
    }
}

/// Snapshots, forks and pauses to disk carry an image sandbox's root changes — its writes
/// and its deletions of the image's files — to sandboxes of the same image; a sandbox without
/// an image takes none of them (its root is the host's system directories).
#[test]
fn a_snapshot_and_a_pause_to_disk_carry_an_image_sandboxs_root_changes() {
    let t = Tmp::new("rootsnap");
    let Some(data) = base_image(&t) else { return };
    let s = Server::start_in(data.clone(), &[]);
    let id = s.new_sandbox(json!({"image": "base:1"}));
    let (code, _, err) = s.sh(
        &id,
        "echo made > /etc/made && mkdir -p /app/d && echo v2 > /app/d/v && rm /etc/greeting \
         && ln -s /etc/passwd /etc/link && echo w > /workspace/w",
    );
    assert_eq!(code, 0, "{err}");
    let check =
        "cat /etc/made /app/d/v /workspace/w; test -e /etc/greeting || echo greeting-gone; \
                 readlink /etc/link; cat /etc/sub/old";
    let expected = "made\nv2\nw\ngreeting-gone\n/etc/passwd\nold\n";

    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/snapshots"),
        Some(json!({"name": "img"})),
    );
    assert_eq!(st, 201, "{v}");
    assert!(
        v["carried"]
            .as_array()
            .expect("carried")
            .iter()
            .any(|c| c.as_str().is_some_and(|c| c.starts_with("/ "))),
        "{v}"
    );
    assert!(
        !v["skipped"].to_string().contains("device"),
        "a deletion is not a skipped device: {v}"
    );
    let b = s.new_sandbox(json!({"image": "base:1", "from": "img"}));
    assert_eq!(s.sh(&b, check).1, expected, "from the snapshot");

    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{b}/pause"),
        Some(json!({"keep_memory": false})),
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{b}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.sh(&b, check).1, expected, "after a pause to disk");

    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/fork"),
        Some(json!({"count": 1})),
    );
    assert_eq!(st, 201, "{v}");
    let f = v["sandboxes"][0]["id"].as_str().expect("fork").to_string();
    assert_eq!(s.sh(&f, check).1, expected, "in a fork");

    // No image: the root changes stay out, and nothing reaches the host's /etc.
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"from": "img"})));
    assert_eq!(st, 201, "{v}");
    let h = v["id"].as_str().expect("id").to_string();
    assert_eq!(
        s.sh(&h, "cat /workspace/w; test -e /etc/made || echo no-made")
            .1,
        "w\nno-made\n"
    );
    assert!(!Path::new("/etc/made").exists() && !Path::new("/etc/link").exists());
    assert!(Path::new("/etc/passwd").is_file());
}
