//! Images through the service: what the node's image store holds, and pulls into it, for
//! every front end. The store is the node's (`<data-dir>/images`, shared with
//! `cordon image …` on the same data directory), not a key's: any caller may list it, and a
//! pull makes the image available to every key.
//!
//! Pulling is blocking work (`cordon_image` speaks to the registry with a blocking client and
//! unpacks on the calling thread), so it runs on tokio's blocking pool; its progress events
//! come back over a channel, coalesced so a fast download does not become thousands of events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cordon_image::{Event, ImageError, Platform, PullOptions, Reference, Store};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{Caller, Service};
use crate::error::{ErrorKind, ServiceError};

/// How the service may pull images (from `cordon serve`'s flags).
#[derive(Debug, Clone, Default)]
pub struct ImagesConfig {
    /// Registries (`host[:port]`) that may be reached over plain HTTP besides loopback ones.
    pub insecure: Vec<String>,
    /// When set, the only registries the API may pull from (`host[:port]`, `docker.io` for
    /// Docker Hub). A pull makes the server connect where the caller says; an operator who
    /// does not want API keys to choose that names the registries here.
    pub registries: Option<Vec<String>>,
}

/// One image in the node's store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageView {
    /// Normalised references that name it (`docker.io/library/python:3.12-slim`); empty when
    /// only its digest does.
    pub names: Vec<String>,
    /// The image manifest's digest (`sha256:…`): what the image is.
    pub digest: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// Number of layers.
    pub layers: usize,
    /// Sum of the layers' compressed sizes, in bytes.
    pub size_bytes: u64,
    /// Sum of the layers' unpacked file sizes, in bytes.
    pub unpacked_bytes: u64,
    /// When the image was built (from its config), as the image states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// When it entered this store (Unix seconds).
    pub added: u64,
    /// Where it came from: `pull REGISTRY` or `import PATH`.
    pub source: String,
}

/// `GET /v1/images`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageList {
    pub images: Vec<ImageView>,
}

/// `POST /v1/images/pull`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// `NAME[:TAG][@DIGEST]`, Docker's way: `python:3.12-slim`, `ghcr.io/org/app:1`,
    /// `127.0.0.1:5000/team/tool@sha256:…`.
    pub reference: String,
    /// `os/arch[/variant]` to pick from a multi-platform image; the server's own by default.
    #[serde(default)]
    pub platform: Option<String>,
}

/// What a pull did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullResult {
    /// The normalised reference pulled.
    pub reference: String,
    pub image: ImageView,
}

/// A pull's progress, as `POST /v1/images/pull` streams it (`Accept: text/event-stream`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PullEvent {
    /// The manifest is fetched and verified: what will be fetched is known.
    Resolved {
        reference: String,
        digest: String,
        layers: usize,
    },
    /// A layer the store already has (shared with another image, or pulled before).
    LayerCached { digest: String },
    /// Download of a layer starts (`from` > 0: resumed where an interrupted one stopped).
    LayerStart {
        digest: String,
        size: u64,
        from: u64,
    },
    /// Bytes of a layer so far (at most a few per second per layer, and at its end).
    LayerProgress {
        digest: String,
        bytes: u64,
        size: u64,
    },
    /// The layer's blob is verified; it is being unpacked.
    LayerUnpacking { digest: String },
    /// The layer is in the store.
    LayerDone { digest: String },
    /// A download broke and is retried from byte `from`.
    Retry {
        digest: String,
        from: u64,
        error: String,
    },
}

fn view(names: Vec<String>, r: &cordon_image::store::ImageRecord) -> ImageView {
    ImageView {
        names,
        digest: r.digest.to_string(),
        platform: r.platform.clone(),
        layers: r.layers.len(),
        size_bytes: r.layers.iter().map(|l| l.size).sum(),
        unpacked_bytes: r.unpacked_bytes,
        created: r.created.clone(),
        added: r.added,
        source: r.source.clone(),
    }
}

