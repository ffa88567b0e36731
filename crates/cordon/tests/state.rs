//! State that outlives a sandbox, end to end against a real `cordon serve` on loopback:
//! volumes (shared, per key, capped, kept across restarts, not deletable in use), snapshots
//! (of a tree hostile code planted, checked from outside: nothing of the host read or
//! written), create from a snapshot, forks, and crash leftovers removed at start.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

mod serve;
use serve::Server;

impl Server {
    fn new_sandbox(&self, body: Value) -> String {
        let (s, v) = self.call("POST", "/v1/sandboxes", Some(body));
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().expect("id").to_string()
    }

    /// Runs `sh -c cmd`; (exit code, stdout, stderr).
    fn sh(&self, id: &str, cmd: &str) -> (i64, String, String) {
        let (s, v) = self.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({ "cmd": cmd })),
        );
        assert_eq!(s, 200, "{v}");
        (
            v["exit_code"].as_i64().unwrap_or(-1),
            v["stdout"].as_str().unwrap_or("").to_string(),
            v["stderr"].as_str().unwrap_or("").to_string(),
        )
    }

    fn as_key(&self, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = ureq::request(method, &format!("{}{}", self.url, path))
            .set("Authorization", &format!("Bearer {key}"));
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
        (status, resp.into_json().unwrap_or(Value::Null))
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "cordon-state-{tag}-{}-{}",
        std::process::id(),
        serve::unique()
    ))
}

/// A second key of the server on `dir` (the registry takes keys while it runs).
fn second_key(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["keys", "create", "--name", "other", "--data-dir"])
        .arg(dir)
        .output()
        .expect("cordon keys create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A host file the sandboxes are pointed at; its contents and mtime must never change.
struct Canary {
    path: PathBuf,
    mtime: i64,
}

impl Canary {
    fn plant(dir: &Path) -> Canary {
        std::fs::create_dir_all(dir).expect("canary dir");
        let path = dir.join("canary.txt");
        std::fs::write(&path, "HOST-CANARY-CONTENTS").expect("canary");
        let mtime = std::fs::metadata(&path).expect("canary").mtime();
        Canary { path, mtime }
    }

    fn untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(&self.path).expect("canary"),
            "HOST-CANARY-CONTENTS"
        );
        assert_eq!(
            std::fs::metadata(&self.path).expect("canary").mtime(),
            self.mtime
        );
    }
}

/// Every regular file under `dir` (not following symlinks).
fn regular_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().expect("type");
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn two_sandboxes_on_one_volume_see_each_others_files_and_a_restart_keeps_them() {
    let dir = temp_dir("vol");
    let s = Server::start_in(dir.clone(), &[]);
    let (st, v) = s.call(
        "POST",
        "/v1/volumes",
        Some(json!({"name": "shared", "size": "64M"})),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["size_bytes"], 64 << 20);
    let (st, v) = s.call("POST", "/v1/volumes", Some(json!({"name": "shared"})));
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("already_exists")),
        "{v}"
    );

    let a = s.new_sandbox(json!({"volumes": [{"name": "shared", "path": "/data"}]}));
    let b = s.new_sandbox(json!({"volumes": [{"name": "shared", "path": "/mnt/v"}]}));
    let (code, _, err) = s.sh(
        &a,
        "echo from-a > /data/a.txt && mkdir -p /data/d && echo x > /data/d/y",
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = s.sh(
        &b,
        "cat /mnt/v/a.txt && echo from-b > /mnt/v/a.txt && id -u",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "from-a\n1000\n");
    let (_, out, _) = s.sh(&a, "cat /data/a.txt; stat -c %u /data/a.txt");
    assert_eq!(
        out, "from-b\n1000\n",
        "B's write, and the file is the sandbox user's in A too"
    );

    // Read-only: readable, not writable.
    let c =
        s.new_sandbox(json!({"volumes": [{"name": "shared", "path": "/ro", "readonly": true}]}));
    let (code, out, _) = s.sh(&c, "cat /ro/a.txt; echo no > /ro/new.txt");
    assert_ne!(code, 0);
    assert_eq!(out, "from-b\n");
    assert!(!dir.join("volumes").join("x").exists());

    // In use: refused, naming the sandboxes.
    let (st, v) = s.call("DELETE", "/v1/volumes/shared", None);
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "volume_in_use");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    for id in [&a, &b, &c] {
        assert!(msg.contains(id.as_str()), "{msg}");
    }
    let (_, v) = s.call("GET", "/v1/volumes", None);
    assert_eq!(v["volumes"][0]["name"], "shared");
    assert_eq!(
        v["volumes"][0]["mounted_by"].as_array().map(|a| a.len()),
        Some(3),
        "{v}"
    );

    // Restart: the volume and its files are there; the key is the same.
    let key = s.key.clone();
    drop(s);
    let mut s = Server::start_in(dir.clone(), &[]);
    s.key = key;
    s.scratch = true;
    let (st, v) = s.call("GET", "/v1/volumes", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["volumes"][0]["name"], "shared", "{v}");
    assert_eq!(v["volumes"][0]["mounted_by"], json!([]), "{v}");
    let d = s.new_sandbox(json!({"volumes": [{"name": "shared", "path": "/workspace/v"}]}));
    let (_, out, _) = s.sh(&d, "cat /workspace/v/a.txt /workspace/v/d/y");
    assert_eq!(out, "from-b\nx\n");
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{d}"), None);
    assert_eq!(st, 204);
    let (st, v) = s.call("DELETE", "/v1/volumes/shared", None);
    assert_eq!(st, 204, "{v}");
    let (_, v) = s.call("GET", "/v1/volumes", None);
    assert_eq!(v["volumes"], json!([]));
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"volumes": [{"name": "shared", "path": "/data"}]})),
    );
    assert_eq!(st, 404, "{v}");
}

