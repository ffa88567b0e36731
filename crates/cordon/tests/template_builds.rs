//! Template builds through the E2B door (the routes E2B's Template SDK uses), against a real
//! `cordon serve` on loopback: a build with COPY, ENV and RUN (and a start and a ready
//! command) succeeds, and a sandbox created from its alias sees the result; hostile input — an
//! uploaded archive with a `..` entry, an absolute entry, an entry written through a symlink
//! of the archive, an unknown step type, a huge step list, a COPY source outside the context —
//! is refused with a clear error and the host is untouched.
//!
//! The base image is made in the test (`cordon image build` from a busybox root); busybox
//! comes from scripts/test.sh's apt list; without it the test skips, except under `CI=true`.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod fixtures;
use fixtures::{busybox, Tmp};
mod serve;

/// `tbase:1` in `data`'s store: busybox, a user database with root and user.
fn build_base(bb: &Path, dir: &Path, data: &Path) {
    let ctx = dir.join("ctx");
    let root = ctx.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy(bb, root.join("bin/busybox")).unwrap();
    for tool in [
        "sh", "cat", "echo", "ls", "env", "test", "whoami", "ln", "readlink", "sleep", "mkdir",
        "chown", "stat", "id",
    ] {
        symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nuser:x:1000:\n").unwrap();
    std::fs::write(ctx.join(".dockerignore"), "rootfs\n").unwrap();
    std::fs::write(ctx.join("Dockerfile"), "FROM ./rootfs\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cordon"))
        .args(["image", "build", "-t", "tbase:1"])
        .arg(&ctx)
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .expect("cordon image build");
    assert!(
        out.status.success(),
        "build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An E2B control-plane call (`X-API-KEY`).
fn e2b(s: &serve::Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = ureq::request(method, &format!("{}{}", s.url, path))
        .set("X-API-KEY", &s.key)
        .timeout(Duration::from_secs(150));
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

/// A tar of `(name, kind, link target, contents)` with the names written raw (the tar crate's
/// own setters refuse `..` and absolute names: a hostile client's would not).
fn tar_of(entries: &[(&str, tar::EntryType, &str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(if *kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_size(data.len() as u64);
        let gnu = h.as_gnu_mut().expect("gnu header");
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_cksum();
        b.append(&h, data.as_bytes()).expect("append");
    }
    b.into_inner().expect("tar")
}

/// Requests a build of `name` and uploads `archive` as the files of hash `hash`; returns
/// (template id, build id).
fn request_and_upload(
    s: &serve::Server,
    name: &str,
    hash: &str,
    archive: &[u8],
) -> (String, String) {
    let (st, r) = e2b(s, "POST", "/v3/templates", Some(json!({"name": name})));
    assert_eq!(st, 202, "{r}");
    let tid = r["templateID"].as_str().expect("templateID").to_string();
    let bid = r["buildID"].as_str().expect("buildID").to_string();
    let (st, link) = e2b(s, "GET", &format!("/templates/{tid}/files/{hash}"), None);
    assert_eq!(st, 201, "{link}");
    let url = link["url"].as_str().expect("url");
    assert!(
        url.starts_with(&s.url),
        "an upload URL of the server's own: {url}"
    );
    let put = ureq::put(url).send_bytes(archive).expect("upload");
    assert_eq!(put.status(), 200);
    // The link works once.
    match ureq::put(url).send_bytes(archive) {
        Err(ureq::Error::Status(404, _)) => {}
        other => panic!("a used link must be refused: {other:?}"),
    }
    (tid, bid)
}

/// Polls a build until it ends; returns (status, the whole log, the reason).
fn wait_build(s: &serve::Server, tid: &str, bid: &str) -> (String, String, String) {
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut logs = String::new();
    let mut offset = 0;
    loop {
        let (st, v) = e2b(
            s,
            "GET",
            &format!("/templates/{tid}/builds/{bid}/status?logsOffset={offset}"),
            None,
        );
        assert_eq!(st, 200, "{v}");
        for e in v["logEntries"].as_array().expect("logEntries") {
            offset += 1;
            logs.push_str(e["message"].as_str().unwrap_or_default());
            logs.push('\n');
        }
        let status = v["status"].as_str().unwrap_or_default().to_string();
        if status == "ready" || status == "error" {
            let reason = v["reason"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            return (status, logs, reason);
        }
        assert!(Instant::now() < deadline, "the build did not end: {logs}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

const HASH_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

#[test]
fn a_template_built_with_copy_env_and_run_is_what_a_sandbox_from_its_alias_sees() {
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("ok");
    let data = t.0.join("data");
    build_base(&bb, &t.0, &data);
    let s = serve::Server::start_in(data, &[]);

    let archive = tar_of(&[
        ("files", tar::EntryType::Directory, "", ""),
        (
            "files/hello.txt",
            tar::EntryType::Regular,
            "",
            "from the context\n",
        ),
        ("files/link.txt", tar::EntryType::Symlink, "hello.txt", ""),
    ]);
    let (tid, bid) = request_and_upload(&s, "app:v1", HASH_A, &archive);
    let (st, r) = e2b(
        &s,
        "POST",
        &format!("/v2/templates/{tid}/builds/{bid}"),
        Some(json!({
            "fromImage": "tbase:1",
            "force": false,
            "steps": [
                {"type": "COPY", "args": ["files/*", "/opt/files/", "", ""], "filesHash": HASH_A, "force": false},
                {"type": "ENV", "args": ["GREETING", "hello \"world\" $HOME"], "force": false},
                {"type": "RUN", "args": ["echo \"$GREETING\" > /opt/out.txt && cat /opt/files/link.txt >> /opt/out.txt"], "force": false},
                // Two steps making the same layer (E2B's `make_symlink(..., force=True)` after
                // `make_symlink`): the store has it once, the next step's root stacks it twice.
                {"type": "RUN", "args": ["ln -s hello.txt /opt/files/again"], "force": false},
                {"type": "RUN", "args": ["ln -sf hello.txt /opt/files/again"], "force": false},
                {"type": "RUN", "args": ["mkdir /opt/u"], "force": false},
                {"type": "RUN", "args": ["whoami > /opt/u/who.txt", "user"], "force": false},
                {"type": "RUN", "args": ["whoami > /opt/root.txt"], "force": false},
                {"type": "WORKDIR", "args": ["/opt"], "force": false},
            ],
            "startCmd": "echo started > /tmp/started",
            "readyCmd": "test -f /tmp/started",
        })),
    );
    assert_eq!(st, 202, "{r}");
    let (status, logs, reason) = wait_build(&s, &tid, &bid);
    assert_eq!(status, "ready", "{reason}\n{logs}");
    assert!(logs.contains("RUN"), "the log names the steps: {logs}");

    // The alias exists (and the server's own `base` too); a stranger's name does not.
    assert_eq!(e2b(&s, "GET", "/templates/aliases/app", None).0, 200);
    assert_eq!(e2b(&s, "GET", "/templates/aliases/base", None).0, 200);
    assert_eq!(e2b(&s, "GET", "/templates/aliases/nope", None).0, 404);

    // A sandbox from the alias: the files, the env, the user's file, the start command ran.
    let (st, sb) = e2b(
        &s,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "app:v1"})),
    );
    assert_eq!(st, 201, "{sb}");
    let id = sb["sandboxID"].as_str().expect("sandboxID");
    let (st, out) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "cat /opt/out.txt /opt/u/who.txt /opt/root.txt /tmp/started; echo \"$GREETING\""})),
    );
    assert_eq!(st, 200, "{out}");
    assert_eq!(
        out["stdout"],
        "hello \"world\" $HOME\nfrom the context\nuser\nroot\nstarted\nhello \"world\" $HOME\n",
        "{out}\n{logs}"
    );

    // Tags: another name for the same build; a tag with a colon is refused.
    let (st, r) = e2b(
        &s,
        "POST",
        "/templates/tags",
        Some(json!({"target": "app:v1", "tags": ["stable"]})),
    );
    assert_eq!(st, 201, "{r}");
    assert_eq!(r["buildID"], bid.as_str());
    let (st, _) = e2b(
        &s,
        "POST",
        "/templates/tags",
        Some(json!({"target": "app:v1", "tags": ["app:"]})),
    );
    assert_eq!(st, 400);
    let (st, sb) = e2b(
        &s,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "app:stable"})),
    );
    assert_eq!(st, 201, "{sb}");
}

