//! The unpacker against crafted hostile layers. Each test unpacks into `<tmp>/layer` beside a
//! bait directory `<tmp>/outside`, and checks from outside that nothing beside the layer
//! changed and that the caps held.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cordon_image::unpack::{unpack_layer, Budget, LayerReport, Limits};
use cordon_image::{Digest, ImageError};

/// Builds a tar stream byte by byte, so that entries no well-behaved writer produces (`..`,
/// devices, lying sizes) can be made.
#[derive(Default)]
struct Tar {
    buf: Vec<u8>,
}

fn header(name: &[u8], kind: u8, size: u64, mode: u32, link: &[u8]) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    {
        let g = h.as_gnu_mut().expect("gnu header");
        let n = name.len().min(100);
        g.name[..n].copy_from_slice(&name[..n]);
        let l = link.len().min(100);
        g.linkname[..l].copy_from_slice(&link[..l]);
    }
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(1234);
    h.set_gid(4321);
    h.set_mtime(1_600_000_000);
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_cksum();
    h
}

impl Tar {
    fn raw(mut self, h: &tar::Header, data: &[u8]) -> Self {
        self.buf.extend_from_slice(h.as_bytes());
        self.buf.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
        self
    }
    fn file(self, name: &str, data: &[u8], mode: u32) -> Self {
        let h = header(name.as_bytes(), b'0', data.len() as u64, mode, b"");
        self.raw(&h, data)
    }
    fn dir(self, name: &str, mode: u32) -> Self {
        let h = header(name.as_bytes(), b'5', 0, mode, b"");
        self.raw(&h, b"")
    }
    fn symlink(self, name: &str, target: &str) -> Self {
        let h = header(name.as_bytes(), b'2', 0, 0o777, target.as_bytes());
        self.raw(&h, b"")
    }
    fn hardlink(self, name: &str, target: &str) -> Self {
        let h = header(name.as_bytes(), b'1', 0, 0o644, target.as_bytes());
        self.raw(&h, b"")
    }
    fn node(self, name: &str, kind: u8) -> Self {
        let h = header(name.as_bytes(), kind, 0, 0o666, b"");
        self.raw(&h, b"")
    }
    fn done(mut self) -> Vec<u8> {
        self.buf.extend(std::iter::repeat_n(0u8, 1024));
        self.buf
    }
}

struct Fixture {
    base: tempfile::TempDir,
}

#[derive(Debug, PartialEq)]
struct Seen {
    mode: u32,
    len: u64,
    nlink: u64,
    content: Option<Vec<u8>>,
}

impl Fixture {
    fn new() -> Fixture {
        let base = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(base.path().join("layer")).expect("layer dir");
        std::fs::create_dir(base.path().join("outside")).expect("bait dir");
        std::fs::write(base.path().join("outside/bait"), b"bait").expect("bait");
        Fixture { base }
    }
    fn layer(&self) -> PathBuf {
        self.base.path().join("layer")
    }
    fn outside(&self) -> PathBuf {
        self.base.path().join("outside")
    }
    /// Everything under the base directory except the layer.
    fn snapshot(&self) -> BTreeMap<PathBuf, Seen> {
        let mut out = BTreeMap::new();
        walk(self.base.path(), &self.layer(), &mut out);
        out
    }
    fn unpack(&self, bytes: &[u8], limits: &Limits) -> Result<LayerReport, ImageError> {
        unpack_layer(
            bytes,
            &self.layer(),
            limits,
            &Budget::new(limits.max_bytes, 0),
            None,
        )
    }
    /// Unpacks, then checks that nothing outside the layer changed.
    fn contained(&self, bytes: &[u8], limits: &Limits) -> Result<LayerReport, ImageError> {
        let before = self.snapshot();
        let r = self.unpack(bytes, limits);
        assert_eq!(
            before,
            self.snapshot(),
            "something outside the layer changed"
        );
        r
    }
}

