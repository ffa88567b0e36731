//! The native API's batch of programs (`POST /v1/batch`): N programs, each with its own stdin,
//! files and tests, run with bounded concurrency by the service
//! (`cordon_service::programs::batch`); the answer is NDJSON, one line per item as soon as it
//! is done, in the order they finish, each with the item's `index` and its own Outcome.
//!
//! Threat model: the body is client input, parsed into the service's `BatchRequest`; the
//! programs are hostile and run only in one-shot sandboxes. A client that goes away stops the
//! batch from starting more items.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Extension;
use futures::StreamExt;

use super::JsonBody;
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::programs::BatchRequest;
use cordon_service::Caller;

#[utoipa::path(post, path = "/v1/batch", request_body = super::schema::BatchRequest,
    responses((status = 200, content_type = "application/x-ndjson", body = super::schema::BatchLine,
        description = "One JSON line per item, as each finishes (not in request order): its `index`, and its result (`passed`, `compile`, `outcome` or `tests`, `files`) or its `error`; a failing item does not stop the others")))]
pub(super) async fn batch(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<BatchRequest>,
) -> Result<Response, ApiError> {
    let rx = cordon_service::programs::batch(st.service.clone(), c, req)?;
    let lines = tokio_stream::wrappers::ReceiverStream::new(rx).map(|line| {
        let mut text = serde_json::to_vec(&line).unwrap_or_else(|e| {
            serde_json::to_vec(&serde_json::json!({
                "index": line.index,
                "error": {"code": "internal", "message": e.to_string()},
            }))
            .unwrap_or_default()
        });
        text.push(b'\n');
        Ok::<_, std::convert::Infallible>(text)
    });
    let mut resp = Response::new(Body::from_stream(lines));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}
