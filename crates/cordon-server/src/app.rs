//! The composition root of `cordon serve`: the state every HTTP door shares ([`AppState`]),
//! the router that puts the doors together (the E2B door's paths, the native API for the rest,
//! `/mcp` among them), and [`serve`], which runs it until a signal.
//!
//! Threat model: no client input is parsed here; each door parses its own, behind
//! `crate::auth`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::middleware;
use axum::Router;
use cordon_service::Service;

use crate::error::ApiError;

/// What every HTTP door serves from: the service, whether keys are off, and the MCP transport.
pub struct AppState {
    pub service: Arc<Service>,
    /// Authentication disabled (only allowed on loopback).
    pub open: bool,
    /// The MCP transport, served at `/mcp` by the native API's mount.
    pub(crate) mcp: Router,
}

impl AppState {
    pub fn new(service: Arc<Service>, open: bool) -> Arc<AppState> {
        let mcp = crate::mcp::http_service(crate::mcp::McpState::new(service.clone(), None, None));
        Arc::new(AppState { service, open, mcp })
    }
}

/// Every door on one router. The E2B door answers its own paths (none of which the native API
/// uses) in E2B's shapes; the native API answers the rest.
pub fn router(st: Arc<AppState>) -> Router {
    // Around the whole router, not route by route: the 405 answers get their `Allow` header
    // from the router itself, after any per-route layer has run.
    Router::new()
        .merge(crate::e2b::router(st.clone()))
        .fallback_service(crate::native::router(st))
        .layer(middleware::from_fn(crate::native::json_errors))
        .layer(middleware::from_fn(crate::e2b::errors_for_e2b_clients))
}

/// Where `cordon serve` listens, and whether it runs without API keys.
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub open: bool,
}

/// Runs the HTTP server until SIGINT/SIGTERM, then kills every sandbox it owns.
pub async fn serve(
    service: Arc<Service>,
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ApiError> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| ApiError::internal(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let state = AppState::new(service.clone(), opts.open);
    let reaper = service.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            reaper.reap().await;
        }
    });
    ready(addr);
    let app = router(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {},
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
            }
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    service.shutdown_all().await;
    Ok(())
}
