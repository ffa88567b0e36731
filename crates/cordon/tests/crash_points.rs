//! Crash points: `kill -9` of `cordon serve` at random moments of a sandbox create, an exec,
//! a file upload, an image pull and unpack (from Debian's docker-registry on loopback, the
//! image built with umoci and pushed with skopeo), a key's creation and revocation (`cordon
//! keys`, the database's writer, killed with the server) and audit appends, each driven over
//! HTTP on loopback, then a restart on the same data directory. Checked from outside after
//! each point: the client got an answer or an error, never a hang; no process of the sandbox
//! is left, nor a cgroup of the killed server, nor a mount under the data directory, nor an
//! upload's temporary file or an unpack's staging directory; every sandbox the restarted
//! server lists answers with a state; an image is listed and runs with every byte of its
//! layer, or is not listed, and the next pull succeeds; a key is stored whole or not at all,
//! and a revoked key never works again; the audit chain verifies (at every audit point, and
//! at the end of each suite).
//!
//! Prints a table per suite: points tried, recovered, leaks. 21 points per operation (a few
//! minutes in all), or `CORDON_CRASH_POINTS` (scripts/crash.sh, the long form). The seed is
//! printed (and taken from `CORDON_CRASH_SEED` when set) so that a failing sequence can be
//! replayed. Root and rootless (scripts/test.sh runs the suite as an unprivileged user too);
//! the image suite needs docker-registry, umoci, skopeo and busybox (scripts/test.sh's apt
//! list) and skips without them, except under `CI=true`.

mod common;
mod serve;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// xorshift64: a small, seedable sequence of kill delays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What a client got: an HTTP status, or a transport error (the server died).
fn request(
    url: &str,
    key: &str,
    method: &str,
    body: Option<Value>,
    raw: Option<Vec<u8>>,
) -> String {
    let r = ureq::request(method, url)
        .set("Authorization", &format!("Bearer {key}"))
        .timeout(Duration::from_secs(30));
    let res = match (body, raw) {
        (Some(b), _) => r.send_json(b),
        (None, Some(bytes)) => r.send_bytes(&bytes),
        (None, None) => r.call(),
    };
    match res {
        Ok(r) => r.status().to_string(),
        Err(ureq::Error::Status(s, _)) => s.to_string(),
        Err(e) => format!("error: {}", e.kind()),
    }
}

/// Upload temporaries and other leftovers under `dir`.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(t) = e.file_type() else { continue };
            if name.starts_with(".cordon-upload-") || name.ends_with(".tmp") {
                found.push(e.path());
            }
            if t.is_dir() {
                todo.push(e.path());
            }
        }
    }
    found
}

/// The sandbox ids (`vm-…`) an audit log names.
fn sandbox_ids(log: &Path) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ids = std::collections::BTreeSet::new();
    for (at, _) in text.match_indices("\"vm-") {
        let rest = &text[at + 1..];
        let id: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if id.len() > 3 {
            ids.insert(id);
        }
    }
    ids
}

/// Processes whose parent is `pid` (a server's sandbox helpers, `cordon __sandbox`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|st| {
                    let after = st.rsplit_once(')')?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn alive(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                st.rsplit_once(')')
                    .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
            })
        })
        .collect()
}

/// Mounts whose point lies under `dir` (in the test's mount namespace).
fn mounts_under(dir: &Path) -> Vec<String> {
    let d = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&d)))
        .map(str::to_string)
        .collect()
}

/// Points per operation: 21 (at least 20 each, a few minutes for the suite), or
/// `CORDON_CRASH_POINTS` for the long form (scripts/crash.sh).
fn points_each() -> usize {
    std::env::var("CORDON_CRASH_POINTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(21)
}

impl Rng {
    /// Seeded from `CORDON_CRASH_SEED` when set, else from the clock; the seed is printed.
    fn seeded() -> Rng {
        let seed = std::env::var("CORDON_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64 | 1)
                    .unwrap_or(1)
            });
        eprintln!("CORDON_CRASH_SEED={seed}");
        Rng(seed)
    }
}

