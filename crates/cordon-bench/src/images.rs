//! `cordon-bench`'s image part: the same multi-layer busybox image, built here with umoci and
//! served by Debian's docker-registry on loopback, (1) pulled and unpacked cold by cordon and by
//! `skopeo copy` + `umoci unpack`, and (2) cold-started with `cordon run --image` next to a
//! host-root `cordon run` and `podman run --rm` (when podman is installed), (3) `cordon image
//! commit` of a sandbox that wrote 200 MB against `podman commit` of a container that did, and
//! (4) `cordon image build` of a five-step Dockerfile, cold and cached, against `podman build`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::{median, ms, ratio, time_once};

/// Layers of the benchmark image (busybox, then one file of `LAYER_BYTES` each).
const EXTRA_LAYERS: usize = 4;
const LAYER_BYTES: usize = 4 << 20;

fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn sh(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Removed (with everything in it) on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwX")
            .arg(&self.0)
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// docker-registry on 127.0.0.1 (its pid), stopped on drop. It is not our child: the bench
/// times each run until every child it has is gone (`reaping::wait_all`), which a registry
/// running beside the timed commands would never be.
struct Registry(rustix::process::Pid);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, rustix::process::Signal::TERM);
    }
}

fn start_registry(dir: &Path) -> Result<(Registry, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))?;
    let cfg = dir.join("registry.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("registry").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    // Started by a shell that exits at once, while we are not a subreaper: the registry is
    // adopted by init, not by us.
    rustix::process::set_child_subreaper(None).map_err(|e| format!("prctl: {e}"))?;
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg("docker-registry serve \"$0\" >/dev/null 2>&1 </dev/null & echo $!")
        .arg(&cfg)
        .stderr(Stdio::null())
        .output();
    cordon_linux::reaping::become_subreaper().map_err(|e| format!("prctl: {e}"))?;
    let out = out.map_err(|e| format!("starting docker-registry: {e}"))?;
    let pid = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<i32>()
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or("docker-registry did not start")?;
    let reg = Registry(pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("docker-registry did not start".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((reg, format!("127.0.0.1:{port}")))
}

/// A busybox rootfs in `EXTRA_LAYERS + 1` layers at `<dir>/oci:t`.
fn build_image(dir: &Path, rootless: bool) -> Result<PathBuf, String> {
    let oci = dir.join("oci");
    let bundle = dir.join("bundle");
    let layout = format!("{}:t", oci.display());
    sh(Command::new("umoci").arg("init").arg("--layout").arg(&oci))?;
    sh(Command::new("umoci").args(["new", "--image", &layout]))?;
    let mut unpack = Command::new("umoci");
    unpack.arg("unpack");
    if rootless {
        unpack.arg("--rootless");
    }
    sh(unpack.args(["--image", &layout]).arg(&bundle))?;
    let root = bundle.join("rootfs");
    let busybox = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("busybox"))
        .find(|p| p.is_file())
        .ok_or("busybox not found")?;
    let io = |e: std::io::Error| e.to_string();
    std::fs::create_dir_all(root.join("bin")).map_err(io)?;
    std::fs::copy(&busybox, root.join("bin/busybox")).map_err(io)?;
    for applet in ["sh", "true"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).map_err(io)?;
    }
    let repack = || {
        sh(Command::new("umoci")
            .args(["repack", "--refresh-bundle", "--image", &layout])
            .arg(&bundle))
    };
    repack()?;
    // Incompressible content, so that gzip does not make the layers trivial.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..EXTRA_LAYERS {
        let bytes: Vec<u8> = (0..LAYER_BYTES / 8)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()
            })
            .collect();
        std::fs::create_dir_all(root.join("data")).map_err(io)?;
        std::fs::write(root.join(format!("data/blob{i}")), bytes).map_err(io)?;
        repack()?;
    }
    Ok(oci)
}

/// The `podman run --rm` command line for the image (pulled once into a storage root under
/// `root`, so that no run is timed with a pull), and the OCI runtime it works with: crun, as
/// Debian's podman defaults to, or runc where crun refuses the host (crun will not run on a
/// hybrid cgroup v1/v2 host whose v2 hierarchy has controllers). Both limits podman sets by
/// default as root (RLIMIT_NOFILE 1048576, RLIMIT_NPROC 4194304) need CAP_SYS_RESOURCE to
/// raise, which a containerised host often lacks; a lower value needs nothing, and neither
/// changes what a start of /bin/true costs.
/// `podman` with its storage under `root` and the OCI runtime `runtime`.
fn podman_base(root: &Path, runtime: &str) -> Vec<String> {
    let mut v: Vec<String> = vec!["podman".into(), "--root".into()];
    v.push(root.join("root").display().to_string());
    v.push("--runroot".into());
    v.push(root.join("run").display().to_string());
    // Or podman bind-mounts its overlay directory onto itself and leaves that mount
    // behind in the scratch dir.
    v.extend(
        [
            "--storage-opt",
            "overlay.skip_mount_home=true",
            "--runtime",
            runtime,
        ]
        .map(String::from),
    );
    v
}