/// The HTTP status an image error deserves: the caller's mistake (4xx) or the registry's
/// (502), never a bare 500 for a refusal that was on purpose.
pub fn image_error(e: ImageError) -> ServiceError {
    let message = e.to_string();
    match e {
        ImageError::InvalidReference { .. } | ImageError::InvalidPlatform(_) => {
            ServiceError::bad_request(message)
        }
        ImageError::NotFound { .. } => ServiceError::not_found(message),
        ImageError::Ambiguous { .. } => ServiceError::bad_request(message),
        ImageError::Exists { .. } => ServiceError {
            code: "already_exists",
            ..ServiceError::conflict(message)
        },
        ImageError::Insecure { .. } => {
            ServiceError::new(ErrorKind::Forbidden, "forbidden", message)
        }
        ImageError::Auth { .. } => ServiceError::new(ErrorKind::Upstream, "registry_auth", message),
        ImageError::Registry { .. } => ServiceError::new(ErrorKind::Upstream, "registry", message),
        ImageError::NoPlatform { .. } => {
            ServiceError::new(ErrorKind::Unprocessable, "no_platform", message)
        }
        ImageError::DigestMismatch { .. }
        | ImageError::Limit(_)
        | ImageError::Unsupported(_)
        | ImageError::Format { .. } => {
            ServiceError::new(ErrorKind::Unprocessable, "bad_image", message)
        }
        ImageError::Io { ref source, .. } if crate::error::is_storage_full(source) => {
            ServiceError::storage_full(&message)
        }
        ImageError::Io { .. } => ServiceError::internal(message),
    }
}

/// Coalesces byte events: one `layer_progress` per layer at most every `EVERY`, and one when
/// the layer's bytes are all there.
const EVERY: Duration = Duration::from_millis(250);

struct Forward {
    tx: mpsc::Sender<PullEvent>,
    /// Per layer: (bytes so far, size, when the last progress event went).
    layers: Mutex<HashMap<String, (u64, u64, Instant)>>,
}

impl Forward {
    fn send(&self, ev: PullEvent) {
        // The caller may have gone away; the pull goes on (the image is wanted by whoever
        // asks next), so a closed channel is not an error.
        let _ = self.tx.blocking_send(ev);
    }
}

impl cordon_image::Progress for Forward {
    fn event(&self, event: Event<'_>) {
        let ev = match event {
            Event::Resolved {
                reference,
                digest,
                layers,
            } => PullEvent::Resolved {
                reference: reference.to_string(),
                digest: digest.to_string(),
                layers,
            },
            Event::LayerCached { digest } => PullEvent::LayerCached {
                digest: digest.to_string(),
            },
            Event::LayerStart { digest, size, from } => {
                if let Ok(mut m) = self.layers.lock() {
                    m.insert(digest.to_string(), (from, size, Instant::now()));
                }
                PullEvent::LayerStart {
                    digest: digest.to_string(),
                    size,
                    from,
                }
            }
            Event::LayerBytes { digest, n } => {
                let key = digest.to_string();
                let due = match self.layers.lock() {
                    Ok(mut m) => {
                        let e = m.entry(key.clone()).or_insert((0, 0, Instant::now()));
                        e.0 += n;
                        let done = e.1 > 0 && e.0 >= e.1;
                        if done || e.2.elapsed() >= EVERY {
                            e.2 = Instant::now();
                            Some((e.0, e.1))
                        } else {
                            None
                        }
                    }
                    Err(_) => None,
                };
                match due {
                    Some((bytes, size)) => PullEvent::LayerProgress {
                        digest: key,
                        bytes,
                        size,
                    },
                    None => return,
                }
            }
            Event::LayerUnpacking { digest } => PullEvent::LayerUnpacking {
                digest: digest.to_string(),
            },
            Event::LayerDone { digest } => PullEvent::LayerDone {
                digest: digest.to_string(),
            },
            Event::Retry {
                digest,
                from,
                error,
            } => PullEvent::Retry {
                digest: digest.to_string(),
                from,
                error: error.to_string(),
            },
        };
        self.send(ev);
    }
}