/// One crash point: its number, operation, kill delay, what the client got, whether the
/// restarted server answered for everything, and what was left behind.
type Row = (usize, &'static str, u64, String, bool, Vec<String>);

/// Prints the table (points tried, recovered, leaks), then fails on any point not recovered,
/// any leak, or an audit chain that does not verify.
fn report(rows: &[Row], audit: &Path) {
    let out = std::process::Command::new(cordon_bin())
        .args(["audit", "verify"])
        .arg(audit)
        .output()
        .expect("cordon audit verify");
    let audit_ok = out.status.success();
    eprintln!(
        "{:>5} {:>7} {:>8}  {:<28} {:>9}  leaks",
        "point", "op", "kill ms", "client got", "recovered"
    );
    for (i, op, delay, got, rec, leaks) in rows {
        eprintln!(
            "{i:>5} {op:>7} {delay:>8}  {got:<28} {rec:>9}  {}",
            leaks.len()
        );
    }
    let recovered = rows.iter().filter(|r| r.4).count();
    let leaked: Vec<_> = rows.iter().filter(|r| !r.5.is_empty()).collect();
    eprintln!(
        "points tried: {}, recovered: {recovered}, leaks: {}, audit verify: {}",
        rows.len(),
        leaked.len(),
        if audit_ok { "ok" } else { "FAILED" }
    );
    assert!(
        audit_ok,
        "audit verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(recovered, rows.len(), "not every point recovered");
    assert!(
        leaked.is_empty(),
        "leaks: {:?}",
        leaked.iter().map(|r| (r.0, r.1, &r.5)).collect::<Vec<_>>()
    );
}

#[test]
fn kill_9_mid_create_exec_and_upload_leaves_nothing_behind() {
    let mut rng = Rng::seeded();
    let dir = std::env::temp_dir().join(unique("crash"));
    let mut key: Option<String> = None;
    let ops = ["create", "exec", "upload"];
    let points = points_each() * ops.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut states = std::collections::BTreeMap::new();
    for i in 0..points {
        let op = ops[i % ops.len()];
        let mut s = serve::Server::start_in(dir.clone(), &[]);
        match &key {
            Some(k) => s.key = k.clone(),
            None => key = Some(s.key.clone()),
        }
        let pid = s.child.id();
        let marker = unique("crash");
        let sandbox = if op == "create" {
            None
        } else {
            let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
            assert_eq!(st, 201, "{v}");
            Some(v["id"].as_str().expect("id").to_string())
        };
        let (url, k) = (s.url.clone(), s.key.clone());
        let m = marker.clone();
        let client = std::thread::spawn(move || {
            let start = Instant::now();
            let got = match (op, sandbox) {
                ("create", _) => request(
                    &format!("{url}/v1/sandboxes"),
                    &k,
                    "POST",
                    Some(json!({"ttl": "5m", "metadata": {"marker": m}})),
                    None,
                ),
                ("exec", Some(id)) => request(
                    &format!("{url}/v1/sandboxes/{id}/exec"),
                    &k,
                    "POST",
                    Some(json!({"cmd": ["python3", "-c", "import time; time.sleep(0.4)", m]})),
                    None,
                ),
                (_, Some(id)) => request(
                    &format!("{url}/v1/sandboxes/{id}/files?path=big-{m}.bin"),
                    &k,
                    "PUT",
                    None,
                    Some(vec![7u8; 16 << 20]),
                ),
                _ => unreachable!(),
            };
            (got, start.elapsed())
        });
        let delay = rng.below(if op == "create" { 150 } else { 500 });
        std::thread::sleep(Duration::from_millis(delay));
        let helpers = children_of(pid);
        s.kill9();
        let (got, took) = client.join().expect("client thread");
        let mut leaks = Vec::new();
        if took > Duration::from_secs(20) {
            leaks.push(format!("client hung {took:?}"));
        }
        // The sandboxes die with their server.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10)
            && (!procs_with(&marker).is_empty()
                || !cgroups_of(pid).is_empty()
                || !alive(&helpers).is_empty())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !procs_with(&marker).is_empty() {
            leaks.push(format!("processes {:?}", procs_with(&marker)));
        }
        if !alive(&helpers).is_empty() {
            leaks.push(format!("orphaned helpers {:?}", alive(&helpers)));
        }
        if !cgroups_of(pid).is_empty() {
            leaks.push(format!("cgroups {:?}", cgroups_of(pid)));
        }
        // The next server on the data directory.
        let mut s2 = serve::Server::start_in(dir.clone(), &[]);
        s2.key = key.clone().expect("key");
        let (st, list) = s2.call("GET", "/v1/sandboxes", None);
        let mut recovered = st == 200 && list["sandboxes"].is_array();
        // Every sandbox the audit log names — the one a killed create was making too, if it
        // got that far — is a whole record with a state; none is left running after a restart
        // (its processes died with the server).
        for id in sandbox_ids(&dir.join("audit.jsonl")) {
            let (st, v) = s2.call("GET", &format!("/v1/sandboxes/{id}"), None);
            if let Some(state) = v["state"].as_str() {
                *states.entry(state.to_string()).or_insert(0) += 1;
            }
            if st != 200 || !v["state"].is_string() || v["state"] == "running" {
                recovered = false;
                leaks.push(format!("sandbox {id} half there: {st} {v}"));
            }
        }
        drop(s2);
        let m = mounts_under(&dir);
        if !m.is_empty() {
            leaks.push(format!("mounts {m:?}"));
        }
        let t = temp_files(&dir);
        if !t.is_empty() {
            leaks.push(format!("temp files {t:?}"));
        }
        rows.push((i, op, delay, got, recovered, leaks));
    }
    report(&rows, &dir.join("audit.jsonl"));
    eprintln!("sandbox states seen after restarts: {states:?}");
    let _ = std::fs::remove_dir_all(&dir);
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

fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Removes a tree whose layers may have taken away the owner's own write permission.
fn remove_tree(p: &Path) {
    let _ = std::process::Command::new("chmod")
        .arg("-R")
        .arg("u+rwX")
        .arg(p)
        .output();
    let _ = std::fs::remove_dir_all(p);
}

/// Debian's docker-registry on a free 127.0.0.1 port, killed on drop.
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

impl Registry {
    fn start(dir: &Path) -> Registry {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("data").display()
        );
        std::fs::create_dir_all(dir).expect("registry dir");
        let cfg = dir.join("config.yml");
        std::fs::write(&cfg, config).expect("config");
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker-registry");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child, port }
    }
}

/// An image built with umoci in `dir` and pushed with skopeo as `name`: busybox, /etc/other,
/// an incompressible 6 MiB /data/blob (the download takes a while) and 600 small files (so
/// does the unpack). Returns the layer blobs' digests and /data/blob's sha256.
fn build_and_push(dir: &Path, reg: &Registry, name: &str) -> (Vec<String>, String) {
    let oci = dir.join("oci");
    let bundle = dir.join("bundle");
    let layout = format!("{}:t", oci.display());
    run_ok(
        std::process::Command::new("umoci")
            .arg("init")
            .arg("--layout")
            .arg(&oci),
    );
    run_ok(std::process::Command::new("umoci").args(["new", "--image", &layout]));
    run_ok(
        std::process::Command::new("umoci")
            .args(["unpack", "--rootless", "--image", &layout])
            .arg(&bundle),
    );
    let root = bundle.join("rootfs");
    for d in ["bin", "etc", "data", "many"] {
        std::fs::create_dir_all(root.join(d)).expect("dir");
    }
    let busybox = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .expect("busybox");
    std::fs::copy(busybox, root.join("bin/busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("symlink");
    std::fs::write(root.join("etc/other"), "other\n").expect("other");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let blob: Vec<u8> = (0..6 << 20).map(|_| rng.below(256) as u8).collect();
    std::fs::write(root.join("data/blob"), &blob).expect("blob");
    for n in 0..600 {
        std::fs::write(root.join(format!("many/f{n}")), format!("{n}\n")).expect("small");
    }
    run_ok(
        std::process::Command::new("umoci")
            .args(["repack", "--refresh-bundle", "--image", &layout])
            .arg(&bundle),
    );
    let sum = run_ok(
        std::process::Command::new("busybox")
            .arg("sha256sum")
            .arg(root.join("data/blob")),
    );
    let sum = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .expect("sum")
        .to_string();
    let index: Value =
        serde_json::from_slice(&std::fs::read(oci.join("index.json")).expect("index"))
            .expect("json");
    let digest = index["manifests"][0]["digest"].as_str().expect("digest");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(
            oci.join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:")),
        )
        .expect("manifest"),
    )
    .expect("json");
    let layers = manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| l["digest"].as_str().expect("digest").to_string())
        .collect();
    run_ok(
        std::process::Command::new("skopeo")
            .args(["--insecure-policy", "copy", "--dest-tls-verify=false", "-q"])
            .arg(format!("oci:{layout}"))
            .arg(format!("docker://127.0.0.1:{}/{name}", reg.port))
            .env("TMPDIR", dir),
    );
    (layers, sum)
}

/// Entries of a directory (empty when it does not exist).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn kill_9_mid_image_pull_and_unpack_leaves_the_image_whole_or_absent() {
    if !["docker-registry", "umoci", "skopeo", "busybox"]
        .iter()
        .all(|t| have(t))
    {
        return;
    }
    let mut rng = Rng::seeded();
    let work = std::env::temp_dir().join(unique("crash-image"));
    std::fs::create_dir_all(&work).expect("work dir");
    let reg = Registry::start(&work.join("registry"));
    let (layers, sum) = build_and_push(&work, &reg, "crash/app:v1");
    let reference = format!("127.0.0.1:{}/crash/app:v1", reg.port);
    let dir = work.join("data");
    let store = dir.join("images");
    let key: String;
    let mut rows: Vec<Row> = Vec::new();
    let mut whole = 0;
    // How long a whole pull takes here (download and unpack): the kills spread over it and
    // a little after.
    let full = {
        let s = serve::Server::start_in(dir.clone(), &[]);
        key = s.key.clone();
        let start = Instant::now();
        let (st, v) = s.call(
            "POST",
            "/v1/images/pull",
            Some(json!({ "reference": reference })),
        );
        assert_eq!(st, 200, "{v}");
        let took = start.elapsed();
        drop(s);
        let rm = std::process::Command::new(cordon_bin())
            .args(["image", "rm", &reference, "--data-dir"])
            .arg(&dir)
            .output()
            .expect("cordon image rm");
        assert!(rm.status.success(), "{rm:?}");
        took
    };
    eprintln!("a whole pull takes {full:?}");
    for i in 0..points_each() {
        let mut s = serve::Server::start_in(dir.clone(), &[]);
        s.key = key.clone();
        let pid = s.child.id();
        let (url, k, r) = (s.url.clone(), s.key.clone(), reference.clone());
        let client = std::thread::spawn(move || {
            let start = Instant::now();
            let got = request(
                &format!("{url}/v1/images/pull"),
                &k,
                "POST",
                Some(json!({ "reference": r })),
                None,
            );
            (got, start.elapsed())
        });
        let delay = rng.below(full.as_millis() as u64 * 6 / 5);
        std::thread::sleep(Duration::from_millis(delay));
        let helpers = children_of(pid);
        s.kill9();
        let (got, took) = client.join().expect("client thread");
        let mut leaks = Vec::new();
        if took > Duration::from_secs(20) {
            leaks.push(format!("client hung {took:?}"));
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) && !alive(&helpers).is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !alive(&helpers).is_empty() {
            leaks.push(format!("orphaned helpers {:?}", alive(&helpers)));
        }
        if !cgroups_of(pid).is_empty() {
            leaks.push(format!("cgroups {:?}", cgroups_of(pid)));
        }
        let mut s2 = serve::Server::start_in(dir.clone(), &[]);
        s2.key = key.clone();
        // The store as the restarted server sees it: the image is listed and runs with every
        // byte of its layer, or it is not listed at all.
        let (st, list) = s2.call("GET", "/v1/images", None);
        let mut recovered = st == 200 && list["images"].is_array();
        let listed = list["images"].as_array().map(Vec::len).unwrap_or(0);
        if listed > 0 {
            whole += 1;
            let (st, o) = s2.call(
                "POST",
                "/v1/run",
                Some(
                    json!({"image": reference, "cmd": ["/bin/busybox", "sh", "-c",
                    "/bin/busybox sha256sum /data/blob; /bin/busybox cat /etc/other /many/f599"]}),
                ),
            );
            let out = o["stdout"].as_str().unwrap_or("");
            if st != 200 || !out.contains(&sum) || !out.ends_with("other\n599\n") {
                recovered = false;
                leaks.push(format!("image listed but not whole: {st} {o}"));
            }
        }
        // What the killed pull left does not wedge the next one, and a whole pull leaves
        // nothing of it: no staging directory or partial download, no compressed layer blob.
        let (st, v) = s2.call(
            "POST",
            "/v1/images/pull",
            Some(json!({ "reference": reference })),
        );
        if st != 200 {
            recovered = false;
            leaks.push(format!("the next pull failed: {st} {v}"));
        }
        drop(s2);
        let tmp = entries(&store.join("tmp"));
        if !tmp.is_empty() {
            leaks.push(format!("left in images/tmp: {tmp:?}"));
        }
        let blobs = entries(&store.join("blobs/sha256"));
        let kept: Vec<_> = layers
            .iter()
            .filter(|l| blobs.iter().any(|b| l.ends_with(b.as_str())))
            .collect();
        if !kept.is_empty() {
            leaks.push(format!("compressed layer blobs kept: {kept:?}"));
        }
        let m = mounts_under(&dir);
        if !m.is_empty() {
            leaks.push(format!("mounts {m:?}"));
        }
        // Back to an empty store, so that the next point kills a pull that has work to do.
        let out = std::process::Command::new(cordon_bin())
            .args(["image", "rm", &reference, "--data-dir"])
            .arg(&dir)
            .output()
            .expect("cordon image rm");
        let pruned = std::process::Command::new(cordon_bin())
            .args(["image", "prune", "--data-dir"])
            .arg(&dir)
            .output()
            .expect("cordon image prune");
        assert!(
            out.status.success() && pruned.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&pruned.stderr)
        );
        rows.push((i, "pull", delay, got, recovered, leaks));
    }
    eprintln!("images whole after a restart (the rest absent): {whole}");
    report(&rows, &dir.join("audit.jsonl"));
    drop(reg);
    remove_tree(&work);
}

