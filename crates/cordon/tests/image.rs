//! `cordon image …` end to end: images built in the test with umoci from a busybox rootfs,
//! pushed with skopeo to Debian's docker-registry (the CNCF distribution registry) on a free
//! 127.0.0.1 port, pulled and imported by the real cordon binary. Some runs go through a
//! loopback TCP proxy that logs each request and cuts or stalls a blob download on purpose.
//!
//! The tools come from scripts/test.sh's apt list. A test whose tool is missing skips with a
//! message, except under `CI=true`, where it fails.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

fn have_all() -> bool {
    ["docker-registry", "umoci", "skopeo", "busybox", "htpasswd"]
        .iter()
        .all(|t| have(t))
}

static N: AtomicU64 = AtomicU64::new(0);

/// A temporary directory, removed (made writable first: layers keep their modes) on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!(
            "cordon-image-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        Tmp(p)
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
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cordon image ARGS… --data-dir DATA`, its output, and that it did not panic.
fn cordon(data: &Path, args: &[&str]) -> Output {
    let out = Command::new(cordon_bin())
        .arg("image")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .stdin(Stdio::null())
        .output()
        .expect("cordon");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "cordon panicked: {err}");
    out
}

fn ok_json(out: Output) -> Value {
    assert!(
        out.status.success(),
        "cordon failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// An OCI layout at `<dir>/oci` with tag `t`: a busybox layer, then a layer that deletes
/// /etc/greeting (a whiteout) and adds /etc/other; Env FOO=bar, Cmd /bin/sh, WorkingDir /w.
/// Returns the layout and its manifest digest.
fn build_image(dir: &Path) -> (PathBuf, String) {
    let oci = dir.join("oci");
    let bundle = dir.join("bundle");
    let layout = format!("{}:t", oci.display());
    run(Command::new("umoci").arg("init").arg("--layout").arg(&oci));
    run(Command::new("umoci").args(["new", "--image", &layout]));
    run(Command::new("umoci")
        .args(["unpack", "--rootless", "--image", &layout])
        .arg(&bundle));
    let root = bundle.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).expect("bin");
    std::fs::create_dir_all(root.join("etc")).expect("etc");
    let busybox = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("busybox");
    std::fs::copy(busybox, root.join("bin/busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    std::fs::write(root.join("etc/greeting"), "hello\n").expect("greeting");
    run(Command::new("umoci")
        .args(["repack", "--refresh-bundle", "--image", &layout])
        .arg(&bundle));
    std::fs::remove_file(root.join("etc/greeting")).expect("rm greeting");
    std::fs::write(root.join("etc/other"), "other\n").expect("other");
    run(Command::new("umoci")
        .args(["repack", "--refresh-bundle", "--image", &layout])
        .arg(&bundle));
    run(Command::new("umoci").args([
        "config",
        "--image",
        &layout,
        "--config.env",
        "FOO=bar",
        "--config.cmd",
        "/bin/sh",
        "--config.workingdir",
        "/w",
    ]));
    let index: Value =
        serde_json::from_slice(&std::fs::read(oci.join("index.json")).expect("index"))
            .expect("json");
    let digest = index["manifests"][0]["digest"]
        .as_str()
        .expect("digest")
        .to_string();
    (oci, digest)
}

/// The layer blobs of a layout's manifest, bottom first: (digest, size).
fn layers_of(oci: &Path, manifest: &str) -> Vec<(String, u64)> {
    let hex = manifest.trim_start_matches("sha256:");
    let m: Value = serde_json::from_slice(
        &std::fs::read(oci.join("blobs/sha256").join(hex)).expect("manifest"),
    )
    .expect("json");
    m["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| {
            (
                l["digest"].as_str().expect("digest").to_string(),
                l["size"].as_u64().expect("size"),
            )
        })
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// docker-registry on 127.0.0.1, killed on drop.
struct Registry {
    child: Child,
    port: u16,
    dir: Tmp,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// `auth` is the registry config's `auth:` section (YAML), if any.
    fn start(auth: &str) -> Registry {
        let dir = Tmp::new("registry");
        let port = free_port();
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
            dir.path().join("data").display()
        );
        let cfg = dir.path().join("config.yml");
        std::fs::write(&cfg, config).expect("config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child, port, dir }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes the layout's tag `t` as `name` (skopeo, plain HTTP).
    fn push(&self, oci: &Path, name: &str, creds: Option<&str>) {
        let mut cmd = Command::new("skopeo");
        cmd.args(["--insecure-policy", "copy", "--dest-tls-verify=false", "-q"]);
        if let Some(c) = creds {
            cmd.args(["--dest-creds", c]);
        }
        cmd.arg(format!("oci:{}:t", oci.display()))
            .arg(format!("docker://{}/{name}", self.host()))
            .env("TMPDIR", self.dir.path());
        run(&mut cmd);
    }

    /// The registry's copy of a blob on disk.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

fn htpasswd(dir: &Path, user: &str, password: &str) -> PathBuf {
    let out = run(Command::new("htpasswd").args(["-Bbn", user, password]));
    let p = dir.join("htpasswd");
    std::fs::write(&p, out.stdout).expect("htpasswd");
    p
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = [0u8; 64];
    let n = rustix::fs::lgetxattr(p, name, &mut buf).ok()?;
    Some(buf[..n].to_vec())
}

#[test]
fn pull_inspect_remove_and_prune() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("pull");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "team/app:v1", None);
    let data = work.path().join("data");
    let name = format!("{}/team/app:v1", reg.host());

    let pulled = ok_json(cordon(&data, &["pull", &name, "--json"]));
    assert_eq!(
        pulled["digest"],
        digest.as_str(),
        "the registry's manifest digest"
    );
    assert_eq!(pulled["reference"], name.as_str());
    assert_eq!(pulled["layers"].as_array().map(Vec::len), Some(2));

    // The store: private, content-addressed, each layer unpacked in its own directory with
    // the second layer's deletion stored as an overlayfs whiteout.
    let store = data.join("images");
    assert_eq!(mode(&store), 0o700);
    assert_eq!(mode(&store.join("index.json")), 0o600);
    let layers: Vec<String> = pulled["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| {
            l["diff_id"]
                .as_str()
                .expect("diff_id")
                .trim_start_matches("sha256:")
                .to_string()
        })
        .collect();
    let bottom = store.join("layers/sha256").join(&layers[0]);
    let top = store.join("layers/sha256").join(&layers[1]);
    assert_eq!(
        std::fs::read(bottom.join("etc/greeting")).expect("greeting"),
        b"hello\n"
    );
    assert_eq!(
        std::fs::read(top.join("etc/other")).expect("other"),
        b"other\n"
    );
    assert_eq!(
        xattr(&top.join("etc/greeting"), "user.overlay.whiteout").as_deref(),
        Some(&b"y"[..]),
        "the deletion is an overlayfs whiteout"
    );
    // Compressed layer blobs are not kept once unpacked; the manifest and config are.
    let blobs: Vec<_> = std::fs::read_dir(store.join("blobs/sha256"))
        .expect("blobs")
        .collect();
    assert_eq!(blobs.len(), 2, "manifest and config");

    let ls = ok_json(cordon(&data, &["ls", "--json"]));
    assert_eq!(ls[0]["names"][0], name.as_str());
    let text = String::from_utf8_lossy(&cordon(&data, &["ls"]).stdout).to_string();
    assert!(
        text.contains(&name) && text.contains(&digest[7..19]),
        "{text}"
    );

    let inspect = ok_json(cordon(&data, &["inspect", &name, "--json"]));
    assert_eq!(inspect["config"]["config"]["Env"][0], "FOO=bar");
    assert_eq!(inspect["config"]["config"]["Cmd"][0], "/bin/sh");
    assert_eq!(inspect["config"]["config"]["WorkingDir"], "/w");
    assert_eq!(inspect["layer_reports"][1]["whiteouts"], 1);
    // By digest prefix too.
    let by_digest = ok_json(cordon(&data, &["inspect", &digest[7..19], "--json"]));
    assert_eq!(by_digest["digest"], digest.as_str());

    // A second pull finds everything there: no blob is fetched again.
    let again = ok_json(cordon(&data, &["pull", &name, "--json"]));
    assert_eq!(again["digest"], digest.as_str());

    // rm drops the name and, nothing else using them, the layers.
    let rm = ok_json(cordon(&data, &["rm", &name, "--json"]));
    assert_eq!(rm[0]["deleted"][0], digest.as_str());
    assert!(
        !bottom.exists() && !top.exists(),
        "layers removed with their last image"
    );
    let ls = ok_json(cordon(&data, &["ls", "--json"]));
    assert_eq!(ls.as_array().map(Vec::len), Some(0));
    let out = cordon(&data, &["inspect", &name]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no image"));
    let pruned = ok_json(cordon(&data, &["prune", "--json"]));
    assert_eq!(pruned["layers"], 0);
    assert_eq!(
        std::fs::read_dir(store.join("blobs/sha256"))
            .expect("blobs")
            .count(),
        0,
        "prune left blobs"
    );
}

#[test]
fn import_docker_archive_oci_archive_and_layout() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("import");
    let (oci, digest) = build_image(work.path());
    let data = work.path().join("data");

    // The layout directory itself; its tag-only name is taken after the directory.
    let got = ok_json(cordon(
        &data,
        &["import", oci.to_str().expect("utf-8"), "--json"],
    ));
    assert_eq!(got[0]["digest"], digest.as_str());
    assert_eq!(got[0]["names"][0], "localhost/oci:t");

    // oci-archive, with --tag.
    let oa = work.path().join("app-oci.tar");
    run(Command::new("skopeo")
        .args(["--insecure-policy", "copy", "-q"])
        .arg(format!("oci:{}:t", oci.display()))
        .arg(format!("oci-archive:{}:v2", oa.display())));
    let got = ok_json(cordon(
        &data,
        &[
            "import",
            oa.to_str().expect("utf-8"),
            "--tag",
            "app:dev",
            "--json",
        ],
    ));
    assert_eq!(
        got[0]["digest"],
        digest.as_str(),
        "same manifest, same digest"
    );
    let names: Vec<&str> = got[0]["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"localhost/app-oci:v2"), "{names:?}");
    assert!(names.contains(&"docker.io/library/app:dev"), "{names:?}");

    // docker-archive (what `docker save` and `podman save` write), gzip-compressed.
    let da = work.path().join("app-docker.tar");
    run(Command::new("skopeo")
        .args(["--insecure-policy", "copy", "-q"])
        .arg(format!("oci:{}:t", oci.display()))
        .arg(format!(
            "docker-archive:{}:example.org/app:v3",
            da.display()
        )));
    run(Command::new("gzip").arg("-k").arg(&da));
    let gz = work.path().join("app-docker.tar.gz");
    let got = ok_json(cordon(
        &data,
        &["import", gz.to_str().expect("utf-8"), "--json"],
    ));
    assert_eq!(got[0]["names"][0], "example.org/app:v3");
    // The layers are the same content: shared with the images imported before.
    let first = ok_json(cordon(&data, &["inspect", "localhost/oci:t", "--json"]));
    let third = ok_json(cordon(&data, &["inspect", "example.org/app:v3", "--json"]));
    for i in 0..2 {
        assert_eq!(third["layers"][i]["diff_id"], first["layers"][i]["diff_id"]);
    }
    assert_eq!(third["config"]["config"]["Env"][0], "FOO=bar");
    let ls = ok_json(cordon(&data, &["ls", "--json"]));
    assert_eq!(ls.as_array().map(Vec::len), Some(2), "{ls}");

    // Not an image: a clear refusal.
    let junk = work.path().join("junk.tar");
    std::fs::write(&junk, vec![0u8; 4096]).expect("junk");
    let out = cordon(&data, &["import", junk.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither an OCI layout"));
}

#[test]
fn basic_auth_login_and_docker_config() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("auth");
    let (oci, digest) = build_image(work.path());
    let secret = format!("pw-{}", std::process::id());
    let hp = htpasswd(work.path(), "alice", &secret);
    let reg = Registry::start(&format!(
        "auth:\n  htpasswd:\n    realm: cordon-test\n    path: {}\n",
        hp.display()
    ));
    reg.push(&oci, "private/app:v1", Some(&format!("alice:{secret}")));
    let name = format!("{}/private/app:v1", reg.host());
    let data = work.path().join("data");
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).expect("home");

    let no_creds = |args: &[&str]| {
        let mut cmd = Command::new(cordon_bin());
        cmd.arg("image")
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .env("HOME", &home);
        cmd
    };
    let out = no_creds(&["pull", &name]).output().expect("pull");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("authentication failed") && err.contains("login"),
        "{err}"
    );

    let login = |password: &str| {
        let mut child = no_creds(&["login", &reg.host(), "-u", "alice", "--password-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("login");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(format!("{password}\n").as_bytes())
            .expect("write");
        child.wait_with_output().expect("login")
    };
    let wrong = login("not-the-password");
    assert_eq!(wrong.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("refused"));
    let right = login(&secret);
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    for out in [&wrong, &right] {
        let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        assert!(
            !String::from_utf8_lossy(&all).contains(&secret),
            "the password was printed"
        );
    }
    let auth_file = data.join("images/auth.json");
    assert_eq!(mode(&auth_file), 0o600);
    let pulled = ok_json(no_creds(&["pull", &name, "--json"]).output().expect("pull"));
    assert_eq!(pulled["digest"], digest.as_str());

    // Credentials from ~/.docker/config.json, with a fresh store and no cordon login.
    let data2 = work.path().join("data2");
    std::fs::create_dir_all(home.join(".docker")).expect(".docker");
    let b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(format!("alice:{secret}"))
    };
    std::fs::write(
        home.join(".docker/config.json"),
        format!(r#"{{"auths": {{"{}": {{"auth": "{b64}"}}}}}}"#, reg.host()),
    )
    .expect("config.json");
    let out = Command::new(cordon_bin())
        .args(["image", "pull", &name, "--json", "--data-dir"])
        .arg(&data2)
        .env("HOME", &home)
        .output()
        .expect("pull");
    let pulled = ok_json(out);
    assert_eq!(pulled["digest"], digest.as_str());
}

#[test]
fn a_blob_with_the_wrong_digest_is_refused() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("digest");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "app:v1", None);
    let layers = layers_of(&oci, &digest);
    // Flip bytes in the middle of the big layer in the registry's storage: it still serves
    // it under the old digest, with the old size.
    let blob = reg.blob_file(&layers[0].0);
    let mut bytes = std::fs::read(&blob).expect("blob");
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&blob, &bytes).expect("corrupt");
    let data = work.path().join("data");
    let out = cordon(&data, &["pull", &format!("{}/app:v1", reg.host())]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("digest mismatch") && err.contains(&layers[0].0),
        "{err}"
    );
    // Nothing of it was kept or unpacked, and no image was recorded.
    let store = data.join("images");
    assert_eq!(
        std::fs::read_dir(store.join("layers/sha256"))
            .expect("layers")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().contains(&layers[0].0[7..]))
            })
            .count(),
        0
    );
    assert!(!store
        .join("tmp")
        .join(format!("{}.partial", &layers[0].0[7..]))
        .exists());
    let ls = ok_json(cordon(&data, &["ls", "--json"]));
    assert_eq!(ls.as_array().map(Vec::len), Some(0));
}

/// A loopback TCP proxy in front of the registry that logs every request head and can cut
/// (or stall) the response to the first request whose head contains `target`, after `after`
/// bytes.
struct Proxy {
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
    plan: Arc<Mutex<Option<(String, usize, bool)>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let plan: Arc<Mutex<Option<(String, usize, bool)>>> = Arc::new(Mutex::new(None));
        let (log2, plan2) = (log.clone(), plan.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (log, plan) = (log2.clone(), plan2.clone());
                // Bytes of the current response still allowed through, when cutting.
                let cut: Arc<Mutex<Option<(usize, bool)>>> = Arc::new(Mutex::new(None));
                let (mut c_in, mut s_out) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let cut_c = cut.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    let mut head = Vec::new();
                    loop {
                        let n = match c_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        head.extend_from_slice(&buf[..n]);
                        while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                            let h = String::from_utf8_lossy(&head[..end]).to_string();
                            head.drain(..end + 4);
                            let mut p = plan.lock().expect("plan");
                            if let Some((target, after, stall)) = p.clone() {
                                if h.contains(&target) {
                                    *cut_c.lock().expect("cut") = Some((after, stall));
                                    *p = None;
                                }
                            }
                            log.lock().expect("log").push(h);
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        let n = match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let mut allowed = n;
                        let mut stop = None;
                        if let Some((left, stall)) = *cut.lock().expect("cut") {
                            if n >= left {
                                allowed = left;
                                stop = Some(stall);
                            }
                        }
                        if let Some((left, _)) = cut.lock().expect("cut").as_mut() {
                            *left = left.saturating_sub(allowed);
                        }
                        if c_out.write_all(&buf[..allowed]).is_err() {
                            break;
                        }
                        match stop {
                            Some(false) => {
                                let _ = c_out.shutdown(Shutdown::Both);
                                let _ = s_in.shutdown(Shutdown::Both);
                                return;
                            }
                            // Stall: hold the connection open without sending more.
                            Some(true) => {
                                std::thread::sleep(Duration::from_secs(120));
                                return;
                            }
                            None => {}
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Write);
                });
            }
        });
        Proxy { port, log, plan }
    }

    fn arm(&self, target: &str, after: usize, stall: bool) {
        *self.plan.lock().expect("plan") = Some((target.to_string(), after, stall));
    }

    fn requests_for(&self, target: &str) -> Vec<String> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|h| h.contains(target) && h.starts_with("GET"))
            .cloned()
            .collect()
    }
}

/// The `Range` a request head asks for: its first byte.
fn range_start(head: &str) -> Option<u64> {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("range: bytes=")
                .map(str::to_string)
        })
        .and_then(|r| r.trim_end_matches('-').parse().ok())
}

#[test]
fn an_interrupted_download_resumes_where_it_stopped() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("resume");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "app:v1", None);
    let (big, size) = layers_of(&oci, &digest)[0].clone();
    let proxy = Proxy::start(reg.port);
    let name = format!("127.0.0.1:{}/app:v1", proxy.port);

    // 1. The connection is cut after 300 kB: the same pull resumes with a Range request.
    let data = work.path().join("data");
    proxy.arm(&big, 300_000, false);
    let pulled = ok_json(cordon(&data, &["pull", &name, "--json"]));
    assert_eq!(pulled["digest"], digest.as_str());
    let gets = proxy.requests_for(&big);
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(range_start(&gets[0]), None);
    let from = range_start(&gets[1]).expect("the second request resumes");
    assert!(from > 100_000 && from < size, "resumed at {from} of {size}");

    // 2. The download stalls and cordon is killed: the next pull resumes from the partial
    //    file the first one left.
    let data = work.path().join("data2");
    proxy.arm(&big, 400_000, true);
    let mut first = Command::new(cordon_bin())
        .args(["image", "pull", &name, "--data-dir"])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pull");
    let partial = data
        .join("images/tmp")
        .join(format!("{}.partial", &big[7..]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) < 200_000 {
        assert!(Instant::now() < deadline, "the download never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mode(&partial), 0o600, "a download in progress is private");
    std::thread::sleep(Duration::from_millis(200));
    first.kill().expect("kill");
    first.wait().expect("wait");
    let kept = std::fs::metadata(&partial)
        .expect("the partial download is kept")
        .len();
    let before = proxy.requests_for(&big).len();
    let out = cordon(&data, &["pull", &name, "--json"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let pulled = ok_json(out);
    assert_eq!(pulled["digest"], digest.as_str());
    assert!(
        err.contains(&format!("resuming an interrupted download at byte {kept}")),
        "{err}"
    );
    let gets = proxy.requests_for(&big);
    assert_eq!(gets.len(), before + 1, "{gets:?}");
    assert_eq!(range_start(&gets[before]), Some(kept));
    assert!(!partial.exists());
}

#[test]
fn concurrent_pulls_fetch_each_layer_once() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("concurrent");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "app:v1", None);
    let proxy = Proxy::start(reg.port);
    let name = format!("127.0.0.1:{}/app:v1", proxy.port);
    let data = work.path().join("data");
    let pulls: Vec<Child> = (0..3)
        .map(|_| {
            Command::new(cordon_bin())
                .args(["image", "pull", &name, "--json", "--data-dir"])
                .arg(&data)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("pull")
        })
        .collect();
    for p in pulls {
        let out = p.wait_with_output().expect("wait");
        assert_eq!(ok_json(out)["digest"], digest.as_str());
    }
    for (layer, _) in layers_of(&oci, &digest) {
        let gets = proxy.requests_for(&layer);
        assert_eq!(gets.len(), 1, "{layer} fetched {} times", gets.len());
    }
    let ls = ok_json(cordon(&data, &["ls", "--json"]));
    assert_eq!(ls.as_array().map(Vec::len), Some(1));
}

#[test]
fn help_teaches() {
    let out = Command::new(cordon_bin())
        .args(["image", "pull", "--help"])
        .output()
        .expect("help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "--insecure-registry",
        "docker.io/library/python",
        "resumes",
        "--json",
        "--platform",
    ] {
        assert!(text.contains(want), "pull --help lacks {want}: {text}");
    }
}

/// A token service for the registry's `auth: token` mode (what Docker Hub, ghcr.io and
/// Harbor do): checks Basic credentials and answers with a JWT (RS256, signed with the
/// openssl CLI, its certificate in `x5c`) granting what was asked. Logs each request head.
struct TokenServer {
    port: u16,
    cert: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl TokenServer {
    fn start(dir: &Path, user: &str, password: &str) -> TokenServer {
        let key = dir.join("token-key.pem");
        let cert = dir.join("token-cert.pem");
        run(Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=cordon-test-token",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert));
        let der = run(Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert))
        .stdout;
        let x5c = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(der)
        };
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        let good = {
            use base64::Engine;
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )
        };
        let user = user.to_string();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                log2.lock().expect("log").push(head.clone());
                let authorized = head.lines().any(|l| {
                    l.to_ascii_lowercase().starts_with("authorization:") && l[14..].trim() == good
                });
                let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
                // scope=repository:NAME:ACTIONS (URL-encoded ':' as %3A)
                let scope = target
                    .split(['?', '&'])
                    .find_map(|kv| kv.strip_prefix("scope="))
                    .unwrap_or("")
                    .replace("%3A", ":")
                    .replace("%2F", "/")
                    .replace("%2C", ",");
                let mut parts = scope.splitn(3, ':');
                let (_, name, actions) = (
                    parts.next(),
                    parts.next().unwrap_or(""),
                    parts.next().unwrap_or(""),
                );
                let (status, body) = if !authorized {
                    (
                        "401 Unauthorized",
                        r#"{"details":"bad credentials"}"#.to_string(),
                    )
                } else {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "x5c": [x5c]});
                    let claims = serde_json::json!({
                        "iss": "cordon-test-issuer", "sub": user, "aud": "cordon-test-registry",
                        "exp": now + 300, "nbf": now - 10, "iat": now,
                        "jti": format!("{now}-{}", N.fetch_add(1, Ordering::SeqCst)),
                        "access": [{"type": "repository", "name": name,
                                    "actions": actions.split(',').filter(|a| !a.is_empty()).collect::<Vec<_>>()}],
                    });
                    let signing = format!(
                        "{}.{}",
                        b64url(header.to_string().as_bytes()),
                        b64url(claims.to_string().as_bytes())
                    );
                    let mut child = Command::new("openssl")
                        .args(["dgst", "-sha256", "-sign"])
                        .arg(&key)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("openssl");
                    child
                        .stdin
                        .take()
                        .expect("stdin")
                        .write_all(signing.as_bytes())
                        .expect("sign");
                    let sig = child.wait_with_output().expect("openssl").stdout;
                    let jwt = format!("{signing}.{}", b64url(&sig));
                    (
                        "200 OK",
                        serde_json::json!({"token": jwt, "expires_in": 300}).to_string(),
                    )
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TokenServer { port, cert, log }
    }
}

#[test]
fn bearer_token_auth() {
    if !have_all() || !have("openssl") {
        return;
    }
    let work = Tmp::new("token");
    let (oci, digest) = build_image(work.path());
    let secret = format!("tok-{}", std::process::id());
    let ts = TokenServer::start(work.path(), "alice", &secret);
    let reg = Registry::start(&format!(
        "auth:\n  token:\n    realm: http://127.0.0.1:{}/token\n    service: cordon-test-registry\n    issuer: cordon-test-issuer\n    rootcertbundle: {}\n",
        ts.port,
        ts.cert.display()
    ));
    reg.push(&oci, "private/app:v1", Some(&format!("alice:{secret}")));
    let name = format!("{}/private/app:v1", reg.host());
    let data = work.path().join("data");
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).expect("home");

    // Without credentials the token service refuses: a clear error.
    let out = Command::new(cordon_bin())
        .args(["image", "pull", &name, "--data-dir"])
        .arg(&data)
        .env("HOME", &home)
        .output()
        .expect("pull");
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication failed"));

    // login checks the credentials through the token exchange, then the pull uses them.
    let mut login = Command::new(cordon_bin())
        .args([
            "image",
            "login",
            &reg.host(),
            "-u",
            "alice",
            "--password-stdin",
            "--data-dir",
        ])
        .arg(&data)
        .env("HOME", &home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("login");
    login
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{secret}\n").as_bytes())
        .expect("write");
    let out = login.wait_with_output().expect("login");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = ts.log.lock().expect("log").len();
    let out = Command::new(cordon_bin())
        .args(["image", "pull", &name, "--json", "--data-dir"])
        .arg(&data)
        .env("HOME", &home)
        .output()
        .expect("pull");
    let pulled = ok_json(out);
    assert_eq!(pulled["digest"], digest.as_str());
    let asked: Vec<String> = ts.log.lock().expect("log")[before..].to_vec();
    assert!(
        asked
            .iter()
            .any(|h| h.contains("scope=repository%3Aprivate%2Fapp%3Apull")
                || h.contains("scope=repository:private/app:pull")),
        "no token asked for pulling private/app: {asked:?}"
    );
    assert!(
        asked
            .iter()
            .all(|h| h.contains("service=cordon-test-registry")),
        "{asked:?}"
    );
}

/// Adds to the layout a second manifest of the same layers for linux/arm64 (its config says
/// so, and `ARCH=arm64`) and an index of both, tagged `multi`. Returns (index, amd64 manifest,
/// arm64 manifest) digests.
fn make_multi_arch(oci: &Path, amd64: &str) -> (String, String, String) {
    let blob = |d: &str| {
        oci.join("blobs/sha256")
            .join(d.trim_start_matches("sha256:"))
    };
    let put = |bytes: &[u8]| -> (String, usize) {
        let tmp = write_blob(oci, bytes);
        let out = run(Command::new("sha256sum").arg(&tmp));
        let hex = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .expect("sha256sum")
            .to_string();
        std::fs::rename(&tmp, oci.join("blobs/sha256").join(&hex)).expect("blob");
        (format!("sha256:{hex}"), bytes.len())
    };
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(blob(amd64)).expect("m")).expect("json");
    let mut config: Value = serde_json::from_slice(
        &std::fs::read(blob(manifest["config"]["digest"].as_str().expect("config"))).expect("c"),
    )
    .expect("json");
    config["architecture"] = "arm64".into();
    config["variant"] = "v8".into();
    config["config"]["Env"] = serde_json::json!(["ARCH=arm64"]);
    let (cd, cn) = put(config.to_string().as_bytes());
    manifest["config"]["digest"] = cd.into();
    manifest["config"]["size"] = cn.into();
    let (arm, arm_n) = put(manifest.to_string().as_bytes());
    let amd_n = std::fs::metadata(blob(amd64)).expect("m").len();
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": amd64, "size": amd_n,
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": arm, "size": arm_n,
         "platform": {"architecture": "arm64", "os": "linux", "variant": "v8"}},
    ]});
    let (id, idn) = put(index.to_string().as_bytes());
    let top = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": id, "size": idn,
         "annotations": {"org.opencontainers.image.ref.name": "multi"}}]});
    std::fs::write(oci.join("index.json"), top.to_string()).expect("index.json");
    (id, amd64.to_string(), arm)
}

fn write_blob(dir: &Path, bytes: &[u8]) -> PathBuf {
    let p = dir.join(format!("tmp-{}", N.fetch_add(1, Ordering::SeqCst)));
    std::fs::write(&p, bytes).expect("write");
    p
}

#[test]
fn multi_arch_indexes_and_zstd_layers() {
    if !have_all() {
        return;
    }
    if std::env::consts::ARCH != "x86_64" && std::env::consts::ARCH != "aarch64" {
        eprintln!("SKIPPED: the test's index has amd64 and arm64 images only");
        return;
    }
    let work = Tmp::new("multi");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    // zstd-compressed layers.
    run(Command::new("skopeo")
        .args([
            "--insecure-policy",
            "copy",
            "-q",
            "--dest-tls-verify=false",
            "--dest-compress",
            "--dest-compress-format",
            "zstd",
        ])
        .arg(format!("oci:{}:t", oci.display()))
        .arg(format!("docker://{}/app:zstd", reg.host()))
        .env("TMPDIR", work.path()));
    let data = work.path().join("data");
    let z = ok_json(cordon(
        &data,
        &["pull", &format!("{}/app:zstd", reg.host()), "--json"],
    ));
    assert!(
        z["layers"][0]["media_type"]
            .as_str()
            .is_some_and(|m| m.ends_with("+zstd")),
        "{z}"
    );
    let inspect = ok_json(cordon(
        &data,
        &["inspect", &format!("{}/app:zstd", reg.host()), "--json"],
    ));
    assert_eq!(inspect["layer_reports"][1]["whiteouts"], 1);

    let (index, amd, arm) = make_multi_arch(&oci, &digest);
    run(Command::new("skopeo")
        .args([
            "--insecure-policy",
            "copy",
            "-q",
            "--all",
            "--dest-tls-verify=false",
        ])
        .arg(format!("oci:{}:multi", oci.display()))
        .arg(format!("docker://{}/multi:1", reg.host()))
        .env("TMPDIR", work.path()));
    let name = format!("{}/multi:1", reg.host());
    let host = ok_json(cordon(&data, &["pull", &name, "--json"]));
    let want = if std::env::consts::ARCH == "x86_64" {
        &amd
    } else {
        &arm
    };
    assert_eq!(
        host["digest"],
        want.as_str(),
        "the host's platform is picked"
    );
    assert_eq!(host["index_digest"], index.as_str());
    let other = ok_json(cordon(
        &data,
        &["pull", &name, "--platform", "linux/arm64", "--json"],
    ));
    assert_eq!(other["digest"], arm.as_str());
    assert_eq!(other["platform"], "linux/arm64/v8");
    let inspect = ok_json(cordon(&data, &["inspect", &arm, "--json"]));
    assert_eq!(inspect["config"]["config"]["Env"][0], "ARCH=arm64");
    let out = cordon(&data, &["pull", &name, "--platform", "linux/s390x"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no image for linux/s390x") && err.contains("linux/amd64"),
        "{err}"
    );
}

/// The server's image routes, against a real registry on loopback: a streamed pull reports
/// its layers and ends with the image, the list shows it, a plain (JSON) pull of the same
/// image finds every layer cached, and refusals (a malformed reference, a registry the
/// server was told not to pull from, no such image) are JSON errors with 4xx statuses.
#[test]
fn server_lists_and_pulls_images_with_progress() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("http");
    let (oci, digest) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "team/app:v1", None);
    let name = format!("{}/team/app:v1", reg.host());
    let srv = serve::Server::start_in(work.path().join("data"), &[]);

    let (status, list) = srv.call("GET", "/v1/images", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["images"], serde_json::json!([]));

    // Streamed: progress events as the pull goes, then `done`.
    let resp = srv
        .req("POST", "/v1/images/pull")
        .set("Accept", "text/event-stream")
        .send_json(serde_json::json!({"reference": name}))
        .expect("pull stream");
    assert!(resp
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let body = resp.into_string().expect("stream body");
    let events = sse_events(&body);
    let kinds: Vec<String> = events
        .iter()
        .filter(|(e, _)| e == "progress")
        .map(|(_, d)| d["event"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("resolved"),
        "{body}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "layer_done").count(),
        2,
        "{body}"
    );
    assert!(kinds.iter().any(|k| k == "layer_progress"), "{body}");
    let (last, result) = events.last().expect("events");
    assert_eq!(last, "done", "{body}");
    assert_eq!(result["reference"], name.as_str());
    assert_eq!(result["image"]["digest"], digest.as_str());
    assert_eq!(result["image"]["layers"], 2);
    let total: u64 = layers_of(&oci, &digest).iter().map(|(_, s)| s).sum();
    assert_eq!(result["image"]["size_bytes"], total);

    let (_, list) = srv.call("GET", "/v1/images", None);
    assert_eq!(list["images"][0]["digest"], digest.as_str(), "{list}");
    assert_eq!(list["images"][0]["names"][0], name.as_str());

    // The store is the node's: the CLI on the same data directory sees the same image.
    let ls = ok_json(cordon(&work.path().join("data"), &["ls", "--json"]));
    assert_eq!(ls[0]["digest"], digest.as_str(), "{ls}");

    // Again, as plain JSON: nothing to fetch.
    let (status, again) = srv.call(
        "POST",
        "/v1/images/pull",
        Some(serde_json::json!({"reference": name})),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["image"]["digest"], digest.as_str());

    for (body, want) in [
        (serde_json::json!({"reference": "Bad Name!"}), 400),
        (
            serde_json::json!({"reference": format!("{}/team/none:v1", reg.host())}),
            502,
        ),
        (serde_json::json!({"reference": name, "nope": 1}), 400),
        (serde_json::json!({}), 400),
    ] {
        let (status, err) = srv.call("POST", "/v1/images/pull", Some(body.clone()));
        assert_eq!(status, want, "{body} -> {err}");
        assert!(err["error"]["message"].is_string(), "{err}");
    }
    // A refusal found before any stream starts comes back as the JSON error, not a stream.
    let err = srv
        .req("POST", "/v1/images/pull")
        .set("Accept", "text/event-stream")
        .send_json(serde_json::json!({"reference": "Bad Name!"}))
        .expect_err("refused");
    match err {
        ureq::Error::Status(400, r) => {
            let v: Value = r.into_json().expect("json error");
            assert!(v["error"]["message"].is_string(), "{v}");
        }
        e => panic!("expected 400, got {e:?}"),
    }
    // A failure once streaming ends the stream with an `error` event.
    let body = srv
        .req("POST", "/v1/images/pull")
        .set("Accept", "text/event-stream")
        .send_json(serde_json::json!({"reference": format!("{}/team/none:v1", reg.host())}))
        .expect("stream")
        .into_string()
        .expect("body");
    let events = sse_events(&body);
    let (last, err) = events.last().expect("events");
    assert_eq!(last, "error", "{body}");
    assert_eq!(err["code"], "registry", "{body}");
    drop(srv);

    // An operator who names the registries: any other is refused before a connection.
    let data2 = work.path().join("data2");
    let srv = serve::Server::start_in(data2, &["--pull-from", "registry.example.invalid"]);
    let (status, err) = srv.call(
        "POST",
        "/v1/images/pull",
        Some(serde_json::json!({"reference": name})),
    );
    assert_eq!(status, 403, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--pull-from")),
        "{err}"
    );
}

/// `(event, data as JSON)` of each server-sent event in `body`.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event:") {
                    event = Some(e.trim().to_string());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            let event = event?;
            Some((event, serde_json::from_str(&data).unwrap_or(Value::Null)))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Sandboxes run from images (`--image`): the same busybox image, pulled from the loopback
// registry into a fresh store, run by the real binary — as root and as an unprivileged user.

/// `cordon run --json --data-dir DATA ARGS…`: its Outcome.
fn run_json_in(data: &Path, args: &[&str], stdin: Option<&Path>) -> Value {
    let mut cmd = Command::new(cordon_bin());
    cmd.args(["run", "--json", "--data-dir"]).arg(data);
    if let Some(f) = stdin {
        cmd.arg("--stdin").arg(f);
    }
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cordon run");
    ok_json(out)
}

fn stdout_of(o: &Value) -> &str {
    o["stdout"].as_str().unwrap_or("")
}

fn assert_exited_0(o: &Value) {
    assert_eq!(o["status"], "exited", "{o:#}");
    assert_eq!(o["exit_code"], 0, "{o:#}");
}

/// `build_image`'s image pushed to a loopback registry and pulled into `<work>/data`.
struct PulledImage {
    reg: Registry,
    work: Tmp,
    oci: PathBuf,
    reference: String,
    digest: String,
}

impl PulledImage {
    fn new() -> PulledImage {
        let work = Tmp::new("run");
        let (oci, digest) = build_image(work.path());
        let reg = Registry::start("");
        reg.push(&oci, "run/busybox:1", None);
        let reference = format!("{}/run/busybox:1", reg.host());
        ok_json(cordon(
            &work.path().join("data"),
            &["pull", &reference, "--json"],
        ));
        PulledImage {
            reg,
            work,
            oci,
            reference,
            digest,
        }
    }
    fn data(&self) -> PathBuf {
        self.work.path().join("data")
    }
    /// Changes the image's config with `umoci config ARGS…`, pushes it as `name` and pulls it.
    fn variant(&self, name: &str, args: &[&str]) -> String {
        let layout = format!("{}:t", self.oci.display());
        run(Command::new("umoci")
            .args(["config", "--image", &layout])
            .args(args));
        self.reg.push(&self.oci, name, None);
        let reference = format!("{}/{name}", self.reg.host());
        ok_json(cordon(&self.data(), &["pull", &reference, "--json"]));
        reference
    }
}

/// Everything about every entry of the store's unpacked layers: path, type, mode, owner,
/// size, content, symlink target and overlay xattrs.
fn store_snapshot(data: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            use std::hash::{Hash, Hasher};
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let mut h = std::collections::hash_map::DefaultHasher::new();
            if m.is_file() {
                std::fs::read(&p).expect("read").hash(&mut h);
            }
            let link = std::fs::read_link(&p).ok();
            let x = ["user.overlay.whiteout", "user.overlay.opaque"].map(|n| xattr(&p, n));
            out.push(format!(
                "{} {:o} {}:{} {} {:x} {:?} {:?} {}",
                p.strip_prefix(base).unwrap_or(&p).display(),
                m.mode(),
                m.uid(),
                m.gid(),
                m.size(),
                h.finish(),
                link,
                x,
                m.mtime()
            ));
            if m.is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let layers = data.join("images/layers");
    let mut out = Vec::new();
    walk(&layers, &layers, &mut out);
    out
}

#[test]
fn a_pulled_image_runs_with_its_config_honoured() {
    if !have_all() {
        return;
    }
    let img = PulledImage::new();
    let data = img.data();
    let r = img.reference.as_str();

    // Its Env and WorkingDir; the layers' deletion (a whiteout) holds; the sandbox user.
    let o = run_json_in(
        &data,
        &[
            "--image",
            r,
            "--",
            "/bin/sh",
            "-c",
            "echo $FOO; /bin/busybox pwd; /bin/busybox cat /etc/other; \
             test -e /etc/greeting || echo gone; /bin/busybox id -u; test -e /usr/bin/python3 || echo no-host",
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(
        stdout_of(&o),
        "bar\n/w\nother\ngone\n1000\nno-host\n",
        "{o:#}"
    );
    assert_eq!(o["image"]["reference"], r, "{o:#}");
    assert_eq!(o["image"]["digest"], img.digest.as_str(), "{o:#}");
    assert_eq!(o["enforcement"]["seccomp"], true, "{o:#}");
    assert_eq!(o["enforcement"]["user_ns"], true, "{o:#}");

    // --env on top of the image's Env; --cwd over its WorkingDir.
    let o = run_json_in(
        &data,
        &[
            "--image",
            r,
            "--env",
            "FOO=baz",
            "--cwd",
            "/tmp",
            "--",
            "/bin/sh",
            "-c",
            "echo $FOO; /bin/busybox pwd",
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "baz\n/tmp\n", "{o:#}");

    // No command: the image's Cmd (/bin/sh, reading the script on stdin).
    let script = img.work.path().join("script.sh");
    std::fs::write(&script, "echo from-cmd\n").expect("script");
    let o = run_json_in(&data, &["--image", r], Some(&script));
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "from-cmd\n", "{o:#}");

    // Entrypoint + Cmd; a given command replaces Cmd only. User root is the sandbox user,
    // who owns (in its writable layer) what the image's root owns.
    let e = img.variant(
        "run/entry:1",
        &[
            "--config.entrypoint",
            "/bin/busybox",
            "--config.entrypoint",
            "echo",
            "--config.cmd",
            "default-arg",
            "--config.user",
            "0:0",
        ],
    );
    let o = run_json_in(&data, &["--image", &e], None);
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "default-arg\n", "{o:#}");
    let o = run_json_in(&data, &["--image", &e, "--", "given"], None);
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "given\n", "{o:#}");
    let u = img.variant(
        "run/user:1",
        &["--clear=config.entrypoint", "--config.cmd", "/bin/sh"],
    );
    let o = run_json_in(
        &data,
        &[
            "--image",
            &u,
            "--",
            "/bin/sh",
            "-c",
            "/bin/busybox id -u; /bin/busybox stat -c %u /etc/other; echo changed > /etc/other && /bin/busybox cat /etc/other",
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "1000\n1000\nchanged\n", "{o:#}");

    // An image the store lacks: a clear refusal that says how to get it.
    let out = Command::new(cordon_bin())
        .args(["run", "--data-dir"])
        .arg(&data)
        .args(["--image", "nowhere/none:1", "--", "/bin/true"])
        .output()
        .expect("cordon run");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nowhere/none:1"), "{err}");
}

#[test]
fn sandboxes_of_one_image_share_no_writes_and_the_store_stays_unchanged() {
    if !have_all() {
        return;
    }
    let img = PulledImage::new();
    let data = img.data();
    let before = store_snapshot(&data);
    assert!(before.len() > 4, "{before:?}");
    // Every file of the image overwritten, its /bin removed, a directory's mode changed, a
    // new file at the top: all in the sandbox's own writable layer. (The shell runs from a
    // copy in /tmp, so that busybox itself can be overwritten too.)
    let attack = "for f in $(/tmp/busybox find / -xdev -type f); do echo pwned > \"$f\" || echo FAILED $f; done; \
                  /tmp/busybox chmod 777 /etc; /tmp/busybox rm -rf /bin; echo A > /etc/marker; \
                  /tmp/busybox cat /etc/other; /tmp/busybox ls /bin 2>&1 | /tmp/busybox head -c 0; echo done";
    let o = run_json_in(
        &data,
        &[
            "--image",
            &img.reference,
            "--",
            "/bin/sh",
            "-c",
            "/bin/busybox cp /bin/busybox /tmp/busybox && exec /tmp/busybox sh -c \"$0\"",
            attack,
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "pwned\ndone\n", "{o:#}");
    // A second sandbox of the same image sees none of it.
    let o = run_json_in(
        &data,
        &[
            "--image",
            &img.reference,
            "--",
            "/bin/sh",
            "-c",
            "/bin/busybox cat /etc/other; test -e /etc/marker || echo no-marker; /bin/busybox stat -c %a /etc",
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "other\nno-marker\n755\n", "{o:#}");
    assert_eq!(store_snapshot(&data), before, "the store changed");
}

/// A plain directory as the root, with what an attacker would plant in one: a setuid-root
/// binary (as root; rootless, only a setuid-to-self one can be made) and a device node (as
/// root only: an unprivileged user cannot make one).
#[test]
fn a_directory_runs_as_a_root_and_what_it_plants_grants_nothing() {
    if !have("busybox") {
        return;
    }
    let work = Tmp::new("dir");
    let root = work.path().join("rootfs");
    for d in ["bin", "etc", "sbin"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    let busybox = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("busybox");
    std::fs::copy(&busybox, root.join("bin/busybox")).expect("copy");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    // busybox picks its applet by its own name: the setuid copy is another `busybox`.
    let suid = root.join("sbin/busybox");
    std::fs::copy(&busybox, &suid).expect("copy");
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    assert_eq!(mode(&suid), 0o4755);
    std::fs::write(root.join("etc/greeting"), "hello\n").expect("greeting");
    let as_root = rustix::process::geteuid().is_root();
    if as_root {
        let mem = root.join("etc/mem");
        let made = Command::new("mknod")
            .arg(&mem)
            .args(["c", "1", "1"])
            .status();
        assert!(made.is_ok_and(|s| s.success()), "mknod");
    } else {
        eprintln!("SKIPPED (device node part): an unprivileged user cannot make a device node");
    }
    let dir = root.to_str().expect("utf-8 path");
    let o = run_json_in(
        work.path(),
        &[
            "--image",
            dir,
            "--",
            "/bin/sh",
            "-c",
            "/bin/busybox cat /etc/greeting; echo changed > /etc/greeting; /bin/busybox cat /etc/greeting; \
             /sbin/busybox grep -E '^(Uid|Gid):' /proc/self/status; /sbin/busybox id -u; \
             if test -e /etc/mem; then /bin/busybox head -c 16 /etc/mem >/dev/null 2>&1 && echo READ-MEM || echo mem-refused; fi",
        ],
        None,
    );
    assert_exited_0(&o);
    let out = stdout_of(&o);
    assert!(out.starts_with("hello\nchanged\n"), "{o:#}");
    let ids: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
        .collect();
    assert_eq!(ids.len(), 2, "{o:#}");
    for line in ids {
        let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
        assert_eq!(ids, ["1000"; 4], "setuid gave something: {line}");
    }
    assert!(out.contains("\n1000\n"), "{o:#}");
    assert!(!out.contains("READ-MEM"), "{o:#}");
    if as_root {
        assert!(out.contains("mem-refused"), "{o:#}");
    }
    assert_eq!(o["image"]["reference"], dir, "{o:#}");
    assert_eq!(o["image"]["digest"], Value::Null, "{o:#}");
    // The same root named by a profile.
    let profile = work.path().join("p.toml");
    std::fs::write(&profile, format!("image = \"{dir}\"\n")).expect("profile");
    let p = profile.to_str().expect("utf-8 path");
    let o = run_json_in(
        work.path(),
        &["--profile", p, "--", "/bin/busybox", "cat", "/etc/greeting"],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "hello\n", "{o:#}");
    assert_eq!(o["image"]["reference"], dir, "{o:#}");
    // The writable layer is capped by --disk, and filling it is reported like a full /tmp.
    let o = run_json_in(
        work.path(),
        &[
            "--image",
            dir,
            "--disk",
            "2M",
            "--",
            "/bin/sh",
            "-c",
            "/bin/busybox dd if=/dev/zero of=/etc/big bs=1M count=4 2>/dev/null || echo full",
        ],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "full\n", "{o:#}");
    assert_eq!(o["limits_hit"], serde_json::json!(["disk"]), "{o:#}");
    // Nothing reached the directory.
    assert_eq!(
        std::fs::read_to_string(root.join("etc/greeting")).expect("read"),
        "hello\n"
    );
    assert!(!root.join("etc/big").exists());
}

#[test]
fn the_server_creates_and_runs_from_images_it_has_and_refuses_others() {
    if !have_all() {
        return;
    }
    let img = PulledImage::new();
    let s = serve::Server::start_in(img.data(), &[]);
    let (status, created) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(serde_json::json!({"image": img.reference})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id");
    let (status, o) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(serde_json::json!({"cmd": ["/bin/sh", "-c", "echo $FOO; /bin/busybox pwd; /bin/busybox cat /etc/other"]})),
    );
    assert_eq!(status, 200, "{o}");
    assert_eq!(stdout_of(&o), "bar\n/w\nother\n", "{o:#}");
    assert_eq!(o["image"]["digest"], img.digest.as_str(), "{o:#}");

    let (status, o) = s.call(
        "POST",
        "/v1/run",
        Some(serde_json::json!({"image": img.reference, "cmd": ["/bin/sh", "-c", "echo $FOO"]})),
    );
    assert_eq!(status, 200, "{o}");
    assert_eq!(stdout_of(&o), "bar\n", "{o:#}");
    assert_eq!(o["image"]["reference"], img.reference.as_str(), "{o:#}");

    // Unknown images are refused, saying how to pull; host paths are not images for a client.
    for body in [
        serde_json::json!({"image": "nowhere/none:1"}),
        serde_json::json!({"image": "nowhere/none:1", "cmd": ["/bin/true"]}),
    ] {
        let path = if body.get("cmd").is_some() {
            "/v1/run"
        } else {
            "/v1/sandboxes"
        };
        let (status, e) = s.call("POST", path, Some(body));
        assert_eq!(status, 400, "{e}");
        assert!(e.to_string().contains("pull"), "{e}");
    }
    let (status, e) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(serde_json::json!({"image": "/etc"})),
    );
    assert_eq!(status, 400, "{e}");

    // A server that pulls on demand: a fresh store, the image fetched by the first request.
    let fresh = Tmp::new("serve-pull");
    let p = serve::Server::start_in(fresh.path().to_path_buf(), &["--image-pull", "missing"]);
    let (status, o) = p.call(
        "POST",
        "/v1/run",
        Some(serde_json::json!({"image": img.reference, "cmd": ["/bin/sh", "-c", "echo $FOO"]})),
    );
    assert_eq!(status, 200, "{o}");
    assert_eq!(stdout_of(&o), "bar\n", "{o:#}");
    assert_eq!(o["image"]["digest"], img.digest.as_str(), "{o:#}");
    assert!(fresh.path().join("images/index.json").is_file());
}

/// The escape suite's cases that apply to an image root (busybox has no Python): the root
/// being the image's own hands back none of what the host root took away.
#[test]
fn an_image_root_hands_back_nothing_the_sandbox_took_away() {
    if !have("busybox") {
        return;
    }
    let work = Tmp::new("escape");
    let root = work.path().join("rootfs");
    std::fs::create_dir_all(root.join("bin")).expect("mkdir");
    let busybox = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("busybox");
    std::fs::copy(&busybox, root.join("bin/busybox")).expect("copy");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    // Something of the host's that must stay out of reach.
    let secret = work.path().join("host-secret");
    std::fs::write(&secret, "s3cret\n").expect("secret");
    let dir = root.to_str().expect("utf-8 path");
    let script = format!(
        "b=/bin/busybox; \
         $b mount -t tmpfs x /tmp 2>/dev/null && echo MOUNTED; \
         $b mount --bind / /tmp 2>/dev/null && echo BOUND; \
         $b unshare -U -r true 2>/dev/null && echo USERNS; \
         $b unshare -m true 2>/dev/null && echo MOUNTNS; \
         $b chroot / true 2>/dev/null && echo CHROOT; \
         $b mknod /tmp/null c 1 3 2>/dev/null && echo MKNOD; \
         echo 1 > /proc/sys/kernel/printk 2>/dev/null && echo PROCSYS; \
         $b cat /proc/1/root/etc/hostname 2>/dev/null && echo INITROOT; \
         $b cat {secret} 2>/dev/null && echo HOSTFILE; \
         $b nsenter -t 1 -m true 2>/dev/null && echo NSENTER; \
         $b setpriv --reuid=0 true 2>/dev/null && echo SETUID; \
         echo done",
        secret = secret.display()
    );
    let o = run_json_in(
        work.path(),
        &["--image", dir, "--", "/bin/sh", "-c", &script],
        None,
    );
    assert_exited_0(&o);
    assert_eq!(stdout_of(&o), "done\n", "an escape worked: {o:#}");
    assert_eq!(o["enforcement"]["seccomp"], true, "{o:#}");
    // From outside: the host's file and the directory are as they were.
    assert_eq!(
        std::fs::read_to_string(&secret).expect("secret"),
        "s3cret\n"
    );
    let names: Vec<_> = std::fs::read_dir(&root)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// Offline (here: a network namespace of the test's own, with no interface up), a pull of a
/// public image fails on DNS. That is said as such — the registry cannot be reached, its name
/// does not resolve — with the ways that work offline, not as a registry that speaks no HTTPS
/// (`--insecure-registry docker.io` cannot help).
#[test]
fn an_offline_pull_says_the_registry_cannot_be_reached_and_how_to_do_without_it() {
    if !have("unshare") {
        return;
    }
    let work = Tmp::new("offline");
    let data = work.path().join("data");
    let mut cmd = Command::new("unshare");
    if !is_root() {
        cmd.arg("--map-root-user");
    }
    let out = run_failing(
        cmd.args([
            "--net",
            "--",
            cordon_bin(),
            "image",
            "pull",
            "python:3.12-slim",
            "--data-dir",
        ])
        .arg(&data),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    for needle in [
        "does not resolve",
        "cordon image import",
        "OCI layout",
        "--image ./DIR",
        "loopback",
    ] {
        assert!(err.contains(needle), "no {needle:?} in: {err}");
    }
    assert!(!err.contains("--insecure-registry"), "{err}");
}

/// `--progress`: a pull reports its layers on stderr even where stderr is no terminal (an
/// agent's pipe), from the same events the server streams.
#[test]
fn a_pull_with_progress_reports_layers_on_a_pipe() {
    if !have_all() {
        return;
    }
    let work = Tmp::new("progress");
    let (oci, _) = build_image(work.path());
    let reg = Registry::start("");
    reg.push(&oci, "team/app:v1", None);
    let data = work.path().join("data");
    let name = format!("{}/team/app:v1", reg.host());
    let out = cordon(&data, &["pull", &name, "--progress"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("cordon: {name}: 2/2 layers")),
        "no progress on stderr: {err:?}"
    );
    // Without --progress, a pipe gets no status lines.
    let out = cordon(&work.path().join("data2"), &["pull", &name]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("layers"));
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn run_failing(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}
