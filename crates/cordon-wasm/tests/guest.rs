//! The runtime on its own (`cordon_wasm::run`, in this process): every WASI door and every
//! limit, attacked by real modules compiled from C, checked from outside.

mod common;

use std::time::{Duration, Instant};

use cordon_policy::{Backend, Bind, EnvEntry, LimitHit, Outcome, Profile, Status};
use cordon_wasm::cache::Cache;
use cordon_wasm::{run, GuestStdin, WasmRequest};

use common::*;

fn profile() -> Profile {
    let mut p = Profile::builtin("default").unwrap();
    p.limits.timeout = Duration::from_secs(20);
    p
}

/// One compiled-code cache for the suite: each module compiles once, not once per test (the
/// cache itself is tested on a directory of its own below).
fn shared_cache() -> Cache {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| scratch("shared-cache"));
    Cache::open(dir).unwrap()
}

fn req(p: &Profile, module: Vec<u8>, args: &[&str]) -> WasmRequest {
    WasmRequest {
        profile: p.clone(),
        module,
        argv: std::iter::once("tool.wasm")
            .chain(args.iter().copied())
            .map(String::from)
            .collect(),
        stdin: GuestStdin::Empty,
        echo: false,
        cache: Some(shared_cache()),
    }
}

fn go(p: &Profile, args: &[&str]) -> Outcome {
    run(req(p, tool(), args)).unwrap()
}

#[test]
fn hello_world_gets_its_arguments() {
    let o = go(&profile(), &["hello", "a b", "ünï"]);
    assert_eq!(o.status, Status::Exited, "{o:?}");
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.stdout, "hello from wasm [a b] [ünï]\n");
    assert_eq!(o.stderr, "");
    assert!(o.limits_hit.is_empty());
    assert_eq!(o.enforcement.backend, Some(Backend::Wasm));
    assert!(o.usage.peak_memory_bytes > 0, "{:?}", o.usage);
}

#[test]
fn exit_codes_and_stderr() {
    // WASI exit statuses are 0..=125 (wasmtime traps on larger ones, as `exit(126)` would
    // collide with the shell's own codes).
    for code in [0, 1, 3, 42, 125] {
        let o = go(&profile(), &["exit", &code.to_string()]);
        assert_eq!(o.status, Status::Exited, "{o:?}");
        assert_eq!(o.exit_code, Some(code));
    }
    let o = go(&profile(), &["stderr"]);
    assert_eq!(o.exit_code, Some(5));
    assert_eq!(o.stdout, "to stdout\n");
    assert_eq!(o.stderr, "to stderr\n");
}

#[test]
fn host_files_are_out_of_reach() {
    let ws = scratch("reach");
    std::fs::write(ws.join("mine.txt"), "workspace file\n").unwrap();
    // A secret next to the workspace: reachable only by climbing out of it.
    let secret = ws.with_extension("secret");
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    let mut p = profile();
    p.workspace = Some(ws.clone());
    let o = go(&p, &["cat", "/workspace/mine.txt"]);
    assert_eq!(o.stdout, "workspace file\n", "{o:?}");

    let name = secret.file_name().unwrap().to_string_lossy().into_owned();
    for path in [
        "/etc/passwd".to_string(),
        "/etc/hostname".to_string(),
        format!("/workspace/../{name}"),
        format!("/workspace/../../../../../../{}", secret.display()),
        secret.display().to_string(),
        "../etc/passwd".to_string(),
    ] {
        let o = go(&p, &["cat", &path]);
        assert_eq!(o.exit_code, Some(1), "{path} was read: {o:?}");
        assert!(o.stdout.starts_with("ERR "), "{path}: {o:?}");
        assert!(!o.stdout.contains("TOP-SECRET") && !o.stdout.contains("root:"));
    }
    let o = go(&p, &["ls", "/"]);
    assert!(
        !o.stdout.contains("etc"),
        "the host's root is listed: {o:?}"
    );
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_file(&secret);
}

