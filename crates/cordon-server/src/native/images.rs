//! The native API's images: the node's store, pulls (answered whole or as server-sent
//! events of progress), and commits of a sandbox into a new image.
//!
//! Threat model: the reference is client input; the service validates it and the registries
//! it may reach before any network use.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde_json::json;

use super::{wants_stream, IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::commit::CommitRequest;
use cordon_service::{Caller, ImageList, PullEvent, PullRequest, PullResult};

#[utoipa::path(get, path = "/v1/images",
    responses((status = 200, body = super::schema::ImageList, description = "The images in this node's store (pulled through the API or with `cordon image pull|import` on the same data directory), newest first")))]
pub(super) async fn list_images(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
) -> Result<Json<ImageList>, ApiError> {
    Ok(Json(st.service.list_images(&c).await?))
}

#[utoipa::path(post, path = "/v1/images/pull", request_body = super::schema::PullRequest,
    responses((status = 200, description = "The image is in the store; with `Accept: text/event-stream`, server-sent events instead: `progress` events (`{event: resolved|layer_cached|layer_start|layer_progress|layer_unpacking|layer_done|retry, …}`) as the pull goes, then one `done` with the result or one `error` with `{code, message}`",
        content((super::schema::PullResult = "application/json"), (super::schema::PullEvent = "text/event-stream")))))]
pub(super) async fn pull_image(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<PullRequest>,
) -> Result<Response, ApiError> {
    if !wants_stream(&headers) {
        return Ok(Json(st.service.pull_image(&c, req, None).await?).into_response());
    }
    // Refusals that need no registry (a malformed reference, a registry not allowed) come
    // back as the JSON error, before any stream starts.
    cordon_service::validate_pull(&req)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<PullEvent>(64);
    let (done_tx, done_rx) =
        tokio::sync::oneshot::channel::<Result<PullResult, cordon_service::error::ServiceError>>();
    let svc = st.service.clone();
    tokio::spawn(async move {
        let r = svc.pull_image(&c, req, Some(tx)).await;
        let _ = done_tx.send(r);
    });
    let progress = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Event::default()
            .event("progress")
            .data(serde_json::to_string(&ev).unwrap_or_default())
    });
    // The progress channel closes when the pull's sender is dropped, that is when the pull
    // has ended; then its result follows as the last event.
    let end = futures::stream::once(async move {
        match done_rx.await {
            Ok(Ok(r)) => Event::default()
                .event("done")
                .data(serde_json::to_string(&r).unwrap_or_default()),
            Ok(Err(e)) => Event::default()
                .event("error")
                .data(json!({"code": e.code, "message": e.message}).to_string()),
            Err(_) => Event::default().event("error").data(
                json!({"code": "internal", "message": "the pull stopped unexpectedly"}).to_string(),
            ),
        }
    });
    let stream = progress.chain(end).map(Ok::<Event, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commit", params(IdPath), request_body = super::schema::CommitRequest,
    responses((status = 201, body = super::schema::CommitResult, description = "A new image in the node's store: the sandbox's image's layers plus one layer of what the sandbox changed in its root (deletions as whiteouts), its config carried over (`changes` on top), taken with the sandbox frozen. 409 `no_image` for a sandbox not made from an image, 409 `already_exists` for a name the store has; `/workspace`, the home and `/tmp` are not carried (`not_carried`)")))]
pub(super) async fn commit_sandbox(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<CommitRequest>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(st.service.commit_sandbox(&c, &id, req).await?),
    ))
}
