//! Building the sandbox's root filesystem inside its own mount namespace.
//!
//! The sequence (after bubblewrap's): make every mount private; mount a staging tmpfs and
//! `pivot_root` into it, so the host's tree sits at `/oldroot` (binds then read from there,
//! even from the host's `/tmp`); build the new root on its own tmpfs at `/newroot`; make it
//! read-only; `pivot_root` into it and detach everything else.
//!
//! Between the two pivots the host is reachable, so nothing inside the new root is named by
//! a path string: every mount point, the working directory and `/home/user` are resolved (and
//! made where missing) inside the root by descriptor ([`InRoot`]), and mounted on through that
//! descriptor. An image's `/tmp -> /oldroot/tmp` or a `WorkingDir` behind
//! `x -> ../../oldroot/home` then lands inside the image's root, never on the host.

use std::fs;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::inroot::{fd_path, InRoot, Make};
use crate::plan::{ImagePlan, Plan, RootEntry};
use crate::sys;

const MS_RDONLY: libc::c_ulong = libc::MS_RDONLY;
const MS_NOSUID: libc::c_ulong = libc::MS_NOSUID;
const MS_NODEV: libc::c_ulong = libc::MS_NODEV;
const MS_NOEXEC: libc::c_ulong = libc::MS_NOEXEC;

/// A failed step, named so the user can tell what the host refused.
#[derive(Debug)]
pub struct MountError {
    pub step: String,
    pub error: io::Error,
}

impl std::fmt::Display for MountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

trait Step<T> {
    fn step(self, what: impl FnOnce() -> String) -> Result<T, MountError>;
}

impl<T> Step<T> for io::Result<T> {
    fn step(self, what: impl FnOnce() -> String) -> Result<T, MountError> {
        self.map_err(|error| MountError {
            step: what(),
            error,
        })
    }
}

const STAGE: &str = "/tmp";
const NEW: &str = "/newroot";
const OLD: &str = "/oldroot";

/// `/oldroot` + absolute host `src`.
fn under_old(src: &Path) -> PathBuf {
    Path::new(OLD).join(src.strip_prefix("/").unwrap_or(src))
}

