//! The image store: `<data-dir>/images`.
//!
//! ```text
//! images/                      0700
//!   index.json                 refs -> manifest digests, and what each image is made of (0600)
//!   blobs/sha256/<hex>         manifests, indexes, configs (0600), verified before they land
//!   layers/sha256/<hex>/       one unpacked layer, by its diff_id (the image's own modes)
//!   layers/sha256/<hex>.json   what unpacking it did (skipped entries, sizes), written last
//!   tmp/                       downloads in progress (<hex>.partial, resumed) and unpacking
//!   locks/                     flock files
//! ```
//!
//! Compressed layer blobs are not kept once their layer is unpacked and verified: the
//! directory is the layer, and keeping both would double the disk an image takes.
//!
//! Concurrency between `cordon` processes rests on `flock` (released by the kernel when a
//! process dies, so a killed pull leaves no stale lock) and on write-to-temporary + rename:
//! - `locks/store.lock`: shared by every pull and import for their whole run, exclusive by
//!   [`Store::prune`] — content a writer added but has not yet recorded in the index is never
//!   collected under it;
//! - `locks/index.lock`: exclusive around each read-modify-write of `index.json` (readers
//!   need no lock: the file is replaced by rename);
//! - `locks/blob-<hex>.lock`: exclusive while a layer blob is downloaded and unpacked, so two
//!   processes pulling images that share a layer fetch and unpack it once (the second waits
//!   and then finds the layer there);
//! - `locks/layer-<hex>.lock`: exclusive while a layer is unpacked; shared by each
//!   [`ImageRoot`] for as long as it lives, so prune never removes a layer a sandbox is
//!   running on.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::add::{Event, Progress};
use crate::digest::{Digest, HashingReader};
use crate::error::{ImageError, IoContext};
use crate::fsutil::{self, FileLock};
use crate::oci::{ConfigFile, Descriptor, ImageConfig, MAX_DOCUMENT};
use crate::reference::Reference;
use crate::unpack::{self, Budget, LayerReport, Limits};

/// One image in the store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageRecord {
    /// The image manifest's digest: what the image *is*.
    pub digest: Digest,
    /// The multi-platform index it was chosen from, when it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_digest: Option<Digest>,
    pub config: Digest,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// Bottom layer first, as in the manifest.
    pub layers: Vec<LayerRecord>,
    /// When the image was built (from its config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// When it entered this store (Unix seconds).
    pub added: u64,
    /// Where it came from: `pull REGISTRY` or `import PATH`.
    pub source: String,
    /// Sum of the layers' unpacked file sizes.
    pub unpacked_bytes: u64,
}

/// One layer of an image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LayerRecord {
    /// The (compressed) blob as the manifest lists it.
    pub blob: Digest,
    /// Its uncompressed digest: the layer directory's key.
    pub diff_id: Digest,
    /// Compressed size.
    pub size: u64,
    pub media_type: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    /// By manifest digest.
    images: BTreeMap<Digest, ImageRecord>,
    /// Normalised reference (`docker.io/library/python:3.12-slim`) -> manifest digest.
    refs: BTreeMap<String, Digest>,
}

/// An image and the names that point at it.
#[derive(Debug, Clone, Serialize)]
pub struct ImageSummary {
    /// Normalised references.
    pub names: Vec<String>,
    #[serde(flatten)]
    pub record: ImageRecord,
}

/// Everything known about one image.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub names: Vec<String>,
    #[serde(flatten)]
    pub record: ImageRecord,
    pub config: ConfigFile,
    /// Per layer (bottom first), what unpacking it did.
    pub layer_reports: Vec<LayerReport>,
}

/// What [`Store::remove`] did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Removed {
    /// References removed.
    pub untagged: Vec<String>,
    /// Images whose last reference went.
    pub deleted: Vec<Digest>,
    /// What collecting the content that no image uses any more freed; `None` when another
    /// `cordon` was writing to the store (then `cordon image prune` frees it later).
    pub collected: Option<Pruned>,
}

