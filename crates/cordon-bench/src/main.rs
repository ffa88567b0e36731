//! `cordon-bench`: cordon measured from outside, side by side in one run with its peers —
//! cold starts next to bare exec and bubblewrap (and on a host that refuses namespaces), the
//! server's warm paths, WebAssembly modules against native code, learn mode against a plain
//! run, images against podman and skopeo + umoci, and state (snapshots, pause to disk, forks)
//! against `cp -a` — so the ratios are measured on the same machine at the same moment.
//! It drives the `cordon` binary as a user would; nothing of it is in that binary.
//!
//! Threat model: none of its own — it runs trusted commands (cordon, bwrap, podman) on the
//! machine it measures, and sends traffic only to loopback.

mod images;
mod learn;
mod refuse;
mod secrets;
mod state;
mod wasm;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use cordon_linux::reaping;

/// Measures cordon side by side with bare exec, bubblewrap, podman and skopeo + umoci.
#[derive(Parser, Debug)]
#[command(
    name = "cordon-bench",
    after_help = "Every row runs interleaved with its peers in the same process, so drift on the \
machine affects them alike; the ratios are what to read.\n\n\
Examples:\n  cordon-bench --iterations 30\n  cordon-bench --cordon ./target/dist/cordon --json --no-images"
)]
pub struct BenchArgs {
    /// The cordon binary to measure (default: the one beside cordon-bench, else `cordon` on
    /// PATH).
    #[arg(long, value_name = "PATH")]
    cordon: Option<PathBuf>,
    /// A second cordon binary (say, the previous release) timed beside the first, interleaved
    /// in the cold starts and with a server of its own for the warm paths: the `baseline`
    /// rows, and cordon's ratio to them.
    #[arg(long, value_name = "PATH")]
    baseline: Option<PathBuf>,
    /// Runs per variant (interleaved, so drift affects all variants alike).
    #[arg(long, default_value_t = 50)]
    iterations: u32,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Skip the `cordon serve` part (persistent sandboxes and code cells over HTTP).
    #[arg(long)]
    no_serve: bool,
    /// Skip the WebAssembly part (a cached module against native code and a process sandbox).
    #[arg(long)]
    no_wasm: bool,
    /// Skip the image part (pull + unpack and cold starts from an image on a loopback
    /// registry; needs docker-registry, umoci, skopeo and busybox).
    #[arg(long)]
    no_images: bool,
    /// Skip the learn-mode part (`cordon run --learn` next to `cordon run`: a cold python and
    /// a 1,000-file build).
    #[arg(long)]
    no_learn: bool,
    /// Skip the secrets part (a request with an injected secret through TLS termination next
    /// to the plain CONNECT relay, and a 100 MB download through each; needs python3).
    #[arg(long)]
    no_secrets: bool,
    /// Skip the state part (snapshot next to `cp -a`, pause to disk and resume, fork of ten,
    /// create from a snapshot; needs python3 and room for three copies of the tree).
    #[arg(long)]
    no_state: bool,
    /// MB the state part's sandbox holds, in 10,000 files (the target is for 1 GB).
    #[arg(long, default_value_t = 1024, value_name = "MB")]
    state_mb: usize,
}

struct Variant {
    name: String,
    argv: Vec<String>,
    samples: Vec<Sample>,
}

/// One cold start, timed twice: until the command exits (what a caller waits for) and until
/// every process it started is gone (bubblewrap exits before its sandbox's pid 1 has torn the
/// namespaces down; cordon waits for that, so that nothing of the sandbox outlives it).
pub(crate) struct Sample {
    pub(crate) exited: Duration,
    gone: Duration,
    /// User + system CPU of the whole tree.
    cpu: Duration,
}

