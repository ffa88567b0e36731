//! Hosts that say no, reproduced on this machine: cordon started inside a layout a container
//! runtime or a hardened kernel would give it. A small launcher (the host's python: the suites
//! use no `unsafe`) builds the layout around itself and then execs cordon, so cordon — and
//! everything it starts — lives in it:
//!
//! - `files`, `binds`: files (written by the launcher, then unlinked: nothing is left on the
//!   host) or host directories bound over paths of the host's tree, as Docker binds
//!   `/etc/hostname`, `/etc/hosts` and `/etc/resolv.conf`, in a mount namespace of their own
//!   (and, rootless, a user namespace mapping only the caller, as rootless Podman does). A
//!   user namespace cordon creates below sees them as *locked* mounts.
//! - `docker_seccomp`: a seccomp filter refusing namespace creation the way Docker's default
//!   profile does (`unshare` and `clone` with a `CLONE_NEW*` flag: `EPERM`; `clone3`:
//!   `ENOSYS`).
//! - `max_user_namespaces`: a user namespace whose `user.max_user_namespaces` is set (0: no
//!   more user namespaces below it), as on a host with the sysctl at 0 — without touching the
//!   real host's setting.
//! - `refuse`: syscalls that fail with a given errno: `ENOSYS` as on an older kernel (or one
//!   without Landlock), `EPERM` as under an older Docker's profile.

use std::ffi::OsString;

use serde_json::json;

use super::{cordon_bin, Cmd, HOST_PYTHON};

#[derive(Default, Clone)]
pub struct HostLayout {
    /// `(dest, content)`: a file with this content bound over `dest`.
    pub files: Vec<(String, String)>,
    /// `(source, dest)`: a host file or directory bound over `dest`.
    pub binds: Vec<(String, String)>,
    pub docker_seccomp: bool,
    pub max_user_namespaces: Option<u32>,
    /// `(syscall number, errno)`.
    pub refuse: Vec<(i64, i32)>,
}

/// What [`HostLayout::container`] puts in /etc/hostname.
pub const CONTAINER_HOSTNAME: &str = "c0ffee123456\n";

/// What the launcher prints (exit 121) when it cannot build the layout: never mistaken for
/// cordon's own failure (125).
pub const LAYOUT_FAILED: i32 = 121;

const LAUNCHER: &str = r#"
import ctypes, json, os, struct, sys, tempfile
spec = json.loads(sys.argv[1])
argv = sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
def check(r, what):
    if r != 0:
        sys.stderr.write("host layout: %s: %s\n" % (what, os.strerror(ctypes.get_errno())))
        sys.exit(121)
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 1 << 18
uid, gid = os.geteuid(), os.getegid()
mounts = spec["binds"] or spec["files"]
userns = spec["max_user_namespaces"] is not None or (mounts and uid != 0)
if userns:
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER)")
    # Only the caller's own ids can be mapped from inside. (cordon started as root in here
    # could not map its sandbox to another uid: what such a layout tests, as root, is only
    # what happens before that — the namespaces it is refused.)
    write("/proc/self/uid_map", "%d %d 1" % (uid, uid))
    write("/proc/self/setgroups", "deny")
    write("/proc/self/gid_map", "%d %d 1" % (gid, gid))
elif mounts:
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
if userns or mounts:
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
for src, dest in spec["binds"]:
    check(libc.mount(src.encode(), dest.encode(), None, MS_BIND, None), "bind over " + dest)
if spec["files"]:
    # The bind keeps each file alive; its name on the host goes at once.
    d = tempfile.mkdtemp(prefix="cordontest-layout-")
    for i, (dest, content) in enumerate(spec["files"]):
        src = os.path.join(d, str(i))
        write(src, content)
        os.chmod(src, 0o666)  # only the read-only mount can refuse a write
        check(libc.mount(src.encode(), dest.encode(), None, MS_BIND, None), "bind over " + dest)
        os.unlink(src)
    os.rmdir(d)
if spec["max_user_namespaces"] is not None:
    write("/proc/sys/user/max_user_namespaces", str(spec["max_user_namespaces"]))
rules = spec["rules"]
if rules:
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    body = []
    for nr, mask, err in rules:
        if mask is None:
            block = [(RET, 0, 0, ERRNO | err)]
        else:  # refused only when the low word of arg0 has a bit of mask; then reload nr
            block = [(LD, 0, 0, 16), (JSET, 0, 1, mask), (RET, 0, 0, ERRNO | err), (LD, 0, 0, 0)]
        body.append((JEQ, 0, len(block), nr))
        body += block
    prog = [(LD, 0, 0, 4), (JEQ, 0, len(body) + 1, spec["audit_arch"]), (LD, 0, 0, 0)]
    prog += body + [(RET, 0, 0, ALLOW)]
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog), ctypes.addressof(buf))
    check(libc.prctl(38, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), "no_new_privs")
    check(libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")
os.execv(argv[0], argv)
"#;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

impl HostLayout {
    /// Docker's layout of /etc: its own `hostname`, `hosts` and `resolv.conf` bound over the
    /// host's (those the host has: a bind needs something to cover).
    pub fn container() -> HostLayout {
        let files = [
            ("/etc/hostname", CONTAINER_HOSTNAME),
            ("/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
            ("/etc/resolv.conf", "nameserver 127.0.0.11\n"),
        ]
        .into_iter()
        .filter(|(dest, _)| std::path::Path::new(dest).exists())
        .map(|(d, c)| (d.to_string(), c.to_string()))
        .collect();
        HostLayout {
            files,
            ..HostLayout::default()
        }
    }

    fn spec(&self) -> String {
        let ns_flags = [
            libc::CLONE_NEWNS,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWCGROUP,
        ]
        .iter()
        .fold(0, |m, f| m | f);
        let mut rules: Vec<serde_json::Value> = Vec::new();
        if self.docker_seccomp {
            rules.push(json!([libc::SYS_unshare, null, libc::EPERM]));
            rules.push(json!([libc::SYS_clone, ns_flags, libc::EPERM]));
            rules.push(json!([libc::SYS_clone3, null, libc::ENOSYS]));
        }
        for (nr, errno) in &self.refuse {
            rules.push(json!([nr, null, errno]));
        }
        json!({
            "files": self.files,
            "binds": self.binds,
            "max_user_namespaces": self.max_user_namespaces,
            "rules": rules,
            "audit_arch": AUDIT_ARCH,
        })
        .to_string()
    }

    /// `cordon` started inside this layout (the launcher execs it: same pid).
    pub fn cordon(&self) -> Cmd {
        self.exec(cordon_bin()).counts_as_cordon()
    }

    /// Any program started inside this layout.
    pub fn exec(&self, program: &str) -> Cmd {
        Cmd::new(HOST_PYTHON).args([
            OsString::from("-c"),
            LAUNCHER.into(),
            self.spec().into(),
            program.into(),
        ])
    }
}