fn podman_variant(root: &Path, reference: &str) -> Result<(Vec<String>, &'static str), String> {
    let base = |runtime: &str| podman_base(root, runtime);
    let mut pull = base("crun");
    pull.extend(["pull", "-q", "--tls-verify=false", reference].map(String::from));
    sh(Command::new(&pull[0]).args(&pull[1..]))
        .map_err(|e| format!("podman could not pull the image: {e}"))?;
    let mut refused = Vec::new();
    for runtime in ["crun", "runc"] {
        if !have(runtime) {
            refused.push(format!("{runtime} not installed"));
            continue;
        }
        let mut argv = base(runtime);
        argv.extend(
            [
                "run",
                "--rm",
                "--network=none",
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
                reference,
                "/bin/true",
            ]
            .map(String::from),
        );
        match sh(Command::new(&argv[0]).args(&argv[1..])) {
            Ok(()) => return Ok((argv, runtime)),
            Err(e) => refused.push(e),
        }
    }
    Err(format!(
        "podman could not run the image: {}",
        refused.join("; ")
    ))
}

/// Times `f` (which prepares nothing it is not timed for) `n` times: the median.
fn timed(n: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<Duration, String> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed());
    }
    Ok(median(&mut v))
}

/// The image part of the report (one JSON object), or why it was skipped.
pub fn bench_images(me: &str, iterations: u32) -> Value {
    let missing: Vec<&str> = ["docker-registry", "umoci", "skopeo", "busybox"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        return json!({"command": "image", "skipped": format!("{} not installed", missing.join(", "))});
    }
    match run(me, iterations) {
        Ok(v) => v,
        Err(e) => json!({"command": "image", "error": e}),
    }
}

