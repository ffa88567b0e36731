//! The native API's public routes: `/healthz`, `/metrics` (Prometheus text) and
//! `/openapi.json` (the document [`super::openapi`] builds). They need no key and read no
//! client input beyond the route.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::openapi_text;
use crate::app::AppState;
use cordon_service::types::*;

#[utoipa::path(get, path = "/healthz", responses((status = 200, body = inline(super::schema::Health))))]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

#[utoipa::path(get, path = "/openapi.json",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
pub(super) async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_text()).into_response()
}

#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain", body = String)))]
pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let body = st.service.metrics_text();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
