//! A host that refuses namespaces, made on demand: the seccomp filter Docker's default profile
//! amounts to for cordon (`unshare` and `clone` with any `CLONE_NEW*` flag: `EPERM`;
//! `clone3`: `ENOSYS`, so libc falls back to `clone`), installed before exec'ing cordon, so
//! the bench measures cordon's no-namespace mode where it would really run.
//!
//! Built with seccompiler's rule API (no hand-assembled BPF): only a benchmark needs it, so it
//! lives here and not in the engine.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `CLONE_NEWTIME` is not in every libc crate's table.
const CLONE_NEWTIME: u64 = 0x80;

fn clone_new_flags() -> [u64; 8] {
    [
        libc::CLONE_NEWUSER as u64,
        libc::CLONE_NEWNS as u64,
        libc::CLONE_NEWPID as u64,
        libc::CLONE_NEWNET as u64,
        libc::CLONE_NEWIPC as u64,
        libc::CLONE_NEWUTS as u64,
        libc::CLONE_NEWCGROUP as u64,
        CLONE_NEWTIME,
    ]
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

fn filter(
    rules: Vec<(i64, Vec<SeccompRule>)>,
    errno: i32,
) -> Result<BpfProgram, seccompiler::BackendError> {
    let map: BTreeMap<i64, Vec<SeccompRule>> = rules.into_iter().collect();
    SeccompFilter::new(
        map,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        ARCH,
    )?
    .try_into()
}

/// Installs the filters on this thread (with `no_new_privs`); what it execs keeps them.
pub fn refuse_namespaces() -> Result<(), String> {
    let any_flag = clone_new_flags()
        .into_iter()
        .map(|flag| {
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("building the namespace filter: {e}"))?;
    let eperm = filter(
        vec![(libc::SYS_unshare, vec![]), (libc::SYS_clone, any_flag)],
        libc::EPERM,
    )
    .map_err(|e| format!("building the namespace filter: {e}"))?;
    let enosys = filter(vec![(libc::SYS_clone3, vec![])], libc::ENOSYS)
        .map_err(|e| format!("building the clone3 filter: {e}"))?;
    for prog in [eperm, enosys] {
        seccompiler::apply_filter(&prog).map_err(|e| format!("installing the filter: {e}"))?;
    }
    Ok(())
}
