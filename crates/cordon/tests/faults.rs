//! The server under faults of its host, checked from outside: its data directory's disk full
//! (a size-capped tmpfs the test mounts and fills): every write path — a sandbox create in
//! the native and E2B doors, a file upload, a secret, an image pull, a key — answers a clear
//! `507 Insufficient Storage` (the CLI a clear error), never a `500` or a hang; reads (health,
//! the sandbox list, the audit trail) keep being served, and so do commands in a sandbox,
//! each appending an audit record until one is cut short; once space is freed, writes work
//! again and the audit chain verifies (a record half written on a full disk used to break it).
//!
//! The server in a memory cgroup of the test's own, OOM-killed by large request bodies: its
//! clients get an error, not a hang; its sandbox's processes and cgroups go with it; restarted
//! without the limit it shows the sandbox not running, serves writes, and the chain verifies.
//!
//! A registry that misbehaves mid-pull — a small HTTP server of the test's own on loopback
//! that serves a real manifest, then dies in the middle of the layer blob, or serves the blob
//! with other bytes than its digest says, or an endless body (for the blob, and for the
//! manifest): the pull fails with a clear error within a bounded time, and the image store is
//! as it was (every file of it, but a resumable partial download of a cut blob).
//!
//! The full disk is root only (mounting a tmpfs); the rootless run skips it with a message.

mod common;
mod serve;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// A tmpfs of `size` mounted by the test at a fresh directory; unmounted and removed on drop.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let path = std::env::temp_dir().join(unique("full"));
        std::fs::create_dir_all(&path).expect("mount point");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&path)
            .output()
            .expect("mount");
        assert!(out.status.success(), "mount: {out:?}");
        Tmpfs { path }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).output();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes `file` until the filesystem refuses (ENOSPC), in big chunks then small ones.
fn fill(file: &Path) {
    let mut f = std::fs::File::create(file).expect("filler");
    for chunk in [1 << 20, 4096, 1] {
        let buf = vec![0x5au8; chunk];
        loop {
            match f.write_all(&buf) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", file.display()),
            }
        }
    }
    let _ = f.sync_all();
}

