//! Filesystem attacks: reading host files, writing system directories, escaping the root
//! through `..`, `/proc` magic links and leaked descriptors, kernel knobs in `/proc/sys`, `/sys`.

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use serde_json::Value;

/// Entries the sandbox's `/` may have: the system dirs, cordon's own mounts, bind targets.
const ROOT_ENTRIES: &[&str] = &[
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "usr",
    "etc",
    "proc",
    "dev",
    "tmp",
    "workspace",
    "home",
];

fn assert_root_listing(o: &Outcome, what: &str, v: &Value) {
    let list: Vec<&str> = v
        .as_array()
        .unwrap_or_else(|| panic!("{what} was not listed: {v}\n{o}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        list.contains(&"workspace"),
        "{what} is not the sandbox root: {list:?}\n{o}"
    );
    let foreign: Vec<_> = list.iter().filter(|e| !ROOT_ENTRIES.contains(e)).collect();
    assert!(
        foreign.is_empty(),
        "{what} shows host entries {foreign:?}\n{o}"
    );
}

#[test]
fn host_files_outside_the_system_dirs_are_invisible() {
    // A world-readable secret: only the sandbox, not permissions, may keep it out.
    let dir = HostDir::new("secret");
    let token = unique("token");
    let secret = dir.file("secret.txt", &token, 0o644);
    let repo = env!("CARGO_MANIFEST_DIR");
    let shadow_exists = std::path::Path::new("/etc/shadow").exists();
    let o = py(
        &[],
        &format!(
            r#"
R["secret"] = t(lambda: open({secret:?}).read())
R["secret_dir"] = t(os.listdir, {dir:?})
R["repo"] = t(os.listdir, {repo:?})
R["root_home"] = t(os.listdir, "/root")
R["home"] = sorted(os.listdir("/home"))
R["shadow"] = t(lambda: open("/etc/shadow").read())
R["host_tmp_empty"] = sorted(os.listdir("/tmp"))
R["ls_root"] = sorted(os.listdir("/"))
out()
"#,
            secret = secret.to_str().unwrap(),
            dir = dir.str(),
        ),
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    let mut rows = vec![
        ("secret", libc::ENOENT),
        ("secret_dir", libc::ENOENT),
        ("repo", libc::ENOENT),
        ("root_home", libc::ENOENT),
    ];
    if shadow_exists {
        // /etc is the host's, read-only; shadow stays unreadable to the unprivileged sandbox.
        rows.push(("shadow", libc::EACCES));
    }
    expect_table(&o, &d, &rows);
    // /home holds the sandbox's own home directory (and `user`, a link to it for programs
    // written for E2B), none of the host's.
    assert_eq!(d["home"], serde_json::json!(["sandbox", "user"]), "{o}");
    assert_eq!(
        d["host_tmp_empty"],
        serde_json::json!([]),
        "/tmp is not fresh:\n{o}"
    );
    assert_root_listing(&o, "/", &d["ls_root"]);
    assert!(!o.stdout().contains(&token) && !o.stderr().contains(&token));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), token);
}

