//! The seccomp filter: a deny-list of the syscalls a sandboxed program has no business making.
//!
//! Built with `seccompiler` (Firecracker's BPF compiler). Two details it does not cover are
//! added by hand here, each a few BPF instructions:
//! - x32 syscall numbers (`nr | 0x40000000`) share the x86_64 audit arch, so a deny-list keyed
//!   on syscall numbers alone would let them through; they are refused before any rule runs.
//! - `clone3` passes its flags in memory BPF cannot read; it gets `ENOSYS` so libc falls back
//!   to `clone`, whose flags the filter inspects. `openat2` likewise (its mode, which the filter
//!   checks for set-id bits in `open`/`openat`, is in memory too). (seccompiler has one match
//!   action per filter, so this is part of the same hand-written prologue, not a second filter.)
//! - seccompiler's dispatch walks ~140 instructions on average before it lets an allowed
//!   syscall through. When a filter is attached the kernel runs it for every syscall number to
//!   fill its allow-cache, so that walk cost ~0.2 ms of every sandbox start (65k emulated
//!   instructions). A binary search over the numbers that have rules answers "allow" within
//!   ~20 instructions (11k in all) and sends only the ruled numbers into seccompiler's code.

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

/// O_TMPFILE without the O_DIRECTORY bit it is defined with (__O_TMPFILE).
const O_TMPFILE_BIT: u64 = 0o20_000_000;

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
    #[error("building the seccomp filter: a jump of the syscall search is out of range")]
    JumpRange,
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
    let (mut program, ruled) = rule_chain()?;
    insert_prologue(&mut program, &ruled)?;
    Ok(program)
}

/// seccompiler's program (architecture check, then one test per rule in turn) and the
/// syscall numbers that have rules.
fn rule_chain() -> Result<(BpfProgram, Vec<u32>), SeccompError> {
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
    // No setuid/setgid files: a --workspace is a host directory, and a set-id file planted
    // there (owned by the workspace's owner — root, for an idmapped one) would hand that
    // owner's privileges to whoever on the host runs it.
    let set_id = |mode_arg: u8, creating: Option<(u8, u64)>| {
        [libc::S_ISUID as u64, libc::S_ISGID as u64]
            .into_iter()
            .map(|bit| {
                let mut conds = vec![Cond::new(mode_arg, Len::Dword, Op::MaskedEq(bit), bit)?];
                if let Some((flags_arg, flag)) = creating {
                    conds.push(Cond::new(flags_arg, Len::Dword, Op::MaskedEq(flag), flag)?);
                }
                rule(conds)
            })
            .collect::<Result<Vec<_>, SeccompError>>()
    };
    for (nr, mode_arg) in [
        (libc::SYS_chmod, 1),
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
        (libc::SYS_mknodat, 2),
    ] {
        rules.insert(nr, set_id(mode_arg, None)?);
    }
    // open/openat take a mode only when creating (O_CREAT, or O_TMPFILE's own bit).
    for (nr, flags_arg, mode_arg) in [(libc::SYS_open, 1, 2), (libc::SYS_openat, 2, 3)] {
        let mut r = set_id(mode_arg, Some((flags_arg, libc::O_CREAT as u64)))?;
        r.extend(set_id(mode_arg, Some((flags_arg, O_TMPFILE_BIT)))?);
        rules.insert(nr, r);
    }

    let ruled: Vec<u32> = rules.keys().map(|nr| *nr as u32).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )?;
    Ok((filter.try_into()?, ruled))
}

/// BPF_LD | BPF_W | BPF_ABS (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_RET_K: u16 = 0x06;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// At most this many numbers are tested one by one at a leaf of the search.
const LEAF: usize = 4;

/// A jump target while the prologue is assembled.
#[derive(Clone, Copy)]
enum Target {
    Next,
    At(usize),
    /// Into seccompiler's rule chain, which follows the prologue.
    Rules,
}

