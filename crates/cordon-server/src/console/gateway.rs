//! The console of `cordon gateway --listen`: the same page as `cordon serve`'s, showing only
//! the gateway's held calls (approve, refuse with a reason, history), signed in with an API key
//! of the server whose keys the gateway accepts (`--keys-dir`).
//!
//! Threat model: as the server's console (see the parent module) — an `HttpOnly`,
//! `SameSite=Strict` session cookie, a CSRF token and this origin for every change, a strict
//! CSP — and, since a held call is the operator's decision and the agent itself holds an API
//! key of the same server, only admin keys may list or answer held calls (bearer or session).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cordon_service::registry::{KeyRecord, Registry};
use cordon_service::Caller;
use serde_json::json;

use super::{cookie, guard_change, hardened, same_origin, sessions, Sessions, SignIn, COOKIE};
use crate::error::{ApiError, ErrorKind};

/// The gateway console's state: the server's key registry and the sign-in sessions.
pub(crate) struct GatewayConsole {
    registry: Arc<Registry>,
    sessions: Sessions,
}

impl GatewayConsole {
    pub(crate) fn new(registry: Arc<Registry>) -> GatewayConsole {
        GatewayConsole {
            registry,
            sessions: Sessions::default(),
        }
    }

    fn key(&self, key_hash: &str) -> Result<KeyRecord, ApiError> {
        match self.registry.key_by_hash(key_hash) {
            Ok(Some(r)) if !r.revoked => Ok(r),
            Ok(_) => Err(ApiError::unauthorized("invalid or revoked API key")),
            Err(e) => Err(ApiError(e)),
        }
    }
}

/// `/console` and its sign-in routes on the gateway's listener.
pub(crate) fn gateway_router(c: Arc<GatewayConsole>) -> Router {
    Router::new()
        .route("/console", get(super::index))
        .route("/console/", get(super::index))
        .route("/console/assets/{name}", get(super::asset))
        .route("/console/session", get(session).delete(sign_out))
        .route("/console/login", post(sign_in))
        .with_state(c)
}

async fn sign_in(
    State(c): State<Arc<GatewayConsole>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    let req: SignIn = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the sign-in: {e} (send {{\"key\": \"cdn_…\"}})"))
    })?;
    let key_hash = cordon_service::keys::hash(req.key.trim());
    let rec = c.key(&key_hash)?;
    let (token, csrf) = c.sessions.open(key_hash);
    let mut r =
        Json(json!({ "csrf": csrf, "key_id": rec.id, "admin": rec.admin, "gateway": true }))
            .into_response();
    let cookie = format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        sessions::LIFETIME.as_secs()
    );
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(|e| ApiError::internal(e.to_string()))?,
    );
    Ok(hardened(r))
}

async fn session(
    State(c): State<Arc<GatewayConsole>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let s = cookie(&headers)
        .and_then(|t| c.sessions.get(t))
        .ok_or_else(|| ApiError::unauthorized("not signed in"))?;
    let rec = c.key(&s.key_hash)?;
    Ok(hardened(
        Json(json!({ "open": false, "csrf": s.csrf, "key_id": rec.id, "admin": rec.admin, "gateway": true }))
            .into_response(),
    ))
}

async fn sign_out(
    State(c): State<Arc<GatewayConsole>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    if let Some(t) = cookie(&headers) {
        c.sessions.close(t);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("cordon_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    Ok(hardened(r))
}

/// The held-call routes' guard: an admin key, as `Authorization: Bearer KEY` or as a console
/// session (with its CSRF token and this origin for an answer).
pub(crate) async fn gateway_admin_auth(
    State(c): State<Arc<GatewayConsole>>,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| cordon_service::keys::hash(t.trim()));
    let rec = match bearer {
        Some(h) => c.key(&h),
        None => match cookie(req.headers()).map(|t| c.sessions.get(t)) {
            Some(Some(s)) => {
                guard_change(req.method(), req.headers(), &s).and_then(|()| c.key(&s.key_hash))
            }
            Some(None) => Err(ApiError::unauthorized(
                "the console session has ended: sign in again",
            )),
            None => Err(ApiError::unauthorized(
                "missing API key: send 'Authorization: Bearer <key>' (a key of `cordon keys create`)",
            )),
        },
    };
    let rec = match rec {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if !rec.admin {
        return ApiError::new(
            ErrorKind::Forbidden,
            "admin_only",
            "only an admin key may see or answer held calls (the data directory's first key, or one made with `cordon keys create --admin`)",
        )
        .into_response();
    }
    req.extensions_mut().insert(Caller {
        key_id: rec.id,
        max_sandboxes: rec.max_sandboxes,
    });
    next.run(req).await
}
