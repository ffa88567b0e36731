//! Mounts and the namespaces' own setup: unshare, mount, pivot_root, filesystem types and
//! flags, the hostname, loopback, and the new mount API (open_tree, idmapped mounts,
//! mount_setattr, move_mount).

#[allow(unused_imports)]
use super::*;

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare only changes this process's namespaces; callers are single-threaded.
    cvt(unsafe { libc::unshare(flags) }).map(drop)
}

pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    let fs = fstype.map(CString::new).transpose()?;
    let dat = data.map(CString::new).transpose()?;
    // SAFETY: every pointer is either null or a valid NUL-terminated string that outlives the call.
    cvt(unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            dat.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    })
    .map(drop)
}

pub fn umount_detach(target: &Path) -> io::Result<()> {
    let t = cstr(target)?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

pub fn pivot_root(new_root: &Path, put_old: &Path) -> io::Result<()> {
    let n = cstr(new_root)?;
    let o = cstr(put_old)?;
    // SAFETY: valid C strings; pivot_root has no libc wrapper.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) };
    cvt(ret as libc::c_int).map(drop)
}

/// The file system type (statfs `f_type`, e.g. `CGROUP_SUPER_MAGIC`) of the mount holding
/// `path`, following symlinks.
pub fn fs_type(path: &Path) -> io::Result<i64> {
    let p = cstr(path)?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: st is a valid out-pointer of the right type.
    cvt(unsafe { libc::statfs(p.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statfs succeeded and filled the struct.
    let f_type = unsafe { st.assume_init() }.f_type;
    // Its width differs across architectures (i64 here, u32 or i32 elsewhere).
    #[allow(clippy::unnecessary_cast)]
    Ok(f_type as i64)
}

/// Flags of the mount that holds `path` (`ST_RDONLY`, `ST_NOSUID`, …).
pub fn statvfs_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let p = cstr(path)?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: st is a valid out-pointer of the right type.
    cvt(unsafe { libc::statvfs(p.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded and filled the struct.
    Ok(unsafe { st.assume_init() }.f_flag)
}

pub fn sethostname(name: &str) -> io::Result<()> {
    // SAFETY: pointer and length describe `name`.
    cvt(unsafe { libc::sethostname(name.as_ptr() as *const libc::c_char, name.len()) }).map(drop)
}

/// Brings the loopback interface up (a fresh network namespace starts with it down).
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket only for the interface ioctls; closed by OwnedFd.
    let sock =
        cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd from socket().
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags union member of a valid ifreq.
    unsafe {
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        cvt(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

// New mount API (Linux 5.12+ for idmapped mounts). libc has the syscall numbers but not all
// the constants and structs; these are the kernel's uapi values (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cpath(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// A detached copy of the mount at `path` (not recursive, like MS_BIND), close-on-exec.
pub fn open_tree_clone(path: &Path) -> io::Result<OwnedFd> {
    open_tree_clone_with(path, false)
}

/// A detached copy of the mount at `path`, with the mounts beneath it when `recursive` (like
/// MS_BIND | MS_REC), close-on-exec.
pub fn open_tree_clone_with(path: &Path, recursive: bool) -> io::Result<OwnedFd> {
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let c = cpath(path)?;
    let rec = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: valid NUL-terminated path and flag constants; a non-negative result is a new fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | rec | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// A detached copy of the mount `at` (an `O_PATH` descriptor) is on, rooted at `at`'s own
/// directory (not recursive, like MS_BIND), close-on-exec.
pub fn open_tree_clone_fd(at: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: a valid fd with an empty path (AT_EMPTY_PATH) and flag constants; a
    // non-negative result is a new fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            at.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::AT_EMPTY_PATH as libc::c_uint | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// An `O_PATH` descriptor of `path`, an absolute path that must hold no symlink at all (nor
/// magic link): for a path resolved and checked earlier, a link in it now means it changed
/// since (`ELOOP`). Needs `openat2` (Linux 5.6).
pub fn open_unlinked_path(path: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        // No O_NOFOLLOW: with it, a final symlink would be opened itself instead of refused.
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(io::Error::from)
}

/// Makes the detached mount `tree` idmapped through `userns` (and nosuid, nodev).
pub fn idmap_tree(tree: &OwnedFd, userns: &OwnedFd) -> io::Result<()> {
    idmap_tree_with(tree, userns, false)
}

/// [`idmap_tree`], and read-only too with `readonly`.
pub fn idmap_tree_with(tree: &OwnedFd, userns: &OwnedFd, readonly: bool) -> io::Result<()> {
    let ro = if readonly { MOUNT_ATTR_RDONLY } else { 0 };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | ro,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid fd, an empty path with AT_EMPTY_PATH, and a pointer to a mount_attr of
    // the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `MOUNT_ATTR_RDONLY`, `_NOSUID`, `_NODEV`, `_NOEXEC`, from the `MS_*` flags of the same
/// meaning.
pub fn mount_attr_from_ms(flags: libc::c_ulong) -> u64 {
    [
        (libc::MS_RDONLY, MOUNT_ATTR_RDONLY),
        (libc::MS_NOSUID, MOUNT_ATTR_NOSUID),
        (libc::MS_NODEV, MOUNT_ATTR_NODEV),
        (libc::MS_NOEXEC, MOUNT_ATTR_NOEXEC),
    ]
    .iter()
    .filter(|(ms, _)| flags & ms != 0)
    .fold(0, |acc, (_, attr)| acc | attr)
}

/// Adds `attr_set` (`MOUNT_ATTR_*`) to the mount `at` holds (its root) and every mount
/// beneath it, in one call (`AT_RECURSIVE`; Linux 5.12+, `ENOSYS` before). Flags are only
/// added, so a lock the kernel holds on a flag is never in the way.
pub fn mount_setattr_recursive(at: BorrowedFd<'_>, attr_set: u64) -> io::Result<()> {
    const AT_RECURSIVE: libc::c_int = 0x8000;
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a valid fd with an empty path (AT_EMPTY_PATH) and a pointer to a mount_attr of
    // the size passed, both alive for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            at.as_raw_fd(),
            c"".as_ptr(),
            AT_RECURSIVE | libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached mount `tree` on the directory `dest` holds.
pub fn move_mount_to(tree: RawFd, dest: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: two valid fds, each with an empty path (F_EMPTY_PATH, T_EMPTY_PATH).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            dest.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