fn run(me: &str, iterations: u32) -> Result<Value, String> {
    let dir =
        Scratch(std::env::temp_dir().join(format!("cordon-bench-image-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).map_err(|e| e.to_string())?;
    let rootless = !rustix::process::geteuid().is_root();
    let oci = build_image(&dir.0, rootless)?;
    let (_registry, host) = start_registry(&dir.0)?;
    let reference = format!("{host}/bench/busybox:1");
    sh(Command::new("skopeo")
        .args(["--insecure-policy", "copy", "-q", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:t", oci.display()))
        .arg(format!("docker://{reference}"))
        .env("TMPDIR", &dir.0))?;

    // Cold pull + unpack: a fresh store (and a fresh skopeo/umoci target) each time.
    let pulls = (iterations as usize).clamp(3, 10);
    let mut k = 0;
    let cordon_pull = timed(pulls, || {
        k += 1;
        let data = dir.0.join(format!("pull-{k}"));
        let r = sh(Command::new(me)
            .args(["image", "pull", "--data-dir"])
            .arg(&data)
            .arg(&reference));
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwX")
            .arg(&data)
            .output();
        let _ = std::fs::remove_dir_all(&data);
        r
    })?;
    let skopeo_umoci = timed(pulls, || {
        k += 1;
        let layout = dir.0.join(format!("skopeo-{k}"));
        let bundle = dir.0.join(format!("umoci-{k}"));
        let r = sh(Command::new("skopeo")
            .args(["--insecure-policy", "copy", "-q", "--src-tls-verify=false"])
            .arg(format!("docker://{reference}"))
            .arg(format!("oci:{}:t", layout.display()))
            .env("TMPDIR", &dir.0))
        .and_then(|_| {
            let mut u = Command::new("umoci");
            u.arg("unpack");
            if rootless {
                u.arg("--rootless");
            }
            sh(u.arg("--image")
                .arg(format!("{}:t", layout.display()))
                .arg(&bundle))
        });
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+rwX")
            .arg(&bundle)
            .output();
        let _ = std::fs::remove_dir_all(&layout);
        let _ = std::fs::remove_dir_all(&bundle);
        r
    })?;

    // Cold starts, interleaved: from the image, from the host's root, and podman.
    let data = dir.0.join("store");
    sh(Command::new(me)
        .args(["image", "pull", "--data-dir"])
        .arg(&data)
        .arg(&reference))?;
    let data_s = data.display().to_string();
    let mut variants: Vec<(&str, Vec<String>)> = vec![
        (
            "cordon --image",
            [
                me,
                "run",
                "--data-dir",
                &data_s,
                "--image",
                &reference,
                "--",
                "/bin/true",
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "cordon host root",
            [me, "run", "--", "/bin/true"].map(String::from).to_vec(),
        ),
    ];
    let podman = if have("podman") {
        match podman_variant(&dir.0.join("podman"), &reference) {
            Ok((argv, runtime)) => {
                variants.push(("podman run --rm", argv));
                Some(format!("runtime {runtime}"))
            }
            Err(e) => Some(e),
        }
    } else {
        Some("podman not installed".to_string())
    };
    let runs = (iterations as usize).max(3);
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    for (_, argv) in &variants {
        time_once(argv)?;
    }
    for _ in 0..runs {
        for (i, (_, argv)) in variants.iter().enumerate() {
            samples[i].push(time_once(argv)?.exited);
        }
    }
    let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    let image = medians[0];
    let host = medians[1];
    let podman_ms = medians.get(2).copied();
    let podman_runtime = podman
        .as_deref()
        .and_then(|p| p.strip_prefix("runtime "))
        .map(str::to_string);
    let commit = bench_commit(
        me,
        &dir.0,
        &data,
        &reference,
        podman_runtime.as_deref(),
        iterations,
    )
    .unwrap_or_else(|e| json!({"error": e}));
    let build = bench_build(
        me,
        &dir.0,
        &data,
        &reference,
        podman_runtime.as_deref(),
        iterations,
    )
    .unwrap_or_else(|e| json!({"error": e}));
    Ok(json!({
        "build": build,
        "commit": commit,
        "command": "image",
        "layers": EXTRA_LAYERS + 1,
        "image_bytes": EXTRA_LAYERS * LAYER_BYTES,
        "pull_runs": pulls,
        "cold_pull_unpack_ms": {"cordon": ms(cordon_pull), "skopeo+umoci": ms(skopeo_umoci)},
        "pull_vs_skopeo_umoci": ratio(cordon_pull, skopeo_umoci),
        "start_runs": runs,
        "start_median_ms": {
            "cordon --image": ms(image),
            "cordon host root": ms(host),
            "podman run --rm": podman_ms.map(ms),
        },
        "image_vs_host_root": ratio(image, host),
        "image_vs_podman": podman_ms.map(|p| ratio(image, p)),
        // The runtime podman used, or why there is no podman row.
        "podman": podman,
    }))
}

/// The build rows' Dockerfile: five steps on the benchmark image (`{base}`).
const BUILD_FILE: &str = "FROM {base}
ENV GREETING=hello
COPY data.txt /app/data.txt
RUN mkdir -p /app/out && echo built > /app/out/x
WORKDIR /app
RUN cat /app/data.txt > /app/out/y
";

/// `cordon image build` of a five-step Dockerfile (ENV, COPY of 1 MiB, RUN, WORKDIR, RUN) on
/// the benchmark image, cold (`--no-cache`) and cached, against `podman build` of the same
/// file and context (`--no-cache`, then from its layer cache), interleaved; the base is in
/// both stores already, so neither pulls.
fn bench_build(
    me: &str,
    dir: &Path,
    data: &Path,
    reference: &str,
    podman_runtime: Option<&str>,
    iterations: u32,
) -> Result<Value, String> {
    let ctx = dir.join("build-ctx");
    std::fs::create_dir_all(&ctx).map_err(|e| e.to_string())?;
    std::fs::write(ctx.join("data.txt"), vec![b'x'; 1 << 20]).map_err(|e| e.to_string())?;
    std::fs::write(
        ctx.join("Dockerfile"),
        BUILD_FILE.replace("{base}", reference),
    )
    .map_err(|e| e.to_string())?;
    let ctx_s = ctx.display().to_string();
    let data_s = data.display().to_string();
    let cordon = |no_cache: bool| -> Vec<String> {
        let mut v: Vec<String> = [
            me,
            "image",
            "build",
            "-t",
            "bench-build:1",
            "--data-dir",
            &data_s,
        ]
        .map(String::from)
        .to_vec();
        if no_cache {
            v.push("--no-cache".into());
        }
        v.push(ctx_s.clone());
        v
    };
    let podman = |no_cache: bool| -> Option<Vec<String>> {
        let mut v = podman_base(&dir.join("podman"), podman_runtime?);
        v.extend(
            [
                "build",
                "-q",
                "--pull=never",
                "--layers",
                "-t",
                "bench-build:1",
            ]
            .map(String::from),
        );
        if no_cache {
            v.push("--no-cache".into());
        }
        v.push(ctx_s.clone());
        Some(v)
    };
    let runs = (iterations as usize).clamp(3, 5);
    // Each once first: the caches filled, and the page cache warm for both.
    time_once(&cordon(false))?;
    let podman_ok = match podman(false) {
        Some(argv) => time_once(&argv).map(|_| ()),
        None => Err("podman cannot run the image here".to_string()),
    };
    let mut rows = Vec::new();
    for no_cache in [true, false] {
        let (mut c, mut p) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            c.push(time_once(&cordon(no_cache))?.exited);
            if let (Ok(()), Some(argv)) = (&podman_ok, podman(no_cache)) {
                p.push(time_once(&argv)?.exited);
            }
        }
        let c = median(&mut c);
        let p = (!p.is_empty()).then(|| median(&mut p));
        rows.push((c, p));
    }
    let [(cold, cold_p), (cached, cached_p)] = [rows[0], rows[1]];
    Ok(json!({
        "runs": runs,
        "steps": 5,
        "median_ms": {
            "cordon cold": ms(cold),
            "cordon cached": ms(cached),
            "podman build cold": cold_p.map(ms),
            "podman build cached": cached_p.map(ms),
        },
        "cold_vs_podman": cold_p.map(|p| ratio(cold, p)),
        "cached_vs_podman": cached_p.map(|p| ratio(cached, p)),
        "podman": podman_ok.err(),
    }))
}

/// Bytes the sandbox (and the podman container) writes before each commit.
const COMMIT_BYTES_MB: u32 = 200;

/// `cordon image commit` of a sandbox holding `COMMIT_BYTES_MB` of new files (a persistent
/// sandbox of the image in the store at `data`, through a private `cordon serve`) against
/// `podman commit` of a container that wrote the same, each timed alone: the commit only, not
/// the writes.
fn bench_commit(
    me: &str,
    scratch: &Path,
    data: &Path,
    reference: &str,
    podman_runtime: Option<&str>,
    iterations: u32,
) -> Result<Value, String> {
    let write = format!(
        "/bin/busybox dd if=/dev/urandom of=/data/big bs=1M count={COMMIT_BYTES_MB} 2>/dev/null"
    );
    let runs = (iterations as usize).clamp(3, 5);
    let server = crate::PrivateServer::start(me, data)?;
    let cordon = (|| -> Result<Duration, String> {
        let url = server.url.clone();
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(300))
            .build();
        let post = |path: &str, body: Value| -> Result<Value, String> {
            agent
                .post(&format!("{url}{path}"))
                .send_json(body)
                .map_err(|e| format!("POST {path}: {e}"))?
                .into_json()
                .map_err(|e| e.to_string())
        };
        let sb = post(
            "/v1/sandboxes",
            json!({"image": reference, "disk": "1G", "memory": "1G"}),
        )?;
        let id = sb["id"].as_str().ok_or("no sandbox id")?.to_string();
        let ran = post(
            &format!("/v1/sandboxes/{id}/exec"),
            json!({"cmd": ["/bin/sh", "-c", write], "timeout": "300s"}),
        )?;
        if ran["exit_code"] != 0 {
            return Err(format!(
                "writing {COMMIT_BYTES_MB} MB in the sandbox: {ran}"
            ));
        }
        let mut n = 0;
        let t = timed(runs, || {
            n += 1;
            post(
                &format!("/v1/sandboxes/{id}/commit"),
                json!({"reference": format!("bench-commit:{n}")}),
            )
            .map(|_| ())
        });
        let _ = agent.delete(&format!("{url}/v1/sandboxes/{id}")).call();
        t
    })();
    drop(server);
    let cordon = cordon?;
    let podman = match podman_runtime {
        None => Err("podman could not run the image".to_string()),
        Some(runtime) => (|| {
            let root = scratch.join("podman");
            let base = podman_base(&root, runtime);
            let mut run = base.clone();
            run.extend(
                [
                    "run",
                    "--name",
                    "bench-commit",
                    "--network=none",
                    "--ulimit",
                    "nofile=1024:1024",
                    "--ulimit",
                    "nproc=1024:1024",
                    reference,
                    "/bin/sh",
                    "-c",
                    &write,
                ]
                .map(String::from),
            );
            sh(Command::new(&run[0]).args(&run[1..]))?;
            let mut n = 0;
            let t = timed(runs, || {
                n += 1;
                let mut c = base.clone();
                c.extend(
                    ["commit", "-q", "bench-commit", &format!("bench-commit:{n}")]
                        .map(String::from),
                );
                sh(Command::new(&c[0]).args(&c[1..]))
            });
            let mut rm = base.clone();
            rm.extend(["rm", "-f", "bench-commit"].map(String::from));
            let _ = sh(Command::new(&rm[0]).args(&rm[1..]));
            t
        })(),
    };
    Ok(json!({
        "mb": COMMIT_BYTES_MB,
        "runs": runs,
        "median_ms": {"cordon image commit": ms(cordon), "podman commit": podman.as_ref().ok().map(|p| ms(*p))},
        "commit_vs_podman": podman.as_ref().ok().map(|p| ratio(cordon, *p)),
        "podman": podman.err(),
    }))
}

pub fn print(v: &Value) {
    if let Some(why) = v["skipped"].as_str() {
        println!("images: skipped ({why})");
        return;
    }
    if let Some(e) = v["error"].as_str() {
        println!("images: failed: {e}");
        return;
    }
    let f = |a: &str, b: &str| v[a][b].as_f64().unwrap_or(0.0);
    println!(
        "images: a {}-layer busybox image ({} MiB) from docker-registry on loopback:",
        v["layers"],
        v["image_bytes"].as_u64().unwrap_or(0) >> 20
    );
    println!(
        "  cold pull + unpack ({} runs, medians): cordon {:8.2} ms   skopeo copy + umoci unpack {:8.2} ms   = {:.2}x (target <= 1.00x)",
        v["pull_runs"],
        f("cold_pull_unpack_ms", "cordon"),
        f("cold_pull_unpack_ms", "skopeo+umoci"),
        v["pull_vs_skopeo_umoci"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  cold start of /bin/true ({} runs each, medians): --image {:8.2} ms   host root {:8.2} ms   = {:.2}x (target <= 1.30x)",
        v["start_runs"],
        f("start_median_ms", "cordon --image"),
        f("start_median_ms", "cordon host root"),
        v["image_vs_host_root"].as_f64().unwrap_or(0.0)
    );
    let c = &v["commit"];
    match (c["median_ms"]["cordon image commit"].as_f64(), c["error"].as_str()) {
        (Some(cordon), _) => println!(
            "  commit of a sandbox holding {} MB ({} runs, medians): cordon image commit {:8.2} ms   podman commit {}",
            c["mb"],
            c["runs"],
            cordon,
            match (c["median_ms"]["podman commit"].as_f64(), c["commit_vs_podman"].as_f64()) {
                (Some(p), Some(r)) => format!("{p:8.2} ms   = {r:.2}x"),
                _ => format!("not measured ({})", c["podman"].as_str().unwrap_or("?")),
            }
        ),
        (None, e) => println!("  commit: failed: {}", e.unwrap_or("?")),
    }
    let b = &v["build"];
    match (b["median_ms"]["cordon cold"].as_f64(), b["error"].as_str()) {
        (Some(cold), _) => println!(
            "  build of a 5-step Dockerfile ({} runs, medians): cordon cold {cold:8.2} ms, cached {:8.2} ms   podman build {}",
            b["runs"],
            b["median_ms"]["cordon cached"].as_f64().unwrap_or(0.0),
            match (b["cold_vs_podman"].as_f64(), b["cached_vs_podman"].as_f64()) {
                (Some(c), Some(k)) => format!(
                    "cold {:8.2} ms, cached {:8.2} ms   = {c:.2}x cold (target <= 1.0x), {k:.2}x cached (target <= 0.2x)",
                    b["median_ms"]["podman build cold"].as_f64().unwrap_or(0.0),
                    b["median_ms"]["podman build cached"].as_f64().unwrap_or(0.0)
                ),
                _ => format!("not measured ({})", b["podman"].as_str().unwrap_or("?")),
            }
        ),
        (None, e) => println!("  build: failed: {}", e.unwrap_or("?")),
    }
    match v["image_vs_podman"].as_f64() {
        Some(r) => println!(
            "  podman run --rm ({}) {:8.2} ms   --image / podman = {:.3}x (target <= 0.05x)",
            v["podman"].as_str().unwrap_or("?"),
            f("start_median_ms", "podman run --rm"),
            r
        ),
        None => println!(
            "  podman: {}",
            v["podman"].as_str().unwrap_or("not measured")
        ),
    }
}
