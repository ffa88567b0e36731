//! The data directory (registry, audit log, lock) is private to the user running the server:
//! the directory 0700 and every file in it 0600, whatever the umask. The registry holds key
//! hashes and the audit log what every key did; neither is any other local user's business.
//! Volumes and snapshots (`volumes`, `snapshots`, `.partial`) keep their files' own modes: the
//! 0700 directory above them is what keeps other local users out.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;

/// Files cordon keeps in a data directory; a directory holding one of them is cordon's to
/// tighten. (`volumes`, `snapshots` and `.partial` hold what outlives a sandbox; `runs` the
/// workspaces of programs running one-shot; `learned` ended sandboxes' learned profiles;
/// `templates`, `template-files` and `template-builds` templates built through a door.)
const OURS: [&str; 12] = [
    "cordon.db",
    "learned",
    "secrets.key",
    "audit.jsonl",
    "lock",
    "volumes",
    "snapshots",
    ".partial",
    "runs",
    "templates",
    "template-files",
    "template-builds",
];

/// Creates `dir` (and its parents) if missing and makes it 0700.
///
/// A directory cordon did not create is tightened only when it is cordon's (empty, or holding
/// cordon's files): `--data-dir /var/lib` must not make `/var/lib` unreadable for everyone
/// else. Such a directory keeps its mode and the answer says so, for a warning; its files are
/// still 0600.
pub fn prepare(dir: &Path) -> io::Result<Option<String>> {
    if !dir.exists() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if meta.mode() & 0o777 == DIR_MODE {
        return Ok(None);
    }
    let ours = std::fs::read_dir(dir)?
        .flatten()
        .all(|e| OURS.iter().any(|n| e.file_name() == *n) || is_db_sidecar(&e.file_name()));
    // As root, chmod would succeed on anyone's directory: change only one of our own user.
    if ours && meta.uid() == rustix::process::geteuid().as_raw() {
        std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))?;
        return Ok(None);
    }
    Ok(Some(format!(
        "data directory {} is mode {:o} and holds files other than cordon's, so it was left \
         as it is; cordon's files in it are 0600, but give cordon a directory of its own \
         (--data-dir) to keep their names private too",
        dir.display(),
        meta.mode() & 0o7777
    )))
}

fn is_db_sidecar(name: &std::ffi::OsStr) -> bool {
    matches!(
        name.to_str(),
        Some("cordon.db-wal" | "cordon.db-shm" | "cordon.db-journal")
    )
}

/// Opens (creating if missing) a file of the data directory, 0600 whatever the umask and
/// whatever mode an older cordon left it with.
pub fn open_private(path: &Path, opts: &mut OpenOptions) -> io::Result<File> {
    let f = opts.mode(FILE_MODE).open(path)?;
    restrict(&f)?;
    Ok(f)
}

fn restrict(f: &File) -> io::Result<()> {
    if f.metadata()?.mode() & 0o777 != FILE_MODE {
        f.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// Makes the SQLite database at `db` 0600 before SQLite opens it. SQLite creates the `-wal` and
/// `-shm` files with the database file's own mode (ignoring the umask), so a 0600 database
/// keeps them 0600 too; ones an older cordon left are tightened here.
pub fn prepare_db(db: &Path) -> io::Result<()> {
    open_private(db, OpenOptions::new().create(true).append(true))?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        match OpenOptions::new().read(true).open(Path::new(&p)) {
            Ok(f) => restrict(&f)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
