//! Every file operation any door needs — read, write, stat, list (with a depth and a cap),
//! mkdir, move, remove, and the snapshots a watcher compares — done inside a sandbox as its
//! own user. Resolution happens in `cordon_linux::fsview` against the sandbox's own root
//! (`openat2` `RESOLVE_IN_ROOT`), so no path a caller or the sandbox controls leads outside
//! it; the engine's file handle never leaves this module.

pub use cordon_linux::fsview::{Entry, EntryType};
use cordon_linux::fsview::{FsError, SandboxFs};
use std::collections::BTreeMap;

use serde_json::json;

use crate::error::{ErrorKind, ServiceError};
use crate::{Caller, Service};

/// The kind of a file operation's failure: the engine names what went wrong, each door
/// decides how its protocol says it.
fn fs_kind(e: &FsError) -> ErrorKind {
    match e {
        FsError::NotFound { .. } => ErrorKind::NotFound,
        FsError::PermissionDenied { .. } | FsError::ReadOnly { .. } | FsError::Escapes { .. } => {
            ErrorKind::Forbidden
        }
        FsError::NotADirectory { .. }
        | FsError::IsADirectory { .. }
        | FsError::AlreadyExists { .. }
        | FsError::NotEmpty { .. }
        | FsError::Busy { .. }
        | FsError::CrossDevice { .. } => ErrorKind::Conflict,
        FsError::NotAFile { .. } | FsError::InvalidPath { .. } => ErrorKind::Invalid,
        FsError::NoSpace { .. } => ErrorKind::NoSpace,
        FsError::TooLarge { .. } => ErrorKind::TooLarge,
        FsError::Unsupported { .. } => ErrorKind::Unsupported,
        FsError::Io { .. } => ErrorKind::Internal,
    }
}

pub(crate) fn fs_error(e: FsError) -> ServiceError {
    ServiceError::new(fs_kind(&e), e.code(), e.to_string())
}

/// Where a file operation happens: inside a sandbox (by id: a `&str` converts to this), or
/// in one of the caller's volumes, with no sandbox at all.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    Sandbox(&'a str),
    Volume(&'a str),
}

impl<'a> From<&'a str> for Place<'a> {
    fn from(id: &'a str) -> Self {
        Place::Sandbox(id)
    }
}

impl<'a> From<&'a String> for Place<'a> {
    fn from(id: &'a String) -> Self {
        Place::Sandbox(id)
    }
}

/// Runs `op` on a blocking thread against the place's root and records `event` in the audit
/// log: in a sandbox as the sandbox's own user; in a volume as the server's user, which owns
/// a volume's files (sandboxes see them as theirs through an idmapped mount).
async fn with_fs<T: Send + 'static>(
    svc: &Service,
    caller: &Caller,
    at: Place<'_>,
    event: &str,
    path: &str,
    op: impl FnOnce(&SandboxFs) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ServiceError> {
    match at {
        Place::Sandbox(id) => {
            svc.sandbox_for_files(caller, id)?;
            svc.audit
                .record(event, &caller.key_id, Some(id), json!({"path": path}));
            in_sandbox(svc, caller, id, op).await
        }
        Place::Volume(name) => {
            let data = svc.volume_data(caller, name)?;
            svc.audit.record(
                &format!("volume.{event}"),
                &caller.key_id,
                None,
                json!({"volume": name, "path": path}),
            );
            tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::MetadataExt;
                let meta = std::fs::metadata(&data).map_err(|e| FsError::from_io(e, "/"))?;
                op(&SandboxFs::open(&data, (meta.uid(), meta.gid()))?)
            })
            .await
            .map_err(|e| ServiceError::internal(e.to_string()))?
            .map_err(fs_error)
        }
    }
}

/// Runs `op` against a sandbox's root as its own user, recorded in the audit log as `event`
/// (for operations of several files, such as extracting an archive).
pub(crate) async fn in_sandbox_audited<T: Send + 'static>(
    svc: &Service,
    caller: &Caller,
    id: &str,
    event: &str,
    path: &str,
    op: impl FnOnce(&SandboxFs) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ServiceError> {
    with_fs(svc, caller, Place::Sandbox(id), event, path, op).await
}

/// Runs `op` against the sandbox's root as its own user, without an audit record (a
/// watcher's repeated looks: its creation is recorded).
async fn in_sandbox<T: Send + 'static>(
    svc: &Service,
    caller: &Caller,
    id: &str,
    op: impl FnOnce(&SandboxFs) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ServiceError> {
    let live = svc.sandbox_for_files(caller, id)?;
    let owner = (live.sandbox.host_uid, live.sandbox.host_gid);
    let root = live
        .sandbox
        .root_dir()
        .map_err(|e| ServiceError::internal(format!("sandbox root: {e}")))?;
    tokio::task::spawn_blocking(move || {
        // Keep the sandbox alive while we work inside it.
        let _live = live;
        cordon_linux::fsview::as_sandbox_user(owner, move || {
            let fs = SandboxFs::from_root_fd(root, owner)?;
            op(&fs)
        })?
    })
    .await
    .map_err(|e| ServiceError::internal(e.to_string()))?
    .map_err(fs_error)
}