/// `cordon keys ARGS… --data-dir DIR`, started (to be killed) or waited for.
fn keys_cmd(dir: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(cordon_bin());
    c.arg("keys")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// `cordon keys list`: (id, name, active) per key; None when it fails (the database unread).
fn keys_list(dir: &Path) -> Option<Vec<(String, String, bool)>> {
    let out = keys_cmd(dir, &["list"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f.len() == 5).then(|| (f[0].to_string(), f[1].to_string(), f[4] == "active"))
            })
            .collect(),
    )
}

/// What a server answers a key: 200 (it works) or 401 (it does not).
fn key_works(s: &serve::Server, secret: &str) -> u16 {
    match ureq::get(&format!("{}/v1/sandboxes", s.url))
        .set("Authorization", &format!("Bearer {secret}"))
        .timeout(Duration::from_secs(10))
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(st, _)) => st,
        Err(e) => panic!("GET /v1/sandboxes: {e}"),
    }
}

#[test]
fn kill_9_mid_key_creation_and_revocation_leaves_each_key_whole_or_absent_and_revoked_dead() {
    let mut rng = Rng::seeded();
    let dir = std::env::temp_dir().join(unique("crash-keys"));
    let mut rows: Vec<Row> = Vec::new();
    let mut key: Option<String> = None;
    // Keys revoked so far (by a revoke that said so, or listed revoked after a restart).
    let mut revoked: Vec<String> = Vec::new();
    let ops = ["create", "revoke"];
    for i in 0..points_each() * ops.len() {
        let op = ops[i % ops.len()];
        let mut s = serve::Server::start_in(dir.clone(), &[]);
        match &key {
            Some(k) => s.key = k.clone(),
            None => key = Some(s.key.clone()),
        }
        let name = format!("crash-{i}");
        // A revocation's victim: a whole key that works before.
        let victim = (op == "revoke").then(|| {
            let out = keys_cmd(&dir, &["create", "--name", &name])
                .output()
                .expect("keys create");
            assert!(out.status.success(), "{out:?}");
            let secret = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let id = keys_list(&dir)
                .expect("keys list")
                .into_iter()
                .find(|k| k.1 == name)
                .expect("the new key is listed")
                .0;
            assert_eq!(key_works(&s, &secret), 200);
            (id, secret)
        });
        let child = match &victim {
            Some((id, _)) => keys_cmd(&dir, &["revoke", id]),
            None => keys_cmd(&dir, &["create", "--name", &name]),
        }
        .spawn()
        .expect("cordon keys");
        // A key command lives ~10-40 ms: its start, the database, the write.
        let delay = rng.below(50);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::KILL,
        );
        s.kill9();
        let out = child.wait_with_output().expect("wait");
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        let got = match out.status.code() {
            Some(c) => format!("exit {c}"),
            None => "killed".to_string(),
        };
        let mut leaks = Vec::new();
        let s2 = {
            let mut s2 = serve::Server::start_in(dir.clone(), &[]);
            s2.key = key.clone().expect("key");
            s2
        };
        let list = keys_list(&dir);
        let mut recovered = list.is_some() && s2.call("GET", "/v1/sandboxes", None).0 == 200;
        let list = list.unwrap_or_default();
        let mine: Vec<_> = list.iter().filter(|k| k.1 == name).collect();
        match &victim {
            None => {
                // A key is listed once or not at all; one whose secret was printed is
                // stored and works.
                if mine.len() > 1 {
                    recovered = false;
                    leaks.push(format!("key {name} listed {} times", mine.len()));
                }
                if printed.starts_with("cdn_")
                    && (mine.is_empty() || key_works(&s2, &printed) != 200)
                {
                    recovered = false;
                    leaks.push(format!("key {name} printed but not stored whole"));
                }
            }
            Some((id, secret)) => {
                let listed_revoked = mine.first().is_some_and(|k| !k.2);
                if said.contains(&format!("revoked {id}")) && !listed_revoked {
                    recovered = false;
                    leaks.push(format!("key {id} said revoked but listed active"));
                }
                let want = if listed_revoked { 401 } else { 200 };
                if mine.len() != 1 || key_works(&s2, secret) != want {
                    recovered = false;
                    leaks.push(format!(
                        "key {id}: listed {mine:?}, answered other than {want}"
                    ));
                }
                if listed_revoked {
                    revoked.push(secret.clone());
                }
            }
        }
        // Every key revoked at an earlier point stays dead after this restart too.
        for r in &revoked {
            if key_works(&s2, r) != 401 {
                recovered = false;
                leaks.push("a revoked key works again".into());
            }
        }
        drop(s2);
        rows.push((i, op, delay, got, recovered, leaks));
    }
    eprintln!("keys revoked and still refused: {}", revoked.len());
    report(&rows, &dir.join("audit.jsonl"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Audited requests in a loop until the server dies: secrets created and deleted, commands
/// run, the network policy set. Returns how many were answered.
fn audited_load(url: String, key: String, sandbox: String, n: usize) -> usize {
    let mut answered = 0;
    for j in 0.. {
        let name = format!("s{n}-{j}");
        let calls: [(&str, String, Option<Value>); 3] = [
            (
                "POST",
                format!("{url}/v1/secrets"),
                Some(json!({"name": name, "value": "v"})),
            ),
            ("DELETE", format!("{url}/v1/secrets/{name}"), None),
            (
                "POST",
                format!("{url}/v1/sandboxes/{sandbox}/exec"),
                Some(json!({"cmd": ["true"]})),
            ),
        ];
        for (method, u, body) in calls {
            let got = request(&u, &key, method, body, None);
            if got.starts_with("error") {
                return answered;
            }
            answered += 1;
        }
    }
    answered
}

#[test]
fn kill_9_mid_audit_appends_leaves_a_chain_that_verifies_and_a_server_that_starts() {
    let mut rng = Rng::seeded();
    let dir = std::env::temp_dir().join(unique("crash-audit"));
    let log = dir.join("audit.jsonl");
    let mut rows: Vec<Row> = Vec::new();
    let mut key: Option<String> = None;
    for i in 0..points_each() {
        let mut s = serve::Server::start_in(dir.clone(), &[]);
        match &key {
            Some(k) => s.key = k.clone(),
            None => key = Some(s.key.clone()),
        }
        let pid = s.child.id();
        let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({"ttl": "5m"})));
        assert_eq!(st, 201, "{v}");
        let id = v["id"].as_str().expect("id").to_string();
        let before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        let clients: Vec<_> = (0..3)
            .map(|n| {
                let (u, k, id) = (s.url.clone(), s.key.clone(), id.clone());
                std::thread::spawn(move || audited_load(u, k, id, n))
            })
            .collect();
        let delay = 50 + rng.below(700);
        std::thread::sleep(Duration::from_millis(delay));
        let helpers = children_of(pid);
        s.kill9();
        let answered: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
        let mut leaks = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10)
            && (!alive(&helpers).is_empty() || !cgroups_of(pid).is_empty())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !alive(&helpers).is_empty() {
            leaks.push(format!("orphaned helpers {:?}", alive(&helpers)));
        }
        if !cgroups_of(pid).is_empty() {
            leaks.push(format!("cgroups {:?}", cgroups_of(pid)));
        }
        // The chain verifies at every point, not only at the end, and a server starts on it
        // (a log and head out of step would keep it from starting).
        let verify = std::process::Command::new(cordon_bin())
            .args(["audit", "verify"])
            .arg(&log)
            .output()
            .expect("cordon audit verify");
        let mut recovered = verify.status.success();
        if !recovered {
            leaks.push(format!(
                "audit verify: {}",
                String::from_utf8_lossy(&verify.stderr)
            ));
        }
        let mut s2 = serve::Server::start_in(dir.clone(), &[]);
        s2.key = key.clone().expect("key");
        let (st, v) = s2.call("GET", "/v1/audit?limit=5", None);
        if st != 200 || v["chain"]["intact"] != true {
            recovered = false;
            leaks.push(format!("GET /v1/audit after a restart: {st} {v}"));
        }
        let after = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        drop(s2);
        let m = mounts_under(&dir);
        if !m.is_empty() {
            leaks.push(format!("mounts {m:?}"));
        }
        let got = format!("{answered} answered, +{} records", after - before);
        rows.push((i, "audit", delay, got, recovered, leaks));
    }
    report(&rows, &log);
    let _ = std::fs::remove_dir_all(&dir);
}
