//! The composition root of `cordon serve`: the state every HTTP door shares ([`AppState`]),
//! the router that puts the doors together (the E2B door's paths, SandboxFusion's `/run_code`,
//! the terminal WebSocket, the web console, the native API for the rest, `/mcp` among them),
//! and [`serve`], which runs it until a signal.
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
    /// The web console's sign-in sessions; `None` when the console is off.
    pub(crate) console: Option<crate::console::Sessions>,
    /// Ports into sandboxes (`cordon serve`'s; other hosts of the doors have none).
    pub(crate) ports: std::sync::OnceLock<Arc<crate::ports::Ports>>,
}

impl AppState {
    /// The state of a server with its web console on.
    pub fn new(service: Arc<Service>, open: bool) -> Arc<AppState> {
        AppState::with_console(service, open, true)
    }

    pub fn with_console(service: Arc<Service>, open: bool, console: bool) -> Arc<AppState> {
        let mcp = crate::mcp::http_service(crate::mcp::McpState::new(service.clone(), None, None));
        let console = console.then(Default::default);
        Arc::new(AppState {
            service,
            open,
            mcp,
            console,
            ports: Default::default(),
        })
    }
}

/// Every door on one router. The E2B door answers its own paths (none of which the native API
/// uses) in E2B's shapes; the native API answers the rest.
pub fn router(st: Arc<AppState>) -> Router {
    let st_ports = st.clone();
    // Around the whole router, not route by route: the 405 answers get their `Allow` header
    // from the router itself, after any per-route layer has run.
    let mut doors = Router::new()
        .merge(crate::e2b::router(st.clone()))
        .merge(crate::terminal::router(st.clone()))
        .merge(crate::fusion::router(st.clone()));
    if st.console.is_some() {
        doors = doors.merge(crate::console::router(st.clone()));
    }
    doors
        .fallback_service(crate::native::router(st))
        .layer(middleware::from_fn(crate::native::json_errors))
        .layer(middleware::from_fn(crate::e2b::errors_for_e2b_clients))
        // Outermost: a request for a sandbox's port is none of the doors'.
        .layer(middleware::from_fn_with_state(
            st_ports,
            crate::ports::route,
        ))
}

/// Where `cordon serve` listens, and whether it runs without API keys.
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub open: bool,
    /// A node of a cordon cluster: every request must carry this secret in
    /// [`CLUSTER_SECRET_HEADER`] (the cluster's routers add it), so that a client that reaches
    /// the node's port directly is refused.
    pub cluster_secret: Option<String>,
    /// Serve the web console at `/console`.
    pub console: bool,
    /// The Docker door's socket and/or port (`--docker-socket`, `--docker-listen`).
    pub docker: crate::docker::DockerOptions,
    /// The domain sandboxes' ports are reached under (`--sandbox-domain`): a request for
    /// `{port}-{id}.{domain}` goes to that port in that sandbox. `None`: `localhost:<port>`.
    pub sandbox_domain: Option<String>,
}

/// The header in which a cluster's router proves itself to a node.
pub const CLUSTER_SECRET_HEADER: &str = "x-cordon-cluster-secret";

/// A cluster node's gate: a request without the cluster's secret never reaches a door (not
/// even `/healthz`: the node's port is for its routers only).
async fn cluster_gate(
    axum::extract::State(secret): axum::extract::State<Arc<String>>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let given = req
        .headers()
        .get(CLUSTER_SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Compared as digests: equal length, no early exit on the first differing byte.
    let (a, b) = (
        cordon_service::keys::hash(given),
        cordon_service::keys::hash(&secret),
    );
    if !cordon_service::keys::constant_time_eq(&a, &b) {
        return ApiError::new(
            crate::error::ErrorKind::Forbidden,
            "cluster_secret_required",
            "this is a node of a cordon cluster: it answers its cluster's routers only (send \
             requests to a router)",
        )
        .into_response();
    }
    next.run(req).await
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
    let state = AppState::with_console(service.clone(), opts.open, opts.console);
    let domain = opts
        .sandbox_domain
        .clone()
        .unwrap_or_else(|| format!("localhost:{}", addr.port()));
    let ports = Arc::new(
        crate::ports::Ports::new(&domain, &service.config().data_dir)
            .map_err(|e| ApiError::internal(e.to_string()))?,
    );
    let _ = state.ports.set(ports.clone());
    let reaper = service.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            reaper.reap().await;
        }
    });
    // Each sandbox's use over its whole life, for the console's graphs (`usage`).
    let sampler = Arc::downgrade(&service);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(cordon_service::usage::INTERVAL).await;
            match sampler.upgrade() {
                Some(s) => s.sample_usage().await,
                None => return,
            }
        }
    });
    let mut docker_at = Vec::new();
    let _docker = crate::docker::serve(state.clone(), opts.docker.clone(), |a| {
        docker_at.push(a.to_string())
    })
    .await
    .map_err(ApiError::internal)?;
    for a in &docker_at {
        println!("cordon Docker API on {a}");
    }
    ready(addr);
    println!(
        "sandbox ports: http(s)://<port>-<sandbox id>.{} (TLS CA: {})",
        ports.domain,
        ports.ca_path.display()
    );
    let mut app = router(state);
    if let Some(secret) = opts.cluster_secret {
        app = app.layer(middleware::from_fn_with_state(
            Arc::new(secret),
            cluster_gate,
        ));
    }
    crate::http_serve::serve_with_tls(
        listener,
        app,
        crate::http_serve::terminate_or_interrupt(),
        Some(ports),
    )
    .await;
    service.shutdown_all().await;
    Ok(())
}