#[test]
fn system_dirs_and_root_are_read_only() {
    let name = unique("w");
    let passwd_before = std::fs::metadata("/etc/passwd").unwrap();
    let o = py(
        &[],
        &format!(
            r#"
n = {name:?}
def create(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
R["create_usr"] = t(create, "/usr/" + n)
R["create_usr_bin"] = t(create, "/usr/bin/" + n)
R["create_etc"] = t(create, "/etc/" + n)
R["create_root"] = t(create, "/" + n)
R["mkdir_root"] = t(os.mkdir, "/" + n)
R["create_dev"] = t(create, "/dev/" + n)
R["create_proc"] = t(create, "/proc/" + n)
R["append_passwd"] = t(lambda: open("/etc/passwd", "a"))
R["write_python"] = t(lambda: open("/usr/bin/python3", "r+b"))
R["unlink_etc"] = t(os.unlink, "/etc/hostname")
R["rename_usr"] = t(os.rename, "/usr/bin/python3", "/usr/bin/" + n)
R["chmod_python"] = t(os.chmod, "/usr/bin/python3", 0o777)
R["symlink_root"] = t(os.symlink, "/tmp", "/" + n)
R["rmdir_usr"] = t(os.rmdir, "/usr/games") if os.path.isdir("/usr/games") else errno.EROFS
R["remount"] = sc({mount}, S(b"none"), S(b"/usr"), 0, 0x20 | 0x1, 0)
R["tmp_ok"] = t(create, "/tmp/" + n)
R["ws_ok"] = t(create, "/workspace/" + n)
out()
"#,
            mount = libc::SYS_mount
        ),
    );
    o.assert_ok();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("create_usr", libc::EROFS),
            ("create_usr_bin", libc::EROFS),
            ("create_etc", libc::EROFS),
            ("create_root", libc::EROFS),
            ("mkdir_root", libc::EROFS),
            ("create_dev", libc::EROFS),
            // procfs refuses new files itself.
            ("create_proc", libc::ENOENT),
            // Existing files: a host file owned by an unmapped uid, and cordon's own passwd
            // (mode 0444), so the permission check comes first.
            ("append_passwd", libc::EACCES),
            ("write_python", libc::EACCES),
            ("unlink_etc", libc::EROFS),
            ("rename_usr", libc::EROFS),
            ("chmod_python", libc::EROFS),
            ("symlink_root", libc::EROFS),
            ("rmdir_usr", libc::EROFS),
            ("remount", libc::EPERM),
            ("tmp_ok", 0),
            ("ws_ok", 0),
        ],
    );
    // From outside: nothing appeared, nothing changed.
    for p in ["/usr", "/usr/bin", "/etc", "/"] {
        let path = std::path::Path::new(p).join(&name);
        assert!(!path.exists(), "{} appeared on the host", path.display());
    }
    let after = std::fs::metadata("/etc/passwd").unwrap();
    assert_eq!(passwd_before.mtime(), after.mtime());
    assert_eq!(passwd_before.len(), after.len());
    assert!(std::path::Path::new("/usr/bin/python3").exists());
}

#[test]
fn dotdot_and_proc_magic_links_stay_inside_the_root() {
    let dir = HostDir::new("dotdot");
    let token = unique("token");
    let secret = dir.file("secret.txt", &token, 0o644);
    let rel = secret.to_str().unwrap().trim_start_matches('/').to_string();
    let o = py(
        &[],
        &format!(
            r#"
def ls(p):
    try:
        return sorted(os.listdir(p))
    except OSError as e:
        return e.errno
for k, p in [("dotdot", "/../../.."), ("ws_dotdot", "/workspace/../../../.."),
             ("cwd_dotdot", "/proc/self/cwd/../../.."), ("init_root", "/proc/1/root"),
             ("init_root_dotdot", "/proc/1/root/../../.."), ("self_root_dotdot", "/proc/self/root/../.."),
             ("init_cwd_dotdot", "/proc/1/cwd/../.."), ("dev_fd_dotdot", "/dev/fd/../../../..")]:
    R[k] = ls(p)
for k, p in [("via_dotdot", "/tmp/../../../../" + {rel:?}),
             ("via_self_root", "/proc/self/root/../../" + {rel:?}),
             ("via_init_root", "/proc/1/root/../" + {rel:?}),
             ("via_init_cwd", "/proc/1/cwd/../../" + {rel:?})]:
    R[k] = t(lambda: open(p).read())
os.chdir("/proc/self/cwd")
for _ in range(20):
    os.chdir("..")
R["getcwd"] = os.getcwd()
R["cwd_ls"] = ls(".")
R["symlink_escape"] = t(lambda: (os.symlink("/../../../../" + {rel:?}, "/tmp/l"), open("/tmp/l").read()))
out()
"#
        ),
    );
    o.assert_ok();
    let d = o.data();
    for k in [
        "dotdot",
        "ws_dotdot",
        "cwd_dotdot",
        "self_root_dotdot",
        "dev_fd_dotdot",
        "cwd_ls",
    ] {
        assert_root_listing(&o, k, &d[k]);
    }
    // The sandbox's init is not dumpable: its /proc entries are out of the payload's reach.
    for k in ["init_root", "init_root_dotdot", "init_cwd_dotdot"] {
        assert_eq!(d[k], libc::EACCES, "{k}: {o}");
    }
    expect_table(
        &o,
        &d,
        &[
            ("via_dotdot", libc::ENOENT),
            ("via_self_root", libc::ENOENT),
            ("via_init_root", libc::EACCES),
            ("via_init_cwd", libc::EACCES),
            ("symlink_escape", libc::ENOENT),
        ],
    );
    assert_eq!(d["getcwd"], "/", "{o}");
    assert!(!o.stdout().contains(&token));
}

