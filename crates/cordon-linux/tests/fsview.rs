//! The sandbox file API (`cordon_linux::fsview`) against a fake sandbox root on the host: a
//! temporary directory with a `workspace` subdirectory, next to a "host secret" directory that
//! no operation may read, change, list or even create a temporary file in.
//!
//! Tests that need mounts (a tmpfs to fill, a procfs for magic links, a second file system for
//! moves) run only as root, each in a thread with its own private mount namespace so nothing
//! leaks into the host's mount table even if the test fails.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_linux::fsview::{EntryType, FsError, SandboxFs};

const SECRET: &[u8] = b"host secret: never readable from a sandbox\n";

struct Fx {
    base: PathBuf,
    root: PathBuf,
    ws: PathBuf,
    secret: PathBuf,
}

impl Fx {
    fn new(tag: &str) -> Fx {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir().join(format!(
            "cordon-fsview-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&base);
        let root = base.join("root");
        let ws = root.join("workspace");
        let secret = base.join("secret");
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(secret.join("sub")).unwrap();
        fs::write(secret.join("secret.txt"), SECRET).unwrap();
        fs::write(secret.join("x"), SECRET).unwrap();
        fs::write(secret.join("sub").join("inner.txt"), SECRET).unwrap();
        Fx {
            base,
            root,
            ws,
            secret,
        }
    }

    fn fs(&self) -> SandboxFs {
        SandboxFs::open(&self.root, me()).unwrap()
    }

    /// Everything observable about the secret tree, including directory mtimes (so even a
    /// temporary file created and removed again in it would show).
    fn secret_state(&self) -> Vec<String> {
        let mut out = Vec::new();
        snapshot(&self.secret, "", &mut out);
        out
    }

    fn assert_secret_intact(&self, before: &[String]) {
        assert_eq!(self.secret_state(), before, "the host secret tree changed");
        assert_eq!(fs::read(self.secret.join("secret.txt")).unwrap(), SECRET);
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn snapshot(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let md = fs::symlink_metadata(dir).unwrap();
    out.push(format!(
        "{rel}/ dir mode={:o} mtime={:?}",
        md.mode(),
        md.modified().unwrap()
    ));
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let rel = format!("{rel}/{}", name.to_string_lossy());
        let md = fs::symlink_metadata(&path).unwrap();
        if md.is_dir() {
            snapshot(&path, &rel, out);
        } else if md.file_type().is_symlink() {
            out.push(format!("{rel} -> {:?}", fs::read_link(&path).unwrap()));
        } else {
            out.push(format!(
                "{rel} mode={:o} mtime={:?} content={:?}",
                md.mode(),
                md.modified().unwrap(),
                String::from_utf8_lossy(&fs::read(&path).unwrap())
            ));
        }
    }
}

fn me() -> (u32, u32) {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

fn is_root() -> bool {
    me().0 == 0
}

#[track_caller]
fn code<T: std::fmt::Debug>(r: Result<T, FsError>) -> &'static str {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.code(),
    }
}

fn put(fs: &SandboxFs, path: &str, data: &[u8]) -> Result<u64, FsError> {
    fs.write(path, &mut &data[..], 1 << 20, false)
}

/// Runs `f` in a new thread inside a private mount namespace (root only); returns false when
/// the host does not allow it (the caller skips).
fn in_private_mount_ns(f: impl FnOnce() + Send + 'static) -> bool {
    if !is_root() {
        eprintln!("skipped: needs root for mounts");
        return false;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's mount namespace (and fs struct).
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            eprintln!(
                "skipped: unshare(CLONE_NEWNS): {}",
                io::Error::last_os_error()
            );
            tx.send(false).unwrap();
            return;
        }
        let slash = CString::new("/").unwrap();
        // SAFETY: valid C string, null optional arguments; makes this namespace's mounts
        // private so nothing propagates back to the host.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                slash.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "make / private: {}", io::Error::last_os_error());
        tx.send(true).unwrap();
        f();
    });
    let ran = rx.recv().unwrap_or(false);
    if let Err(panic) = handle.join() {
        std::panic::resume_unwind(panic);
    }
    ran
}

fn mount(fstype: &str, target: &Path, data: &str) {
    let src = CString::new(fstype).unwrap();
    let tgt = CString::new(target.as_os_str().as_encoded_bytes()).unwrap();
    let data = CString::new(data).unwrap();
    // SAFETY: valid C strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            src.as_ptr(),
            0,
            data.as_ptr().cast(),
        )
    };
    assert_eq!(
        rc,
        0,
        "mount {fstype} on {}: {}",
        target.display(),
        io::Error::last_os_error()
    );
}

// ---------------------------------------------------------------------------------------------
// Normal behaviour

