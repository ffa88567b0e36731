//! File operations inside a sandbox, for every front end. Resolution happens in
//! `cordon_linux::fsview` against the sandbox's own root, so no path leads outside it.

use cordon_linux::fsview::{Entry, FsError, SandboxFs};
use serde_json::json;

use crate::error::ApiError;
use crate::service::{Caller, Service};

/// The HTTP status for a file operation's failure: the engine names what went wrong, the
/// server decides how HTTP says it.
fn fs_status(e: &FsError) -> u16 {
    match e {
        FsError::NotFound { .. } => 404,
        FsError::PermissionDenied { .. } | FsError::ReadOnly { .. } | FsError::Escapes { .. } => {
            403
        }
        FsError::NotADirectory { .. }
        | FsError::IsADirectory { .. }
        | FsError::AlreadyExists { .. }
        | FsError::NotEmpty { .. }
        | FsError::Busy { .. }
        | FsError::CrossDevice { .. } => 409,
        FsError::NotAFile { .. } | FsError::InvalidPath { .. } => 400,
        FsError::NoSpace { .. } => 507,
        FsError::TooLarge { .. } => 413,
        FsError::Unsupported { .. } => 501,
        FsError::Io { .. } => 500,
    }
}

pub(crate) fn fs_error(e: FsError) -> ApiError {
    ApiError::new(fs_status(&e), e.code(), e.to_string())
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
        return Err(ApiError::too_large("the upload", max));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_map_to_http_statuses() {
        let p = || "/workspace/x".to_string();
        let cases: Vec<(FsError, u16)> = vec![
            (FsError::NotFound { path: p() }, 404),
            (
                FsError::PermissionDenied {
                    path: p(),
                    reason: "no",
                },
                403,
            ),
            (FsError::ReadOnly { path: p() }, 403),
            (FsError::Escapes { path: p() }, 403),
            (FsError::NotADirectory { path: p() }, 409),
            (FsError::IsADirectory { path: p() }, 409),
            (FsError::AlreadyExists { path: p() }, 409),
            (FsError::NotEmpty { path: p() }, 409),
            (
                FsError::Busy {
                    path: p(),
                    reason: "b",
                },
                409,
            ),
            (FsError::CrossDevice { path: p() }, 409),
            (FsError::NotAFile { path: p() }, 400),
            (
                FsError::InvalidPath {
                    path: p(),
                    reason: "r",
                },
                400,
            ),
            (FsError::NoSpace { path: p() }, 507),
            (
                FsError::TooLarge {
                    path: p(),
                    detail: "d".into(),
                },
                413,
            ),
            (
                FsError::Unsupported {
                    reason: "old kernel".into(),
                },
                501,
            ),
            (
                FsError::Io {
                    path: p(),
                    source: std::io::Error::other("boom"),
                },
                500,
            ),
        ];
        for (err, status) in cases {
            let api = fs_error(err);
            assert_eq!(api.status, status, "{}", api.message);
        }
    }
}
