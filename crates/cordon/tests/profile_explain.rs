//! `cordon profile explain` and `cordon profile diff`: the words name the profile's actual
//! entries (its `extends` resolved), and a bad file is refused as `cordon run` refuses it.

mod common;

use common::*;

fn cordon(args: &[&str]) -> Finished {
    Cmd::cordon().args(args.iter().copied()).run()
}

const JOB: &str = r#"
name = "job"
extends = "strict"
[filesystem]
ro = ["/srv/datasets:/data"]
rw = ["/srv/out"]
[exec]
allow = ["/usr/bin/python3", "/usr/lib/git-core/*"]
[network]
allow = ["pypi.org", "*.example.com:8443"]
[env]
set = { API_TOKEN = "tok-123-not-shown" }
[limits]
memory = "1G"
"#;

#[test]
fn explain_names_every_entry_of_a_file_with_its_extends_resolved() {
    let dir = HostDir::new("explain");
    let job = dir.file("job.toml", JOB, 0o644);
    let f = cordon(&["profile", "explain", job.to_str().expect("utf-8")]);
    assert_eq!(f.code, Some(0), "{f:?}");
    let out = &f.stdout;
    for want in [
        "Profile job",
        // strict's minimal /etc, inherited through `extends`
        "/etc/ld.so.cache (the host's, read-only)",
        "/data = host /srv/datasets (read-only)",
        "/srv/out (host directory, read-write)",
        "/usr/bin/python3 (this file)",
        "/usr/lib/git-core/* (the files matching",
        "pypi.org (through the egress proxy)",
        "*.example.com:8443 (through the egress proxy)",
        "memory: 1G",
        "cpu_time: 10s", // strict's
        "env API_TOKEN is set (value not shown)",
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
    assert!(!out.contains("tok-123-not-shown"), "{out}");
    assert!(
        !out.contains("/etc (the host's"),
        "strict shows no full /etc: {out}"
    );
}

#[test]
fn diff_lists_what_each_side_allows_that_the_other_does_not() {
    let dir = HostDir::new("diff");
    let job = dir.file("job.toml", JOB, 0o644);
    let f = cordon(&["profile", "diff", "default", job.to_str().expect("utf-8")]);
    assert_eq!(f.code, Some(0), "{f:?}");
    let (job_more, default_more) = f
        .stdout
        .split_once("What default allows that job does not:")
        .unwrap_or_else(|| panic!("{}", f.stdout));
    assert!(
        job_more.starts_with("What job allows that default does not:"),
        "{}",
        f.stdout
    );
    for want in [
        "/data = host /srv/datasets",
        "/srv/out (host directory, read-write)",
        "pypi.org",
        "memory: 1G (not 512M)",
    ] {
        assert!(job_more.contains(want), "{want:?}:\n{}", f.stdout);
    }
    for want in [
        "/etc (the host's, read-only)",
        "any file it may read or write",
        "pids: 64 processes and threads (not 32",
        "cpu_time: none (not 10s)",
    ] {
        assert!(default_more.contains(want), "{want:?}:\n{}", f.stdout);
    }
    // A list of programs is less than "any file", never more.
    assert!(!job_more.contains("python3"), "{}", f.stdout);
    let same = cordon(&["profile", "diff", "strict", "strict"]);
    assert_eq!(same.stdout.matches("  nothing").count(), 2, "{same:?}");
}

#[test]
fn a_bad_profile_is_exit_125_naming_the_key_and_line() {
    let dir = HostDir::new("explain-bad");
    let bad = dir.file("bad.toml", "[exec]\nallow = [\"/usr/*/python3\"]\n", 0o644);
    let f = cordon(&["profile", "explain", bad.to_str().expect("utf-8")]);
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr.contains("line 2: [exec] allow: '/usr/*/python3'"),
        "{f:?}"
    );
    let typo = dir.file("typo.toml", "[limits]\nmemroy = \"1G\"\n", 0o644);
    let f = cordon(&["profile", "diff", "default", typo.to_str().expect("utf-8")]);
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(
        f.stderr.contains("line 2") && f.stderr.contains("memroy"),
        "{f:?}"
    );
    let f = cordon(&["profile", "explain", "/nonexistent/p.toml"]);
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("cannot read profile"), "{f:?}");
    let f = cordon(&["profile", "explain", "nosuchbuiltin"]);
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("default, strict"), "{f:?}");
}

#[test]
fn help_teaches_with_examples() {
    for cmd in [
        &["profile", "--help"][..],
        &["profile", "explain", "--help"],
        &["profile", "diff", "--help"],
    ] {
        let f = cordon(cmd);
        assert_eq!(f.code, Some(0), "{f:?}");
        assert!(f.stdout.contains("Examples:"), "{cmd:?}: {}", f.stdout);
        assert!(f.stdout.contains("cordon profile"), "{cmd:?}: {}", f.stdout);
    }
}