/// Opens `path` in the test process with O_CLOEXEC (so no other concurrently spawned child
/// gets it); `Cmd::leak_fd` then hands a non-CLOEXEC duplicate to the one child under test.
fn open_dir(path: &std::path::Path) -> std::fs::File {
    std::fs::File::open(path).expect("open host dir")
}

const LEAK_FD: i32 = 77;

#[test]
fn leaked_descriptors_are_closed_before_the_payload_runs() {
    let dir = HostDir::new("leak");
    let token = unique("token");
    dir.file("secret.txt", &token, 0o644);
    let host_dir = open_dir(&dir.path);

    // Control: the leak works — a plain child really inherits fd 77 pointing at the host dir.
    let control = Cmd::new("/bin/sh")
        .args(["-c", "readlink /proc/self/fd/77"])
        .leak_fd(&host_dir, LEAK_FD)
        .run();
    assert_eq!(
        control.stdout.trim(),
        dir.str(),
        "control leak failed: {control:?}"
    );

    let o = py_cmd(
        Cmd::cordon().leak_fd(&host_dir, LEAK_FD),
        &[],
        r#"
names = os.listdir("/proc/self/fd")
alive = {}
for n in names:
    try:
        alive[n] = os.readlink("/proc/self/fd/" + n)
    except OSError:
        pass  # the listing's own descriptor, closed by now
R["fds"] = sorted(alive)
R["targets"] = alive
R["fstat77"] = t(os.fstat, 77)
R["via_self_fd"] = t(lambda: open("/proc/self/fd/77/secret.txt").read())
R["via_dev_fd"] = t(lambda: open("/dev/fd/77/secret.txt").read())
R["openat77"] = t(lambda: os.open("secret.txt", os.O_RDONLY, dir_fd=77))
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(
        d["fds"],
        serde_json::json!(["0", "1", "2"]),
        "the payload has descriptors beyond stdio:\n{o}"
    );
    expect_table(
        &o,
        &d,
        &[
            ("fstat77", libc::EBADF),
            ("via_self_fd", libc::ENOENT),
            ("via_dev_fd", libc::ENOENT),
            ("openat77", libc::EBADF),
        ],
    );
    assert!(!o.stdout().contains(&token));
    assert!(!o.stdout().contains(dir.str()), "host path visible:\n{o}");
}

#[test]
fn leaked_descriptors_are_not_reachable_through_the_sandbox_init() {
    let dir = HostDir::new("leakinit");
    let token = unique("token");
    dir.file("secret.txt", &token, 0o644);
    let host_dir = open_dir(&dir.path);
    let host_root = open_dir(std::path::Path::new("/"));
    let o = py_cmd(
        Cmd::cordon()
            .leak_fd(&host_dir, LEAK_FD)
            .leak_fd(&host_root, LEAK_FD + 1),
        &[],
        r#"
links = {}
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        for f in os.listdir("/proc/%s/fd" % p):
            try:
                links["%s/%s" % (p, f)] = os.readlink("/proc/%s/fd/%s" % (p, f))
            except OSError:
                pass
    except OSError:
        pass
R["links"] = links
R["stat_secret"] = t(os.stat, "/proc/1/fd/77/secret.txt")
R["read_secret"] = t(lambda: open("/proc/1/fd/77/secret.txt").read())
R["chdir_host_root"] = t(os.chdir, "/proc/1/fd/78")
R["stat_host_file"] = t(os.stat, "/proc/1/fd/78" + sys.executable)
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    let leaked: Vec<_> = d["links"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_str().is_some_and(|s| s == dir.str() || s == "/"))
                .map(|(k, v)| format!("{k} -> {v}"))
                .collect()
        })
        .unwrap_or_default();
    // The sandbox's own root also reads as "/", so only the explicit host dir is conclusive
    // for the listing; the accesses below are conclusive for both.
    assert!(
        !leaked.iter().any(|l| l.contains(dir.str())),
        "a host directory is reachable inside the sandbox: {leaked:?}\n{o}"
    );
    for k in [
        "stat_secret",
        "read_secret",
        "chdir_host_root",
        "stat_host_file",
    ] {
        assert_ne!(d[k], "ok", "{k} succeeded through a leaked host fd:\n{o}");
    }
}