/// What [`Store::prune`] freed.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Pruned {
    /// Images without a name that were removed.
    pub images: Vec<Digest>,
    pub blobs: u64,
    pub layers: u64,
    /// Layers no image uses that a running sandbox still holds (left in place).
    pub layers_in_use: u64,
    pub bytes: u64,
}

/// What the engine needs to run a sandbox from an image: its layers as overlayfs lower
/// directories and how the image wants to be run. Holding it keeps the layers from being
/// pruned (a shared `flock` per layer); drop it when the sandbox is gone.
///
/// The directories are inside the store (0700, the store owner's): open them before the
/// sandbox's process leaves the owner's credentials, and mount them with overlayfs'
/// `userxattr` option (whiteouts are `user.overlay.*` xattrs; see [`crate::unpack`]).
#[derive(Debug)]
pub struct ImageRoot {
    /// The reference it was found by (normalised), or the directory's path.
    pub reference: String,
    /// The manifest digest; `None` for a plain directory.
    pub digest: Option<Digest>,
    /// Lower directories, top layer first (overlayfs' `lowerdir` order).
    pub lower_dirs: Vec<PathBuf>,
    /// `Env`, `Entrypoint`, `Cmd`, `WorkingDir`, `User`, … (empty for a plain directory).
    pub config: ImageConfig,
    /// `os/arch[/variant]`.
    pub platform: Option<String>,
    _leases: Vec<FileLock>,
}

impl ImageRoot {
    /// What the engine takes: the layers and the config a run honours. Keep `self` alive
    /// until the sandbox is gone (it holds the layers against prune).
    pub fn root_image(&self) -> cordon_policy::RootImage {
        let c = &self.config;
        cordon_policy::RootImage {
            reference: self.reference.clone(),
            digest: self.digest.as_ref().map(|d| d.to_string()),
            layers: self.lower_dirs.clone(),
            env: c.env.clone().unwrap_or_default(),
            entrypoint: c.entrypoint.clone().unwrap_or_default(),
            cmd: c.cmd.clone().unwrap_or_default(),
            working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
            user: c.user.clone().filter(|u| !u.is_empty()),
            run_as: None,
            upper: None,
            read_only: false,
        }
    }

    /// A plain directory used as an image: one lower layer, no config.
    pub fn directory(path: &Path) -> Result<ImageRoot, ImageError> {
        let abs =
            std::fs::canonicalize(path).ctx(|| format!("image directory {}", path.display()))?;
        if !abs.is_dir() {
            return Err(ImageError::format(
                abs.display().to_string(),
                "not a directory",
            ));
        }
        Ok(ImageRoot {
            reference: abs.display().to_string(),
            digest: None,
            lower_dirs: vec![abs],
            config: ImageConfig::default(),
            platform: None,
            _leases: Vec::new(),
        })
    }
}

/// Whether an `--image` value names a plain directory (a path starting with `/` or `.`)
/// rather than an image in the store.
pub fn names_directory(s: &str) -> bool {
    s.starts_with('/') || s.starts_with("./") || s.starts_with("../") || s == "."
}

