//! cordon inside a container. Docker binds its own `/etc/hostname`, `/etc/hosts` and
//! `/etc/resolv.conf` over the image's; in the user namespace cordon creates, those mounts are
//! locked to `/etc`, and the kernel refuses to bind `/etc` without them (`EINVAL`: it would
//! uncover what they cover) — every `cordon run` failed there. The layout is reproduced here in
//! a private mount namespace (see `common::hosts`), as root and rootless; scripts/test.sh also
//! runs the whole filesystem attack suite (`fs.rs`) in it (`CORDON_TEST_HOST=container`).

mod common;

use std::os::unix::fs::MetadataExt;

use common::hosts::{HostLayout, CONTAINER_HOSTNAME};
use common::*;

/// The reproduction is faithful: in a user and mount namespace made inside the layout (as
/// cordon makes them), `/etc` cannot be bound alone, only with the mounts beneath it.
#[test]
fn the_layout_locks_the_mounts_beneath_etc() {
    let target = HostDir::new("lockcheck");
    let script = format!(
        r#"
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(r):
    return 0 if r == 0 else ctypes.get_errno()
R = {{"unshare": errno_of(libc.unshare(0x10000000 | 0x20000))}}
libc.mount(None, b"/", None, (1 << 18) | 0x4000, None)
R["plain"] = errno_of(libc.mount(b"/etc", {t:?}.encode(), None, 0x1000, None))
R["recursive"] = errno_of(libc.mount(b"/etc", {t:?}.encode(), None, 0x1000 | 0x4000, None))
R["hostname"] = open({t:?} + "/hostname").read()
print(json.dumps(R))
"#,
        t = target.str()
    );
    let f = HostLayout::container()
        .exec(HOST_PYTHON)
        .args(["-c", &script])
        .run();
    assert_eq!(f.code, Some(0), "{f:?}");
    let r: serde_json::Value = serde_json::from_str(f.stdout.trim()).expect("json");
    assert_eq!(r["unshare"], 0, "{r}");
    assert_eq!(
        r["plain"],
        libc::EINVAL,
        "a plain bind of /etc was not refused: {r}"
    );
    assert_eq!(r["recursive"], 0, "{r}");
    assert_eq!(r["hostname"], CONTAINER_HOSTNAME, "{r}");
}

/// A directory to cover inside the system dirs, as a container may (the brief's "/usr, /etc
/// or a lib directory"): the first that exists.
fn system_dir_to_cover() -> &'static str {
    ["/usr/local/share", "/usr/share/doc", "/usr/local"]
        .into_iter()
        .find(|d| std::path::Path::new(d).is_dir())
        .expect("no directory under /usr to cover")
}

/// Attacks the covered parts of the system dirs from inside the sandbox: they read as the
/// container has them, and nothing in them can be written, unmounted to uncover what lies
/// beneath, or carry set-id or device semantics.
fn system_dirs_hold(layout: HostLayout, what: &str) {
    let cover = HostDir::new("cover");
    let token = unique("cover");
    cover.file("marker", &token, 0o644);
    let usr = system_dir_to_cover();
    let mut layout = layout;
    layout
        .binds
        .push((cover.str().to_string(), usr.to_string()));
    let o = py_cmd(
        layout.cordon(),
        &[],
        &format!(
            r#"
def create(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
usr = {usr:?}
R["hostname"] = open("/etc/hostname").read()
R["marker"] = open(usr + "/marker").read()
R["write_hostname"] = t(lambda: open("/etc/hostname", "w"))
R["write_hosts"] = t(lambda: open("/etc/hosts", "a"))
R["create_etc"] = t(create, "/etc/cordon-x")
R["create_usr"] = t(create, usr + "/cordon-x")
R["write_marker"] = t(lambda: open(usr + "/marker", "w"))
R["unlink_marker"] = t(os.unlink, usr + "/marker")
R["umount_hostname"] = sc({umount2}, S(b"/etc/hostname"), 2)
R["umount_usr"] = sc({umount2}, S(usr.encode()), 2)
for p in ["/etc", "/etc/hostname", usr]:
    f = os.statvfs(p).f_flag
    R["flags " + p] = [bool(f & os.ST_RDONLY), bool(f & os.ST_NOSUID), bool(f & os.ST_NODEV)]
out()
"#,
            umount2 = libc::SYS_umount2
        ),
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["hostname"], CONTAINER_HOSTNAME, "{what}: {o}");
    assert_eq!(d["marker"], token.as_str(), "{what}: {o}");
    expect_table(
        &o,
        &d,
        &[
            ("write_hostname", libc::EROFS),
            ("write_hosts", libc::EROFS),
            ("create_etc", libc::EROFS),
            ("create_usr", libc::EROFS),
            ("write_marker", libc::EROFS),
            ("unlink_marker", libc::EROFS),
            ("umount_hostname", libc::EPERM),
            ("umount_usr", libc::EPERM),
        ],
    );
    for p in ["/etc", "/etc/hostname", usr] {
        assert_eq!(
            d[&format!("flags {p}")],
            serde_json::json!([true, true, true]),
            "{what}: {p} is not read-only, nosuid and nodev:\n{o}"
        );
    }
    if detect_landlock() {
        assert!(o.enforcement()["landlock_abi"].as_u64() > Some(0), "{o}");
    }
    // From outside: the covering directory is as it was.
    let names: Vec<_> = std::fs::read_dir(&cover.path)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["marker"], "{what}");
    assert_eq!(
        std::fs::read_to_string(cover.join("marker")).unwrap(),
        token
    );
}

