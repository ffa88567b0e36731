//! The Docker door: the subset of the Docker Engine API that sandbox code speaks (docker-py's
//! `containers.run`, `exec_run`, `put_archive`; the `docker` CLI's `run`, `ps`, `images`),
//! served on a Unix socket (`cordon serve --docker-socket`) or a TCP port that needs an API
//! key (`--docker-listen`). Each container is a cordon sandbox made through
//! [`cordon_service`]; this door only translates. Handlers are grouped per resource:
//! [`system`], [`images`], [`containers`] (and [`lifecycle`]: restart, pause, rename, prune),
//! [`exec`], [`archive`], [`commit`]; [`stream`] holds Docker's multiplexed stream framing and connection
//! hijacking.
//!
//! Threat model: whoever reaches the socket is a hostile client. What it asks for can only
//! narrow what the server grants: powers cordon does not give (privileged, capabilities,
//! devices, the host's network/PID/IPC namespaces, loosening security options, binds outside
//! `--docker-bind-root`) are refused with an error naming the field, before anything starts.
//! The socket is mode 0660 (group chosen by the operator); a TCP listener authenticates every
//! request with an API key, as the native API does, and each key sees only its own containers
//! and their execs (another key's are "No such container").

mod archive;
mod commit;
mod containers;
mod exec;
mod images;
mod lifecycle;
mod stream;
mod system;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use cordon_service::error::ServiceError;
use cordon_service::Caller;
use serde_json::json;

use crate::app::AppState;

/// The API version this door speaks (what docker-py and the CLI negotiate down to).
pub const API_VERSION: &str = "1.43";
/// The oldest version it answers to.
pub const MIN_API_VERSION: &str = "1.24";

/// Where the Docker door listens (`cordon serve --docker-socket` / `--docker-listen`).
#[derive(Debug, Clone, Default)]
pub struct DockerOptions {
    /// A Unix socket, created mode 0660.
    pub socket: Option<PathBuf>,
    /// The socket's group (a gid), when the operator names one.
    pub socket_gid: Option<u32>,
    /// A TCP address; every request there must carry an API key.
    pub listen: Option<std::net::SocketAddr>,
}

/// An error in Docker's shape, `{"message": …}`: docker-py maps 404s whose message starts
/// with "No such image" to `ImageNotFound`, other 404s to `NotFound`, the rest to `APIError`.
pub(crate) struct DockerError(pub StatusCode, pub String);

impl DockerError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        DockerError(status, message.into())
    }
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    /// A power the request asks for that cordon never grants.
    pub(crate) fn refused(field: &str, why: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            format!("{field}: refused by cordon: {why} (nothing was created)"),
        )
    }
    pub(crate) fn no_container(id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("No such container: {id}"))
    }
    pub(crate) fn no_image(name: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, format!("No such image: {name}"))
    }
}

impl From<ServiceError> for DockerError {
    fn from(e: ServiceError) -> Self {
        DockerError(crate::error::status_of(e.kind), e.message)
    }
}

impl IntoResponse for DockerError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "message": self.1 }))).into_response()
    }
}

pub(crate) type DResult<T> = Result<T, DockerError>;

/// The door's state: the service, and what Docker knows that cordon does not (a container's
/// name, command and log before and after its main process; exec instances).
pub(crate) struct Docker {
    pub(crate) st: Arc<AppState>,
    /// Whether requests must carry an API key (the TCP listener).
    keyed: bool,
    pub(crate) containers: Mutex<HashMap<String, Arc<containers::Container>>>,
    pub(crate) execs: Mutex<HashMap<String, Arc<exec::ExecInstance>>>,
    /// Images this door committed: what Docker's inspect shows of their making.
    pub(crate) commits: Mutex<std::collections::BTreeMap<String, commit::Committed>>,
}

pub(crate) type St = Arc<Docker>;

