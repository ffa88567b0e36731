//! `cordon-bench`'s learn-mode rows: a cold `python3 -c pass` and a 1,000-file build (a shell
//! loop writing 1,000 files and running `cat` on each, as a build runs a compiler per file),
//! each under `cordon run` and `cordon run --learn FILE`, interleaved: learn mode's overhead
//! (its seccomp notifications, one round trip to cordon per exec, open, stat…). Target ≤ 1.5×.

use std::time::Duration;

use crate::{median_of, ms, ratio, time_once, Sample};

const BUILD: &str = "mkdir -p /tmp/b && cd /tmp/b && i=0; while [ $i -lt 1000 ]; do \
echo \"int f$i;\" > f$i.c; cat f$i.c > f$i.o; i=$((i+1)); done; cat *.o > all; [ -s all ]";

pub fn bench(me: &str, iterations: u32, json: bool) -> Result<serde_json::Value, String> {
    let dir = std::env::temp_dir().join(format!("cordon-bench-learn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let learned = dir.join("learned.toml");
    let result = rows(me, iterations, json, &learned.display().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn rows(me: &str, iterations: u32, json: bool, learned: &str) -> Result<serde_json::Value, String> {
    let mut out = Vec::new();
    for (label, cmd) in [
        ("python3 -c pass", vec!["/usr/bin/python3", "-c", "pass"]),
        ("1,000-file build", vec!["/bin/sh", "-c", BUILD]),
    ] {
        let argv = |learn: bool| {
            let mut a = vec![me.to_string(), "run".into()];
            if learn {
                a.extend(["--learn".into(), learned.to_string()]);
            }
            a.extend(["--timeout".into(), "120s".into(), "--".into()]);
            a.extend(cmd.iter().map(|s| s.to_string()));
            a
        };
        let (plain, learn) = (argv(false), argv(true));
        time_once(&plain)?;
        time_once(&learn)?;
        let (mut p, mut l): (Vec<Sample>, Vec<Sample>) = (Vec::new(), Vec::new());
        for _ in 0..iterations {
            p.push(time_once(&plain)?);
            l.push(time_once(&learn)?);
        }
        let med = |s: &[Sample]| median_of(s, |x| x.exited);
        let (pm, lm): (Duration, Duration) = (med(&p), med(&l));
        let r = ratio(lm, pm);
        if !json {
            println!("learn mode, {label} ({iterations} runs each, medians of a cold start):");
            println!("  cordon        {:8.2} ms", ms(pm));
            println!("  cordon learn  {:8.2} ms", ms(lm));
            println!("  learn / cordon = {r:.2}x  (target: <= 1.50x)");
        }
        out.push(serde_json::json!({
            "command": label,
            "iterations": iterations,
            "median_ms": {"cordon": ms(pm), "cordon_learn": ms(lm)},
            "learn_vs_cordon": r,
        }));
    }
    Ok(serde_json::json!({ "learn": out }))
}