fn walk(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, Seen>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p == skip {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).expect("lstat");
        let content = m.is_file().then(|| std::fs::read(&p).expect("read"));
        out.insert(
            p.clone(),
            Seen {
                mode: m.mode(),
                len: m.len(),
                nlink: m.nlink(),
                content,
            },
        );
        if m.is_dir() {
            walk(&p, skip, out);
        }
    }
}

fn reasons(r: &LayerReport) -> Vec<(String, String)> {
    r.skipped
        .iter()
        .map(|s| (s.path.clone(), s.reason.clone()))
        .collect()
}

#[test]
fn dotdot_names_are_skipped() {
    let f = Fixture::new();
    let tar = Tar::default()
        .file("../outside/bait", b"pwned", 0o644)
        .file("a/../../outside/new", b"pwned", 0o644)
        .file("ok", b"fine", 0o644)
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    assert_eq!(r.skipped_count, 2, "{:?}", reasons(&r));
    assert!(r.skipped[0].reason.contains(".."));
    assert_eq!(std::fs::read(f.layer().join("ok")).expect("ok"), b"fine");
    assert!(
        !f.layer().join("a").exists(),
        "nothing of a skipped entry is created"
    );
}

#[test]
fn absolute_names_land_inside() {
    let f = Fixture::new();
    let host = f.outside().join("abs");
    let name = host.to_str().expect("utf-8 path");
    let tar = Tar::default().file(name, b"inside", 0o644).done();
    f.contained(&tar, &Limits::default()).expect("unpack");
    assert!(!host.exists());
    let inside = f.layer().join(name.trim_start_matches('/'));
    assert_eq!(std::fs::read(inside).expect("inside"), b"inside");
}

#[test]
fn symlinks_are_never_followed_by_later_entries() {
    let f = Fixture::new();
    let out = f.outside();
    let tar = Tar::default()
        // An absolute symlink to the bait directory, then a file through it.
        .symlink("abs", out.to_str().expect("utf-8"))
        .file("abs/new", b"pwned", 0o644)
        // A relative one climbing out, then a file and a directory through it.
        .symlink("up", "../outside")
        .file("up/new2", b"pwned", 0o644)
        .dir("up/newdir", 0o755)
        // A symlink to the bait file, then a regular file of the same name: the link is
        // replaced, never written through.
        .symlink("bait", "../outside/bait")
        .file("bait", b"pwned", 0o644)
        // A chain: dir symlink inside the layer pointing at another symlink.
        .dir("d", 0o755)
        .symlink("d/l", "../up")
        .file("d/l/x", b"pwned", 0o644)
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    assert_eq!(r.skipped_count, 4, "{:?}", reasons(&r));
    assert!(
        r.skipped.iter().all(|s| s.reason.contains("symlink")),
        "{:?}",
        reasons(&r)
    );
    // The symlinks themselves exist, with their targets as written.
    assert_eq!(std::fs::read_link(f.layer().join("abs")).expect("abs"), out);
    assert_eq!(
        std::fs::read_link(f.layer().join("up")).expect("up"),
        Path::new("../outside")
    );
    let bait = std::fs::symlink_metadata(f.layer().join("bait")).expect("bait");
    assert!(bait.is_file(), "the file replaced the link");
    assert_eq!(
        std::fs::read(f.layer().join("bait")).expect("bait"),
        b"pwned"
    );
    assert_eq!(std::fs::read(out.join("bait")).expect("bait"), b"bait");
}

