//! Unpacking one layer: a tar stream (plain, gzip or zstd) that is hostile input.
//!
//! The target is a fresh directory; every entry is created relative to a descriptor of its
//! parent directory, which was itself opened from the target's descriptor one component at a
//! time with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV)`. No name from the archive is ever joined onto a host path. What that and
//! the rules below make of each hostile case:
//!
//! | entry | what happens |
//! |---|---|
//! | absolute name (`/etc/passwd`) | taken relative to the layer's root, as Docker does |
//! | a `..` component | skipped and recorded (never resolved) |
//! | a path through a symlink (an earlier `lib -> /usr/lib`, then `lib/x`) | skipped and recorded: symlinks are created, never followed |
//! | a symlink, absolute or relative | created as is: its target only means something inside the sandbox's root |
//! | a hard link | made with `linkat` to an entry already unpacked in this layer, found by the same walk; a target outside the tree or missing is skipped and recorded |
//! | a file over an existing entry | the old entry is unlinked first and the file created with `O_CREAT|O_EXCL|O_NOFOLLOW`: nothing is ever written through an existing link |
//! | character or block device | not created (an unprivileged sandbox must not get devices from an image); skipped and recorded |
//! | FIFO | created (harmless) |
//! | setuid / setgid bits | stripped and counted; the sticky bit stays |
//! | extended attributes (PAX `SCHILY.xattr.*`) | not applied: file capabilities and ACLs from an image grant nothing in a sandbox |
//! | file sizes | their sum is capped ([`Limits::max_bytes`]) before a byte is written; a sparse file counts at its full size |
//! | decompressed stream | capped at the byte budget plus 2 KiB per allowed entry (tar headers and padding): a decompression bomb stops there |
//! | entries | capped at [`Limits::max_entries`]; paths deeper than [`Limits::max_depth`] components are skipped |
//! | long-name / PAX extension headers | capped at 1 MiB each before the tar parser reads them into memory |
//!
//! Ownership is kept when cordon runs as root (the sandbox sees the image's owners through an
//! id-mapped mount); rootless, everything is owned by the user, who is the sandbox's root.
//!
//! Whiteouts follow the OCI layer spec and are stored the way overlayfs reads them from a lower
//! layer mounted with `userxattr` (Linux 6.7+, the form a mount inside the sandbox's user
//! namespace must use): `.wh.NAME` becomes an empty regular file `NAME` with the xattr
//! `user.overlay.whiteout`, its directory gets `user.overlay.opaque=x` (it holds such
//! whiteouts) and `user.overlay.whiteouts`, and so does the layer's root;
//! `.wh..wh..opq` becomes `user.overlay.opaque=y` on its directory. A whiteout only hides what
//! lower layers have: when the same layer also has `NAME`, the entry wins (OCI: "files present
//! in the same layer as a whiteout file can only be hidden by whiteout files in subsequent
//! layers").

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps, XattrFlags};
use serde::{Deserialize, Serialize};
use tar::EntryType;

use crate::digest::{Digest, HashingReader};
use crate::error::{ImageError, IoContext};
use crate::fsutil::{self, os};

/// Caps on what one image may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Sum of the sizes of all regular files of an image's layers (sparse files at their full
    /// size). Default 16 GiB.
    pub max_bytes: u64,
    /// Entries in one layer. Default 1,000,000.
    pub max_entries: u64,
    /// Path components of one entry. Default 256.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_bytes: 16 << 30,
            max_entries: 1_000_000,
            max_depth: 256,
        }
    }
}

/// The byte budget of one image, shared by the layers it unpacks (in parallel too): each
/// regular file takes its size from it before a byte is written.
#[derive(Debug)]
pub struct Budget {
    used: std::sync::atomic::AtomicU64,
    max: u64,
}

impl Budget {
    /// A budget of `max` bytes, `used` of them already taken (layers the image shares with
    /// what is in the store count too).
    pub fn new(max: u64, used: u64) -> Budget {
        Budget {
            used: std::sync::atomic::AtomicU64::new(used),
            max,
        }
    }

