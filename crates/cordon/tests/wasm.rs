//! `cordon run` of WebAssembly modules: recognised by their first bytes, run by the wasm
//! runtime that confines itself, attacked from inside, checked from outside; and the
//! table: the same flags give the same Outcome fields from both backends. Root and rootless.
//!
//! The modules are built here from C (the cordon-wasm suite's tool.c) with Debian's clang and
//! wasi-libc (packages clang, lld, wasi-libc, libclang-rt-dev-wasm32); the native twin of the
//! tool with the host's cc.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::*;

const TOOL_C: &str = include_str!("../../cordon-wasm/tests/common/tool.c");

struct Built {
    _dir: HostDir,
    wasm: PathBuf,
    native: PathBuf,
    imports: PathBuf,
    cache: PathBuf,
}

fn compile(args: &[&str], out: &Path, src: &Path) {
    let (cc, what) = if args.iter().any(|a| a.starts_with("--target=wasm32")) {
        ("clang", "clang lld wasi-libc libclang-rt-dev-wasm32")
    } else {
        ("cc", "a C compiler")
    };
    let r = Command::new(cc)
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}: install {what} (scripts/test.sh does)"));
    assert!(
        r.status.success(),
        "{cc} failed (install {what}): {}",
        String::from_utf8_lossy(&r.stderr)
    );
    set_mode(out, 0o755);
}

/// The test modules, built once per test binary, in a directory any sandbox uid can read.
fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let runtime = Path::new(cordon_bin()).with_file_name("cordon-wasm");
        assert!(
            runtime.is_file(),
            "{} is missing: the wasm backend is its own binary; build it first (cargo build \
             -p cordon-wasm, or the workspace as scripts/test.sh does)",
            runtime.display()
        );
        let dir = HostDir::new("wasm-build");
        let src = dir.file("tool.c", TOOL_C, 0o644);
        let wasm = dir.join("tool.wasm");
        compile(&["--target=wasm32-wasi", "-O2"], &wasm, &src);
        let native = dir.join("tool");
        compile(&["-O2"], &native, &src);
        let isrc = dir.file(
            "imports.c",
            "__attribute__((import_module(\"cordon_test\"), import_name(\"launch_missiles\")))\n\
             extern int launch_missiles(int);\nint main(void) { return launch_missiles(1); }\n",
            0o644,
        );
        let imports = dir.join("imports.wasm");
        compile(&["--target=wasm32-wasi", "-O2"], &imports, &isrc);
        let cache = dir.join("cache");
        Built {
            wasm,
            native,
            imports,
            cache,
            _dir: dir,
        }
    })
}

/// `cordon run --json FLAGS -- MODULE ARGS`, with this suite's own compiled-code cache.
fn wasm_run(flags: &[&str], module: &Path, args: &[&str]) -> Outcome {
    Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .arg("run")
        .arg("--json")
        .args(flags.iter().copied())
        .arg("--")
        .arg(module)
        .args(args.iter().copied())
        .run()
        .outcome()
}

fn tool(flags: &[&str], args: &[&str]) -> Outcome {
    wasm_run(flags, &built().wasm, args)
}

/// The native twin, run by the process backend (bound read-only into the sandbox).
fn native(flags: &[&str], args: &[&str]) -> Outcome {
    let bind = format!("{}:/opt/tool", built().native.display());
    let mut all = vec!["--ro", bind.as_str()];
    all.extend_from_slice(flags);
    Cmd::cordon()
        .arg("run")
        .arg("--json")
        .args(all)
        .arg("--")
        .arg("/opt/tool")
        .args(args.iter().copied())
        .run()
        .outcome()
}

