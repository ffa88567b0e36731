//! One truth about how a run ended, through the CLI: the four shared payloads
//! (`common::payloads`: OOM, pids bomb, CPU spin to the timeout, output flood) each get the
//! `status`, `limits_hit` and usage the engine saw; the CPU of killed processes is counted;
//! an inode flood stops at the tmpfs cap without growing the host's kernel memory; and without
//! `--json` a person is told, one `cordon:` line each, what was cut, hit or refused.
//! Every test runs as root (cgroup) and rootless (no cgroup on a v1 host).

mod common;

use std::time::{Duration, Instant};

use common::payloads::{self, Payload};
use common::*;

/// `cordon run --json` with the payload's limits (plus `extra`).
fn run(p: &Payload, extra: &[&str]) -> Outcome {
    let marker = unique("payload");
    let mut args: Vec<String> = vec!["run".into(), "--json".into()];
    args.extend(p.cli_flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(p.argv());
    args.push(marker.clone());
    let o = Cmd::cordon().args(&args).run().outcome();
    assert_no_process_with(&marker, Duration::from_secs(3));
    o
}

#[test]
fn oom_is_reported_as_the_memory_limit() {
    let o = run(&payloads::OOM, &[]);
    if o.has_cgroup() {
        assert_eq!(o.status(), "oom", "{o}");
        assert_eq!(o.signal(), Some(9), "{o}");
        assert_eq!(o.limits_hit(), ["memory"], "{o}");
        let peak = o.usage("peak_memory_bytes");
        assert!(
            ((32 << 20)..=(64 << 20)).contains(&peak),
            "peak {peak}:\n{o}"
        );
    } else {
        // RLIMIT_DATA refused the allocation inside Python; nothing outside the process can
        // tell that from any other MemoryError, so no limit is claimed.
        o.assert_exited(1);
        assert!(o.stderr().contains("MemoryError"), "{o}");
        assert!(o.limits_hit().is_empty(), "{o}");
        assert!(o.usage("peak_memory_bytes") >= 32 << 20, "{o}");
    }
    assert!(o.usage("cpu_user_ms") + o.usage("cpu_system_ms") > 0, "{o}");
}

#[test]
fn a_refused_fork_is_reported_though_the_program_went_on() {
    let o = run(&payloads::PIDS_BOMB, &[]);
    o.assert_ok();
    assert_eq!(o.limits_hit(), ["pids"], "{o}");
    let stdout = o.stdout();
    assert!(
        stdout.contains(&format!("errno {}", libc::EAGAIN)),
        "no fork was refused:\n{o}"
    );
    let forked: u64 = stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{o}"));
    // The payload is one of the 16; its children are the rest.
    assert_eq!(forked, 15, "{o}");
    assert_eq!(o.usage("peak_pids"), 16, "{o}");
}

#[test]
fn a_spin_stopped_at_the_timeout_has_its_cpu_counted() {
    let o = run(&payloads::CPU_SPIN, &[]);
    payloads::assert_spin_ended_at_its_timeout(&o);
    assert!(o.elapsed < Duration::from_secs(10), "{o}");
}

/// The CPU of a process killed at the end — not the payload, a child of it that never exits —
/// is counted too.
#[test]
fn the_cpu_of_killed_children_is_counted() {
    let o = py(
        &["--timeout", "2s"],
        r#"
import subprocess, time
subprocess.Popen(["python3", "-c", "while True: pass"])
time.sleep(60)
"#,
    );
    assert_eq!(o.status(), "timeout", "{o}");
    let cpu = o.usage("cpu_user_ms");
    assert!(
        cpu >= 200,
        "cpu_user_ms {cpu}: the killed spinner was not counted:\n{o}"
    );
}

#[test]
fn an_output_flood_is_cut_and_says_so() {
    let o = run(&payloads::OUTPUT_FLOOD, &[]);
    o.assert_ok();
    assert_eq!(o.stdout().len(), 10 << 10, "{o}");
    assert_eq!(o.v["stdout_truncated"], true, "{o}");
    assert_eq!(o.v["stderr_truncated"], false, "{o}");
    assert_eq!(o.limits_hit(), ["output"], "{o}");
}

#[test]
fn a_clean_run_hits_nothing() {
    let o = run_json(&["--", "true"]);
    o.assert_ok();
    assert!(o.limits_hit().is_empty(), "{o}");
    assert!(
        o.v["limits_hit"].is_array(),
        "limits_hit is always present:\n{o}"
    );
}

/// The host's slab is one number for everything: the test that measures it and the test that
/// fills a cgroup with kernel memory must not overlap.
static SLAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Unreclaimable slab of the host, in bytes.
fn host_sunreclaim() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    m.lines()
        .find_map(|l| l.strip_prefix("SUnreclaim:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("SUnreclaim in /proc/meminfo")
}

/// An empty directory costs no tmpfs page, so `size=` never stopped a mkdir loop: rootless,
/// millions of them grew the host's unreclaimable slab by gigabytes. Each scratch tmpfs now has
/// one inode per 4 KiB of `--disk`; the flood stops there with ENOSPC, says `files`, and the
/// host's slab grows by less than the bound below while the directories exist.
#[test]
fn an_inode_flood_stops_at_the_cap_and_the_host_slab_stays_bounded() {
    let disk: u64 = 16 << 20;
    let cap = disk / 4096;
    // Two filesystems of `cap` inodes at ~1 KiB each (inode, dentry, directory index) is
    // ~8 MiB; the bound leaves room for what else this host does meanwhile. Without the cap
    // the loop below makes 400 000 directories, ~400 MiB.
    let bound: u64 = 48 << 20;
    let _alone = SLAB.lock().unwrap_or_else(|e| e.into_inner());
    let before = host_sunreclaim();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(host_sunreclaim());
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let o = py(
        &["--disk", "16M", "--timeout", "60s"],
        r#"
import time
for d in ("/tmp", "/dev/shm"):
    n = 0
    try:
        while n < 200000:
            os.mkdir("%s/d%d" % (d, n))
            n += 1
    except OSError as e:
        R[d] = [e.errno, n]
    else:
        R[d] = [0, n]
time.sleep(1)  # the directories exist while the host's slab is sampled
out()
"#,
    );
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.join().expect("sampler");
    o.assert_ok();
    let d = o.data();
    for dir in ["/tmp", "/dev/shm"] {
        assert_eq!(d[dir][0], libc::ENOSPC, "{dir} was not stopped:\n{o}");
        // The tmpfs's own root is one of its inodes.
        assert_eq!(d[dir][1], cap - 1, "{dir}:\n{o}");
    }
    assert_eq!(o.limits_hit(), ["files"], "{o}");
    let grew = peak.saturating_sub(before);
    assert!(
        grew < bound,
        "the host's unreclaimable slab grew by {} MiB (bound {} MiB)",
        grew >> 20,
        bound >> 20
    );
}

/// Where a cgroup holds the sandbox, the kernel memory its files and directories take is
/// charged to it: a mkdir flood on a large `--disk` meets the memory limit, not the host's.
#[test]
fn kernel_memory_is_charged_to_the_sandbox_cgroup() {
    let _alone = SLAB.lock().unwrap_or_else(|e| e.into_inner());
    let o = py(
        &["--disk", "1G", "--memory", "64M", "--timeout", "60s"],
        r#"
n = 0
try:
    while n < 200000:
        os.mkdir("/tmp/d%d" % n)
        n += 1
except OSError as e:
    R["errno"] = e.errno
R["n"] = n
out()
"#,
    );
    if !o.has_cgroup() {
        eprintln!(
            "skipped: no cgroup in this mode (rootless on cgroup v1) — kernel memory is bounded \
             by the tmpfs inode caps alone (see the inode flood test)"
        );
        return;
    }
    // 200 000 directories take ~190 MiB of kernel memory: the 64M limit ends the flood first
    // (the OOM killer, or a refused mkdir).
    assert!(
        o.status() == "oom" || o.data()["n"].as_u64().is_some_and(|n| n < 200_000),
        "the flood did not meet the memory limit:\n{o}"
    );
    let peak = o.usage("peak_memory_bytes");
    assert!(
        ((48 << 20)..=(64 << 20)).contains(&peak),
        "peak {peak}: kernel memory not counted against the sandbox:\n{o}"
    );
}

#[test]
fn a_full_scratch_disk_is_reported() {
    let o = py(
        &["--disk", "4M"],
        r#"
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"x" * 65536)
            f.flush()
except OSError as e:
    R["errno"] = e.errno
out()
"#,
    );
    o.assert_ok();
    assert_eq!(o.data()["errno"], libc::ENOSPC, "{o}");
    assert_eq!(o.limits_hit(), ["disk"], "{o}");
}

// ---------------------------------------------------------------------------------------------
// Without --json

/// `cordon run` without `--json`, with these flags and payload argv.
fn run_plain(flags: &[String], argv: &[String]) -> Finished {
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(flags.iter().cloned());
    args.push("--".into());
    args.extend(argv.iter().cloned());
    Cmd::cordon().args(&args).run()
}

fn cordon_lines(f: &Finished) -> Vec<&str> {
    f.stderr
        .lines()
        .filter(|l| l.starts_with("cordon: "))
        .collect()
}

#[test]
fn without_json_a_cut_output_and_each_limit_get_one_line() {
    let p = &payloads::OUTPUT_FLOOD;
    let f = run_plain(&p.cli_flags(), &p.argv());
    assert_eq!(f.code, Some(0), "{f:?}");
    assert_eq!(f.stdout.len(), 10 << 10, "the echo shows what is kept");
    assert_eq!(
        cordon_lines(&f),
        ["cordon: output was cut: stdout was kept only up to 10K (raise --output-limit)"],
        "{f:?}"
    );

    let p = &payloads::CPU_SPIN;
    let f = run_plain(&p.cli_flags(), &p.argv());
    assert_eq!(f.code, Some(124), "{f:?}");
    assert_eq!(
        cordon_lines(&f),
        ["cordon: timed out after 2s (raise --timeout)"],
        "{f:?}"
    );

    let p = &payloads::PIDS_BOMB;
    let f = run_plain(&p.cli_flags(), &p.argv());
    assert_eq!(f.code, Some(0), "{f:?}");
    let lines = cordon_lines(&f);
    assert_eq!(lines.len(), 1, "{f:?}");
    assert!(
        lines[0].starts_with("cordon: the process limit (16) ")
            && lines[0].ends_with("(raise --pids)"),
        "{f:?}"
    );

    let f = run_plain(&[], &["true".to_string()]);
    assert_eq!(f.code, Some(0), "{f:?}");
    assert!(
        cordon_lines(&f).is_empty(),
        "a clean run says nothing: {f:?}"
    );
}

/// Each request the egress proxy refuses gets a line with host, port, reason and the flag that
/// would allow it. Nothing leaves the machine: names are mapped with --add-host, and the proxy
/// refuses before it connects anywhere.
#[test]
fn without_json_each_refused_egress_request_gets_a_line_with_the_flag_to_allow_it() {
    let script = r#"
import urllib.request
for url in ("http://allowed.test/", "http://other.test:8080/"):
    try:
        urllib.request.urlopen(url, timeout=10)
    except Exception as e:
        print(url, type(e).__name__, flush=True)
"#;
    let flags: Vec<String> = [
        "--timeout",
        "20s",
        "--allow-net",
        "allowed.test",
        "--add-host",
        "allowed.test:203.0.113.80",
    ]
    .map(String::from)
    .to_vec();
    let argv = ["python3", "-c", script].map(String::from).to_vec();
    let f = run_plain(&flags, &argv);
    assert_eq!(f.code, Some(0), "{f:?}");
    assert_eq!(
        cordon_lines(&f),
        [
            "cordon: egress refused: allowed.test:80: resolves to documentation address \
             203.0.113.80; allow it with --allow-net 203.0.113.80",
            "cordon: egress refused: other.test:8080: not in allowlist; allow it with \
             --allow-net other.test:8080",
        ],
        "{f:?}"
    );
}

/// With the network off (no --allow-net), what a program tried is said too, instead of only
/// the program's own DNS error: the run's proxy refuses everything and reports it. Nothing
/// leaves the machine: the proxy refuses before it resolves or connects anywhere.
#[test]
fn with_the_network_off_a_refused_request_says_so_and_names_the_flag_to_allow_it() {
    let script = r#"
import urllib.request
for url in ("http://pypi.org/simple/", "https://files.example.test:8443/x"):
    try:
        urllib.request.urlopen(url, timeout=10)
    except Exception as e:
        print(url, type(e).__name__, flush=True)
"#;
    let flags: Vec<String> = ["--timeout", "20s"].map(String::from).to_vec();
    let argv = ["python3", "-c", script].map(String::from).to_vec();
    let f = run_plain(&flags, &argv);
    assert_eq!(f.code, Some(0), "{f:?}");
    assert_eq!(
        cordon_lines(&f),
        [
            "cordon: network is off: pypi.org:80 was refused; allow it with --allow-net pypi.org",
            "cordon: network is off: files.example.test:8443 was refused; allow it with \
             --allow-net files.example.test:8443",
        ],
        "{f:?}"
    );
}

/// A bash fork bomb (`:(){ :|:& };:`) under `--pids 32` sometimes ran to its full timeout.
/// That is bash, not cordon: when the bomb has taken every pid, the top-level shell's own
/// next fork fails and bash retries it after sleeping 1, 2, 4 and 8 s — the payload is alive
/// and waiting. Such a run now says why: `timeout` with `pids` and `wall_time`; every other
/// run ends at once. Either way nothing is left behind.
#[test]
fn a_shell_fork_bomb_that_runs_into_its_timeout_says_why() {
    for _ in 0..4 {
        let marker = unique("bashbomb");
        let start = Instant::now();
        let o = Cmd::cordon()
            .args(["run", "--json", "--pids", "32", "--timeout", "3s", "--"])
            .args(["bash", "-c", ":(){ :|:& };:", &marker])
            .run()
            .outcome();
        assert!(start.elapsed() < Duration::from_secs(8), "{o}");
        match o.status() {
            "exited" => assert_eq!(o.exit_code(), Some(0), "{o}"),
            "timeout" => {
                assert!(o.hit("pids") && o.hit("wall_time"), "{o}");
                assert!(o.stderr().contains("fork: retry"), "{o}");
            }
            _ => panic!("unexpected status:\n{o}"),
        }
        // A refused fork (bash says `fork: …`) must be reported. Reaching the limit alone is
        // not a refusal: a run can end the moment the 32nd process starts, before any fork
        // fails (seen once on a loaded CI machine: peak 32, 25 ms, nothing refused).
        if o.has_cgroup() && o.usage("peak_pids") >= 32 && o.stderr().contains("fork:") {
            assert!(
                o.hit("pids"),
                "a fork was refused at the limit but pids is not reported:\n{o}"
            );
        }
        assert_no_process_with(&marker, Duration::from_secs(3));
    }
}