    /// Bytes not yet taken.
    pub fn left(&self) -> u64 {
        self.max
            .saturating_sub(self.used.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Takes `n` bytes, or fails (taking nothing) when fewer are left.
    fn take(&self, n: u64, path: &[u8]) -> Result<(), ImageError> {
        use std::sync::atomic::Ordering;
        let r = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|t| *t <= self.max)
            });
        r.map(|_| ()).map_err(|used| {
            ImageError::Limit(format!(
                "{:?} is {n} bytes: the image would unpack to more than {} bytes (the cap; {} left)",
                String::from_utf8_lossy(path),
                self.max,
                self.max.saturating_sub(used)
            ))
        })
    }
}

/// The largest long-name or PAX extension header read into memory.
const MAX_EXTENSION_HEADER: u64 = 1 << 20;
/// Entries recorded by name in a report; the rest are only counted.
const MAX_RECORDED: usize = 100;

/// What unpacking a layer did, kept beside the layer in the store.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerReport {
    /// sha256 of the uncompressed tar stream (the layer's `diff_id`).
    pub diff_id: Option<Digest>,
    /// Bytes of regular-file content written.
    pub bytes: u64,
    /// Tar entries read.
    pub entries: u64,
    /// Whether the image's owners were kept (cordon ran as root).
    pub ownership_kept: bool,
    /// Files whose setuid/setgid bits were stripped.
    pub setid_stripped: u64,
    /// Whiteouts (`.wh.NAME`) and opaque directories (`.wh..wh..opq`) stored.
    pub whiteouts: u64,
    pub opaque_dirs: u64,
    /// Entries not created, with why (the first 100; `skipped_count` counts them all).
    pub skipped: Vec<Skipped>,
    pub skipped_count: u64,
}

/// One entry the unpacker refused or left out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Skipped {
    /// The entry's name as in the archive (lossy UTF-8).
    pub path: String,
    pub reason: String,
}

/// The compression a blob uses, told from its first bytes (media types lie more often than
/// magic numbers: `docker save` lists compressed layers as tars and the reverse).
pub(crate) fn decompress<'a, R: BufRead + 'a>(mut r: R) -> io::Result<Box<dyn Read + 'a>> {
    let head = r.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(r)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Ok(Box::new(zstd::stream::read::Decoder::with_buffer(r)?))
    } else {
        Ok(Box::new(r))
    }
}

/// Unpacks the layer blob `blob` into the existing, empty directory `target`.
///
/// Regular files take their sizes from `budget` (the image's). The uncompressed stream
/// is hashed on the way; when `diff_id` is given, a different hash fails the unpack (the
/// caller discards the directory). The whole stream is read, trailing data after the tar's
/// end included, so the hash covers what the config's `diff_id` covers.
pub fn unpack_layer<R: Read>(
    blob: R,
    target: &Path,
    limits: &Limits,
    budget: &Budget,
    diff_id: Option<&Digest>,
) -> Result<LayerReport, ImageError> {
    let what = || format!("unpacking into {}", target.display());
    let root = fsutil::open_dir(target).ctx(what)?;
    let stream = decompress(BufReader::with_capacity(256 << 10, blob)).ctx(what)?;
    let cap = budget
        .left()
        .saturating_add(limits.max_entries.saturating_mul(2048));
    let capped = CappedReader {
        inner: stream,
        left: cap,
        cap,
    };
    let hashing = HashingReader::new(capped);
    let guard = TarGuard::new(hashing);
    let mut u = Unpacker {
        root,
        limits: *limits,
        budget,
        report: LayerReport {
            ownership_kept: rustix::process::geteuid().is_root(),
            ..LayerReport::default()
        },
        dirs: HashMap::new(),
        whiteouts: HashSet::new(),
        opaque: HashMap::new(),
        root_marked: false,
    };
    let mut archive = tar::Archive::new(guard);
    {
        let entries = archive
            .entries()
            .map_err(|e| ImageError::format("layer", e.to_string()))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| layer_error(e, "reading the layer's tar stream"))?;
            u.report.entries += 1;
            if u.report.entries > limits.max_entries {
                return Err(ImageError::Limit(format!(
                    "layer has more than {} entries (the cap)",
                    limits.max_entries
                )));
            }
            u.entry(&mut entry)?;
        }
    }
    u.finish_dirs()?;
    // Drain what follows the end-of-archive blocks: the diff_id covers the whole stream.
    let mut guard = archive.into_inner();
    io::copy(&mut guard, &mut io::sink())
        .map_err(|e| layer_error(e, "reading the rest of the layer"))?;
    let (actual, _, _) = guard.into_parts().finish();
    if let Some(expected) = diff_id {
        expected.verify(&actual, || "layer (uncompressed, diff_id)".to_string())?;
    }
    u.report.diff_id = Some(actual);
    Ok(u.report)
}

