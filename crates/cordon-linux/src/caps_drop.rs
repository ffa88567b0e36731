//! Dropping every capability, in every set, for good.

use caps::CapSet;

// securebits (linux/securebits.h): no root magic on exec, no fixups on setuid, and locked.
const SECBIT_NOROOT: u64 = 1 << 0;
const SECBIT_NOROOT_LOCKED: u64 = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: u64 = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: u64 = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: u64 = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: u64 = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: u64 = 1 << 7;

/// Clears bounding, ambient, inheritable, effective and permitted sets; locks securebits so
/// that no later exec (of a root-owned or file-capability binary) can regain any.
pub fn drop_all() -> Result<(), String> {
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_SETUID_FIXUP
        | SECBIT_NO_SETUID_FIXUP_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: PR_SET_SECUREBITS takes a bit mask; needs CAP_SETPCAP, which we still hold.
    let ret = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) };
    if ret != 0 {
        return Err(format!("securebits: {}", std::io::Error::last_os_error()));
    }
    // Bounding first: dropping from it needs CAP_SETPCAP in the effective set. Every index the
    // kernel has, until it says EINVAL past its last one, so a capability newer than this code
    // goes too. (`caps::clear` asks about each capability before dropping it, and only those
    // the crate knows: twice the system calls, on every sandbox start.)
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes a capability number and touches no memory of ours.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                break;
            }
            return Err(format!(
                "dropping capability {cap} from the bounding set: {e}"
            ));
        }
    }
    // Clearing the permitted set also clears the effective one; the kernel keeps the ambient
    // set inside permitted ∩ inheritable, so with those empty it is empty too.
    for set in [CapSet::Ambient, CapSet::Permitted, CapSet::Inheritable] {
        caps::clear(None, set).map_err(|e| format!("clearing {set:?} capabilities: {e}"))?;
    }
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let left = caps::read(None, set).map_err(|e| e.to_string())?;
        if !left.is_empty() {
            return Err(format!(
                "{set:?} capabilities still held after clearing: {left:?}"
            ));
        }
    }
    Ok(())
}
