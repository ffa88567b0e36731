//! Which node a request belongs to, read from the request alone: a sandbox id in the E2B
//! SDK's `E2b-Sandbox-Id` header or in a `/v1/sandboxes/{id}`, `/sandboxes/{id}` or
//! `/v2/sandboxes/{id}` path names its node; a create is placed; a listing covers every node.
//! MCP over HTTP (`/mcp`): a session's `Mcp-Session-Id`, as the router hands it out, is
//! `<node>.<the node's own session id>`, so any router replica sends the session's every
//! request to the node that holds it (and its sandbox) with no table of its own.
//!
//! Threat model: the path and headers are client input. A malformed id routes nowhere (it
//! gets the node's own "not found" by never matching a node), never to an address the client
//! chose: node names only select among the addresses membership knows.

use axum::http::{HeaderMap, Method};

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// To the node named in this sandbox id.
    Sandbox(String),
    /// A new sandbox (or a one-shot run): to the node placement picks.
    Place,
    /// A listing: to every live node, the answers merged.
    All,
    /// The router's own health.
    Health,
    /// MCP over HTTP: to the node its session id names, or (a new session) placement's pick.
    Mcp,
    /// Anything else (images, volumes, snapshots' listings, MCP, the OpenAPI document): to
    /// one live node (placement's pick); such state is still per node.
    Any,
}

/// The node a sandbox id names: ids are `<node>-<8 random bytes in hex>`.
pub fn node_of(id: &str) -> Option<&str> {
    let (node, rand) = id.rsplit_once('-')?;
    let ok = !node.is_empty()
        && rand.len() == 16
        && rand.bytes().all(|b| b.is_ascii_hexdigit())
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(node)
}

/// The header that carries an MCP session's id.
pub const MCP_SESSION: &str = "mcp-session-id";

/// The node and the node's own session id in a session id the router handed out.
pub fn mcp_session(id: &str) -> Option<(&str, &str)> {
    let (node, inner) = id.split_once('.')?;
    let ok = !node.is_empty()
        && !inner.is_empty()
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some((node, inner))
}

/// The route of one request.
pub fn target(method: &Method, path: &str, headers: &HeaderMap) -> Target {
    if path == "/mcp" || path.starts_with("/mcp/") {
        return Target::Mcp;
    }
    if let Some(id) = headers.get("e2b-sandbox-id").and_then(|v| v.to_str().ok()) {
        return Target::Sandbox(id.to_string());
    }
    if path == "/healthz" || path == "/cluster/healthz" {
        return Target::Health;
    }
    let rest = ["/v1/sandboxes", "/v2/sandboxes", "/sandboxes"]
        .iter()
        .find_map(|p| path.strip_prefix(p));
    match rest {
        Some("") | Some("/") => match *method {
            Method::POST => Target::Place,
            Method::GET => Target::All,
            _ => Target::Any,
        },
        Some(r) if r.starts_with('/') => {
            let id = r[1..].split('/').next().unwrap_or("");
            Target::Sandbox(id.to_string())
        }
        _ if path == "/v1/run" || path == "/v1/batch" => Target::Place,
        _ => Target::Any,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(m: Method, p: &str) -> Target {
        target(&m, p, &HeaderMap::new())
    }

    #[test]
    fn a_sandbox_id_names_its_node_and_nothing_else_does() {
        assert_eq!(
            node_of("n0a1b2c3d4e5-0123456789abcdef"),
            Some("n0a1b2c3d4e5")
        );
        assert_eq!(node_of("my-host-0123456789abcdef"), Some("my-host"));
        assert_eq!(node_of("0123456789abcdef"), None);
        assert_eq!(node_of("n1-0123"), None);
        assert_eq!(node_of("../x-0123456789abcdef"), None);
        assert_eq!(node_of("evil.example:80-0123456789abcdef"), None);
    }

    #[test]
    fn each_door_routes_by_the_sandbox_it_names() {
        let id = "n1-0123456789abcdef";
        assert_eq!(
            t(Method::POST, &format!("/v1/sandboxes/{id}/exec")),
            Target::Sandbox(id.into())
        );
        assert_eq!(
            t(Method::DELETE, &format!("/sandboxes/{id}")),
            Target::Sandbox(id.into())
        );
        assert_eq!(
            t(Method::POST, &format!("/v2/sandboxes/{id}/connect")),
            Target::Sandbox(id.into())
        );
        let mut h = HeaderMap::new();
        h.insert("e2b-sandbox-id", id.parse().expect("header"));
        assert_eq!(
            target(&Method::POST, "/process.Process/Start", &h),
            Target::Sandbox(id.into())
        );
    }

    #[test]
    fn an_mcp_session_id_names_its_node_and_a_forged_one_names_no_address() {
        assert_eq!(t(Method::POST, "/mcp"), Target::Mcp);
        assert_eq!(
            mcp_session("n0a1b2c3d4e5.7f0e-uuid"),
            Some(("n0a1b2c3d4e5", "7f0e-uuid"))
        );
        assert_eq!(mcp_session("no-dot"), None);
        assert_eq!(mcp_session(".x"), None);
        assert_eq!(mcp_session("n1."), None);
        assert_eq!(
            mcp_session("evil.example:80.x"),
            Some(("evil", "example:80.x"))
        );
        assert_eq!(mcp_session("host:80.x"), None);
        assert_eq!(mcp_session("../n1.x"), None);
    }

    #[test]
    fn creates_are_placed_and_listings_cover_the_cluster() {
        assert_eq!(t(Method::POST, "/v1/sandboxes"), Target::Place);
        assert_eq!(t(Method::POST, "/sandboxes"), Target::Place);
        assert_eq!(t(Method::POST, "/v2/sandboxes"), Target::Place);
        assert_eq!(t(Method::POST, "/v1/run"), Target::Place);
        assert_eq!(t(Method::GET, "/v1/sandboxes"), Target::All);
        assert_eq!(t(Method::GET, "/v2/sandboxes"), Target::All);
        assert_eq!(t(Method::GET, "/openapi.json"), Target::Any);
        assert_eq!(t(Method::GET, "/v1/sandboxesX"), Target::Any);
    }
}
