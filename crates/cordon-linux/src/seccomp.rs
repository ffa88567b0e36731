//! The seccomp filter: a deny-list of the syscalls a sandboxed program has no business making,
//! and checks on the arguments of a few others.
//!
//! Details a plain deny-list misses, handled here:
//! - The numbers and the architecture check come from the target ([`arch`]): x86_64 and
//!   aarch64 number their syscalls differently, and aarch64 has none of the legacy calls
//!   (`open`, `creat`, `chmod`, `mknod`, `iopl`…) whose `*at` forms the filter checks instead.
//!   A syscall made under another architecture's numbering (i386's `int 0x80`, AArch32) kills
//!   the process: its numbers would mean other calls.
//! - On x86_64, x32 syscall numbers (`nr | 0x40000000`) share the x86_64 audit arch, so a
//!   deny-list keyed on syscall numbers alone would let them through; they are refused before
//!   any rule runs.
//! - `clone3` passes its flags in memory BPF cannot read; it gets `ENOSYS` so libc falls back
//!   to `clone`, whose flags the filter inspects. `openat2` likewise (its mode, which the filter
//!   checks for set-id bits in `open`/`openat`, is in memory too).
//! - Speed: when a filter is attached the kernel checks and JIT-compiles it and runs it once for
//!   every syscall number to fill its allow-cache, all on the path of every sandbox start; and
//!   it runs for every syscall the sandboxed program makes that the cache does not answer.
//!   Hence a compact program, assembled here (see [`main_filter`]).

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram};

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
    ("syslog", libc::SYS_syslog),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("fanotify_init", libc::SYS_fanotify_init),
];

/// What differs between the architectures cordon builds for: the audit arch the kernel reports
/// in `seccomp_data.arch`, whether x32 numbers must be refused, and the syscalls that exist on
/// one architecture only (aarch64 has only the `*at` forms, which the common tables cover).
#[cfg(target_arch = "x86_64")]
pub mod arch {
    /// `AUDIT_ARCH_X86_64` (`EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
    pub const AUDIT_ARCH: u32 = 0xC000_003E;
    /// x32 numbers (`nr | 0x40000000`) arrive under `AUDIT_ARCH_X86_64`.
    pub const X32: bool = true;
    /// Denied syscalls of the legacy x86_64 table.
    pub const DENIED: &[(&str, i64)] = &[
        ("uselib", libc::SYS_uselib),
        ("iopl", libc::SYS_iopl),
        ("ioperm", libc::SYS_ioperm),
        ("_sysctl", libc::SYS__sysctl),
    ];
    pub const SYS_FCHMODAT2: i64 = libc::SYS_fchmodat2;
    /// Legacy calls that set a mode, and which argument holds it.
    pub const SET_ID_MODE_ARG: &[(&str, i64, u32)] = &[
        ("chmod", libc::SYS_chmod, 1),
        ("creat", libc::SYS_creat, 1),
        ("mknod", libc::SYS_mknod, 1),
    ];
    /// Legacy calls that set a mode when creating: (name, number, flags argument, mode
    /// argument).
    pub const SET_ID_CREATE_ARGS: &[(&str, i64, u32, u32)] = &[("open", libc::SYS_open, 1, 2)];
}

/// aarch64: the asm-generic table, without the legacy calls x86_64 keeps.
#[cfg(target_arch = "aarch64")]
pub mod arch {
    /// `AUDIT_ARCH_AARCH64` (`EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
    pub const AUDIT_ARCH: u32 = 0xC000_00B7;
    pub const X32: bool = false;
    pub const DENIED: &[(&str, i64)] = &[];
    /// Numbers from 424 on are the same on every architecture; libc 0.2 names this one only
    /// for some targets.
    pub const SYS_FCHMODAT2: i64 = 452;
    pub const SET_ID_MODE_ARG: &[(&str, i64, u32)] = &[];
    pub const SET_ID_CREATE_ARGS: &[(&str, i64, u32, u32)] = &[];
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "cordon's seccomp filter names the syscalls of x86_64 and aarch64 only: add this \
     architecture's audit arch and legacy calls to `seccomp::arch`"
);

/// `clone` flags that create namespaces.
const CLONE_NEW_FLAGS: &[u32] = &[
    libc::CLONE_NEWUSER as u32,
    libc::CLONE_NEWNS as u32,
    libc::CLONE_NEWPID as u32,
    libc::CLONE_NEWNET as u32,
    libc::CLONE_NEWIPC as u32,
    libc::CLONE_NEWUTS as u32,
    libc::CLONE_NEWCGROUP as u32,
    0x80, // CLONE_NEWTIME
];

/// Terminal injection ioctls.
pub const TIOCSTI: u32 = 0x5412;
pub const TIOCLINUX: u32 = 0x541C;

/// Socket families with no use inside a sandbox and a history of kernel bugs.
const DENIED_FAMILIES: &[u32] = &[
    libc::AF_PACKET as u32,
    libc::AF_VSOCK as u32,
    libc::AF_KEY as u32,
    libc::AF_BLUETOOTH as u32,
    libc::AF_CAN as u32,
    libc::AF_TIPC as u32,
    libc::AF_ALG as u32,
    libc::AF_NFC as u32,
    libc::AF_XDP as u32,
];

/// O_TMPFILE without the O_DIRECTORY bit it is defined with (__O_TMPFILE).
const O_TMPFILE_BIT: u32 = 0o20_000_000;

/// `personality` values ordinary programs use (Docker allows the same).
const PERSONALITY_OK: &[u32] = &[0, 0x0008, 0x20000, 0x20008, 0xffff_ffff];

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("installing the seccomp filter: {0}")]
    Install(#[from] seccompiler::Error),
    #[error("building the seccomp filter: jump {from} -> {to} is out of range")]
    JumpRange { from: usize, to: usize },
}

/// Offsets into `struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian). Every check here is on the low word:
/// the kernel truncates these arguments to `int`/`unsigned int`/`umode_t` before use.
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_JMP_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// At most this many numbers are tested one by one at a leaf of the search.
const LEAF: usize = 4;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

