//! cordon's server: a registry of persistent sandboxes (SQLite), the service layer over the
//! engine, and the HTTP API in front of it, with API keys, per-key quotas, an audit log and
//! Prometheus metrics.

pub mod audit;
pub mod datadir;
pub mod e2b;
pub mod error;
pub mod files;
pub mod gateway;
pub mod http;
pub mod kernel;
pub mod keys;
pub mod mcp;
pub mod metrics;
pub mod oneshot;
pub mod registry;
pub mod service;
pub mod types;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use error::ApiError;
pub use service::{Config, ImagePull, Service};

/// Default limits of a new key.
pub const DEFAULT_MAX_SANDBOXES: u32 = 50;
pub const DEFAULT_RPS: u32 = 100;

/// Creates a key and returns (secret, id). The secret is shown once and stored hashed.
pub fn create_key(
    registry: &registry::Registry,
    name: &str,
    max_sandboxes: u32,
    rps: u32,
) -> Result<(String, String), ApiError> {
    let (secret, id) = keys::generate().map_err(|e| ApiError::internal(e.to_string()))?;
    registry.add_key(&id, name, &keys::hash(&secret), max_sandboxes, rps)?;
    Ok((secret, id))
}

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
    let state = http::AppState::new(service.clone(), opts.open);
    let reaper = service.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            reaper.reap().await;
        }
    });
    ready(addr);
    let app = http::router(state);
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