struct Insn {
    code: u16,
    k: u32,
    jt: Target,
    jf: Target,
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        k,
        jt: Target::Next,
        jf: Target::Next,
    }
}

/// Emits a search for the syscall number (in A) among `sorted`: a match continues into the
/// rule chain, anything else is allowed on the spot.
fn search(sorted: &[u32], out: &mut Vec<Insn>) {
    if sorted.len() <= LEAF {
        for nr in sorted {
            out.push(Insn {
                code: BPF_JMP_JEQ_K,
                k: *nr,
                jt: Target::Rules,
                jf: Target::Next,
            });
        }
        out.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
        return;
    }
    let mid = sorted.len() / 2;
    let branch = out.len();
    out.push(Insn {
        code: BPF_JMP_JGE_K,
        k: sorted[mid],
        jt: Target::Next,
        jf: Target::Next,
    });
    search(&sorted[mid..], out);
    out[branch].jf = Target::At(out.len());
    search(&sorted[..mid], out);
}

/// Inserts, right after seccompiler's 3-instruction architecture check:
/// "if nr >= X32_SYSCALL_BIT return EPERM; if nr is clone3 or openat2 return ENOSYS; if nr has no rule
/// return ALLOW" (the last as a binary search over `ruled`). Every jump in seccompiler's
/// program is relative and forward, and none crosses the insertion point except the arch
/// check's own "skip the kill" jump, which now lands on the prologue's first instruction —
/// exactly where it should.
fn insert_prologue(program: &mut BpfProgram, ruled: &[u32]) -> Result<(), SeccompError> {
    let mut sorted = ruled.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut asm = vec![
        stmt(BPF_LD_W_ABS, 0),
        Insn {
            code: BPF_JMP_JGE_K,
            k: X32_SYSCALL_BIT,
            jt: Target::Next,
            jf: Target::At(3),
        },
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    // Syscalls whose arguments live in memory BPF cannot read: "not implemented", so libc
    // falls back to the inspectable variant.
    for nr in [libc::SYS_clone3, libc::SYS_openat2] {
        let skip = asm.len() + 2;
        asm.push(Insn {
            code: BPF_JMP_JEQ_K,
            k: nr as u32,
            jt: Target::Next,
            jf: Target::At(skip),
        });
        asm.push(stmt(
            BPF_RET_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ));
    }
    search(&sorted, &mut asm);
    let rules_at = asm.len();
    // Jumps are forward only; the prologue is a few dozen instructions, well within the 8-bit
    // jump range.
    let resolve = |from: usize, t: Target| -> Result<u8, SeccompError> {
        let to = match t {
            Target::Next => from + 1,
            Target::At(i) => i,
            Target::Rules => rules_at,
        };
        to.checked_sub(from + 1)
            .and_then(|d| u8::try_from(d).ok())
            .ok_or(SeccompError::JumpRange)
    };
    let prologue = asm
        .iter()
        .enumerate()
        .map(|(i, insn)| {
            Ok(sock_filter {
                code: insn.code,
                jt: resolve(i, insn.jt)?,
                jf: resolve(i, insn.jf)?,
                k: insn.k,
            })
        })
        .collect::<Result<Vec<_>, SeccompError>>()?;
    let at = 3.min(program.len());
    program.splice(at..at, prologue);
    Ok(())
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

    /// A classic-BPF interpreter for the instructions seccompiler and the prologue emit, over
    /// `struct seccomp_data` (nr, arch, ip, args).
    fn run(program: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&nr.to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
        loop {
            steps += 1;
            assert!(steps < 10_000, "filter does not terminate");
            let i = &program[pc];
            let jump = |cond: bool| pc + 1 + usize::from(if cond { i.jt } else { i.jf });
            pc = match i.code {
                0x20 => {
                    let o = i.k as usize;
                    a = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                    pc + 1
                }
                0x54 => {
                    a &= i.k;
                    pc + 1
                }
                0x05 => pc + 1 + i.k as usize,
                0x15 => jump(a == i.k),
                0x25 => jump(a > i.k),
                0x35 => jump(a >= i.k),
                0x45 => jump(a & i.k != 0),
                0x06 => return i.k,
                other => panic!("instruction {other:#x} not understood by the test interpreter"),
            };
        }
    }

    /// The prologue must not change a single verdict: for every syscall number (and the x32
    /// and out-of-range ones) and a spread of arguments, the filter answers exactly what the
    /// x32/clone3 guards followed by seccompiler's plain rule chain answer.
    #[test]
    fn the_syscall_search_changes_no_verdict() {
        let full = main_filter().unwrap();
        let (chain, _) = rule_chain().unwrap();
        let arch = full[1].k;
        let mut arg_sets: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
        for f in CLONE_NEW_FLAGS {
            arg_sets.push([*f | libc::SIGCHLD as u64, 0, 0, 0, 0, 0]);
        }
        for fam in DENIED_FAMILIES {
            arg_sets.push([*fam, libc::SOCK_STREAM as u64, 0, 0, 0, 0]);
        }
        arg_sets.push([libc::AF_INET as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0]);
        arg_sets.push([libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0]);
        arg_sets.push([0, TIOCSTI, 0, 0, 0, 0]);
        arg_sets.push([0, TIOCLINUX, 0, 0, 0, 0]);
        arg_sets.push([0x0008, 0, 0, 0, 0, 0]);
        // Set-id modes, with and without O_CREAT / O_TMPFILE in every argument position.
        for mode in [0o4755u64, 0o2755, 0o755] {
            for flags in [
                0u64,
                libc::O_CREAT as u64,
                O_TMPFILE_BIT | libc::O_RDWR as u64,
            ] {
                arg_sets.push([mode, mode, mode, mode, 0, 0]);
                arg_sets.push([0, flags, mode, 0, 0, 0]);
                arg_sets.push([0, 0, flags, mode, 0, 0]);
            }
        }
        let numbers = (0u32..1024).chain([
            X32_SYSCALL_BIT,
            X32_SYSCALL_BIT | libc::SYS_mount as u32,
            u32::MAX,
        ]);
        let mut checked = 0;
        for nr in numbers {
            for args in &arg_sets {
                let expected = if nr >= X32_SYSCALL_BIT {
                    libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
                } else if nr == libc::SYS_clone3 as u32 || nr == libc::SYS_openat2 as u32 {
                    libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
                } else {
                    run(&chain, nr, arch, *args)
                };
                assert_eq!(
                    run(&full, nr, arch, *args),
                    expected,
                    "nr {nr} args {args:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 20_000);
        // And the point of it: an allowed syscall is decided within a handful of instructions.
        let mut longest = 0;
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mmap,
            libc::SYS_futex,
        ] {
            longest = longest.max(steps_to_verdict(&full, nr as u32, arch));
        }
        assert!(
            longest <= 16,
            "allowed syscalls take {longest} instructions"
        );
        // A denied one still reaches its rule.
        assert_eq!(
            run(&full, libc::SYS_bpf as u32, arch, [0; 6]),
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
        );
    }

    fn steps_to_verdict(program: &[sock_filter], nr: u32, arch: u32) -> usize {
        let mut pc = 0;
        let mut steps = 0;
        let mut a = 0u32;
        loop {
            steps += 1;
            let i = &program[pc];
            let jump = |cond: bool| pc + 1 + usize::from(if cond { i.jt } else { i.jf });
            pc = match i.code {
                0x20 => {
                    a = if i.k == 0 { nr } else { arch };
                    pc + 1
                }
                0x15 => jump(a == i.k),
                0x35 => jump(a >= i.k),
                0x06 => return steps,
                _ => return usize::MAX,
            };
        }
    }
}