fn mkdir_p(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Every tmpfs gets an inode cap as well as a size: `size=` counts data pages only, so without
/// `nr_inodes=` empty files and directories are free and unbounded — each one kernel memory
/// that no limit holds when there is no cgroup.
///
/// `point` is a path the kernel resolves (in the staging root, or a descriptor's
/// [`fd_path`]); `shown` names it in errors.
fn tmpfs(
    point: &Path,
    shown: &Path,
    size: u64,
    inodes: u64,
    mode: u32,
    flags: libc::c_ulong,
) -> Result<(), MountError> {
    let data = format!("size={size},nr_inodes={inodes},mode={mode:o}");
    sys::mount(
        Some(Path::new("tmpfs")),
        point,
        Some("tmpfs"),
        flags,
        Some(&data),
    )
    .step(|| format!("mount tmpfs on {}", shown.display()))
}

/// A tmpfs on `dest` inside the new root, its mount point made there if missing.
fn root_tmpfs(
    root: &InRoot,
    dest: &Path,
    size: u64,
    inodes: u64,
    mode: u32,
    flags: libc::c_ulong,
) -> Result<(), MountError> {
    let point = root
        .dir(dest, 0o755)
        .step(|| format!("mkdir {}", dest.display()))?;
    tmpfs(&fd_path(&point), dest, size, inodes, mode, flags)
}

/// Flags of an existing mount that a user namespace may not clear (they are locked).
fn locked_flags(path: &Path) -> io::Result<libc::c_ulong> {
    let st = sys::statvfs_flags(path)?;
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, MS_NOSUID),
        (libc::ST_NODEV, MS_NODEV),
        (libc::ST_NOEXEC, MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
        (libc::ST_RDONLY, MS_RDONLY),
    ] {
        if st & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    Ok(flags)
}

/// What `bind` must do about the mount point (inside the new root) first.
#[derive(Clone, Copy)]
enum Point {
    /// A directory, created with its parents if missing.
    Dir,
    /// A file, created (with its parents) if missing.
    File,
    /// Already there (binding something onto itself, or hiding what a bind brought in).
    Exists,
}

/// Bind `src` (a path the kernel resolves: the host's under /oldroot, or a descriptor's
/// [`fd_path`]) to `dest` inside the new root with `extra` flags.
///
/// The flags go on a detached copy of `src` before it is attached on the descriptor of the
/// mount point: nothing is looked up by path again once the mount point is found. A sandbox
/// sharing the tree the mount point lies in (a host workspace, a bind) may swap a directory on
/// the way for a link at any moment (CVE-2021-30465's race); a remount by path would then
/// change whatever mount the path names by then, and leave this one without its flags — a
/// read-only bind writable. Kernels before 5.12 (no `mount_setattr`) bind, then remount by
/// path, and refuse to go on unless what the path names then is the mount just made.
fn bind(
    root: &InRoot,
    src: &Path,
    dest: &Path,
    point: Point,
    extra: libc::c_ulong,
) -> Result<(), MountError> {
    let make = match point {
        Point::Dir => Make::Dirs,
        Point::File => Make::File,
        Point::Exists => Make::Nothing,
    };
    let at = root
        .resolve(dest, make, 0o755)
        .step(|| format!("make the mount point {}", dest.display()))?;
    match attach_copy(src, &at, extra, false) {
        Ok(()) => return Ok(()),
        // A directory with mounts beneath it that the kernel locked when it copied them into
        // this user namespace (a container's /etc/hostname, /etc/hosts, /etc/resolv.conf)
        // cannot be bound alone — that would uncover what they cover — only with them.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && matches!(point, Point::Dir) => {
            return bind_tree(root, src, &at, dest, extra);
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(error) => {
            return Err(MountError {
                step: format!("bind {} to {}", src.display(), dest.display()),
                error,
            })
        }
    }
    match sys::mount(Some(src), &fd_path(&at), None, libc::MS_BIND, None) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && matches!(point, Point::Dir) => {
            return bind_tree(root, src, &at, dest, extra);
        }
        Err(error) => {
            return Err(MountError {
                step: format!("bind {} to {}", src.display(), dest.display()),
                error,
            })
        }
    }
    let top = mounted_here(root, src, dest)?;
    remount_at(&fd_path(&top), dest, extra)
}

/// The mount just bound from `src` at `dest`, looked up again by path (kernels before 5.12):
/// refused unless the path still names `src`'s root, so that a link swapped in on the way
/// meanwhile cannot turn the remount onto another mount.
fn mounted_here(root: &InRoot, src: &Path, dest: &Path) -> Result<OwnedFd, MountError> {
    let top = mounted(root, dest)?;
    let same = rustix::fs::stat(src)
        .and_then(|want| rustix::fs::fstat(&top).map(|got| (want, got)))
        .map(|(w, g)| (w.st_dev, w.st_ino) == (g.st_dev, g.st_ino))
        .map_err(io::Error::from)
        .step(|| format!("stat {}", dest.display()))?;
    if !same {
        return Err(MountError {
            step: format!("remount {}", dest.display()),
            error: io::Error::other(
                "the path no longer names the bind just made: it changed while the root was built",
            ),
        });
    }
    Ok(top)
}

/// Attaches a detached copy of `src` (with the mounts beneath it when `recursive`) carrying
/// the `extra` flags on the mount point `at`. `ENOSYS` before Linux 5.12.
fn attach_copy(src: &Path, at: &OwnedFd, extra: libc::c_ulong, recursive: bool) -> io::Result<()> {
    let tree = sys::open_tree_clone_with(src, recursive)?;
    sys::mount_setattr_recursive(tree.as_fd(), sys::mount_attr_from_ms(extra))?;
    sys::move_mount_to(std::os::fd::AsRawFd::as_raw_fd(&tree), at.as_fd())
}

