//! The web console, served by `cordon serve` at `/console` on the same listener (off with
//! `--no-console`): a page that shows what runs — sandboxes live, each one's use, command log,
//! files, egress decisions and a terminal — and acts on it, through the native API like any
//! other client. This module serves the page's embedded assets and signs people in and out;
//! everything the page shows comes from `/v1/…` with the session cookie.
//!
//! Threat model: a browser is the one client that carries credentials it did not choose to
//! send, so the console is built against pages of other origins.
//! - Signing in trades an API key for a session: a random token in an `HttpOnly`,
//!   `SameSite=Strict` cookie (script cannot read it, other sites' requests do not carry it);
//!   the key never goes into a URL or the browser's storage, and the server keeps only the
//!   key's hash, so a revoked key ends its sessions at their next request.
//! - A request authenticated by the cookie that changes anything must also carry the session's
//!   CSRF token in `X-Cordon-CSRF` (which a page of another origin cannot read) and, when it
//!   has one, this server's own `Origin`; the terminal WebSocket refuses foreign origins itself.
//! - Every asset is compiled into the binary and served with a Content-Security-Policy that
//!   allows scripts, connections and images from this server only: text from sandboxes
//!   (file names, metadata, output) is put into the page as text, never as markup.

mod gateway;
mod sessions;

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

pub(crate) use gateway::{gateway_admin_auth, gateway_router, GatewayConsole};
pub(crate) use sessions::Sessions;

use crate::app::AppState;
use crate::error::{ApiError, ErrorKind};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "cordon_session";
/// The header a cookie-authenticated request that changes something must carry.
pub(crate) const CSRF_HEADER: &str = "x-cordon-csrf";

/// Scripts, styles, connections and images from this server only; no plugins, no framing.
/// Styles allow inline ones: the terminal (xterm.js) sets its own colours and sizes through
/// `<style>` elements it makes at run time, and styles cannot run code; scripts stay `'self'`.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; \
frame-ancestors 'none'";

/// The console's files, compiled in: (name, content type, bytes).
const ASSETS: [(&str, &str, &[u8]); 5] = [
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/console.css"),
    ),
    (
        "xterm.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/xterm.js"),
    ),
    (
        "xterm.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/xterm.css"),
    ),
    (
        "xterm.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("assets/xterm.LICENSE"),
    ),
];

const INDEX: &str = include_str!("assets/index.html");

/// The console's routes. They need no API key (the page must load to sign in); the API they
/// call does.
pub(crate) fn router(st: Arc<AppState>) -> Router {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/assets/{name}", get(asset))
        .route("/console/session", get(session).delete(sign_out))
        .route("/console/login", post(sign_in))
        .with_state(st)
}

/// Headers every console answer carries.
fn hardened(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn index() -> Response {
    hardened(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response())
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, ty, body)) => hardened(([(header::CONTENT_TYPE, *ty)], *body).into_response()),
        None => hardened(
            ApiError::new(ErrorKind::NotFound, "not_found", "no such console asset")
                .into_response(),
        ),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    key: String,
}

/// `POST /console/login {key}`: checks the key and answers with the session cookie and the
/// page's CSRF token. A page of another origin cannot sign a browser in (its `Origin`).
async fn sign_in(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    let req: SignIn = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the sign-in: {e} (send {{\"key\": \"cdn_…\"}})"))
    })?;
    let key_hash = cordon_service::keys::hash(req.key.trim());
    let caller = st.service.authenticate_hashed(&key_hash)?;
    let sessions = st
        .console
        .as_ref()
        .ok_or_else(|| ApiError::not_found("the console is off on this server"))?;
    let (token, csrf) = sessions.open(key_hash);
    st.service
        .audit("console.sign_in", &caller.key_id, None, json!({}));
    let admin = st.service.is_admin(&caller)?;
    let mut r =
        Json(json!({ "csrf": csrf, "key_id": caller.key_id, "admin": admin })).into_response();
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