#[test]
fn hard_links_stay_inside_the_layer() {
    let f = Fixture::new();
    let bait = f.outside().join("bait");
    let tar = Tar::default()
        .file("real", b"content", 0o644)
        .hardlink("good", "real")
        .hardlink("out1", "../outside/bait")
        .hardlink("out2", bait.to_str().expect("utf-8"))
        .symlink("s", "../outside")
        .hardlink("out3", "s/bait")
        .hardlink("missing", "nope")
        .dir("d", 0o755)
        .hardlink("dirlink", "d")
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    assert_eq!(r.skipped_count, 5, "{:?}", reasons(&r));
    let real = std::fs::metadata(f.layer().join("real")).expect("real");
    let good = std::fs::metadata(f.layer().join("good")).expect("good");
    assert_eq!((real.ino(), real.nlink()), (good.ino(), 2));
    assert_eq!(std::fs::metadata(&bait).expect("bait").nlink(), 1);
    for n in ["out1", "out2", "out3", "missing", "dirlink"] {
        assert!(
            std::fs::symlink_metadata(f.layer().join(n)).is_err(),
            "{n} created"
        );
    }
}

#[test]
fn device_nodes_are_not_created() {
    let f = Fixture::new();
    let tar = Tar::default()
        .dir("dev", 0o755)
        .node("dev/mem", b'3')
        .node("dev/sda", b'4')
        .node("dev/fifo", b'6')
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    assert_eq!(r.skipped_count, 2, "{:?}", reasons(&r));
    assert!(r.skipped.iter().all(|s| s.reason.contains("device")));
    assert!(std::fs::symlink_metadata(f.layer().join("dev/mem")).is_err());
    assert!(std::fs::symlink_metadata(f.layer().join("dev/sda")).is_err());
    use std::os::unix::fs::FileTypeExt;
    let fifo = std::fs::symlink_metadata(f.layer().join("dev/fifo")).expect("fifo");
    assert!(fifo.file_type().is_fifo());
}

#[test]
fn setuid_and_setgid_bits_are_stripped() {
    let f = Fixture::new();
    let tar = Tar::default()
        .file("suid", b"#!/bin/sh\n", 0o4755)
        .file("sgid", b"#!/bin/sh\n", 0o2755)
        .dir("tmp", 0o1777)
        .dir("sgiddir", 0o2775)
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    assert_eq!(r.setid_stripped, 3);
    let mode = |n: &str| {
        std::fs::symlink_metadata(f.layer().join(n))
            .expect(n)
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("suid"), 0o755);
    assert_eq!(mode("sgid"), 0o755);
    assert_eq!(mode("tmp"), 0o1777, "the sticky bit stays");
    assert_eq!(mode("sgiddir"), 0o775);
    let root = rustix::process::geteuid().is_root();
    let m = std::fs::metadata(f.layer().join("suid")).expect("suid");
    assert_eq!(r.ownership_kept, root);
    if root {
        assert_eq!((m.uid(), m.gid()), (1234, 4321), "owners kept as root");
    }
}

#[test]
fn a_file_larger_than_the_cap_is_refused_before_it_is_written() {
    let f = Fixture::new();
    // Claims a terabyte and carries none of it.
    let h = header(b"huge", b'0', 1 << 40, 0o644, b"");
    let mut tar = Tar::default().file("small", b"x", 0o644).done();
    tar.truncate(tar.len() - 1024);
    let tar = Tar { buf: tar }.raw(&h, b"").done();
    let e = f
        .contained(&tar, &Limits::default())
        .expect_err("over the cap");
    assert!(matches!(e, ImageError::Limit(_)), "{e}");
    assert!(e.to_string().contains("huge"), "{e}");
    assert!(!f.layer().join("huge").exists());
}

/// A GNU sparse entry: `real` bytes of logical size with one 512-byte data block at its end.
fn sparse(name: &str, real: u64) -> (tar::Header, Vec<u8>) {
    let mut h = header(name.as_bytes(), b'S', 512, 0o644, b"");
    {
        let g = h.as_gnu_mut().expect("gnu");
        g.sparse[0].set_offset(real - 512);
        g.sparse[0].set_length(512);
        g.set_real_size(real);
    }
    h.set_cksum();
    (h, vec![b'z'; 512])
}