/// A status and JSON body of a request with raw bytes or a JSON body, and extra headers.
fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    json: Option<Value>,
    raw: Option<&[u8]>,
) -> (u16, Value) {
    let mut r = ureq::request(method, url).timeout(Duration::from_secs(60));
    for (k, v) in headers {
        r = r.set(k, v);
    }
    let res = match (json, raw) {
        (Some(b), _) => r.send_json(b),
        (None, Some(bytes)) => r.send_bytes(bytes),
        (None, None) => r.call(),
    };
    let resp = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[test]
fn a_full_data_disk_answers_507_on_every_write_and_keeps_serving_reads() {
    if !is_root() {
        eprintln!("SKIPPED: mounting a size-capped tmpfs needs root");
        return;
    }
    let fs = Tmpfs::new("64m");
    let dir = fs.path.join("data");
    let s = serve::Server::start_in(dir.clone(), &[]);
    let bearer = format!("Bearer {}", s.key);
    let auth = [("Authorization", bearer.as_str())];
    let e2b = [("X-API-Key", s.key.as_str())];
    // A volume lives in the data directory (a sandbox's own /workspace does not).
    let (st, v) = s.call("POST", "/v1/volumes", Some(json!({"name": "vol"})));
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.call(
        "POST",
        "/v1/sandboxes",
        Some(json!({"ttl": "10m", "volumes": [{"name": "vol", "path": "/vol"}]})),
    );
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let (port, stop) = hostile_registry(Arc::new(Image::new(7)), Hostile::Honest);
    let filler = fs.path.join("filler");
    fill(&filler);

    let writes: Vec<(&str, (u16, Value))> = vec![
        (
            "POST /v1/sandboxes",
            send(
                "POST",
                &format!("{}/v1/sandboxes", s.url),
                &auth,
                Some(json!({"ttl": "5m"})),
                None,
            ),
        ),
        (
            "E2B POST /sandboxes",
            send(
                "POST",
                &format!("{}/sandboxes", s.url),
                &e2b,
                Some(json!({"templateID": "base"})),
                None,
            ),
        ),
        (
            "PUT /v1/sandboxes/{id}/files (a volume)",
            send(
                "PUT",
                &format!("{}/v1/sandboxes/{id}/files?path=/vol/big.bin", s.url),
                &auth,
                None,
                Some(&vec![7u8; 4 << 20]),
            ),
        ),
        (
            "POST /v1/secrets",
            send(
                "POST",
                &format!("{}/v1/secrets", s.url),
                &auth,
                Some(json!({"name": "full", "value": "v".repeat(8000)})),
                None,
            ),
        ),
        (
            "E2B POST /secrets",
            send(
                "POST",
                &format!("{}/secrets", s.url),
                &e2b,
                Some(json!({"name": "full2", "value": "v".repeat(8000)})),
                None,
            ),
        ),
        (
            "POST /v1/images/pull",
            send(
                "POST",
                &format!("{}/v1/images/pull", s.url),
                &auth,
                Some(json!({"reference": format!("127.0.0.1:{port}/app:v1")})),
                None,
            ),
        ),
    ];
    stop.store(true, Ordering::SeqCst);
    let mut wrong = Vec::new();
    for (what, (st, v)) in &writes {
        let text = v.to_string().to_lowercase();
        eprintln!("{what}: {st} {v}");
        if *st != 507 || !(text.contains("full") || text.contains("space")) {
            wrong.push(format!("{what}: {st} {v}"));
        }
    }
    // A key made on the full disk: a clear refusal, not a panic or a key half stored.
    let out = Command::new(cordon_bin())
        .args(["keys", "create", "--name", "full", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("cordon keys create");
    let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
    eprintln!("cordon keys create: {:?} {err}", out.status.code());
    if out.status.success()
        || !(err.contains("full") || err.contains("space"))
        || err.contains("panicked")
    {
        wrong.push(format!("keys create: {:?} {err}", out.status.code()));
    }

    // Reads go on.
    for path in [
        "/healthz",
        "/v1/sandboxes",
        &format!("/v1/sandboxes/{id}"),
        "/v1/audit?limit=5",
    ] {
        let (st, v) = s.call("GET", path, None);
        if st != 200 {
            wrong.push(format!("GET {path} on a full disk: {st} {v}"));
        }
    }
    let (st, v) = s.call("GET", "/v1/sandboxes", None);
    assert_eq!(st, 200, "{v}");
    assert!(
        v.to_string().contains(&id),
        "the sandbox is still listed: {v}"
    );
    // Commands run on in the sandbox (its disk is not the data directory's), each appending
    // an audit record: more than the audit log's last page has room for, so that one is cut
    // short by the full disk. A record half written must not stay in the log.
    for n in 0..16 {
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": ["true", format!("{n:0>300}")]})),
        );
        if st != 200 {
            wrong.push(format!("exec on a full data disk: {st} {v}"));
            break;
        }
    }

    // Space again: the same writes work, and the audit chain has no half-written record.
    std::fs::remove_file(&filler).expect("free the disk");
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
    if st != 201 {
        wrong.push(format!(
            "POST /v1/sandboxes after space was freed: {st} {v}"
        ));
    }
    let (st, v) = s.call(
        "POST",
        "/v1/secrets",
        Some(json!({"name": "after", "value": "v"})),
    );
    if st != 201 {
        wrong.push(format!("POST /v1/secrets after space was freed: {st} {v}"));
    }
    drop(s);
    let out = Command::new(cordon_bin())
        .args(["audit", "verify"])
        .arg(dir.join("audit.jsonl"))
        .output()
        .expect("cordon audit verify");
    if !out.status.success() {
        wrong.push(format!(
            "audit verify after the full disk: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    assert!(
        wrong.is_empty(),
        "on a full data disk:\n{}",
        wrong.join("\n")
    );
}

/// `sha256:<hex>` of `bytes` (coreutils' sha256sum: the test needs no hashing crate).
fn sha256(bytes: &[u8]) -> String {
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("write");
    let out = c.wait_with_output().expect("sha256sum");
    let text = String::from_utf8_lossy(&out.stdout);
    format!("sha256:{}", text.split_whitespace().next().expect("sum"))
}

/// An OCI image in memory: its manifest, config and one uncompressed tar layer holding a
/// 3 MiB file of pseudo-random bytes (made by `tar` from a directory).
struct Image {
    manifest: Vec<u8>,
    config: (String, Vec<u8>),
    layer: (String, Vec<u8>),
}

impl Image {
    /// Images of different `seed`s share no layer.
    fn new(seed: u64) -> Image {
        let src = std::env::temp_dir().join(unique("layer"));
        std::fs::create_dir_all(src.join("data")).expect("layer dir");
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let bytes: Vec<u8> = (0..3 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(src.join("data/blob"), &bytes).expect("blob");
        std::fs::write(src.join("data/hello"), "hello\n").expect("hello");
        let tar = Command::new("tar")
            .arg("-C")
            .arg(&src)
            .args(["--owner=0", "--group=0", "-cf", "-", "data"])
            .output()
            .expect("tar");
        assert!(tar.status.success(), "{tar:?}");
        let _ = std::fs::remove_dir_all(&src);
        let layer = tar.stdout;
        let layer_digest = sha256(&layer);
        let config = json!({
            "architecture": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            "os": "linux",
            "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        })
        .to_string()
        .into_bytes();
        let config_digest = sha256(&config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": layer.len()}],
        })
        .to_string()
        .into_bytes();
        Image {
            manifest,
            config: (config_digest, config),
            layer: (layer_digest, layer),
        }
    }
}

/// How the test's registry misbehaves.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hostile {
    /// Serves everything as it is.
    Honest,
    /// Sends half of the layer blob, then closes and refuses every connection after.
    DiesMidBlob,
    /// Serves the layer blob with its size, but other bytes than its digest names.
    WrongDigest,
    /// Sends the layer blob's bytes and then more, without end (no length given).
    EndlessBlob,
    /// Answers the manifest with a body without end.
    EndlessManifest,
}

/// The test's registry on a free loopback port, serving `image` as `app:v1`, misbehaving as
/// told. Stops (with every connection it holds) when the returned flag is set.
fn hostile_registry(image: Arc<Image>, how: Hostile) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let dead = Arc::new(AtomicBool::new(false));
        while !stop2.load(Ordering::SeqCst) && !dead.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let (image, dead, stop) = (image.clone(), dead.clone(), stop2.clone());
                    std::thread::spawn(move || answer(conn, &image, how, &dead, &stop));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        // Dropping the listener: connections are refused from here on.
    });
    (port, stop)
}

/// Answers the requests of one connection.
fn answer(conn: TcpStream, image: &Image, how: Hostile, dead: &AtomicBool, stop: &AtomicBool) {
    let _ = conn.set_nonblocking(false);
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let head = |status: &str, ctype: &str, len: Option<usize>, extra: &str| {
            let len = len
                .map(|n| format!("Content-Length: {n}\r\n"))
                .unwrap_or_default();
            format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{len}{extra}\r\n")
        };
        let (status, ctype, body): (&str, &str, &[u8]) = if path == "/v2/" {
            ("200 OK", "application/json", b"{}")
        } else if path.contains("/manifests/") {
            if how == Hostile::EndlessManifest && method == "GET" {
                let _ = out.write_all(
                    head(
                        "200 OK",
                        "application/vnd.oci.image.manifest.v1+json",
                        None,
                        "Connection: close\r\n",
                    )
                    .as_bytes(),
                );
                let chunk = vec![b' '; 64 << 10];
                while !stop.load(Ordering::SeqCst) && out.write_all(&chunk).is_ok() {}
                return;
            }
            (
                "200 OK",
                "application/vnd.oci.image.manifest.v1+json",
                &image.manifest,
            )
        } else if path.ends_with(&image.config.0) {
            ("200 OK", "application/octet-stream", &image.config.1)
        } else if path.ends_with(&image.layer.0) {
            let blob = &image.layer.1;
            match how {
                Hostile::DiesMidBlob => {
                    let _ = out.write_all(
                        head("200 OK", "application/octet-stream", Some(blob.len()), "").as_bytes(),
                    );
                    let _ = out.write_all(&blob[..blob.len() / 2]);
                    dead.store(true, Ordering::SeqCst);
                    let _ = out.shutdown(std::net::Shutdown::Both);
                    return;
                }
                Hostile::WrongDigest => {
                    let mut other = blob.clone();
                    let mid = other.len() / 2;
                    for b in &mut other[mid..mid + 64] {
                        *b ^= 0xff;
                    }
                    let _ = out.write_all(
                        head("200 OK", "application/octet-stream", Some(other.len()), "")
                            .as_bytes(),
                    );
                    let _ = out.write_all(&other);
                    continue;
                }
                Hostile::EndlessBlob => {
                    let _ = out.write_all(
                        head(
                            "200 OK",
                            "application/octet-stream",
                            None,
                            "Connection: close\r\n",
                        )
                        .as_bytes(),
                    );
                    let _ = out.write_all(blob);
                    let chunk = vec![0u8; 64 << 10];
                    while !stop.load(Ordering::SeqCst) && out.write_all(&chunk).is_ok() {}
                    return;
                }
                _ => ("200 OK", "application/octet-stream", blob),
            }
        } else {
            (
                "404 Not Found",
                "application/json",
                b"{\"errors\":[{\"code\":\"NAME_UNKNOWN\"}]}",
            )
        };
        let digest = if path.contains("/manifests/") {
            format!("Docker-Content-Digest: {}\r\n", sha256(&image.manifest))
        } else {
            String::new()
        };
        let _ = out.write_all(head(status, ctype, Some(body.len()), &digest).as_bytes());
        if method != "HEAD" && out.write_all(body).is_err() {
            return;
        }
    }
}

/// Every file under `dir` with its size, but resumable partial downloads (`tmp/*.partial`)
/// and lock files (empty, for `flock`).
fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                todo.push(p);
                found.push((format!("{rel}/"), 0));
            } else if !(rel.starts_with("tmp/") && rel.ends_with(".partial")
                || rel.starts_with("locks/"))
            {
                found.push((rel, m.len()));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_registry_that_dies_lies_or_never_ends_mid_pull_fails_it_cleanly_and_leaves_the_store_as_it_was(
) {
    let data = std::env::temp_dir().join(unique("hostile-registry"));
    let s = serve::Server::start_in(data.clone(), &[]);
    // A store with an image in it already: a failed pull must not touch it.
    let (port, stop) = hostile_registry(Arc::new(Image::new(0)), Hostile::Honest);
    let good = format!("127.0.0.1:{port}/app:v1");
    let (st, v) = s.call(
        "POST",
        "/v1/images/pull",
        Some(json!({ "reference": good })),
    );
    assert_eq!(st, 200, "the honest registry's image is pulled: {v}");
    stop.store(true, Ordering::SeqCst);
    let store = data.join("images");
    let mut wrong = Vec::new();
    for (seed, how) in [
        Hostile::DiesMidBlob,
        Hostile::WrongDigest,
        Hostile::EndlessBlob,
        Hostile::EndlessManifest,
    ]
    .into_iter()
    .enumerate()
    {
        // A layer the store does not have, so that the blob is fetched.
        let image = Arc::new(Image::new(seed as u64 + 1));
        let before = tree(&store);
        let (_, list_before) = s.call("GET", "/v1/images", None);
        let (port, stop) = hostile_registry(image, how);
        let reference = format!("127.0.0.1:{port}/other:v1");
        let start = Instant::now();
        let (st, v) = s.call(
            "POST",
            "/v1/images/pull",
            Some(json!({ "reference": reference })),
        );
        let took = start.elapsed();
        stop.store(true, Ordering::SeqCst);
        eprintln!("{how:?}: {st} in {took:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or("").to_lowercase();
        let clear = match how {
            Hostile::DiesMidBlob => message.contains("connection") || message.contains("refused"),
            Hostile::WrongDigest => message.contains("digest mismatch"),
            Hostile::EndlessBlob => message.contains("more than"),
            _ => message.contains("manifest") || message.contains("large"),
        };
        if !(400..600).contains(&st) || st == 500 || !clear {
            wrong.push(format!("{how:?}: not a clear failure: {st} {v}"));
        }
        if took > Duration::from_secs(30) {
            wrong.push(format!("{how:?}: took {took:?}"));
        }
        let (_, list_after) = s.call("GET", "/v1/images", None);
        if list_after != list_before {
            wrong.push(format!("{how:?}: the image list changed: {list_after}"));
        }
        // What a failed pull may add: the manifest and config it fetched, each whole (its
        // bytes hash to its name), nothing else.
        let after: Vec<_> = tree(&store)
            .into_iter()
            .filter(|(rel, _)| {
                before.iter().any(|b| &b.0 == rel)
                    || !rel.starts_with("blobs/sha256/")
                    || std::fs::read(store.join(rel)).ok().map(|b| sha256(&b))
                        != Some(format!("sha256:{}", &rel["blobs/sha256/".len()..]))
            })
            .collect();
        if after != before {
            wrong.push(format!(
                "{how:?}: the store changed: before {before:?}, after {after:?}"
            ));
        }
    }
    drop(s);
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("u+rwX")
        .arg(&data)
        .output();
    let _ = std::fs::remove_dir_all(&data);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A memory cgroup made by the test under its own (v1's memory hierarchy, or v2 where the
/// controller is on for children); removed on drop. None when this host gives none.
struct MemCgroup {
    dir: PathBuf,
    limit_file: &'static str,
}

impl MemCgroup {
    fn new() -> Option<MemCgroup> {
        for base in own_cgroup_dirs() {
            let dir = base.join(unique("oom"));
            if std::fs::create_dir(&dir).is_err() {
                continue;
            }
            for limit_file in ["memory.limit_in_bytes", "memory.max"] {
                if dir.join(limit_file).exists() {
                    return Some(MemCgroup { dir, limit_file });
                }
            }
            let _ = std::fs::remove_dir(&dir);
        }
        None
    }

    fn usage(&self) -> u64 {
        ["memory.usage_in_bytes", "memory.current"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// How many processes the OOM killer killed in it.
    fn oom_kills(&self) -> u64 {
        ["memory.oom_control", "memory.events"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// Sub-cgroups left in it (a sandbox's, made under the server's own cgroup).
    fn children(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_server_killed_by_the_oom_killer_restarts_clean() {
    if !is_root() {
        eprintln!("SKIPPED: a memory cgroup for the server needs root");
        return;
    }
    let Some(cg) = MemCgroup::new() else {
        eprintln!("SKIPPED: no memory cgroup can be made under this test's own");
        return;
    };
    let data = std::env::temp_dir().join(unique("oom"));
    // The shell joins the cgroup, then becomes the server.
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "echo $$ > \"$1\" && shift && exec \"$@\"", "sh"])
        .arg(cg.dir.join("cgroup.procs"))
        .arg(cordon_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data);
    std::fs::create_dir_all(&data).expect("data dir");
    let mut s = serve::Server::start_command(cmd, data.clone());
    s.scratch = false;
    let pid = s.child.id();
    // A sandbox with a process in it, for the restart to reconcile.
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"ttl": "10m"})));
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let marker = unique("oom-sleeper");
    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"cmd": ["sh", "-c", format!(
            "python3 -c 'import time; time.sleep(300)' {marker} >/dev/null 2>&1 &"
        )]})),
    );
    assert_eq!(st, 200, "{v}");
    // Room for the server at rest and a little more; four bodies of 90 MB are far more.
    let limit = cg.usage() + (48 << 20);
    std::fs::write(cg.dir.join(cg.limit_file), limit.to_string()).expect("memory limit");
    let clients: Vec<_> = (0..4)
        .map(|n| {
            let (url, key) = (s.url.clone(), s.key.clone());
            std::thread::spawn(move || {
                let body = format!(
                    "{{\"name\": \"big{n}\", \"value\": \"{}\"}}",
                    "x".repeat(90 << 20)
                );
                let start = Instant::now();
                let r = ureq::post(&format!("{url}/v1/secrets"))
                    .set("Authorization", &format!("Bearer {key}"))
                    .timeout(Duration::from_secs(60))
                    .send_string(&body);
                (
                    r.map(|r| r.status()).map_err(|e| e.to_string()),
                    start.elapsed(),
                )
            })
        })
        .collect();
    let results: Vec<_> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    eprintln!("clients got: {results:?}");
    let status = s.child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the server was OOM-killed: {status:?}"
    );
    assert!(cg.oom_kills() >= 1, "the OOM killer did it");
    for (r, took) in &results {
        assert!(
            *took < Duration::from_secs(30),
            "a client hung: {r:?} {took:?}"
        );
    }
    // Its sandbox's processes and cgroups go with it.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10)
        && (!procs_with(&marker).is_empty() || !cg.children().is_empty())
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(procs_with(&marker).is_empty(), "{:?}", procs_with(&marker));
    assert!(
        cg.children().is_empty(),
        "cgroups left: {:?}",
        cg.children()
    );
    assert!(cgroups_of(pid).is_empty(), "{:?}", cgroups_of(pid));

    // Restarted without the limit: the sandbox is reconciled (not running), the audit chain
    // verifies, and the server does its work.
    let key = s.key.clone();
    drop(s);
    let mut s2 = serve::Server::start_in(data.clone(), &[]);
    s2.key = key;
    let (st, v) = s2.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(st, 200, "{v}");
    assert_ne!(v["state"], "running", "{v}");
    let (st, v) = s2.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
    assert_eq!(st, 201, "{v}");
    let (st, v) = s2.call(
        "POST",
        "/v1/secrets",
        Some(json!({"name": "after", "value": "v"})),
    );
    assert_eq!(st, 201, "{v}");
    drop(s2);
    let out = Command::new(cordon_bin())
        .args(["audit", "verify"])
        .arg(data.join("audit.jsonl"))
        .output()
        .expect("cordon audit verify");
    assert!(out.status.success(), "{out:?}");
    assert!(
        temp_leftovers(&data).is_empty(),
        "{:?}",
        temp_leftovers(&data)
    );
    let _ = std::fs::remove_dir_all(&data);
}

/// Temporaries under `dir` (`.tmp` files, upload temporaries).
fn temp_leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".cordon-upload-") || name.ends_with(".tmp") {
                found.push(e.path());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
    }
    found
}