fn bwrap_argv(cmd: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--ro-bind",
        "/etc",
        "/etc",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(cmd.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn time_once(argv: &[String]) -> Result<Sample, String> {
    let start = Instant::now();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    let end =
        reaping::wait_child(child.id()).map_err(|e| format!("waiting for {}: {e}", argv[0]))?;
    let exited = start.elapsed();
    // As subreaper, the orphans it left (its sandbox's last processes) come back to us.
    let orphans_cpu =
        reaping::wait_all().map_err(|e| format!("waiting for what {} left: {e}", argv[0]))?;
    let gone = start.elapsed();
    if end.code != 0 {
        return Err(format!("{} exited with {}", argv.join(" "), end.code));
    }
    Ok(Sample {
        exited,
        gone,
        cpu: end.cpu + orphans_cpu,
    })
}

/// `cordon-bench __refuse-namespaces PROGRAM ARGS…`: execs PROGRAM under a seccomp filter
/// that refuses namespace creation as Docker's default profile does; returns only on failure.
fn exec_refusing_namespaces(argv: Vec<std::ffi::OsString>) -> i32 {
    use std::os::unix::process::CommandExt;
    let Some((prog, args)) = argv.split_first() else {
        eprintln!("cordon-bench: __refuse-namespaces needs a program");
        return 125;
    };
    if let Err(e) = refuse::refuse_namespaces() {
        eprintln!("cordon-bench: {e}");
        return 125;
    }
    let e = Command::new(prog).args(args).exec();
    eprintln!("cordon-bench: {}: {e}", prog.to_string_lossy());
    127
}

/// The cordon binary to measure: `--cordon`, else the one beside this binary, else PATH's.
fn cordon_binary(given: Option<PathBuf>) -> PathBuf {
    if let Some(p) = given {
        return p;
    }
    std::env::current_exe()
        .ok()
        .and_then(|me| me.parent().map(|d| d.join("cordon")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("cordon"))
}

fn main() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "__refuse-namespaces")
    {
        std::process::exit(exec_refusing_namespaces(
            std::env::args_os().skip(2).collect(),
        ));
    }
    std::process::exit(run(BenchArgs::parse()));
}

pub(crate) fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub(crate) fn median_of(samples: &[Sample], f: impl Fn(&Sample) -> Duration) -> Duration {
    let mut v: Vec<Duration> = samples.iter().map(f).collect();
    median(&mut v)
}

pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    ms(a) / ms(b).max(1e-9)
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(a: BenchArgs) -> i32 {
    let bench_exe = match std::env::current_exe() {
        Ok(p) => p.display().to_string(),
        Err(e) => {
            eprintln!("cordon-bench: cannot find my own executable: {e}");
            return 125;
        }
    };
    let me = cordon_binary(a.cordon.clone()).display().to_string();
    // Orphans of the timed commands (bubblewrap's pid 1 outlives bubblewrap) are waited for
    // here, so that each run is timed until its sandbox is gone, too.
    if let Err(e) = reaping::become_subreaper() {
        eprintln!("cordon-bench: cannot become a subreaper: {e}");
        return 125;
    }
    let have_bwrap = Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_bwrap {
        eprintln!("cordon-bench: bubblewrap not found; install it (apt-get install bubblewrap) to compare");
    }
    let mut report = Vec::new();
    for (label, cmd) in [
        ("/bin/true", vec!["/bin/true"]),
        ("python3 -c pass", vec!["/usr/bin/python3", "-c", "pass"]),
    ] {
        let mut variants = vec![Variant {
            name: "bare".into(),
            argv: cmd.iter().map(|s| s.to_string()).collect(),
            samples: Vec::new(),
        }];
        if have_bwrap {
            variants.push(Variant {
                name: "bwrap".into(),
                argv: bwrap_argv(&cmd),
                samples: Vec::new(),
            });
        }
        let mut c = vec![me.clone(), "run".into(), "--".into()];
        c.extend(cmd.iter().map(|s| s.to_string()));
        // The same run where the host refuses namespaces (Docker's seccomp profile): Landlock,
        // seccomp, rlimits and the cgroup only (see the README's "Hosts that say no").
        let mut d = vec![bench_exe.clone(), "__refuse-namespaces".into()];
        d.extend(c.iter().cloned());
        variants.push(Variant {
            name: "cordon".into(),
            argv: c,
            samples: Vec::new(),
        });
        variants.push(Variant {
            name: "cordon-no-ns".into(),
            argv: d,
            samples: Vec::new(),
        });
        if let Some(base) = &a.baseline {
            let mut b = vec![base.display().to_string(), "run".into(), "--".into()];
            b.extend(cmd.iter().map(|s| s.to_string()));
            variants.push(Variant {
                name: "baseline".into(),
                argv: b,
                samples: Vec::new(),
            });
        }
        // Warm the page cache once for each, then interleave.
        for v in &variants {
            if let Err(e) = time_once(&v.argv) {
                eprintln!("cordon-bench: {e}");
                return 125;
            }
        }
        for _ in 0..a.iterations {
            for v in &mut variants {
                match time_once(&v.argv) {
                    Ok(d) => v.samples.push(d),
                    Err(e) => {
                        eprintln!("cordon-bench: {e}");
                        return 125;
                    }
                }
            }
        }
        // Each variant's medians, field by field.
        let medians: Vec<(String, Sample)> = variants
            .iter()
            .map(|v| {
                let m = Sample {
                    exited: median_of(&v.samples, |s| s.exited),
                    gone: median_of(&v.samples, |s| s.gone),
                    cpu: median_of(&v.samples, |s| s.cpu),
                };
                (v.name.clone(), m)
            })
            .collect();
        let get = |n: &str| medians.iter().find(|m| m.0 == n).map(|m| &m.1);
        let zero = Sample {
            exited: Duration::ZERO,
            gone: Duration::ZERO,
            cpu: Duration::ZERO,
        };
        let cordon = get("cordon").unwrap_or(&zero);
        let bare = get("bare").unwrap_or(&zero);
        let bwrap = get("bwrap");
        let per = |pick: fn(&Sample) -> Duration| {
            medians
                .iter()
                .map(|(n, m)| (n.clone(), serde_json::json!(ms(pick(m)))))
                .collect::<serde_json::Map<_, _>>()
        };
        report.push(serde_json::json!({
            "command": label,
            "iterations": a.iterations,
            "median_ms": per(|m| m.exited),
            "gone_median_ms": per(|m| m.gone),
            "cpu_median_ms": per(|m| m.cpu),
            "cordon_vs_bare": ratio(cordon.exited, bare.exited),
            "cordon_vs_bwrap": bwrap.map(|b| ratio(cordon.exited, b.exited)),
            "cordon_vs_bwrap_gone": bwrap.map(|b| ratio(cordon.gone, b.gone)),
            "cordon_vs_bwrap_cpu": bwrap.map(|b| ratio(cordon.cpu, b.cpu)),
            "cordon_no_ns_vs_cordon": get("cordon-no-ns").map(|d| ratio(d.exited, cordon.exited)),
            "cordon_vs_baseline": get("baseline").map(|b| ratio(cordon.exited, b.exited)),
        }));
        if !a.json {
            println!(
                "{label} ({} runs each, medians of a cold start: until it exits / until all it started is gone / CPU of the whole tree):",
                a.iterations
            );
            for (n, m) in &medians {
                println!(
                    "  {n:12} {:8.2} ms   gone {:8.2} ms   CPU {:8.2} ms",
                    ms(m.exited),
                    ms(m.gone),
                    ms(m.cpu)
                );
            }
            println!(
                "  cordon / bare  = {:.2}x",
                ratio(cordon.exited, bare.exited)
            );
            if let Some(d) = get("cordon-no-ns") {
                println!(
                    "  cordon without namespaces (a host refusing them, as Docker's seccomp profile does) / cordon = {:.2}x",
                    ratio(d.exited, cordon.exited)
                );
            }
            if let Some(b) = get("baseline") {
                println!(
                    "  cordon / baseline = {:.2}x, until gone = {:.2}x, CPU = {:.2}x",
                    ratio(cordon.exited, b.exited),
                    ratio(cordon.gone, b.gone),
                    ratio(cordon.cpu, b.cpu)
                );
            }
            if let Some(b) = bwrap {
                println!(
                    "  cordon / bwrap = {:.2}x  (target: <= 1.00x)",
                    ratio(cordon.exited, b.exited)
                );
                println!(
                    "  cordon / bwrap until each sandbox is gone = {:.2}x, CPU per run = {:.2}x",
                    ratio(cordon.gone, b.gone),
                    ratio(cordon.cpu, b.cpu)
                );
            }
        }
    }
    if !a.no_wasm {
        match crate::wasm::bench(&me, a.iterations, a.json) {
            Ok(v) => report.push(v),
            Err(e) => {
                eprintln!("cordon-bench: wasm part: {e}");
                return 125;
            }
        }
    }
    if !a.no_learn {
        match crate::learn::bench(&me, a.iterations, a.json) {
            Ok(v) => report.push(v),
            Err(e) => {
                eprintln!("cordon-bench: learn part: {e}");
                return 125;
            }
        }
    }
    if !a.no_secrets {
        match crate::secrets::bench(&me, a.iterations, a.json) {
            Ok(v) => report.push(v),
            Err(e) => {
                eprintln!("cordon-bench: secrets part: {e}");
                return 125;
            }
        }
    }
    if !a.no_state {
        match crate::state::bench(&me, a.state_mb, a.iterations, a.json) {
            Ok(v) => report.push(v),
            Err(e) => {
                eprintln!("cordon-bench: state part: {e}");
                return 125;
            }
        }
    }
    if !a.no_images {
        let v = crate::images::bench_images(&me, a.iterations);
        if !a.json {
            crate::images::print(&v);
        }
        report.push(v);
    }
    if !a.no_serve {
        let cold_true = report
            .first()
            .and_then(|r| r["median_ms"]["cordon"].as_f64())
            .unwrap_or(0.0);
        let cold_python = report
            .get(1)
            .and_then(|r| r["median_ms"]["bare"].as_f64())
            .unwrap_or(0.0);
        let mut servers = vec![(me.clone(), "cordon")];
        if let Some(base) = &a.baseline {
            servers.push((base.display().to_string(), "baseline"));
        }
        let mut warm = Vec::new();
        for (bin, name) in servers {
            match bench_serve(&bin, a.iterations, cold_true, cold_python) {
                Ok(mut v) => {
                    if !a.json {
                        println!("[{name}: {bin}]");
                        print_serve(&v);
                    }
                    v["binary"] = serde_json::json!(name);
                    warm.push(v);
                }
                Err(e) => {
                    eprintln!("cordon-bench: serve part ({name}): {e}");
                    return 125;
                }
            }
        }
        if let [new, base] = &warm[..] {
            let r = |k: &str| {
                new[k].as_f64().unwrap_or(0.0) / base[k].as_f64().unwrap_or(0.0).max(1e-9)
            };
            let ratios = serde_json::json!({
                "create": r("create_ms"),
                "warm_exec": r("warm_exec_ms"),
                "warm_cell": r("warm_cell_ms"),
            });
            if !a.json {
                println!(
                    "  cordon / baseline: create {:.2}x, warm exec {:.2}x, python cell {:.2}x",
                    r("create_ms"),
                    r("warm_exec_ms"),
                    r("warm_cell_ms")
                );
            }
            report.push(serde_json::json!({"serve_cordon_vs_baseline": ratios}));
        }
        report.extend(warm);
    }
    if a.json {
        println!("{}", serde_json::Value::Array(report));
    }
    0
}

/// A `cordon serve` of the benchmark's own on a free loopback port (`--no-auth`), stopped
/// (SIGTERM, then waited for) on drop.
pub(crate) struct PrivateServer {
    child: std::process::Child,
    pub(crate) url: String,
}

impl PrivateServer {
    pub(crate) fn start(me: &str, data_dir: &std::path::Path) -> Result<PrivateServer, String> {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(me)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
                "--data-dir",
            ])
            .arg(data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting cordon serve: {e}"))?;
        let Some(out) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("cordon serve: no stdout".into());
        };
        let mut lines = BufReader::new(out).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(u) = l.strip_prefix("cordon serving on ") {
                        break u.trim().to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err("cordon serve did not start".to_string());
                }
            }
        };
        // Its later output is read and dropped, so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(PrivateServer { child, url })
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let _ = self.child.wait();
    }
}

