//! Bad input gives exit 125 and a message naming the flag, never a panic; `--require` fails
//! closed; `cordon check` agrees with what runs report.

mod common;

use common::*;
use serde_json::Value;

/// Runs `cordon ARGS…`, expects exit 125, a message containing every `needle`, no panic, and
/// nothing run (no stdout).
fn expect_rejected(args: &[&str], needles: &[&str]) -> Result<(), String> {
    let f = Cmd::cordon().args(args.iter().copied()).run();
    let mut problems = Vec::new();
    if f.code != Some(125) {
        problems.push(format!("exit {:?} instead of 125", f.code));
    }
    if f.stderr.contains("panicked") || f.stderr.contains("RUST_BACKTRACE") {
        problems.push("panicked".to_string());
    }
    for n in needles {
        if !f.stderr.contains(n) {
            problems.push(format!("message does not mention {n:?}"));
        }
    }
    if !f.stdout.is_empty() {
        problems.push(format!("printed to stdout: {:?}", f.stdout));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "cordon {}: {}\n    stderr: {}",
            args.join(" "),
            problems.join(", "),
            f.stderr.trim()
        ))
    }
}

fn check_all(cases: &[(Vec<String>, Vec<&str>)]) {
    let errors: Vec<String> = cases
        .iter()
        .filter_map(|(args, needles)| {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            expect_rejected(&a, needles).err()
        })
        .collect();
    assert!(
        errors.is_empty(),
        "bad input handled badly:\n{}",
        errors.join("\n")
    );
}

fn run_args(flags: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec!["run".into()];
    v.extend(flags.iter().map(|s| s.to_string()));
    v.extend(["--", "true"].iter().map(|s| s.to_string()));
    v
}

#[test]
fn malformed_flags_exit_125_with_a_message_naming_the_flag() {
    let dir = HostDir::new("badprof");
    let file = dir.file("f.txt", "x", 0o644);
    let f = file.to_str().unwrap();
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (run_args(&["--memory", "lots"]), vec!["--memory", "lots"]),
        (run_args(&["--memory", "1K"]), vec!["--memory"]),
        (run_args(&["--memory", ""]), vec!["--memory"]),
        (run_args(&["--timeout", "30"]), vec!["--timeout", "30"]),
        (run_args(&["--timeout", "0s"]), vec!["--timeout"]),
        (run_args(&["--timeout", "soon"]), vec!["--timeout"]),
        (run_args(&["--cpu-time", "500ms"]), vec!["--cpu-time"]),
        (run_args(&["--cpu-time", "x"]), vec!["--cpu-time"]),
        (run_args(&["--cpus", "abc"]), vec!["--cpus", "abc"]),
        (run_args(&["--cpus", "0"]), vec!["--cpus"]),
        (run_args(&["--cpus", "NaN"]), vec!["--cpus"]),
        (run_args(&["--cpus", "99999"]), vec!["--cpus"]),
        (run_args(&["--pids", "x"]), vec!["--pids", "x"]),
        (run_args(&["--pids", "0"]), vec!["--pids"]),
        (run_args(&["--pids", "1.5"]), vec!["--pids"]),
        (run_args(&["--pids", "99999999999"]), vec!["--pids"]),
        (run_args(&["--disk", "1"]), vec!["--disk"]),
        (run_args(&["--disk", "big"]), vec!["--disk"]),
        (run_args(&["--output-limit", "x"]), vec!["--output-limit"]),
        (
            run_args(&["--profile", "nosuch"]),
            vec!["--profile", "nosuch"],
        ),
        (
            run_args(&["--profile", "/nonexistent/p.toml"]),
            vec!["--profile", "/nonexistent/p.toml"],
        ),
        (run_args(&["--ro", "relative-and-missing"]), vec!["--ro"]),
        (
            run_args(&["--ro", "/nonexistent"]),
            vec!["--ro", "/nonexistent"],
        ),
        (run_args(&["--ro", ":/x"]), vec!["--ro"]),
        (run_args(&["--ro", &format!("{f}:relative")]), vec!["--ro"]),
        (
            run_args(&["--ro", &format!("{f}:/a/../etc")]),
            vec!["--ro", ".."],
        ),
        (run_args(&["--rw", "/tmp:/proc"]), vec!["--rw", "/proc"]),
        (run_args(&["--rw", "/tmp:/dev/x"]), vec!["--rw", "/dev"]),
        (run_args(&["--rw", "/tmp:/"]), vec!["--rw"]),
        (
            run_args(&["--workspace", "/nonexistent"]),
            vec!["--workspace"],
        ),
        (run_args(&["--workspace", f]), vec!["--workspace"]),
        (
            run_args(&["--require", "magic"]),
            vec!["--require", "magic"],
        ),
        (run_args(&["--env", "BAD-KEY=1"]), vec!["--env", "BAD-KEY"]),
        (run_args(&["--env", "=1"]), vec!["--env"]),
        (run_args(&["--env", "1ABC=x"]), vec!["--env"]),
        (run_args(&["--stdin", "/nonexistent"]), vec!["--stdin"]),
        (run_args(&["--bogus"]), vec!["--bogus"]),
        (run_args(&["--allow-net"]), vec!["--allow-net"]),
        (vec!["run".into()], vec!["COMMAND"]),
        (vec!["run".into(), "--".into()], vec!["COMMAND"]),
        (vec!["run".into(), "--json".into()], vec!["COMMAND"]),
        (vec!["frobnicate".into()], vec!["frobnicate"]),
    ];
    check_all(&cases);
}

