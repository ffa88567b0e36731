//! Import: `docker save` / `podman save` archives (docker-archive), oci-archive, and OCI
//! layout directories. The archive's member names are hostile input too: members are copied
//! out under numbered names (never their own), and found again only by exact name lookup.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde::Deserialize;

use crate::add::{add_image, Progress, Source};
use crate::digest::{Digest, HashingReader};
use crate::error::{ImageError, IoContext};
use crate::fsutil;
use crate::oci::{
    ConfigFile, Descriptor, Document, Index, Platform, MAX_DOCUMENT, OCI_CONFIG, OCI_INDEX,
    OCI_LAYER, OCI_MANIFEST,
};
use crate::reference::Reference;
use crate::store::{ImageRecord, Store};
use crate::unpack::{self, Limits};

/// Options of [`import`].
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// A name for the image (when the archive holds one image), on top of the names it
    /// carries.
    pub tag: Option<Reference>,
    pub limits: Limits,
    /// The platform picked from multi-platform archives.
    pub platform: Platform,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            tag: None,
            limits: Limits::default(),
            platform: Platform::host(),
        }
    }
}

/// One image an import added, with the names it got.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imported {
    pub names: Vec<String>,
    #[serde(flatten)]
    pub record: ImageRecord,
}

/// Most members an archive may have.
const MAX_MEMBERS: u64 = 100_000;

/// Imports every image in `path` (an archive file or an OCI layout directory).
pub fn import(
    store: &Store,
    path: &Path,
    opts: &ImportOptions,
    progress: &dyn Progress,
) -> Result<Vec<Imported>, ImageError> {
    let w = store.writer()?;
    let meta = std::fs::metadata(path).ctx(|| format!("import {}", path.display()))?;
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.split('.').next().unwrap_or(n).to_ascii_lowercase())
        .unwrap_or_else(|| "imported".into());
    let origin = format!("import {}", path.display());
    let files: Box<dyn Files> = if meta.is_dir() {
        Box::new(DirFiles {
            dir: fsutil::open_dir(path).ctx(|| format!("opening {}", path.display()))?,
            path: path.to_path_buf(),
        })
    } else {
        Box::new(Extracted::new(store, path, &opts.limits)?)
    };
    let source = FileSource {
        files: files.as_ref(),
    };
    let plans = if files.exists("index.json") {
        plan_oci(files.as_ref(), &opts.platform, &stem)?
    } else if files.exists("manifest.json") {
        plan_docker(files.as_ref())?
    } else {
        return Err(ImageError::format(
            path.display().to_string(),
            "neither an OCI layout (index.json) nor a docker-archive (manifest.json)",
        ));
    };
    if plans.is_empty() {
        return Err(ImageError::format(
            path.display().to_string(),
            "holds no image",
        ));
    }
    if opts.tag.is_some() && plans.len() > 1 {
        return Err(ImageError::format(
            path.display().to_string(),
            format!("holds {} images; --tag names one", plans.len()),
        ));
    }
    let mut out = Vec::new();
    for mut p in plans {
        if let Some(t) = &opts.tag {
            p.names.push(t.clone());
        }
        let record = add_image(
            &w,
            &source,
            &p.manifest,
            Some(OCI_MANIFEST),
            p.index.as_ref().map(|(b, d)| (b.as_slice(), d)),
            &p.names,
            origin.clone(),
            &opts.limits,
            progress,
        )?;
        out.push(Imported {
            names: p.names.iter().map(|n| n.to_string()).collect(),
            record,
        });
    }
    Ok(out)
}

/// One image to add.
struct Plan {
    manifest: Vec<u8>,
    index: Option<(Vec<u8>, Digest)>,
    names: Vec<Reference>,
}

/// Named files of an archive or a layout directory.
trait Files: Sync {
    fn exists(&self, name: &str) -> bool;
    /// A small file, whole.
    fn read(&self, name: &str) -> Result<Vec<u8>, ImageError>;
    /// A blob into `dest` (replacing it).
    fn copy_to(&self, name: &str, dest: &Path) -> Result<(), ImageError>;
    /// A member to read.
    fn open_member(&self, name: &str) -> Result<File, ImageError>;
    /// The name of the member whose content has this digest (docker-archive lists layers
    /// by file name, not digest).
    fn by_digest(&self, d: &Digest) -> Option<String> {
        let name = format!("blobs/sha256/{}", d.hex());
        self.exists(&name).then_some(name)
    }
}