fn print_serve(v: &serde_json::Value) {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    println!(
        "cordon serve over HTTP on loopback ({} runs each, medians):",
        v["iterations"]
    );
    println!("  create sandbox          {:8.2} ms   / cold `cordon run -- /bin/true` = {:.2}x (target <= 2.0x)", f("create_ms"), f("create_vs_cold_run"));
    println!("  exec /bin/true (warm)   {:8.2} ms   / cold `cordon run -- /bin/true` = {:.2}x (target <= 0.5x)", f("warm_exec_ms"), f("warm_exec_vs_cold_run"));
    println!("  python cell `1+1`       {:8.2} ms   / cold `python3 -c pass` on the host = {:.2}x (target <= 0.1x)", f("warm_cell_ms"), f("warm_cell_vs_cold_python"));
}

/// Starts a private `cordon serve` and times create, warm exec and a warm code cell.
fn bench_serve(
    me: &str,
    iterations: u32,
    cold_true_ms: f64,
    cold_python_ms: f64,
) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("cordon-bench-{}", std::process::id()));
    let server = crate::PrivateServer::start(me, &dir)?;
    let result = (|| {
        let url = server.url.clone();
        let agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(60))
            .build();
        let post = |path: &str, body: serde_json::Value| -> Result<serde_json::Value, String> {
            agent
                .post(&format!("{url}{path}"))
                .send_json(body)
                .map_err(|e| format!("POST {path}: {e}"))?
                .into_json()
                .map_err(|e| e.to_string())
        };
        let delete = |id: &str| {
            let _ = agent.delete(&format!("{url}/v1/sandboxes/{id}")).call();
        };
        let n = iterations.clamp(5, 1000) as usize;
        let mut create = Vec::new();
        for _ in 0..n.min(30) {
            let t = Instant::now();
            let v = post("/v1/sandboxes", json!({}))?;
            create.push(t.elapsed());
            if let Some(id) = v["id"].as_str() {
                delete(id);
            }
        }
        let sb = post("/v1/sandboxes", json!({}))?;
        let id = sb["id"].as_str().ok_or("no sandbox id")?.to_string();
        let exec_path = format!("/v1/sandboxes/{id}/exec");
        let code_path = format!("/v1/sandboxes/{id}/code");
        post(&exec_path, json!({"cmd": ["/bin/true"]}))?;
        let first = post(&code_path, json!({"code": "1+1"}))?;
        if first["results"][0]["text/plain"] != "2" {
            return Err(format!("unexpected cell result: {first}"));
        }
        let mut exec = Vec::new();
        let mut cell = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            post(&exec_path, json!({"cmd": ["/bin/true"]}))?;
            exec.push(t.elapsed());
            let t = Instant::now();
            post(&code_path, json!({"code": "1+1"}))?;
            cell.push(t.elapsed());
        }
        delete(&id);
        let (c, e, k) = (
            ms(median(&mut create)),
            ms(median(&mut exec)),
            ms(median(&mut cell)),
        );
        Ok(json!({
            "command": "serve",
            "iterations": n,
            "create_ms": c,
            "warm_exec_ms": e,
            "warm_cell_ms": k,
            "cold_run_ms": cold_true_ms,
            "cold_python_ms": cold_python_ms,
            "create_vs_cold_run": c / cold_true_ms.max(1e-9),
            "warm_exec_vs_cold_run": e / cold_true_ms.max(1e-9),
            "warm_cell_vs_cold_python": k / cold_python_ms.max(1e-9),
        }))
    })();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    result
}