#[test]
fn malformed_profiles_exit_125_naming_the_key_and_line() {
    let dir = HostDir::new("profiles");
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "typo.toml",
            "name = \"x\"\n[limits]\nmemroy = \"1G\"\n",
            &["memroy", "line 3"],
        ),
        (
            "top.toml",
            "name = \"x\"\nnetwerk = 1\n",
            &["netwerk", "line 2"],
        ),
        (
            "fs.toml",
            "[filesystem]\nsystem = \"full\"\nreadonly = []\n",
            &["readonly", "line 3"],
        ),
        (
            "memory.toml",
            "[limits]\nmemory = \"lots\"\n",
            &["memory", "lots"],
        ),
        ("timeout.toml", "[limits]\ntimeout = \"30\"\n", &["timeout"]),
        ("cpus.toml", "[limits]\ncpus = -1.0\n", &["cpus"]),
        ("pids.toml", "[limits]\npids = 0\n", &["pids"]),
        (
            "ro.toml",
            "[filesystem]\nro = [\"relative/path\"]\n",
            &["relative/path"],
        ),
        (
            "proc.toml",
            "[filesystem]\nrw = [\"/data:/proc/x\"]\n",
            &["/proc"],
        ),
        (
            "env.toml",
            "[env]\nset = { \"BAD-KEY\" = \"1\" }\n",
            &["BAD-KEY"],
        ),
        ("require.toml", "require = [\"magic\"]\n", &["magic"]),
        (
            "extends.toml",
            "extends = \"nonexistent\"\n",
            &["extends", "nonexistent"],
        ),
        ("hostname.toml", "hostname = \"has space\"\n", &["hostname"]),
        ("syntax.toml", "[limits\nmemory = 1\n", &["line 1"]),
        ("type.toml", "limits = 3\n", &["line 1"]),
        ("binary.toml", "\u{0}\u{1}garbage", &["profile"]),
    ];
    let mut all = Vec::new();
    for (name, text, needles) in cases {
        let p = dir.file(name, text, 0o644);
        let p = p.to_str().unwrap().to_string();
        let mut needles: Vec<&str> = needles.to_vec();
        needles.push("--profile");
        all.push((run_args(&["--profile", &p]), needles));
    }
    check_all(&all);
}

#[test]
fn negative_numbers_and_cwd_errors_name_their_flag() {
    check_all(&[
        (run_args(&["--cpus", "-1"]), vec!["--cpus"]),
        (run_args(&["--pids", "-5"]), vec!["--pids"]),
        (run_args(&["--cwd", "relative"]), vec!["--cwd"]),
    ]);
}

