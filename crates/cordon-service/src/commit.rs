//! Committing a sandbox: what a sandbox made from an image changed in that image's root
//! becomes a new image of the node's store (`cordon_image::commit`), taken with the
//! sandbox's processes frozen (as a snapshot is) and thawed after.
//!
//! Threat model: the caller names a sandbox (scoped to its key: another key's is a 404, as
//! for any sandbox call) and a name. What is read is the sandbox's own writable layer, written
//! by hostile code: `cordon_image::commit` reads it without following anything and unpacks
//! it with the hostile-layer unpacker. The image is the node's (as a pulled one is), so a
//! commit may only take names no image has yet — a key cannot replace an image that other
//! keys' templates or sandboxes run. A sandbox without an image is refused: its root is the
//! host's system directories, which never go into an image.

use std::os::fd::AsFd;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, ServiceError};
use crate::images::image_error;
use crate::{Caller, Service};

/// `POST /v1/sandboxes/{id}/commit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// The new image's name, `NAME[:TAG]` (`my-agent:2`); no image of the store may have it.
    pub reference: String,
    /// Dockerfile lines applied to the image's config: `ENV`, `CMD`, `ENTRYPOINT`, `WORKDIR`,
    /// `USER`, `LABEL` (as `docker commit --change`; no variable expansion).
    #[serde(default)]
    pub changes: Vec<String>,
}

/// What a commit made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitResult {
    /// The name it was given, in full (`docker.io/library/my-agent:2`); empty for an image
    /// committed without a name (the Docker door's untagged commit).
    pub reference: String,
    /// The new image's manifest digest.
    pub digest: String,
    /// The image it was made from (manifest digest).
    pub base: String,
    /// Its layers: the base image's, then the new one.
    pub layers: usize,
    /// The new layer: its digest and size (a tar of what the sandbox changed).
    pub layer_digest: String,
    pub layer_size: u64,
    /// How long the sandbox's processes were frozen, in milliseconds (0 if it was paused
    /// already: it stays paused).
    pub frozen_ms: u64,
    /// What the image does not hold.
    pub not_carried: Vec<String>,
}

/// What a commit never carries.
const NOT_CARRIED: [&str; 5] = [
    "/workspace, the home directory and /tmp (cordon's own mounts in every sandbox: a snapshot keeps them)",
    "/dev, /proc and the files cordon binds into /etc",
    "volumes",
    "memory and processes",
    "device nodes and sockets",
];

/// Longest `changes` list, and longest line in it.
const MAX_CHANGES: usize = 64;
const MAX_CHANGE_LEN: usize = 4096;

impl Service {
    /// Makes an image of the sandbox `id`'s image plus what the sandbox changed in its root.
    pub async fn commit_sandbox(
        &self,
        caller: &Caller,
        id: &str,
        req: CommitRequest,
    ) -> Result<CommitResult, ServiceError> {
        if req.reference.is_empty() || req.reference.len() > 512 {
            return Err(ServiceError::bad_request(
                "reference: 1 to 512 characters, NAME[:TAG]",
            ));
        }
        let name = cordon_image::Reference::parse(&req.reference)
            .map_err(|e| ServiceError::bad_request(format!("reference: {e}")))?;
        if name.digest.is_some() {
            return Err(ServiceError::bad_request(
                "reference: NAME[:TAG]; the digest is the new image's own",
            ));
        }
        self.commit_named(caller, id, Some(name), req.changes).await
    }

    /// As [`Service::commit_sandbox`], but the image may have no name (Docker's `commit`
    /// without a repository: known by its digest until `cordon image prune`). `changes` as
    /// there.
    pub async fn commit_sandbox_unnamed(
        &self,
        caller: &Caller,
        id: &str,
        changes: Vec<String>,
    ) -> Result<CommitResult, ServiceError> {
        self.commit_named(caller, id, None, changes).await
    }

    async fn commit_named(
        &self,
        caller: &Caller,
        id: &str,
        name: Option<cordon_image::Reference>,
        changes: Vec<String>,
    ) -> Result<CommitResult, ServiceError> {
        if changes.len() > MAX_CHANGES || changes.iter().any(|c| c.len() > MAX_CHANGE_LEN) {
            return Err(ServiceError::bad_request(format!(
                "changes: at most {MAX_CHANGES} lines of {MAX_CHANGE_LEN} bytes"
            )));
        }
        let live = self.get_live(caller, id)?;
        if !live.sandbox.is_alive() {
            return Err(ServiceError {
                code: "sandbox_ended",
                ..ServiceError::conflict(format!("sandbox '{id}' has ended"))
            });
        }
        let base = live
            .image
            .as_ref()
            .and_then(|i| i.digest.as_ref().map(|d| d.to_string()));
        let (Some(base), Some(_)) = (base, live.sandbox.writable_layer()) else {
            return Err(ServiceError::new(
                ErrorKind::Conflict,
                "no_image",
                format!(
                    "sandbox '{id}' was not made from an image of the store: its root is the \
                     host's system directories (or a directory), which never go into an image. \
                     Create the sandbox with `image` (an image of the store: `cordon image pull` \
                     or `cordon image build` one) and commit that; to keep this sandbox's \
                     /workspace, home and /tmp, take a snapshot"
                ),
            ));
        };
        let store = self.image_store()?;
        let opts = cordon_image::commit::CommitOptions {
            names: name.iter().cloned().collect(),
            limits: cordon_image::unpack::Limits::default(),
            source: format!("commit {id}"),
            changes,
        };
        let reader = live.sandbox.clone();
        let (made, frozen) = self
            .while_frozen(&live, move || {
                let upper = match reader.writable_layer() {
                    Some(Ok(fd)) => fd,
                    Some(Err(e)) => {
                        return Err(ServiceError::internal(format!(
                            "opening the sandbox's writable layer: {e}"
                        )))
                    }
                    None => {
                        return Err(ServiceError::internal("the sandbox has no writable layer"))
                    }
                };
                cordon_image::commit::commit(&store, &base, upper.as_fd(), &opts)
                    .map_err(image_error)
            })
            .await?;
        let reference = name.map(|n| n.to_string()).unwrap_or_default();
        self.audit.record(
            "image.commit",
            &caller.key_id,
            Some(id),
            match &made {
                Ok(c) => serde_json::json!({"reference": reference, "digest": c.record.digest.to_string(), "base": c.base}),
                Err(e) => serde_json::json!({"reference": reference, "error": e.code}),
            },
        );
        let c = made?;
        Ok(CommitResult {
            reference,
            digest: c.record.digest.to_string(),
            base: c.base,
            layers: c.record.layers.len(),
            layer_digest: c.layer.diff_id.to_string(),
            layer_size: c.layer.size,
            frozen_ms: frozen.frozen_ms,
            not_carried: NOT_CARRIED.iter().map(|s| s.to_string()).collect(),
        })
    }
}
