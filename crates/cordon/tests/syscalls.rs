//! The seccomp filter, capabilities and no_new_privs, attacked with raw syscalls (the target's
//! numbers, from libc), and on x86_64 also with x32 numbers, the legacy `iopl`/`ioperm` and
//! the i386 `int 0x80` entry. Where possible the arguments are chosen so that, without the
//! filter, the call would *succeed* or fail with another errno: an EPERM here is the filter's
//! doing, not a side effect of missing privileges.

mod common;

use common::*;

/// `(name, python expression, expected errno or 0 for success)`.
fn table() -> Vec<(String, String, i32)> {
    use libc::*;
    let eperm = EPERM;
    let mut rows: Vec<(String, String, i32)> = Vec::new();
    let mut add = |name: &str, expr: String, want: i32| rows.push((name.into(), expr, want));

    // Namespaces.
    for (n, f) in [
        ("user", CLONE_NEWUSER),
        ("mnt", CLONE_NEWNS),
        ("pid", CLONE_NEWPID),
        ("net", CLONE_NEWNET),
        ("ipc", CLONE_NEWIPC),
        ("uts", CLONE_NEWUTS),
        ("cgroup", CLONE_NEWCGROUP),
    ] {
        add(
            &format!("unshare_{n}"),
            format!("sc({SYS_unshare}, {f})"),
            eperm,
        );
        add(
            &format!("clone_{n}"),
            format!("clone_({f} | {SIGCHLD})"),
            eperm,
        );
    }
    add(
        "setns",
        format!("sc({SYS_setns}, os.open('/proc/self/ns/uts', os.O_RDONLY), 0)"),
        eperm,
    );
    add("clone3", format!("sc({SYS_clone3}, BUF(88), 88)"), ENOSYS);

    // Mounts.
    add(
        "mount",
        format!("sc({SYS_mount}, S(b'none'), S(b'/tmp'), S(b'tmpfs'), 0, 0)"),
        eperm,
    );
    add(
        "umount2",
        format!("sc({SYS_umount2}, S(b'/tmp'), 2)"),
        eperm,
    );
    add(
        "pivot_root",
        format!("sc({SYS_pivot_root}, S(b'/tmp'), S(b'/tmp'))"),
        eperm,
    );
    add("chroot", format!("sc({SYS_chroot}, S(b'/tmp'))"), eperm);
    add("fsopen", format!("sc({SYS_fsopen}, S(b'tmpfs'), 0)"), eperm);
    add("fsmount", format!("sc({SYS_fsmount}, -1, 0, 0)"), eperm);
    add(
        "fspick",
        format!("sc({SYS_fspick}, -100, S(b'/'), 0)"),
        eperm,
    );
    add(
        "open_tree",
        format!("sc({SYS_open_tree}, -100, S(b'/'), 0)"),
        eperm,
    );
    add(
        "move_mount",
        format!("sc({SYS_move_mount}, -1, S(b''), -1, S(b''), 0)"),
        eperm,
    );
    add(
        "mount_setattr",
        format!("sc({SYS_mount_setattr}, -100, S(b'/'), 0, 0, 0)"),
        eperm,
    );

    // Other processes' memory. PTRACE_TRACEME and a zero-length process_vm_readv would succeed.
    add(
        "ptrace_traceme",
        format!("sc({SYS_ptrace}, 0, 0, 0, 0)"),
        eperm,
    );
    add(
        "ptrace_attach_init",
        format!("sc({SYS_ptrace}, 16, 1, 0, 0)"),
        eperm,
    );
    add(
        "process_vm_readv",
        format!("sc({SYS_process_vm_readv}, os.getpid(), 0, 0, 0, 0, 0)"),
        eperm,
    );
    add(
        "process_vm_writev",
        format!("sc({SYS_process_vm_writev}, os.getpid(), 0, 0, 0, 0, 0)"),
        eperm,
    );
    add(
        "pidfd_getfd",
        format!("sc({SYS_pidfd_getfd}, sc_raw({SYS_pidfd_open}, 1, 0), 0, 0)"),
        eperm,
    );

    // Kernel attack surface.
    add("bpf", format!("sc({SYS_bpf}, 0, BUF(128), 72)"), eperm);
    add(
        "perf_event_open",
        format!("sc({SYS_perf_event_open}, BUF(128), 0, -1, -1, 0)"),
        eperm,
    );
    add(
        "userfaultfd",
        format!("sc({SYS_userfaultfd}, 0x80000)"),
        eperm,
    );
    add(
        "io_uring_setup",
        format!("sc({SYS_io_uring_setup}, 1, BUF(128))"),
        eperm,
    );
    add(
        "io_uring_enter",
        format!("sc({SYS_io_uring_enter}, 0, 0, 0, 0, 0, 0)"),
        eperm,
    );
    add(
        "io_uring_register",
        format!("sc({SYS_io_uring_register}, 0, 0, 0, 0)"),
        eperm,
    );
    // KEYCTL_GET_KEYRING_ID of the session keyring would succeed; so would add_key.
    add("keyctl", format!("sc({SYS_keyctl}, 0, -3, 1, 0, 0)"), eperm);
    add(
        "add_key",
        format!("sc({SYS_add_key}, S(b'user'), S(b'cordon'), S(b'data'), 4, -2)"),
        eperm,
    );
    add(
        "request_key",
        format!("sc({SYS_request_key}, S(b'user'), S(b'cordon'), 0, 0)"),
        eperm,
    );
    // name_to_handle_at on "/" would succeed.
    add(
        "name_to_handle_at",
        format!(
            "sc({SYS_name_to_handle_at}, -100, S(b'/'), S(b'\\x80' + b'\\0' * 200), BUF(8), 0)"
        ),
        eperm,
    );
    add(
        "open_by_handle_at",
        format!("sc({SYS_open_by_handle_at}, -100, S(b'\\x08' + b'\\0' * 64), 0)"),
        eperm,
    );
    add(
        "kexec_load",
        format!("sc({SYS_kexec_load}, 0, 0, 0, 0)"),
        eperm,
    );
    add(
        "kexec_file_load",
        format!("sc({SYS_kexec_file_load}, -1, -1, 0, 0, 0)"),
        eperm,
    );
    add(
        "init_module",
        format!("sc({SYS_init_module}, BUF(64), 64, S(b''))"),
        eperm,
    );
    add(
        "finit_module",
        format!("sc({SYS_finit_module}, 0, S(b''), 0)"),
        eperm,
    );
    add(
        "delete_module",
        format!("sc({SYS_delete_module}, S(b'loop'), 0)"),
        eperm,
    );

    // Clocks. NULL pointers: even a broken filter cannot change the host's time.
    add(
        "clock_settime",
        format!("sc({SYS_clock_settime}, 0, 0)"),
        eperm,
    );
    // settimeofday(NULL, NULL) is a successful no-op without the filter.
    add(
        "settimeofday",
        format!("sc({SYS_settimeofday}, 0, 0)"),
        eperm,
    );
    add(
        "clock_adjtime",
        format!("sc({SYS_clock_adjtime}, 0, 0)"),
        eperm,
    );
    add("adjtimex", format!("sc({SYS_adjtimex}, 0)"), eperm);

    // Machine. reboot with a bad magic would be EINVAL, iopl(0) would succeed.
    add("reboot", format!("sc({SYS_reboot}, 0, 0, 0, 0)"), eperm);
    add(
        "swapon",
        format!("sc({SYS_swapon}, S(b'/tmp/x'), 0)"),
        eperm,
    );
    add("swapoff", format!("sc({SYS_swapoff}, S(b'/tmp/x'))"), eperm);
    add("acct", format!("sc({SYS_acct}, 0)"), eperm);
    add("syslog", format!("sc({SYS_syslog}, 10, 0, 0)"), eperm);
    #[cfg(target_arch = "x86_64")]
    {
        add("iopl", format!("sc({SYS_iopl}, 0)"), eperm);
        add("ioperm", format!("sc({SYS_ioperm}, 0x80, 1, 1)"), eperm);
    }
    add(
        "quotactl",
        format!("sc({SYS_quotactl}, 0, S(b'/'), 0, 0)"),
        eperm,
    );
    add("vhangup", format!("sc({SYS_vhangup})"), eperm);
    add(
        "fanotify_init",
        format!("sc({SYS_fanotify_init}, 0, 0)"),
        eperm,
    );

    // Terminal injection: fd 0 is a pipe, so without the filter this would be ENOTTY.
    add(
        "ioctl_tiocsti",
        format!("sc({SYS_ioctl}, 0, 0x5412, S(b'x'))"),
        eperm,
    );
    add(
        "ioctl_tiocsti_high_bits",
        format!("sc({SYS_ioctl}, 0, (1 << 32) | 0x5412, S(b'x'))"),
        eperm,
    );
    add(
        "ioctl_tioclinux",
        format!("sc({SYS_ioctl}, 1, 0x541C, S(b'\\x0b'))"),
        eperm,
    );

    // Sockets.
    add(
        "socket_packet",
        format!("sc({SYS_socket}, 17, 3, 0)"),
        eperm,
    );
    add(
        "socket_packet_dgram",
        format!("sc({SYS_socket}, 17, 2, 0)"),
        eperm,
    );
    add(
        "socket_raw_icmp",
        format!("sc({SYS_socket}, 2, 3, 1)"),
        eperm,
    );
    add(
        "socket_raw_flags",
        format!("sc({SYS_socket}, 2, 3 | 0o4000 | 0o2000000, 255)"),
        eperm,
    );
    add("socket_raw6", format!("sc({SYS_socket}, 10, 3, 58)"), eperm);
    add(
        "socket_sock_packet",
        format!("sc({SYS_socket}, 2, 10, 0)"),
        eperm,
    );
    add("socket_vsock", format!("sc({SYS_socket}, 40, 1, 0)"), eperm);
    add("socket_alg", format!("sc({SYS_socket}, 38, 5, 0)"), eperm);
    add(
        "socketpair_packet",
        format!("sc({SYS_socketpair}, 17, 3, 0, BUF(8))"),
        eperm,
    );

    // x32 numbers (the x32 ABI's getpid, unshare, mount and its own rt_sigaction).
    #[cfg(target_arch = "x86_64")]
    for (n, nr) in [
        ("x32_getpid", SYS_getpid),
        ("x32_unshare", SYS_unshare),
        ("x32_mount", SYS_mount),
        ("x32_rt_sigaction", 512),
    ] {
        add(n, format!("sc(0x40000000 | {nr})"), eperm);
    }

    // personality: only the ordinary values.
    add(
        "personality_read_implies_exec",
        format!("sc({SYS_personality}, 0x0400000)"),
        eperm,
    );
    add(
        "personality_addr_no_randomize",
        format!("sc({SYS_personality}, 0x0040000)"),
        eperm,
    );
    add(
        "personality_mmap_page_zero",
        format!("sc({SYS_personality}, 0x0100000)"),
        eperm,
    );

    // Privilege (not the filter): uid/gid 0 do not exist in the sandbox's user namespace, and
    // setgroups is denied in it for good.
    add("setuid0", format!("sc({SYS_setuid}, 0)"), EINVAL);
    add("setgid0", format!("sc({SYS_setgid}, 0)"), EINVAL);
    add(
        "setresuid0",
        format!("sc({SYS_setresuid}, 0, 0, 0)"),
        EINVAL,
    );
    add("setgroups", format!("sc({SYS_setgroups}, 0, 0)"), eperm);

    // Controls: the filter is argument-precise, ordinary calls work.
    add("ok_getpid", format!("sc({SYS_getpid})"), 0);
    add(
        "ok_personality_query",
        format!("sc({SYS_personality}, 0xffffffff)"),
        0,
    );
    add(
        "ok_personality_linux",
        format!("sc({SYS_personality}, 0)"),
        0,
    );
    add("ok_socket_tcp", format!("sc({SYS_socket}, 2, 1, 0)"), 0);
    add("ok_socket_udp", format!("sc({SYS_socket}, 2, 2, 0)"), 0);
    add("ok_socket_tcp6", format!("sc({SYS_socket}, 10, 1, 0)"), 0);
    add("ok_socket_unix", format!("sc({SYS_socket}, 1, 1, 0)"), 0);
    add(
        "ok_socketpair_unix",
        format!("sc({SYS_socketpair}, 1, 1, 0, BUF(8))"),
        0,
    );
    add(
        "ok_ioctl_fionread",
        format!("sc({SYS_ioctl}, 0, 0x541B, BUF(8))"),
        0,
    );
    add("ok_clone_plain", format!("clone_({SIGCHLD})"), 0);
    add(
        "ok_fork",
        "t(lambda: os.waitpid(fork_(), 0))".to_string(),
        0,
    );
    add("ok_uname", "t(os.uname)".to_string(), 0);
    add(
        "ok_prctl_name",
        format!("sc({SYS_prctl}, {PR_SET_NAME}, S(b'cordon-test'))"),
        0,
    );
    rows
}