/// The mount just made at `dest` inside the new root: looked up again, since the descriptor
/// of the mount point holds what lies beneath the mount.
fn mounted(root: &InRoot, dest: &Path) -> Result<OwnedFd, MountError> {
    root.resolve(dest, Make::Nothing, 0)
        .step(|| format!("open {}", dest.display()))
}

/// Remounts the bind at `dest` (inside the new root) with `extra` flags, keeping those the
/// kernel locked on it.
fn remount(root: &InRoot, dest: &Path, extra: libc::c_ulong) -> Result<(), MountError> {
    let top = mounted(root, dest)?;
    remount_at(&fd_path(&top), dest, extra)
}

/// Binds the new root's directory `of` (with what is mounted below it) at `at` too, both
/// resolved inside the root.
fn alias(root: &InRoot, of: &Path, at: &Path) -> Result<(), MountError> {
    let src = root
        .resolve(of, Make::Nothing, 0)
        .step(|| format!("find {}", of.display()))?;
    let dest = root
        .resolve(at, Make::Dirs, 0o755)
        .step(|| format!("make the mount point {}", at.display()))?;
    sys::mount(
        Some(&fd_path(&src)),
        &fd_path(&dest),
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .step(|| format!("bind {} to {}", of.display(), at.display()))?;
    remount(root, at, MS_NOSUID | MS_NODEV)
}

/// [`remount`] of a mount the kernel resolves `target` to; `shown` names it in errors.
fn remount_at(target: &Path, shown: &Path, extra: libc::c_ulong) -> Result<(), MountError> {
    let keep = locked_flags(target).step(|| format!("statvfs {}", shown.display()))?;
    sys::mount(
        None,
        target,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | keep | extra,
        None,
    )
    .step(|| format!("remount {}", shown.display()))
}

/// Binds `src` with every mount beneath it, the whole tree with the `extra` flags (read-only,
/// nosuid, nodev): a detached copy given them in one recursive `mount_setattr`, attached on
/// `at` (as [`bind`] does), or where the kernel predates that (before 5.12), bound and then
/// remounted mount by mount. Landlock needs nothing more: its rules are on `dest`, and it
/// walks up through mount points.
fn bind_tree(
    root: &InRoot,
    src: &Path,
    at: &OwnedFd,
    dest: &Path,
    extra: libc::c_ulong,
) -> Result<(), MountError> {
    match attach_copy(src, at, extra, true) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
        Err(error) => {
            return Err(MountError {
                step: format!(
                    "bind {} with the mounts beneath it to {}",
                    src.display(),
                    dest.display()
                ),
                error,
            })
        }
    }
    sys::mount(
        Some(src),
        &fd_path(at),
        None,
        libc::MS_BIND | libc::MS_REC,
        None,
    )
    .step(|| {
        format!(
            "bind {} with the mounts beneath it to {}",
            src.display(),
            dest.display()
        )
    })?;
    let top = mounted_here(root, src, dest)?;
    match sys::mount_setattr_recursive(top.as_fd(), sys::mount_attr_from_ms(extra)) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            // mountinfo names the mounts by their paths from the staging root; the kernel
            // says where this one is. (No image root here: images need Linux 5.12.)
            let here =
                fs::read_link(fd_path(&top)).step(|| format!("locate {}", dest.display()))?;
            let table = fs::read_to_string(MOUNTINFO).step(|| format!("read {MOUNTINFO}"))?;
            for point in mounts_at_or_under(&table, &here) {
                remount_at(&point, &point, extra)?;
            }
            Ok(())
        }
        Err(error) => Err(MountError {
            step: format!(
                "make {} and the mounts beneath it read-only",
                dest.display()
            ),
            error,
        }),
    }
}

/// This process's mounts, seen from the staging root the binds are made in (the host's /proc
/// is still there, under /oldroot).
const MOUNTINFO: &str = "/oldroot/proc/self/mountinfo";

