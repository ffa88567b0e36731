//! Errors of the service layer, each with a stable code and the HTTP status that fits it.

use serde::Serialize;

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// Seconds to wait before retrying (rate limits).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request", message)
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(404, "not_found", what)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "unauthorized", message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, "conflict", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal", message)
    }
    /// `what` (an upload, a body) over the server's limit of `max` bytes: said in a size a
    /// person reads, with the flag that sets it, so a client knows it is the server's choice.
    pub fn too_large(what: &str, max: u64) -> Self {
        Self::new(
            413,
            "too_large",
            format!(
                "{what} is larger than this server accepts: at most {} (set by the server's \
                 operator with `cordon serve --max-upload`)",
                human_size(max)
            ),
        )
    }
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..Self::new(429, "rate_limited", message)
        }
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

/// `{"error": {"code": "...", "message": "..."}}`
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

impl From<&ApiError> for ErrorBody {
    fn from(e: &ApiError) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: e.code.to_string(),
                message: e.message.clone(),
            },
        }
    }
}

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        ApiError::internal(format!("registry: {e}"))
    }
}