#[test]
fn write_then_read_roundtrip() {
    let fx = Fx::new("roundtrip");
    let fs = fx.fs();
    assert_eq!(put(&fs, "hello.txt", b"hello world").unwrap(), 11);
    assert_eq!(fs.read("hello.txt", 100).unwrap(), b"hello world");
    assert_eq!(
        fs.read("/workspace/hello.txt", 100).unwrap(),
        b"hello world"
    );
    assert_eq!(fs::read(fx.ws.join("hello.txt")).unwrap(), b"hello world");

    // Streaming open.
    let (mut f, meta) = fs.open_read("./hello.txt").unwrap();
    assert_eq!(meta.len(), 11);
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello world");

    // Replace: new content, no temporary file left, permission bits kept.
    fs::set_permissions(fx.ws.join("hello.txt"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(put(&fs, "hello.txt", b"bye").unwrap(), 3);
    assert_eq!(fs.read("hello.txt", 100).unwrap(), b"bye");
    assert_eq!(
        fs::metadata(fx.ws.join("hello.txt")).unwrap().mode() & 0o777,
        0o600
    );
    let names: Vec<_> = fs.list(".").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["hello.txt"]);

    // New files are 0644 whatever the umask; empty uploads work.
    assert_eq!(put(&fs, "empty", b"").unwrap(), 0);
    assert_eq!(fs.read("empty", 0).unwrap(), b"");
    assert_eq!(
        fs::metadata(fx.ws.join("empty")).unwrap().mode() & 0o777,
        0o644
    );

    // Absolute paths start at the sandbox root.
    fs::create_dir(fx.root.join("tmp")).unwrap();
    put(&fs, "/tmp/abs.txt", b"abs").unwrap();
    assert_eq!(fs::read(fx.root.join("tmp/abs.txt")).unwrap(), b"abs");
    // `..` inside the path is resolved by the kernel.
    put(&fs, "sub/../dots.txt", b"x").unwrap_err();
    fs.mkdir("sub", false).unwrap();
    put(&fs, "sub/../dots.txt", b"x").unwrap();
    assert!(fx.ws.join("dots.txt").is_file());
}

#[test]
fn write_create_parents() {
    let fx = Fx::new("parents");
    let fs = fx.fs();
    assert_eq!(code(put(&fs, "a/b/c.txt", b"x")), "not_found");
    assert!(!fx.ws.join("a").exists());
    fs.write("a/b/c.txt", &mut &b"deep"[..], 100, true).unwrap();
    assert_eq!(fs::read(fx.ws.join("a/b/c.txt")).unwrap(), b"deep");
    for d in ["a", "a/b"] {
        let md = fs::metadata(fx.ws.join(d)).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.mode() & 0o777, 0o755);
    }
    // Existing parents are fine; a file in the way is not a directory.
    fs.write("a/b/d.txt", &mut &b""[..], 100, true).unwrap();
    assert_eq!(
        code(fs.write("a/b/c.txt/e", &mut &b""[..], 100, true)),
        "not_a_directory"
    );
    // A directory at the destination is not replaced.
    assert_eq!(code(put(&fs, "a/b", b"x")), "is_a_directory");
    assert_eq!(
        code(fs.write("x/", &mut &b""[..], 10, true)),
        "invalid_path"
    );
}

#[test]
fn list_and_stat_report_entries() {
    let fx = Fx::new("list");
    let fs = fx.fs();
    put(&fs, "f.txt", b"12345").unwrap();
    fs.mkdir("dir", false).unwrap();
    symlink("f.txt", fx.ws.join("link")).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();

    let entries = fs.list("").map(|_| ()).unwrap_err();
    assert_eq!(entries.code(), "invalid_path");
    let entries = fs.list(".").unwrap();
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["dir", "f.txt", "link"]);

    let f = &entries[1];
    assert_eq!(f.path, "/workspace/f.txt");
    assert_eq!(f.r#type, EntryType::File);
    assert_eq!(f.size, 5);
    assert_eq!(f.mode, 0o644);
    assert!(
        f.modified.abs_diff(now) < 60,
        "modified {} vs now {now}",
        f.modified
    );
    assert_eq!(f.target, None);

    let d = &entries[0];
    assert_eq!(
        (d.r#type, d.mode, d.path.as_str()),
        (EntryType::Dir, 0o755, "/workspace/dir")
    );

    let l = &entries[2];
    assert_eq!(l.r#type, EntryType::Symlink);
    assert_eq!(l.target.as_deref(), Some("f.txt"));
    assert_eq!(l.size, 5);

    // JSON shape the server sends.
    let json = serde_json::to_value(&entries).unwrap();
    assert_eq!(json[1]["type"], "file");
    assert_eq!(json[0]["type"], "dir");
    assert_eq!(json[2]["type"], "symlink");
    assert_eq!(json[2]["target"], "f.txt");
    assert!(json[1].get("target").is_none());
    assert_eq!(json[1]["name"], "f.txt");
    assert_eq!(json[1]["path"], "/workspace/f.txt");
    assert_eq!(json[1]["size"], 5);

    // stat: lstat semantics for a final symlink; `/`, `.`, `..` resolve.
    let s = fs.stat("link").unwrap();
    assert_eq!(
        (s.r#type, s.target.as_deref()),
        (EntryType::Symlink, Some("f.txt"))
    );
    assert_eq!(fs.stat("/workspace/f.txt").unwrap(), entries[1]);
    let r = fs.stat("/").unwrap();
    assert_eq!(
        (r.name.as_str(), r.path.as_str(), r.r#type),
        ("/", "/", EntryType::Dir)
    );
    let w = fs.stat(".").unwrap();
    assert_eq!(
        (w.name.as_str(), w.path.as_str()),
        ("workspace", "/workspace")
    );
    let up = fs.stat("dir/..").unwrap();
    assert_eq!(
        (up.path.as_str(), up.r#type),
        ("/workspace", EntryType::Dir)
    );
    assert_eq!(code(fs.stat("nope")), "not_found");

    // list follows symlinks (inside the root) to reach the directory; lists of a file fail.
    symlink("dir", fx.ws.join("dirlink")).unwrap();
    put(&fs, "dir/inner", b"i").unwrap();
    let inner = fs.list("dirlink").unwrap();
    assert_eq!(inner.len(), 1);
    assert_eq!(inner[0].path, "/workspace/dirlink/inner");
    assert_eq!(code(fs.list("f.txt")), "not_a_directory");
    let root: Vec<_> = fs.list("/").unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(root, ["/workspace"]);
}

#[test]
fn mkdir_rename_remove() {
    let fx = Fx::new("ops");
    let fs = fx.fs();
    fs.mkdir("d", false).unwrap();
    assert_eq!(code(fs.mkdir("d", false)), "already_exists");
    fs.mkdir("d", true).unwrap();
    assert_eq!(code(fs.mkdir("x/y", false)), "not_found");
    fs.mkdir("x/y/z", true).unwrap();
    assert!(fx.ws.join("x/y/z").is_dir());
    put(&fs, "file", b"f").unwrap();
    assert_eq!(code(fs.mkdir("file", true)), "already_exists");

    // rename: move, replace, into a directory, errors.
    fs.rename("file", "d/file2").unwrap();
    assert!(!fx.ws.join("file").exists());
    assert_eq!(fs::read(fx.ws.join("d/file2")).unwrap(), b"f");
    put(&fs, "other", b"o").unwrap();
    fs.rename("other", "d/file2").unwrap();
    assert_eq!(fs::read(fx.ws.join("d/file2")).unwrap(), b"o");
    assert_eq!(code(fs.rename("missing", "m2")), "not_found");
    assert_eq!(code(fs.rename("d/file2", "nodir/x")), "not_found");
    fs.rename("x", "d/x").unwrap();
    assert!(fx.ws.join("d/x/y/z").is_dir());
    assert_eq!(code(fs.rename("d", "d/x/inside")), "invalid_path");
    assert_eq!(code(fs.rename("d/file2", "d/x")), "is_a_directory");

    // remove: file, empty dir, non-empty dir.
    fs.remove("d/file2", false).unwrap();
    assert!(!fx.ws.join("d/file2").exists());
    assert_eq!(code(fs.remove("d/file2", false)), "not_found");
    assert_eq!(code(fs.remove("d", false)), "not_empty");
    fs.remove("d/x/y/z", false).unwrap();
    put(&fs, "d/x/y/f", b"f").unwrap();
    symlink("/", fx.ws.join("d/x/rootlink")).unwrap();
    fs.remove("d", true).unwrap();
    assert!(!fx.ws.join("d").exists());
    assert!(fx.ws.is_dir());
    put(&fs, "plain", b"p").unwrap();
    assert_eq!(code(fs.remove("plain/", false)), "not_a_directory");
    fs.remove("plain", true).unwrap();
    assert_eq!(fs.list(".").unwrap(), []);
}

#[test]
fn size_limits() {
    let fx = Fx::new("limits");
    let fs = fx.fs();
    put(&fs, "keep", b"original").unwrap();
    let big = vec![7u8; 100_000];
    let err = fs.write("keep", &mut &big[..], 99_999, false).unwrap_err();
    assert_eq!(err.code(), "too_large");
    assert_eq!(fs.read("keep", 100).unwrap(), b"original");
    assert_eq!(
        fs.write("keep", &mut &big[..], 100_000, false).unwrap(),
        100_000
    );
    let err = fs.read("keep", 99_999).unwrap_err();
    assert_eq!(err.code(), "too_large");
    assert_eq!(fs.read("keep", 100_000).unwrap().len(), 100_000);
    // No temporary file survives a failed upload.
    assert_eq!(code(fs.write("new", &mut &big[..], 10, false)), "too_large");
    let names: Vec<_> = fs.list(".").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["keep"]);
}

/// A reader that fails halfway: the upload is abandoned cleanly.
struct Broken(usize);
impl Read for Broken {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0 == 0 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "client went away",
            ));
        }
        let n = buf.len().min(self.0);
        self.0 -= n;
        Ok(n)
    }
}