struct FileSource<'a> {
    files: &'a dyn Files,
}

impl Source for FileSource<'_> {
    fn document(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError> {
        let name = self.files.by_digest(&desc.digest).ok_or_else(|| {
            ImageError::format("archive", format!("blob {} is missing", desc.digest))
        })?;
        self.files.read(&name)
    }
    fn blob(&self, desc: &Descriptor, partial: &Path) -> Result<(), ImageError> {
        let name = self.files.by_digest(&desc.digest).ok_or_else(|| {
            ImageError::format("archive", format!("layer {} is missing", desc.digest))
        })?;
        self.files.copy_to(&name, partial)
    }
}

/// An OCI layout directory, read below its descriptor (no symlink out of it is followed).
struct DirFiles {
    dir: std::os::fd::OwnedFd,
    path: PathBuf,
}

impl DirFiles {
    fn open(&self, name: &str) -> Result<File, ImageError> {
        let fd = rustix::fs::openat2(
            self.dir.as_fd(),
            name,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| ImageError::io(format!("{}/{name}", self.path.display()), e.into()))?;
        Ok(File::from(fd))
    }
}

impl Files for DirFiles {
    fn exists(&self, name: &str) -> bool {
        self.open(name).is_ok()
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        read_capped(self.open(name)?, name)
    }
    fn open_member(&self, name: &str) -> Result<File, ImageError> {
        self.open(name)
    }
    fn copy_to(&self, name: &str, dest: &Path) -> Result<(), ImageError> {
        let mut src = self.open(name)?;
        let _ = std::fs::remove_file(dest);
        let mut out =
            fsutil::create_new_private(dest).ctx(|| format!("creating {}", dest.display()))?;
        std::io::copy(&mut src, &mut out).ctx(|| format!("copying {name}"))?;
        Ok(())
    }
}

fn read_capped(f: File, name: &str) -> Result<Vec<u8>, ImageError> {
    let mut bytes = Vec::new();
    f.take(MAX_DOCUMENT + 1)
        .read_to_end(&mut bytes)
        .ctx(|| format!("reading {name}"))?;
    if bytes.len() as u64 > MAX_DOCUMENT {
        return Err(ImageError::Limit(format!(
            "{name} is larger than {MAX_DOCUMENT} bytes"
        )));
    }
    Ok(bytes)
}

/// An archive's regular members, copied out to `tmp/import-…/<n>`, by normalised name.
struct Extracted {
    dir: PathBuf,
    members: BTreeMap<String, (PathBuf, Digest)>,
}

impl Drop for Extracted {
    fn drop(&mut self) {
        let _ = fsutil::remove_tree(&self.dir);
    }
}