/// What the filter does with a syscall number that is not simply allowed.
#[derive(Clone, Copy, Debug)]
enum Rule {
    Deny,
    /// Refused or not depending on the arguments (or answered "not implemented").
    Check(Check),
}

#[derive(Clone, Copy, Debug)]
enum Check {
    /// Arguments in memory BPF cannot read (`clone3`, `openat2`): "not implemented", so libc
    /// falls back to the inspectable variant.
    NotImplemented,
    /// `clone` with any namespace flag.
    CloneNewFlags,
    /// `ioctl` TIOCSTI / TIOCLINUX.
    TerminalInjection,
    /// `socket`/`socketpair` with a denied family, or a raw/packet type outside netlink.
    SocketKind,
    /// `personality` other than the values ordinary programs use.
    Personality,
    /// Set-id bits in the mode argument.
    SetIdMode { mode: u32 },
    /// Set-id bits in the mode of a creating `open` (O_CREAT, or O_TMPFILE's own bit).
    SetIdCreate { flags: u32, mode: u32 },
}

fn rules() -> BTreeMap<u32, Rule> {
    let mut rules = BTreeMap::new();
    let mut add = |nr: i64, rule| {
        // Syscall numbers are small non-negative constants.
        rules.insert(nr as u32, rule);
    };
    for (_, nr) in denied() {
        add(nr, Rule::Deny);
    }
    let mut check = |nr: i64, c| add(nr, Rule::Check(c));
    for (_, nr, c) in CHECKED {
        check(*nr, *c);
    }
    for (nr, mode) in set_id_mode_arg() {
        check(nr, Check::SetIdMode { mode });
    }
    for (nr, flags, mode) in set_id_create_args() {
        check(nr, Check::SetIdCreate { flags, mode });
    }
    rules
}

/// Every syscall refused outright on this architecture: the common ones and its own.
pub fn denied() -> impl Iterator<Item = (&'static str, i64)> {
    DENIED.iter().chain(arch::DENIED).copied()
}

// No setuid/setgid files: a --workspace is a host directory, and a set-id file planted there
// (owned by the workspace's owner — root, for an idmapped one) would hand that owner's
// privileges to whoever on the host runs it.
/// Syscalls that set a mode, and which argument holds it (with [`arch::SET_ID_MODE_ARG`]).
const SET_ID_MODE_ARG: &[(&str, i64, u32)] = &[
    ("fchmod", libc::SYS_fchmod, 1),
    ("fchmodat", libc::SYS_fchmodat, 2),
    ("fchmodat2", arch::SYS_FCHMODAT2, 2),
    ("mknodat", libc::SYS_mknodat, 2),
];
/// Syscalls that set a mode only when creating: (name, number, flags argument, mode argument)
/// (with [`arch::SET_ID_CREATE_ARGS`]).
const SET_ID_CREATE_ARGS: &[(&str, i64, u32, u32)] = &[("openat", libc::SYS_openat, 2, 3)];

fn set_id_mode_arg() -> impl Iterator<Item = (i64, u32)> {
    SET_ID_MODE_ARG
        .iter()
        .chain(arch::SET_ID_MODE_ARG)
        .map(|(_, nr, mode)| (*nr, *mode))
}

fn set_id_create_args() -> impl Iterator<Item = (i64, u32, u32)> {
    SET_ID_CREATE_ARGS
        .iter()
        .chain(arch::SET_ID_CREATE_ARGS)
        .map(|(_, nr, flags, mode)| (*nr, *flags, *mode))
}

/// The syscalls the filter checks by their arguments or answers `ENOSYS`, by name.
const CHECKED: &[(&str, i64, Check)] = &[
    ("clone3", libc::SYS_clone3, Check::NotImplemented),
    ("openat2", libc::SYS_openat2, Check::NotImplemented),
    ("clone", libc::SYS_clone, Check::CloneNewFlags),
    ("ioctl", libc::SYS_ioctl, Check::TerminalInjection),
    ("socket", libc::SYS_socket, Check::SocketKind),
    ("socketpair", libc::SYS_socketpair, Check::SocketKind),
    ("personality", libc::SYS_personality, Check::Personality),
];

/// Every syscall the filter has a rule for, by name (what `tests` compares with the kernel's
/// own headers).
pub fn named() -> impl Iterator<Item = (&'static str, i64)> {
    denied()
        .chain(CHECKED.iter().map(|(n, nr, _)| (*n, *nr)))
        .chain(
            SET_ID_MODE_ARG
                .iter()
                .chain(arch::SET_ID_MODE_ARG)
                .map(|(n, nr, _)| (*n, *nr)),
        )
        .chain(
            SET_ID_CREATE_ARGS
                .iter()
                .chain(arch::SET_ID_CREATE_ARGS)
                .map(|(n, nr, _, _)| (*n, *nr)),
        )
}

/// The main filter: `EPERM` for denied syscalls and dangerous argument combinations.
///
/// Assembled here rather than by seccompiler, which the tests keep as the reference: its
/// program (one test per rule, in turn, ~800 instructions) cost ~0.3 ms of every sandbox
/// start in the kernel's filter check and JIT, and walked ~140 instructions before allowing
/// an ordinary syscall. This one is a binary search over the numbers that have rules, each
/// rule's argument checks inline at its leaf (~200 instructions; an allowed syscall is
/// decided in ~15). `tests::same_verdicts_as_seccompiler` holds the two to the same answer
/// for every syscall number over a spread of arguments.
pub fn main_filter() -> Result<BpfProgram, SeccompError> {
    let sorted: Vec<(u32, Rule)> = rules().into_iter().collect();
    let mut asm = Asm::default();
    let arch_ok = asm.label();
    asm.ld(DATA_ARCH);
    asm.jeq(arch::AUDIT_ARCH, Jump::To(arch_ok), Jump::Next);
    asm.ret(RET_KILL);
    asm.bind(arch_ok);
    asm.ld(DATA_NR);
    if arch::X32 {
        // x32 syscall numbers (`nr | 0x40000000`) share the x86_64 audit arch: a filter keyed
        // on numbers alone would let them through.
        let x32 = asm.label();
        asm.jge(X32_SYSCALL_BIT, Jump::To(x32), Jump::Next);
        search(&sorted, &mut asm);
        asm.bind(x32);
        asm.ret(RET_EPERM);
    } else {
        search(&sorted, &mut asm);
    }
    asm.finish()
}