#[test]
fn a_module_is_recognised_and_runs_in_the_confined_wasm_backend() {
    let o = tool(&[], &["hello", "a b"]);
    assert_eq!(o.status(), "exited", "{o}");
    assert_eq!(o.stdout(), "hello from wasm [a b]\n");
    let e = o.enforcement();
    assert_eq!(e["backend"], "wasm", "{o}");
    // The runtime confined itself: seccomp and rlimits, Landlock where the kernel has it, and
    // a user and mount namespace only to own the --disk-capped scratch /workspace; no pid,
    // network, ipc or uts namespace and no cgroup (a guest makes no syscall of its own).
    for layer in ["seccomp", "rlimits", "user_ns", "mount_ns"] {
        assert_eq!(e[layer], true, "{layer}: {o}");
    }
    for layer in ["pid_ns", "net_ns", "ipc_ns", "uts_ns", "cgroup_ns"] {
        assert_eq!(e[layer], false, "{layer}: {o}");
    }
    assert_eq!(e["cgroup"], "none", "{o}");
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    if lsm.split(',').any(|m| m.trim() == "landlock") {
        assert!(e["landlock_abi"].as_u64().unwrap_or(0) >= 1, "{o}");
    }
    // With a --workspace there is no scratch to own: no namespace at all.
    let ws = HostDir::new("wasm-ws-ns");
    let o = tool(&["--workspace", ws.str()], &["hello", "ws"]);
    assert_eq!(o.stdout(), "hello from wasm [ws]\n", "{o}");
    assert_eq!(o.enforcement()["user_ns"], false, "{o}");
    assert_eq!(o.enforcement()["seccomp"], true, "{o}");
    assert!(o.limits_hit().is_empty(), "{o}");

    // Without --json: the module's output streams, and its exit code is cordon's.
    let f = Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .arg("run")
        .arg("--")
        .arg(&built().wasm)
        .args(["exit", "3"])
        .run();
    assert_eq!(f.code, Some(3), "{f:?}");
    let f = Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .args(["run", "--"])
        .arg(&built().wasm)
        .args(["stderr"])
        .run();
    assert_eq!(
        (f.code, f.stdout.as_str()),
        (Some(5), "to stdout\n"),
        "{f:?}"
    );
    assert!(f.stderr.starts_with("to stderr\n"), "{f:?}");

    // The process backend's own runs say so too.
    let o = native(&[], &["hello"]);
    assert_eq!(o.enforcement()["backend"], "process", "{o}");
}

/// The runtime is a separate binary: `cordon` finds it beside itself (and `cordon check` says
/// where); a `cordon` installed without it refuses a module with what to install, exit 125.
#[test]
fn the_runtime_binary_is_found_or_named() {
    let c = Cmd::cordon().args(["check", "--json"]).run();
    let v: serde_json::Value = serde_json::from_str(&c.stdout).unwrap_or_default();
    let beside = Path::new(cordon_bin()).with_file_name("cordon-wasm");
    assert_eq!(v["wasm_backend"]["available"], true, "{c:?}");
    assert_eq!(
        v["wasm_backend"]["path"].as_str().map(PathBuf::from),
        Some(beside),
        "{c:?}"
    );
    // A cordon alone in its directory, with no cordon-wasm on PATH either.
    let d = HostDir::new("lone-cordon");
    let lone = d.join("cordon");
    std::fs::copy(cordon_bin(), &lone).expect("copy cordon");
    set_mode(&lone, 0o755);
    let alone = |args: &[&str]| {
        Cmd::new(&lone)
            .env("PATH", "/usr/bin:/bin")
            .env_remove("CORDON_WASM_BIN")
            .args(args.iter().copied())
            .run()
    };
    let module = built().wasm.to_string_lossy().into_owned();
    let f = alone(&["run", "--", &module, "hello"]);
    assert_eq!(f.code, Some(125), "{f:?}");
    for want in [
        "the WebAssembly backend is not installed",
        "cordon-wasm",
        "scripts/install.sh",
        "--backend process",
    ] {
        assert!(f.stderr.contains(want), "{want:?} missing: {f:?}");
    }
    let c = alone(&["check"]);
    assert!(
        c.stdout.contains("MISSING  wasm") && c.stdout.contains("scripts/install.sh"),
        "{c:?}"
    );
    // An explicit override that names nothing is refused, not ignored.
    let f = Cmd::cordon()
        .env("CORDON_WASM_BIN", "/nonexistent/cordon-wasm")
        .args(["run", "--", &module])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("CORDON_WASM_BIN"), "{f:?}");
}