#[test]
fn proc_sys_sysrq_and_sys_cannot_be_written() {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let core_before = read("/proc/sys/kernel/core_pattern");
    let hostname_before = read("/proc/sys/kernel/hostname");
    let o = py(
        &[],
        r#"
def w(p, v):
    with open(p, "w") as f:
        f.write(v)
R["hostname"] = t(w, "/proc/sys/kernel/hostname", "pwned")
R["core_pattern"] = t(w, "/proc/sys/kernel/core_pattern", "|/tmp/x")
R["drop_caches"] = t(w, "/proc/sys/vm/drop_caches", "3")
R["ip_forward"] = t(w, "/proc/sys/net/ipv4/ip_forward", "1")
R["sysrq"] = t(w, "/proc/sysrq-trigger", "h")
R["sysrq_exists"] = os.path.exists("/proc/sysrq-trigger")
R["sys"] = t(os.listdir, "/sys")
R["sys_write"] = t(w, "/sys/kernel/uevent_helper", "/tmp/x")
R["mkdir_sys"] = t(os.mkdir, "/sys")
R["kcore"] = t(lambda: open("/proc/kcore", "rb").read(1))
R["read_sys_ok"] = t(lambda: open("/proc/sys/kernel/ostype").read())
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("hostname", libc::EROFS),
            ("core_pattern", libc::EROFS),
            ("drop_caches", libc::EROFS),
            ("ip_forward", libc::EROFS),
            ("sysrq", libc::ENOENT),
            ("sys", libc::ENOENT),
            ("sys_write", libc::ENOENT),
            ("mkdir_sys", libc::EROFS),
            ("kcore", libc::ENOENT),
            ("read_sys_ok", 0),
        ],
    );
    assert_eq!(d["sysrq_exists"], false, "{o}");
    assert_eq!(read("/proc/sys/kernel/core_pattern"), core_before);
    assert_eq!(read("/proc/sys/kernel/hostname"), hostname_before);
}