impl Docker {
    /// Who is calling: on the socket, whoever its file mode lets in (as the server's local
    /// caller); on TCP, the API key's owner.
    pub(crate) fn caller(&self, headers: &axum::http::HeaderMap) -> DResult<Caller> {
        if !self.keyed {
            return Ok(Caller {
                key_id: crate::auth::OPEN_KEY.into(),
                max_sandboxes: 1000,
            });
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        crate::auth::authenticate(
            &self.st,
            headers,
            token,
            "missing API key: send 'Authorization: Bearer <key>' (docker-py: \
             client.api.headers['Authorization'] = 'Bearer KEY')",
        )
        .map_err(|e| DockerError::from(e.0))
    }

    /// One of the caller's containers by id, unique id prefix or name: another caller's
    /// (another API key's, on the TCP listener) is not found, as if it did not exist.
    pub(crate) fn find(&self, caller: &Caller, name: &str) -> DResult<Arc<containers::Container>> {
        let map = self
            .containers
            .lock()
            .map_err(|_| DockerError::new(StatusCode::INTERNAL_SERVER_ERROR, "lock"))?;
        let mine = |c: &&Arc<containers::Container>| c.caller.key_id == caller.key_id;
        if let Some(c) = map.get(name).filter(mine) {
            return Ok(c.clone());
        }
        let bare = name.trim_start_matches('/');
        if let Some(c) = map.values().filter(mine).find(|c| c.name() == bare) {
            return Ok(c.clone());
        }
        let mut by_prefix = map
            .values()
            .filter(mine)
            .filter(|c| !name.is_empty() && c.id.starts_with(name));
        match (by_prefix.next(), by_prefix.next()) {
            (Some(c), None) => Ok(c.clone()),
            (Some(_), Some(_)) => Err(DockerError::bad(format!(
                "multiple containers match '{name}': give more of the id"
            ))),
            _ => Err(DockerError::no_container(name)),
        }
    }
}

/// The container a handler's path names (`/containers/{id}/…`), after the caller is
/// authenticated: the one check every container handler starts with, written once.
pub(crate) struct Found(pub(crate) Arc<containers::Container>);

impl axum::extract::FromRequestParts<St> for Found {
    type Rejection = DockerError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        d: &St,
    ) -> Result<Self, Self::Rejection> {
        let caller = d.caller(&parts.headers)?;
        let axum::extract::Path(id) = axum::extract::Path::<String>::from_request_parts(parts, d)
            .await
            .map_err(|e| DockerError::bad(e.body_text()))?;
        Ok(Found(d.find(&caller, &id)?))
    }
}

/// `/v1.43/containers/…` and `/containers/…` are the same route: the version prefix is
/// dropped before routing (every version from [`MIN_API_VERSION`] is answered alike).
fn strip_version(mut req: Request) -> Request {
    let path = req.uri().path();
    if let Some(rest) = path.strip_prefix("/v") {
        if let Some((ver, tail)) = rest.split_once('/') {
            if !ver.is_empty() && ver.chars().all(|c| c.is_ascii_digit() || c == '.') {
                let pq = match req.uri().query() {
                    Some(q) => format!("/{tail}?{q}"),
                    None => format!("/{tail}"),
                };
                if let Ok(uri) = pq.parse::<Uri>() {
                    *req.uri_mut() = uri;
                }
            }
        }
    }
    req
}