/// Mount points in a `mountinfo` table that are `dir` or beneath it, in the table's order.
fn mounts_at_or_under(table: &str, dir: &Path) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// mountinfo writes space, tab, newline and backslash in a path as `\040`, `\011`, `\012`
/// and `\134`.
fn unescape_mountinfo(field: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0')))
            .and_then(|v| u8::try_from(v).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// Inodes the new root's tmpfs needs: every directory leading to a mount point or symlink the
/// plan puts there (counted generously, as if none were shared), the fixed top-level entries,
/// and room to spare. It is read-only once built, so nothing in the sandbox adds to it.
fn root_inodes(plan: &Plan) -> u64 {
    let depth = |p: &Path| p.components().count() as u64;
    let entries: u64 = plan
        .root
        .iter()
        .map(|e| match e {
            RootEntry::Bind { dest, .. } => depth(dest),
            RootEntry::Symlink { link, .. } => depth(link),
            RootEntry::Alias { at, .. } => depth(at),
            RootEntry::Hide { dest, .. } => depth(dest),
            RootEntry::Generated { dest, .. } => depth(dest),
            // Inside a system directory's bind: nothing in the root's own tmpfs.
            RootEntry::NoExecDir { .. } => 0,
        })
        .sum();
    64 + entries
}

/// The files the plan has cordon write (each takes an inode of the staging tmpfs).
fn generated(plan: &Plan) -> impl Iterator<Item = &RootEntry> {
    plan.root
        .iter()
        .filter(|e| matches!(e, RootEntry::Generated { .. }))
}

/// Where an image's layers are attached in the staging root: short paths, so that even
/// overlayfs' most layers (500) fit the one page a mount's options may take.
fn layer_point(i: usize) -> PathBuf {
    PathBuf::from(format!("/l{i}"))
}
/// The writable layer's tmpfs in the staging root (`upper` and overlayfs' `work` in it).
const UPPER: &str = "/u";

/// Mounts an image's root at /newroot: its layers read-only (as root, the idmapped copies the
/// supervisor made; rootless, binds of the store's directories, which are the user's own)
/// under a writable layer on a tmpfs capped like /tmp. overlayfs runs inside the sandbox's
/// user namespace, hence `userxattr`: whiteouts are `user.overlay.*` xattrs (see
/// cordon-image's unpacker), and nothing the sandbox does reaches the layers.
fn image_root(image: &ImagePlan, plan: &Plan) -> Result<(), MountError> {
    let mut lower = String::from("lowerdir=");
    for (i, layer) in image.layers.iter().enumerate() {
        let point = layer_point(i);
        mkdir_p(&point, 0o755).step(|| format!("mkdir {}", point.display()))?;
        match image.layer_trees.get(i) {
            Some(&tree) => {
                let at = rustix::fs::open(
                    &point,
                    rustix::fs::OFlags::PATH
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(io::Error::from)
                .step(|| format!("open {}", point.display()))?;
                sys::move_mount_to(tree, at.as_fd())
                    .step(|| format!("attach the image's layer {i}"))?;
                // SAFETY: the supervisor left this fd open across the clone for this one use;
                // nothing else owns it.
                drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(tree) });
            }
            None => sys::mount(
                Some(&under_old(layer)),
                &point,
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )
            .step(|| format!("bind the image's layer {}", layer.display()))?,
        }
        if i > 0 {
            lower.push(':');
        }
        lower.push_str(&point.to_string_lossy());
    }
    mkdir_p(Path::new(UPPER), 0o755).step(|| format!("mkdir {UPPER}"))?;
    match (&image.upper, image.upper_tree) {
        // A build step's writable layer is a host directory, so that it outlives the run.
        (Some(_), Some(tree)) => {
            let at = rustix::fs::open(
                UPPER,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(io::Error::from)
            .step(|| format!("open {UPPER}"))?;
            sys::move_mount_to(tree, at.as_fd()).step(|| "attach the writable layer".into())?;
            // SAFETY: the supervisor left this fd open across the clone for this one use;
            // nothing else owns it.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(tree) });
        }
        (Some(dir), None) => sys::mount(
            Some(&under_old(dir)),
            Path::new(UPPER),
            None,
            libc::MS_BIND,
            None,
        )
        .step(|| format!("bind the writable layer {}", dir.display()))?,
        (None, _) => tmpfs(
            Path::new(UPPER),
            Path::new(UPPER),
            plan.limits.disk,
            plan.limits.scratch_inodes(),
            0o755,
            MS_NOSUID | MS_NODEV,
        )?,
    }
    for d in ["upper", "work"] {
        let p = Path::new(UPPER).join(d);
        mkdir_p(&p, 0o755).step(|| format!("mkdir {}", p.display()))?;
    }
    let data = format!("{lower},upperdir={UPPER}/upper,workdir={UPPER}/work,userxattr");
    if data.len() >= 4096 {
        return Err(MountError {
            step: format!("mount the image's {} layers", image.layers.len()),
            error: io::Error::other("too many layers for one overlay mount"),
        });
    }
    sys::mount(
        Some(Path::new("overlay")),
        Path::new(NEW),
        Some("overlay"),
        MS_NOSUID | MS_NODEV,
        Some(&data),
    )
    .step(|| {
        "mount the image's root (overlayfs in a user namespace: Linux 5.11+, and 6.7+ for an \
         image with deleted files)"
            .into()
    })
}

/// Runs in the sandbox init, inside fresh user and mount namespaces. With an image, returns
/// an `O_PATH` fd of the directory holding its writable layer (`upper/` and `work/`): once
/// the staging tree is detached nothing names it, and a persistent sandbox's supervisor needs
/// it to commit the sandbox (see `ToSupervisor::RootFd`).
pub fn build_root(plan: &Plan) -> Result<Option<OwnedFd>, MountError> {
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .step(|| "make / private".into())?;

    // Staging tmpfs; after the first pivot the host tree is at /oldroot. An image's layers
    // and its writable layer are staged there too (one directory each).
    let layers = plan.image.as_ref().map_or(0, |i| i.layers.len() as u64);
    sys::mount(
        Some(Path::new("tmpfs")),
        Path::new(STAGE),
        Some("tmpfs"),
        MS_NOSUID | MS_NODEV,
        Some(&format!(
            "size=1m,nr_inodes={},mode=755",
            16 + layers + generated(plan).count() as u64
        )),
    )
    .step(|| "mount staging tmpfs".into())?;
    let stage = Path::new(STAGE);
    mkdir_p(&stage.join("oldroot"), 0o755).step(|| "mkdir oldroot".into())?;
    mkdir_p(&stage.join("newroot"), 0o755).step(|| "mkdir newroot".into())?;
    if plan.image.is_none() {
        tmpfs(
            &stage.join("newroot"),
            &stage.join("newroot"),
            1 << 20,
            root_inodes(plan),
            0o755,
            MS_NOSUID | MS_NODEV,
        )?;
    }
    sys::pivot_root(stage, &stage.join("oldroot")).step(|| "pivot_root into staging".into())?;
    std::env::set_current_dir("/").step(|| "chdir /".into())?;
    let mut writable = None;
    if let Some(image) = &plan.image {
        image_root(image, plan)?;
        writable = Some(
            rustix::fs::open(
                UPPER,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(io::Error::from)
            .step(|| format!("open {UPPER}"))?,
        );
    }
    // From here on, every path inside the new root is resolved inside it.
    let root = InRoot::open(Path::new(NEW)).step(|| "open the new root".into())?;
    let root = &root;

    // Scratch space first, so that binds the user asked for under /tmp or /workspace land on
    // top of it instead of being hidden by it.
    let disk = plan.limits.disk;
    let inodes = plan.limits.scratch_inodes();
    // With a programs allowlist, every writable mount is also `noexec` unless an allowed file
    // lies in it: Landlock refuses `execve` there, and `noexec` refuses what Landlock does not
    // check — the dynamic loader mapping a program written there (`ld.so /tmp/prog`), or a
    // library a program wrote and loads.
    let noexec = |dest: &Path| -> libc::c_ulong {
        match &plan.landlock.exec_only {
            Some(allowed) if !allowed.iter().any(|f| f.starts_with(dest)) => MS_NOEXEC,
            _ => 0,
        }
    };
    root_tmpfs(
        root,
        Path::new("/tmp"),
        disk,
        inodes,
        0o1777,
        MS_NOSUID | MS_NODEV | noexec(Path::new("/tmp")),
    )?;
    let home = Path::new(cordon_policy::profile::HOME);
    root_tmpfs(
        root,
        home,
        disk,
        inodes,
        0o700,
        MS_NOSUID | MS_NODEV | noexec(home),
    )?;
    let ws = Path::new("/workspace");
    match (&plan.workspace, plan.workspace_tree) {
        (Some(_), Some(tree)) => {
            let dest = root
                .dir(Path::new("/workspace"), 0o755)
                .step(|| "mkdir /workspace".into())?;
            sys::move_mount_to(tree, dest.as_fd())
                .step(|| "attach the idmapped workspace".into())?;
            // SAFETY: the supervisor left this fd open across the clone for this one use;
            // nothing else owns it.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(tree) });
            if noexec(ws) != 0 {
                remount(root, ws, MS_NOSUID | MS_NODEV | MS_NOEXEC)?;
            }
        }
        (Some(host), None) => bind(
            root,
            &under_old(host),
            ws,
            Point::Dir,
            MS_NOSUID | MS_NODEV | noexec(ws),
        )?,
        (None, _) => root_tmpfs(
            root,
            ws,
            disk,
            inodes,
            0o755,
            MS_NOSUID | MS_NODEV | noexec(ws),
        )?,
    }
    build_dev(root, disk, inodes)?;
    build_proc(root)?;

    for (i, entry) in plan.root.iter().enumerate() {
        match entry {
            // Written in the staging tmpfs (at / until the second pivot), bound from there:
            // the bind keeps the file when the staging tree is detached.
            RootEntry::Generated { dest, contents } => {
                let src = PathBuf::from(format!("/g{i}"));
                fs::write(&src, contents).step(|| format!("write {}", src.display()))?;
                // Read-only for its owner too (the sandbox's user, who wrote it here): the
                // permission check refuses a write before the read-only bind has to.
                fs::set_permissions(&src, fs::Permissions::from_mode(0o444))
                    .step(|| format!("chmod {}", src.display()))?;
                bind(
                    root,
                    &src,
                    dest,
                    Point::File,
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                )?;
            }
            RootEntry::Bind {
                tree: Some(tree),
                dest,
                writable,
                ..
            } => {
                let at = root
                    .dir(dest, 0o755)
                    .step(|| format!("mkdir {}", dest.display()))?;
                sys::move_mount_to(*tree, at.as_fd())
                    .step(|| format!("attach the idmapped {}", dest.display()))?;
                // SAFETY: the supervisor left this fd open across the clone for this one use;
                // nothing else owns it.
                drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(*tree) });
                if *writable && noexec(dest) != 0 {
                    remount(root, dest, MS_NOSUID | MS_NODEV | MS_NOEXEC)?;
                }
            }
            RootEntry::Bind {
                src,
                dest,
                writable,
                is_dir,
                idmap,
                ..
            } => {
                let flags = if *writable {
                    MS_NOSUID | MS_NODEV | noexec(dest)
                } else {
                    MS_RDONLY | MS_NOSUID | MS_NODEV
                };
                let point = if *is_dir { Point::Dir } else { Point::File };
                if *idmap {
                    // A server's bind (a volume, a checked host directory): opened with no
                    // link followed, as `idmap::bind_trees` does as root.
                    let pinned = sys::open_unlinked_path(&under_old(src)).step(|| {
                        format!(
                            "open {} without following links (it changed since it was checked?)",
                            src.display()
                        )
                    })?;
                    bind(root, &fd_path(&pinned), dest, point, flags)?;
                } else {
                    bind(root, &under_old(src), dest, point, flags)?;
                }
            }
            // Over what a bind brought in: nothing to read, list, write or execute there.
            RootEntry::Hide { dest, is_dir: true } => root_tmpfs(
                root,
                dest,
                4096,
                1,
                0,
                MS_RDONLY | MS_NOSUID | MS_NODEV | libc::MS_NOEXEC,
            )?,
            RootEntry::Hide {
                dest,
                is_dir: false,
            } => bind(
                root,
                &under_old(Path::new("/dev/null")),
                dest,
                Point::Exists,
                MS_RDONLY | MS_NOSUID | MS_NODEV | libc::MS_NOEXEC,
            )?,
            RootEntry::NoExecDir { dir, allowed } => {
                bind(
                    root,
                    &under_old(dir),
                    dir,
                    Point::Dir,
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                )?;
                for f in allowed {
                    bind(
                        root,
                        &under_old(f),
                        f,
                        Point::Exists,
                        MS_RDONLY | MS_NOSUID | MS_NODEV,
                    )?;
                }
            }
            RootEntry::Symlink { target, link } => root
                .symlink(target, link)
                .step(|| format!("symlink {}", link.display()))?,
            RootEntry::Alias { of, at } => alias(root, of, at)?,
        }
    }

    // Everything is mounted; the root itself becomes read-only — unless it is an image's,
    // whose writable layer is the sandbox's own (and capped like /tmp).
    if plan.image.is_none() {
        sys::mount(
            None,
            Path::new(NEW),
            None,
            libc::MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
            None,
        )
        .step(|| "remount / read-only".into())?;
    } else {
        // Docker creates a `WorkingDir` the image lacks; so do we (in the writable layer),
        // inside the image's root whatever links its path goes through.
        root.dir(&plan.cwd, 0o755).step(|| {
            format!(
                "make the working directory {} inside the image's root",
                plan.cwd.display()
            )
        })?;
        // Asked for a read-only root: this mount only (its submounts, /tmp and the others,
        // stay writable), flags kept, as the last change before the pivot.
        if plan.image.as_ref().is_some_and(|i| i.read_only) {
            sys::mount(
                None,
                Path::new(NEW),
                None,
                libc::MS_REMOUNT | libc::MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                None,
            )
            .step(|| "remount the image's root read-only".into())?;
        }
    }

    // Second pivot: into the new root, then detach the staging tree (and the host with it).
    std::env::set_current_dir(NEW).step(|| "chdir newroot".into())?;
    sys::pivot_root(Path::new("."), Path::new("."))
        .step(|| "pivot_root into the new root".into())?;
    sys::umount_detach(Path::new(".")).step(|| "detach the old root".into())?;
    std::env::set_current_dir("/").step(|| "chdir /".into())?;
    Ok(writable)
}

/// Inodes /dev's own tmpfs needs: its root, six device binds, five symlinks, `shm` and `pts`.
const DEV_INODES: u64 = 20;

/// Most pseudo-terminals one sandbox may hold at once (its devpts instance's `max`).
const MAX_PTYS: u32 = 64;

fn build_dev(root: &InRoot, disk: u64, inodes: u64) -> Result<(), MountError> {
    let dev = Path::new("/dev");
    root_tmpfs(
        root,
        dev,
        64 << 10,
        DEV_INODES,
        0o755,
        MS_NOSUID | MS_NOEXEC,
    )?;
    // `tty` names whatever terminal the opening process has as its controlling one; inside,
    // that can only be a pty of the sandbox's own devpts (below), never the host's.
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new(OLD).join("dev").join(name);
        bind(
            root,
            &host,
            &dev.join(name),
            Point::File,
            MS_NOSUID | MS_NOEXEC,
        )?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        root.symlink(Path::new(target), &dev.join(name))
            .step(|| format!("symlink /dev/{name}"))?;
    }
    root_tmpfs(
        root,
        &dev.join("shm"),
        disk,
        inodes,
        0o1777,
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
    )?;
    // A devpts instance of the sandbox's own: its ptys are the only ones it can see or open
    // (the host's, and other sandboxes', live in other instances). No `gid=`: in a user
    // namespace the tty group may be unmapped; a slave belongs to whoever opened the master.
    let pts = root
        .dir(&dev.join("pts"), 0o755)
        .step(|| "mkdir /dev/pts".into())?;
    sys::mount(
        Some(Path::new("devpts")),
        &fd_path(&pts),
        Some("devpts"),
        MS_NOSUID | MS_NOEXEC,
        Some(&format!(
            "newinstance,ptmxmode=0666,mode=0620,max={MAX_PTYS}"
        )),
    )
    .step(|| "mount devpts on /dev/pts".into())?;
    // No new device nodes or files in /dev itself.
    sys::mount(
        None,
        &fd_path(&mounted(root, dev)?),
        None,
        libc::MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
        Some(&format!("size=64k,nr_inodes={DEV_INODES},mode=755")),
    )
    .step(|| "remount /dev read-only".into())?;
    Ok(())
}

