//! The native API's commands: `exec` (answered whole or as server-sent events) and background
//! commands (list, get, wait, stdin, signal).
//!
//! Threat model: the command, its stdin and signal names are client input, parsed into the
//! service's types; the command runs only inside the caller's sandbox.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cordon_policy::Outcome;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::{wants_stream, IdPath, JsonBody};
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::{signal_number, Caller, ExecEvent};

pub(super) fn chunk_event(name: &str, data: &[u8]) -> Event {
    use base64::Engine;
    let payload = match std::str::from_utf8(data) {
        Ok(s) => json!({"data": s}),
        Err(_) => {
            json!({"data": String::from_utf8_lossy(data), "b64": base64::engine::general_purpose::STANDARD.encode(data)})
        }
    };
    Event::default().event(name).data(payload.to_string())
}

/// Path parameters of a background command's routes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct CommandPath {
    /// The sandbox's id.
    pub(super) id: String,
    /// The command's id.
    pub(super) cid: String,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", params(IdPath), request_body = super::schema::ExecRequest,
    responses(
        (status = 200, description = "How the command ended; with `Accept: text/event-stream`, server-sent events instead: `stdout` and `stderr` (`{data, b64?}`) as output comes, then one `exit` with the Outcome",
            content((Outcome = "application/json"), (String = "text/event-stream"))),
        (status = 202, body = super::schema::CommandInfo, description = "`background: true`: the command started; follow it under /commands/{cid}")))]
pub(super) async fn exec(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ExecRequest>,
) -> Result<Response, ApiError> {
    if req.background {
        let info = st.service.exec_background(&c, &id, req).await?;
        return Ok((StatusCode::ACCEPTED, Json(info)).into_response());
    }
    if !wants_stream(&headers) {
        let outcome = st.service.exec(&c, &id, req, None).await?;
        return Ok(Json(outcome).into_response());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<ExecEvent>(64);
    let svc = st.service.clone();
    // Validate (and start) before answering, so errors come back as JSON, not as a stream.
    svc.get_live(&c, &id)?;
    tokio::spawn(async move {
        if let Err(e) = svc.exec(&c, &id, req, Some(tx.clone())).await {
            let mut o = cordon_policy::Outcome::error(e.message, Default::default());
            o.exit_code = None;
            let _ = tx.send(ExecEvent::Exit(Box::new(o))).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|ev| {
        Ok::<Event, Infallible>(match ev {
            ExecEvent::Stdout(d) => chunk_event("stdout", &d),
            ExecEvent::Stderr(d) => chunk_event("stderr", &d),
            ExecEvent::Exit(o) => Event::default()
                .event("exit")
                .data(serde_json::to_string(&o).unwrap_or_default()),
        })
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands", params(IdPath),
    responses((status = 200, body = super::schema::CommandList)))]
pub(super) async fn list_commands(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<CommandList>, ApiError> {
    Ok(Json(st.service.list_commands(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/logs", params(IdPath),
    description = "The sandbox's command log, oldest first: its last 32 foreground commands (ids `exec-N`; the last 4 KiB of each output stream and the Outcome) and its background commands (as under /commands).",
    responses((status = 200, body = super::schema::CommandList)))]
pub(super) async fn command_log(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<CommandList>, ApiError> {
    Ok(Json(st.service.command_log(&c, &id)?))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/commands/{cid}", params(CommandPath),
    responses((status = 200, body = super::schema::CommandInfo)))]
pub(super) async fn get_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
) -> Result<Json<CommandInfo>, ApiError> {
    Ok(Json(st.service.get_command(&c, &id, &cid)?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct WaitQuery {
    /// How long to wait for the command to end (default 30s, at most 300s), e.g. `10s`.
    #[param(pattern = r"^([0-9]*[1-9][0-9]*(\.[0-9]+)?|0+\.[0-9]*[1-9][0-9]*)(ms|s|sec|m|min|h)$")]
    pub(super) timeout: Option<String>,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/wait", params(CommandPath, WaitQuery),
    responses((status = 200, body = super::schema::CommandInfo, description = "The command, ended or (after the wait) still running")))]
pub(super) async fn wait_command(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    Query(q): Query<WaitQuery>,
) -> Result<Json<CommandInfo>, ApiError> {
    const MAX_WAIT: Duration = Duration::from_secs(300);
    let t = match q.timeout {
        // Any well-formed duration: longer ones wait the longest this server waits.
        Some(t) if is_duration_text(&t) => Amount::Text(t).duration("timeout").unwrap_or(MAX_WAIT),
        Some(t) => Amount::Text(t).duration("timeout")?,
        None => Duration::from_secs(30),
    }
    .min(MAX_WAIT);
    Ok(Json(st.service.wait_command(&c, &id, &cid, t).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/stdin", params(CommandPath),
    request_body(content = Option<super::schema::StdinRequest>, description = "An empty body is `{}`"),
    responses((status = 204, description = "Written (and closed, with `close: true`)")))]
pub(super) async fn command_stdin(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    JsonBody(req): JsonBody<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    st.service.command_stdin(&c, &id, &cid, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commands/{cid}/signal", params(CommandPath),
    request_body = super::schema::SignalRequest, responses((status = 204, description = "Sent")))]
pub(super) async fn command_signal(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(CommandPath { id, cid }): Path<CommandPath>,
    JsonBody(req): JsonBody<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    st.service
        .command_signal(&c, &id, &cid, signal_number(&req.signal)?)?;
    Ok(StatusCode::NO_CONTENT)
}
