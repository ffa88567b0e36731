//! `cordon bench`: cold-start cost of a sandbox, side by side in one run with bare exec and
//! bubblewrap, so the ratios are measured on the same machine at the same moment.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Runs per variant (interleaved, so drift affects all variants alike).
    #[arg(long, default_value_t = 50)]
    iterations: u32,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

struct Variant {
    name: String,
    argv: Vec<String>,
    samples: Vec<Duration>,
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

fn time_once(argv: &[String]) -> Result<Duration, String> {
    let start = Instant::now();
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("{} exited with {status}", argv.join(" ")));
    }
    Ok(elapsed)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn main(a: BenchArgs) -> i32 {
    let me: PathBuf = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: cannot find my own executable: {e}");
            return 125;
        }
    };
    let me = me.display().to_string();
    let have_bwrap = Command::new("bwrap")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_bwrap {
        eprintln!("cordon bench: bubblewrap not found; install it (apt-get install bubblewrap) to compare");
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
        variants.push(Variant {
            name: "cordon".into(),
            argv: c,
            samples: Vec::new(),
        });
        // Warm the page cache once for each, then interleave.
        for v in &variants {
            if let Err(e) = time_once(&v.argv) {
                eprintln!("cordon bench: {e}");
                return 125;
            }
        }
        for _ in 0..a.iterations {
            for v in &mut variants {
                match time_once(&v.argv) {
                    Ok(d) => v.samples.push(d),
                    Err(e) => {
                        eprintln!("cordon bench: {e}");
                        return 125;
                    }
                }
            }
        }
        let medians: Vec<(String, Duration)> = variants
            .iter_mut()
            .map(|v| (v.name.clone(), median(&mut v.samples)))
            .collect();
        let get = |n: &str| medians.iter().find(|(m, _)| m == n).map(|(_, d)| *d);
        let cordon = get("cordon").unwrap_or_default();
        let bare = get("bare").unwrap_or_default();
        let bwrap = get("bwrap");
        report.push(serde_json::json!({
            "command": label,
            "iterations": a.iterations,
            "median_ms": medians.iter().map(|(n, d)| (n.clone(), serde_json::json!(ms(*d)))).collect::<serde_json::Map<_, _>>(),
            "cordon_vs_bare": ms(cordon) / ms(bare).max(1e-9),
            "cordon_vs_bwrap": bwrap.map(|b| ms(cordon) / ms(b).max(1e-9)),
        }));
        if !a.json {
            println!(
                "{label} ({} runs each, median wall time of a cold start):",
                a.iterations
            );
            for (n, d) in &medians {
                println!("  {n:8} {:8.2} ms", ms(*d));
            }
            println!("  cordon / bare  = {:.2}x", ms(cordon) / ms(bare).max(1e-9));
            if let Some(b) = bwrap {
                println!(
                    "  cordon / bwrap = {:.2}x  (target: <= 1.00x)",
                    ms(cordon) / ms(b).max(1e-9)
                );
            }
        }
    }
    if a.json {
        println!("{}", serde_json::Value::Array(report));
    }
    0
}