#[test]
fn another_key_can_neither_see_nor_mount_nor_delete_a_volume() {
    let s = Server::start();
    let other = second_key(&s.data_dir);
    let (st, v) = s.call(
        "POST",
        "/v1/volumes",
        Some(json!({"name": "mine", "size": "8M"})),
    );
    assert_eq!(st, 201, "{v}");
    let a = s.new_sandbox(json!({"volumes": [{"name": "mine", "path": "/data"}]}));
    s.sh(&a, "echo secret > /data/s.txt");

    let (st, v) = s.as_key(&other, "GET", "/v1/volumes", None);
    assert_eq!((st, &v["volumes"]), (200, &json!([])), "{v}");
    let (st, _) = s.as_key(&other, "GET", "/v1/volumes/mine", None);
    assert_eq!(st, 404);
    let (st, v) = s.as_key(
        &other,
        "POST",
        "/v1/sandboxes",
        Some(json!({"volumes": [{"name": "mine", "path": "/data"}]})),
    );
    assert_eq!(st, 404, "{v}");
    let (st, _) = s.as_key(&other, "DELETE", "/v1/volumes/mine", None);
    assert_eq!(st, 404);
    // Its own volume of the same name is another volume.
    let (st, v) = s.as_key(&other, "POST", "/v1/volumes", Some(json!({"name": "mine"})));
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.as_key(
        &other,
        "POST",
        "/v1/sandboxes",
        Some(json!({"volumes": [{"name": "mine", "path": "/data"}]})),
    );
    assert_eq!(st, 201, "{v}");
    let b = v["id"].as_str().expect("id").to_string();
    let (st, v) = s.as_key(
        &other,
        "POST",
        &format!("/v1/sandboxes/{b}/exec"),
        Some(json!({"cmd": "ls -A /data"})),
    );
    assert_eq!(st, 200);
    assert_eq!(v["stdout"], "", "{v}");
    // Names that would be paths are refused before any path is made of them.
    for bad in ["../x", "a/b", ".hidden", "UPPER", ""] {
        let (st, v) = s.call("POST", "/v1/volumes", Some(json!({"name": bad})));
        assert_eq!(st, 400, "{bad}: {v}");
    }
    for bad in ["/", "relative", "/etc/x", "/proc", "/data/../etc"] {
        let (st, v) = s.call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"volumes": [{"name": "mine", "path": bad}]})),
        );
        assert_eq!(st, 400, "{bad}: {v}");
    }
}

#[test]
fn a_full_volume_is_refused_for_read_write_mounts_but_mounts_read_only() {
    let s = Server::start();
    let (st, v) = s.call(
        "POST",
        "/v1/volumes",
        Some(json!({"name": "small", "size": "1M"})),
    );
    assert_eq!(st, 201, "{v}");
    let a = s.new_sandbox(json!({"volumes": [{"name": "small", "path": "/data"}]}));
    // Writing past the cap while mounted: what runs while the volume grows past it is ended.
    let (st, o) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        Some(json!({"cmd": "head -c 2097152 /dev/zero > /data/big; sleep 5; echo survived"})),
    );
    assert_eq!(st, 200, "{o}");
    assert_eq!(o["stdout"], "", "{o}");
    assert!(o["limits_hit"].to_string().contains("disk"), "{o}");
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"volumes": [{"name": "small", "path": "/data"}]})),
    );
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "volume_full");
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"volumes": [{"name": "small", "path": "/data", "readonly": true}]})),
    );
    assert_eq!(st, 201, "{v}");
    // Past its cap: how far past depends on when the watcher caught the writer.
    let (_, v) = s.call("GET", "/v1/volumes/small", None);
    assert!(v["used_bytes"].as_u64().unwrap_or(0) > 1 << 20, "{v}");
}