/// Emits a search for the syscall number (in A) among `sorted`: numbers without a rule are
/// allowed at the leaf they reach.
fn search(sorted: &[(u32, Rule)], asm: &mut Asm) {
    if sorted.len() <= LEAF {
        leaf(sorted, asm);
        return;
    }
    let mid = sorted.len() / 2;
    let lower = asm.label();
    asm.jge(sorted[mid].0, Jump::Next, Jump::To(lower));
    search(&sorted[mid..], asm);
    asm.bind(lower);
    search(&sorted[..mid], asm);
}

/// A few numbers tested in turn, each rule's checks right after its number's test, so that
/// every jump stays short. A holds the syscall number on entry.
fn leaf(entries: &[(u32, Rule)], asm: &mut Asm) {
    let deny = asm.label();
    let allow = asm.label();
    for (nr, rule) in entries {
        let check = match *rule {
            Rule::Deny => {
                asm.jeq(*nr, Jump::To(deny), Jump::Next);
                continue;
            }
            Rule::Check(c) => c,
        };
        let other = asm.label();
        asm.jeq(*nr, Jump::Next, Jump::To(other));
        match check {
            Check::NotImplemented => asm.ret(RET_ENOSYS),
            Check::CloneNewFlags => {
                asm.ld(arg_lo(0));
                let any_new = CLONE_NEW_FLAGS.iter().fold(0, |m, f| m | f);
                asm.jset(any_new, Jump::To(deny), Jump::To(allow));
            }
            Check::TerminalInjection => {
                asm.ld(arg_lo(1));
                asm.jeq(TIOCSTI, Jump::To(deny), Jump::Next);
                asm.jeq(TIOCLINUX, Jump::To(deny), Jump::To(allow));
            }
            Check::SocketKind => {
                asm.ld(arg_lo(0));
                for family in DENIED_FAMILIES {
                    asm.jeq(*family, Jump::To(deny), Jump::Next);
                }
                // SOCK_RAW / SOCK_PACKET in the type's low bits, whatever flags ride along —
                // except for netlink, whose ordinary sockets are raw (ip(8), if_nameindex) and
                // which, in a network namespace holding only loopback and without
                // capabilities, exposes nothing of the host.
                asm.jeq(libc::AF_NETLINK as u32, Jump::To(allow), Jump::Next);
                asm.ld(arg_lo(1));
                asm.and(0xf);
                asm.jeq(libc::SOCK_RAW as u32, Jump::To(deny), Jump::Next);
                asm.jeq(SOCK_PACKET, Jump::To(deny), Jump::To(allow));
            }
            Check::Personality => {
                asm.ld(arg_lo(0));
                for ok in PERSONALITY_OK {
                    asm.jeq(*ok, Jump::To(allow), Jump::Next);
                }
                asm.ja(deny);
            }
            Check::SetIdMode { mode } => {
                asm.ld(arg_lo(mode));
                asm.jset(SET_ID_BITS, Jump::To(deny), Jump::To(allow));
            }
            Check::SetIdCreate { flags, mode } => {
                asm.ld(arg_lo(flags));
                asm.jset(
                    libc::O_CREAT as u32 | O_TMPFILE_BIT,
                    Jump::Next,
                    Jump::To(allow),
                );
                asm.ld(arg_lo(mode));
                asm.jset(SET_ID_BITS, Jump::To(deny), Jump::To(allow));
            }
        }
        asm.bind(other);
    }
    asm.bind(allow);
    asm.ret(RET_ALLOW);
    asm.bind(deny);
    asm.ret(RET_EPERM);
}

const SET_ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// Obsolete, still accepted by the kernel.
const SOCK_PACKET: u32 = 10;

#[derive(Clone, Copy)]
enum Jump {
    Next,
    To(usize),
}

struct Insn {
    code: u16,
    k: u32,
    jt: Jump,
    jf: Jump,
}

/// A classic-BPF assembler with forward labels; written by hand because no crate assembles
/// seccomp programs with labels (seccompiler compiles rule lists, not code).
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    /// Where each label was bound.
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.insns.len());
    }

    fn push(&mut self, code: u16, k: u32, jt: Jump, jf: Jump) {
        self.insns.push(Insn { code, k, jt, jf });
    }

    fn ld(&mut self, offset: u32) {
        self.push(BPF_LD_W_ABS, offset, Jump::Next, Jump::Next);
    }

    fn and(&mut self, k: u32) {
        self.push(BPF_ALU_AND_K, k, Jump::Next, Jump::Next);
    }

    fn ret(&mut self, k: u32) {
        self.push(BPF_RET_K, k, Jump::Next, Jump::Next);
    }

    fn ja(&mut self, label: usize) {
        // The offset goes in k; resolved in `finish`.
        self.push(BPF_JMP_JA, 0, Jump::To(label), Jump::Next);
    }

    fn jeq(&mut self, k: u32, jt: Jump, jf: Jump) {
        self.push(BPF_JMP_JEQ_K, k, jt, jf);
    }

    fn jge(&mut self, k: u32, jt: Jump, jf: Jump) {
        self.push(BPF_JMP_JGE_K, k, jt, jf);
    }

    fn jset(&mut self, k: u32, jt: Jump, jf: Jump) {
        self.push(BPF_JMP_JSET_K, k, jt, jf);
    }

    /// Resolves the labels. BPF jumps only forward; conditional ones by at most 255.
    fn finish(self) -> Result<BpfProgram, SeccompError> {
        let offset = |from: usize, jump: Jump| -> Result<usize, SeccompError> {
            let to =
                match jump {
                    Jump::Next => from + 1,
                    Jump::To(label) => self.labels.get(label).copied().flatten().ok_or(
                        SeccompError::JumpRange {
                            from,
                            to: usize::MAX,
                        },
                    )?,
                };
            to.checked_sub(from + 1)
                .ok_or(SeccompError::JumpRange { from, to })
        };
        let short = |from: usize, jump: Jump| -> Result<u8, SeccompError> {
            let d = offset(from, jump)?;
            u8::try_from(d).map_err(|_| SeccompError::JumpRange {
                from,
                to: from + 1 + d,
            })
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                Ok(if insn.code == BPF_JMP_JA {
                    let d = offset(i, insn.jt)?;
                    sock_filter {
                        code: insn.code,
                        jt: 0,
                        jf: 0,
                        k: u32::try_from(d).map_err(|_| SeccompError::JumpRange {
                            from: i,
                            to: i + 1 + d,
                        })?,
                    }
                } else {
                    sock_filter {
                        code: insn.code,
                        jt: short(i, insn.jt)?,
                        jf: short(i, insn.jf)?,
                        k: insn.k,
                    }
                })
            })
            .collect()
    }
}