#[test]
fn setup_failure_inside_the_sandbox_is_an_error_outcome() {
    let o = run_json(&["--cwd", "/nonexistent", "--", "true"]);
    assert_eq!(o.status(), "error", "{o}");
    let error = o.v["error"].as_str().unwrap_or("");
    assert!(error.contains("/nonexistent"), "{o}");
    assert!(!error.contains("command not found"), "{o}");
}

#[test]
fn valid_profile_file_applies_and_flags_override_it() {
    let dir = HostDir::new("goodprof");
    let p = dir.file(
        "mine.toml",
        "name = \"mine\"\nextends = \"strict\"\nhostname = \"box-1\"\n[limits]\ntimeout = \"7s\"\n\
         [env]\nset = { FROM_PROFILE = \"yes\" }\n",
        0o644,
    );
    let o = py(
        &["--profile", p.to_str().unwrap(), "--env", "FROM_FLAG=1"],
        r#"
R["host"] = os.uname().nodename
R["env"] = {k: os.environ.get(k) for k in ("FROM_PROFILE", "FROM_FLAG")}
R["etc"] = sorted(os.listdir("/etc"))
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(d["host"], "box-1");
    assert_eq!(d["env"]["FROM_PROFILE"], "yes");
    assert_eq!(d["env"]["FROM_FLAG"], "1");
    // strict: /etc holds only what the dynamic loader and the libraries strict allows need
    // (README: alternatives, fonts, matplotlibrc, ssl certificates) — nothing naming the host's
    // users, hosts or keys.
    let etc: Vec<&str> = d["etc"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        etc.iter().all(|e| e.starts_with("ld.so")
            || ["alternatives", "fonts", "matplotlibrc", "ssl"].contains(e)),
        "strict profile exposes /etc/{etc:?}"
    );
}

#[test]
fn strict_profile_hides_etc_and_still_runs_python() {
    let o = py(
        &["--profile", "strict"],
        r#"
R["passwd"] = t(lambda: open("/etc/passwd").read())
R["hosts"] = t(lambda: open("/etc/hosts").read())
R["sum"] = sum(range(10))
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    expect_table(
        &o,
        &o.data(),
        &[("passwd", libc::ENOENT), ("hosts", libc::ENOENT)],
    );
}

#[test]
fn help_and_version_succeed() {
    for args in [
        &["run", "--help"][..],
        &["--help"],
        &["--version"],
        &["check", "--help"],
    ] {
        let f = Cmd::cordon().args(args.iter().copied()).run();
        assert_eq!(f.code, Some(0), "{args:?}: {f:?}");
        assert!(!f.stdout.is_empty());
    }
    let f = Cmd::cordon().args(["run", "--help"]).run();
    for flag in [
        "--profile",
        "--memory",
        "--cpus",
        "--pids",
        "--timeout",
        "--cpu-time",
        "--disk",
        "--output-limit",
        "--workspace",
        "--ro",
        "--rw",
        "--env",
        "--allow-net",
        "--json",
        "--stdin",
        "--require",
    ] {
        assert!(f.stdout.contains(flag), "run --help lacks {flag}");
    }
}

fn feature(report: &Value, name: &str) -> bool {
    report["features"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["name"] == name))
        .and_then(|f| f["available"].as_bool())
        .unwrap_or_else(|| panic!("check --json has no feature {name}: {report}"))
}

#[test]
fn check_agrees_with_what_a_run_enforces() {
    let report = check_report();
    let o = run_json(&["--", "true"]);
    o.assert_ok();
    let e = o.enforcement();
    assert_eq!(report["euid"].as_u64(), Some(u64::from(euid())));
    assert_eq!(report["running_as_root"], is_root());
    assert_eq!(
        feature(&report, "user_ns"),
        e["user_ns"] == true,
        "{report}\n{o}"
    );
    assert_eq!(
        feature(&report, "seccomp"),
        e["seccomp"] == true,
        "{report}\n{o}"
    );
    let host_abi = report["landlock_abi"].as_u64().unwrap();
    let run_abi = e["landlock_abi"].as_u64().unwrap();
    assert_eq!(feature(&report, "landlock"), host_abi > 0);
    assert_eq!(host_abi > 0, run_abi > 0, "{report}\n{o}");
    assert!(
        run_abi <= host_abi,
        "a run claims more Landlock than the host has"
    );
    assert_eq!(report["cgroup"].as_str(), Some(o.cgroup()), "{report}\n{o}");
    assert_eq!(feature(&report, "cgroup"), o.has_cgroup());
    if !is_root() && o.cgroup() == "none" {
        let notes = e["notes"].to_string();
        assert!(notes.contains("rlimit"), "a weaker run must say so: {o}");
    }

    let human = Cmd::cordon().arg("check").run();
    assert_eq!(human.code, Some(0));
    for name in ["user_ns", "seccomp", "landlock", "cgroup"] {
        assert!(
            human.stdout.contains(name),
            "check lacks {name}: {}",
            human.stdout
        );
    }
    if feature(&report, "user_ns") {
        assert!(human.stdout.contains("cordon can sandbox on this host"));
    }
}

#[test]
fn require_fails_closed_when_a_layer_is_missing() {
    let report = check_report();
    // Layers this host has: the run goes ahead.
    let o = run_json(&[
        "--require",
        "user_ns,pid_ns,net_ns,mount_ns,seccomp",
        "--",
        "true",
    ]);
    o.assert_ok();
    for (layer, available) in [
        ("landlock", feature(&report, "landlock")),
        ("cgroup", feature(&report, "cgroup")),
    ] {
        let f = Cmd::cordon()
            .args(["run", "--require", layer, "--", "echo", "ran"])
            .run();
        if available {
            assert_eq!(f.code, Some(0), "--require {layer}: {f:?}");
            assert_eq!(f.stdout.trim(), "ran");
        } else {
            assert_eq!(
                f.code,
                Some(125),
                "--require {layer} on a host without it: {f:?}"
            );
            assert!(f.stdout.is_empty(), "the payload ran anyway: {f:?}");
            assert!(f.stderr.contains(layer), "{f:?}");
        }
    }
}

/// A caller may start cordon with stdin or stdout closed (a daemon, `cmd <&- >&-`). Those
/// numbers must not go to cordon's own pipes and sockets, or the program inside finds its stdin
/// closed under it and its output crossed with cordon's plumbing.
#[test]
fn closed_stdio_is_not_mistaken_for_our_own_pipes() {
    let dir = HostDir::new("closed-stdio");
    let err = dir.join("stderr");
    let script = format!(
        "exec 0<&- 1>&- 2>{}; exec {} run -- sh -c 'cat; echo cat=$? >&2; echo to-stdout; exit 7'",
        err.display(),
        cordon_bin()
    );
    let f = Cmd::new("bash")
        .args(["-c", &script])
        .deadline(std::time::Duration::from_secs(20))
        .run();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(f.code, Some(7), "{f:?}\nstderr: {stderr}");
    // stdin reads as empty (cordon's was closed), stdout goes nowhere (so was cordon's).
    assert_eq!(stderr, "cat=0\n", "{f:?}");

    // And the JSON report with stdout closed: cordon still runs and says nothing false.
    let script = format!(
        "exec 1>&-; exec {} run --json -- sh -c 'echo hi'",
        cordon_bin()
    );
    let f = Cmd::new("bash").args(["-c", &script]).run();
    assert_eq!(f.code, Some(0), "{f:?}");
    assert!(!f.stderr.contains("panicked"), "{f:?}");
}

/// `Cargo.toml` declares Apache-2.0: the repository carries the licence's text itself, whole
/// (its terms and its appendix), so that what is shipped says what may be done with it.
#[test]
fn the_apache_license_the_manifest_declares_is_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace Cargo.toml");
    assert!(
        manifest.contains("license = \"Apache-2.0\""),
        "the workspace no longer declares Apache-2.0: update this test with the licence"
    );
    let text = std::fs::read_to_string(root.join("LICENSE"))
        .expect("no LICENSE file at the repository's root");
    for needle in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
        "APPENDIX: How to apply the Apache License to your work.",
    ] {
        assert!(text.contains(needle), "LICENSE lacks {needle:?}");
    }
}

