//! The crate's one error type. Messages name what failed and why, never a credential or a
//! file's content.

use std::io;

/// Anything the image store, the unpacker, an import or a pull can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A reference (`NAME[:TAG][@DIGEST]`) or digest that cannot be parsed.
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    /// A platform that is not `OS/ARCH[/VARIANT]` in lower case.
    #[error("invalid platform {0:?}: OS/ARCH[/VARIANT] in lower case, e.g. linux/arm64")]
    InvalidPlatform(String),
    /// No image in the store answers to this reference.
    #[error("no image {reference} in the store (pull or import it first: `cordon image ls` lists what is there)")]
    NotFound { reference: String },
    /// A name that must be new (a commit's) names an image already.
    #[error("the store has an image named {reference} already: pick another name, or remove it first (`cordon image rm {reference}`)")]
    Exists { reference: String },
    /// A digest prefix that names more than one image.
    #[error("{prefix} names more than one image: {candidates}")]
    Ambiguous { prefix: String, candidates: String },
    /// Content whose sha256 is not the one it was announced with.
    #[error("{what}: digest mismatch: expected {expected}, got {actual} (refused, nothing kept)")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    /// A size or count cap was reached.
    #[error("{0}")]
    Limit(String),
    /// A format, media type or feature cordon does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Malformed input: a manifest, a config, an archive.
    #[error("{what}: {reason}")]
    Format { what: String, reason: String },
    /// The registry answered with an error.
    #[error("registry {registry}: {message}")]
    Registry { registry: String, message: String },
    /// The registry refused the credentials (or asked for some and none were found).
    #[error("registry {registry}: authentication failed: {message}")]
    Auth { registry: String, message: String },
    /// Plain HTTP to a registry that is neither on loopback nor named as insecure.
    #[error("registry {registry} does not speak HTTPS; plain HTTP is used only for loopback registries and ones named with --insecure-registry {registry}")]
    Insecure { registry: String },
    /// A multi-platform image without a manifest for the platform asked for.
    #[error("{reference} has no image for {wanted} (it has: {available})")]
    NoPlatform {
        reference: String,
        wanted: String,
        available: String,
    },
}

impl ImageError {
    /// An [`ImageError::Io`] with context.
    pub fn io(context: impl Into<String>, source: io::Error) -> ImageError {
        ImageError::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`ImageError::Format`].
    pub fn format(what: impl Into<String>, reason: impl Into<String>) -> ImageError {
        ImageError::Format {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Adds context to `io::Result`s.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ImageError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ImageError> {
        self.map_err(|e| ImageError::io(context(), e))
    }
}

impl<T> IoContext<T> for rustix::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, ImageError> {
        self.map_err(|e| ImageError::io(context(), e.into()))
    }
}
