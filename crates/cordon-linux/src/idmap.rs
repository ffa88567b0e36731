//! An idmapped `--workspace` for root-owned directories when cordon runs as root.
//!
//! As root, a sandbox runs as a fresh unprivileged host uid, so a workspace owned by root would
//! be read-only to it. Instead the supervisor hands the sandbox a detached copy of the
//! workspace mount whose idmapping shows host uid/gid 0 as the sandbox's host ids (and so, in
//! the sandbox, as its own user): the program can write there, and what it creates belongs to
//! root on disk, like the rest of the directory. Nothing on the host is chowned or widened.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use crate::sys;

/// The idmapped, detached, nosuid/nodev copy of `workspace`, or why there is none (old
/// kernel, a filesystem without idmap support, …). The calling process must be root and
/// single-threaded.
pub fn workspace_tree(
    workspace: &Path,
    host_uid: u32,
    host_gid: u32,
) -> Result<(OwnedFd, MappingChild), String> {
    let (userns, child) = mapping_userns(host_uid, host_gid)?;
    let tree = sys::open_tree_clone(workspace).map_err(|e| format!("open_tree: {e}"))?;
    sys::idmap_tree(&tree, &userns).map_err(|e| format!("idmapping the mount: {e}"))?;
    Ok((tree, child))
}

/// Idmapped, detached, nosuid/nodev copies of an image's layer directories (which live in
/// the store, 0700 and host root's): host root's files there show as the sandbox's host ids,
/// so inside as the sandbox user, who can read them and (copied up into its own writable
/// layer) change them, as an image's authors expect of its root user. The files themselves
/// stay root's and untouched. The calling process must be root and single-threaded.
/// The returned child is to be dropped (reaped) later.
pub fn layer_trees(
    layers: &[&Path],
    host_uid: u32,
    host_gid: u32,
) -> Result<(Vec<OwnedFd>, MappingChild), String> {
    let (userns, child) = mapping_userns(host_uid, host_gid)?;
    let trees = layers
        .iter()
        .map(|layer| {
            let tree = sys::open_tree_clone(layer)
                .map_err(|e| format!("open_tree {}: {e}", layer.display()))?;
            sys::idmap_tree(&tree, &userns)
                .map_err(|e| format!("idmapping {}: {e}", layer.display()))?;
            Ok(tree)
        })
        .collect::<Result<_, String>>()?;
    Ok((trees, child))
}

/// Idmapped, detached, nosuid/nodev copies of directories bound into the sandbox (a
/// server's volumes: `Bind::idmap`), read-only where asked: host root's files there are the
/// sandbox user's, what it creates is root's on the host, so sandboxes with different host
/// uids share them. The calling process must be root and single-threaded.
///
/// Each directory is a path the service resolved and checked (against the bind roots) when
/// the request came: it is opened without following any link, so that a sandbox writing the
/// tree it lies in cannot swap a directory on the way for a link out of the roots between the
/// check and this open (CVE-2021-30465's race, on the source side).
pub fn bind_trees(
    binds: &[(&Path, bool)],
    host_uid: u32,
    host_gid: u32,
) -> Result<(Vec<OwnedFd>, MappingChild), String> {
    let (userns, child) = mapping_userns(host_uid, host_gid)?;
    let trees = binds
        .iter()
        .map(|(dir, readonly)| {
            let pinned = sys::open_unlinked_path(dir).map_err(|e| {
                format!(
                    "open {} without following links (it changed since it was checked?): {e}",
                    dir.display()
                )
            })?;
            let tree = sys::open_tree_clone_fd(pinned.as_fd())
                .map_err(|e| format!("open_tree {}: {e}", dir.display()))?;
            sys::idmap_tree_with(&tree, &userns, *readonly)
                .map_err(|e| format!("idmapping {}: {e}", dir.display()))?;
            Ok(tree)
        })
        .collect::<Result<_, String>>()?;
    Ok((trees, child))
}

/// The short-lived child that created a mapping user namespace. It leaves by itself once
/// the namespace is held (it reads EOF); dropping this reaps it. Reaping is deferred to a
/// point where the child has long gone (see `launcher`), so that a start never blocks on
/// the scheduler running it: on a loaded host each such wait cost a scheduling slot.
pub struct MappingChild(libc::pid_t);

impl Drop for MappingChild {
    fn drop(&mut self) {
        // ECHILD when a reaper of the caller's (wait for any child) got there first.
        let _ = sys::wait4(self.0, false);
    }
}

/// A user namespace mapping 0 to `uid`/`gid`: the idmapping of the workspace mount. The
/// kernel only takes a mapping from a user namespace, so a short-lived child is cloned into
/// a new one (it exists when `clone` returns: no handshake) and we keep a reference to it.
fn mapping_userns(uid: u32, gid: u32) -> Result<(OwnedFd, MappingChild), String> {
    let (hold_r, hold_w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the caller is single-threaded; the child only makes raw syscalls (close, read,
    // _exit) and no pthread calls, as `clone_into` requires.
    let child = match unsafe { sys::clone_into(libc::CLONE_NEWUSER) }
        .map_err(|e| format!("clone(CLONE_NEWUSER): {e}"))?
    {
        sys::Fork::Child => {
            drop(hold_w);
            // Wait until the parent holds the namespace (or goes away), then leave.
            let _ = sys::read_byte(hold_r.as_raw_fd());
            sys::exit_now(0)
        }
        sys::Fork::Parent(pid) => MappingChild(pid),
    };
    drop(hold_r);
    let proc_dir = format!("/proc/{}", child.0);
    let write = |file: &str, text: &str| {
        sys::write_file(Path::new(&format!("{proc_dir}/{file}")), text)
            .map_err(|e| format!("{file}: {e}"))
    };
    write("uid_map", &format!("0 {uid} 1\n"))?;
    write("setgroups", "deny")?;
    write("gid_map", &format!("0 {gid} 1\n"))?;
    let ns = std::fs::File::open(format!("{proc_dir}/ns/user"))
        .map(OwnedFd::from)
        .map_err(|e| format!("ns/user: {e}"))?;
    drop(hold_w);
    Ok((ns, child))
}
