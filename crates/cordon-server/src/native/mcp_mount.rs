//! The native API's `/mcp` mount: MCP over streamable HTTP, behind the API key, documented
//! here and answered by the MCP door's transport (`crate::mcp::http_service`).
//!
//! Threat model: the bodies are client input, parsed by the MCP door's JSON-RPC guard.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;

use crate::app::AppState;

/// The MCP transport (rmcp's streamable HTTP server behind its JSON-RPC guard) answers every
/// method of `/mcp` itself.
pub(super) async fn mcp(st: &AppState, req: Request) -> Response {
    match tower::ServiceExt::oneshot(st.mcp.clone(), req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

#[utoipa::path(post, path = "/mcp",
    description = "Model Context Protocol over streamable HTTP (JSON-RPC 2.0 messages; see the MCP specification). Tools: run_code, run_command, read_file, write_file, list_files, reset_sandbox; one sandbox per session.",
    request_body(content = Object, description = "A JSON-RPC request, notification or response"),
    responses(
        (status = 200, description = "The JSON-RPC answer, as JSON or as a server-sent event stream",
            content((Object = "application/json"), (String = "text/event-stream"))),
        (status = 202, description = "Accepted (a notification or response)")))]
pub(super) async fn mcp_post(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}

#[utoipa::path(get, path = "/mcp",
    description = "The session's server-to-client event stream (needs `Mcp-Session-Id` and `Accept: text/event-stream`).",
    responses((status = 200, description = "Server-sent events", content_type = "text/event-stream", body = String)))]
pub(super) async fn mcp_get(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}

#[utoipa::path(delete, path = "/mcp",
    description = "Ends the session given in `Mcp-Session-Id` (and deletes its sandbox).",
    responses((status = 202, description = "The session ended"), (status = 200, description = "The session ended")))]
pub(super) async fn mcp_delete(State(st): State<Arc<AppState>>, req: Request) -> Response {
    mcp(&st, req).await
}