/// A cap hit inside the stream surfaces as an io error of kind `FileTooLarge` carrying our
/// message; anything else is a malformed layer.
fn layer_error(e: io::Error, doing: &str) -> ImageError {
    if e.kind() == io::ErrorKind::FileTooLarge || e.kind() == io::ErrorKind::InvalidData {
        if let Some(msg) = e.get_ref().map(|m| m.to_string()) {
            if msg.starts_with("cap:") {
                return ImageError::Limit(msg.trim_start_matches("cap:").trim().to_string());
            }
        }
    }
    ImageError::format("layer", format!("{doing}: {e}"))
}

fn cap_error(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::FileTooLarge, format!("cap: {msg}"))
}

/// Stops a decompression bomb: at most `cap` decompressed bytes.
struct CappedReader<R> {
    inner: R,
    left: u64,
    cap: u64,
}

impl<R: Read> Read for CappedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more than allowed tells a stream that ends exactly at the cap from one
            // that goes on.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(cap_error(format!(
                    "layer decompresses to more than {} bytes (the cap for this image)",
                    self.cap
                ))),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Follows the tar stream block by block under the tar parser and fails before it would read a
/// long-name or PAX extension header larger than [`MAX_EXTENSION_HEADER`] into memory (the
/// parser buffers those whole). It tracks exactly what the parser does: each header's data is
/// its size rounded up to 512; a PAX `size` record replaces the next non-extension entry's
/// size; GNU sparse headers may be followed by extension blocks.
struct TarGuard<R> {
    inner: R,
    state: Guard,
    block: Vec<u8>,
    pax: Vec<u8>,
    size_override: Option<u64>,
    /// Data blocks still to skip after sparse extension blocks.
    after_sparse: u64,
}

#[derive(Debug, Clone, Copy)]
enum Guard {
    Header,
    SparseExt,
    Skip(u64),
    Pax { data: u64, pad: u64 },
    Trailer,
}

fn padded(size: u64) -> u64 {
    size.div_ceil(512).saturating_mul(512)
}

fn tar_number(field: &[u8]) -> io::Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        // Base-256: the low 8 bytes, big-endian (what the tar crate reads).
        let mut v: u64 = 0;
        for b in &field[field.len().saturating_sub(8)..] {
            v = (v << 8) | u64::from(*b);
        }
        return Ok(v);
    }
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    let s = std::str::from_utf8(&field[..end])
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "tar size is not text"))?;
    u64::from_str_radix(s.trim(), 8)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "tar size is not a number"))
}

/// The `size` record of a PAX extension header, read the way the tar crate reads it (first
/// match; a malformed record ends the search).
fn pax_size(data: &[u8]) -> Option<u64> {
    for line in data.split(|b| *b == b'\n') {
        if line.is_empty() {
            return None;
        }
        let sp = line.iter().position(|b| *b == b' ')?;
        let len: usize = std::str::from_utf8(&line[..sp]).ok()?.parse().ok()?;
        if line.len() + 1 != len {
            return None;
        }
        let kv = &line[sp + 1..];
        let eq = kv.iter().position(|b| *b == b'=')?;
        if &kv[..eq] == b"size" {
            return std::str::from_utf8(&kv[eq + 1..]).ok()?.parse().ok();
        }
    }
    None
}

impl<R: Read> TarGuard<R> {
    fn new(inner: R) -> Self {
        TarGuard {
            inner,
            state: Guard::Header,
            block: Vec::with_capacity(512),
            pax: Vec::new(),
            size_override: None,
            after_sparse: 0,
        }
    }