#[test]
fn backend_flag_is_checked() {
    let o = tool(&["--backend", "wasm"], &["exit", "7"]);
    assert_eq!(o.exit_code(), Some(7), "{o}");
    let d = HostDir::new("notwasm");
    let script = d.file("x.sh", "#!/bin/sh\necho hi\n", 0o755);
    let f = Cmd::cordon()
        .args(["run", "--backend", "wasm", "--"])
        .arg(&script)
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("not a WebAssembly module"), "{f:?}");
    let f = Cmd::cordon()
        .args(["run", "--backend", "wasm", "--", "/nonexistent/tool.wasm"])
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("no such file"), "{f:?}");
    // --backend process does not look inside the file: the kernel refuses to exec it.
    let o = Cmd::cordon()
        .args(["run", "--json", "--backend", "process", "--ro"])
        .arg(format!("{}:/opt/t.wasm", built().wasm.display()))
        .args(["--", "/opt/t.wasm"])
        .run()
        .outcome();
    assert_eq!(o.enforcement()["backend"], "process", "{o}");
    assert_eq!(o.exit_code(), Some(126), "{o}");
    // No network for a module: an allowlist is refused, not silently dropped.
    let f = Cmd::cordon()
        .args(["run", "--allow-net", "example.org", "--"])
        .arg(&built().wasm)
        .run();
    assert_eq!(f.code, Some(125), "{f:?}");
    assert!(f.stderr.contains("no network"), "{f:?}");
}

#[test]
fn the_host_stays_out_of_reach() {
    let ws = HostDir::new("wasm-ws");
    let secret = HostDir::new("wasm-secret");
    let secret_file = secret.file("key.txt", "TOP-SECRET", 0o644);
    for path in [
        "/etc/passwd".to_string(),
        "/workspace/../etc/passwd".to_string(),
        "/workspace/../../../../../../etc/shadow".to_string(),
        secret_file.display().to_string(),
        "../etc/passwd".to_string(),
        "/proc/self/environ".to_string(),
        "/run/cordon-wasm/report".to_string(),
    ] {
        let o = tool(&["--workspace", ws.str()], &["cat", &path]);
        assert_eq!(o.exit_code(), Some(1), "{path} was read: {o}");
        assert!(o.stdout().starts_with("ERR "), "{path}: {o}");
        assert!(!o.stdout().contains("root:") && !o.stdout().contains("TOP-SECRET"));
    }
    let o = tool(&[], &["ls", "/"]);
    assert_eq!(o.exit_code(), Some(1), "the root was listed: {o}");
}

#[test]
fn the_workspace_is_writable_and_ro_binds_are_not() {
    let ws = HostDir::new("wasm-ws");
    let data = HostDir::new("wasm-data");
    data.file("in.txt", "input", 0o644);
    let ro = format!("{}:/data", data.str());
    let o = tool(
        &["--workspace", ws.str(), "--ro", &ro],
        &["write", "/workspace/out.txt", "from wasm"],
    );
    assert_eq!(o.exit_code(), Some(0), "{o}");
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).unwrap_or_default(),
        "from wasm"
    );
    let o = tool(&["--ro", &ro], &["cat", "/data/in.txt"]);
    assert_eq!(o.stdout(), "input", "{o}");
    for path in ["/data/in.txt", "/data/new.txt"] {
        let o = tool(&["--ro", &ro], &["write", path, "x"]);
        assert_eq!(o.exit_code(), Some(1), "{path} was written: {o}");
    }
    assert_eq!(
        std::fs::read_to_string(data.join("in.txt")).unwrap_or_default(),
        "input"
    );
    assert!(!data.join("new.txt").exists());
}

#[test]
fn the_environment_is_only_what_is_allowed() {
    let o = Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .env("CORDON_TEST_SECRET", "hunter2")
        .env("CORDON_TEST_PASSED", "passed-on")
        .args([
            "run",
            "--json",
            "--env",
            "GREETING=hi",
            "--env",
            "CORDON_TEST_PASSED",
            "--",
        ])
        .arg(&built().wasm)
        .arg("env")
        .run()
        .outcome();
    let mut lines: Vec<&str> = o.stdout().lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "CORDON_TEST_PASSED=passed-on",
            "GREETING=hi",
            "HOME=/home/sandbox",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "TERM=dumb",
        ],
        "{o}"
    );
}

