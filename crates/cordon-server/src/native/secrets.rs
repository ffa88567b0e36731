//! The native API's stored secrets (`/v1/secrets`): a key stores named values a sandbox is
//! later given by name (`secrets` in `POST /v1/sandboxes`) as placeholders its proxy replaces
//! on the way to the bound hosts. Translation only: the service validates, seals and stores.
//!
//! Threat model: names, values and metadata are client input; values are write-only — no
//! answer of these routes (or any other) carries one, and errors never echo them.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;

use super::JsonBody;
use crate::app::AppState;
use crate::error::ApiError;
use cordon_service::stored_secrets::{SecretInfo, SecretList, PAGE_MAX};
use cordon_service::Caller;

/// Path parameter of a secret route: its name (or its id).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct SecretPath {
    /// Its name, or its id (`sec_…`).
    pub(super) name: String,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct Page {
    /// At most this many (1 to 100, default 100).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<usize>,
    /// The page after this name (a list's `next`).
    #[param(pattern = r"^[^\x00]*$")]
    after: Option<String>,
}

/// `POST /v1/secrets`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateSecret {
    name: String,
    value: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

/// `PUT /v1/secrets/{name}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateSecret {
    value: String,
    metadata: Option<BTreeMap<String, String>>,
}

#[utoipa::path(post, path = "/v1/secrets", request_body = super::schema::CreateSecret,
    responses((status = 201, body = super::schema::SecretInfo, description = "Stored, version 1 (never its value); 409 `secret_exists` if the key has one of that name")))]
pub(super) async fn create_secret(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    JsonBody(req): JsonBody<CreateSecret>,
) -> Result<impl IntoResponse, ApiError> {
    let info = st
        .service
        .secret_create(&c, &req.name, &req.value, req.metadata)?;
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(get, path = "/v1/secrets", params(Page),
    responses((status = 200, body = super::schema::SecretList, description = "The key's secrets by name (never their values); `next` is the `after` of the next page")))]
pub(super) async fn list_secrets(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Query(q): Query<Page>,
) -> Result<Json<SecretList>, ApiError> {
    if let Some(l) = q.limit.filter(|l| !(1..=PAGE_MAX).contains(l)) {
        return Err(ApiError::bad_request(format!(
            "limit: 1 to {PAGE_MAX} (got {l})"
        )));
    }
    if q.after.as_deref().is_some_and(|a| a.contains('\0')) {
        return Err(ApiError::bad_request("after: a NUL byte names no secret"));
    }
    let (secrets, next) = st.service.secret_list(&c, q.limit, q.after.as_deref())?;
    Ok(Json(SecretList { secrets, next }))
}

#[utoipa::path(get, path = "/v1/secrets/{name}", params(SecretPath),
    responses((status = 200, body = super::schema::SecretInfo, description = "The secret (never its value); 404 `secret_not_found`")))]
pub(super) async fn get_secret(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(SecretPath { name }): Path<SecretPath>,
) -> Result<Json<SecretInfo>, ApiError> {
    Ok(Json(st.service.secret_info(&c, &name)?))
}

#[utoipa::path(put, path = "/v1/secrets/{name}", params(SecretPath), request_body = super::schema::UpdateSecret,
    responses((status = 200, body = super::schema::SecretInfo, description = "Its new version: running sandboxes given it send the new value from their next request")))]
pub(super) async fn update_secret(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(SecretPath { name }): Path<SecretPath>,
    JsonBody(req): JsonBody<UpdateSecret>,
) -> Result<Json<SecretInfo>, ApiError> {
    Ok(Json(st.service.secret_update(
        &c,
        &name,
        &req.value,
        req.metadata,
    )?))
}

#[utoipa::path(delete, path = "/v1/secrets/{name}", params(SecretPath),
    responses((status = 204, description = "Destroyed (running sandboxes keep the value they were given until they end); 404 `secret_not_found`")))]
pub(super) async fn delete_secret(
    State(st): State<Arc<AppState>>,
    Extension(c): Extension<Caller>,
    Path(SecretPath { name }): Path<SecretPath>,
) -> Result<StatusCode, ApiError> {
    if st.service.secret_destroy(&c, &name)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "no secret '{name}' under this key"
        )))
    }
}