    fn observe(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.state {
                Guard::Trailer => return Ok(()),
                Guard::Skip(n) => {
                    let k = (bytes.len() as u64).min(n);
                    bytes = &bytes[k as usize..];
                    self.state = if n == k {
                        Guard::Header
                    } else {
                        Guard::Skip(n - k)
                    };
                }
                Guard::Pax { data, pad } => {
                    let k = (bytes.len() as u64).min(data);
                    self.pax.extend_from_slice(&bytes[..k as usize]);
                    bytes = &bytes[k as usize..];
                    if data == k {
                        self.size_override = pax_size(&self.pax).or(self.size_override);
                        self.pax.clear();
                        self.state = if pad == 0 {
                            Guard::Header
                        } else {
                            Guard::Skip(pad)
                        };
                    } else {
                        self.state = Guard::Pax {
                            data: data - k,
                            pad,
                        };
                    }
                }
                Guard::Header | Guard::SparseExt => {
                    let k = bytes.len().min(512 - self.block.len());
                    self.block.extend_from_slice(&bytes[..k]);
                    bytes = &bytes[k..];
                    if self.block.len() == 512 {
                        if matches!(self.state, Guard::Header) {
                            self.on_header()?;
                        } else {
                            self.on_sparse_ext();
                        }
                        self.block.clear();
                    }
                }
            }
        }
        Ok(())
    }

    fn on_header(&mut self) -> io::Result<()> {
        let b = &self.block;
        if b.iter().all(|x| *x == 0) {
            // End of archive: the parser stops here; what follows is only hashed.
            self.state = Guard::Trailer;
            return Ok(());
        }
        let size = tar_number(&b[124..136])?;
        let kind = b[156];
        let too_big = |what: &str| {
            cap_error(format!(
                "a tar {what} header of {size} bytes (more than {MAX_EXTENSION_HEADER})"
            ))
        };
        self.state = match kind {
            b'L' | b'K' => {
                if size > MAX_EXTENSION_HEADER {
                    return Err(too_big("long-name"));
                }
                Guard::Skip(padded(size))
            }
            b'x' | b'g' => {
                if size > MAX_EXTENSION_HEADER {
                    return Err(too_big("PAX"));
                }
                if kind == b'x' {
                    self.pax.clear();
                    Guard::Pax {
                        data: size,
                        pad: padded(size) - size,
                    }
                } else {
                    Guard::Skip(padded(size))
                }
            }
            _ => {
                let size = self.size_override.take().unwrap_or(size);
                // GNU sparse: the "isextended" flag at byte 482 says extension blocks follow.
                if kind == b'S' && b[482] != 0 {
                    self.after_sparse = padded(size);
                    Guard::SparseExt
                } else {
                    Guard::Skip(padded(size))
                }
            }
        };
        if let Guard::Skip(0) = self.state {
            self.state = Guard::Header;
        }
        Ok(())
    }

    fn on_sparse_ext(&mut self) {
        if self.block[504] == 0 {
            self.state = if self.after_sparse == 0 {
                Guard::Header
            } else {
                Guard::Skip(self.after_sparse)
            };
        }
    }
}

impl<R: Read> Read for TarGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.observe(&buf[..n])?;
        Ok(n)
    }
}

impl<R> TarGuard<R> {
    fn into_parts(self) -> R {
        self.inner
    }
}

/// Metadata applied to a directory once everything inside it exists.
#[derive(Debug, Clone, Copy)]
struct DirMeta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
}

enum Outcome {
    Done,
    Skip(String),
}

struct Unpacker<'b> {
    root: OwnedFd,
    limits: Limits,
    budget: &'b Budget,
    report: LayerReport,
    /// Directories named by entries, by path, applied at the end deepest first.
    dirs: HashMap<Vec<u8>, DirMeta>,
    /// Paths that hold a whiteout marker made in this layer.
    whiteouts: HashSet<Vec<u8>>,
    /// Directories whose `user.overlay.opaque` was set, and to what.
    opaque: HashMap<Vec<u8>, u8>,
    root_marked: bool,
}

const XATTR_WHITEOUT: &str = "user.overlay.whiteout";
const XATTR_WHITEOUTS: &str = "user.overlay.whiteouts";
const XATTR_OPAQUE: &str = "user.overlay.opaque";