/// `cordon run -- ./s.sh` in a directory holding s.sh: the sandbox starts in its own
/// /workspace, so the script is not there. The message says that — the file is on the host,
/// the directory is not shared, and how to share it — not that PATH was searched (a path is
/// never looked up in PATH). And the fix it names works.
#[test]
fn a_relative_command_left_on_the_host_is_named_with_the_flag_that_shares_it() {
    let dir = HostDir::new("relcmd");
    dir.file("s.sh", "#!/bin/sh\necho ran-inside\n", 0o755);
    let in_dir = |args: &str| {
        Cmd::new("bash")
            .args([
                "-c",
                &format!("cd {} && exec {} run {args}", dir.str(), cordon_bin()),
            ])
            .counts_as_cordon()
            .run()
    };
    let f = in_dir("-- ./s.sh");
    assert_eq!(f.code, Some(127), "{f:?}");
    for needle in ["./s.sh", "not in the sandbox", "--workspace .", "--ro"] {
        assert!(f.stderr.contains(needle), "no {needle:?} in: {}", f.stderr);
    }
    assert!(!f.stderr.contains("PATH"), "{}", f.stderr);
    // The same in the JSON Outcome, for an agent reading it.
    let f = in_dir("--json -- ./s.sh");
    let o: serde_json::Value = serde_json::from_str(&f.stdout).expect("an Outcome");
    let error = o["error"].as_str().unwrap_or_default();
    assert!(error.contains("--workspace ."), "{o}");
    // The fix it names runs the script.
    let f = in_dir("--workspace . -- ./s.sh");
    assert_eq!(
        (f.code, f.stdout.as_str()),
        (Some(0), "ran-inside\n"),
        "{f:?}"
    );
    // A relative path that is nowhere gets no such advice.
    let f = in_dir("-- ./nowhere.sh");
    assert_eq!(f.code, Some(127), "{f:?}");
    assert!(!f.stderr.contains("--workspace"), "{}", f.stderr);
}

