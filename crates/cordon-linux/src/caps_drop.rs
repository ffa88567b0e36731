//! Dropping every capability, in every set, for good.

use caps::CapSet;
use rustix::io::Errno;
use rustix::thread::{CapabilitiesSecureBits as Sec, CapabilitySet};

/// Clears bounding, ambient, inheritable, effective and permitted sets; locks securebits so
/// that no later exec (of a root-owned or file-capability binary) can regain any.
pub fn drop_all() -> Result<(), String> {
    // No root magic on exec, no fixups on setuid, and locked. Needs CAP_SETPCAP, which we
    // still hold.
    let bits = Sec::NO_ROOT
        | Sec::NO_ROOT_LOCKED
        | Sec::NO_SETUID_FIXUP
        | Sec::NO_SETUID_FIXUP_LOCKED
        | Sec::KEEP_CAPS_LOCKED
        | Sec::NO_CAP_AMBIENT_RAISE
        | Sec::NO_CAP_AMBIENT_RAISE_LOCKED;
    rustix::thread::set_capabilities_secure_bits(bits)
        .map_err(|e| format!("securebits: {}", std::io::Error::from(e)))?;
    // Bounding first: dropping from it needs CAP_SETPCAP in the effective set. Every index the
    // kernel has, until it says EINVAL past its last one, so a capability newer than this code
    // goes too. (`caps::clear` asks about each capability before dropping it, and only those
    // the crate knows: twice the system calls, on every sandbox start.)
    for cap in 0..64 {
        // By number, not by rustix's names: the kernel may know capabilities rustix does not.
        let one = CapabilitySet::from_bits_retain(1 << cap);
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) => {}
            Err(Errno::INVAL) if cap > 0 => break,
            Err(e) => {
                return Err(format!(
                    "dropping capability {cap} from the bounding set: {}",
                    std::io::Error::from(e)
                ))
            }
        }
    }
    clear_sets()
}

/// Drops what a process outside any user namespace of its own can drop: the bounding set
/// where it still holds CAP_SETPCAP (cordon run as root, before it gives up uid 0), then
/// every other set; and checks that none is left. Without CAP_SETPCAP neither the bounding
/// set nor the securebits can change, and need not: with no capability permitted, uid not 0
/// and `no_new_privs` (set next), no exec can gain one.
pub fn drop_without_userns() -> Result<(), String> {
    drop_bounding()?;
    clear_sets()
}

/// Empties the bounding set where CAP_SETPCAP allows it (see `drop_without_userns`); called
/// by root before it gives up uid 0, which takes CAP_SETPCAP with it.
pub fn drop_bounding() -> Result<(), String> {
    for cap in 0..64 {
        let one = CapabilitySet::from_bits_retain(1 << cap);
        match rustix::thread::remove_capability_from_bounding_set(one) {
            Ok(()) => {}
            Err(Errno::INVAL) if cap > 0 => break,
            Err(Errno::PERM) => break,
            Err(e) => {
                return Err(format!(
                    "dropping capability {cap} from the bounding set: {}",
                    std::io::Error::from(e)
                ))
            }
        }
    }
    Ok(())
}

/// Empties the ambient, permitted and inheritable sets (the effective one goes with
/// permitted; the kernel keeps ambient inside permitted ∩ inheritable) and checks that
/// nothing is left.
fn clear_sets() -> Result<(), String> {
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
