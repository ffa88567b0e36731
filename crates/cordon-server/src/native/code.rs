//! The native API's code interpreter: cells (answered whole or as server-sent events) and
//! contexts (list, create, restart, delete).
//!
//! Threat model: code, languages and context names are client input, parsed into the
//! service's types; code runs only inside the caller's sandbox.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use super::{wants_stream, IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::{Caller, ContextEnd};

/// Path parameters of an interpreter context's routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ContextPath {
    /// The sandbox's id.
    pub(super) id: String,
    /// `python` (or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`, `shell`), any case.
    #[param(
        pattern = r"^([pP][yY][tT][hH][oO][nN]3?|[pP][yY]|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]|[jJ][sS]|[nN][oO][dD][eE]|[bB][aA][sS][hH]|[sS][hH]|[sS][hH][eE][lL][lL])$"
    )]
    pub(super) language: String,
    /// The context's name.
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub(super) name: String,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/code", params(IdPath), request_body = super::schema::CodeRequest,
    responses((status = 200, description = "The cell's result; with `Accept: text/event-stream`, server-sent events instead: `stdout`, `stderr`, `result`, `error`, then one `done` with the whole result",
        content((super::schema::CodeResult = "application/json"), (String = "text/event-stream")))))]
pub(super) async fn run_code(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<cordon_service::interpreter::CodeRequest>,
) -> Result<Response, ApiError> {
    use cordon_service::interpreter::CellEvent;
    if !wants_stream(&headers) {
        return Ok(Json(st.service.run_code(&c, &id, req, None).await?).into_response());
    }
    st.service.get_live(&c, &id)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<CellEvent>(64);
    let svc = st.service.clone();
    tokio::spawn(async move {
        if let Err(e) = svc.run_code(&c, &id, req, Some(tx.clone())).await {
            let r = cordon_service::interpreter::CodeResult::failed(&e);
            let _ = tx.send(CellEvent::Done(Box::new(r))).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Ok::<Event, Infallible>(match ev {
            CellEvent::Stdout(t) => Event::default()
                .event("stdout")
                .data(json!({"data": t}).to_string()),
            CellEvent::Stderr(t) => Event::default()
                .event("stderr")
                .data(json!({"data": t}).to_string()),
            CellEvent::Result(v) => Event::default().event("result").data(v.to_string()),
            CellEvent::Error(e) => Event::default()
                .event("error")
                .data(serde_json::to_string(&e).unwrap_or_default()),
            CellEvent::Done(r) => Event::default()
                .event("done")
                .data(serde_json::to_string(&r).unwrap_or_default()),
        })
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewContext {
    /// `python` (default; or `python3`, `py`), `javascript` (`js`, `node`) or `bash` (`sh`, `shell`), any case.
    #[serde(default = "py")]
    #[schema(
        pattern = r"^([pP][yY][tT][hH][oO][nN]3?|[pP][yY]|[jJ][aA][vV][aA][sS][cC][rR][iI][pP][tT]|[jJ][sS]|[nN][oO][dD][eE]|[bB][aA][sS][hH]|[sS][hH]|[sS][hH][eE][lL][lL])$"
    )]
    pub(super) language: String,
    /// The context's name (default `default`).
    #[serde(default = "default_ctx")]
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub(super) name: String,
}

pub(super) fn py() -> String {
    "python".into()
}

pub(super) fn default_ctx() -> String {
    "default".into()
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/contexts", params(IdPath),
    responses((status = 200, body = super::schema::ContextList)))]
pub(super) async fn list_contexts(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<ContextList>, ApiError> {
    Ok(Json(ContextList {
        contexts: st.service.list_contexts(&c, &id)?,
    }))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts", params(IdPath),
    request_body(content = Option<NewContext>, description = "An empty body is `{}`: the default Python context"),
    responses((status = 201, body = super::schema::ContextInfo, description = "The context's kernel runs")))]
pub(super) async fn create_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    JsonBody(req): JsonBody<NewContext>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st
        .service
        .create_context(&c, &id, &req.language, &req.name)
        .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/contexts/{language}/{name}/restart", params(ContextPath),
    responses((status = 204, description = "Its kernel stopped; the next cell starts a fresh one")))]
pub(super) async fn restart_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(ContextPath { id, language, name }): Path<ContextPath>,
) -> Result<StatusCode, ApiError> {
    st.service
        .end_context(&c, &id, &language, &name, ContextEnd::Restart)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/contexts/{language}/{name}", params(ContextPath),
    responses((status = 204, description = "Its kernel stopped and the context is gone")))]
pub(super) async fn delete_context(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(ContextPath { id, language, name }): Path<ContextPath>,
) -> Result<StatusCode, ApiError> {
    st.service
        .end_context(&c, &id, &language, &name, ContextEnd::Delete)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