/// The door's routes.
pub(crate) fn router(st: Arc<AppState>, keyed: bool) -> Router {
    let d: St = Arc::new(Docker {
        st,
        keyed,
        containers: Mutex::new(HashMap::new()),
        execs: Mutex::new(HashMap::new()),
        commits: Mutex::new(Default::default()),
    });
    let inner = Router::new()
        .route("/_ping", get(system::ping).head(system::ping))
        .route("/version", get(system::version))
        .route("/info", get(system::info))
        .route("/images/json", get(images::list))
        .route("/images/create", post(images::pull))
        .route(
            "/images/load",
            post(images::load).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/images/get", get(images::save_many))
        .route("/images/prune", post(lifecycle::prune_images))
        .route(
            "/images/{*rest}",
            get(images::inspect).delete(images::remove),
        )
        .route("/commit", post(commit::commit))
        .route("/containers/json", get(containers::list))
        .route("/containers/create", post(containers::create))
        .route("/containers/prune", post(lifecycle::prune_containers))
        .route("/containers/{id}/json", get(containers::inspect))
        .route("/containers/{id}/start", post(containers::start))
        .route("/containers/{id}/wait", post(containers::wait))
        .route("/containers/{id}/logs", get(containers::logs))
        .route("/containers/{id}/attach", post(containers::attach))
        .route("/containers/{id}/resize", post(containers::resize))
        .route("/containers/{id}/stop", post(containers::stop))
        .route("/containers/{id}/restart", post(lifecycle::restart))
        .route("/containers/{id}/pause", post(lifecycle::pause))
        .route("/containers/{id}/unpause", post(lifecycle::unpause))
        .route("/containers/{id}/rename", post(lifecycle::rename))
        .route("/containers/{id}/update", post(lifecycle::update))
        .route("/containers/{id}/kill", post(containers::kill))
        .route("/containers/{id}/top", get(containers::top))
        .route("/containers/{id}/stats", get(containers::stats))
        .route("/containers/{id}", delete(containers::remove))
        .route("/containers/{id}/exec", post(exec::create))
        .route("/exec/{id}/start", post(exec::start))
        .route("/exec/{id}/json", get(exec::inspect))
        .route("/exec/{id}/resize", post(exec::resize))
        .route(
            "/containers/{id}/archive",
            put(archive::put_archive)
                .get(archive::get_archive)
                .head(archive::stat_archive)
                // The service caps the archive (`--max-upload`); axum's own 2 MiB is not it.
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .fallback(|req: Request| async move {
            DockerError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "page not found: {} {} is not part of cordon's Docker API",
                    req.method(),
                    req.uri().path()
                ),
            )
        })
        .with_state(d);
    Router::new().fallback_service(tower::ServiceExt::map_request(inner, strip_version))
}

/// Starts the Docker door on the configured socket and/or port; the tasks serve until the
/// runtime ends.
pub async fn serve(
    st: Arc<AppState>,
    opts: DockerOptions,
    mut ready: impl FnMut(&str),
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let mut tasks = Vec::new();
    if let Some(path) = &opts.socket {
        let listener = bind_socket(path, opts.socket_gid)?;
        ready(&format!("unix://{}", path.display()));
        let app = router(st.clone(), false);
        tasks.push(tokio::spawn(async move {
            crate::http_serve::serve(listener, app, std::future::pending::<()>()).await;
        }));
    }
    if let Some(addr) = opts.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--docker-listen {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        ready(&format!("tcp://{local}"));
        let app = router(st, true);
        tasks.push(tokio::spawn(async move {
            crate::http_serve::serve(listener, app, std::future::pending::<()>()).await;
        }));
    }
    Ok(tasks)
}

/// Creates the socket mode 0660 (group `gid` when given). The mode is set on the path before
/// anyone can connect: the socket is bound inside a fresh private directory next to it, and
/// renamed into place once its mode and owner are right.
fn bind_socket(
    path: &std::path::Path,
    gid: Option<u32>,
) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let shown = path.display();
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(format!(
                "--docker-socket {shown}: exists and is not a socket; refusing to replace it"
            ));
        }
        std::fs::remove_file(path).map_err(|e| format!("--docker-socket {shown}: {e}"))?;
    }
    let staging = parent.join(format!(".cordon-docker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| format!("--docker-socket {shown}: {e}"))?;
    let tmp = staging.join("sock");
    let result = (|| {
        let listener = tokio::net::UnixListener::bind(&tmp).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| e.to_string())?;
        if let Some(gid) = gid {
            std::os::unix::fs::chown(&tmp, None, Some(gid)).map_err(|e| e.to_string())?;
        }
        std::fs::rename(&tmp, path).map_err(|e| e.to_string())?;
        Ok::<_, String>(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result.map_err(|e| format!("--docker-socket {shown}: {e}"))
}
