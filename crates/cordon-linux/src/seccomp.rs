//! The seccomp filter: a deny-list of the syscalls a sandboxed program has no business making.
//!
//! Built with `seccompiler` (Firecracker's BPF compiler). Two details it does not cover are
//! added by hand here, each a few BPF instructions:
//! - x32 syscall numbers (`nr | 0x40000000`) share the x86_64 audit arch, so a deny-list keyed
//!   on syscall numbers alone would let them through; they are refused before any rule runs.
//! - `clone3` passes its flags in memory BPF cannot read; it gets `ENOSYS` so libc falls back
//!   to `clone`, whose flags the filter inspects. (seccompiler has one match action per filter,
//!   so this is part of the same hand-written prologue rather than a second filter.)

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

/// Syscalls refused outright with `EPERM`.
pub const DENIED: &[(&str, i64)] = &[
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("process_madvise", libc::SYS_process_madvise),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("vhangup", libc::SYS_vhangup),
    ("uselib", libc::SYS_uselib),
    ("syslog", libc::SYS_syslog),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("_sysctl", libc::SYS__sysctl),
];

/// `clone` flags that create namespaces.
const CLONE_NEW_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

/// Terminal injection ioctls.
pub const TIOCSTI: u64 = 0x5412;
pub const TIOCLINUX: u64 = 0x541C;

/// Socket families with no use inside a sandbox and a history of kernel bugs.
const DENIED_FAMILIES: &[u64] = &[
    libc::AF_PACKET as u64,
    libc::AF_VSOCK as u64,
    libc::AF_KEY as u64,
    libc::AF_BLUETOOTH as u64,
    libc::AF_CAN as u64,
    libc::AF_TIPC as u64,
    libc::AF_ALG as u64,
    libc::AF_NFC as u64,
    libc::AF_XDP as u64,
];

/// `personality` values ordinary programs use (Docker allows the same).
const PERSONALITY_OK: &[u64] = &[0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("building the seccomp filter: {0}")]
    Build(#[from] seccompiler::BackendError),
    #[error("building the seccomp filter: {0}")]
    Compile(#[from] seccompiler::Error),
    #[error("this architecture is not supported by cordon's seccomp filter")]
    Arch,
}

fn arch() -> Result<TargetArch, SeccompError> {
    std::env::consts::ARCH
        .try_into()
        .map_err(|_| SeccompError::Arch)
}

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, SeccompError> {
    Ok(SeccompRule::new(conds)?)
}

/// The main filter: `EPERM` for denied syscalls and dangerous argument combinations.
pub fn main_filter() -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in DENIED {
        rules.insert(*nr, Vec::new());
    }
    let clone_rules = CLONE_NEW_FLAGS
        .iter()
        .map(|f| rule(vec![Cond::new(0, Len::Qword, Op::MaskedEq(*f), *f)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCSTI)?])?,
            rule(vec![Cond::new(1, Len::Dword, Op::Eq, TIOCLINUX)?])?,
        ],
    );
    let mut socket_rules = DENIED_FAMILIES
        .iter()
        .map(|f| rule(vec![Cond::new(0, Len::Dword, Op::Eq, *f)?]))
        .collect::<Result<Vec<_>, _>>()?;
    // SOCK_RAW / SOCK_PACKET in the type's low bits, whatever flags ride along — except for
    // netlink, whose ordinary sockets are raw (ip(8), if_nameindex) and which, in a network
    // namespace holding only loopback and without capabilities, exposes nothing of the host.
    for raw_type in [
        libc::SOCK_RAW as u64,
        10, /* SOCK_PACKET, obsolete but accepted */
    ] {
        socket_rules.push(rule(vec![
            Cond::new(0, Len::Dword, Op::Ne, libc::AF_NETLINK as u64)?,
            Cond::new(1, Len::Dword, Op::MaskedEq(0xf), raw_type)?,
        ])?);
    }
    rules.insert(libc::SYS_socket, socket_rules.clone());
    rules.insert(libc::SYS_socketpair, socket_rules);
    let personality = PERSONALITY_OK
        .iter()
        .map(|v| Cond::new(0, Len::Dword, Op::Ne, *v))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_personality, vec![rule(personality)?]);

    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )?;
    let mut program: BpfProgram = filter.try_into()?;
    insert_guards(&mut program);
    Ok(program)
}

/// BPF_LD | BPF_W | BPF_ABS (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_RET_K: u16 = 0x06;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Inserts "if nr >= X32_SYSCALL_BIT return EPERM; if nr == clone3 return ENOSYS" right after
/// seccompiler's 3-instruction architecture check. Every jump in the program is relative and
/// forward, and none crosses the insertion point except the arch check's own "skip the kill"
/// jump, which now lands on the guard's first instruction — exactly where it should.
fn insert_guards(program: &mut BpfProgram) {
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 1,
        k,
    };
    let guard = [
        stmt(BPF_LD_W_ABS, 0),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ];
    let at = 3.min(program.len());
    program.splice(at..at, guard);
}

/// Installs the filter on the calling thread. Requires `no_new_privs` (or CAP_SYS_ADMIN).
pub fn install() -> Result<(), SeccompError> {
    seccompiler::apply_filter(&main_filter()?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_start_with_the_guards() {
        let p = main_filter().unwrap();
        // arch load, arch compare, kill, then our x32 guard.
        assert_eq!(p[3].code, BPF_LD_W_ABS);
        assert_eq!(p[4].k, X32_SYSCALL_BIT);
        assert_eq!(p[5].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(p[6].k, libc::SYS_clone3 as u32);
        assert_eq!(p[7].k, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert!(p.len() < 4096);
    }
}