#[test]
fn dev_is_minimal_and_device_nodes_cannot_be_made() {
    let o = py(
        &[],
        r#"
R["dev"] = sorted(os.listdir("/dev"))
R["null"] = t(lambda: open("/dev/null", "w").write("x"))
R["zero"] = open("/dev/zero", "rb").read(4).hex()
R["urandom"] = len(open("/dev/urandom", "rb").read(16))
R["full"] = t(lambda: os.write(os.open("/dev/full", os.O_WRONLY), b"x"))
for n in ["tty", "console", "mem", "kmsg", "sda", "vda", "net/tun", "fuse", "kvm", "ptmx"]:
    R[n] = t(lambda: os.open("/dev/" + n, os.O_RDONLY | os.O_NOCTTY))
R["pts"] = sorted(os.listdir("/dev/pts"))
R["mknod_null"] = t(os.mknod, "/tmp/null", 0o666 | 0o020000, os.makedev(1, 3))
R["mknod_disk"] = t(os.mknod, "/tmp/disk", 0o666 | 0o060000, os.makedev(8, 0))
R["shm"] = t(lambda: open("/dev/shm/x", "w").write("x"))
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    let dev: Vec<&str> = d["dev"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let allowed = [
        "null", "zero", "full", "random", "urandom", "shm", "fd", "stdin", "stdout", "stderr",
        "tty", "ptmx", "pts",
    ];
    let extra: Vec<_> = dev.iter().filter(|n| !allowed.contains(n)).collect();
    assert!(extra.is_empty(), "unexpected /dev entries {extra:?}\n{o}");
    assert_eq!(d["zero"], "00000000");
    assert_eq!(d["urandom"], 16);
    let mut rows = vec![
        ("null", 0),
        ("full", libc::ENOSPC),
        ("mknod_null", libc::EPERM),
        ("mknod_disk", libc::EPERM),
        ("shm", 0),
        // The sandbox's own devpts: a new pty of its own opens; `/dev/tty` names the
        // opener's controlling terminal, and a sandbox has none but its own ptys.
        ("ptmx", 0),
        ("tty", libc::ENXIO),
    ];
    for n in [
        "console", "mem", "kmsg", "sda", "vda", "net/tun", "fuse", "kvm",
    ] {
        rows.push((n, libc::ENOENT));
    }
    expect_table(&o, &d, &rows);
    // Only ptys of its own devpts instance, never the host's: the one just opened, if any.
    let pts: Vec<&str> = d["pts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        pts.iter().all(|p| *p == "ptmx" || *p == "0"),
        "unexpected /dev/pts entries {pts:?}\n{o}"
    );
}

#[test]
fn ro_bind_is_readable_but_not_writable() {
    // World-writable on the host: only the read-only bind (and Landlock) can refuse writes.
    let dir = HostDir::new("ro");
    set_mode(&dir.path, 0o777);
    let token = unique("ro");
    let f = dir.file("data.txt", &token, 0o666);
    let single = dir.file("single.txt", "single", 0o666);
    let o = py(
        &[
            "--ro",
            &format!("{}:/data", dir.str()),
            "--ro",
            &format!("{}:/opt/single.txt", single.display()),
        ],
        r#"
R["read"] = open("/data/data.txt").read()
R["read_single"] = open("/opt/single.txt").read()
R["write"] = t(lambda: open("/data/data.txt", "w").write("pwned"))
R["append"] = t(lambda: open("/data/data.txt", "a").write("pwned"))
R["create"] = t(lambda: open("/data/new.txt", "w").write("pwned"))
R["unlink"] = t(os.unlink, "/data/data.txt")
R["rename"] = t(os.rename, "/data/data.txt", "/data/moved.txt")
R["chmod"] = t(os.chmod, "/data/data.txt", 0o600)
R["utime"] = t(os.utime, "/data/data.txt", (0, 0))
R["write_single"] = t(lambda: open("/opt/single.txt", "w").write("pwned"))
R["truncate"] = t(os.truncate, "/data/data.txt", 0)
out()
"#,
    );
    o.assert_ok();
    let d = o.data();
    assert_eq!(d["read"], token.as_str(), "{o}");
    assert_eq!(d["read_single"], "single", "{o}");
    expect_table(
        &o,
        &d,
        &[
            ("write", libc::EROFS),
            ("append", libc::EROFS),
            ("create", libc::EROFS),
            ("unlink", libc::EROFS),
            ("rename", libc::EROFS),
            ("chmod", libc::EROFS),
            ("utime", libc::EROFS),
            ("write_single", libc::EROFS),
            ("truncate", libc::EROFS),
        ],
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), token);
    assert_eq!(std::fs::read_to_string(&single).unwrap(), "single");
    let mut names: Vec<_> = std::fs::read_dir(&dir.path)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["data.txt", "single.txt"]);
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o666);
}

