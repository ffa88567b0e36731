//! The native API's one-shot run: a sandbox made, used for one command and deleted.
//!
//! Threat model: the request is client input, parsed into the service's `RunRequest`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cordon_policy::Outcome;

use super::JsonBody;
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::types::*;
use cordon_service::Caller;

#[utoipa::path(post, path = "/v1/run", request_body = super::schema::RunRequest,
    responses((status = 200, body = Outcome, description = "How the one-shot run ended")))]
pub(super) async fn run_oneshot(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<RunRequest>,
) -> Result<Response, ApiError> {
    let outcome = cordon_service::oneshot::run(&st.service, &c, req).await?;
    Ok(Json(outcome).into_response())
}
