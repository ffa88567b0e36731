//! The service's errors: a kind (what went wrong, in terms any door can say), a stable code
//! (a machine-readable name clients match on) and a message for a person. No wire protocol
//! here: each door maps a kind to its own way of saying it (an HTTP status, a JSON-RPC
//! error, an E2B error body).
//!
//! Messages are shown to callers: they never carry secrets, environment values or file
//! contents.

/// What kind of failure an error is; doors choose their status from this alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is malformed or names something impossible.
    Invalid,
    /// No credential, or one that is not valid.
    Unauthenticated,
    /// The caller may not do this.
    Forbidden,
    /// No such thing (or not the caller's).
    NotFound,
    /// The thing is in a state that does not allow it (paused, ended, exists already).
    Conflict,
    /// A body or file is over a size the server allows.
    TooLarge,
    /// A body's encoding is one the server does not take.
    UnsupportedMedia,
    /// Well-formed, but cannot be processed (an image for no platform of this host).
    Unprocessable,
    /// Over the caller's rate limit; `retry_after` says when to try again.
    RateLimited,
    /// Over the caller's quota (sandboxes at once).
    Quota,
    /// The sandbox's disk is full.
    NoSpace,
    /// Something this server called (a registry, an upstream) failed.
    Upstream,
    /// This host or sandbox cannot do it.
    Unsupported,
    /// Cannot be served now (a sandbox's helper gone, shutting down).
    Unavailable,
    /// A fault of the server's own.
    Internal,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub kind: ErrorKind,
    /// Stable, machine-readable (`not_found`, `sandbox_paused`, …).
    pub code: &'static str,
    pub message: String,
    /// Seconds to wait before retrying (rate limits).
    pub retry_after: Option<u64>,
}

impl ServiceError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        ServiceError {
            kind,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, "invalid_request", message)
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, "not_found", what)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, "forbidden", message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, "conflict", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, "internal", message)
    }
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        ServiceError {
            retry_after: Some(retry_after),
            ..Self::new(ErrorKind::RateLimited, "rate_limited", message)
        }
    }
    /// A body or upload over `limit` bytes; names the server option that sets it.
    pub fn too_large(what: &str, limit: u64, option: &str) -> Self {
        Self::new(
            ErrorKind::TooLarge,
            "too_large",
            format!(
                "{what} is larger than this server accepts ({}); the operator can raise it with {option}",
                human_bytes(limit)
            ),
        )
    }
}

/// `67108864` → `64 MiB`: sizes in messages are for people.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `{"error": {"code": "...", "message": "..."}}`: the body the native API and the doors that
/// share its shape answer with.
#[derive(serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl From<&ServiceError> for ErrorBody {
    fn from(e: &ServiceError) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: e.code.to_string(),
                message: e.message.clone(),
            },
        }
    }
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::internal(format!("registry: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_messages_read_as_people_write_them() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