/// `GET /console/session`: who the cookie signs in (and the CSRF token again, for a page
/// that was reloaded), or 401; on a server without keys, `{"open": true}`.
async fn session(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if st.open {
        crate::auth::authenticate(&st, &headers, None, "")?;
        return Ok(hardened(
            Json(json!({ "open": true, "csrf": "", "admin": true })).into_response(),
        ));
    }
    let sessions = st
        .console
        .as_ref()
        .ok_or_else(|| ApiError::not_found("the console is off on this server"))?;
    let s = cookie(&headers)
        .and_then(|t| sessions.get(t))
        .ok_or_else(|| ApiError::unauthorized("not signed in"))?;
    let caller = st.service.authenticate_hashed(&s.key_hash)?;
    let admin = st.service.is_admin(&caller)?;
    Ok(hardened(
        Json(json!({ "open": false, "csrf": s.csrf, "key_id": caller.key_id, "admin": admin }))
            .into_response(),
    ))
}

/// `DELETE /console/session`: signs out (the session is forgotten, the cookie cleared).
async fn sign_out(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    if let (Some(sessions), Some(t)) = (st.console.as_ref(), cookie(&headers)) {
        sessions.close(t);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("cordon_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    Ok(hardened(r))
}

/// The session token in the request's cookies, if any.
pub(crate) fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// Refuses a request whose `Origin` is not this server's own (`Host`); none is fine (not a
/// browser, or a same-origin GET).
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    if host.is_empty() || !authority.eq_ignore_ascii_case(host) {
        return Err(ApiError::new(
            ErrorKind::Forbidden,
            "foreign_origin",
            format!("refused: a request from a page of another origin ('{origin}')"),
        ));
    }
    Ok(())
}

/// The caller a console session cookie names, for the API's key check: `None` without a
/// session cookie (the caller then needs a key). A request that can change something
/// (anything but GET and HEAD) must carry the session's CSRF token and no foreign `Origin`.
pub(crate) fn caller_of(
    st: &AppState,
    method: &axum::http::Method,
    headers: &HeaderMap,
) -> Option<Result<cordon_service::Caller, ApiError>> {
    let sessions = st.console.as_ref()?;
    let token = cookie(headers)?;
    Some((|| {
        let s = sessions.get(token).ok_or_else(|| {
            ApiError::unauthorized("the console session has ended: sign in again")
        })?;
        guard_change(method, headers, &s)?;
        Ok(st.service.authenticate_hashed(&s.key_hash)?)
    })())
}

/// A cookie-authenticated request that can change something (anything but GET and HEAD)
/// must carry the session's CSRF token and no foreign `Origin`.
fn guard_change(
    method: &axum::http::Method,
    headers: &HeaderMap,
    s: &sessions::Session,
) -> Result<(), ApiError> {
    if matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD) {
        return Ok(());
    }
    same_origin(headers)?;
    let given = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !cordon_service::keys::constant_time_eq(
        &cordon_service::keys::hash(given),
        &cordon_service::keys::hash(&s.csrf),
    ) {
        return Err(ApiError::new(
            ErrorKind::Forbidden,
            "csrf",
            "refused: a console request without its CSRF token",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let m = h(&[("cookie", "a=1; cordon_session=tok; b=2")]);
        assert_eq!(cookie(&m), Some("tok"));
        assert_eq!(cookie(&h(&[("cookie", "cordon_sessionx=1")])), None);
    }

    #[test]
    fn only_this_servers_own_origin_passes() {
        assert!(same_origin(&h(&[("host", "127.0.0.1:9")])).is_ok());
        assert!(same_origin(&h(&[
            ("host", "127.0.0.1:9"),
            ("origin", "http://127.0.0.1:9")
        ]))
        .is_ok());
        assert!(same_origin(&h(&[
            ("host", "127.0.0.1:9"),
            ("origin", "http://evil.test")
        ]))
        .is_err());
        assert!(same_origin(&h(&[("host", "127.0.0.1:9"), ("origin", "null")])).is_err());
    }
}