/// Installs the filter on the calling thread. Requires `no_new_privs` (or CAP_SYS_ADMIN).
pub fn install() -> Result<(), SeccompError> {
    seccompiler::apply_filter(&main_filter()?)?;
    Ok(())
}

/// What a runtime confining itself (see `selfconfine`) never needs on top of [`main_filter`],
/// with no pid or network namespace around it: a socket, an exec, a new process (a `clone`
/// without `CLONE_THREAD`; `clone3` is already answered `ENOSYS`, `fork`/`vfork` are legacy
/// calls libc does not use).
pub fn runtime_filter() -> Result<BpfProgram, SeccompError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_socket,
        libc::SYS_socketpair,
        libc::SYS_execve,
        libc::SYS_execveat,
    ] {
        rules.insert(nr, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    for nr in [libc::SYS_fork, libc::SYS_vfork] {
        rules.insert(nr, Vec::new());
    }
    let no_thread = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
        0,
    )
    .map_err(seccompiler::Error::Backend)?;
    let rule = SeccompRule::new(vec![no_thread]).map_err(seccompiler::Error::Backend)?;
    rules.insert(libc::SYS_clone, vec![rule]);
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccompiler::Error::Backend)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(seccompiler::Error::Backend)?;
    Ok(filter.try_into().map_err(seccompiler::Error::Backend)?)
}

/// Installs [`main_filter`] and [`runtime_filter`] on every thread of the process (TSYNC).
/// Requires `no_new_privs`.
pub fn install_runtime() -> Result<(), SeccompError> {
    seccompiler::apply_filter_all_threads(&main_filter()?)?;
    seccompiler::apply_filter_all_threads(&runtime_filter()?)?;
    Ok(())
}

/// The second filter of a sandbox that has no network namespace (see `init`'s degraded
/// mode), stacked on the main one (the kernel applies both; the stricter answer wins). With
/// no namespace holding only loopback, every socket would reach the host's network and its
/// local daemons, so:
/// - `socket`: `AF_UNIX` stream and seqpacket only (an unconnected datagram socket could
///   `sendto` any host socket by path: syslog, journald, notify sockets); with `tcp`, also
///   `AF_INET`/`AF_INET6` stream sockets of protocol 0 or TCP — Landlock's TCP rules then
///   allow connecting only to the egress proxy's port (UDP, SCTP, MPTCP are outside those
///   rules, hence refused here);
/// - `socketpair`: `AF_UNIX` only (a pair reaches nothing outside);
/// - `connect`: refused without `tcp`: a pathname `AF_UNIX` socket of the host's (an agent's,
///   a session bus, a container daemon's) is reachable by path, and Landlock does not guard
///   connecting to one. With `tcp`, `connect` must stay open for the proxy, and that gap is
///   reported in `enforcement.notes`;
/// - System V IPC and POSIX message queues: without an IPC namespace their objects are the
///   host's (shared memory segments of the same uid's desktop, say).
pub fn no_netns_filter(tcp: bool) -> Result<BpfProgram, SeccompError> {
    let mut asm = Asm::default();
    let allow = asm.label();
    let deny = asm.label();
    let arch_ok = asm.label();
    asm.ld(DATA_ARCH);
    asm.jeq(arch::AUDIT_ARCH, Jump::To(arch_ok), Jump::Next);
    asm.ret(RET_KILL);
    asm.bind(arch_ok);
    asm.ld(DATA_NR);
    let not_socket = asm.label();
    asm.jeq(libc::SYS_socket as u32, Jump::Next, Jump::To(not_socket));
    {
        asm.ld(arg_lo(0));
        let inet = asm.label();
        asm.jeq(libc::AF_UNIX as u32, Jump::Next, Jump::To(inet));
        asm.ld(arg_lo(1));
        asm.and(0xf);
        asm.jeq(libc::SOCK_STREAM as u32, Jump::To(allow), Jump::Next);
        asm.jeq(libc::SOCK_SEQPACKET as u32, Jump::To(allow), Jump::To(deny));
        asm.bind(inet);
        if tcp {
            let stream = asm.label();
            asm.jeq(libc::AF_INET as u32, Jump::To(stream), Jump::Next);
            asm.jeq(libc::AF_INET6 as u32, Jump::To(stream), Jump::To(deny));
            asm.bind(stream);
            asm.ld(arg_lo(1));
            asm.and(0xf);
            asm.jeq(libc::SOCK_STREAM as u32, Jump::Next, Jump::To(deny));
            asm.ld(arg_lo(2));
            asm.jeq(0, Jump::To(allow), Jump::Next);
            asm.jeq(libc::IPPROTO_TCP as u32, Jump::To(allow), Jump::To(deny));
        } else {
            asm.ja(deny);
        }
    }
    asm.bind(not_socket);
    let not_pair = asm.label();
    asm.jeq(libc::SYS_socketpair as u32, Jump::Next, Jump::To(not_pair));
    asm.ld(arg_lo(0));
    asm.jeq(libc::AF_UNIX as u32, Jump::To(allow), Jump::To(deny));
    asm.bind(not_pair);
    for nr in HOST_IPC {
        asm.jeq(*nr as u32, Jump::To(deny), Jump::Next);
    }
    if !tcp {
        asm.jeq(libc::SYS_connect as u32, Jump::To(deny), Jump::Next);
    }
    asm.bind(allow);
    asm.ret(RET_ALLOW);
    asm.bind(deny);
    asm.ret(RET_EPERM);
    asm.finish()
}