/// `cordon run python3 -c …` (no `--`): clap refuses `python3`; the message shows the same
/// line with `--` where it belongs.
#[test]
fn a_command_given_without_dashes_is_shown_where_it_goes() {
    let f = Cmd::cordon()
        .args(["run", "--json", "python3", "-c", "print(1 + 1)"])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr
            .contains("cordon run --json -- python3 -c 'print(1 + 1)'"),
        "{}",
        f.stderr
    );
    // An unknown flag is not a command: no such advice.
    let f = Cmd::cordon().args(["run", "--bogus", "--", "true"]).run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(!f.stderr.contains("goes after --"), "{}", f.stderr);
}

/// `--profile strict` binds single files of /etc (ld.so.cache, …); a bind of one file, like
/// `--ro FILE`, used to be reported "Landlock partially enforced (kernel ABI 6)" on a kernel
/// `cordon check` reports as ABI 7: the rule's directory rights (which a file cannot have) were
/// counted as a loss, and the ABI shown was cordon's, not the kernel's. A run and `cordon check`
/// say the same: the kernel's ABI, the one cordon's rules use, and only a real loss.
#[test]
fn landlock_notes_agree_with_check_on_the_kernel_abi_and_claim_no_false_loss() {
    let report = check_report();
    let kernel = report["landlock_abi"].as_u64().unwrap();
    if kernel == 0 {
        eprintln!("skipped: no Landlock on this host");
        return;
    }
    let human = Cmd::cordon().arg("check").run();
    assert!(
        human
            .stdout
            .contains(&format!("Landlock ABI {kernel}; cordon's rules use ABI 6")),
        "{}",
        human.stdout
    );
    let dir = HostDir::new("llfile");
    let file = dir.file("one-file", "x", 0o644);
    let file = file.to_str().unwrap();
    for flags in [
        vec!["--profile", "strict"],
        vec!["--ro", file],
        vec!["--rw", file],
    ] {
        let mut args = flags.clone();
        args.extend(["--", "true"]);
        let o = run_json(&args);
        o.assert_ok();
        let notes = o.enforcement()["notes"].to_string();
        if kernel >= 6 {
            assert!(!notes.contains("partially"), "{flags:?}: {notes}");
        } else {
            assert!(
                notes.contains(&format!(
                    "the kernel has ABI {kernel}, cordon's rules use ABI 6"
                )),
                "{flags:?}: {notes}"
            );
        }
    }
}