impl Service {
    pub(crate) fn image_store(&self) -> Result<Store, ServiceError> {
        Store::open(&self.cfg.data_dir).map_err(image_error)
    }

    /// How this server pulls `reference` (its insecure registries), or the refusal when
    /// its registry is not one the server may pull from. Every pull of the service — asked
    /// for, or on demand for a sandbox — goes through here.
    pub(crate) fn pull_options(
        &self,
        reference: &Reference,
        platform: Platform,
    ) -> Result<PullOptions, ServiceError> {
        if let Some(allowed) = &self.cfg.images.registries {
            if !allowed
                .iter()
                .any(|a| registry_matches(a, &reference.registry))
            {
                return Err(ServiceError::new(
                    ErrorKind::Forbidden,
                    "forbidden",
                    format!(
                        "this server pulls only from {}; {} is not one of them (its operator \
                         names registries with `cordon serve --pull-from`)",
                        allowed.join(", "),
                        reference.registry
                    ),
                ));
            }
        }
        Ok(PullOptions {
            insecure: self.cfg.images.insecure.clone(),
            platform,
            ..PullOptions::default()
        })
    }

    /// Every image in the node's store, newest first.
    pub async fn list_images(&self, _caller: &Caller) -> Result<ImageList, ServiceError> {
        let dir = self.cfg.data_dir.clone();
        let list = tokio::task::spawn_blocking(move || Store::open(&dir).and_then(|s| s.list()))
            .await
            .map_err(|e| ServiceError::internal(format!("listing images: {e}")))?
            .map_err(image_error)?;
        let mut images: Vec<ImageView> = list
            .iter()
            .map(|s| view(s.names.clone(), &s.record))
            .collect();
        images.sort_by(|a, b| b.added.cmp(&a.added).then_with(|| a.digest.cmp(&b.digest)));
        Ok(ImageList { images })
    }

    /// Pulls an image into the node's store; with `progress`, reports as it goes.
    pub async fn pull_image(
        &self,
        caller: &Caller,
        req: PullRequest,
        progress: Option<mpsc::Sender<PullEvent>>,
    ) -> Result<PullResult, ServiceError> {
        let reference = validate(&req)?;
        let platform = match &req.platform {
            Some(p) => Platform::parse(p).map_err(image_error)?,
            None => Platform::host(),
        };
        let opts = self.pull_options(&reference, platform)?;
        let store = self.image_store()?;
        let name = req.reference.clone();
        let pulled = tokio::task::spawn_blocking(move || {
            let quiet = cordon_image::Quiet;
            match progress {
                Some(tx) => {
                    let fwd = Forward {
                        tx,
                        layers: Mutex::new(HashMap::new()),
                    };
                    cordon_image::pull(&store, &name, &opts, &fwd)
                }
                None => cordon_image::pull(&store, &name, &opts, &quiet),
            }
            .and_then(|p| {
                let names = store.find(&p.record.digest.to_string())?.names;
                Ok((p, names))
            })
        })
        .await
        .map_err(|e| ServiceError::internal(format!("pulling {}: {e}", req.reference)))?
        .map_err(image_error);
        self.audit.record(
            "image.pull",
            &caller.key_id,
            None,
            match &pulled {
                Ok((p, _)) => serde_json::json!({"reference": p.reference, "digest": p.record.digest.to_string()}),
                Err(e) => serde_json::json!({"reference": reference.to_string(), "error": e.code}),
            },
        );
        let (p, names) = pulled?;
        Ok(PullResult {
            reference: p.reference.clone(),
            image: view(names, &p.record),
        })
    }
}

