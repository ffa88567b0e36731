//! cordon's doors: the native HTTP API, E2B's API, MCP (stdio and streamable HTTP) and the
//! gateway runtime, each a thin translation of its protocol onto `cordon-service`. No door
//! reaches the engine (`cordon-linux`): what a door needs of a sandbox, the service offers.
//!
//! Threat model: every byte a client sends is hostile until a door has parsed it into the
//! service's types; authentication (`http::authenticate`) is shared by every HTTP door.

pub mod e2b;
pub mod error;
pub mod gateway;
pub mod http;
pub mod mcp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use cordon_service::{Config, ImagePull, Service};
pub use error::ApiError;

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