/// A file's bytes, at most the server's `--max-download`.
pub async fn read(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
) -> Result<Vec<u8>, ServiceError> {
    let max = svc.cfg.max_download;
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.read", path, move |fs| {
        fs.read(&p, max)
    })
    .await
}

pub async fn write(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    data: Vec<u8>,
) -> Result<u64, ServiceError> {
    write_with_metadata(svc, caller, at, path, data, BTreeMap::new()).await
}

/// [`write`], the new file given user metadata (`user.e2b.<key>` attributes, see
/// [`Entry::metadata`]); an overwrite without metadata leaves the new file without any.
pub async fn write_with_metadata(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    data: Vec<u8>,
    metadata: BTreeMap<String, String>,
) -> Result<u64, ServiceError> {
    check_metadata(&metadata)?;
    let max = svc.cfg.max_upload;
    if data.len() as u64 > max {
        return Err(ServiceError::too_large("the upload", max));
    }
    let at = at.into();
    if let Place::Volume(name) = at {
        svc.volume_room(caller, name, data.len() as u64)?;
    }
    let p = path.to_string();
    with_fs(svc, caller, at, "file.write", path, move |fs| {
        fs.write_with_metadata(&p, &mut data.as_slice(), max, true, &metadata)
    })
    .await
}

/// Metadata keys are HTTP header tokens (the E2B SDK sends them as `X-Metadata-<key>`
/// headers), lowercase, short enough for an attribute name; values printable US-ASCII.
pub fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), ServiceError> {
    const TOKEN_PUNCT: &[u8] = b"!#$%&'*+-.^_`|~";
    for (key, value) in metadata {
        let token = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || TOKEN_PUNCT.contains(&b));
        if !token || key.len() > 200 {
            return Err(ServiceError::bad_request(format!(
                "metadata key {key:?}: 1 to 200 lowercase HTTP token characters                  (a-z, 0-9, !#$%&'*+-.^_`|~)"
            )));
        }
        if value.len() > 4096 || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(ServiceError::bad_request(format!(
                "metadata value of {key:?}: at most 4096 printable US-ASCII characters"
            )));
        }
    }
    Ok(())
}

/// One entry: what it is, its size, mode and time.
pub async fn stat(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
) -> Result<Entry, ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.stat", path, move |fs| {
        fs.stat(&p)
    })
    .await
}

/// One entry, a symlink followed (up to 40 links, as the kernel does): the link's name and
/// path with what it leads to (type, size, mode, time), and as `target` the absolute path
/// it leads to, resolved lexically as the sandbox's programs name it. A link that leads
/// nowhere is described as the link.
pub async fn stat_following(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
) -> Result<Entry, ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.stat", path, move |fs| {
        let link = fs.stat(&p)?;
        let mut cur = link.clone();
        for _ in 0..40 {
            let Some(t) = cur
                .target
                .clone()
                .filter(|_| cur.r#type == EntryType::Symlink)
            else {
                break;
            };
            let abs = link_target(&cur.path, &t);
            match fs.stat(&abs) {
                Ok(next) => cur = next,
                Err(_) => {
                    cur.path = abs;
                    break;
                }
            }
        }
        if link.r#type != EntryType::Symlink || cur.r#type == EntryType::Symlink {
            let mut link = link;
            if link.r#type == EntryType::Symlink {
                link.target = Some(cur.path);
            }
            return Ok(link);
        }
        Ok(Entry {
            target: Some(cur.path.clone()),
            name: link.name,
            path: link.path,
            ..cur
        })
    })
    .await
}

/// The absolute path a link at `link` with target text `target` names, `.` and `..`
/// resolved lexically.
fn link_target(link: &str, target: &str) -> String {
    let dir = link.rsplit_once('/').map(|(dir, _)| dir).unwrap_or("");
    cordon_policy::lexical::resolve(dir, target)
}

/// A directory's entries, `depth` levels down (1: the directory itself), at most `cap` of
/// them, in the order of their paths (each directory followed by what it holds). A link to a
/// directory is listed as that directory.
pub async fn list(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    depth: u32,
    cap: usize,
) -> Result<Vec<Entry>, ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.list", path, move |fs| {
        let mut out = walk(fs, &p, depth, cap, false)?;
        out.sort_by(|a, b| std::path::Path::new(&a.path).cmp(std::path::Path::new(&b.path)));
        Ok(out)
    })
    .await
}

/// The tree under `path` as a watcher sees it: like [`list`], but a directory removed while
/// it is walked is skipped (seen as removed at the next look), and nothing is audited.
pub async fn snapshot(
    svc: &Service,
    caller: &Caller,
    id: &str,
    path: &str,
    depth: u32,
    cap: usize,
) -> Result<Vec<Entry>, ServiceError> {
    let p = path.to_string();
    in_sandbox(svc, caller, id, move |fs| walk(fs, &p, depth, cap, true)).await
}