#[test]
fn sparse_files_count_at_their_full_size() {
    let f = Fixture::new();
    // Small enough to unpack: 1 MiB logical under a 4 MiB cap.
    let (h, data) = sparse("holey", 1 << 20);
    let tar = Tar::default().raw(&h, &data).done();
    let limits = Limits {
        max_bytes: 4 << 20,
        ..Limits::default()
    };
    let r = f.contained(&tar, &limits).expect("unpack");
    assert_eq!(r.bytes, 1 << 20);
    let got = std::fs::read(f.layer().join("holey")).expect("holey");
    assert_eq!(got.len(), 1 << 20);
    assert!(got[..(1 << 20) - 512].iter().all(|b| *b == 0));
    assert!(got[(1 << 20) - 512..].iter().all(|b| *b == b'z'));

    // A terabyte of holes from 512 bytes of archive: refused, nothing written.
    let f = Fixture::new();
    let (h, data) = sparse("bomb", 1 << 40);
    let tar = Tar::default().raw(&h, &data).done();
    let e = f.contained(&tar, &limits).expect_err("over the cap");
    assert!(matches!(e, ImageError::Limit(_)), "{e}");
    assert!(!f.layer().join("bomb").exists());
    assert!(du(&f.layer()) < 1 << 20);
}

fn du(p: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(p).expect("read_dir") {
        let m = std::fs::symlink_metadata(e.expect("entry").path()).expect("lstat");
        total += m.blocks() * 512;
    }
    total
}

#[test]
fn the_total_of_many_files_is_capped() {
    let f = Fixture::new();
    let chunk = vec![7u8; 300 << 10];
    let mut t = Tar::default();
    for i in 0..10 {
        t = t.file(&format!("f{i}"), &chunk, 0o644);
    }
    let limits = Limits {
        max_bytes: 1 << 20,
        ..Limits::default()
    };
    let e = f.contained(&t.done(), &limits).expect_err("over the cap");
    assert!(matches!(e, ImageError::Limit(_)), "{e}");
    assert!(du(&f.layer()) <= (1 << 20) + (64 << 10));
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

#[test]
fn decompression_bombs_stop_at_the_cap() {
    let limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 16,
        ..Limits::default()
    };
    // 64 MiB of zeros after a tiny valid archive: the tar parser stops at the first zero
    // block, but the diff_id covers the whole stream, which the cap cuts.
    let mut bomb = Tar::default().file("x", b"1", 0o644).done();
    bomb.resize(64 << 20, 0);
    for blob in [gzip(&bomb), zstd::encode_all(&bomb[..], 19).expect("zstd")] {
        assert!(blob.len() < 1 << 20, "the bomb is small: {}", blob.len());
        let f = Fixture::new();
        let e = f.contained(&blob, &limits).expect_err("bomb");
        assert!(matches!(e, ImageError::Limit(_)), "{e}");
        assert!(e.to_string().contains("decompresses to more than"), "{e}");
    }
}

#[test]
fn compressed_layers_unpack() {
    let tar = Tar::default().file("hello", b"world", 0o644).done();
    for blob in [
        gzip(&tar),
        zstd::encode_all(&tar[..], 3).expect("zstd"),
        tar.clone(),
    ] {
        let f = Fixture::new();
        let r = f.contained(&blob, &Limits::default()).expect("unpack");
        assert_eq!(
            r.diff_id,
            Some(Digest::of(&tar)),
            "diff_id is the uncompressed digest"
        );
        assert_eq!(
            std::fs::read(f.layer().join("hello")).expect("hello"),
            b"world"
        );
    }
}

#[test]
fn a_wrong_diff_id_is_refused() {
    let f = Fixture::new();
    let tar = Tar::default().file("hello", b"world", 0o644).done();
    let wrong = Digest::of(b"something else");
    let e = unpack_layer(
        &tar[..],
        &f.layer(),
        &Limits::default(),
        &Budget::new(1 << 30, 0),
        Some(&wrong),
    )
    .expect_err("mismatch");
    assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
}