/// The third filter of a sandbox with a programs allowlist, stacked on the others:
/// - `memfd_create`: refused. A memfd lives on the kernel's internal tmpfs, which Landlock's
///   rules do not cover (measured: `execve("/proc/self/fd/N")` of one ran under a ruleset
///   that granted execute nowhere) and which is never `noexec`, so the dynamic loader maps
///   one too (`ld.so /proc/self/fd/N`); not even `MFD_NOEXEC_SEAL` stops that mapping.
/// - `execveat` with `AT_EMPTY_PATH`: executing an open descriptor (`fexecve`) rather than a
///   path — a memfd made before, or a file opened and then unlinked or moved: refusing it
///   keeps the allowlist a matter of paths alone.
///
/// Nothing else changes: `execve` and `execveat` with a path are Landlock's to decide.
pub fn exec_allowlist_filter() -> Result<BpfProgram, SeccompError> {
    let mut asm = Asm::default();
    let allow = asm.label();
    let arch_ok = asm.label();
    asm.ld(DATA_ARCH);
    asm.jeq(arch::AUDIT_ARCH, Jump::To(arch_ok), Jump::Next);
    asm.ret(RET_KILL);
    asm.bind(arch_ok);
    asm.ld(DATA_NR);
    let deny = asm.label();
    asm.jeq(libc::SYS_memfd_create as u32, Jump::To(deny), Jump::Next);
    asm.jeq(libc::SYS_execveat as u32, Jump::Next, Jump::To(allow));
    asm.ld(arg_lo(4));
    asm.jset(libc::AT_EMPTY_PATH as u32, Jump::Next, Jump::To(allow));
    asm.bind(deny);
    asm.ret(RET_EPERM);
    asm.bind(allow);
    asm.ret(RET_ALLOW);
    asm.finish()
}

/// Installs [`exec_allowlist_filter`] on the calling thread, after [`install`].
pub fn install_exec_allowlist() -> Result<(), SeccompError> {
    seccompiler::apply_filter(&exec_allowlist_filter()?)?;
    Ok(())
}

