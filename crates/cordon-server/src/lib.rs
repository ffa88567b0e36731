//! cordon's doors: the native HTTP API, E2B's API, SandboxFusion's API, MCP (stdio and
//! streamable HTTP), the gateway runtime, the web console and the Docker Engine API
//! ([`docker`], on its own socket or port), each a thin translation of its protocol onto
//! `cordon-service`. No door reaches the engine (`cordon-linux`): what a door needs of a
//! sandbox, the service offers. [`app`] composes the HTTP doors; this file only declares
//! modules and re-exports.
//!
//! Threat model: every byte a client sends is hostile until a door has parsed it into the
//! service's types; authentication ([`auth`]) is shared by every HTTP door.

pub mod app;
pub mod auth;
pub mod console;
pub mod docker;
pub mod e2b;
pub mod error;
pub mod framing;
pub mod fusion;
pub mod gateway;
pub mod http_serve;
pub mod mcp;
pub mod native;
pub mod ports;
pub mod terminal;

pub use app::{router, serve, AppState, ServeOptions};
pub use cordon_service::{Config, ImagePull, Service};
pub use error::ApiError;
pub use native::openapi;
