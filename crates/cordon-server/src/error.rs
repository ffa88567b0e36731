//! How the HTTP doors say a service error: one mapping from the service's error kinds to HTTP
//! statuses, and the `{"error": {"code", "message"}}` body. The E2B door reuses the statuses
//! with its own body; MCP says errors its own way.

use std::ops::Deref;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
pub use cordon_service::error::{ErrorKind, ServiceError};
use serde::Serialize;

/// `{"error": {"code": "...", "message": "..."}}`: the body the native API and the doors that
/// share its shape answer with.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, utoipa::ToSchema)]
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

/// The HTTP status that says `kind`.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMedia => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::RateLimited | ErrorKind::Quota => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::NoSpace => StatusCode::INSUFFICIENT_STORAGE,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A service error on its way out of an HTTP door.
#[derive(Debug, Clone)]
pub struct ApiError(pub ServiceError);

impl ApiError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        ApiError(ServiceError::new(kind, code, message))
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError(ServiceError::bad_request(message))
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        ApiError(ServiceError::not_found(what))
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError(ServiceError::unauthorized(message))
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError(ServiceError::conflict(message))
    }
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError(ServiceError::internal(message))
    }
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        ApiError(ServiceError::too_many(message, retry_after))
    }
    /// `what` over the server's limit of `max` bytes (see [`ServiceError::too_large`]).
    pub fn too_large(what: &str, max: u64) -> Self {
        ApiError(ServiceError::too_large(what, max))
    }
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        status_of(self.0.kind)
    }
}

impl Deref for ApiError {
    type Target = ServiceError;
    fn deref(&self) -> &ServiceError {
        &self.0
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ApiError {}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status(), Json(ErrorBody::from(&self.0))).into_response();
        if let Some(s) = self.0.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_status_the_readme_lists() {
        let cases = [
            (ErrorKind::Invalid, 400),
            (ErrorKind::Unauthenticated, 401),
            (ErrorKind::Forbidden, 403),
            (ErrorKind::NotFound, 404),
            (ErrorKind::Conflict, 409),
            (ErrorKind::TooLarge, 413),
            (ErrorKind::RateLimited, 429),
            (ErrorKind::Internal, 500),
            (ErrorKind::NoSpace, 507),
        ];
        for (kind, status) in cases {
            assert_eq!(status_of(kind).as_u16(), status, "{kind:?}");
        }
    }
}
