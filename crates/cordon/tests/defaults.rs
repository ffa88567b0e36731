//! Defaults a user can live with: the sandbox's `HOME` is its own scratch directory (tool
//! caches never land in a `--workspace` shared with the host), and `--profile strict` keeps
//! the parts of /etc that the libraries it allows cannot work without (numpy, matplotlib).
//!
//! Needs Debian's `python3-numpy` and `python3-matplotlib` on the host (`scripts/test.sh`
//! installs them): the sandbox runs the host's /usr/bin/python3.
#![allow(clippy::result_large_err)] // ureq 2 errors carry the whole response; fine in tests.

mod common;
mod serve;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// Every file and directory under `dir`, relative to it.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap_or(&p).to_path_buf());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p);
            }
        }
    }
    out
}

/// A host directory to pass as `--workspace`, owned so the sandbox may write it (as root,
/// cordon runs the sandbox as the workspace's owner; give it a non-root one).
fn workspace(tag: &str) -> HostDir {
    let ws = HostDir::new(tag);
    if is_root() {
        chown(&ws.path, 65534, 65534);
    }
    ws
}

fn require_host_module(module: &str, package: &str) {
    let ok = std::process::Command::new(HOST_PYTHON)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs {module} on the host: apt-get install {package} (scripts/test.sh does)"
    );
}

#[test]
fn home_is_its_own_scratch_dir_and_caches_stay_out_of_the_workspace() {
    require_host_module("matplotlib", "python3-matplotlib");
    let ws = workspace("home-ws");
    let o = py(
        &["--workspace", ws.str(), "--disk", "4M", "--timeout", "60s"],
        r#"
home = os.environ["HOME"]
R["home"] = home
R["expanduser"] = os.path.expanduser("~")
st = os.stat(home)
R["home_owner_is_me"] = st.st_uid == os.getuid()
R["home_mode"] = oct(st.st_mode & 0o777)
R["home_is_a_mount"] = any(l.split()[4] == home for l in open("/proc/self/mountinfo"))
os.makedirs(os.path.expanduser("~/.cache"), exist_ok=True)
with open(os.path.expanduser("~/.cache/x"), "w") as f:
    f.write("cached")
R["cache"] = open(os.path.join(home, ".cache", "x")).read()
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.savefig("/tmp/chart.png")
R["mpl_cachedir"] = matplotlib.get_cachedir()
R["mpl_configdir"] = matplotlib.get_configdir()
R["mpl_cache"] = sorted(os.listdir(matplotlib.get_cachedir()))
# The home directory is capped like the other scratch space (--disk).
def fill():
    with open(os.path.join(home, "big"), "wb") as f:
        for _ in range(8):
            f.write(b"\0" * (1 << 20))
            f.flush()
R["fill"] = t(fill)
R["ws"] = sorted(os.listdir("/workspace"))
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    let home = d["home"].as_str().unwrap_or_default();
    assert_eq!(home, "/home/sandbox", "{o}");
    assert_eq!(d["expanduser"], home, "{o}");
    assert_eq!(d["home_owner_is_me"], true, "{o}");
    assert_eq!(d["home_mode"], "0o700", "{o}");
    assert_eq!(d["home_is_a_mount"], true, "{o}");
    assert_eq!(d["cache"], "cached", "{o}");
    for k in ["mpl_cachedir", "mpl_configdir"] {
        let dir = d[k].as_str().unwrap_or_default();
        assert!(dir.starts_with(home), "{k} {dir} is not under {home}: {o}");
    }
    let fonts = d["mpl_cache"].as_array().cloned().unwrap_or_default();
    assert!(
        fonts
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.starts_with("fontlist"))),
        "matplotlib did not write its font cache: {o}"
    );
    assert_eq!(d["fill"], libc::ENOSPC, "{o}");
    assert_eq!(d["ws"], json!([]), "{o}");
    // From the host: the workspace received nothing.
    assert_eq!(tree(&ws.path), Vec::<PathBuf>::new(), "{o}");

    // Control: the same cache write with HOME pointed at the workspace does reach the host
    // directory, so the empty tree above is a real observation.
    let o = py(
        &["--workspace", ws.str(), "--env", "HOME=/workspace"],
        r#"
os.makedirs(os.path.expanduser("~/.cache"))
open(os.path.expanduser("~/.cache/x"), "w").write("cached")
out()
"#,
    );
    o.assert_ok();
    assert_eq!(
        std::fs::read_to_string(ws.join(".cache/x")).ok().as_deref(),
        Some("cached"),
        "control: {o}"
    );
}