#[test]
fn the_entry_count_is_capped() {
    let f = Fixture::new();
    let mut t = Tar::default();
    for i in 0..50 {
        t = t.file(&format!("f{i}"), b"", 0o644);
    }
    let limits = Limits {
        max_entries: 10,
        ..Limits::default()
    };
    let e = f.contained(&t.done(), &limits).expect_err("too many");
    assert!(e.to_string().contains("more than 10 entries"), "{e}");
}

#[test]
fn giant_extension_headers_are_refused_before_they_are_buffered() {
    // A GNU long-name header claiming 1 GiB, and a PAX header claiming 1 GiB: the tar parser
    // would read either whole into memory.
    for kind in [b'L', b'x'] {
        let f = Fixture::new();
        let h = header(b"././@LongLink", kind, 1 << 30, 0o644, b"");
        let tar = Tar::default().raw(&h, b"").done();
        let e = f.contained(&tar, &Limits::default()).expect_err("refused");
        assert!(matches!(e, ImageError::Limit(_)), "{e}");
    }
}

#[test]
fn long_names_and_pax_headers_work() {
    let f = Fixture::new();
    let long = format!("{}/{}", "d".repeat(150), "f".repeat(120));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, &long, &b"abc"[..]).expect("append");
    // A PAX header that overrides the next entry's size.
    let mut pax = tar::Builder::new(Vec::new());
    pax.append_pax_extensions([("path", &b"paxed"[..])])
        .expect("pax");
    let mut h = tar::Header::new_ustar();
    h.set_size(2);
    h.set_mode(0o644);
    h.set_path("ignored").expect("path");
    h.set_cksum();
    pax.append(&h, &b"ok"[..]).expect("append");
    let mut bytes = b.into_inner().expect("tar");
    bytes.truncate(bytes.len() - 1024);
    bytes.extend(pax.into_inner().expect("tar"));
    let r = f.contained(&bytes, &Limits::default()).expect("unpack");
    assert_eq!(r.skipped_count, 0, "{:?}", reasons(&r));
    assert_eq!(std::fs::read(f.layer().join(&long)).expect("long"), b"abc");
    assert_eq!(
        std::fs::read(f.layer().join("paxed")).expect("paxed"),
        b"ok"
    );
}

#[test]
fn deep_paths_are_skipped() {
    let f = Fixture::new();
    let deep = vec!["d"; 40].join("/");
    let limits = Limits {
        max_depth: 32,
        ..Limits::default()
    };
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    b.append_data(&mut h, format!("{deep}/f"), &b"x"[..])
        .expect("append");
    let r = f
        .contained(&b.into_inner().expect("tar"), &limits)
        .expect("unpack");
    assert_eq!(r.skipped_count, 1);
    assert!(!f.layer().join("d").exists());
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    match rustix::fs::lgetxattr(p, name, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(_) => None,
    }
}