#[test]
fn a_snapshot_of_a_hostile_tree_reads_and_writes_nothing_of_the_host() {
    let s = Server::start();
    let host = temp_dir("host");
    let canary = Canary::plant(&host);
    let cp = canary.path.display().to_string();
    let hd = host.display().to_string();
    let a = s.new_sandbox(json!({}));
    let plant = format!(
        "cd /workspace && echo data > file && ln file hard && ln -s {cp} canary_link && \
         ln -s {hd} hostdir_link && ln -s /etc/passwd passwd_link && ln -s / root_link && \
         mkfifo fifo && mkdir -p deep/er && echo in > deep/er/f && ln -s ../../canary_link deep/er/up && \
         cp /bin/true suid && chmod 755 suid; chmod u+s suid; mknod dev c 1 3; \
         echo home > /home/sandbox/h; echo tmp > /tmp/t; ls -l /workspace"
    );
    let (_, out, err) = s.sh(&a, &plant);
    assert!(out.contains("canary_link"), "{out} {err}");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "hostile"})),
    );
    assert_eq!(st, 201, "{v}");
    assert!(v["frozen_ms"].is_u64(), "{v}");
    assert_ne!(v["freeze_method"], "already-paused");
    assert!(
        v["skipped"].to_string().contains("fifo: a FIFO"),
        "the FIFO is named as skipped: {v}"
    );
    assert!(v["not_carried"].to_string().contains("memory"), "{v}");
    // The sandbox was thawed.
    let (_, info) = s.call("GET", &format!("/v1/sandboxes/{a}"), None);
    assert_eq!(info["state"], "running");

    // From outside: the store holds symlinks as symlinks, no FIFO, no setuid bit, and no
    // host file's contents.
    let store = std::fs::read_dir(s.data_dir.join("snapshots"))
        .expect("snapshots")
        .flatten()
        .next()
        .expect("a key's dir")
        .path()
        .join("hostile/tree/workspace");
    for l in [
        "canary_link",
        "hostdir_link",
        "passwd_link",
        "root_link",
        "deep/er/up",
    ] {
        let m = std::fs::symlink_metadata(store.join(l)).expect(l);
        assert!(m.file_type().is_symlink(), "{l} is kept as a symlink");
    }
    assert!(!store.join("fifo").exists() && std::fs::symlink_metadata(store.join("fifo")).is_err());
    assert!(std::fs::symlink_metadata(store.join("dev")).is_err());
    let passwd = std::fs::read("/etc/passwd").expect("host passwd");
    for f in regular_files(&store) {
        let m = std::fs::metadata(&f).expect("meta");
        assert_eq!(
            m.mode() & 0o7000,
            0,
            "{} has no setuid/setgid/sticky bit",
            f.display()
        );
        let bytes = std::fs::read(&f).expect("read");
        assert!(
            bytes != passwd && !bytes.starts_with(b"HOST-CANARY"),
            "{} is a host file",
            f.display()
        );
    }
    canary.untouched();

    // Restored: the same tree inside a new sandbox, owned by its user, and still nothing of
    // the host — the links are links, written nowhere but the new sandbox's own tmpfs.
    let b = s.new_sandbox(json!({"from": "hostile"}));
    let (code, out, err) = s.sh(
        &b,
        "cd /workspace && cat file hard deep/er/f /home/sandbox/h /tmp/t && readlink canary_link && \
         test -L passwd_link && test -L root_link && test ! -e fifo && test ! -e dev && stat -c '%u %a' file deep",
    );
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(
        out,
        format!("data\ndata\nin\nhome\ntmp\n{cp}\n1000 644\n1000 755\n")
    );
    // Writing through the restored link lands nowhere on the host (it dangles inside).
    s.sh(
        &b,
        "echo overwritten > /workspace/canary_link; echo x > /workspace/hostdir_link/new",
    );
    canary.untouched();
    assert!(!host.join("new").exists());
    assert!(regular_files(&host).len() == 1);
    let _ = std::fs::remove_dir_all(&host);
}

#[test]
fn a_snapshot_larger_than_the_new_sandboxs_disk_is_refused_and_leaves_nothing_running() {
    let s = Server::start();
    let a = s.new_sandbox(json!({"disk": "64M"}));
    s.sh(&a, "head -c 3145728 /dev/urandom > /workspace/big");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "big"})),
    );
    assert_eq!(st, 201, "{v}");
    assert!(v["bytes"].as_u64().unwrap_or(0) >= 3 << 20, "{v}");
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"from": "big", "disk": "1M"})),
    );
    assert_eq!(st, 507, "{v}");
    let (_, list) = s.call("GET", "/v1/sandboxes", None);
    assert_eq!(
        list["sandboxes"].as_array().map(|a| a.len()),
        Some(1),
        "{list}"
    );
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"from": "nope"})));
    assert_eq!(st, 404, "{v}");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "big"})),
    );
    assert_eq!(st, 409, "{v}");
}