#[test]
fn hostile_builds_are_refused_by_name_and_leave_the_host_untouched() {
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("hostile");
    let data = t.0.join("data");
    build_base(&bb, &t.0, &data);
    let s = serve::Server::start_in(data, &[]);
    let outside = t.0.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let abs = format!("{}/abs-pwned", outside.display());
    let abs_rel = abs.trim_start_matches('/').to_string();

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            tar_of(&[(
                "../../../../../../../../tmp/dotdot-pwned",
                tar::EntryType::Regular,
                "",
                "x",
            )]),
            "has a `..` component",
        ),
        (
            tar_of(&[(abs.as_str(), tar::EntryType::Regular, "", "x")]),
            "is an absolute path",
        ),
        (
            tar_of(&[
                ("l", tar::EntryType::Symlink, outside.to_str().unwrap(), ""),
                ("l/link-pwned", tar::EntryType::Regular, "", "x"),
            ]),
            "lies below the symlink 'l'",
        ),
    ];
    for (n, (archive, want)) in cases.iter().enumerate() {
        let hash = format!("{:064x}", n + 1);
        let (tid, bid) = request_and_upload(&s, &format!("bad{n}"), &hash, archive);
        let (st, r) = e2b(
            &s,
            "POST",
            &format!("/v2/templates/{tid}/builds/{bid}"),
            Some(json!({
                "fromImage": "tbase:1",
                "steps": [{"type": "COPY", "args": [".", "/x/", "", ""], "filesHash": hash}],
            })),
        );
        assert_eq!(st, 202, "{r}");
        let (status, logs, reason) = wait_build(&s, &tid, &bid);
        assert_eq!(status, "error", "{logs}");
        assert!(reason.contains(want), "{want}: {reason}");
    }
    assert!(!Path::new("/tmp/dotdot-pwned").exists());
    assert!(!Path::new(&abs).exists());
    assert!(!outside.join("link-pwned").exists());
    assert!(!Path::new("/").join(&abs_rel).join("x").exists());

    // Refused before anything runs: an unknown step, a huge list, a source outside the context.
    let (st, r) = e2b(&s, "POST", "/v3/templates", Some(json!({"name": "steps"})));
    assert_eq!(st, 202, "{r}");
    let tid = r["templateID"].as_str().unwrap().to_string();
    let bid = r["buildID"].as_str().unwrap().to_string();
    let path = format!("/v2/templates/{tid}/builds/{bid}");
    let run = json!({"type": "RUN", "args": ["true"]});
    for (steps, want) in [
        (
            json!([{"type": "FETCH", "args": ["http://x"]}]),
            "unknown step type 'FETCH'",
        ),
        (Value::Array(vec![run; 1001]), "at most 1000"),
        (
            json!([{"type": "COPY", "args": ["../etc/passwd", "/x"], "filesHash": HASH_A}]),
            "`..` leaves the template's context",
        ),
        (
            json!([{"type": "COPY", "args": ["/etc/passwd", "/x"], "filesHash": HASH_A}]),
            "relative to the template's context",
        ),
        (
            json!([{"type": "ENV", "args": ["A", "1\nRUN touch /pwned"]}]),
            "one line",
        ),
    ] {
        let (st, r) = e2b(
            &s,
            "POST",
            &path,
            Some(json!({"fromImage": "tbase:1", "steps": steps})),
        );
        assert_eq!(st, 400, "{want}: {r}");
        let msg = r["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{want}: {msg}");
    }

    // A base image the store lacks: the build fails at once, saying so.
    let (st, _) = e2b(
        &s,
        "POST",
        &path,
        Some(json!({"fromImage": "ubuntu:22.04", "steps": [{"type": "RUN", "args": ["true"]}]})),
    );
    assert_eq!(st, 202);
    let (status, _, reason) = wait_build(&s, &tid, &bid);
    assert_eq!(status, "error");
    assert!(
        reason.contains("'ubuntu:22.04' is not in this server's image store"),
        "{reason}"
    );
}