/// `./a//b` -> `a/b`; `None` for names with `..` (never needed by any format).
fn normalise(name: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(name).ok()?;
    let mut parts = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

impl Extracted {
    fn new(store: &Store, archive: &Path, limits: &Limits) -> Result<Extracted, ImageError> {
        let dir = store.tmp_path(&format!(
            "import-{}-{}",
            std::process::id(),
            fsutil::unique()
        ));
        fsutil::create_private_dir(&dir).ctx(|| format!("creating {}", dir.display()))?;
        let mut ex = Extracted {
            dir,
            members: BTreeMap::new(),
        };
        let f = File::open(archive).ctx(|| format!("opening {}", archive.display()))?;
        let stream = unpack::decompress(BufReader::with_capacity(256 << 10, f))
            .ctx(|| format!("reading {}", archive.display()))?;
        let mut tar = tar::Archive::new(stream);
        let bad =
            |e: std::io::Error| ImageError::format(archive.display().to_string(), e.to_string());
        let mut links = Vec::new();
        let mut total: u64 = 0;
        for (n, entry) in tar.entries().map_err(bad)?.enumerate() {
            if n as u64 >= MAX_MEMBERS {
                return Err(ImageError::Limit(format!(
                    "{} has more than {MAX_MEMBERS} members",
                    archive.display()
                )));
            }
            let mut entry = entry.map_err(bad)?;
            let Some(name) = normalise(&entry.path_bytes()) else {
                continue;
            };
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    total = total.saturating_add(entry.size());
                    if total > limits.max_bytes {
                        return Err(ImageError::Limit(format!(
                            "{} holds more than {} bytes (the cap)",
                            archive.display(),
                            limits.max_bytes
                        )));
                    }
                    let p = ex.dir.join(n.to_string());
                    let out = fsutil::create_new_private(&p)
                        .ctx(|| format!("creating {}", p.display()))?;
                    let mut h = HashingReader::new(&mut entry);
                    let mut out = std::io::BufWriter::new(out);
                    std::io::copy(&mut h, &mut out).map_err(bad)?;
                    let (d, _, _) = h.finish();
                    ex.members.insert(name, (p, d));
                }
                // docker-archive (legacy layout) links duplicate layers to the first copy.
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    if let Some(target) = entry.link_name_bytes() {
                        links.push((name, entry.header().entry_type(), target.into_owned()));
                    }
                }
                _ => {}
            }
        }
        for (name, kind, target) in links {
            let base = if kind == tar::EntryType::Symlink {
                name.rsplit_once('/')
                    .map(|(d, _)| d.to_string())
                    .unwrap_or_default()
            } else {
                String::new()
            };
            let joined = [base.as_bytes(), b"/", &target].concat();
            if let Some(t) = normalise(&joined) {
                if let Some(v) = ex.members.get(&t).cloned() {
                    ex.members.insert(name, v);
                }
            }
        }
        Ok(ex)
    }
}

impl Files for Extracted {
    fn exists(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, ImageError> {
        let (p, _) = self
            .members
            .get(name)
            .ok_or_else(|| ImageError::format("archive", format!("{name} is missing")))?;
        read_capped(File::open(p).ctx(|| format!("reading {name}"))?, name)
    }
    fn copy_to(&self, name: &str, dest: &Path) -> Result<(), ImageError> {
        let (p, _) = self
            .members
            .get(name)
            .ok_or_else(|| ImageError::format("archive", format!("{name} is missing")))?;
        let _ = std::fs::remove_file(dest);
        // Same file system (both under the store): a hard link costs nothing and leaves
        // the member for another image that lists it.
        if std::fs::hard_link(p, dest).is_ok() {
            return Ok(());
        }
        std::fs::copy(p, dest).ctx(|| format!("copying {name}"))?;
        Ok(())
    }
    fn open_member(&self, name: &str) -> Result<File, ImageError> {
        let (p, _) = self
            .members
            .get(name)
            .ok_or_else(|| ImageError::format("archive", format!("{name} is missing")))?;
        File::open(p).ctx(|| format!("reading {name}"))
    }
    fn by_digest(&self, d: &Digest) -> Option<String> {
        let name = format!("blobs/sha256/{}", d.hex());
        if self.members.contains_key(&name) {
            return Some(name);
        }
        self.members
            .iter()
            .find(|(_, (_, md))| md == d)
            .map(|(n, _)| n.clone())
    }
}

/// The names an OCI index entry carries.
fn oci_names(desc: &Descriptor, stem: &str) -> Vec<Reference> {
    let Some(a) = &desc.annotations else {
        return Vec::new();
    };
    if let Some(full) = a.get("io.containerd.image.name") {
        if let Ok(r) = Reference::parse(full) {
            return vec![r];
        }
    }
    match a.get("org.opencontainers.image.ref.name") {
        // A full reference, or (skopeo, umoci) just a tag: named after the archive then.
        Some(n) if n.contains('/') || n.contains(':') => {
            Reference::parse(n).ok().into_iter().collect()
        }
        Some(tag) => Reference::parse(&format!("localhost/{stem}:{tag}"))
            .ok()
            .into_iter()
            .collect(),
        None => Vec::new(),
    }
}

fn plan_oci(files: &dyn Files, platform: &Platform, stem: &str) -> Result<Vec<Plan>, ImageError> {
    let top = files.read("index.json")?;
    let Document::Index(index) = Document::parse(&top, Some(OCI_INDEX))? else {
        return Err(ImageError::format("index.json", "not an image index"));
    };
    let fetch = |d: &Descriptor| -> Result<Vec<u8>, ImageError> {
        let name = files
            .by_digest(&d.digest)
            .ok_or_else(|| ImageError::format("layout", format!("blob {} is missing", d.digest)))?;
        let bytes = files.read(&name)?;
        d.digest
            .verify(&Digest::of(&bytes), || format!("blob {}", d.digest))?;
        Ok(bytes)
    };
    // Top-level entries for other platforms are left out when one fits this one.
    let fits = |d: &Descriptor| {
        d.platform
            .as_ref()
            .is_none_or(|p| p.os == platform.os && p.architecture == platform.architecture)
    };
    let any_fits = index.manifests.iter().any(fits);
    let mut by_digest: BTreeMap<Digest, Plan> = BTreeMap::new();
    for d in &index.manifests {
        if any_fits && !fits(d) {
            continue;
        }
        let names = oci_names(d, stem);
        let bytes = fetch(d)?;
        let (manifest, idx) = match Document::parse(&bytes, Some(&d.media_type))? {
            Document::Manifest(_) => (bytes, None),
            Document::Index(inner) => {
                let chosen = select(&inner, platform, &d.digest.to_string())?.clone();
                (fetch(&chosen)?, Some((bytes, d.digest.clone())))
            }
        };
        let digest = Digest::of(&manifest);
        let entry = by_digest.entry(digest).or_insert(Plan {
            manifest,
            index: idx,
            names: Vec::new(),
        });
        for n in names {
            if !entry.names.contains(&n) {
                entry.names.push(n);
            }
        }
    }
    Ok(by_digest.into_values().collect())
}

fn select<'a>(i: &'a Index, p: &Platform, r: &str) -> Result<&'a Descriptor, ImageError> {
    i.select(p, r)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// docker-archive: `manifest.json` lists each image's config and layer files. There is no