/// The store at `<data-dir>/images`.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// A writer's hold on the store: content it adds is safe from prune until it is recorded.
pub(crate) struct Writer<'a> {
    pub(crate) store: &'a Store,
    _gc: FileLock,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Store {
    /// Opens (creating, mode 0700) the store under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Store, ImageError> {
        let root = data_dir.join("images");
        for d in ["blobs/sha256", "layers/sha256", "tmp", "locks"] {
            let p = root.join(d);
            fsutil::create_private_dir(&p).ctx(|| format!("creating {}", p.display()))?;
        }
        // Existing directories keep their mode on create: make sure of the top one.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
            .ctx(|| format!("chmod {}", root.display()))?;
        Ok(Store { root })
    }

    /// `<data-dir>/images`.
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub(crate) fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    /// Where the unpacked layer `diff_id` lives.
    pub(crate) fn layer_path(&self, diff_id: &Digest) -> PathBuf {
        self.layer_dir(diff_id)
    }

    fn layer_dir(&self, diff_id: &Digest) -> PathBuf {
        self.root.join("layers/sha256").join(diff_id.hex())
    }

    fn layer_report_path(&self, diff_id: &Digest) -> PathBuf {
        self.root
            .join("layers/sha256")
            .join(format!("{}.json", diff_id.hex()))
    }

    fn lock_path(&self, name: &str) -> PathBuf {
        self.root.join("locks").join(name)
    }

    pub(crate) fn tmp_path(&self, name: &str) -> PathBuf {
        self.root.join("tmp").join(name)
    }

    fn lock(&self, name: &str, exclusive: bool) -> Result<FileLock, ImageError> {
        let p = self.lock_path(name);
        FileLock::acquire(&p, exclusive).ctx(|| format!("locking {}", p.display()))
    }

    pub(crate) fn writer(&self) -> Result<Writer<'_>, ImageError> {
        Ok(Writer {
            store: self,
            _gc: self.lock("store.lock", false)?,
        })
    }

    fn read_index(&self) -> Result<IndexFile, ImageError> {
        let p = self.root.join("index.json");
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| ImageError::format(p.display().to_string(), e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(IndexFile {
                version: 1,
                ..IndexFile::default()
            }),
            Err(e) => Err(ImageError::io(format!("reading {}", p.display()), e)),
        }
    }

    fn write_index(&self, idx: &IndexFile) -> Result<(), ImageError> {
        let p = self.root.join("index.json");
        let bytes = serde_json::to_vec_pretty(idx)
            .map_err(|e| ImageError::format("index", e.to_string()))?;
        fsutil::write_atomic(&p, &bytes).ctx(|| format!("writing {}", p.display()))
    }

    /// Read-modify-write of the index under its lock.
    fn update_index<T>(
        &self,
        f: impl FnOnce(&mut IndexFile) -> Result<T, ImageError>,
    ) -> Result<T, ImageError> {
        let _l = self.lock("index.lock", true)?;
        let mut idx = self.read_index()?;
        let out = f(&mut idx)?;
        idx.version = 1;
        self.write_index(&idx)?;
        Ok(out)
    }

    /// Reads a small blob (manifest, index, config), checking its digest again.
    pub(crate) fn read_document(&self, d: &Digest) -> Result<Vec<u8>, ImageError> {
        let p = self.blob_path(d);
        let f = File::open(&p).ctx(|| format!("reading blob {d}"))?;
        let mut bytes = Vec::new();
        f.take(MAX_DOCUMENT + 1)
            .read_to_end(&mut bytes)
            .ctx(|| format!("reading blob {d}"))?;
        if bytes.len() as u64 > MAX_DOCUMENT {
            return Err(ImageError::Limit(format!(
                "blob {d} is larger than {MAX_DOCUMENT} bytes"
            )));
        }
        d.verify(&Digest::of(&bytes), || format!("stored blob {d}"))?;
        Ok(bytes)
    }

    fn layer_report(&self, diff_id: &Digest) -> Option<LayerReport> {
        let bytes = std::fs::read(self.layer_report_path(diff_id)).ok()?;
        let r: LayerReport = serde_json::from_slice(&bytes).ok()?;
        self.layer_dir(diff_id).is_dir().then_some(r)
    }

    /// Every image, with its names.
    pub fn list(&self) -> Result<Vec<ImageSummary>, ImageError> {
        let idx = self.read_index()?;
        Ok(idx
            .images
            .values()
            .map(|r| ImageSummary {
                names: names_of(&idx, &r.digest),
                record: r.clone(),
            })
            .collect())
    }

    /// Finds an image by reference (`python:3.12-slim`), manifest digest (`sha256:…`,
    /// `NAME@sha256:…`) or a unique prefix of at least 4 hex digits of it.
    pub fn find(&self, s: &str) -> Result<ImageSummary, ImageError> {
        let idx = self.read_index()?;
        let d = lookup(&idx, s)?;
        let record = idx
            .images
            .get(&d)
            .cloned()
            .ok_or_else(|| ImageError::NotFound {
                reference: s.to_string(),
            })?;
        Ok(ImageSummary {
            names: names_of(&idx, &d),
            record,
        })
    }

    /// An image's record, config and layer reports.
    pub fn inspect(&self, s: &str) -> Result<Inspection, ImageError> {
        let found = self.find(s)?;
        let config = ConfigFile::parse(&self.read_document(&found.record.config)?)?;
        let layer_reports = found
            .record
            .layers
            .iter()
            .map(|l| self.layer_report(&l.diff_id).unwrap_or_default())
            .collect();
        Ok(Inspection {
            names: found.names,
            record: found.record,
            config,
            layer_reports,
        })
    }

    /// What the engine mounts for `s`: an image in the store, or (a path starting with `/`
    /// or `.`) a plain directory.
    pub fn resolve(&self, s: &str) -> Result<ImageRoot, ImageError> {
        if names_directory(s) {
            return ImageRoot::directory(Path::new(s));
        }
        // Shared store lock while the leases are taken: prune cannot slip in between
        // reading the index and holding the layers.
        let _gc = self.lock("store.lock", false)?;
        let found = self.find(s)?;
        let config = ConfigFile::parse(&self.read_document(&found.record.config)?)?;
        let mut leases = Vec::new();
        let mut lower_dirs = Vec::new();
        for l in found.record.layers.iter().rev() {
            leases.push(self.lock(&format!("layer-{}.lock", l.diff_id.hex()), false)?);
            if self.layer_report(&l.diff_id).is_none() {
                return Err(ImageError::format(
                    format!("image {s}"),
                    format!(
                        "layer {} is missing from the store (pull or import the image again)",
                        l.diff_id
                    ),
                ));
            }
            lower_dirs.push(self.layer_dir(&l.diff_id));
        }
        let reference = match Reference::parse(s) {
            Ok(r) if found.names.contains(&r.to_string()) => r.to_string(),
            _ => found
                .names
                .first()
                .cloned()
                .unwrap_or_else(|| found.record.digest.to_string()),
        };
        Ok(ImageRoot {
            reference,
            digest: Some(found.record.digest.clone()),
            lower_dirs,
            config: config.config.unwrap_or_default(),
            platform: Some(found.record.platform.clone()),
            _leases: leases,
        })
    }

    /// Removes a reference (or, given a digest, the image and every reference to it), then
    /// collects what no image uses any more if no other `cordon` is writing.
    pub fn remove(&self, s: &str) -> Result<Removed, ImageError> {
        let mut removed = self.update_index(|idx| {
            let mut out = Removed::default();
            let as_ref = Reference::parse(s).ok().map(|r| r.to_string());
            if let Some(name) = as_ref.filter(|n| idx.refs.contains_key(n)) {
                if let Some(d) = idx.refs.remove(&name) {
                    out.untagged.push(name);
                    if !idx.refs.values().any(|v| *v == d) {
                        idx.images.remove(&d);
                        out.deleted.push(d);
                    }
                }
                return Ok(out);
            }
            let d = lookup(idx, s)?;
            out.untagged = names_of(idx, &d);
            idx.refs.retain(|_, v| *v != d);
            idx.images.remove(&d);
            out.deleted.push(d);
            Ok(out)
        })?;
        if let Some(_gc) = FileLock::try_acquire(&self.lock_path("store.lock"), true)
            .ctx(|| "locking the store".into())?
        {
            removed.collected = Some(self.collect(false)?);
        }
        Ok(removed)
    }

    /// Removes images without a name, then every blob and layer no image uses (except
    /// layers a running sandbox holds), and leftovers of interrupted pulls. Waits for
    /// running pulls and imports to finish.
    pub fn prune(&self) -> Result<Pruned, ImageError> {
        let _gc = self.lock("store.lock", true)?;
        self.collect(true)
    }

    /// Caller holds `store.lock` exclusively: no writer is running.
    fn collect(&self, dangling: bool) -> Result<Pruned, ImageError> {
        let mut out = Pruned::default();
        let idx = self.update_index(|idx| {
            if dangling {
                let named: BTreeSet<Digest> = idx.refs.values().cloned().collect();
                let gone: Vec<Digest> = idx
                    .images
                    .keys()
                    .filter(|d| !named.contains(*d))
                    .cloned()
                    .collect();
                for d in &gone {
                    idx.images.remove(d);
                }
                out.images = gone;
            }
            Ok(IndexFile {
                version: 1,
                images: idx.images.clone(),
                refs: idx.refs.clone(),
            })
        })?;
        let mut live_blobs = BTreeSet::new();
        let mut live_layers = BTreeSet::new();
        for r in idx.images.values() {
            live_blobs.insert(r.digest.hex().to_string());
            live_blobs.insert(r.config.hex().to_string());
            if let Some(i) = &r.index_digest {
                live_blobs.insert(i.hex().to_string());
            }
            for l in &r.layers {
                live_layers.insert(l.diff_id.hex().to_string());
            }
        }
        let blobs = self.root.join("blobs/sha256");
        for name in dir_names(&blobs)? {
            if !live_blobs.contains(&name) {
                let p = blobs.join(&name);
                out.bytes += std::fs::symlink_metadata(&p).map(|m| m.len()).unwrap_or(0);
                std::fs::remove_file(&p).ctx(|| format!("removing {}", p.display()))?;
                out.blobs += 1;
            }
        }
        let layers = self.root.join("layers/sha256");
        let mut seen = BTreeSet::new();
        for name in dir_names(&layers)? {
            let hex = name.trim_end_matches(".json").to_string();
            if live_layers.contains(&hex) || !seen.insert(hex.clone()) {
                continue;
            }
            let lock = self.lock_path(&format!("layer-{hex}.lock"));
            let Some(held) = FileLock::try_acquire(&lock, true).ctx(|| "locking a layer".into())?
            else {
                out.layers_in_use += 1;
                continue;
            };
            let dir = layers.join(&hex);
            // The report goes first: a layer without one is not there for anyone.
            let _ = std::fs::remove_file(layers.join(format!("{hex}.json")));
            out.bytes += tree_size(&dir);
            if dir.exists() {
                fsutil::remove_tree(&dir).ctx(|| format!("removing {}", dir.display()))?;
            }
            let _ = std::fs::remove_file(&lock);
            drop(held);
            out.layers += 1;
        }
        // No writer runs (store.lock is exclusive): what is in tmp/ is left over.
        let tmp = self.root.join("tmp");
        for name in dir_names(&tmp)? {
            let p = tmp.join(&name);
            out.bytes += tree_size(&p);
            fsutil::remove_tree(&p).ctx(|| format!("removing {}", p.display()))?;
        }
        for name in dir_names(&self.root.join("locks"))? {
            if name.starts_with("blob-") {
                let _ = std::fs::remove_file(self.lock_path(&name));
            }
        }
        Ok(out)
    }
}