/// Starts the build `tid`/`bid` from `tbase:1` with `steps` (and start/ready commands) and
/// waits for it to be ready.
fn build_ready(s: &serve::Server, tid: &str, bid: &str, body: Value) {
    let (st, r) = e2b(
        s,
        "POST",
        &format!("/v2/templates/{tid}/builds/{bid}"),
        Some(body),
    );
    assert_eq!(st, 202, "{r}");
    let (status, logs, reason) = wait_build(s, tid, bid);
    assert_eq!(status, "ready", "{reason}\n{logs}");
}

/// The server on `data` again, as the same key; `kill9`: the first one killed, not stopped.
fn restart(mut s: serve::Server, data: &Path, kill9: bool) -> serve::Server {
    let key = s.key.clone();
    if kill9 {
        s.kill9();
    }
    drop(s);
    let mut s = serve::Server::start_in(data.to_path_buf(), &[]);
    s.key = key;
    s
}

#[test]
fn a_built_template_its_listing_and_its_deletion_survive_a_server_restart() {
    use std::os::unix::fs::PermissionsExt;
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("restart");
    let data = t.0.join("data");
    build_base(&bb, &t.0, &data);
    let s = serve::Server::start_in(data.clone(), &[]);

    let archive = tar_of(&[("app.txt", tar::EntryType::Regular, "", "kept\n")]);
    let (tid, bid) = request_and_upload(&s, "keep:v1", HASH_A, &archive);
    build_ready(
        &s,
        &tid,
        &bid,
        json!({
            "fromImage": "tbase:1",
            "steps": [
                {"type": "COPY", "args": ["app.txt", "/opt/app.txt", "", ""], "filesHash": HASH_A},
                {"type": "RUN", "args": ["echo built >> /opt/app.txt"]},
            ],
            "startCmd": "echo started > /tmp/started",
            "readyCmd": "test -f /tmp/started",
        }),
    );
    // A second template, deleted before the restart; a third requested but never started.
    let (_, r) = e2b(&s, "POST", "/v3/templates", Some(json!({"name": "gone"})));
    let (gid, gbid) = (
        r["templateID"].as_str().expect("id").to_string(),
        r["buildID"].as_str().expect("build").to_string(),
    );
    build_ready(
        &s,
        &gid,
        &gbid,
        json!({"fromImage": "tbase:1", "steps": []}),
    );
    let (_, r) = e2b(&s, "POST", "/v3/templates", Some(json!({"name": "half"})));
    let (hid, hbid) = (
        r["templateID"].as_str().expect("id").to_string(),
        r["buildID"].as_str().expect("build").to_string(),
    );
    let (st, list) = e2b(&s, "GET", "/templates", None);
    assert_eq!(st, 200, "{list}");
    assert_eq!(list.as_array().map(Vec::len), Some(3), "{list}");
    assert_eq!(e2b(&s, "DELETE", "/templates/gone", None).0, 204);

    // Kept privately: the template's file 0600, its directories 0700.
    let key_dir = std::fs::read_dir(data.join("templates"))
        .expect("templates dir")
        .flatten()
        .next()
        .expect("a key's directory")
        .path();
    let file = key_dir.join(&tid).join("template.json");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&key_dir), 0o700);
    assert_eq!(mode(&key_dir.join(&tid)), 0o700);

    let s = restart(s, &data, false);

    // The listing as E2B's SDK reads it: the kept template and the cut one, not the deleted.
    let (st, list) = e2b(&s, "GET", "/templates", None);
    assert_eq!(st, 200, "{list}");
    let list = list.as_array().expect("a list").clone();
    let aliases: Vec<&str> = list
        .iter()
        .filter_map(|t| t["aliases"][0].as_str())
        .collect();
    assert_eq!(aliases, ["keep", "half"], "{list:?}");
    let keep = &list[0];
    assert_eq!(keep["templateID"], tid.as_str());
    assert_eq!(keep["buildID"], bid.as_str());
    assert_eq!(keep["buildStatus"], "ready");
    assert_eq!(keep["buildCount"], 1);
    for field in [
        "cpuCount",
        "memoryMB",
        "diskSizeMB",
        "public",
        "names",
        "createdAt",
        "updatedAt",
        "createdBy",
        "lastSpawnedAt",
        "spawnCount",
        "envdVersion",
    ] {
        assert!(keep.get(field).is_some(), "{field} in {keep}");
    }
    assert_eq!(
        e2b(&s, "GET", "/v2/templates", None)
            .1
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    // The build that never ran is an error now, saying why.
    let (_, v) = e2b(
        &s,
        "GET",
        &format!("/templates/{hid}/builds/{hbid}/status"),
        None,
    );
    assert_eq!(v["status"], "error", "{v}");
    assert!(
        v["reason"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the server stopped before this build finished"),
        "{v}"
    );
    // The finished build's log is still there.
    let (_, logs, _) = wait_build(&s, &tid, &bid);
    assert!(logs.contains("Build finished"), "{logs}");
    // The details, with the build.
    let (st, d) = e2b(&s, "GET", &format!("/templates/{tid}"), None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["builds"][0]["buildID"], bid.as_str(), "{d}");
    assert_eq!(d["builds"][0]["status"], "ready", "{d}");
    assert_eq!(e2b(&s, "GET", "/templates/gone", None).0, 404);
    assert_eq!(e2b(&s, "GET", "/templates/aliases/gone", None).0, 404);
    assert_eq!(e2b(&s, "GET", "/templates/aliases/keep", None).0, 200);

    // A sandbox from the alias, by tag and without: the image, the start command run.
    for name in ["keep:v1", "keep"] {
        let (st, sb) = e2b(&s, "POST", "/sandboxes", Some(json!({"templateID": name})));
        assert_eq!(st, 201, "{name}: {sb}");
        let id = sb["sandboxID"].as_str().expect("sandboxID");
        let (st, out) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "cat /opt/app.txt /tmp/started"})),
        );
        assert_eq!(st, 200, "{out}");
        assert_eq!(out["stdout"], "kept\nbuilt\nstarted\n", "{name}: {out}");
    }
    let (_, list) = e2b(&s, "GET", "/templates", None);
    assert_eq!(list[0]["spawnCount"], 2, "{list}");
    assert!(list[0]["lastSpawnedAt"].is_string(), "{list}");

    // Deleted after the restart: gone after the next one too, even when that is a crash.
    assert_eq!(e2b(&s, "DELETE", &format!("/templates/{tid}"), None).0, 204);
    let s = restart(s, &data, true);
    let (_, list) = e2b(&s, "GET", "/templates", None);
    let aliases: Vec<&str> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|t| t["aliases"][0].as_str())
        .collect();
    assert_eq!(aliases, ["half"], "{list}");
    let (st, _) = e2b(
        &s,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "keep:v1"})),
    );
    assert_eq!(st, 404);
    assert!(!key_dir.join(&tid).exists(), "its files are gone");
}