/// Splits an archive name into components: empty and `.` components dropped, a leading `/`
/// ignored (names are relative to the layer's root); `None` when a component is `..`.
fn components(name: &[u8]) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    for c in name.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

impl Unpacker<'_> {
    fn skip(&mut self, name: &[u8], reason: impl Into<String>) {
        self.report.skipped_count += 1;
        if self.report.skipped.len() < MAX_RECORDED {
            self.report.skipped.push(Skipped {
                path: String::from_utf8_lossy(name).chars().take(512).collect(),
                reason: reason.into(),
            });
        }
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), ImageError> {
        let name = entry.path_bytes().into_owned();
        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
            return Ok(());
        }
        let Some(comps) = components(&name) else {
            self.skip(&name, "a '..' component (would leave the layer)");
            return Ok(());
        };
        if comps.len() > self.limits.max_depth {
            self.skip(
                &name,
                format!("deeper than {} components", self.limits.max_depth),
            );
            return Ok(());
        }
        let is_dir = kind == EntryType::Directory
            || (matches!(kind, EntryType::Regular) && name.ends_with(b"/"));
        let Some((last, parents)) = comps.split_last() else {
            // The layer's root itself (`./`): only its metadata matters.
            if is_dir {
                let meta = self.meta(entry)?;
                self.dirs.insert(Vec::new(), meta);
            }
            return Ok(());
        };
        let path = comps.join(&b'/');
        let parent = match self.walk(parents)? {
            Ok(fd) => fd,
            Err(reason) => {
                self.skip(&name, reason);
                return Ok(());
            }
        };
        let outcome = if let Some(rest) = last.strip_prefix(b".wh.") {
            self.whiteout(parent.as_fd(), parents, rest)?
        } else if is_dir {
            self.directory(parent.as_fd(), last, &path, entry)?
        } else {
            match kind {
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    self.file(parent.as_fd(), last, &path, entry)?
                }
                EntryType::Symlink => self.symlink(parent.as_fd(), last, &path, entry)?,
                EntryType::Link => self.hardlink(parent.as_fd(), last, &path, entry)?,
                EntryType::Fifo => self.fifo(parent.as_fd(), last, &path, entry)?,
                EntryType::Char | EntryType::Block => {
                    Outcome::Skip("a device node (not created in an image)".into())
                }
                other => Outcome::Skip(format!(
                    "unsupported tar entry type {:?}",
                    other.as_byte() as char
                )),
            }
        };
        if let Outcome::Skip(reason) = outcome {
            self.skip(&name, reason);
        }
        Ok(())
    }

    fn meta<R: Read>(&self, entry: &tar::Entry<'_, R>) -> Result<DirMeta, ImageError> {
        let h = entry.header();
        let bad = |e: io::Error| ImageError::format("layer", format!("tar header: {e}"));
        Ok(DirMeta {
            mode: h.mode().map_err(bad)?,
            // Some writers leave the owner fields empty: root, as tar itself reads them.
            uid: h.uid().unwrap_or(0),
            gid: h.gid().unwrap_or(0),
            mtime: h.mtime().unwrap_or(0),
        })
    }

    /// Opens (creating where missing, mode 0755) the directories `parents` below the root.
    /// `Ok(Err(reason))` when the entry must be skipped.
    fn walk(&mut self, parents: &[&[u8]]) -> Result<Result<OwnedFd, String>, ImageError> {
        let mut cur = fsutil::open_dir_beneath(self.root.as_fd(), b".")
            .ctx(|| "opening the layer's root".into())?;
        for (i, c) in parents.iter().enumerate() {
            let here = parents[..=i].join(&b'/');
            let next = match fsutil::open_dir_beneath(cur.as_fd(), c) {
                Ok(fd) => fd,
                Err(e) => match e.raw_os_error() {
                    Some(libc::ENOENT) => {
                        self.mkdir(cur.as_fd(), c, 0o755)?;
                        fsutil::open_dir_beneath(cur.as_fd(), c)
                            .ctx(|| "opening a directory just made".into())?
                    }
                    Some(libc::ENOTDIR) if self.whiteouts.remove(&here) => {
                        // Lower layers' `here` was deleted and this layer makes a directory
                        // there: an opaque directory says exactly that.
                        rustix::fs::unlinkat(cur.as_fd(), os(c), AtFlags::empty())
                            .ctx(|| "replacing a whiteout".into())?;
                        self.mkdir(cur.as_fd(), c, 0o755)?;
                        let fd = fsutil::open_dir_beneath(cur.as_fd(), c)
                            .ctx(|| "opening a directory just made".into())?;
                        self.set_opaque(fd.as_fd(), &here, b'y')?;
                        fd
                    }
                    Some(libc::ENOTDIR | libc::ELOOP) => {
                        let link = fsutil::lstat_at(cur.as_fd(), c)
                            .ctx(|| "lstat".into())?
                            .is_some_and(|st| {
                                FileType::from_raw_mode(st.st_mode) == FileType::Symlink
                            });
                        return Ok(Err(if link {
                            "a parent is a symlink (symlinks are never followed)".into()
                        } else {
                            "a parent is not a directory".into()
                        }));
                    }
                    Some(libc::ENAMETOOLONG) => return Ok(Err("name too long".into())),
                    _ => return Err(ImageError::io("walking the layer", e)),
                },
            };
            cur = next;
        }
        Ok(Ok(cur))
    }

    fn mkdir(&mut self, dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> Result<(), ImageError> {
        rustix::fs::mkdirat(dir, os(name), Mode::from_raw_mode(0o700))
            .ctx(|| "creating a directory".into())?;
        // Set explicitly: the process umask must not decide what the sandbox can read.
        let fd = fsutil::open_dir_beneath(dir, name).ctx(|| "opening a directory".into())?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).ctx(|| "chmod".into())?;
        Ok(())
    }

    /// Makes room for a new entry `name` in `dir`: whatever is there goes (a directory
    /// stays when `keep_dir`). Returns whether a directory was kept.
    fn clear(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        keep_dir: bool,
    ) -> Result<bool, ImageError> {
        let Some(st) = fsutil::lstat_at(dir, name).ctx(|| "lstat".into())? else {
            return Ok(false);
        };
        self.whiteouts.remove(path);
        if fsutil::is_dir(&st) {
            if keep_dir {
                return Ok(true);
            }
            fsutil::remove_at(dir, name, fsutil::MAX_REMOVE_DEPTH)
                .ctx(|| "replacing a directory".into())?;
            let prefix = [path, b"/"].concat();
            self.dirs
                .retain(|k, _| !k.starts_with(&prefix) && k.as_slice() != path);
        } else {
            rustix::fs::unlinkat(dir, os(name), AtFlags::empty())
                .ctx(|| "replacing an entry".into())?;
        }
        Ok(false)
    }

    fn chown_at(
        &self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        uid: u64,
        gid: u64,
    ) -> Result<(), ImageError> {
        if !self.report.ownership_kept {
            return Ok(());
        }
        let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
            return Ok(());
        };
        rustix::fs::chownat(
            dir,
            os(name),
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .ctx(|| "chown".into())
    }

    fn strip_setid(&mut self, mode: u32) -> u32 {
        if mode & 0o6000 != 0 {
            self.report.setid_stripped += 1;
        }
        mode & 0o1777
    }

    fn file<R: Read>(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Outcome, ImageError> {
        let size = entry.size();
        self.budget.take(size, path)?;
        let meta = self.meta(entry)?;
        self.clear(dir, name, path, false)?;
        let fd = rustix::fs::openat(
            dir,
            os(name),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .ctx(|| "creating a file".into())?;
        let mut f = File::from(fd);
        let n = io::copy(&mut entry.by_ref().take(size), &mut f)
            .map_err(|e| layer_error(e, "writing a file"))?;
        if n != size {
            return Err(ImageError::format("layer", "a file's data ends early"));
        }
        self.report.bytes += n;
        self.finish_inode(f.as_fd(), meta)?;
        Ok(Outcome::Done)
    }

    /// Owner, mode (without setuid/setgid) and mtime of an open inode.
    fn finish_inode(&mut self, fd: BorrowedFd<'_>, meta: DirMeta) -> Result<(), ImageError> {
        if self.report.ownership_kept {
            if let (Ok(uid), Ok(gid)) = (u32::try_from(meta.uid), u32::try_from(meta.gid)) {
                rustix::fs::fchown(
                    fd,
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                )
                .ctx(|| "chown".into())?;
            }
        }
        let mode = self.strip_setid(meta.mode);
        rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).ctx(|| "chmod".into())?;
        let t = ts(meta.mtime);
        rustix::fs::futimens(fd, &t).ctx(|| "setting mtime".into())?;
        Ok(())
    }

    fn directory<R: Read>(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Outcome, ImageError> {
        let meta = self.meta(entry)?;
        if !self.clear(dir, name, path, true)? {
            rustix::fs::mkdirat(dir, os(name), Mode::from_raw_mode(0o700))
                .ctx(|| "creating a directory".into())?;
        }
        self.dirs.insert(path.to_vec(), meta);
        Ok(Outcome::Done)
    }

    fn symlink<R: Read>(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Outcome, ImageError> {
        let Some(target) = entry.link_name_bytes().map(|t| t.into_owned()) else {
            return Ok(Outcome::Skip("a symlink without a target".into()));
        };
        if target.is_empty() {
            return Ok(Outcome::Skip("a symlink without a target".into()));
        }
        let meta = self.meta(entry)?;
        self.clear(dir, name, path, false)?;
        match rustix::fs::symlinkat(os(&target), dir, os(name)) {
            Ok(()) => {}
            Err(rustix::io::Errno::NAMETOOLONG) => {
                return Ok(Outcome::Skip("symlink target too long".into()))
            }
            Err(e) => return Err(ImageError::io("creating a symlink", e.into())),
        }
        self.chown_at(dir, name, meta.uid, meta.gid)?;
        rustix::fs::utimensat(dir, os(name), &ts(meta.mtime), AtFlags::SYMLINK_NOFOLLOW)
            .ctx(|| "setting a symlink's mtime".into())?;
        Ok(Outcome::Done)
    }

    fn hardlink<R: Read>(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Outcome, ImageError> {
        let Some(target) = entry.link_name_bytes().map(|t| t.into_owned()) else {
            return Ok(Outcome::Skip("a hard link without a target".into()));
        };
        let Some(tcomps) = components(&target) else {
            return Ok(Outcome::Skip(
                "a hard link whose target has a '..' component (outside the layer)".into(),
            ));
        };
        let Some((tlast, tparents)) = tcomps.split_last() else {
            return Ok(Outcome::Skip("a hard link to the layer's root".into()));
        };
        if tcomps == path.split(|b| *b == b'/').collect::<Vec<_>>() {
            return Ok(Outcome::Skip("a hard link to itself".into()));
        }
        // The target's directory is found by the same walk (no symlinks, nothing above the
        // root), without creating anything.
        let mut tdir = fsutil::open_dir_beneath(self.root.as_fd(), b".")
            .ctx(|| "opening the layer's root".into())?;
        for c in tparents {
            match fsutil::open_dir_beneath(tdir.as_fd(), c) {
                Ok(fd) => tdir = fd,
                Err(_) => {
                    return Ok(Outcome::Skip(
                        "a hard link whose target is not in this layer".into(),
                    ))
                }
            }
        }
        match fsutil::lstat_at(tdir.as_fd(), tlast).ctx(|| "lstat".into())? {
            None => {
                return Ok(Outcome::Skip(
                    "a hard link whose target is not in this layer".into(),
                ))
            }
            Some(st) if fsutil::is_dir(&st) => {
                return Ok(Outcome::Skip("a hard link to a directory".into()))
            }
            Some(_) => {}
        }
        self.clear(dir, name, path, false)?;
        rustix::fs::linkat(tdir.as_fd(), os(tlast), dir, os(name), AtFlags::empty())
            .ctx(|| "creating a hard link".into())?;
        Ok(Outcome::Done)
    }

    fn fifo<R: Read>(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: &[u8],
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Outcome, ImageError> {
        let meta = self.meta(entry)?;
        self.clear(dir, name, path, false)?;
        rustix::fs::mknodat(dir, os(name), FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .ctx(|| "creating a FIFO".into())?;
        self.chown_at(dir, name, meta.uid, meta.gid)?;
        let mode = self.strip_setid(meta.mode);
        rustix::fs::chmodat(dir, os(name), Mode::from_raw_mode(mode), AtFlags::empty())
            .ctx(|| "chmod".into())?;
        Ok(Outcome::Done)
    }

    fn whiteout(
        &mut self,
        dir: BorrowedFd<'_>,
        parents: &[&[u8]],
        rest: &[u8],
    ) -> Result<Outcome, ImageError> {
        let dir_path = parents.join(&b'/');
        if rest == b".wh..opq" {
            self.set_opaque(dir, &dir_path, b'y')?;
            self.report.opaque_dirs += 1;
            return Ok(Outcome::Done);
        }
        if rest.starts_with(b".wh.") {
            return Ok(Outcome::Skip(
                "AUFS metadata (not part of the image)".into(),
            ));
        }
        if rest.is_empty() || rest == b"." || rest == b".." {
            return Ok(Outcome::Skip("a whiteout without a name".into()));
        }
        let path = if dir_path.is_empty() {
            rest.to_vec()
        } else {
            [dir_path.as_slice(), b"/", rest].concat()
        };
        if fsutil::lstat_at(dir, rest)
            .ctx(|| "lstat".into())?
            .is_some()
        {
            // This layer has the entry itself, which hides the lower one already.
            return Ok(Outcome::Done);
        }
        let fd = rustix::fs::openat(
            dir,
            os(rest),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .ctx(|| "creating a whiteout".into())?;
        rustix::fs::fsetxattr(&fd, XATTR_WHITEOUT, b"y", XattrFlags::empty()).ctx(|| {
            format!("setting {XATTR_WHITEOUT} (the store's file system must support user xattrs)")
        })?;
        rustix::fs::fsetxattr(dir, XATTR_WHITEOUTS, b"y", XattrFlags::empty())
            .ctx(|| format!("setting {XATTR_WHITEOUTS}"))?;
        if !self.opaque.contains_key(&dir_path) {
            self.set_opaque(dir, &dir_path, b'x')?;
        }
        if !self.root_marked {
            rustix::fs::fsetxattr(&self.root, XATTR_WHITEOUTS, b"y", XattrFlags::empty())
                .ctx(|| format!("setting {XATTR_WHITEOUTS}"))?;
            self.root_marked = true;
        }
        self.whiteouts.insert(path);
        self.report.whiteouts += 1;
        Ok(Outcome::Done)
    }

    /// `y`: the directory hides everything lower layers have in it; `x`: it only holds
    /// whiteouts (never downgrades a `y`).
    fn set_opaque(
        &mut self,
        dir: BorrowedFd<'_>,
        path: &[u8],
        value: u8,
    ) -> Result<(), ImageError> {
        if self.opaque.get(path) == Some(&b'y') {
            return Ok(());
        }
        rustix::fs::fsetxattr(dir, XATTR_OPAQUE, &[value], XattrFlags::empty()).ctx(|| {
            format!("setting {XATTR_OPAQUE} (the store's file system must support user xattrs)")
        })?;
        self.opaque.insert(path.to_vec(), value);
        Ok(())
    }

    /// Directories get their owner, mode and mtime last, deepest first: a `0555` directory
    /// must still take its entries, and creating entries changes a directory's mtime.
    fn finish_dirs(&mut self) -> Result<(), ImageError> {
        let mut dirs: Vec<(Vec<u8>, DirMeta)> = self.dirs.drain().collect();
        dirs.sort_by_key(|(p, _)| {
            std::cmp::Reverse(p.iter().filter(|b| **b == b'/').count() + usize::from(!p.is_empty()))
        });
        for (path, meta) in dirs {
            let fd = if path.is_empty() {
                fsutil::open_dir_beneath(self.root.as_fd(), b".")
            } else {
                fsutil::open_dir_beneath(self.root.as_fd(), &path)
            };
            // Replaced by something else since (a later entry won): nothing to do.
            let Ok(fd) = fd else { continue };
            self.finish_inode(fd.as_fd(), meta)?;
        }
        Ok(())
    }
}

fn ts(secs: u64) -> Timestamps {
    let t = Timespec {
        tv_sec: i64::try_from(secs).unwrap_or(0),
        tv_nsec: 0,
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}