fn dir_names(p: &Path) -> Result<Vec<String>, ImageError> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).ctx(|| format!("listing {}", p.display()))? {
        let e = e.ctx(|| format!("listing {}", p.display()))?;
        if let Some(n) = e.file_name().to_str() {
            out.push(n.to_string());
        }
    }
    Ok(out)
}

/// Bytes a tree takes on disk (a best effort for reports).
fn tree_size(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let mut n = m.blocks() * 512;
    if m.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                n += tree_size(&e.path());
            }
        }
    }
    n
}

fn names_of(idx: &IndexFile, d: &Digest) -> Vec<String> {
    idx.refs
        .iter()
        .filter(|(_, v)| *v == d)
        .map(|(k, _)| k.clone())
        .collect()
}

fn lookup(idx: &IndexFile, s: &str) -> Result<Digest, ImageError> {
    let not_found = || ImageError::NotFound {
        reference: s.to_string(),
    };
    if let Ok(r) = Reference::parse(s) {
        if let Some(d) = &r.digest {
            if idx.images.contains_key(d) {
                return Ok(d.clone());
            }
        }
        if let Some(d) = idx.refs.get(&r.to_string()) {
            return Ok(d.clone());
        }
    }
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    if hex.len() >= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        let hits: Vec<&Digest> = idx
            .images
            .keys()
            .filter(|d| d.hex().starts_with(hex))
            .collect();
        return match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(not_found()),
            many => Err(ImageError::Ambiguous {
                prefix: s.to_string(),
                candidates: many
                    .iter()
                    .map(|d| d.short())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        };
    }
    Err(not_found())
}

