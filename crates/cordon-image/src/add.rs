//! Putting one image into the store from wherever its blobs come from (a registry, an
//! archive, a layout directory): the steps pull and import share.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::digest::Digest;
use crate::error::ImageError;
use crate::oci::{is_layer, ConfigFile, Descriptor, Document, MAX_DOCUMENT};
use crate::reference::Reference;
use crate::store::{ImageRecord, LayerRecord, Writer};
use crate::unpack::{Budget, Limits};

/// Where an image's blobs come from.
pub(crate) trait Source: Sync {
    /// A small blob (a config), whole. The caller checks the digest.
    fn document(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError>;
    /// A layer blob into `partial`: appended to what is there when the source can resume,
    /// else replacing it. The caller checks digest and size.
    fn blob(&self, desc: &Descriptor, partial: &Path) -> Result<(), ImageError>;
    /// How many layers to fetch at once.
    fn parallel(&self) -> usize {
        1
    }
}

/// What a pull or import reports while it works (drawn as progress bars on a terminal).
pub trait Progress: Sync {
    fn event(&self, event: Event<'_>);
}

/// A progress event.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// The image to fetch is known.
    Resolved {
        reference: &'a str,
        digest: &'a Digest,
        layers: usize,
    },
    /// A layer the store already has.
    LayerCached { digest: &'a Digest },
    /// Fetching a layer blob starts; `from` bytes were already there (a resumed download).
    LayerStart {
        digest: &'a Digest,
        size: u64,
        from: u64,
    },
    /// `n` more bytes of a layer blob arrived.
    LayerBytes { digest: &'a Digest, n: u64 },
    /// The blob is verified and being unpacked.
    LayerUnpacking { digest: &'a Digest },
    /// The layer is in the store.
    LayerDone { digest: &'a Digest },
    /// A download was interrupted and is retried from where it stopped.
    Retry {
        digest: &'a Digest,
        from: u64,
        error: &'a str,
    },
}

/// Progress that goes nowhere.
pub struct Quiet;

impl Progress for Quiet {
    fn event(&self, _: Event<'_>) {}
}

/// Adds the image whose manifest is `manifest` (bytes as fetched, digest already checked
/// by the caller against what it asked for) and names it `names`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_image(
    w: &Writer<'_>,
    source: &dyn Source,
    manifest: &[u8],
    manifest_type: Option<&str>,
    index: Option<(&[u8], &Digest)>,
    names: &[Reference],
    origin: String,
    limits: &Limits,
    progress: &dyn Progress,
) -> Result<ImageRecord, ImageError> {
    let digest = Digest::of(manifest);
    let m = match Document::parse(manifest, manifest_type)? {
        Document::Manifest(m) => m,
        Document::Index(_) => {
            return Err(ImageError::format(
                format!("manifest {digest}"),
                "an index where an image manifest was expected",
            ))
        }
    };
    if m.config.size > MAX_DOCUMENT {
        return Err(ImageError::Limit(format!(
            "image config of {} bytes (more than {MAX_DOCUMENT})",
            m.config.size
        )));
    }
    for l in &m.layers {
        if !is_layer(&l.media_type) {
            return Err(ImageError::Unsupported(format!(
                "layer media type {:?} (not a container image layer: an artifact, or a Windows image?)",
                l.media_type.chars().take(100).collect::<String>()
            )));
        }
    }
    let config_bytes = source.document(&m.config)?;
    w.put_document(&config_bytes, Some(&m.config.digest), "image config")?;
    let config = ConfigFile::parse(&config_bytes)?;
    if config.rootfs.diff_ids.len() != m.layers.len() {
        return Err(ImageError::format(
            format!("image {digest}"),
            format!(
                "the manifest lists {} layers, the config {} diff_ids",
                m.layers.len(),
                config.rootfs.diff_ids.len()
            ),
        ));
    }
    if let Some((bytes, d)) = index {
        w.put_document(bytes, Some(d), "image index")?;
    }
    w.put_document(manifest, Some(&digest), "image manifest")?;
    progress.event(Event::Resolved {
        reference: &names
            .first()
            .map(|n| n.to_string())
            .unwrap_or_else(|| digest.to_string()),
        digest: &digest,
        layers: m.layers.len(),
    });

    // Layers already in the store count against the image's cap too.
    let mut used = 0;
    let mut missing = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (desc, diff_id) in m.layers.iter().zip(&config.rootfs.diff_ids) {
        if !seen.insert(diff_id.clone()) {
            continue;
        }
        match w.existing_layer(diff_id) {
            Some(r) => {
                used += r.bytes;
                progress.event(Event::LayerCached {
                    digest: &desc.digest,
                });
            }
            None => missing.push((desc, diff_id)),
        }
    }
    if used > limits.max_bytes {
        return Err(ImageError::Limit(format!(
            "the image unpacks to more than {} bytes (the cap)",
            limits.max_bytes
        )));
    }
    let budget = Budget::new(limits.max_bytes, used);
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<ImageError>> = Mutex::new(None);
    let workers = source.parallel().clamp(1, 8).min(missing.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((desc, diff_id)) = missing.get(i) else {
                    return;
                };
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let mut fetch = |partial: &Path| source.blob(desc, partial);
                let r = w.ensure_layer(desc, diff_id, limits, &budget, &mut fetch, progress);
                match r {
                    Ok(_) => progress.event(Event::LayerDone {
                        digest: &desc.digest,
                    }),
                    Err(e) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut unpacked = 0;
    for d in &seen {
        unpacked += w.existing_layer(d).map(|r| r.bytes).unwrap_or(0);
    }
    let record = ImageRecord {
        digest: digest.clone(),
        index_digest: index.map(|(_, d)| d.clone()),
        config: m.config.digest.clone(),
        platform: config.platform().to_string(),
        layers: m
            .layers
            .iter()
            .zip(&config.rootfs.diff_ids)
            .map(|(d, id)| LayerRecord {
                blob: d.digest.clone(),
                diff_id: id.clone(),
                size: d.size,
                media_type: d.media_type.clone(),
            })
            .collect(),
        created: config.created.clone(),
        added: 0,
        source: origin,
        unpacked_bytes: unpacked,
    };
    w.record(record.clone(), names)?;
    Ok(record)
}