#[test]
fn failed_upload_leaves_nothing() {
    let fx = Fx::new("broken");
    let fs = fx.fs();
    assert_eq!(
        code(fs.write("up", &mut Broken(10_000), 1 << 20, false)),
        "io_error"
    );
    assert_eq!(fs.list(".").unwrap(), []);
}

#[test]
fn invalid_paths_and_special_files() {
    let fx = Fx::new("invalid");
    let fs = fx.fs();
    assert_eq!(code(fs.read("", 10)), "invalid_path");
    assert_eq!(code(fs.read("a\0b", 10)), "invalid_path");
    assert_eq!(code(fs.read(&"n".repeat(256), 10)), "invalid_path");
    assert_eq!(code(fs.read(&"a/".repeat(2100), 10)), "invalid_path");
    for bad in [".", "..", "a/.", "a/..", "/", "//", "/workspace/.."] {
        assert_eq!(code(fs.remove(bad, true)), "invalid_path", "remove {bad}");
        assert_eq!(code(fs.mkdir(bad, true)), "invalid_path", "mkdir {bad}");
        assert_eq!(code(put(&fs, bad, b"x")), "invalid_path", "write {bad}");
        assert_eq!(
            code(fs.rename(bad, "z")),
            "invalid_path",
            "rename from {bad}"
        );
        assert_eq!(code(fs.rename("z", bad)), "invalid_path", "rename to {bad}");
    }
    assert!(fx.ws.is_dir());
    assert_eq!(code(fs.read(".", 10)), "is_a_directory");
    put(&fs, "f", b"x").unwrap();
    assert_eq!(code(fs.read("f/", 10)), "not_a_directory");

    // A FIFO is refused without blocking; so is a socket.
    let fifo = CString::new(fx.ws.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert_eq!(code(fs.read("fifo", 10)), "not_a_file");
    assert_eq!(code(fs.open_read("fifo")), "not_a_file");
    let _sock = std::os::unix::net::UnixListener::bind(fx.ws.join("sock")).unwrap();
    assert_eq!(code(fs.read("sock", 10)), "not_a_file");
    let kinds: Vec<_> = fs
        .list(".")
        .unwrap()
        .into_iter()
        .map(|e| e.r#type)
        .collect();
    assert_eq!(kinds, [EntryType::File, EntryType::Other, EntryType::Other]);
    // A symlink loop is an error, not a hang.
    symlink("loop2", fx.ws.join("loop1")).unwrap();
    symlink("loop1", fx.ws.join("loop2")).unwrap();
    assert_eq!(code(fs.read("loop1", 10)), "escapes_sandbox");
}

#[test]
fn error_codes() {
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<SandboxFs>();
    shared_across_threads::<FsError>();

    let p = || "/workspace/x".to_string();
    let cases: Vec<(FsError, &str)> = vec![
        (FsError::NotFound { path: p() }, "not_found"),
        (
            FsError::PermissionDenied {
                path: p(),
                reason: "no",
            },
            "permission_denied",
        ),
        (FsError::ReadOnly { path: p() }, "read_only"),
        (FsError::Escapes { path: p() }, "escapes_sandbox"),
        (FsError::NotADirectory { path: p() }, "not_a_directory"),
        (FsError::IsADirectory { path: p() }, "is_a_directory"),
        (FsError::AlreadyExists { path: p() }, "already_exists"),
        (FsError::NotEmpty { path: p() }, "not_empty"),
        (
            FsError::Busy {
                path: p(),
                reason: "b",
            },
            "busy",
        ),
        (FsError::CrossDevice { path: p() }, "cross_device"),
        (FsError::NotAFile { path: p() }, "not_a_file"),
        (
            FsError::InvalidPath {
                path: p(),
                reason: "r",
            },
            "invalid_path",
        ),
        (FsError::NoSpace { path: p() }, "no_space"),
        (
            FsError::TooLarge {
                path: p(),
                detail: "d".into(),
            },
            "too_large",
        ),
        (
            FsError::Unsupported {
                reason: "old kernel".into(),
            },
            "unsupported",
        ),
        (
            FsError::Io {
                path: p(),
                source: io::Error::other("boom"),
            },
            "io_error",
        ),
    ];
    for (err, c) in cases {
        assert_eq!(err.code(), c, "{err}");
    }
    let msg = FsError::Escapes { path: p() }.to_string();
    assert!(msg.contains("path escapes the sandbox"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// Attacks

#[test]
fn traversal_and_absolute_paths_stay_inside() {
    let fx = Fx::new("traversal");
    let fs = fx.fs();
    for path in [
        "../../etc/passwd",
        "/etc/passwd",
        "../../../../../../../../../../etc/passwd",
        "/../../../etc/passwd",
        "../secret/secret.txt",
        "../../secret/secret.txt",
        "../../../secret/secret.txt",
    ] {
        assert_eq!(code(fs.read(path, 1 << 20)), "not_found", "read {path}");
        assert_eq!(code(fs.stat(path)), "not_found", "stat {path}");
        assert_eq!(code(fs.remove(path, true)), "not_found", "remove {path}");
    }
    assert_eq!(code(fs.list("../../secret")), "not_found");
    // Host absolute path of the secret, as a sandbox path: inside the root, so not found.
    let host_secret = fx.secret.join("secret.txt");
    assert_eq!(
        code(fs.read(host_secret.to_str().unwrap(), 1 << 20)),
        "not_found"
    );
    // `..` above the root stays at the root: the listing is the sandbox's, not the host's.
    let names: Vec<_> = fs
        .list("../../..")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["workspace"]);
    // With a fake /etc in the sandbox, the same paths read the sandbox's file.
    fs::create_dir(fx.root.join("etc")).unwrap();
    fs::write(fx.root.join("etc/passwd"), b"sandbox passwd\n").unwrap();
    for path in [
        "../../etc/passwd",
        "/etc/passwd",
        "/../etc/passwd",
        "../../../../etc/passwd",
    ] {
        assert_eq!(
            fs.read(path, 1 << 20).unwrap(),
            b"sandbox passwd\n",
            "{path}"
        );
    }
    // Writing "above" the root lands inside it.
    fs.write("../../../escaped.txt", &mut &b"e"[..], 10, false)
        .unwrap();
    assert!(fx.root.join("escaped.txt").is_file());
    assert!(!fx.base.join("escaped.txt").exists());
    assert!(!fx.base.parent().unwrap().join("escaped.txt").exists());
}

#[test]
fn planted_symlinks_never_reach_the_host() {
    let fx = Fx::new("symlinks");
    let before = fx.secret_state();
    let fs = fx.fs();
    let secret_abs = fx.secret.to_str().unwrap().to_owned();
    // Every flavour of link out: to `/`, to the secret's absolute host path, relative links
    // that a naive join would resolve to the secret, and to a host file.
    symlink("/", fx.ws.join("toroot")).unwrap();
    symlink(&fx.secret, fx.ws.join("tosecret")).unwrap();
    symlink("../../secret", fx.ws.join("up")).unwrap();
    symlink("../../..", fx.ws.join("up3")).unwrap();
    symlink(fx.secret.join("secret.txt"), fx.ws.join("tosecretfile")).unwrap();
    symlink("../../secret/secret.txt", fx.ws.join("uptofile")).unwrap();

    // read
    for path in [
        "tosecret/secret.txt",
        "up/secret.txt",
        "up3/secret/secret.txt",
        "tosecretfile",
        "uptofile",
        "toroot/secret/secret.txt",
        "up/sub/inner.txt",
    ] {
        assert_eq!(code(fs.read(path, 1 << 20)), "not_found", "read {path}");
        assert_eq!(code(fs.open_read(path)), "not_found", "open_read {path}");
    }
    // list
    for path in ["tosecret", "up", "up/sub", "tosecret/sub"] {
        assert_eq!(code(fs.list(path)), "not_found", "list {path}");
    }
    let names: Vec<_> = fs
        .list("toroot")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["workspace"], "a link to / lists the sandbox root");
    let names: Vec<_> = fs
        .list("up3")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["workspace"]);
    // stat describes the link itself
    let s = fs.stat("tosecret").unwrap();
    assert_eq!(
        (s.r#type, s.target.as_deref()),
        (EntryType::Symlink, Some(secret_abs.as_str()))
    );
    assert_eq!(code(fs.stat("tosecret/secret.txt")), "not_found");
    // write through a link in the middle: not found, or (with parents) created inside the root
    for path in [
        "tosecret/pwned",
        "up/pwned",
        "up/sub/pwned",
        "toroot/../secret/pwned",
    ] {
        assert_eq!(code(put(&fs, path, b"pwned")), "not_found", "write {path}");
    }
    // With parents, a link whose target does not exist inside the root is in the way (like
    // `mkdir -p`): nothing is created, here or at the host path.
    for path in ["tosecret/pwned", "up/sub/pwned"] {
        let c = code(fs.write(path, &mut &b"x"[..], 10, true));
        assert_eq!(c, "not_found", "write with parents {path}");
    }
    assert_eq!(
        fs.list("/").unwrap().len(),
        1,
        "nothing created at the root"
    );
    // mkdir through
    for path in ["tosecret/newdir", "up/newdir", "up/sub/newdir"] {
        assert_eq!(code(fs.mkdir(path, false)), "not_found", "mkdir {path}");
    }
    // rename from/to/through
    put(&fs, "local.txt", b"local").unwrap();
    for (from, to) in [
        ("local.txt", "tosecret/moved"),
        ("local.txt", "up/moved"),
        ("local.txt", "up/sub/inner.txt"),
        ("tosecret/secret.txt", "stolen"),
        ("up/secret.txt", "stolen"),
        ("up/sub", "stolen"),
    ] {
        assert_eq!(
            code(fs.rename(from, to)),
            "not_found",
            "rename {from} -> {to}"
        );
    }
    // rename onto a final symlink replaces the link, not its target
    fs.rename("local.txt", "tosecret").unwrap();
    assert!(fs::symlink_metadata(fx.ws.join("tosecret"))
        .unwrap()
        .is_file());
    assert_eq!(fs.read("tosecret", 100).unwrap(), b"local");
    // remove through
    for path in ["up/secret.txt", "up/sub", "tosecretfile/", "up3/secret/x"] {
        let c = code(fs.remove(path, true));
        assert!(
            c == "not_found" || c == "not_a_directory",
            "remove {path}: {c}"
        );
    }
    // remove of a final link removes the link only
    fs.remove("up", true).unwrap();
    fs.remove("toroot", true).unwrap();
    fs.remove("tosecretfile", false).unwrap();
    assert!(fs::symlink_metadata(fx.ws.join("up")).is_err());
    assert!(fx.root.join("workspace").is_dir());

    fx.assert_secret_intact(&before);
}

#[test]
fn final_component_symlink_is_replaced_never_followed() {
    let fx = Fx::new("final");
    let before = fx.secret_state();
    let fs = fx.fs();
    symlink(fx.secret.join("secret.txt"), fx.ws.join("abs")).unwrap();
    symlink("../../secret/secret.txt", fx.ws.join("rel")).unwrap();
    symlink(&fx.secret, fx.ws.join("dirlink")).unwrap();
    for name in ["abs", "rel"] {
        assert_eq!(put(&fs, name, b"replaced").unwrap(), 8);
        let md = fs::symlink_metadata(fx.ws.join(name)).unwrap();
        assert!(md.is_file(), "{name}: the link was replaced by a file");
        assert_eq!(fs::read(fx.ws.join(name)).unwrap(), b"replaced");
    }
    // A link to a directory is replaced too (it is not a directory itself).
    put(&fs, "dirlink", b"f").unwrap();
    assert!(fs::symlink_metadata(fx.ws.join("dirlink"))
        .unwrap()
        .is_file());
    // remove of a final link, recursive or not, removes only the link
    symlink(&fx.secret, fx.ws.join("r1")).unwrap();
    symlink("../../secret", fx.ws.join("r2")).unwrap();
    fs.remove("r1", true).unwrap();
    fs.remove("r2", false).unwrap();
    // mkdir onto a link: refused, not created at the target
    symlink(fx.secret.join("newdir"), fx.ws.join("m1")).unwrap();
    assert_eq!(code(fs.mkdir("m1", false)), "already_exists");
    assert_eq!(code(fs.mkdir("m1", true)), "already_exists");
    fx.assert_secret_intact(&before);
}

#[test]
fn recursive_remove_does_not_follow_inner_symlinks() {
    let fx = Fx::new("rmtree");
    let before = fx.secret_state();
    let fs = fx.fs();
    fs.mkdir("tree/a/b/c", true).unwrap();
    put(&fs, "tree/a/b/c/file", b"f").unwrap();
    symlink(&fx.secret, fx.ws.join("tree/a/abs")).unwrap();
    symlink("../../../../secret", fx.ws.join("tree/a/b/rel")).unwrap();
    symlink("/", fx.ws.join("tree/root")).unwrap();
    symlink(
        fx.secret.join("secret.txt"),
        fx.ws.join("tree/a/b/c/filelink"),
    )
    .unwrap();
    fs.remove("tree", true).unwrap();
    assert!(!fx.ws.join("tree").exists());
    assert!(fx.ws.is_dir());
    fx.assert_secret_intact(&before);
}

#[test]
fn magic_links_are_refused() {
    let fx = Fx::new("magic");
    let before = fx.secret_state();
    // Without a procfs inside the root, /proc/... does not even exist there.
    symlink("/proc/self/root", fx.ws.join("m")).unwrap();
    symlink("/proc/self/cwd", fx.ws.join("cwd")).unwrap();
    {
        let fs = fx.fs();
        assert_eq!(code(fs.read("m/etc/passwd", 1 << 20)), "not_found");
        assert_eq!(
            code(fs.read("/proc/self/root/etc/passwd", 1 << 20)),
            "not_found"
        );
    }
    // With a real procfs mounted in the sandbox root (as in a real sandbox), the magic links
    // are there, and openat2's RESOLVE_NO_MAGICLINKS refuses to follow them.
    let root = fx.root.clone();
    let secret = fx.secret.clone();
    in_private_mount_ns(move || {
        let proc_dir = root.join("proc");
        fs::create_dir(&proc_dir).unwrap();
        mount("proc", &proc_dir, "");
        let fs = SandboxFs::open(&root, me()).unwrap();
        let host_file = fs::File::open(secret.join("secret.txt")).unwrap();
        let fd_path = format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&host_file)
        );
        let sneaky = [
            "m/etc/passwd",
            "/proc/self/root/etc/passwd",
            "cwd/etc/passwd",
            fd_path.as_str(),
        ];
        for path in sneaky {
            let err = fs.read(path, 1 << 20).unwrap_err();
            assert_eq!(err.code(), "escapes_sandbox", "read {path}");
            assert!(err.to_string().contains("path escapes the sandbox"));
        }
        // Another process's root: refused (not permitted to look, or a magic link).
        let c = code(fs.read("/proc/1/root/etc/passwd", 1 << 20));
        assert!(c == "escapes_sandbox" || c == "permission_denied", "{c}");
        assert_eq!(code(fs.list("m")), "escapes_sandbox");
        assert_eq!(code(fs.list("m/etc")), "escapes_sandbox");
        assert_eq!(code(fs.stat("m/etc/passwd")), "escapes_sandbox");
        assert_eq!(code(put(&fs, "m/tmp/pwned", b"x")), "escapes_sandbox");
        assert_eq!(
            code(fs.write("m/tmp/pwned", &mut &b"x"[..], 10, true)),
            "escapes_sandbox"
        );
        assert_eq!(code(fs.mkdir("m/tmp/pwned", true)), "escapes_sandbox");
        assert_eq!(code(fs.remove("m/tmp/pwned", true)), "escapes_sandbox");
        let rel = secret.strip_prefix("/").unwrap().to_str().unwrap();
        assert_eq!(
            code(fs.remove(&format!("/proc/self/root/{rel}/x"), false)),
            "escapes_sandbox"
        );
        assert_eq!(
            code(fs.rename(&format!("/proc/self/root/{rel}/x"), "stolen")),
            "escapes_sandbox"
        );
        // The procfs itself is off limits for reads and changes (host privileges there would
        // mean host data); stat and list of the sandbox's /proc are harmless.
        assert_eq!(
            code(fs.read("/proc/self/status", 1 << 20)),
            "permission_denied"
        );
        assert_eq!(code(fs.read("/proc/version", 1 << 20)), "permission_denied");
        assert_eq!(code(put(&fs, "/proc/pwned", b"x")), "permission_denied");
        assert_eq!(code(fs.mkdir("/proc/pwned", false)), "permission_denied");
        assert!(fs.stat("/proc/self").is_ok());
        drop(host_file);
    });
    fx.assert_secret_intact(&before);
}

#[test]
fn symlink_swap_race_never_touches_the_host() {
    let fx = Fx::new("race");
    let before = fx.secret_state();
    let fs = fx.fs();
    fs::create_dir(fx.ws.join("d")).unwrap();
    symlink(&fx.secret, fx.ws.join("spare")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let ws = fx.ws.clone();
        let secret = fx.secret.clone();
        std::thread::spawn(move || {
            let dir = fs::File::open(&ws).unwrap();
            let dfd = std::os::fd::AsRawFd::as_raw_fd(&dir);
            let (d, spare) = (CString::new("d").unwrap(), CString::new("spare").unwrap());
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                // Keep exactly one real directory and one link (absolute or relative) between
                // the two names, whatever the main thread removed or created.
                let is_link = |n: &str| {
                    fs::symlink_metadata(ws.join(n))
                        .map(|m| m.file_type().is_symlink())
                        .ok()
                };
                let target: &Path = if round.is_multiple_of(2) {
                    &secret
                } else {
                    Path::new("../../secret")
                };
                match (is_link("d"), is_link("spare")) {
                    (None, Some(true)) | (None, None) => {
                        let _ = fs::create_dir(ws.join("d"));
                    }
                    (None, Some(false)) | (Some(false), Some(false)) => {
                        let _ = fs::remove_dir_all(ws.join("d"));
                        let _ = symlink(target, ws.join("d"));
                    }
                    (Some(true), Some(true)) => {
                        let _ = fs::remove_file(ws.join("d"));
                        let _ = fs::create_dir(ws.join("d"));
                    }
                    (Some(true), None) => {
                        let _ = fs::create_dir(ws.join("spare"));
                    }
                    (Some(false), None) => {
                        let _ = symlink(target, ws.join("spare"));
                    }
                    _ => {}
                }
                // SAFETY: valid descriptor and C strings; an atomic exchange of two names.
                let rc = unsafe {
                    libc::renameat2(dfd, d.as_ptr(), dfd, spare.as_ptr(), libc::RENAME_EXCHANGE)
                };
                if rc == 0 {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut ok, mut failed, mut i) = (0u64, 0u64, 0u64);
    while Instant::now() < deadline {
        i += 1;
        let r: Result<(), FsError> = match i % 10 {
            0 => fs.write("d/x", &mut &b"payload"[..], 1024, false).map(drop),
            1 => fs
                .write("d/sub/y", &mut &b"payload"[..], 1024, true)
                .map(drop),
            2 => fs.remove("d/x", false),
            3 => fs.remove("d", true),
            4 => fs.mkdir("d/m", true),
            5 => fs.rename("d/x", "d/x2"),
            6 => fs.remove("d/sub", true),
            7 => match fs.read("d/secret.txt", 1 << 20) {
                Ok(data) => panic!("read the host secret: {:?}", String::from_utf8_lossy(&data)),
                Err(e) => Err(e),
            },
            8 => match fs.list("d") {
                Ok(entries) => {
                    assert!(
                        !entries
                            .iter()
                            .any(|e| e.name == "secret.txt" || e.name == "inner.txt"),
                        "listed the host secret: {entries:?}"
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            },
            _ => fs
                .write("d/sub/z", &mut &b"payload"[..], 1024, false)
                .map(drop),
        };
        match r {
            Ok(()) => ok += 1,
            Err(e) => {
                failed += 1;
                assert_ne!(e.code(), "io_error", "unexpected error: {e}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let swaps = swaps.load(Ordering::Relaxed);
    eprintln!("race: {ok} ops succeeded, {failed} failed, {swaps} swaps");
    assert!(swaps > 100, "the race did not run ({swaps} swaps)");
    assert!(
        ok > 10 && failed > 10,
        "both outcomes expected: {ok} ok, {failed} failed"
    );
    fx.assert_secret_intact(&before);
}

// ---------------------------------------------------------------------------------------------
// Root only: ownership, a full disk, moves across file systems

#[test]
fn new_files_get_the_sandbox_owner() {
    if !is_root() {
        eprintln!("skipped: chown needs root");
        return;
    }
    let fx = Fx::new("owner");
    let fs = SandboxFs::open(&fx.root, (4242, 4343)).unwrap();
    fs.write("own/deep/f.txt", &mut &b"x"[..], 10, true)
        .unwrap();
    fs.mkdir("own/d", false).unwrap();
    fs.mkdir("p/q", true).unwrap();
    put(&fs, "own/deep/f.txt", b"replaced").unwrap();
    for rel in ["own", "own/deep", "own/deep/f.txt", "own/d", "p", "p/q"] {
        let md = fs::symlink_metadata(fx.ws.join(rel)).unwrap();
        assert_eq!((md.uid(), md.gid()), (4242, 4343), "{rel}");
    }
    // Existing directories are not re-owned.
    assert_eq!(fs::metadata(&fx.ws).unwrap().uid(), 0);
}

#[test]
fn full_disk_is_no_space_and_leaves_nothing() {
    let fx = Fx::new("nospace");
    let root = fx.root.clone();
    in_private_mount_ns(move || {
        let small = root.join("workspace/small");
        fs::create_dir(&small).unwrap();
        mount("tmpfs", &small, "size=64k");
        let fs = SandboxFs::open(&root, me()).unwrap();
        put(&fs, "small/keep", b"kept").unwrap();
        let big = vec![1u8; 1 << 20];
        let err = fs
            .write("small/big", &mut &big[..], 2 << 20, false)
            .unwrap_err();
        assert_eq!(err.code(), "no_space", "{err}");
        let err = fs
            .write("small/keep", &mut &big[..], 2 << 20, false)
            .unwrap_err();
        assert_eq!(err.code(), "no_space");
        assert_eq!(fs.read("small/keep", 100).unwrap(), b"kept");
        let names: Vec<_> = fs
            .list("small")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["keep"], "no partial or temporary file left");
        // The space is back: a small write succeeds.
        put(&fs, "small/after", &[2u8; 4096]).unwrap();
    });
}

#[test]
fn move_across_file_systems_and_mount_points() {
    let fx = Fx::new("xdev");
    let root = fx.root.clone();
    in_private_mount_ns(move || {
        let tmp = root.join("tmp");
        fs::create_dir(&tmp).unwrap();
        mount("tmpfs", &tmp, "size=1m");
        let fs = SandboxFs::open(&root, me()).unwrap();
        put(&fs, "/tmp/a.txt", b"across").unwrap();
        fs::set_permissions(tmp.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        fs.rename("/tmp/a.txt", "moved.txt").unwrap();
        assert_eq!(fs.read("moved.txt", 100).unwrap(), b"across");
        assert_eq!(fs.stat("moved.txt").unwrap().mode, 0o640);
        assert_eq!(code(fs.stat("/tmp/a.txt")), "not_found");
        fs.mkdir("/tmp/dir", false).unwrap();
        assert_eq!(code(fs.rename("/tmp/dir", "dir")), "cross_device");
        symlink("x", tmp.join("link")).unwrap();
        assert_eq!(code(fs.rename("/tmp/link", "link")), "cross_device");
        // A mount point is neither removed nor emptied by a recursive remove.
        put(&fs, "/tmp/stays", b"s").unwrap();
        assert_eq!(code(fs.remove("/tmp", true)), "busy");
        assert_eq!(code(fs.rename("/tmp", "/gone")), "busy");
        assert_eq!(fs.read("/tmp/stays", 10).unwrap(), b"s");
        fs.remove("/tmp/dir", true).unwrap();
        // A recursive remove of a tree holding a mount point stops there.
        fs::create_dir_all(root.join("workspace/t/mnt")).unwrap();
        mount("tmpfs", &root.join("workspace/t/mnt"), "size=64k");
        put(&fs, "t/mnt/inner", b"i").unwrap();
        assert_eq!(code(fs.remove("t", true)), "busy");
        assert_eq!(fs.read("t/mnt/inner", 10).unwrap(), b"i");
    });
}

#[test]
fn open_requires_a_directory() {
    let fx = Fx::new("open");
    assert_eq!(
        SandboxFs::open(&fx.root.join("missing"), me())
            .unwrap_err()
            .code(),
        "not_found"
    );
    fs::write(fx.base.join("file"), b"").unwrap();
    assert_eq!(
        SandboxFs::open(&fx.base.join("file"), me())
            .unwrap_err()
            .code(),
        "not_a_directory"
    );
}

/// `own_dir` hands another process the workspace directory itself: what a sandbox planted in
/// its place (a symlink out of the root, to a host directory, to a directory that is not its
/// user's) is never handed on.
#[test]
fn own_dir_hands_on_only_the_sandbox_users_own_directory() {
    let fx = Fx::new("own-dir");
    let fs = fx.fs();
    let ino = |fd: &std::os::fd::OwnedFd| {
        let st = fs::metadata(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(fd)
        ))
        .unwrap();
        (st.dev(), st.ino())
    };
    let ws = fs::metadata(&fx.ws).unwrap();
    let got = fs.own_dir("/workspace").expect("the workspace");
    assert_eq!(ino(&got), (ws.dev(), ws.ino()));

    // The workspace swapped for symlinks: absolute to the host's secret directory, relative
    // out of the root, to a file.
    fs::rename(&fx.ws, fx.root.join("w0")).unwrap();
    for target in [
        fx.secret.display().to_string(),
        "../secret".to_string(),
        "../../../../../..".to_string() + &fx.secret.display().to_string(),
    ] {
        let _ = fs::remove_file(&fx.ws);
        symlink(&target, &fx.ws).unwrap();
        match fs.own_dir("/workspace") {
            Err(_) => {}
            Ok(fd) => {
                let secret = fs::metadata(&fx.secret).unwrap();
                assert_ne!(ino(&fd), (secret.dev(), secret.ino()), "{target}");
                assert_ne!(
                    fs::metadata(format!(
                        "/proc/self/fd/{}",
                        std::os::fd::AsRawFd::as_raw_fd(&fd)
                    ))
                    .unwrap()
                    .ino(),
                    fs::metadata(&fx.base).unwrap().ino(),
                    "{target}"
                );
            }
        }
    }
    let _ = fs::remove_file(&fx.ws);
    fs::write(&fx.ws, b"a file").unwrap();
    assert_eq!(code(fs.own_dir("/workspace")), "not_a_directory");

    // A directory of another user (as root: one the sandbox user does not own).
    if is_root() {
        fs::remove_file(&fx.ws).unwrap();
        fs::create_dir(&fx.ws).unwrap();
        std::os::unix::fs::chown(&fx.ws, Some(4242), Some(4242)).unwrap();
        assert_eq!(code(fs.own_dir("/workspace")), "permission_denied");
    }
    let _ = fs::remove_dir_all(&fx.base);
}

fn meta(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn file_metadata_goes_with_the_file_shown_by_stat_and_list_kept_by_rename_cleared_by_overwrite() {
    let fx = Fx::new("meta");
    let fs = fx.fs();
    let m = meta(&[("author", "mish"), ("purpose", "upload")]);
    fs.write_with_metadata("m.txt", &mut &b"one"[..], 1 << 20, false, &m)
        .unwrap();
    assert_eq!(fs.stat("m.txt").unwrap().metadata, Some(m.clone()));
    // Stored where programs inside see it: as user.e2b.* attributes of the file.
    let mut v = vec![0u8; 64];
    let n = rustix::fs::getxattr(fx.ws.join("m.txt").as_path(), "user.e2b.author", &mut v).unwrap();
    assert_eq!(&v[..n], b"mish");
    let listed = fs.list("/workspace").unwrap();
    let e = listed.iter().find(|e| e.name == "m.txt").unwrap();
    assert_eq!(e.metadata, Some(m.clone()));

    fs.rename("m.txt", "n.txt").unwrap();
    assert_eq!(fs.stat("n.txt").unwrap().metadata, Some(m));

    // An overwrite without metadata is a new file: the old file's metadata goes with it.
    put(&fs, "n.txt", b"two").unwrap();
    assert_eq!(fs.stat("n.txt").unwrap().metadata, None);

    // An attribute a program inside sets (out of band) shows; other namespaces do not.
    let p = fx.ws.join("n.txt");
    rustix::fs::setxattr(
        p.as_path(),
        "user.e2b.stage",
        b"set-inside",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    rustix::fs::setxattr(
        p.as_path(),
        "user.other",
        b"x",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    assert_eq!(
        fs.stat("n.txt").unwrap().metadata,
        Some(meta(&[("stage", "set-inside")]))
    );
}

#[test]
fn metadata_of_host_files_never_shows_through_a_planted_symlink() {
    let fx = Fx::new("meta-link");
    let before_attr = fx.secret.join("secret.txt");
    rustix::fs::setxattr(
        before_attr.as_path(),
        "user.e2b.host",
        b"host-only",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let before = fx.secret_state();
    symlink(fx.secret.join("secret.txt"), fx.ws.join("abs")).unwrap();
    symlink("../../secret/secret.txt", fx.ws.join("rel")).unwrap();
    let fs = fx.fs();
    for name in ["abs", "rel"] {
        let e = fs.stat(name).unwrap();
        assert_eq!(e.r#type, EntryType::Symlink);
        assert_eq!(e.metadata, None, "{name}: {e:?}");
    }
    for e in fs.list("/workspace").unwrap() {
        assert_eq!(e.metadata, None, "{e:?}");
    }
    // A move across the link copies nothing of the host's.
    assert!(fs.rename("abs", "moved").is_ok());
    assert_eq!(fs.stat("moved").unwrap().metadata, None);
    fx.assert_secret_intact(&before);
}
