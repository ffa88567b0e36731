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
    /// A disk is full: the sandbox's (`no_space`), or the server's data directory
    /// (`storage_full`: ENOSPC or EDQUOT where the server keeps its state).
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
    /// `what` (an upload, a body) over the server's limit of `max` bytes: said in a size a
    /// person reads, with the flag that sets it, so a client knows it is the server's choice.
    pub fn too_large(what: &str, max: u64) -> Self {
        Self::new(
            ErrorKind::TooLarge,
            "too_large",
            format!(
                "{what} is larger than this server accepts: at most {} (set by the server's \
                 operator with `cordon serve --max-upload`)",
                human_size(max)
            ),
        )
    }
}

/// `67108864` as `64 MiB`; a size that is no whole number of units also in bytes.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if bytes >= unit {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", bytes / unit)
            } else {
                format!("{:.1} {name} ({bytes} bytes)", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes} bytes")
}

/// Whether an I/O error says the disk is full (ENOSPC) or the owner over quota (EDQUOT).
pub fn is_storage_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

impl ServiceError {
    /// The server's data directory has no room for `what`: said as such, so that a client
    /// knows its request was fine and an operator what to free.
    pub fn storage_full(what: &str) -> Self {
        Self::new(
            ErrorKind::NoSpace,
            "storage_full",
            format!(
                "{what}: the server's data directory is full (no space left on its disk): \
                 nothing was changed; reads still work, writes will once space is freed"
            ),
        )
    }

    /// An I/O failure about `what`: [`ServiceError::storage_full`] when the disk is full,
    /// else internal.
    pub fn io(what: &str, e: &std::io::Error) -> Self {
        if is_storage_full(e) {
            Self::storage_full(what)
        } else {
            Self::internal(format!("{what}: {e}"))
        }
    }
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => ServiceError::storage_full("the registry"),
            _ => ServiceError::internal(format!("registry: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_or_quota_is_storage_full_and_other_io_errors_are_internal() {
        for errno in [libc::ENOSPC, libc::EDQUOT] {
            let e = ServiceError::io("x", &std::io::Error::from_raw_os_error(errno));
            assert_eq!((e.kind, e.code), (ErrorKind::NoSpace, "storage_full"));
        }
        let e = ServiceError::io("x", &std::io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(e.kind, ErrorKind::Internal);
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert_eq!(ServiceError::from(full).code, "storage_full");
    }

    #[test]
    fn sizes_in_messages_read_as_people_write_them() {
        assert_eq!(human_size(512), "512 bytes");
        assert_eq!(human_size(64 << 20), "64 MiB");
        assert_eq!(human_size(1536), "1.5 KiB (1536 bytes)");
    }
}
