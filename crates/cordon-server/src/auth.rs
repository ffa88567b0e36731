//! Authentication shared by every HTTP door: an API key (the native API's `Authorization:
//! Bearer`, the E2B control plane's `X-API-KEY`) checked by the service under its rate limit,
//! or, on a server without keys, a request that provably comes from a local program.
//!
//! Threat model: headers are client input. Without keys, anything that reaches the port could
//! use the server, so a web page is kept out by its `Origin` and by a `Host` that is not a
//! loopback name (DNS rebinding).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cordon_service::Caller;

use crate::app::AppState;
use crate::error::{ApiError, ErrorKind};

/// Local users of an open (no-auth) server all act as this key id.
pub(crate) const OPEN_KEY: &str = "local";

/// True for `localhost`, `127.x.y.z` and `[::1]`, with or without a port.
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Without keys, anything that reaches the port may use the server, so make sure that is a
/// local program and not a web page: a page can send a JSON body as `text/plain` without a
/// preflight (and the server reads JSON whatever the content type), so it must not get in with
/// its own `Origin`, nor through a name of its own that resolves to 127.0.0.1 (DNS rebinding:
/// its `Host` is that name).
fn local_request(h: &HeaderMap) -> Result<(), ApiError> {
    let forbidden = |what: String| ApiError::new(ErrorKind::Forbidden, "forbidden", what);
    if let Some(host) = h.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !is_loopback_authority(host) {
            return Err(forbidden(format!(
                "this server runs without API keys and answers only requests addressed to \
                 127.0.0.1, [::1] or localhost, not to '{host}'"
            )));
        }
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if !is_loopback_authority(authority) {
            return Err(forbidden(format!(
                "this server runs without API keys and refuses requests from web pages of \
                 other origins ('{origin}')"
            )));
        }
    }
    Ok(())
}

/// The API key check in front of the native API's protected routes: the caller it finds goes
/// into the request's extensions, for the handlers (and the MCP transport) to act as.
pub(crate) async fn auth(
    State(st): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // No key but a console session cookie: the console's page calling the API.
    if token.is_none() && !st.open {
        if let Some(c) = crate::console::caller_of(&st, req.method(), req.headers()) {
            match c {
                Ok(c) => {
                    req.extensions_mut().insert(c);
                    return next.run(req).await;
                }
                Err(e) => return e.into_response(),
            }
        }
    }
    let caller = match authenticate(
        &st,
        req.headers(),
        token,
        "missing API key: send 'Authorization: Bearer <key>'",
    ) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Who sends `token` (an API key), under its rate limit; on a server without keys, any local
/// program. Every front end (the native API, the E2B door) authenticates through here.
pub(crate) fn authenticate(
    st: &AppState,
    headers: &HeaderMap,
    token: Option<&str>,
    missing: &str,
) -> Result<Caller, ApiError> {
    if st.open {
        if let Err(e) = local_request(headers) {
            st.service.deny("origin");
            return Err(e);
        }
        return Ok(Caller {
            key_id: OPEN_KEY.into(),
            max_sandboxes: 1000,
        });
    }
    Ok(st.service.authenticate(token, missing)?)
}