fn detect_landlock() -> bool {
    let o = Cmd::cordon().args(["check", "--json"]).run();
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("check --json");
    v["landlock_abi"].as_u64() > Some(0)
}

#[test]
fn a_sandbox_starts_in_a_container_and_its_system_dirs_hold() {
    system_dirs_hold(HostLayout::container(), "container");
}

/// Before Linux 5.12 there is no `mount_setattr`: each mount of the tree is remounted in turn
/// (the kernel's answer reproduced by a seccomp filter in the layout).
#[test]
fn on_a_kernel_without_mount_setattr_too() {
    let mut layout = HostLayout::container();
    layout.refuse.push((libc::SYS_mount_setattr, libc::ENOSYS));
    system_dirs_hold(layout, "container without mount_setattr");
}

/// `--ro` and `--rw` sources with mounts beneath them come with those mounts: read-only (and
/// nosuid, nodev) all the way down for `--ro`; writable, nosuid and nodev for `--rw`.
#[test]
fn binds_with_mounts_beneath_them_keep_their_modes() {
    let ro = HostDir::new("ro-outer");
    std::fs::create_dir(ro.join("sub")).unwrap();
    let ro_cover = HostDir::new("ro-cover");
    set_mode(&ro_cover.path, 0o777);
    ro_cover.file("inner", "ro inner", 0o666);
    let rw = HostDir::new("rw-outer");
    set_mode(&rw.path, 0o777);
    std::fs::create_dir(rw.join("sub")).unwrap();
    let rw_cover = HostDir::new("rw-cover");
    set_mode(&rw_cover.path, 0o777);
    let mut layout = HostLayout::container();
    layout.binds = vec![
        (ro_cover.str().into(), ro.join("sub").display().to_string()),
        (rw_cover.str().into(), rw.join("sub").display().to_string()),
    ];
    let o = py_cmd(
        layout.cordon(),
        &[
            "--ro",
            &format!("{}:/data", ro.str()),
            "--rw",
            &format!("{}:/out", rw.str()),
        ],
        r#"
R["inner"] = open("/data/sub/inner").read()
R["write_inner"] = t(lambda: open("/data/sub/inner", "w"))
R["create_data_sub"] = t(lambda: open("/data/sub/new", "w"))
R["create_out_sub"] = t(lambda: open("/out/sub/new", "w").write("from sandbox"))
for p in ["/data/sub", "/out/sub"]:
    f = os.statvfs(p).f_flag
    R["flags " + p] = [bool(f & os.ST_RDONLY), bool(f & os.ST_NOSUID), bool(f & os.ST_NODEV)]
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["inner"], "ro inner", "{o}");
    expect_table(
        &o,
        &d,
        &[
            ("write_inner", libc::EROFS),
            ("create_data_sub", libc::EROFS),
            ("create_out_sub", 0),
        ],
    );
    assert_eq!(d["flags /data/sub"], serde_json::json!([true, true, true]));
    assert_eq!(d["flags /out/sub"], serde_json::json!([false, true, true]));
    // The write went where the container has /out/sub: into the covering directory.
    let written = rw_cover.join("new");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "from sandbox");
    assert_ne!(std::fs::metadata(&written).unwrap().uid(), 0);
    assert_eq!(
        std::fs::read_to_string(ro_cover.join("inner")).unwrap(),
        "ro inner"
    );
    assert!(!ro_cover.join("new").exists());
}