fn build_proc(root: &InRoot) -> Result<(), MountError> {
    let proc_ = Path::new("/proc");
    let point = root.dir(proc_, 0o555).step(|| "mkdir /proc".into())?;
    sys::mount(
        Some(Path::new("proc")),
        &fd_path(&point),
        Some("proc"),
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
        None,
    )
    .map_err(|error| MountError {
        step: if error.raw_os_error() == Some(libc::EPERM) {
            "mount /proc (the kernel refuses a sandbox its own /proc while parts of the host's \
             are covered or read-only, as container runtimes mask them: see `cordon check`)"
                .into()
        } else {
            "mount /proc".into()
        },
        error,
    })?;
    // Kernel knobs stay read-only even if a write permission check were ever to pass.
    for sub in ["sys", "sysrq-trigger", "irq", "bus", "fs"] {
        let dest = proc_.join(sub);
        if let Ok(here) = root.resolve(&dest, Make::Nothing, 0) {
            bind(
                root,
                &fd_path(&here),
                &dest,
                Point::Exists,
                MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            )?;
        }
    }
    let _ = fs::set_permissions(
        fd_path(&mounted(root, proc_)?),
        fs::Permissions::from_mode(0o555),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_points_under_a_directory_are_found_and_unescaped() {
        let table = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:5 / /newroot/etc rw - ext4 /dev/vda rw
41 40 0:5 /h /newroot/etc/hostname rw - ext4 /dev/vda rw
42 40 0:33 / /newroot/etc/with\\040space\\134x rw - tmpfs tmpfs rw
43 22 0:34 / /newroot/etcetera rw - tmpfs tmpfs rw
44 22 0:35 / /newroot/usr rw - tmpfs tmpfs rw
45 40 0:36 / /newroot/etc/bad\\09 rw - tmpfs tmpfs rw
";
        let found = mounts_at_or_under(table, Path::new("/newroot/etc"));
        assert_eq!(
            found,
            [
                "/newroot/etc",
                "/newroot/etc/hostname",
                "/newroot/etc/with space\\x",
                "/newroot/etc/bad\\09",
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn ms_flags_become_mount_attrs() {
        assert_eq!(
            sys::mount_attr_from_ms(MS_RDONLY | MS_NOSUID | MS_NODEV),
            0x1 | 0x2 | 0x4
        );
        assert_eq!(sys::mount_attr_from_ms(MS_NOSUID | MS_NOEXEC), 0x2 | 0x8);
        assert_eq!(sys::mount_attr_from_ms(0), 0);
    }
}