#[test]
fn a_fork_has_its_parents_files_and_none_of_their_later_writes() {
    let s = Server::start();
    let p = s.new_sandbox(json!({"env": {"WHO": "parent-env"}}));
    s.sh(&p, "echo before > /workspace/f; echo h > /home/sandbox/h");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{p}/fork"),
        Some(json!({"count": 2})),
    );
    assert_eq!(st, 201, "{v}");
    let note = v["note"].as_str().unwrap_or("");
    assert!(note.contains("memory and processes are not carried"), "{v}");
    assert!(v["frozen_ms"].is_u64(), "{v}");
    let forks: Vec<String> = v["sandboxes"]
        .as_array()
        .expect("sandboxes")
        .iter()
        .map(|f| f["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(forks.len(), 2);
    s.sh(&p, "echo after > /workspace/later");
    for f in &forks {
        let (_, out, _) = s.sh(
            f,
            "cat /workspace/f /home/sandbox/h; echo $WHO; ls /workspace",
        );
        assert_eq!(out, "before\nh\nparent-env\nf\n", "fork {f}");
    }
    s.sh(&forks[0], "echo fork > /workspace/from-fork");
    let (_, out, _) = s.sh(&p, "ls /workspace");
    assert_eq!(out, "f\nlater\n");
    let (_, out, _) = s.sh(&forks[1], "ls /workspace");
    assert_eq!(out, "f\n");
    let (_, info) = s.call("GET", &format!("/v1/sandboxes/{p}"), None);
    assert_eq!(info["state"], "running");
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{p}/fork"),
        Some(json!({"count": 0})),
    );
    assert_eq!(st, 400);
}

#[test]
fn a_restart_keeps_snapshots_and_removes_partial_leftovers() {
    let dir = temp_dir("restart");
    let s = Server::start_in(dir.clone(), &[]);
    let a = s.new_sandbox(json!({}));
    s.sh(&a, "echo kept > /workspace/k");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "s1"})),
    );
    assert_eq!(st, 201, "{v}");
    let key = s.key.clone();
    drop(s);
    // What a server killed mid-snapshot leaves: a half-written object in `.partial`.
    let leftover = dir.join(".partial/snapshot-0123456789abcdef");
    std::fs::create_dir_all(leftover.join("tree/workspace")).expect("leftover");
    std::fs::write(leftover.join("tree/workspace/half"), "x").expect("leftover");
    let mut s = Server::start_in(dir.clone(), &[]);
    s.key = key;
    s.scratch = true;
    assert!(!leftover.exists(), "the leftover is removed at start");
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).expect("audit");
    assert!(
        audit.contains("state.partial_removed"),
        "and the removal is recorded"
    );
    let (_, v) = s.call("GET", "/v1/snapshots", None);
    let names: Vec<&str> = v["snapshots"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert_eq!(names, ["s1"], "{v}");
    let b = s.new_sandbox(json!({"from": "s1"}));
    let (_, out, _) = s.sh(&b, "cat /workspace/k");
    assert_eq!(out, "kept\n");
    let (st, _) = s.call("DELETE", "/v1/snapshots/s1", None);
    assert_eq!(st, 204);
    let (_, v) = s.call("GET", "/v1/snapshots", None);
    assert_eq!(v["snapshots"], json!([]));
    let (st, _) = s.call("DELETE", "/v1/snapshots/s1", None);
    assert_eq!(st, 404);
}