#[test]
fn refused_syscalls_fail_with_their_errno_and_ordinary_ones_work() {
    let rows = table();
    let mut script = format!(
        r#"
def sc_raw(nr, *a):
    return libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
def clone_(flags):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long({clone}), ctypes.c_long(flags), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if r == 0:
        os._exit(0)  # the child of a clone that should not have happened
    if r == -1:
        return ctypes.get_errno()
    os.waitpid(r, 0)
    return "ok"
def fork_():
    p = os.fork()
    if p == 0:
        os._exit(0)
    return p
"#,
        clone = libc::SYS_clone
    );
    for (name, expr, _) in &rows {
        script.push_str(&format!("R[{name:?}] = {expr}\n"));
    }
    script.push_str(
        r#"
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
R["status"] = {k: st[k].strip() for k in ("Seccomp", "Seccomp_filters", "NoNewPrivs", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
out()
"#,
    );
    let o = py(&[], &script);
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    let table: Vec<(&str, i32)> = rows.iter().map(|(n, _, w)| (n.as_str(), *w)).collect();
    expect_table(&o, &d, &table);
    let st = &d["status"];
    assert_eq!(st["Seccomp"], "2", "{o}");
    assert_eq!(st["NoNewPrivs"], "1", "{o}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(st[cap], "0000000000000000", "{cap}:\n{o}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_numbers_are_refused_even_where_the_host_would_answer_enosys() {
    // Control on the host: what the kernel itself says to an x32 getpid (usually ENOSYS when
    // the x32 ABI is off). Inside, the filter must answer EPERM regardless.
    // (Asked through the host's python: a raw syscall is `unsafe` in Rust, which the suite
    // does not use.)
    let out = std::process::Command::new(HOST_PYTHON)
        .args([
            "-c",
            &format!(
                "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                 libc.syscall.restype = ctypes.c_long\n\
                 r = libc.syscall(ctypes.c_long({}))\nprint(r, ctypes.get_errno())",
                0x4000_0000 | libc::SYS_getpid
            ),
        ])
        .output()
        .expect("host python");
    let printed = String::from_utf8_lossy(&out.stdout);
    let mut words = printed.split_whitespace().map(|w| w.parse::<i64>().ok());
    let (host, host_errno) = match (words.next().flatten(), words.next().flatten()) {
        (Some(r), Some(e)) => (r, i32::try_from(e).ok()),
        _ => panic!(
            "host control failed: {printed} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    let o = py(&[], "R['x32'] = sc(0x40000000 | 39); out()");
    o.assert_ok();
    expect_table(&o, &o.data(), &[("x32", libc::EPERM)]);
    if host == -1 {
        assert_ne!(host_errno, Some(libc::EPERM), "control is not informative");
    }
}

/// `mov eax, 20 (i386 getpid); int 0x80; ret`, run from an executable page.
#[cfg(target_arch = "x86_64")]
const I386_PAYLOAD: &str = r#"
import ctypes, mmap, sys
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")
f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("before", flush=True)
print("returned", f(), flush=True)
"#;

#[cfg(target_arch = "x86_64")]
#[test]
fn i386_int80_entry_is_killed_with_sigsys() {
    // Control: on the host the same code runs and returns the pid (the payload is real).
    let host = Cmd::new(HOST_PYTHON).args(["-c", I386_PAYLOAD]).run();
    assert_eq!(host.code, Some(0), "control failed: {host:?}");
    assert!(host.stdout.contains("returned"), "control: {host:?}");

    let o = run_json(&["--", "python3", "-c", I386_PAYLOAD]);
    assert_eq!(o.status(), "signaled", "{o}");
    assert_eq!(o.signal(), Some(i64::from(libc::SIGSYS)), "{o}");
    assert!(o.stdout().contains("before"), "{o}");
    assert!(!o.stdout().contains("returned"), "{o}");

    // Without --json, the exit code is 128 + SIGSYS.
    let f = Cmd::cordon()
        .args(["run", "--", "python3", "-c", I386_PAYLOAD])
        .run();
    assert_eq!(f.code, Some(128 + libc::SIGSYS), "{f:?}");
}

#[test]
fn setuid_binaries_gain_nothing() {
    // no_new_privs and nosuid binds: a setuid-root binary runs as the caller.
    let bin = "/usr/bin/mount";
    let is_setuid = std::fs::metadata(bin)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o4000 != 0)
        .unwrap_or(false);
    if !is_setuid {
        eprintln!("{bin} is not setuid on this host; skipping");
        return;
    }
    let o = py(
        &[],
        &format!(
            r#"
import subprocess
open("/workspace/keep", "w").write("x")
R["nosuid"] = bool(os.statvfs({bin:?}).f_flag & os.ST_NOSUID)
p = subprocess.run([{bin:?}, "-t", "tmpfs", "none", "/workspace"], capture_output=True, text=True)
R["rc"] = p.returncode
R["stderr"] = p.stderr
R["still_there"] = os.path.exists("/workspace/keep")
out()
"#
        ),
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(
        d["nosuid"], true,
        "system binaries are not mounted nosuid:\n{o}"
    );
    assert_ne!(d["rc"], 0, "setuid mount succeeded:\n{o}");
    assert_eq!(d["still_there"], true, "{o}");
}