#[test]
fn whiteouts_become_overlay_xattrs() {
    let f = Fixture::new();
    let tar = Tar::default()
        .dir("etc", 0o755)
        .file("etc/.wh.gone", b"", 0o644)
        .file("etc/kept", b"k", 0o644)
        // Whiteout and entry of the same name in one layer: the entry wins.
        .file("etc/.wh.kept", b"", 0o644)
        .dir("opq", 0o755)
        .file("opq/.wh..wh..opq", b"", 0o644)
        .file("opq/new", b"n", 0o644)
        .file(".wh..wh.plnk", b"", 0o644)
        // A whiteout, then a directory under that name.
        .file(".wh.was", b"", 0o644)
        .file("was/inner", b"i", 0o644)
        .done();
    let r = f.contained(&tar, &Limits::default()).expect("unpack");
    let l = f.layer();
    assert_eq!(
        xattr(&l.join("etc/gone"), "user.overlay.whiteout").as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(
        std::fs::metadata(l.join("etc/gone")).expect("gone").len(),
        0
    );
    assert_eq!(
        xattr(&l.join("etc"), "user.overlay.opaque").as_deref(),
        Some(&b"x"[..])
    );
    assert!(xattr(&l.join("etc"), "user.overlay.whiteouts").is_some());
    assert!(xattr(&l, "user.overlay.whiteouts").is_some());
    assert_eq!(std::fs::read(l.join("etc/kept")).expect("kept"), b"k");
    assert!(xattr(&l.join("etc/kept"), "user.overlay.whiteout").is_none());
    assert_eq!(
        xattr(&l.join("opq"), "user.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(!l.join(".wh..wh..opq").exists() && !l.join("opq/.wh..wh..opq").exists());
    assert!(!l.join(".wh..wh.plnk").exists());
    assert_eq!(
        xattr(&l.join("was"), "user.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(std::fs::read(l.join("was/inner")).expect("inner"), b"i");
    assert_eq!(r.opaque_dirs, 1);
    assert_eq!(r.skipped_count, 1, "{:?}", reasons(&r));
}

#[test]
fn restrictive_directory_modes_are_applied_last() {
    let f = Fixture::new();
    let tar = Tar::default()
        .dir("ro", 0o555)
        .file("ro/f", b"x", 0o400)
        .dir("none", 0o000)
        .file("none/g", b"y", 0o000)
        .done();
    f.contained(&tar, &Limits::default()).expect("unpack");
    let mode = |n: &str| {
        std::fs::symlink_metadata(f.layer().join(n))
            .expect(n)
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!((mode("ro"), mode("ro/f")), (0o555, 0o400));
    assert_eq!(mode("none"), 0o000);
    // The tempdir's cleanup needs to get in again.
    for d in ["none", "ro"] {
        std::fs::set_permissions(f.layer().join(d), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
    }
}

/// Whether a test that needs a host tool may skip when it is missing: never in CI.
fn may_skip(what: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} (CI=true: a missing tool fails instead of skipping)");
    }
    eprintln!("SKIPPED: {what}");
    true
}

/// The stored form is what the kernel reads: two layers stacked by a real overlayfs mount in
/// a user namespace (`userxattr`, as the sandbox will mount them) show the whiteout and the
/// opaque directory applied.
#[test]
fn overlayfs_applies_the_stored_whiteouts() {
    let base = tempfile::tempdir().expect("tempdir");
    let (l1, l2, m) = (
        base.path().join("l1"),
        base.path().join("l2"),
        base.path().join("m"),
    );
    for d in [&l1, &l2, &m] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let lower = Tar::default()
        .dir("etc", 0o755)
        .file("etc/gone", b"old", 0o644)
        .file("etc/kept", b"kept", 0o644)
        .dir("opq", 0o755)
        .file("opq/hidden", b"h", 0o644)
        .done();
    let upper = Tar::default()
        .file("etc/.wh.gone", b"", 0o644)
        .file("opq/.wh..wh..opq", b"", 0o644)
        .file("opq/new", b"n", 0o644)
        .done();
    unpack_layer(
        &lower[..],
        &l1,
        &Limits::default(),
        &Budget::new(1 << 30, 0),
        None,
    )
    .expect("lower");
    unpack_layer(
        &upper[..],
        &l2,
        &Limits::default(),
        &Budget::new(1 << 30, 0),
        None,
    )
    .expect("upper");
    let script = format!(
        "mount -t overlay -o ro,userxattr,lowerdir={}:{} none {} && ls {}/etc && ls {}/opq",
        l2.display(),
        l1.display(),
        m.display(),
        m.display(),
        m.display()
    );
    let out = match std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            may_skip(&format!("unshare(1) cannot run: {e}"));
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("Operation not permitted") {
        may_skip(&format!(
            "this host refuses an overlay mount in a user namespace: {stderr}"
        ));
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(listed, ["kept", "new"], "{listed:?}");
}