#[test]
fn the_cli_manages_volumes_and_snapshots_through_the_server() {
    let s = Server::start();
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
            .args(args)
            .env("CORDON_SERVER", &s.url)
            .env("CORDON_API_KEY", &s.key)
            .output()
            .expect("cordon");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = cli(&["volume", "create", "datasets", "--size", "10G"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = cli(&["volume", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("datasets") && out.contains(&(10u64 << 30).to_string()),
        "{out}"
    );
    let (code, id, err) = cli(&["sandbox", "create", "--volume", "datasets:/data"]);
    assert_eq!(code, 0, "{err}");
    let id = id.trim().to_string();
    let (code, out, err) = cli(&["snapshot", "create", &id, "--name", "n1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("frozen_ms"), "{out}");
    let (code, _, err) = cli(&["volume", "rm", "datasets"]);
    assert_eq!(code, 1);
    assert!(err.contains("409") && err.contains(&id), "{err}");
    let (code, out, err) = cli(&["sandbox", "fork", &id, "--count", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.contains("not carried"), "{err}");
    let (code, _, err) = cli(&["snapshot", "rm", "n1"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cli(&["sandbox", "pause", &id, "--to-disk"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("paused (disk)") && err.contains("memory and processes are not"),
        "{out}{err}"
    );
    let (code, _, err) = cli(&["sandbox", "pause", &id]);
    assert_eq!(code, 1, "already paused");
    assert!(err.contains("409"), "{err}");
    let (code, out, err) = cli(&["sandbox", "resume", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("{id} running"));
}

#[test]
fn a_volume_mounted_inside_the_workspace_is_shared_not_copied_into_a_snapshot() {
    let s = Server::start();
    let (st, v) = s.call("POST", "/v1/volumes", Some(json!({"name": "inner"})));
    assert_eq!(st, 201, "{v}");
    let a = s.new_sandbox(json!({"volumes": [{"name": "inner", "path": "/workspace/vol"}]}));
    s.sh(
        &a,
        "echo in-volume > /workspace/vol/v.txt; echo own > /workspace/own.txt",
    );
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "around"})),
    );
    assert_eq!(st, 201, "{v}");
    assert!(
        v["skipped"].to_string().contains("/workspace/vol"),
        "the mount point is named as not carried: {v}"
    );
    let b = s.new_sandbox(json!({"from": "around"}));
    let (_, out, _) = s.sh(&b, "cat /workspace/own.txt; ls -A /workspace/vol");
    assert_eq!(
        out, "own\n",
        "the snapshot holds the sandbox's own files, not the volume's"
    );
}

/// Moments (ms after the request is sent) at which a `kill -9` campaign cuts the server: a few
/// fixed ones (at once, early, late) and random ones between, `CORDON_KILL9_ROUNDS` in all (6
/// by default; `scripts/kill9-campaign.sh` runs 20). The seed is printed: `CORDON_KILL9_SEED`
/// replays a run.
fn kill9_delays(what: &str) -> Vec<u64> {
    let rounds: usize = std::env::var("CORDON_KILL9_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
        .max(3);
    let seed: u64 = std::env::var("CORDON_KILL9_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("kill -9 campaign ({what}): {rounds} rounds, CORDON_KILL9_SEED={seed}");
    let mut x = seed | 1;
    let mut v = vec![0, 3, 800];
    while v.len() < rounds {
        // xorshift: a spread of moments, reproducible from the seed.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x % 600);
    }
    v
}

/// After a restart that followed a `kill -9`: nothing partial left, and no sandbox of the
/// previous server still counted as running.
fn nothing_half_done(s: &Server, dir: &Path, round: usize) {
    let partial = dir.join(".partial");
    assert_eq!(
        std::fs::read_dir(&partial).map(|d| d.count()).unwrap_or(0),
        0,
        "round {round}: partial work left in {}",
        partial.display()
    );
    let (_, v) = s.call("GET", "/v1/sandboxes", None);
    for x in v["sandboxes"].as_array().expect("list") {
        assert_ne!(
            x["state"], "running",
            "round {round}: a sandbox of the killed server runs: {x}"
        );
    }
}

/// A `kill -9` campaign: in each round a server on `dir` (the first makes the key, the later
/// ones reuse it), `start` prepares a sandbox and names the request to cut (a path and its
/// body), which is sent while the server is killed the round's moment later; then a new server
/// on `dir` is checked to have left nothing half done and handed to `after`.
fn kill9_campaign(
    what: &str,
    tag: &str,
    mut start: impl FnMut(&Server, usize) -> (String, Value),
    mut after: impl FnMut(&Server, usize, u64),
) {
    let dir = temp_dir(tag);
    let mut key = String::new();
    for (round, delay_ms) in kill9_delays(what).into_iter().enumerate() {
        let mut s = Server::start_in(dir.clone(), &[]);
        if round == 0 {
            key = s.key.clone();
        } else {
            s.key = key.clone();
        }
        let (path, body) = start(&s, round);
        let (url, k) = (s.url.clone(), key.clone());
        let t = std::thread::spawn(move || {
            let _ = ureq::post(&format!("{url}{path}"))
                .set("Authorization", &format!("Bearer {k}"))
                .send_json(body);
        });
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.kill9();
        let _ = t.join();
        drop(s);

        let mut s = Server::start_in(dir.clone(), &[]);
        s.key = key.clone();
        nothing_half_done(&s, &dir, round);
        after(&s, round, delay_ms);
        drop(s);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sandbox holding `files` files of 64 KiB in `/workspace/m`.
fn sandbox_with_files(s: &Server, files: u32) -> String {
    let a = s.new_sandbox(json!({"disk": "256M"}));
    let (code, _, err) = s.sh(
        &a,
        &format!("mkdir -p /workspace/m && for i in $(seq 1 {files}); do head -c 65536 /dev/urandom > /workspace/m/$i; done"),
    );
    assert_eq!(code, 0, "{err}");
    a
}

/// `kill -9` of the server at random moments of a fork: after the restart nothing partial is
/// left, the parent and any fork made ended with the server, and a fork of a new sandbox works.
#[test]
fn a_fork_cut_by_kill_9_leaves_nothing_half_made() {
    kill9_campaign(
        "fork",
        "forkcut",
        |s, _| {
            let a = sandbox_with_files(s, 100);
            (format!("/v1/sandboxes/{a}/fork"), json!({"count": 4}))
        },
        |s, round, _| {
            let b = s.new_sandbox(json!({"disk": "256M"}));
            s.sh(&b, "echo f > /workspace/f");
            let (st, v) = s.call(
                "POST",
                &format!("/v1/sandboxes/{b}/fork"),
                Some(json!({"count": 2})),
            );
            assert_eq!(st, 201, "round {round}: {v}");
            for f in v["sandboxes"].as_array().expect("forks") {
                let id = f["id"].as_str().expect("id");
                assert_eq!(s.sh(id, "cat /workspace/f").1, "f\n");
                s.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
            }
            s.call("DELETE", &format!("/v1/sandboxes/{b}"), None);
        },
    );
}

/// `kill -9` of the server at random moments while a sandbox writes into a volume: after the
/// restart the volume is listed, mounts, and holds every file that was complete before the
/// cut (each written to a temp name and renamed), none half-written.
#[test]
fn a_volume_written_when_the_server_is_killed_keeps_every_whole_file() {
    kill9_campaign(
        "volume write",
        "volcut",
        |s, round| {
            if round == 0 {
                let (st, v) = s.call(
                    "POST",
                    "/v1/volumes",
                    Some(json!({"name": "cut", "size": "256M"})),
                );
                assert_eq!(st, 201, "{v}");
            }
            let a = s.new_sandbox(json!({"volumes": [{"name": "cut", "path": "/data"}]}));
            let script = format!(
                "mkdir -p /data/r{round} && for i in $(seq 1 400); do head -c 16384 /dev/urandom > /data/r{round}/.$i && mv /data/r{round}/.$i /data/r{round}/$i; done"
            );
            (format!("/v1/sandboxes/{a}/exec"), json!({ "cmd": script }))
        },
        |s, round, delay_ms| {
            let (_, v) = s.call("GET", "/v1/volumes", None);
            assert_eq!(v["volumes"][0]["name"], "cut", "round {round}: {v}");
            assert_eq!(
                v["volumes"][0]["mounted_by"],
                json!([]),
                "round {round}: {v}"
            );
            let b = s.new_sandbox(json!({"volumes": [{"name": "cut", "path": "/data"}]}));
            let (code, out, err) = s.sh(
                &b,
                &format!("cd /data/r{round} 2>/dev/null || exit 0; for f in [0-9]*; do [ -e \"$f\" ] || continue; [ $(stat -c %s \"$f\") = 16384 ] || echo \"short $f\"; done; ls | grep -vc '^\\.' || true"),
            );
            assert_eq!(code, 0, "{err}");
            assert!(
                !out.contains("short"),
                "round {round}: a renamed file is whole: {out}"
            );
            eprintln!(
                "kill -9 after {delay_ms} ms: {} whole files",
                out.lines().last().unwrap_or("0")
            );
            s.call("DELETE", &format!("/v1/sandboxes/{b}"), None);
        },
    );
}

/// `kill -9` of the server at several moments of a snapshot: after the restart the snapshot
/// is whole (and restores every file) or absent, and nothing partial is left on disk.
#[test]
fn a_snapshot_cut_by_kill_9_is_whole_or_absent_after_restart() {
    kill9_campaign(
        "snapshot",
        "kill9",
        |s, round| {
            let a = sandbox_with_files(s, 200);
            (
                format!("/v1/sandboxes/{a}/snapshots"),
                json!({ "name": format!("cut{round}") }),
            )
        },
        |s, round, delay_ms| {
            let name = format!("cut{round}");
            let (_, v) = s.call("GET", "/v1/snapshots", None);
            let listed = v["snapshots"]
                .as_array()
                .expect("list")
                .iter()
                .any(|x| x["name"] == name.as_str());
            eprintln!(
                "kill -9 after {delay_ms} ms: snapshot {}",
                if listed { "whole" } else { "absent" }
            );
            if listed {
                let b = s.new_sandbox(json!({"from": name, "disk": "256M"}));
                let (_, out, _) = s.sh(&b, "ls /workspace/m | wc -l");
                assert_eq!(
                    out.trim(),
                    "200",
                    "round {round}: a listed snapshot is whole"
                );
            }
        },
    );
}

/// A key of the server on `dir` that may run one sandbox at a time.
fn one_slot_key(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args([
            "keys",
            "create",
            "--name",
            "one",
            "--max-sandboxes",
            "1",
            "--data-dir",
        ])
        .arg(dir)
        .output()
        .expect("cordon keys create");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What `paused/` under the data directory holds (the files of sandboxes paused to disk).
fn paused_entries(dir: &Path) -> usize {
    regular_files(&dir.join("paused")).len()
}

#[test]
fn a_sandbox_paused_to_disk_gives_up_its_slot_and_comes_back_with_its_files_and_a_new_boot() {
    let dir = temp_dir("todisk");
    let mut s = Server::start_in(dir.clone(), &[]);
    s.scratch = true;
    s.key = one_slot_key(&dir);
    let a = s.new_sandbox(json!({}));
    let (code, _, err) = s.sh(
        &a,
        "echo w > /workspace/w && echo h > ~/h && echo t > /tmp/t",
    );
    assert_eq!(code, 0, "{err}");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        Some(json!({"cmd": ["sleep", "1000"], "background": true})),
    );
    assert!(st < 300, "{v}");
    let procs = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '";
    assert!(
        s.sh(&a, procs).1.contains("sleep 1000"),
        "it runs before the pause"
    );
    let (_, boot, _) = s.sh(&a, "cat /proc/sys/kernel/random/boot_id");
    let host_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    assert_ne!(boot, host_boot, "a sandbox has a boot id of its own");

    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/pause"),
        Some(json!({"keep_memory": false})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["state"].as_str(), v["paused_by"].as_str()),
        (Some("paused"), Some("disk")),
        "{v}"
    );
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{a}"), None);
    assert_eq!(
        (v["state"].as_str(), v["paused_by"].as_str()),
        (Some("paused"), Some("disk")),
        "{v}"
    );
    let (_, v) = s.call("GET", "/v1/sandboxes", None);
    assert!(
        v["sandboxes"]
            .as_array()
            .expect("list")
            .iter()
            .any(|x| x["id"] == a.as_str() && x["state"] == "paused"),
        "listed as paused: {v}"
    );
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        Some(json!({"cmd": "true"})),
    );
    assert_ne!(st, 200, "nothing runs in a sandbox paused to disk");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/pause"),
        Some(json!({"keep_memory": false})),
    );
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (409, Some("already_paused")),
        "{v}"
    );
    assert!(paused_entries(&dir) > 0, "its files are on disk");

    // Its slot is free: the one-sandbox key can make another now.
    let b = s.new_sandbox(json!({}));
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{a}/resume"), None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (429, Some("quota_exceeded")),
        "a resume needs the slot back: {v}"
    );
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{b}"), None);
    assert_eq!(st, 204);

    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{a}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["id"].as_str(), v["state"].as_str()),
        (Some(a.as_str()), Some("running")),
        "{v}"
    );
    let (_, out, _) = s.sh(&a, "cat /workspace/w ~/h /tmp/t");
    assert_eq!(out, "w\nh\nt\n", "its files came back");
    let (_, after, _) = s.sh(&a, "cat /proc/sys/kernel/random/boot_id");
    assert_ne!(after, boot, "a resume from disk is a new boot");
    let (_, ps, _) = s.sh(&a, procs);
    assert!(
        !ps.contains("sleep 1000"),
        "no process of before runs: {ps}"
    );
    assert_eq!(
        paused_entries(&dir),
        0,
        "the copy is gone once it runs again"
    );

    // Deleted while paused to disk: its files go, and it is gone.
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/pause"),
        Some(json!({"keep_memory": false})),
    );
    assert_eq!(st, 200);
    let (st, _) = s.call("DELETE", &format!("/v1/sandboxes/{a}"), None);
    assert_eq!(st, 204);
    assert_eq!(paused_entries(&dir), 0);
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{a}"), None);
    assert_eq!(v["state"], "deleted", "{v}");
    let (st, _) = s.call("POST", &format!("/v1/sandboxes/{a}/resume"), None);
    assert_eq!(st, 404);
}

#[test]
fn paused_sandboxes_survive_kill_9_of_the_server_and_resume_with_their_files() {
    let dir = temp_dir("pausekill");
    let mut s = Server::start_in(dir.clone(), &[]);
    let key = s.key.clone();
    let other = second_key(&dir);
    // Frozen with memory kept; paused to disk; and one left running.
    let frozen = s.new_sandbox(json!({}));
    s.sh(&frozen, "echo frozen > /workspace/f");
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{frozen}/pause"), None);
    assert_eq!(st, 200, "{v}");
    assert_ne!(v["paused_by"], "disk", "memory kept: {v}");
    let on_disk = s.new_sandbox(json!({"metadata": {"k": "v"}}));
    s.sh(&on_disk, "echo disk > ~/d");
    let (st, _) = s.call(
        "POST",
        &format!("/v1/sandboxes/{on_disk}/pause"),
        Some(json!({"keep_memory": false})),
    );
    assert_eq!(st, 200);
    let running = s.new_sandbox(json!({}));
    s.kill9();
    drop(s);

    let mut s = Server::start_in(dir.clone(), &[]);
    s.key = key;
    s.scratch = true;
    for id in [&frozen, &on_disk] {
        let (_, v) = s.call("GET", &format!("/v1/sandboxes/{id}"), None);
        assert_eq!(
            (v["state"].as_str(), v["paused_by"].as_str()),
            (Some("paused"), Some("disk")),
            "{v}"
        );
        // Another key can neither see, resume nor delete it.
        for (m, p) in [("GET", ""), ("POST", "/resume"), ("DELETE", "")] {
            let (st, _) = s.as_key(&other, m, &format!("/v1/sandboxes/{id}{p}"), None);
            assert_eq!(st, 404, "{m} {p} by another key");
        }
    }
    let (_, v) = s.call("GET", &format!("/v1/sandboxes/{running}"), None);
    assert_eq!(
        v["state"], "reaped",
        "a running sandbox ends with the server, as before: {v}"
    );
    let (_, v) = s.call("GET", "/v1/sandboxes?metadata.k=v", None);
    let ids: Vec<&str> = v["sandboxes"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|x| x["id"].as_str())
        .collect();
    assert_eq!(ids, [on_disk.as_str()], "labels still filter: {v}");

    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{frozen}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.sh(&frozen, "cat /workspace/f").1, "frozen\n");
    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{on_disk}/resume"), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["metadata"]["k"], "v", "{v}");
    assert_eq!(s.sh(&on_disk, "cat ~/d").1, "disk\n");
    assert_eq!(paused_entries(&dir), 0);
}

/// `kill -9` of the server at several moments of a pause to disk: after the restart the
/// sandbox is paused to disk with every file, or ended as a running one is — never half.
#[test]
fn a_pause_to_disk_cut_by_kill_9_is_whole_or_absent_after_restart() {
    let id = std::cell::RefCell::new(String::new());
    kill9_campaign(
        "pause",
        "pausecut",
        |s, _| {
            let a = sandbox_with_files(s, 200);
            *id.borrow_mut() = a.clone();
            (
                format!("/v1/sandboxes/{a}/pause"),
                json!({"keep_memory": false}),
            )
        },
        |s, round, delay_ms| {
            let a = id.borrow().clone();
            let (_, v) = s.call("GET", &format!("/v1/sandboxes/{a}"), None);
            let state = v["state"].as_str().unwrap_or("").to_string();
            eprintln!("kill -9 after {delay_ms} ms: {state}");
            match state.as_str() {
                "paused" => {
                    let (st, v) = s.call("POST", &format!("/v1/sandboxes/{a}/resume"), None);
                    assert_eq!(st, 200, "{v}");
                    let (_, out, _) = s.sh(&a, "ls /workspace/m | wc -l");
                    assert_eq!(
                        out.trim(),
                        "200",
                        "round {round}: a paused sandbox is whole"
                    );
                    s.call("DELETE", &format!("/v1/sandboxes/{a}"), None);
                }
                "reaped" => assert_eq!(
                    paused_entries(&s.data_dir),
                    0,
                    "round {round}: nothing of it kept"
                ),
                other => panic!("round {round}: state {other}: {v}"),
            }
        },
    );
}

/// A file its program keeps appending to while the snapshot is taken: the processes are frozen
/// for the copy, so the snapshot holds the file as it stood at one moment — every line whole —
/// and the writer runs on after it.
#[test]
fn a_file_growing_during_a_snapshot_is_copied_as_it_stood_at_one_moment() {
    let s = Server::start();
    let a = s.new_sandbox(json!({"disk": "256M"}));
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/exec"),
        Some(json!({"cmd": "while :; do echo 0123456789abcdef >> /workspace/grow; done", "background": true})),
    );
    assert!(st == 200 || st == 201 || st == 202, "{v}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let size = |id: &str| {
        s.sh(id, "stat -c %s /workspace/grow")
            .1
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
    };
    let first = size(&a);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(size(&a) > first, "the writer runs");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{a}/snapshots"),
        Some(json!({"name": "growing"})),
    );
    assert_eq!(st, 201, "{v}");
    assert!(v["frozen_ms"].as_u64().is_some(), "{v}");
    let b = s.new_sandbox(json!({"from": "growing", "disk": "256M"}));
    let (_, out, _) = s.sh(
        &b,
        "wc -l < /workspace/grow; grep -cvx 0123456789abcdef /workspace/grow; tail -c 1 /workspace/grow | od -An -c",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines
            .first()
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
            > 0,
        "{out}"
    );
    assert_eq!(
        lines.get(1).map(|l| l.trim()),
        Some("0"),
        "every line whole: {out}"
    );
    assert_eq!(
        lines.get(2).map(|l| l.trim()),
        Some("\\n"),
        "it ends at a line's end: {out}"
    );
    // The writer was thawed: the parent's file grows on.
    let before = size(&a);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(size(&a) > before, "the writer runs on after the snapshot");
}