#[test]
fn workspace_is_writable_and_ro_binds_are_not() {
    let ws = scratch("write");
    let data = scratch("data");
    std::fs::write(data.join("in.txt"), "input").unwrap();
    let mut p = profile();
    p.workspace = Some(ws.clone());
    p.binds.push(Bind {
        source: data.clone(),
        dest: "/data".into(),
        writable: false,
        idmap: false,
        limit: None,
    });
    let o = go(&p, &["write", "/workspace/out.txt", "from the guest"]);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).unwrap(),
        "from the guest"
    );
    let o = go(&p, &["cat", "/data/in.txt"]);
    assert_eq!(o.stdout, "input", "{o:?}");
    for path in ["/data/in.txt", "/data/new.txt"] {
        let o = go(&p, &["write", path, "overwritten"]);
        assert_eq!(o.exit_code, Some(1), "{path} was written: {o:?}");
    }
    assert_eq!(
        std::fs::read_to_string(data.join("in.txt")).unwrap(),
        "input"
    );
    assert!(!data.join("new.txt").exists());

    // The same directory bound read-write is writable.
    p.binds[0].writable = true;
    let o = go(&p, &["write", "/data/new.txt", "ok"]);
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    assert_eq!(std::fs::read_to_string(data.join("new.txt")).unwrap(), "ok");
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn environment_is_only_what_is_allowed() {
    // A variable of this process that nobody passed on.
    std::env::set_var("CORDON_WASM_TEST_SECRET", "hunter2");
    std::env::set_var("CORDON_WASM_TEST_PASSED", "passed-on");
    let mut p = profile();
    p.env
        .push(EnvEntry::Set("GREETING".into(), "hi there".into()));
    p.env.push(EnvEntry::Pass("CORDON_WASM_TEST_PASSED".into()));
    let o = go(&p, &["env"]);
    let mut lines: Vec<&str> = o.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "CORDON_WASM_TEST_PASSED=passed-on",
            "GREETING=hi there",
            "HOME=/home/sandbox",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "TERM=dumb",
        ],
        "{o:?}"
    );
    assert!(!o.stdout.contains("hunter2"));
}

#[test]
fn stdin_is_what_was_given() {
    let mut r = req(&profile(), tool(), &["stdin"]);
    r.stdin = GuestStdin::Bytes(b"abc xyz".to_vec());
    let o = run(r).unwrap();
    assert_eq!(o.stdout, "ABC XYZ\n7 bytes\n", "{o:?}");
    let o = go(&profile(), &["stdin"]);
    assert_eq!(o.stdout, "\n0 bytes\n", "{o:?}");
}

#[test]
fn an_infinite_loop_times_out() {
    let mut p = profile();
    p.limits.timeout = Duration::from_millis(700);
    let t = Instant::now();
    let o = go(&p, &["spin"]);
    let took = t.elapsed();
    assert_eq!(o.status, Status::Timeout, "{o:?}");
    assert_eq!(o.limits_hit, [LimitHit::WallTime]);
    // Compiling counts against the limit too (as a process's start-up does); on a loaded
    // machine that alone can take seconds.
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(30),
        "{took:?}"
    );
    assert!(o.usage.wall_ms >= 700, "{:?}", o.usage);
}

#[test]
fn cpu_time_is_limited() {
    let mut p = profile();
    p.limits.cpu_time = Some(Duration::from_secs(1));
    let t = Instant::now();
    let o = go(&p, &["spin"]);
    assert_eq!(o.status, Status::CpuTime, "{o:?}");
    assert_eq!(o.limits_hit, [LimitHit::CpuTime]);
    assert!(t.elapsed() < Duration::from_secs(15));
    assert!(
        o.usage.cpu_user_ms + o.usage.cpu_system_ms >= 900,
        "{:?}",
        o.usage
    );
}

#[test]
fn memory_growth_past_the_cap_is_oom() {
    let mut p = profile();
    p.limits.memory = 32 << 20;
    let o = go(&p, &["grow"]);
    assert_eq!(o.status, Status::Oom, "{o:?}");
    assert_eq!(o.limits_hit, [LimitHit::Memory]);
    // Refused before the guest could see a failed malloc.
    assert!(!o.stdout.contains("malloc refused"), "{o:?}");
    assert!(o.usage.peak_memory_bytes <= 32 << 20, "{:?}", o.usage);
    assert!(o.usage.peak_memory_bytes >= 16 << 20, "{:?}", o.usage);
    // A module that stays under the cap is untouched by it.
    let o = go(&p, &["hello"]);
    assert_eq!(o.status, Status::Exited, "{o:?}");
}

