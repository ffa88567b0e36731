//! File operations inside a sandbox, for every front end. Resolution happens in
//! `cordon_linux::fsview` against the sandbox's own root, so no path leads outside it.

use cordon_linux::fsview::{Entry, FsError, SandboxFs};
use serde_json::json;

use crate::error::ApiError;
use crate::service::{Caller, Service};

fn fs_error(e: FsError) -> ApiError {
    ApiError::new(e.http_status(), e.code(), e.to_string())
}

/// Runs `op` on a blocking thread against the sandbox's root, as the sandbox's own user.
pub async fn with_fs<T: Send + 'static>(
    svc: &Service,
    caller: &Caller,
    id: &str,
    event: &str,
    path: &str,
    op: impl FnOnce(&SandboxFs) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ApiError> {
    let live = svc.sandbox_for_files(caller, id)?;
    svc.audit
        .record(event, &caller.key_id, Some(id), json!({"path": path}));
    let owner = (live.sandbox.host_uid, live.sandbox.host_gid);
    let root = live
        .sandbox
        .root_dir()
        .map_err(|e| ApiError::internal(format!("sandbox root: {e}")))?;
    tokio::task::spawn_blocking(move || {
        // Keep the sandbox alive while we work inside it.
        let _live = live;
        cordon_linux::fsview::as_sandbox_user(owner, move || {
            let fs = SandboxFs::from_root_fd(root, owner)?;
            op(&fs)
        })?
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(fs_error)
}

pub async fn read(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
) -> Result<Vec<u8>, ApiError> {
    let max = svc.cfg.max_download;
    let p = path.to_string();
    with_fs(svc, caller, id, "file.read", path, move |fs| {
        fs.read(&p, max)
    })
    .await
}

pub async fn write(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
    data: Vec<u8>,
) -> Result<u64, ApiError> {
    let max = svc.cfg.max_upload;
    if data.len() as u64 > max {
        return Err(ApiError::new(
            413,
            "too_large",
            format!("uploads are limited to {max} bytes"),
        ));
    }
    let p = path.to_string();
    with_fs(svc, caller, id, "file.write", path, move |fs| {
        fs.write(&p, &mut data.as_slice(), max, true)
    })
    .await
}

pub async fn list(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
) -> Result<Vec<Entry>, ApiError> {
    let p = path.to_string();
    with_fs(svc, caller, id, "file.list", path, move |fs| fs.list(&p)).await
}