#[test]
fn rw_bind_and_workspace_are_writable_and_visible_on_the_host() {
    let ws = HostDir::new("ws");
    let rw = HostDir::new("rw");
    set_mode(&rw.path, 0o777);
    // As root, cordon runs the sandbox as the workspace's owner: give it a non-root owner.
    let owner = if is_root() {
        chown(&ws.path, 65534, 65534);
        65534
    } else {
        euid()
    };
    std::fs::write(ws.join("input.txt"), "from host").unwrap();
    if is_root() {
        chown(&ws.join("input.txt"), 65534, 65534);
    }
    let o = py(
        &[
            "--workspace",
            ws.str(),
            "--rw",
            &format!("{}:/rw", rw.str()),
        ],
        r#"
R["cwd"] = os.getcwd()
R["input"] = open("/workspace/input.txt").read()
os.makedirs("/workspace/sub/dir")
open("/workspace/sub/dir/out.txt", "w").write("from sandbox")
open("/rw/rw.txt", "w").write("rw ok")
R["uid"] = os.getuid()
# Hard links from the read-only system binds into the host-backed workspace (same host
# filesystem) would hand host files to whoever later processes the workspace.
R["link_passwd"] = t(os.link, "/etc/passwd", "/workspace/pw")
R["link_python"] = t(os.link, "/usr/bin/python3", "/workspace/py")
R["rename_in"] = t(os.rename, "/etc/hostname", "/workspace/hn")
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    expect_table(
        &o,
        &d,
        &[
            ("link_passwd", libc::EXDEV),
            ("link_python", libc::EXDEV),
            ("rename_in", libc::EXDEV),
        ],
    );
    for name in ["pw", "py", "hn"] {
        assert!(!ws.join(name).exists(), "{name} appeared in the workspace");
    }
    assert_eq!(d["cwd"], "/workspace");
    assert_eq!(d["input"], "from host");
    let out = ws.join("sub/dir/out.txt");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "from sandbox");
    assert_eq!(
        std::fs::metadata(&out).unwrap().uid(),
        owner,
        "files in the workspace must belong to the workspace's owner"
    );
    assert_eq!(std::fs::read_to_string(rw.join("rw.txt")).unwrap(), "rw ok");
    assert_ne!(std::fs::metadata(rw.join("rw.txt")).unwrap().uid(), 0);
    assert_eq!(o.enforcement()["host_uid"].as_u64(), Some(u64::from(owner)));
}

#[test]
fn ro_bind_under_tmp_is_not_silently_hidden() {
    let dir = HostDir::new("rotmp");
    let f = dir.file("visible.txt", "here", 0o644);
    let path = f.to_str().unwrap();
    assert!(
        path.starts_with("/tmp/"),
        "this test needs TMPDIR under /tmp"
    );
    let out = Cmd::cordon()
        .args(["run", "--json", "--ro", path, "--", "cat", path])
        .run();
    if out.code == Some(125) {
        // Refusing the bind with a clear message is an acceptable contract too.
        assert!(out.stderr.contains("--ro"), "{out:?}");
        return;
    }
    let o = out.outcome();
    o.assert_ok();
    assert_eq!(o.stdout(), "here");
}

#[test]
fn a_root_owned_workspace_is_writable_and_stays_roots() {
    if !is_root() {
        eprintln!("only cordon run by root maps a root-owned workspace; rootless owns its own");
        return;
    }
    let ws = HostDir::new("rootws");
    ws.file("input.txt", "from host\n", 0o644);
    let o = py(
        &["--workspace", ws.str()],
        r#"
R["uid"] = os.getuid()
R["input_owner"] = os.stat("/workspace/input.txt").st_uid
with open("/workspace/input.txt", "a") as f: f.write("from sandbox\n")
os.makedirs("/workspace/sub/dir")
open("/workspace/sub/dir/out.txt", "w").write("new")
out()
"#,
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    assert_eq!(d["uid"], 1000);
    assert_eq!(
        d["input_owner"], 1000,
        "root's files are the sandbox user's inside"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("input.txt")).unwrap(),
        "from host\nfrom sandbox\n"
    );
    for p in ["sub", "sub/dir", "sub/dir/out.txt", "input.txt"] {
        let m = std::fs::metadata(ws.join(p)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (0, 0),
            "{p} must stay root's on the host"
        );
    }
    // The sandbox still never is host root.
    let host_uid = o.enforcement()["host_uid"].as_u64().unwrap();
    assert_ne!(host_uid, 0);
    let notes = o.enforcement()["notes"].to_string();
    assert!(notes.contains("idmapped"), "{notes}");
}

#[cfg(target_arch = "x86_64")]
const CREAT: Option<i64> = Some(libc::SYS_creat);
#[cfg(not(target_arch = "x86_64"))]
const CREAT: Option<i64> = None;