/// How a layer blob gets into `tmp/<hex>.partial`: appended to what is there (a download
/// resumes), or replacing it.
pub(crate) type FetchBlob<'f> = dyn FnMut(&Path) -> Result<(), ImageError> + 'f;

impl Writer<'_> {
    /// Stores a small document (manifest, index, config) after checking its digest.
    pub(crate) fn put_document(
        &self,
        bytes: &[u8],
        expected: Option<&Digest>,
        what: &str,
    ) -> Result<Digest, ImageError> {
        let actual = Digest::of(bytes);
        if let Some(e) = expected {
            e.verify(&actual, || what.to_string())?;
        }
        let p = self.store.blob_path(&actual);
        if !p.exists() {
            fsutil::write_atomic(&p, bytes).ctx(|| format!("writing {}", p.display()))?;
        }
        Ok(actual)
    }

    /// The unpack report of a layer already in the store.
    pub(crate) fn existing_layer(&self, diff_id: &Digest) -> Option<LayerReport> {
        self.store.layer_report(diff_id)
    }

    /// Makes sure the layer `diff_id` is unpacked, fetching its blob `desc` with `fetch`
    /// when it is not: once per blob across processes (the second waits on the blob's lock
    /// and finds the layer there). The blob is checked against `desc` (digest and size)
    /// before a byte of it is unpacked, and the unpacked stream against `diff_id`.
    pub(crate) fn ensure_layer(
        &self,
        desc: &Descriptor,
        diff_id: &Digest,
        limits: &Limits,
        budget: &Budget,
        fetch: &mut FetchBlob<'_>,
        progress: &dyn Progress,
    ) -> Result<LayerReport, ImageError> {
        let s = self.store;
        if let Some(r) = s.layer_report(diff_id) {
            return Ok(r);
        }
        let _blob_lock = s.lock(&format!("blob-{}.lock", desc.digest.hex()), true)?;
        if let Some(r) = s.layer_report(diff_id) {
            return Ok(r);
        }
        if desc.size > budget.left() {
            return Err(ImageError::Limit(format!(
                "layer {} is {} bytes compressed, more than this image may still unpack to ({} bytes left of the cap)",
                desc.digest,
                desc.size,
                budget.left()
            )));
        }
        let blob = s.blob_path(&desc.digest);
        if !blob.exists() {
            let partial = s.tmp_path(&format!("{}.partial", desc.digest.hex()));
            fetch(&partial)?;
            let check = (|| {
                let f = File::open(&partial).ctx(|| format!("reading {}", partial.display()))?;
                let mut h = HashingReader::new(f);
                std::io::copy(&mut h, &mut std::io::sink())
                    .ctx(|| format!("reading {}", partial.display()))?;
                let (actual, n, _) = h.finish();
                desc.digest
                    .verify(&actual, || format!("layer blob {}", desc.digest))?;
                if n != desc.size {
                    return Err(ImageError::format(
                        format!("layer blob {}", desc.digest),
                        format!("{n} bytes, the manifest says {}", desc.size),
                    ));
                }
                Ok(())
            })();
            if let Err(e) = check {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
            std::fs::rename(&partial, &blob).ctx(|| format!("storing {}", blob.display()))?;
        }
        progress.event(Event::LayerUnpacking {
            digest: &desc.digest,
        });
        let result = self.unpack_blob(&blob, diff_id, limits, budget);
        // Verified and unpacked (or refused): the compressed blob is not kept either way.
        let _ = std::fs::remove_file(&blob);
        result
    }

    fn unpack_blob(
        &self,
        blob: &Path,
        diff_id: &Digest,
        limits: &Limits,
        budget: &Budget,
    ) -> Result<LayerReport, ImageError> {
        let s = self.store;
        let _layer_lock = s.lock(&format!("layer-{}.lock", diff_id.hex()), true)?;
        if let Some(r) = s.layer_report(diff_id) {
            return Ok(r);
        }
        let dir = s.layer_dir(diff_id);
        if dir.exists() {
            // Unpacked by a process that died before writing the report.
            fsutil::remove_tree(&dir).ctx(|| format!("removing {}", dir.display()))?;
        }
        // Staging directories of this layer are made only under its lock, which we hold:
        // any there is of a process killed mid-unpack, and would stay until a prune.
        let stale = format!("layer-{}-", diff_id.hex());
        for name in dir_names(&s.root.join("tmp"))? {
            if name.starts_with(&stale) {
                let p = s.tmp_path(&name);
                fsutil::remove_tree(&p).ctx(|| format!("removing {}", p.display()))?;
            }
        }
        let staging = s.tmp_path(&format!("layer-{}-{}", diff_id.hex(), fsutil::unique()));
        fsutil::create_private_dir(&staging).ctx(|| format!("creating {}", staging.display()))?;
        let result = (|| {
            use std::os::unix::fs::PermissionsExt;
            // The layer's root as a sandbox sees it, unless the layer's `./` entry says
            // otherwise.
            std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755))
                .ctx(|| "chmod".into())?;
            let f = File::open(blob).ctx(|| format!("reading {}", blob.display()))?;
            let report = unpack::unpack_layer(f, &staging, limits, budget, Some(diff_id))?;
            std::fs::rename(&staging, &dir).ctx(|| format!("storing {}", dir.display()))?;
            let bytes = serde_json::to_vec_pretty(&report)
                .map_err(|e| ImageError::format("layer report", e.to_string()))?;
            let rp = s.layer_report_path(diff_id);
            fsutil::write_atomic(&rp, &bytes).ctx(|| format!("writing {}", rp.display()))?;
            Ok(report)
        })();
        if result.is_err() {
            let _ = fsutil::remove_tree(&staging);
        }
        result
    }

    /// Records an image under `names`, none of which may name an image yet (checked under the
    /// index's lock, so two commits racing for one name cannot both take it).
    pub(crate) fn record_new(
        &self,
        mut record: ImageRecord,
        names: &[Reference],
    ) -> Result<(), ImageError> {
        record.added = now();
        self.store.update_index(|idx| {
            if let Some(n) = names.iter().find(|n| idx.refs.contains_key(&n.to_string())) {
                return Err(ImageError::Exists {
                    reference: n.familiar(),
                });
            }
            for n in names {
                idx.refs.insert(n.to_string(), record.digest.clone());
            }
            idx.images.insert(record.digest.clone(), record);
            Ok(())
        })
    }

    /// Records an image and points `names` at it (moving them off whatever they named).
    pub(crate) fn record(
        &self,
        mut record: ImageRecord,
        names: &[Reference],
    ) -> Result<(), ImageError> {
        record.added = now();
        self.store.update_index(|idx| {
            for n in names {
                idx.refs.insert(n.to_string(), record.digest.clone());
            }
            idx.images.insert(record.digest.clone(), record);
            Ok(())
        })
    }
}