/// A million and one empty files: the snapshot stops at its entry limit (1,000,000) with an
/// error that says so, leaves nothing partial, and the sandbox runs on. Slow (about a minute):
/// run by `scripts/kill9-campaign.sh`, not in every CI run.
#[test]
#[ignore]
fn a_snapshot_of_a_million_and_one_files_is_refused_by_its_entry_limit() {
    let dir = temp_dir("million");
    let mut s = Server::start_in(dir.clone(), &[]);
    s.scratch = true;
    let a = s.new_sandbox(json!({"disk": "3G", "memory": "4G", "ttl": 3600}));
    let (code, _, err) = s.sh(
        &a,
        "python3 -c \"\nimport os\nfor top in ('/workspace/m', '/tmp/m'):\n    for d in range(500):\n        p = '%s/%d' % (top, d)\n        os.makedirs(p)\n        for i in range(1001):\n            open('%s/%d' % (p, i), 'w').close()\n\"",
    );
    assert_eq!(code, 0, "{err}");
    // A million files take minutes to copy on a loaded machine.
    let res = s
        .req("POST", &format!("/v1/sandboxes/{a}/snapshots"))
        .timeout(std::time::Duration::from_secs(1800))
        .send_json(json!({"name": "million"}));
    let (st, v) = match res {
        Ok(r) => (r.status(), r.into_json::<Value>().unwrap_or_default()),
        Err(ureq::Error::Status(st, r)) => (st, r.into_json::<Value>().unwrap_or_default()),
        Err(e) => panic!("snapshot: {e}"),
    };
    assert_eq!(st, 507, "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("1000000"), "the limit is named: {msg}");
    assert_eq!(
        std::fs::read_dir(dir.join(".partial"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "nothing partial left"
    );
    let (_, v) = s.call("GET", "/v1/snapshots", None);
    assert_eq!(v["snapshots"], json!([]));
    assert_eq!(s.sh(&a, "echo alive").1, "alive\n");
}