fn walk(
    fs: &SandboxFs,
    path: &str,
    depth: u32,
    cap: usize,
    tolerant: bool,
) -> Result<Vec<Entry>, FsError> {
    let top = fs.stat(path)?;
    if !matches!(top.r#type, EntryType::Dir | EntryType::Symlink) {
        return Err(FsError::NotADirectory {
            path: path.to_string(),
        });
    }
    let mut out = Vec::new();
    let mut level = vec![path.to_string()];
    for _ in 0..depth.max(1) {
        let mut next = Vec::new();
        for dir in level {
            let entries = match fs.list(&dir) {
                Ok(e) => e,
                Err(_) if tolerant => continue,
                Err(e) => return Err(e),
            };
            for e in entries {
                if e.r#type == EntryType::Dir {
                    next.push(e.path.clone());
                }
                if out.len() < cap {
                    out.push(e);
                }
            }
        }
        level = next;
    }
    Ok(out)
}

/// Makes a directory (and, with `parents`, the ones above it).
pub async fn mkdir(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    parents: bool,
) -> Result<(), ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.mkdir", path, move |fs| {
        fs.mkdir(&p, parents)
    })
    .await
}

/// Makes a new directory and its parents; `already_exists` if something is there.
pub async fn mkdir_new(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
) -> Result<Entry, ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.mkdir", path, move |fs| {
        if fs.stat(&p).is_ok() {
            return Err(FsError::AlreadyExists { path: p.clone() });
        }
        fs.mkdir(&p, true)?;
        fs.stat(&p)
    })
    .await
}

/// Moves `from` to `to` and answers what is at `to` now.
pub async fn rename(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    from: &str,
    to: &str,
) -> Result<Entry, ServiceError> {
    let (f, t) = (from.to_string(), to.to_string());
    with_fs(
        svc,
        caller,
        at.into(),
        "file.move",
        &format!("{from} -> {to}"),
        move |fs| {
            fs.rename(&f, &t)?;
            fs.stat(&t)
        },
    )
    .await
}

/// Removes a path if it is there (E2B's `files.remove`): whether it was.
pub async fn remove_if_present(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    recursive: bool,
) -> Result<bool, ServiceError> {
    match remove(svc, caller, at, path, recursive).await {
        Ok(()) => Ok(true),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes a file, or a directory (with its contents when `recursive`).
pub async fn remove(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    recursive: bool,
) -> Result<(), ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.delete", path, move |fs| {
        fs.remove(&p, recursive).map(|_| ())
    })
    .await
}

/// Sets a file's or directory's permission bits (set-user-ID and set-group-ID dropped; never
/// through a symlink).
pub async fn set_mode(
    svc: &Service,
    caller: &Caller,
    at: impl Into<Place<'_>>,
    path: &str,
    mode: u32,
) -> Result<(), ServiceError> {
    let p = path.to_string();
    with_fs(svc, caller, at.into(), "file.chmod", path, move |fs| {
        fs.set_mode(&p, mode)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_targets_resolve_lexically_from_the_links_directory() {
        assert_eq!(link_target("/home/user/d/l", "t.txt"), "/home/user/d/t.txt");
        assert_eq!(link_target("/home/user/d/l", "../x/./y"), "/home/user/x/y");
        assert_eq!(link_target("/home/user/d/l", "/etc/hosts"), "/etc/hosts");
        assert_eq!(link_target("/l", "../../.."), "/");
    }

    #[test]
    fn file_errors_map_to_kinds() {
        let p = || "/workspace/x".to_string();
        let cases: Vec<(FsError, ErrorKind)> = vec![
            (FsError::NotFound { path: p() }, ErrorKind::NotFound),
            (
                FsError::PermissionDenied {
                    path: p(),
                    reason: "no",
                },
                ErrorKind::Forbidden,
            ),
            (FsError::ReadOnly { path: p() }, ErrorKind::Forbidden),
            (FsError::Escapes { path: p() }, ErrorKind::Forbidden),
            (FsError::NotADirectory { path: p() }, ErrorKind::Conflict),
            (FsError::IsADirectory { path: p() }, ErrorKind::Conflict),
            (FsError::AlreadyExists { path: p() }, ErrorKind::Conflict),
            (FsError::NotEmpty { path: p() }, ErrorKind::Conflict),
            (
                FsError::Busy {
                    path: p(),
                    reason: "b",
                },
                ErrorKind::Conflict,
            ),
            (FsError::CrossDevice { path: p() }, ErrorKind::Conflict),
            (FsError::NotAFile { path: p() }, ErrorKind::Invalid),
            (
                FsError::InvalidPath {
                    path: p(),
                    reason: "r",
                },
                ErrorKind::Invalid,
            ),
            (FsError::NoSpace { path: p() }, ErrorKind::NoSpace),
            (
                FsError::TooLarge {
                    path: p(),
                    detail: "d".into(),
                },
                ErrorKind::TooLarge,
            ),
            (
                FsError::Unsupported {
                    reason: "old kernel".into(),
                },
                ErrorKind::Unsupported,
            ),
            (
                FsError::Io {
                    path: p(),
                    source: std::io::Error::other("boom"),
                },
                ErrorKind::Internal,
            ),
        ];
        for (err, kind) in cases {
            let api = fs_error(err);
            assert_eq!(api.kind, kind, "{}", api.message);
        }
    }
}
