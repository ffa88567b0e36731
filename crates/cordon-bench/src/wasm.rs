//! `cordon-bench`'s wasm rows: a warm-cache `cordon run -- hello.wasm` next to the same C
//! program compiled natively (bare, and in a process sandbox) and to `wasmtime run` when that
//! CLI is installed; and a CPU-bound module against its native build. The programs are built
//! here with clang and wasi-libc; without them the rows are skipped with what to install.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{median_of, ms, ratio, time_once, Sample};

const HELLO_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "compute")) {
        long n = atol(argv[2]);
        unsigned long long x = 1, acc = 0;
        for (long i = 0; i < n; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            acc += (x >> 33) % 1000003;
        }
        printf("%llu\n", acc);
        return 0;
    }
    printf("hello\n");
    return 0;
}
"#;

/// Iterations of the CPU-bound loop: about a second of native time on a small machine.
const COMPUTE_N: &str = "400000000";

struct Programs {
    dir: PathBuf,
    wasm: PathBuf,
    native: PathBuf,
}

impl Drop for Programs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn build() -> Result<Programs, String> {
    let dir = std::env::temp_dir().join(format!("cordon-bench-wasm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let p = Programs {
        wasm: dir.join("hello.wasm"),
        native: dir.join("hello"),
        dir,
    };
    let src = p.dir.join("hello.c");
    std::fs::write(&src, HELLO_C).map_err(|e| format!("{}: {e}", src.display()))?;
    for (cc, args, out) in [
        ("clang", &["--target=wasm32-wasi", "-O2"][..], &p.wasm),
        ("cc", &["-O2"][..], &p.native),
    ] {
        let r = Command::new(cc)
            .args(args)
            .arg("-o")
            .arg(out)
            .arg(&src)
            .output()
            .map_err(|e| format!("{cc}: {e}"))?;
        if !r.status.success() {
            return Err(format!(
                "{cc} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&r.stderr).trim()
            ));
        }
    }
    // Readable by a sandbox's own uid, as root.
    let _ = std::fs::set_permissions(&p.dir, std::os::unix::fs::PermissionsExt::from_mode(0o755));
    Ok(p)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn medians(samples: &[Sample]) -> Duration {
    median_of(samples, |s| s.exited)
}

/// `cordon-wasm` beside `cordon`, else on PATH.
fn locate_runtime(cordon: &str) -> Result<PathBuf, String> {
    let beside = Path::new(cordon).parent().map(|d| d.join("cordon-wasm"));
    if let Some(p) = beside.filter(|p| p.is_file()) {
        return Ok(p);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("cordon-wasm"))
        .find(|p| p.is_absolute() && p.is_file())
        .ok_or_else(|| format!("cordon-wasm is found neither beside {cordon} nor on PATH"))
}

/// Runs the wasm rows; prints them unless `json`, and returns them as a JSON report.
pub fn bench(me: &str, iterations: u32, json: bool) -> Result<serde_json::Value, String> {
    // The runtime is the separate cordon-wasm binary beside the cordon measured, or on PATH,
    // as `cordon run` looks for it.
    let runtime = match locate_runtime(me) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon-bench: wasm rows skipped: {e}");
            return Ok(serde_json::json!({"wasm": "skipped", "why": e}));
        }
    };
    if !json {
        println!("wasm runtime: {}", runtime.display());
    }
    let p = match build() {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "cordon-bench: wasm rows skipped: cannot build the test programs ({e}); \
                 install clang lld wasi-libc libclang-rt-dev-wasm32"
            );
            return Ok(serde_json::json!({"wasm": "skipped", "why": e}));
        }
    };
    let bind = format!("{}:/opt/hello", s(&p.native));
    let mut variants: Vec<(&str, Vec<String>)> = vec![
        ("native", vec![s(&p.native)]),
        (
            "cordon process",
            [me, "run", "--ro", &bind, "--", "/opt/hello"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "cordon wasm",
            vec![me.into(), "run".into(), "--".into(), s(&p.wasm)],
        ),
        // The floor under any confined run: the same runtime, engine, cache and capture, in
        // one process with no confinement (see cordon-wasm's `bench-unconfined`).
        (
            "wasm unconfined",
            vec![s(&runtime), "bench-unconfined".into(), s(&p.wasm)],
        ),
    ];
    let have_wasmtime = Command::new("wasmtime")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if have_wasmtime {
        variants.push((
            "wasmtime run",
            vec!["wasmtime".into(), "run".into(), s(&p.wasm)],
        ));
    }
    // The first run of each compiles (wasm) and warms the page cache.
    for (_, argv) in &variants {
        time_once(argv)?;
    }
    let mut samples: Vec<Vec<Sample>> = variants.iter().map(|_| Vec::new()).collect();
    for _ in 0..iterations {
        for (i, (_, argv)) in variants.iter().enumerate() {
            samples[i].push(time_once(argv)?);
        }
    }
    let start: Vec<(String, Duration)> = variants
        .iter()
        .zip(&samples)
        .map(|((n, _), s)| (n.to_string(), medians(s)))
        .collect();
    let get = |n: &str| {
        start
            .iter()
            .find(|(m, _)| m == n)
            .map(|(_, d)| *d)
            .unwrap_or_default()
    };
    let wasm_vs_process = ratio(get("cordon wasm"), get("cordon process"));
    let unconfined_vs_process = ratio(get("wasm unconfined"), get("cordon process"));

    // CPU-bound: the same loop, natively and in the confined wasm runtime (three
    // runs each; the module's start-up is the hello row's, a small part of it).
    let runs = 3;
    let native_cmd = vec![s(&p.native), "compute".into(), COMPUTE_N.into()];
    let wasm_cmd = vec![
        me.to_string(),
        "run".into(),
        "--timeout".into(),
        "5m".into(),
        "--".into(),
        s(&p.wasm),
        "compute".into(),
        COMPUTE_N.into(),
    ];
    let mut native_s = Vec::new();
    let mut wasm_s = Vec::new();
    for _ in 0..runs {
        native_s.push(time_once(&native_cmd)?);
        wasm_s.push(time_once(&wasm_cmd)?);
    }
    let native_t = medians(&native_s);
    let wasm_t = medians(&wasm_s);
    // Speed relative to native (1.0 = as fast), with and without the warm start-up.
    let speed = ratio(native_t, wasm_t);
    let speed_compute = ratio(native_t, wasm_t.saturating_sub(get("cordon wasm")));

    if !json {
        println!(
            "hello in C ({iterations} runs each, medians until it exits; wasm with its compiled code cached):"
        );
        for (n, d) in &start {
            println!("  {n:15} {:8.2} ms", ms(*d));
        }
        if !have_wasmtime {
            println!("  (wasmtime run: not installed, not compared)");
        }
        println!(
            "  cordon wasm / cordon process = {wasm_vs_process:.2}x  (target: <= 0.50x; the wasm \
             runtime confines itself, no process sandbox)"
        );
        println!(
            "  wasm unconfined / cordon process = {unconfined_vs_process:.2}x  (the floor: the \
             runtime alone in one process, before cordon's CLI, the runtime's confinement and \
             the supervisor add theirs)"
        );
        println!(
            "CPU-bound loop ({COMPUTE_N} iterations, median of {runs}): native {:.0} ms, cordon \
             wasm {:.0} ms",
            ms(native_t),
            ms(wasm_t)
        );
        println!(
            "  wasm speed / native = {speed:.2}x, {speed_compute:.2}x without the start-up  \
             (target: >= 0.50x)"
        );
    }
    Ok(serde_json::json!({
        "command": "hello.wasm",
        "iterations": iterations,
        "median_ms": start.iter().map(|(n, d)| (n.clone(), serde_json::json!(ms(*d)))).collect::<serde_json::Map<_, _>>(),
        "wasm_vs_process": wasm_vs_process,
        "wasm_unconfined_vs_process": unconfined_vs_process,
        "compute_native_ms": ms(native_t),
        "compute_wasm_ms": ms(wasm_t),
        "compute_speed_vs_native": speed,
        "compute_speed_vs_native_without_startup": speed_compute,
    }))
}