#[test]
fn stdin_reaches_the_module() {
    let d = HostDir::new("wasm-stdin");
    let input = d.file("in.txt", "hello stdin", 0o644);
    let o = tool(&["--stdin", input.to_str().unwrap_or_default()], &["stdin"]);
    assert_eq!(o.stdout(), "HELLO STDIN\n11 bytes\n", "{o}");
}

#[test]
fn limits_end_the_module() {
    let o = tool(&["--timeout", "1s"], &["spin"]);
    assert_eq!(o.status(), "timeout", "{o}");
    assert_eq!(o.limits_hit(), ["wall_time"]);
    let o = tool(&["--memory", "32M"], &["grow"]);
    assert_eq!(o.status(), "oom", "{o}");
    assert_eq!(o.limits_hit(), ["memory"]);
    assert!(!o.stdout().contains("malloc refused"), "{o}");
    let o = tool(&["--output-limit", "10K"], &["flood", "20000000"]);
    assert_eq!(o.status(), "exited", "{o}");
    assert_eq!(o.stdout().len(), 10 << 10);
    assert_eq!(o.v["stdout_truncated"], true);
    assert_eq!(o.limits_hit(), ["output"]);
    // --disk is the size of the sandbox's /workspace tmpfs, which the module writes through
    // its preopen.
    let o = tool(&["--disk", "2M"], &["fill", "/workspace/big"]);
    assert!(
        o.stdout().starts_with("full after ") && o.stdout().contains("No space left"),
        "{o}"
    );
    assert_eq!(o.limits_hit(), ["disk"], "{o}");
}

#[test]
fn traps_and_bad_modules_are_clear_errors() {
    let o = tool(&[], &["recurse"]);
    assert_eq!(o.status(), "error", "{o}");
    assert_eq!(o.exit_code(), Some(134));
    let err = o.v["error"].as_str().unwrap_or_default().to_string();
    assert!(err.starts_with("wasm trap: call stack exhausted"), "{err}");

    let o = wasm_run(&[], &built().imports, &[]);
    assert_eq!(o.status(), "error", "{o}");
    assert_eq!(o.exit_code(), Some(126));
    let err = o.v["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("cordon_test::launch_missiles"), "{err}");

    let d = HostDir::new("wasm-bad");
    let good = std::fs::read(&built().wasm).unwrap_or_default();
    let truncated = d.join("truncated.wasm");
    std::fs::write(&truncated, &good[..good.len() / 2]).unwrap_or_default();
    set_mode(&truncated, 0o644);
    let o = wasm_run(&[], &truncated, &["hello"]);
    assert_eq!(o.status(), "error", "{o}");
    assert_eq!(o.exit_code(), Some(126));
    assert!(
        o.v["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("not a valid WebAssembly module"),
        "{o}"
    );
    // Without --json: cordon says why, and exits with the error's code.
    let f = Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .args(["run", "--"])
        .arg(&truncated)
        .run();
    assert_eq!(f.code, Some(126), "{f:?}");
    assert!(
        f.stderr.contains("cordon: not a valid WebAssembly module"),
        "{f:?}"
    );
}

/// One row of the table: the same flags and the same program, compiled to wasm and natively.
struct Row {
    name: &'static str,
    flags: &'static [&'static str],
    args: &'static [&'static str],
    /// Only where the process backend can see the limit (a cgroup for OOM kills).
    needs_cgroup: bool,
    /// Fields whose value legitimately differs, and why.
    differs: &'static [&'static str],
}