/// A persistent sandbox has the same `HOME` for every command and every code cell, kept
/// between them, and its workspace stays free of caches too.
#[test]
fn persistent_sandboxes_keep_the_same_home() {
    require_host_module("matplotlib", "python3-matplotlib");
    let s = serve::Server::start();
    let (st, v) = s.call("POST", "/v1/sandboxes", Some(json!({})));
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let exec = |cmd: &str| -> Value {
        let (st, v) = s.call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": cmd})),
        );
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["status"], "exited", "{cmd}: {v}");
        assert_eq!(v["exit_code"], 0, "{cmd}: {v}");
        v
    };
    let v = exec("echo $HOME; mkdir -p ~/.cache && echo kept > ~/.cache/probe");
    assert_eq!(v["stdout"], "/home/sandbox\n", "{v}");
    let v = exec("cat ~/.cache/probe");
    assert_eq!(v["stdout"], "kept\n", "{v}");

    let (st, v) = s.call(
        "POST",
        &format!("/v1/sandboxes/{id}/code"),
        Some(json!({"language": "python", "code": r#"
import os, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2]); plt.savefig("/tmp/c.png"); plt.close("all")
print(os.environ["HOME"], matplotlib.get_cachedir(), open(os.path.expanduser("~/.cache/probe")).read().strip())
"#, "timeout": "60s"})),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v["error"].is_null(), "{v}");
    assert_eq!(
        v["stdout"], "/home/sandbox /home/sandbox/.cache/matplotlib kept\n",
        "{v}"
    );
    let v = exec("ls ~/.cache/matplotlib");
    assert!(
        v["stdout"].as_str().is_some_and(|o| o.contains("fontlist")),
        "{v}"
    );
    let (st, v) = s.call(
        "GET",
        &format!("/v1/sandboxes/{id}/files/list?path=/workspace"),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["entries"], json!([]), "the workspace got files: {v}");
    let (st, v) = s.call(
        "GET",
        &format!("/v1/sandboxes/{id}/files?path=/home/sandbox/.cache/probe"),
        None,
    );
    assert_eq!((st, v), (200, json!("kept\n")));
}

/// `--profile strict` shows only part of /etc, and still runs numpy (its BLAS is reached
/// through /etc/alternatives), matplotlib (Debian keeps matplotlibrc in /etc) and commands
/// that are alternatives (`awk`) — without the host's users, hosts or keys.
#[test]
fn strict_keeps_the_etc_entries_its_libraries_need() {
    require_host_module("numpy", "python3-numpy");
    require_host_module("matplotlib", "python3-matplotlib");
    let o = py(
        &[
            "--profile",
            "strict",
            "--memory",
            "512M",
            "--timeout",
            "60s",
            "--cpu-time",
            "60s",
        ],
        r#"
import numpy
R["dot"] = int(numpy.dot(numpy.arange(4), numpy.arange(4)))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2]); plt.savefig("/tmp/s.png")
R["png"] = os.path.getsize("/tmp/s.png") > 0
import subprocess
R["awk"] = subprocess.run(["awk", "BEGIN { print 6 * 7 }"], capture_output=True, text=True).stdout
R["etc"] = sorted(os.listdir("/etc"))
R["ssl"] = sorted(os.listdir("/etc/ssl"))
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["dot"], 14, "{o}");
    assert_eq!(d["png"], true, "{o}");
    assert_eq!(d["awk"], "42\n", "{o}");
    assert!(
        !o.stderr().contains("Fontconfig error"),
        "fontconfig found no configuration: {o}"
    );
    let allowed = [
        "alternatives",
        "fonts",
        "ld.so.cache",
        "ld.so.conf",
        "ld.so.conf.d",
        "matplotlibrc",
        "ssl",
    ];
    let etc: Vec<&str> = d["etc"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let extra: Vec<_> = etc.iter().filter(|e| !allowed.contains(e)).collect();
    assert!(
        extra.is_empty(),
        "strict shows more of /etc: {extra:?}\n{o}"
    );
    assert_eq!(d["ssl"], json!(["certs"]), "{o}");
}

/// The sandbox user (uid 1000) is `sandbox`, with its own home — never the name of the host's
/// uid 1000 (here a real account, `cloudsdk@cordon` in every prompt), though the sandbox sees
/// the host's /etc. The host's user database is neither shown nor touched. (`strict` shows no
/// /etc/passwd at all: `strict_profile_hides_etc_and_still_runs_python`.)
#[test]
fn the_sandbox_user_is_sandbox_not_the_hosts_uid_1000() {
    let host_passwd = std::fs::read("/etc/passwd").expect("host /etc/passwd");
    let host_1000 = String::from_utf8_lossy(&host_passwd)
        .lines()
        .find(|l| l.split(':').nth(2) == Some("1000"))
        .and_then(|l| l.split(':').next())
        .map(str::to_string);
    eprintln!("host's uid 1000: {host_1000:?}");
    let script = "id -un; id -gn; getent passwd 1000; cat /etc/passwd /etc/group";
    let o = run_json(&["--", "sh", "-c", script]);
    o.assert_exited(0);
    let out = o.stdout();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("sandbox"), "{o}");
    assert_eq!(lines.next(), Some("sandbox"), "{o}");
    assert_eq!(
        lines.next(),
        Some("sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh"),
        "{o}"
    );
    if let Some(name) = &host_1000 {
        assert!(
            !out.lines().any(|l| l.starts_with(&format!("{name}:"))),
            "the host's {name} shows inside: {o}"
        );
    }
    assert_eq!(
        std::fs::read("/etc/passwd").expect("host /etc/passwd"),
        host_passwd,
        "the host's /etc/passwd changed"
    );
}