/// Checks what the OpenAPI document promises before anything reaches the network.
pub fn validate(req: &PullRequest) -> Result<Reference, ServiceError> {
    if req.reference.is_empty() || req.reference.len() > 512 {
        return Err(ServiceError::bad_request(
            "reference: 1 to 512 characters, NAME[:TAG][@DIGEST]",
        ));
    }
    if let Some(p) = &req.platform {
        Platform::parse(p).map_err(image_error)?;
    }
    Reference::parse(&req.reference).map_err(image_error)
}

/// `docker.io` also answers to Docker Hub's other spellings.
fn registry_matches(allowed: &str, registry: &str) -> bool {
    let norm = |s: &str| match s {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        s => s.to_ascii_lowercase(),
    };
    norm(allowed) == norm(registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_spellings_match() {
        assert!(registry_matches("docker.io", "registry-1.docker.io"));
        assert!(registry_matches("127.0.0.1:5000", "127.0.0.1:5000"));
        assert!(!registry_matches("127.0.0.1:5000", "127.0.0.1:5001"));
        assert!(!registry_matches("ghcr.io", "docker.io"));
    }

    #[test]
    fn refusals_are_not_server_errors() {
        let cases = [
            ImageError::InvalidReference {
                reference: "x".into(),
                reason: "y".into(),
            },
            ImageError::Insecure {
                registry: "10.0.0.1:5000".into(),
            },
            ImageError::DigestMismatch {
                what: "layer".into(),
                expected: "a".into(),
                actual: "b".into(),
            },
        ];
        for e in cases {
            assert!(!matches!(image_error(e).kind, ErrorKind::Internal));
        }
    }
}

/// One image with the parts of its config a run honours (`GET /images/{name}/json` of the
/// Docker door, and what a container's command defaults to).
#[derive(Debug, Clone, Serialize)]
pub struct ImageDetail {
    pub image: ImageView,
    /// The config blob's digest (Docker's image id).
    pub config_digest: String,
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// `EXPOSE`d ports (`8000/tcp`): recorded in the image, never published.
    pub exposed_ports: Vec<String>,
    pub architecture: String,
    pub os: String,
}

/// What removing an image did: references untagged, images deleted.
#[derive(Debug, Clone, Serialize)]
pub struct ImageRemoved {
    pub untagged: Vec<String>,
    pub deleted: Vec<String>,
}

impl Service {
    /// An image of the node's store by reference, digest or digest prefix (404 when absent).
    pub async fn inspect_image(
        &self,
        _caller: &Caller,
        name: &str,
    ) -> Result<ImageDetail, ServiceError> {
        if cordon_image::store::names_directory(name) {
            return Err(ServiceError::not_found(format!("no such image: {name}")));
        }
        let store = self.image_store()?;
        let n = name.to_string();
        let found = tokio::task::spawn_blocking(move || store.inspect(&n))
            .await
            .map_err(|e| ServiceError::internal(format!("inspecting {name}: {e}")))?
            .map_err(|e| match e {
                ImageError::NotFound { .. } => {
                    ServiceError::not_found(format!("no such image: {name}"))
                }
                other => image_error(other),
            })?;
        let c = found.config.config.clone().unwrap_or_default();
        Ok(ImageDetail {
            image: view(found.names.clone(), &found.record),
            config_digest: found.record.config.to_string(),
            env: c.env.unwrap_or_default(),
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            working_dir: c.working_dir.filter(|w| !w.is_empty()),
            user: c.user.filter(|u| !u.is_empty()),
            labels: c.labels.unwrap_or_default(),
            exposed_ports: c.exposed_ports.unwrap_or_default().into_keys().collect(),
            architecture: found.config.architecture.clone(),
            os: found.config.os.clone(),
        })
    }

    /// A fresh path in the image store's scratch directory for an archive to
    /// [`Service::load_image`] (the caller writes it, and removes it after).
    pub fn load_staging(&self) -> Result<std::path::PathBuf, ServiceError> {
        let dir = self.cfg.data_dir.join("images").join("tmp");
        std::fs::create_dir_all(&dir)
            .map_err(|e| ServiceError::internal(format!("the image store's scratch: {e}")))?;
        Ok(dir.join(format!("load-{}.tar", crate::keys::random_hex(8))))
    }

    /// Whether this server takes images from archives (`docker load`): not when its operator
    /// named the registries it pulls from (`--pull-from`), since an archive comes from none.
    pub fn may_load(&self, _caller: &Caller) -> Result<(), ServiceError> {
        match &self.cfg.images.registries {
            Some(allowed) => Err(ServiceError::new(
                ErrorKind::Forbidden,
                "forbidden",
                format!(
                    "load: this server takes images only from {} (`cordon serve --pull-from`); \
                     an archive comes from none of them",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// Imports a `docker save` / `podman save` / oci-archive file into the node's store (the
    /// archive is hostile: `cordon_image::import` unpacks it within the store's limits);
    /// the images it held, with their names.
    pub async fn load_image(
        &self,
        caller: &Caller,
        archive: &std::path::Path,
    ) -> Result<Vec<ImageView>, ServiceError> {
        self.may_load(caller)?;
        let store = self.image_store()?;
        let path = archive.to_path_buf();
        let imported = tokio::task::spawn_blocking(move || {
            cordon_image::import(
                &store,
                &path,
                &cordon_image::ImportOptions::default(),
                &cordon_image::Quiet,
            )
        })
        .await
        .map_err(|e| ServiceError::internal(format!("loading an archive: {e}")))?
        .map_err(|e| ServiceError::bad_request(format!("load: {e}")));
        self.audit.record(
            "image.load",
            &caller.key_id,
            None,
            match &imported {
                Ok(list) => serde_json::json!({"digests": list.iter().map(|i| i.record.digest.to_string()).collect::<Vec<_>>()}),
                Err(e) => serde_json::json!({"error": e.code}),
            },
        );
        Ok(imported?
            .iter()
            .map(|i| view(i.names.clone(), &i.record))
            .collect())
    }

    /// Docker's `User` for an image of the store: the `(uid, gid)` a sandbox made from it runs
    /// as inside, names looked up in the image's own `/etc/passwd` and `/etc/group` (never the
    /// host's); 400 naming `user` when the image does not list them.
    pub async fn image_user(
        &self,
        _caller: &Caller,
        image: &str,
        user: &str,
    ) -> Result<(u32, u32), ServiceError> {
        if cordon_image::store::names_directory(image) {
            return Err(ServiceError::not_found(format!("no such image: {image}")));
        }
        let store = self.image_store()?;
        let (n, u) = (image.to_string(), user.to_string());
        tokio::task::spawn_blocking(move || {
            let root = store.resolve(&n).map_err(|e| match e {
                ImageError::NotFound { .. } => {
                    ServiceError::not_found(format!("no such image: {n}"))
                }
                other => image_error(other),
            })?;
            cordon_image::user::resolve_user(&root.lower_dirs, &u)
                .map_err(|e| ServiceError::bad_request(format!("user: {e}")))
        })
        .await
        .map_err(|e| ServiceError::internal(format!("resolving user {user}: {e}")))?
    }

    /// Removes a reference from the store (or, given a digest, the image); 404 when absent.
    pub async fn remove_image(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<ImageRemoved, ServiceError> {
        // Found first, so that an unknown name is a 404 and not an empty removal.
        self.inspect_image(caller, name).await?;
        let store = self.image_store()?;
        let n = name.to_string();
        let removed = tokio::task::spawn_blocking(move || store.remove(&n))
            .await
            .map_err(|e| ServiceError::internal(format!("removing {name}: {e}")))?
            .map_err(image_error)?;
        self.audit.record(
            "image.remove",
            &caller.key_id,
            None,
            serde_json::json!({"reference": name, "untagged": removed.untagged}),
        );
        Ok(ImageRemoved {
            untagged: removed.untagged,
            deleted: removed.deleted.iter().map(|d| d.to_string()).collect(),
        })
    }
}
