//! `cordon image push`: an image of the store to an OCI registry (v2 API), with the
//! credentials a pull would use (`cordon image login`, then `~/.docker/config.json`).
//!
//! The store keeps layers unpacked, not their original blobs, so each layer is written out
//! again as a tar (whiteouts back to OCI `.wh.` entries) and the image's config gets the
//! `diff_id`s of those tars: the pushed image has its own manifest digest, and the same files,
//! Env, Cmd and the rest. Nothing from outside the store's layer directories is read (the walk
//! follows no symlink); credentials go only to the registry named (an upload location on
//! another host is refused) and are never logged.

use serde_json::json;

use crate::auth::CredentialStore;
use crate::build::TarBuilder;
use crate::digest::Digest;
use crate::error::{ImageError, IoContext};
use crate::fsutil;
use crate::oci::{OCI_CONFIG, OCI_LAYER, OCI_MANIFEST};
use crate::pull::{Body, Client, PullOptions};
use crate::reference::Reference;
use crate::store::Store;
use crate::unpack::Limits;

/// What [`push`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pushed {
    /// Where it went (normalised).
    pub reference: String,
    /// The manifest digest in the registry.
    pub digest: Digest,
    pub layers: usize,
    /// Blobs the registry already had.
    pub skipped_blobs: usize,
}

/// Pushes the store's image `source` to `dest` (`REGISTRY/NAME[:TAG]`).
pub fn push(
    store: &Store,
    source: &str,
    dest: &str,
    opts: &PullOptions,
    log: &dyn Fn(&str),
) -> Result<Pushed, ImageError> {
    let r = Reference::parse(dest)?;
    // The layers stay the store's while they are read (prune waits).
    let w = store.writer()?;
    let found = store.find(source)?;
    let config_bytes = store.read_document(&found.record.config)?;
    let mut config: serde_json::Value = serde_json::from_slice(&config_bytes)
        .map_err(|e| ImageError::format("image config", e.to_string()))?;
    let creds = opts
        .credentials
        .clone()
        .or_else(|| CredentialStore::new(store.path()).get(&r.registry));
    let client = Client::connect(&r, opts, creds)?;
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    let mut skipped = 0;
    for (i, l) in found.record.layers.iter().enumerate() {
        let dir = store.layer_path(&l.diff_id);
        let tmp = store.tmp_path(&format!("push-{}.tar", fsutil::unique()));
        let result = (|| {
            let file =
                fsutil::create_new_private(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
            let mut tb = TarBuilder::new(
                file,
                Limits {
                    max_bytes: u64::MAX,
                    max_entries: u64::MAX,
                    ..Limits::default()
                },
            );
            tb.from_store = true;
            let d = fsutil::open_dir(&dir).ctx(|| format!("layer {}", l.diff_id))?;
            tb.tree(std::os::fd::AsFd::as_fd(&d), "", false)?;
            let (digest, size) = tb.finish()?;
            log(&format!(
                "layer {}/{}: {} ({size} bytes)",
                i + 1,
                found.record.layers.len(),
                digest.short()
            ));
            if upload(&client, &digest, Body::File(&tmp))? {
                skipped += 1;
            }
            Ok::<_, ImageError>((digest, size))
        })();
        let _ = std::fs::remove_file(&tmp);
        let (digest, size) = result?;
        layers.push(json!({"mediaType": OCI_LAYER, "digest": digest.to_string(), "size": size}));
        diff_ids.push(digest.to_string());
    }
    drop(w);
    config["rootfs"] = json!({"type": "layers", "diff_ids": diff_ids});
    let config_bytes =
        serde_json::to_vec(&config).map_err(|e| ImageError::format("config", e.to_string()))?;
    let config_digest = Digest::of(&config_bytes);
    if upload(
        &client,
        &config_digest,
        Body::Bytes(&config_bytes, "application/octet-stream"),
    )? {
        skipped += 1;
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest.to_string(), "size": config_bytes.len()},
        "layers": layers,
    });
    let manifest_bytes =
        serde_json::to_vec(&manifest).map_err(|e| ImageError::format("manifest", e.to_string()))?;
    let digest = Digest::of(&manifest_bytes);
    let tag = r.tag.clone().unwrap_or_else(|| digest.to_string());
    let resp = client.send(
        "PUT",
        &format!("/v2/{}/manifests/{tag}", client.repository()),
        Body::Bytes(&manifest_bytes, OCI_MANIFEST),
    )?;
    client.check_status(&resp, "uploading the manifest")?;
    Ok(Pushed {
        reference: r.to_string(),
        digest,
        layers: layers.len(),
        skipped_blobs: skipped,
    })
}

/// Uploads one blob unless the registry has it (then `true`): a monolithic upload
/// (POST for a location, PUT with the digest).
fn upload(client: &Client, digest: &Digest, body: Body<'_>) -> Result<bool, ImageError> {
    let repo = client.repository().to_string();
    let head = client.send("HEAD", &format!("/v2/{repo}/blobs/{digest}"), Body::Empty)?;
    if head.status().as_u16() == 200 {
        return Ok(true);
    }
    let start = client.send("POST", &format!("/v2/{repo}/blobs/uploads/"), Body::Empty)?;
    client.check_status(&start, "starting an upload")?;
    let loc = start
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| ImageError::format("registry", "an upload without a Location"))?;
    let sep = if loc.contains('?') { '&' } else { '?' };
    let put = client.send("PUT", &format!("{loc}{sep}digest={digest}"), body)?;
    client.check_status(&put, &format!("uploading blob {digest}"))?;
    Ok(false)
}