/// manifest to keep, so an OCI manifest is written for it (its digest is therefore not the
/// one a registry would show for the same image).
fn plan_docker(files: &dyn Files) -> Result<Vec<Plan>, ImageError> {
    let entries: Vec<DockerEntry> = serde_json::from_slice(&files.read("manifest.json")?)
        .map_err(|e| ImageError::format("manifest.json", e.to_string()))?;
    let mut plans = Vec::new();
    for e in entries {
        let cname = normalise(e.config.as_bytes())
            .ok_or_else(|| ImageError::format("manifest.json", "a config name with '..'"))?;
        let config = files.read(&cname)?;
        ConfigFile::parse(&config)?;
        let mut layers = Vec::new();
        for l in &e.layers {
            let lname = normalise(l.as_bytes())
                .ok_or_else(|| ImageError::format("manifest.json", "a layer name with '..'"))?;
            let (digest, size, gz) = member_digest(files, &lname)?;
            layers.push(serde_json::json!({
                "mediaType": if gz { format!("{OCI_LAYER}+gzip") } else { OCI_LAYER.to_string() },
                "digest": digest.to_string(),
                "size": size,
            }));
        }
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": Digest::of(&config).to_string(), "size": config.len()},
            "layers": layers,
        }))
        .map_err(|e| ImageError::format("manifest", e.to_string()))?;
        let names = e
            .repo_tags
            .unwrap_or_default()
            .iter()
            .filter_map(|t| Reference::parse(t).ok())
            .collect();
        plans.push(Plan {
            manifest,
            index: None,
            names,
        });
    }
    Ok(plans)
}

/// Digest, size and whether it is gzip, of a member.
fn member_digest(files: &dyn Files, name: &str) -> Result<(Digest, u64, bool), ImageError> {
    let mut f = files.open_member(name)?;
    let mut h = HashingReader::new(&mut f);
    let mut magic = [0u8; 2];
    let n = h.read(&mut magic).ctx(|| format!("reading {name}"))?;
    let gz = n == 2 && magic == [0x1f, 0x8b] || {
        // A one-byte first read is legal; look again.
        let mut rest = [0u8; 1];
        n == 1 && magic[0] == 0x1f && h.read(&mut rest).ok() == Some(1) && rest[0] == 0x8b
    };
    std::io::copy(&mut h, &mut std::io::sink()).ctx(|| format!("reading {name}"))?;
    let (d, size, _) = h.finish();
    Ok((d, size, gz))
}