#[test]
fn both_backends_give_the_same_outcome_fields() {
    let rows = [
        Row {
            name: "hello",
            flags: &[],
            args: &["hello", "x y"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "exit code",
            flags: &[],
            args: &["exit", "42"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "stderr and exit",
            flags: &[],
            args: &["stderr"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "environment",
            flags: &["--env", "A=1", "--profile", "strict"],
            args: &["env"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "output cut",
            flags: &["--output-limit", "4K"],
            args: &["flood", "1000000"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "timeout",
            flags: &["--timeout", "1s"],
            args: &["spin"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "cpu time",
            flags: &["--cpu-time", "1s"],
            args: &["spin"],
            needs_cgroup: false,
            // The process backend's signal says who stopped the program: 9 from the
            // supervisor (with a cgroup), 24 from RLIMIT_CPU (without); the wasm runtime
            // stops the guest itself and reports 9.
            differs: &["signal"],
        },
        Row {
            name: "disk full",
            flags: &["--disk", "1M"],
            args: &["fill", "/workspace/big"],
            needs_cgroup: false,
            differs: &[],
        },
        Row {
            name: "memory",
            flags: &["--memory", "64M"],
            args: &["grow"],
            needs_cgroup: true,
            differs: &[],
        },
    ];
    let mut problems = Vec::new();
    for row in &rows {
        let n = native(row.flags, row.args);
        if row.needs_cgroup && !n.has_cgroup() {
            eprintln!(
                "{}: skipped: without a cgroup the process backend cannot see a refused \
                 allocation (RLIMIT_DATA), while the wasm runtime reports it as oom",
                row.name
            );
            continue;
        }
        let w = tool(row.flags, row.args);
        for field in [
            "status",
            "exit_code",
            "signal",
            "stdout",
            "stderr",
            "stdout_truncated",
            "stderr_truncated",
            "limits_hit",
        ] {
            if n.v[field] != w.v[field] && !row.differs.contains(&field) {
                let show = |v: &serde_json::Value| {
                    let s = v.to_string();
                    s.chars().take(200).collect::<String>()
                };
                problems.push(format!(
                    "{}: {field}: process {} vs wasm {}",
                    row.name,
                    show(&n.v[field]),
                    show(&w.v[field])
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The runtime process under `root` (cordon, then the `cordon-wasm run` supervisor, which
/// forks the runtime, named `cordon-wasm-rt`), seen from the host while it runs a guest:
/// `(pid, status text)`.
fn find_runtime(root: u32) -> Option<(u32, String)> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The name is in parentheses and may hold anything; the parent's pid follows it.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != "cordon-wasm-rt" {
            continue;
        }
        let mut up = parent_of(pid);
        for _ in 0..4 {
            match up {
                Some(p) if p == root => {
                    let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
                    return Some((pid, status));
                }
                Some(p) if p > 1 => up = parent_of(p),
                _ => break,
            }
        }
    }
    None
}

fn status_field<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or("?")
}

/// Checked from outside while a guest spins: wasmtime and its compiler run confined — two
/// seccomp filters (the sandbox's and the runtime's: no socket, exec or new process),
/// no_new_privs, no capabilities, never root — in the host's pid and network namespaces (no
/// process sandbox around it) and, without a --workspace, a user and mount namespace of its
/// own that hold only the scratch tmpfs, which is mounted nowhere on the host.
#[test]
fn the_runtime_itself_runs_confined() {
    let marker = unique("confined");
    let secret = unique("secret-value");
    let env_flag = format!("CORDON_TEST_SECRET={secret}");
    let host_secret = unique("host-secret");
    let running = Cmd::cordon()
        .env(
            "CORDON_WASM_CACHE",
            built().cache.to_str().unwrap_or_default(),
        )
        .env("CORDON_TEST_HOST_SECRET", &host_secret)
        .args(["run", "--json", "--timeout", "4s", "--env", &env_flag, "--"])
        .arg(&built().wasm)
        .args(["spin", &marker])
        .spawn();
    let t = std::time::Instant::now();
    let found = loop {
        if let Some(f) = find_runtime(running.pid()) {
            // Confinement comes first, the guest after: wait for the guest's threads.
            if status_field(&f.1, "Threads:").parse::<u32>().unwrap_or(0) >= 2 {
                break f;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "no runtime process under cordon (pid {})",
            running.pid()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let (pid, status) = found;
    // The guest's environment is not in the runtime's argv, which every user can read, and
    // cordon's own environment (a host secret) never reaches the runtime, whose memory starts
    // as its supervisor's: /proc/PID/environ shows what the supervisor was started with.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&secret),
        "an --env value is on the runtime's command line"
    );
    if let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) {
        let environ = String::from_utf8_lossy(&environ);
        assert!(
            !environ.contains(&host_secret),
            "cordon's environment reached the runtime: {environ}"
        );
    }
    assert_eq!(status_field(&status, "Seccomp:"), "2", "{status}");
    assert_eq!(status_field(&status, "Seccomp_filters:"), "2", "{status}");
    assert_eq!(status_field(&status, "NoNewPrivs:"), "1", "{status}");
    assert_eq!(
        status_field(&status, "CapEff:"),
        "0000000000000000",
        "{status}"
    );
    assert_eq!(
        status_field(&status, "CapBnd:"),
        "0000000000000000",
        "{status}"
    );
    let uid: u32 = status_field(&status, "Uid:")
        .split_whitespace()
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or(0);
    assert_ne!(uid, 0, "the runtime runs as host root: {status}");
    if is_root() {
        assert!(uid >= 2_000_000_000, "{status}");
    }
    for (ns, own) in [
        ("user", true),
        ("mnt", true),
        ("pid", false),
        ("net", false),
    ] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"));
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}"));
        match (theirs, ours) {
            (Ok(t), Ok(o)) => assert_eq!(t != o, own, "{ns}: {t:?} vs ours {o:?}"),
            (Err(e), _) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
            (t, o) => panic!("{ns}: {t:?} / {o:?}"),
        }
    }
    // The scratch tmpfs is mounted nowhere the host sees.
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!host_mounts.contains("cordon-wasm"), "{host_mounts}");
    let o = running.wait().outcome();
    assert_eq!(o.status(), "timeout", "{o}");
}

/// Code compiled inside a sandbox is cached by the supervisor (tagged with its key) and used
/// by the next run; a tampered entry is not used, and is replaced.
#[test]
fn compiled_code_is_cached_and_checked() {
    let cache = HostDir::new("wasm-cache");
    let go = |args: &[&str]| {
        Cmd::cordon()
            .env("CORDON_WASM_CACHE", cache.str())
            .args(["run", "--json", "--"])
            .arg(&built().wasm)
            .args(args.iter().copied())
            .run()
            .outcome()
    };
    let entries = || -> Vec<PathBuf> {
        std::fs::read_dir(&cache.path)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let cold = go(&["hello", "cold"]);
    assert_eq!(cold.stdout(), "hello from wasm [cold]\n", "{cold}");
    let stored = entries();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let warm = go(&["hello", "warm"]);
    assert_eq!(warm.stdout(), "hello from wasm [warm]\n", "{warm}");
    assert!(
        warm.usage("cpu_user_ms") < cold.usage("cpu_user_ms"),
        "the warm run compiled again: cold {cold}\nwarm {warm}"
    );
    let mut bytes = std::fs::read(&stored[0]).unwrap_or_default();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 32] {
        *b ^= 0x5a;
    }
    std::fs::write(&stored[0], &bytes).unwrap_or_default();
    let o = go(&["hello", "tampered"]);
    assert_eq!(o.stdout(), "hello from wasm [tampered]\n", "{o}");
    assert_ne!(
        std::fs::read(&stored[0]).unwrap_or_default(),
        bytes,
        "the tampered entry was kept"
    );
}

/// A module blocked in a read that never returns sees no epoch; the runtime's watchdog still
/// ends it at its timeout (not at the caller's backstop, 2 s later).
#[test]
fn a_module_blocked_on_stdin_times_out_on_time() {
    let d = HostDir::new("wasm-fifo");
    let fifo = d.join("stdin");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // A writer that never writes, so that reading never ends.
    let _writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open the fifo");
    let o = tool(
        &[
            "--stdin",
            fifo.to_str().unwrap_or_default(),
            "--timeout",
            "1s",
        ],
        &["stdin"],
    );
    assert_eq!(o.status(), "timeout", "{o}");
    assert_eq!(o.limits_hit(), ["wall_time"], "{o}");
    assert!(
        o.usage("wall_ms") < 2500,
        "the backstop ended it, not the runtime: {o}"
    );
}