#[test]
fn copy_with_a_user_and_a_mode_gives_the_files_that_owner_and_mode_inside_the_sandbox() {
    let Some(bb) = busybox() else { return };
    let t = Tmp::new("chown");
    let data = t.0.join("data");
    build_base(&bb, &t.0, &data);
    let s = serve::Server::start_in(data, &[]);
    let archive = tar_of(&[
        (
            "tool.sh",
            tar::EntryType::Regular,
            "",
            "#!/bin/sh\necho tool ran\n",
        ),
        ("conf", tar::EntryType::Directory, "", ""),
        ("conf/a.ini", tar::EntryType::Regular, "", "a=1\n"),
    ]);
    let (tid, bid) = request_and_upload(&s, "owned", HASH_A, &archive);
    // E2B's SDK sends `copy(src, dest, user=..., mode=...)` as args [src, dest, user, mode].
    build_ready(
        &s,
        &tid,
        &bid,
        json!({
            "fromImage": "tbase:1",
            "steps": [
                {"type": "COPY", "args": ["tool.sh", "/srv/tool.sh", "user", "0750"], "filesHash": HASH_A},
                {"type": "COPY", "args": ["conf", "/srv/conf/", "user:user", ""], "filesHash": HASH_A},
                {"type": "COPY", "args": ["conf/a.ini", "/srv/other.ini", "1234:1234", "0640"], "filesHash": HASH_A},
                {"type": "COPY", "args": ["conf/a.ini", "/srv/plain.ini", "", "0600"], "filesHash": HASH_A},
            ],
        }),
    );
    let (st, sb) = e2b(
        &s,
        "POST",
        "/sandboxes",
        Some(json!({"templateID": "owned"})),
    );
    assert_eq!(st, 201, "{sb}");
    let id = sb["sandboxID"].as_str().expect("sandboxID");
    let (st, out) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": "id -u; cd /srv && stat -c '%n %u:%g %a' tool.sh conf conf/a.ini other.ini plain.ini; ./tool.sh; echo more >> conf/a.ini && cat conf/a.ini"})),
    );
    assert_eq!(st, 200, "{out}");
    // `user` (uid 1000, the sandbox's one user) owns them inside, with the mode asked for;
    // a user the sandbox does not have shows as nobody (one uid inside: README, Ownership) —
    // as root; a rootless store keeps no owners, so there it is the user's like the rest.
    let other = if rustix::process::geteuid().is_root() {
        "65534:65534"
    } else {
        "1000:1000"
    };
    assert_eq!(
        out["stdout"],
        format!("1000\ntool.sh 1000:1000 750\nconf 1000:1000 755\nconf/a.ini 1000:1000 644\nother.ini {other} 640\nplain.ini 1000:1000 600\ntool ran\na=1\nmore\n"),
        "{out}"
    );

    // A user the image does not have, or a mode that is not octal: refused before the build.
    let (_, r) = e2b(
        &s,
        "POST",
        "/v3/templates",
        Some(json!({"name": "badowner"})),
    );
    let (tid, bid) = (
        r["templateID"].as_str().expect("id").to_string(),
        r["buildID"].as_str().expect("build").to_string(),
    );
    for (args, want) in [
        (json!(["tool.sh", "/x", "$(id)", ""]), "a name or id"),
        (json!(["tool.sh", "/x", "", "u+x"]), "octal"),
    ] {
        let (st, r) = e2b(
            &s,
            "POST",
            &format!("/v2/templates/{tid}/builds/{bid}"),
            Some(
                json!({"fromImage": "tbase:1", "steps": [{"type": "COPY", "args": args, "filesHash": HASH_A}]}),
            ),
        );
        assert_eq!(st, 400, "{r}");
        assert!(
            r["message"].as_str().unwrap_or_default().contains(want),
            "{r}"
        );
    }
    let (st, r) = e2b(
        &s,
        "POST",
        &format!("/v2/templates/{tid}/builds/{bid}"),
        Some(
            json!({"fromImage": "tbase:1", "steps": [{"type": "COPY", "args": ["tool.sh", "/x", "ghost", ""], "filesHash": HASH_A}]}),
        ),
    );
    assert_eq!(st, 202, "{r}");
    let (status, _, reason) = wait_build(&s, &tid, &bid);
    assert_eq!(status, "error");
    assert!(reason.contains("unable to find user ghost"), "{reason}");
}