#[test]
fn an_output_flood_is_cut() {
    let mut p = profile();
    p.limits.output_limit = 10_000;
    let o = go(&p, &["flood", "5000000"]);
    assert_eq!(o.status, Status::Exited, "{o:?}");
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.stdout.len(), 10_000);
    assert!(o.stdout_truncated);
    assert!(!o.stderr_truncated);
    assert_eq!(o.stderr, "flood done\n");
    assert_eq!(o.limits_hit, [LimitHit::Output]);
}

#[test]
fn a_stack_overflow_traps() {
    let o = go(&profile(), &["recurse"]);
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(o.exit_code, Some(134));
    let err = o.error.unwrap_or_default();
    assert!(err.starts_with("wasm trap: "), "{err}");
    assert!(
        err.contains("call stack exhausted") || err.contains("out of bounds"),
        "{err}"
    );
    let o = go(&profile(), &["abort"]);
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert!(o.error.unwrap_or_default().contains("unreachable"));
}

#[test]
fn an_unknown_import_is_a_clear_error() {
    let module = std::fs::read(unknown_import_path()).unwrap();
    let o = run(req(&profile(), module, &[])).unwrap();
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(o.exit_code, Some(126));
    let err = o.error.unwrap_or_default();
    assert!(
        err.contains("cordon_test::launch_missiles") && err.contains("does not provide"),
        "{err}"
    );
}

#[test]
fn corrupted_and_truncated_modules_are_refused() {
    let good = tool();
    // Garbage in the middle of the code section (0xff is no opcode).
    let (start, len) = code_section(&good);
    let mut corrupted = good.clone();
    let mid = start + len / 2;
    for b in &mut corrupted[mid..mid + 64] {
        *b = 0xff;
    }
    let truncated = good[..good.len() / 3].to_vec();
    for (what, bytes) in [
        ("corrupted", corrupted),
        ("truncated", truncated),
        ("cut inside the first section", good[..9].to_vec()),
    ] {
        let o = run(req(&profile(), bytes, &["hello"])).unwrap();
        assert_eq!(o.status, Status::Error, "{what}: {o:?}");
        assert_eq!(o.exit_code, Some(126), "{what}");
        let err = o.error.unwrap_or_default();
        assert!(
            err.starts_with("not a valid WebAssembly module"),
            "{what}: {err}"
        );
    }
    let err = run(req(&profile(), b"#!/bin/sh\n".to_vec(), &[]))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("not a WebAssembly"), "{err}");
}

#[test]
fn compiled_code_is_cached_and_a_tampered_entry_is_not_used() {
    let dir = scratch("cache");
    let run_cached = |args: &[&str]| {
        let mut r = req(&profile(), tool(), args);
        r.cache = Some(Cache::open(&dir).unwrap());
        run(r).unwrap()
    };
    let t = Instant::now();
    let o = run_cached(&["hello", "cold"]);
    let cold = t.elapsed();
    assert_eq!(o.stdout, "hello from wasm [cold]\n", "{o:?}");
    let entries = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .collect()
    };
    let stored = entries();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let t = Instant::now();
    let o = run_cached(&["hello", "warm"]);
    let warm = t.elapsed();
    assert_eq!(o.stdout, "hello from wasm [warm]\n", "{o:?}");
    assert!(
        warm < cold,
        "the cached run ({warm:?}) was not quicker than compiling ({cold:?})"
    );

    // Tampered: flip bits in the middle of the native code. The entry is not deserialized;
    // the module is compiled again, runs correctly, and the entry is replaced.
    let entry = &stored[0];
    let mut bytes = std::fs::read(entry).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0xa5;
    }
    std::fs::write(entry, &bytes).unwrap();
    let o = run_cached(&["hello", "tampered"]);
    assert_eq!(o.stdout, "hello from wasm [tampered]\n", "{o:?}");
    assert_ne!(std::fs::read(entry).unwrap(), bytes, "not replaced");
    let o = run_cached(&["exit", "7"]);
    assert_eq!(o.exit_code, Some(7));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Offset and length of a module's code section (id 10).
fn code_section(m: &[u8]) -> (usize, usize) {
    let leb = |pos: &mut usize| {
        let (mut v, mut shift) = (0usize, 0);
        loop {
            let b = m[*pos];
            *pos += 1;
            v |= ((b & 0x7f) as usize) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return v;
            }
        }
    };
    let mut pos = 8;
    while pos < m.len() {
        let id = m[pos];
        pos += 1;
        let size = leb(&mut pos);
        if id == 10 {
            return (pos, size);
        }
        pos += size;
    }
    panic!("no code section");
}