/// A workspace is a host directory: a setuid or setgid file planted there would hand its
/// owner's privileges (root's, for a root-owned workspace) to whoever on the host runs it.
#[test]
fn setuid_and_setgid_files_cannot_be_planted() {
    let ws = HostDir::new("setid");
    if is_root() {
        // Root-owned (the HostDir's owner as root): the idmapped case, the dangerous one.
        assert_eq!(std::fs::metadata(&ws.path).unwrap().uid(), 0);
    }
    let o = py(
        &["--workspace", ws.str()],
        &format!(
            r##"
w = "/workspace/"
open(w + "plain", "w").write("#!/bin/sh\n")
fd = os.open(w + "plain", os.O_RDONLY)
d = os.open("/workspace", os.O_RDONLY | os.O_DIRECTORY)
R["chmod_suid"] = t(os.chmod, w + "plain", 0o4755)
R["chmod_sgid"] = t(os.chmod, w + "plain", 0o2755)
R["fchmod_suid"] = t(os.fchmod, fd, 0o4755)
R["fchmodat_suid"] = t(lambda: os.chmod("plain", 0o4755, dir_fd=d))
R["open_suid"] = t(os.open, w + "o", os.O_CREAT | os.O_WRONLY, 0o4755)
R["open_sgid"] = t(os.open, w + "g", os.O_CREAT | os.O_WRONLY, 0o2755)
R["openat_suid"] = t(lambda: os.open("oa", os.O_CREAT | os.O_WRONLY, 0o6755, dir_fd=d))
R["tmpfile_suid"] = t(os.open, "/workspace", os.O_TMPFILE | os.O_WRONLY, 0o4755)
R["mknod_suid"] = t(os.mknod, w + "n", 0o100000 | 0o4755)
{creat}
# Numbers from 424 on are the same on every architecture.
R["fchmodat2_suid"] = sc(452, d, S(b"plain\0"), 0o4755, 0)    # fchmodat2
# openat2 carries its mode in memory the filter cannot read: refused as unsupported.
R["openat2"] = sc({openat2}, d, S(b"x\0"), BUF(24), 24)
# Controls: ordinary modes still work.
R["chmod_755"] = t(os.chmod, w + "plain", 0o755)
R["open_644"] = t(os.open, w + "ok", os.O_CREAT | os.O_WRONLY, 0o644)
R["mkdir_2775"] = t(os.mkdir, w + "dir", 0o775)
out()
"##,
            creat = CREAT
                .map(|nr| format!(r#"R["creat_suid"] = sc({nr}, S(b"/workspace/c\0"), 0o4755)"#))
                .unwrap_or_default(),
            openat2 = libc::SYS_openat2
        ),
    );
    o.assert_ok().assert_fully_confined();
    let d = o.data();
    let expected = [
        ("chmod_suid", libc::EPERM),
        ("chmod_sgid", libc::EPERM),
        ("fchmod_suid", libc::EPERM),
        ("fchmodat_suid", libc::EPERM),
        ("open_suid", libc::EPERM),
        ("open_sgid", libc::EPERM),
        ("openat_suid", libc::EPERM),
        ("tmpfile_suid", libc::EPERM),
        ("mknod_suid", libc::EPERM),
        ("creat_suid", libc::EPERM),
        ("fchmodat2_suid", libc::EPERM),
        ("openat2", libc::ENOSYS),
        ("chmod_755", 0),
        ("open_644", 0),
        ("mkdir_2775", 0),
    ];
    // creat exists only in x86_64's legacy table (aarch64 has only openat, checked above).
    let expected: Vec<_> = expected
        .into_iter()
        .filter(|(name, _)| *name != "creat_suid" || CREAT.is_some())
        .collect();
    expect_table(&o, &d, &expected);
    // From outside: nothing in the workspace carries a set-id bit.
    for e in std::fs::read_dir(&ws.path).unwrap().flatten() {
        let mode = e.metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "{:?} has mode {mode:o}", e.path());
    }
    assert_eq!(
        std::fs::metadata(ws.join("plain")).unwrap().mode() & 0o7777,
        0o755
    );
}