/// The IPC syscalls whose objects live in the IPC namespace (refused without one).
const HOST_IPC: &[i64] = &[
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

/// Installs [`no_netns_filter`] on the calling thread, after [`install`].
pub fn install_no_netns(tcp: bool) -> Result<(), SeccompError> {
    seccompiler::apply_filter(&no_netns_filter(tcp)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
        SeccompFilter, SeccompRule, TargetArch,
    };

    type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

    /// The 32-bit architecture the same CPU also runs (i386 beside x86_64, AArch32 beside
    /// aarch64): its numbers mean other syscalls, so the filter must kill it.
    #[cfg(target_arch = "x86_64")]
    const FOREIGN_ARCH: u32 = 0x4000_0003; // AUDIT_ARCH_I386
    #[cfg(target_arch = "aarch64")]
    const FOREIGN_ARCH: u32 = 0x4000_0028; // AUDIT_ARCH_ARM

    fn rule(conds: Vec<Cond>) -> AnyResult<SeccompRule> {
        Ok(SeccompRule::new(conds)?)
    }

    /// The reference: the same policy written as seccompiler rules, compiled by seccompiler
    /// (one test per rule, in turn). Written independently of `rules()`/`leaf()` — from the
    /// constants, not from the `Rule` table — so that a mistake in either shows as a verdict
    /// that differs.
    fn reference() -> AnyResult<BpfProgram> {
        let w = u64::from;
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for (_, nr) in denied() {
            rules.insert(nr, Vec::new());
        }
        let clone_rules = CLONE_NEW_FLAGS
            .iter()
            .map(|f| rule(vec![Cond::new(0, Len::Qword, Op::MaskedEq(w(*f)), w(*f))?]))
            .collect::<AnyResult<Vec<_>>>()?;
        rules.insert(libc::SYS_clone, clone_rules);
        rules.insert(
            libc::SYS_ioctl,
            vec![
                rule(vec![Cond::new(1, Len::Dword, Op::Eq, w(TIOCSTI))?])?,
                rule(vec![Cond::new(1, Len::Dword, Op::Eq, w(TIOCLINUX))?])?,
            ],
        );
        let mut socket_rules = DENIED_FAMILIES
            .iter()
            .map(|f| rule(vec![Cond::new(0, Len::Dword, Op::Eq, w(*f))?]))
            .collect::<AnyResult<Vec<_>>>()?;
        for raw_type in [libc::SOCK_RAW as u64, 10] {
            socket_rules.push(rule(vec![
                Cond::new(0, Len::Dword, Op::Ne, libc::AF_NETLINK as u64)?,
                Cond::new(1, Len::Dword, Op::MaskedEq(0xf), raw_type)?,
            ])?);
        }
        rules.insert(libc::SYS_socket, socket_rules.clone());
        rules.insert(libc::SYS_socketpair, socket_rules);
        let personality = PERSONALITY_OK
            .iter()
            .map(|v| Cond::new(0, Len::Dword, Op::Ne, w(*v)))
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_personality, vec![rule(personality)?]);
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
                .collect::<AnyResult<Vec<_>>>()
        };
        // The argument positions are shared with the filter (fs.rs attacks each syscall
        // through the real kernel, so a wrong position shows there).
        let arg = |i: u32| u8::try_from(i).expect("argument index");
        for (nr, mode_arg) in set_id_mode_arg() {
            rules.insert(nr, set_id(arg(mode_arg), None)?);
        }
        for (nr, flags_arg, mode_arg) in set_id_create_args() {
            let (f, m) = (arg(flags_arg), arg(mode_arg));
            let mut r = set_id(m, Some((f, libc::O_CREAT as u64)))?;
            r.extend(set_id(m, Some((f, w(O_TMPFILE_BIT))))?);
            rules.insert(nr, r);
        }
        let arch: TargetArch = std::env::consts::ARCH.try_into()?;
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )?;
        Ok(filter.try_into()?)
    }

    #[test]
    fn the_filter_is_compact_and_starts_with_the_guards() {
        let p = main_filter().unwrap();
        // Same architecture check as seccompiler's: load arch, compare, kill.
        let r = reference().unwrap();
        for i in 0..3 {
            assert_eq!(
                (p[i].code, p[i].jt, p[i].jf, p[i].k),
                (r[i].code, r[i].jt, r[i].jf, r[i].k)
            );
        }
        assert_eq!((p[3].code, p[3].k), (BPF_LD_W_ABS, DATA_NR));
        assert_eq!(p[1].k, arch::AUDIT_ARCH);
        if arch::X32 {
            assert_eq!((p[4].code, p[4].k), (BPF_JMP_JGE_K, X32_SYSCALL_BIT));
        }
        // The point of assembling it here: a fraction of seccompiler's length.
        assert!(
            p.len() * 3 < r.len(),
            "{} instructions (seccompiler: {})",
            p.len(),
            r.len()
        );
    }

    /// A classic-BPF interpreter for the instructions both programs use, over
    /// `struct seccomp_data` (nr, arch, ip, args). Returns the verdict and the instructions
    /// run to reach it.
    fn run(program: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> (u32, usize) {
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
                0x06 => return (i.k, steps),
                other => panic!("instruction {other:#x} not understood by the test interpreter"),
            };
        }
    }

    /// The filter of a sandbox without namespaces, without and with a network policy: each
    /// socket family and type, `connect`, the IPC calls, and everything else allowed.
    #[test]
    fn exec_allowlist_filter_refuses_memfds_and_executing_a_descriptor() -> AnyResult<()> {
        let prog = exec_allowlist_filter()?;
        let nr = |n: i64| n as u32;
        let empty = libc::AT_EMPTY_PATH as u64;
        let cases = [
            (libc::SYS_execveat, [3, 0, 0, 0, empty, 0], RET_EPERM),
            (
                libc::SYS_execveat,
                [3, 0, 0, 0, empty | libc::AT_SYMLINK_NOFOLLOW as u64, 0],
                RET_EPERM,
            ),
            (libc::SYS_execveat, [3, 0, 0, 0, 0, 0], RET_ALLOW),
            (libc::SYS_execve, [0, 0, 0, 0, empty, 0], RET_ALLOW),
            (libc::SYS_memfd_create, [0, 0, 0, 0, 0, 0], RET_EPERM),
            (libc::SYS_memfd_create, [0, 0x8, 0, 0, 0, 0], RET_EPERM),
            (libc::SYS_openat, [0, 0, 0, 0, empty, 0], RET_ALLOW),
        ];
        for (n, args, want) in cases {
            assert_eq!(
                run(&prog, nr(n), arch::AUDIT_ARCH, args).0,
                want,
                "{n} {args:?}"
            );
        }
        assert_eq!(
            run(&prog, nr(libc::SYS_execveat), FOREIGN_ARCH, [0; 6]).0,
            RET_KILL
        );
        Ok(())
    }

    #[test]
    fn no_netns_filter_verdicts() -> AnyResult<()> {
        let nr = |n: i64| n as u32;
        let sock = |fam: i32, ty: i32, proto: i32| [fam as u64, ty as u64, proto as u64, 0, 0, 0];
        let unix_stream = sock(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        let unix_seq = sock(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
        let unix_dgram = sock(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
        let tcp4 = sock(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
        let tcp6 = sock(libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_TCP);
        let sctp = sock(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP);
        let udp = sock(libc::AF_INET, libc::SOCK_DGRAM, 0);
        let netlink = sock(libc::AF_NETLINK, libc::SOCK_RAW, 0);
        let none = [0u64; 6];
        for tcp in [false, true] {
            let prog = no_netns_filter(tcp)?;
            let tcp_ok = if tcp { RET_ALLOW } else { RET_EPERM };
            let cases = [
                ("unix stream", nr(libc::SYS_socket), unix_stream, RET_ALLOW),
                ("unix seqpacket", nr(libc::SYS_socket), unix_seq, RET_ALLOW),
                ("unix dgram", nr(libc::SYS_socket), unix_dgram, RET_EPERM),
                ("tcp4", nr(libc::SYS_socket), tcp4, tcp_ok),
                ("tcp6", nr(libc::SYS_socket), tcp6, tcp_ok),
                ("sctp", nr(libc::SYS_socket), sctp, RET_EPERM),
                ("udp", nr(libc::SYS_socket), udp, RET_EPERM),
                ("netlink", nr(libc::SYS_socket), netlink, RET_EPERM),
                ("unix pair", nr(libc::SYS_socketpair), unix_dgram, RET_ALLOW),
                ("inet pair", nr(libc::SYS_socketpair), tcp4, RET_EPERM),
                ("connect", nr(libc::SYS_connect), none, tcp_ok),
                ("shmget", nr(libc::SYS_shmget), none, RET_EPERM),
                ("mq_open", nr(libc::SYS_mq_open), none, RET_EPERM),
                ("read", nr(libc::SYS_read), none, RET_ALLOW),
                ("bind", nr(libc::SYS_bind), none, RET_ALLOW),
            ];
            for (what, n, args, want) in cases {
                assert_eq!(
                    run(&prog, n, arch::AUDIT_ARCH, args).0,
                    want,
                    "{what} (tcp: {tcp})"
                );
            }
            assert_eq!(run(&prog, 0, FOREIGN_ARCH, none).0, RET_KILL);
        }
        Ok(())
    }

    /// For every syscall number (and x32 and out-of-range ones), the wrong architecture, and
    /// a spread of arguments — each rule's triggering values, their neighbours, and garbage in
    /// the high words — the filter answers exactly what seccompiler's program answers, with
    /// the x32 and clone3/openat2 guards in front.
    #[test]
    fn same_verdicts_as_seccompiler() {
        let full = main_filter().unwrap();
        let chain = reference().unwrap();
        let arch = full[1].k;
        let hi = |v: u64| v | 0xdead_beef_0000_0000;
        let mut values: Vec<u64> = vec![0, 1, u64::MAX, 0xffff_ffff];
        values.extend(
            CLONE_NEW_FLAGS
                .iter()
                .map(|f| u64::from(*f) | libc::SIGCHLD as u64),
        );
        values.extend(DENIED_FAMILIES.iter().map(|f| u64::from(*f)));
        values.extend([TIOCSTI, TIOCLINUX, TIOCSTI + 1].map(u64::from));
        values.extend(PERSONALITY_OK.iter().map(|v| u64::from(*v)));
        values.extend([libc::AF_INET as u64, libc::AF_NETLINK as u64, 0x0009]);
        let mut arg_sets: Vec<[u64; 6]> = Vec::new();
        for v in &values {
            arg_sets.push([*v; 6]);
            arg_sets.push([hi(*v); 6]);
            arg_sets.push([*v, 0, 0, 0, 0, 0]);
        }
        for fam in [
            libc::AF_INET as u64,
            libc::AF_NETLINK as u64,
            libc::AF_UNIX as u64,
        ] {
            for ty in [
                libc::SOCK_STREAM as u64,
                libc::SOCK_RAW as u64,
                libc::SOCK_RAW as u64 | libc::SOCK_CLOEXEC as u64,
                10,
                0x13,
            ] {
                arg_sets.push([fam, ty, 0, 0, 0, 0]);
                arg_sets.push([hi(fam), hi(ty), 0, 0, 0, 0]);
            }
        }
        arg_sets.push([0, 0, hi(u64::from(TIOCSTI)), 0, 0, 0]);
        // Set-id modes, with and without O_CREAT / O_TMPFILE in every argument position.
        for mode in [0o4755u64, 0o2755, 0o6755, 0o755, 0o1777] {
            for flags in [
                0u64,
                libc::O_CREAT as u64,
                libc::O_CREAT as u64 | libc::O_WRONLY as u64,
                u64::from(O_TMPFILE_BIT) | libc::O_RDWR as u64,
                libc::O_TMPFILE as u64 | libc::O_RDWR as u64,
                libc::O_DIRECTORY as u64,
            ] {
                arg_sets.push([mode, mode, mode, mode, 0, 0]);
                arg_sets.push([0, flags, mode, 0, 0, 0]);
                arg_sets.push([0, 0, flags, mode, 0, 0]);
                arg_sets.push([0, hi(flags), hi(mode), 0, 0, 0]);
                arg_sets.push([0, 0, hi(flags), hi(mode), 0, 0]);
            }
        }
        let numbers = (0u32..1024).chain([
            X32_SYSCALL_BIT,
            X32_SYSCALL_BIT | libc::SYS_mount as u32,
            X32_SYSCALL_BIT | libc::SYS_read as u32,
            0x3fff_ffff,
            u32::MAX,
        ]);
        let mut checked = 0;
        for nr in numbers {
            for a in [arch, FOREIGN_ARCH] {
                for args in &arg_sets {
                    let expected = if a != arch {
                        run(&chain, nr, a, *args).0
                    } else if arch::X32 && nr >= X32_SYSCALL_BIT {
                        RET_EPERM
                    } else if nr == libc::SYS_clone3 as u32 || nr == libc::SYS_openat2 as u32 {
                        RET_ENOSYS
                    } else {
                        run(&chain, nr, a, *args).0
                    };
                    assert_eq!(
                        run(&full, nr, a, *args).0,
                        expected,
                        "nr {nr} arch {a:#x} args {args:x?}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
        // The triggering cases really are refused (the comparison above would also pass if
        // both programs allowed everything).
        let refused = |nr: i64, args: [u64; 6]| run(&full, nr as u32, arch, args).0 == RET_EPERM;
        assert!(refused(libc::SYS_bpf, [0; 6]));
        assert!(refused(
            libc::SYS_clone,
            [
                libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64,
                0,
                0,
                0,
                0,
                0
            ]
        ));
        assert!(!refused(
            libc::SYS_clone,
            [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]
        ));
        assert!(refused(
            libc::SYS_ioctl,
            [0, u64::from(TIOCSTI), 0, 0, 0, 0]
        ));
        assert!(refused(
            libc::SYS_socket,
            [libc::AF_INET as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0]
        ));
        assert!(!refused(
            libc::SYS_socket,
            [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0]
        ));
        assert!(refused(
            libc::SYS_socket,
            [libc::AF_PACKET as u64, 2, 0, 0, 0, 0]
        ));
        assert!(refused(libc::SYS_personality, [0x0040_0000, 0, 0, 0, 0, 0]));
        assert!(refused(
            libc::SYS_openat,
            [0, 0, libc::O_CREAT as u64, 0o4755, 0, 0]
        ));
        assert!(!refused(libc::SYS_openat, [0, 0, 0, 0o4755, 0, 0]));
        assert!(refused(libc::SYS_fchmodat, [0, 0, 0o2755, 0, 0, 0]));
    }

    /// An ordinary syscall is decided within a handful of instructions (the kernel's
    /// allow-cache covers most of them, but not every one, and not during its own fill), and
    /// one with argument checks within a few dozen.
    #[test]
    fn allowed_syscalls_are_decided_quickly() {
        let full = main_filter().unwrap();
        let arch = full[1].k;
        let ruled = rules();
        let (mut plain, mut checked) = (0, 0);
        for nr in 0u32..1024 {
            let (verdict, steps) = run(&full, nr, arch, [0; 6]);
            if verdict != RET_ALLOW {
                continue;
            }
            if ruled.contains_key(&nr) {
                checked = checked.max(steps);
            } else {
                plain = plain.max(steps);
            }
        }
        assert!(plain <= 14, "an allowed syscall takes {plain} instructions");
        assert!(
            checked <= 32,
            "a checked syscall takes {checked} instructions"
        );
    }

    /// The kernel's own syscall table for this architecture (Debian's linux-libc-dev): the
    /// x86_64 one, or asm-generic's, which aarch64 uses and every host's headers carry.
    #[cfg(target_arch = "x86_64")]
    const UNISTD_H: &[&str] = &[
        "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "/usr/include/asm/unistd_64.h",
    ];
    #[cfg(target_arch = "aarch64")]
    const UNISTD_H: &[&str] = &["/usr/include/asm-generic/unistd.h"];
    #[cfg(target_arch = "x86_64")]
    const AUDIT_NAMES: (&str, &str) = ("AUDIT_ARCH_X86_64", "AUDIT_ARCH_I386");
    #[cfg(target_arch = "aarch64")]
    const AUDIT_NAMES: (&str, &str) = ("AUDIT_ARCH_AARCH64", "AUDIT_ARCH_ARM");

    /// `#define NAME VALUE` lines: name -> the value's text.
    fn defines(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("#define")?.split_whitespace();
                let name = w.next()?;
                let value: String = w.take_while(|t| !t.starts_with("/*")).collect();
                Some((name.to_string(), value))
            })
            .collect()
    }

    /// A number, or a macro naming one (one level, as `__NR_fcntl __NR3264_fcntl`), or an
    /// `|` of such in parentheses (as `AUDIT_ARCH_*`).
    fn value(defs: &BTreeMap<String, String>, text: &str, depth: u32) -> Option<u64> {
        let text = text.trim().trim_start_matches('(').trim_end_matches(')');
        if text.contains('|') {
            return text
                .split('|')
                .map(|t| value(defs, t, depth))
                .try_fold(0, |acc, v| Some(acc | v?));
        }
        if let Some(hex) = text.strip_prefix("0x") {
            return u64::from_str_radix(hex, 16).ok();
        }
        if let Ok(n) = text.parse() {
            return Some(n);
        }
        if depth < 3 {
            return value(defs, defs.get(text)?, depth + 1);
        }
        None
    }

    fn syscall_numbers(text: &str) -> BTreeMap<String, u64> {
        let defs = defines(text);
        defs.iter()
            .filter_map(|(name, v)| {
                let sys = name.strip_prefix("__NR_")?;
                Some((sys.to_string(), value(&defs, v, 0)?))
            })
            .filter(|(name, _)| name != "syscalls" && name != "arch_specific_syscall")
            .collect()
    }

    /// The numbers the filter is built from (the libc crate's, and the few written here) and
    /// its architecture check are the kernel's, read from the kernel's headers. Under
    /// `qemu-aarch64` (scripts/test.sh) this holds the aarch64 tables to the asm-generic
    /// numbering; natively, the x86_64 ones to unistd_64.h.
    #[test]
    fn numbers_and_arch_match_the_kernel_headers() {
        let Some(text) = UNISTD_H
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
        else {
            eprintln!("skipped: no kernel headers at {UNISTD_H:?} (Debian: linux-libc-dev)");
            return;
        };
        let table = syscall_numbers(&text);
        let newest = table.values().copied().max().unwrap_or(0);
        assert!(
            newest > 400,
            "{UNISTD_H:?} parsed to {} numbers",
            table.len()
        );
        let (mut matched, mut newer) = (0, Vec::new());
        for (name, nr) in named() {
            let nr = u64::try_from(nr).unwrap();
            match table.get(name) {
                Some(h) => {
                    assert_eq!(*h, nr, "{name}: the headers say {h}, the filter uses {nr}");
                    matched += 1;
                }
                None => {
                    // Newer than these headers (fchmodat2 is 6.6, Debian 12's headers 6.1):
                    // numbers from 424 on are shared by every architecture (checked below).
                    assert!(
                        nr > newest && nr >= 424,
                        "{name} ({nr}) is not in the headers, and not newer than them"
                    );
                    newer.push(name);
                }
            }
        }
        assert!(matched >= 55, "only {matched} names matched");
        eprintln!("{matched} numbers match the headers; newer than them: {newer:?}");

        // Numbers from 424 on are the same in the x86_64 and the asm-generic tables (what
        // lets aarch64's fchmodat2 be written as 452), where both headers are at hand.
        let x86 = std::fs::read_to_string("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
        let generic = std::fs::read_to_string("/usr/include/asm-generic/unistd.h");
        if let (Ok(x86), Ok(generic)) = (x86, generic) {
            let (x86, generic) = (syscall_numbers(&x86), syscall_numbers(&generic));
            let mut shared = 0;
            for (name, nr) in x86.iter().filter(|(_, nr)| **nr >= 424) {
                assert_eq!(generic.get(name), Some(nr), "{name}");
                shared += 1;
            }
            assert!(shared >= 20, "{shared}");
        }

        let mut defs = BTreeMap::new();
        for header in ["/usr/include/linux/audit.h", "/usr/include/linux/elf-em.h"] {
            defs.extend(defines(&std::fs::read_to_string(header).unwrap()));
        }
        let audit = |name: &str| value(&defs, &defs[name], 0).unwrap();
        assert_eq!(audit(AUDIT_NAMES.0), u64::from(arch::AUDIT_ARCH));
        assert_eq!(audit(AUDIT_NAMES.1), u64::from(FOREIGN_ARCH));
        let p = main_filter().unwrap();
        assert_eq!(
            run(&p, libc::SYS_getpid as u32, FOREIGN_ARCH, [0; 6]).0,
            RET_KILL
        );
        assert_eq!(
            run(&p, libc::SYS_getpid as u32, arch::AUDIT_ARCH, [0; 6]).0,
            RET_ALLOW
        );
    }
}
