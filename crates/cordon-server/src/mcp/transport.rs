//! The MCP transports: stdio (`cordon mcp`) and streamable HTTP (`/mcp` on `cordon serve`),
//! each ordering a session's tool calls ([`super::order`]), and the JSON-RPC guard in front of
//! the HTTP one.
//!
//! Threat model: bodies and lines are client input: a message that cannot be used, or one over
//! [`MAX_MESSAGE`], is answered with its JSON-RPC error ([`super::framing`]) before rmcp sees it.

use std::sync::Arc;

use super::framing::{self, LineTransport, MAX_MESSAGE};
use super::order::Ordered;
use super::session::McpState;
use super::tools::CordonMcp;

/// Sessions of `/mcp`: rmcp's own, with each session's transport ordering its tool calls.
#[derive(Default)]
pub struct OrderedSessions(
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
);

mod http_sessions {
    use std::future::Future;

    use futures::Stream;
    use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::session::{
        EventStore, ServerSseMessage, SessionId, SessionManager,
    };

    use super::OrderedSessions;
    use crate::mcp::order::Ordered;

    type Inner = LocalSessionManager;

    impl SessionManager for OrderedSessions {
        type Error = <Inner as SessionManager>::Error;
        type Transport = Ordered<<Inner as SessionManager>::Transport>;

        async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
            let (id, t) = self.0.create_session().await?;
            Ok((id, Ordered::new(t, true)))
        }

        fn initialize_session(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
            self.0.initialize_session(id, message)
        }

        fn has_session(
            &self,
            id: &SessionId,
        ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
            self.0.has_session(id)
        }

        fn close_session(
            &self,
            id: &SessionId,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send {
            self.0.close_session(id)
        }

        fn create_stream(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.create_stream(id, message)
        }

        fn accept_message(
            &self,
            id: &SessionId,
            message: ClientJsonRpcMessage,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send {
            self.0.accept_message(id, message)
        }

        fn create_standalone_stream(
            &self,
            id: &SessionId,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.create_standalone_stream(id)
        }

        fn resume(
            &self,
            id: &SessionId,
            last_event_id: String,
        ) -> impl Future<
            Output = Result<
                impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
                Self::Error,
            >,
        > + Send {
            self.0.resume(id, last_event_id)
        }

        fn event_store(&self) -> Option<std::sync::Arc<dyn EventStore>> {
            self.0.event_store()
        }
    }
}

/// How much of an over-long HTTP body is read (and dropped) before the answer.
const DRAIN_AT_MOST: usize = 256 << 20;

/// Answers a POST that is not a usable JSON-RPC message with the JSON-RPC error for it (rmcp
/// would answer garbage with a plain-text 415 and a too-large body with a plain-text 413).
pub(crate) async fn guard_json_rpc(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use futures::StreamExt;
    if req.method() == axum::http::Method::DELETE {
        // rmcp confirms a closed session with 202 Accepted; the close is done, not queued, and
        // clients (the official Python SDK) log anything but 200/204 as a failed termination.
        let mut resp = next.run(req).await;
        if resp.status() == axum::http::StatusCode::ACCEPTED {
            *resp.status_mut() = axum::http::StatusCode::NO_CONTENT;
        }
        return resp;
    }
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    let rpc_error = |status: axum::http::StatusCode, body: serde_json::Value| {
        (status, axum::Json(body)).into_response()
    };
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut bytes: Vec<u8> = Vec::new();
    // Past the limit the body is still read (and dropped, up to a bound) so that a client
    // still sending gets the answer instead of a connection reset.
    let mut size = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                return rpc_error(
                    axum::http::StatusCode::BAD_REQUEST,
                    framing::error_response(
                        None,
                        framing::PARSE_ERROR,
                        format!("Parse error: reading the request body: {e}"),
                    ),
                )
            }
        };
        size = size.saturating_add(chunk.len());
        if size <= MAX_MESSAGE {
            bytes.extend_from_slice(&chunk);
        } else if size > DRAIN_AT_MOST {
            break;
        }
    }
    if size > MAX_MESSAGE {
        return rpc_error(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            framing::too_large(&bytes, declared.unwrap_or(size).max(size), MAX_MESSAGE),
        );
    }
    let error = match framing::classify(&bytes) {
        framing::Verdict::Pass(_) => {
            let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            return next.run(req).await;
        }
        framing::Verdict::Reject { error, .. } => error,
        framing::Verdict::Blank => framing::error_response(
            None,
            framing::PARSE_ERROR,
            "Parse error: the request body is empty",
        ),
    };
    rpc_error(axum::http::StatusCode::BAD_REQUEST, error)
}

/// The `/mcp` endpoint for `cordon serve`.
pub fn http_service(state: Arc<McpState>) -> axum::Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(CordonMcp::new(state.clone())),
        Arc::new(OrderedSessions::default()),
        StreamableHttpServerConfig::default().with_max_request_body_bytes(MAX_MESSAGE),
    );
    axum::Router::new()
        .fallback_service(service)
        .layer(axum::middleware::from_fn(guard_json_rpc))
}

/// Serves MCP on stdin/stdout until the client goes away, then deletes the sandbox.
pub async fn serve_stdio(state: Arc<McpState>) -> Result<(), String> {
    use rmcp::ServiceExt;
    let (input, output) = rmcp::transport::stdio_pipes();
    let transport = Ordered::new(LineTransport::new(input, output), false);
    let handler = CordonMcp::new(state.clone());
    let running = handler.serve(transport).await.map_err(|e| e.to_string())?;
    let _ = running.waiting().await;
    // The session is over: make sure its sandbox is gone before we exit.
    state.end_all().await;
    Ok(())
}
