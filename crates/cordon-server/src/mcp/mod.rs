//! The Model Context Protocol front end: the same service as HTTP, as MCP tools. Served over
//! stdio (`cordon mcp`) and streamable HTTP (`/mcp` on `cordon serve`, behind the API key).
//!
//! Each MCP session gets one sandbox, created on its first tool call and deleted when the
//! session ends (stdio: when the process exits; HTTP: when the session closes). Clients that
//! speak the sessionless protocol share one sandbox per API key, reaped by its TTL.
//!
//! Three things keep a session's calls from being lost or mixed up:
//! - a session's sandbox is created under that session's own lock, never one shared by all
//!   sessions, so a slow create stalls nobody else, and concurrent first calls of one session
//!   find one sandbox;
//! - the session's tool calls run one at a time in the order they were received ([`order`]);
//! - every message that cannot be used is answered with the JSON-RPC error it deserves
//!   ([`framing`]), on stdio and over HTTP.
//!
//! The door is split by job: `session` (sessions and their sandboxes), `tools` (the tools and
//! the server handler), `render` (Outcomes and results as MCP content), `transport` (stdio and
//! streamable HTTP).

pub(crate) mod framing;
mod order;
mod render;
mod session;
mod tools;
mod transport;

pub use framing::MAX_MESSAGE;
/// The stdio framing's parsers, for the fuzz targets (`fuzz/`). Not an API.
#[doc(hidden)]
pub use framing::{classify, peek_id, Verdict};
pub use session::McpState;
pub use tools::{
    CordonMcp, ListParams, NoParams, PathParams, RunCodeParams, RunCommandParams, RunWasmParams,
    WriteParams,
};
pub(crate) use transport::guard_json_rpc;
pub use transport::{http_service, serve_stdio, OrderedSessions};
