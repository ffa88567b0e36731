//! Templates built through a door, kept across restarts: each template one JSON file,
//! `templates/<hex of its key id>/<template id>/template.json`, and each finished build's log
//! beside it (`<build id>.log`, one JSON line per log line). Their images are in the image
//! store already; this keeps what names them (alias, tags, builds, start and ready commands).
//!
//! Threat model: the files are this server's own, 0600 in 0700 directories of the data
//! directory, written whole to a temporary name, flushed and renamed (a crash leaves the old
//! file or the new one, never half of one); a template is deleted by renaming its directory
//! into `.partial` (cleaned at start) before removing it. Reading them back trusts nothing a
//! hand edit or a damaged disk could have changed: sizes are capped, every name is checked
//! against the alphabet a request would have had to pass, the owner must be the key whose
//! directory holds the file (a file moved into another key's directory gives that key
//! nothing), and a file that fails any check is skipped with a warning, never loaded in part.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::volumes::{fsync_dir, mkdir_private, new_partial};

/// The directory under the data directory.
pub(crate) const DIR: &str = "templates";
const FILE: &str = "template.json";
/// Largest template file read back (a thousand builds with 64 KiB start and ready commands
/// each fit).
const MAX_FILE: u64 = 160 << 20;
/// Largest build log read back.
const MAX_LOG: u64 = 128 << 20;

/// A template as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredTemplate {
    pub version: u32,
    pub owner: String,
    pub id: String,
    pub alias: String,
    pub created_ms: u64,
    pub updated_ms: u64,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub tags: BTreeMap<String, StoredTag>,
    #[serde(default)]
    pub builds: BTreeMap<String, StoredBuild>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredTag {
    pub build: String,
    pub at_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredBuild {
    /// `waiting`, `building`, `ready` or `error`.
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub start_cmd: Option<String>,
    #[serde(default)]
    pub ready_cmd: Option<String>,
    pub created_ms: u64,
    #[serde(default)]
    pub finished_ms: Option<u64>,
}

/// One kept log line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredLine {
    pub ms: u64,
    pub level: String,
    pub message: String,
}

fn key_dir(data_dir: &Path, owner: &str) -> PathBuf {
    data_dir.join(DIR).join(hex::encode(owner.as_bytes()))
}

fn template_dir(data_dir: &Path, owner: &str, id: &str) -> PathBuf {
    key_dir(data_dir, owner).join(id)
}

/// A template id as this server makes them: 20 lowercase hex digits.
pub(crate) fn valid_id(id: &str) -> bool {
    id.len() == 20
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A build id as this server makes them: a UUID, lowercase.
pub(crate) fn valid_build_id(b: &str) -> bool {
    b.len() == 36
        && b.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// Writes `bytes` as `path` crash-consistently: a temporary file in the same directory (0600),
/// flushed, renamed over `path`, the directory flushed.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.partial", crate::keys::random_hex(6)));
    let res = (|| {
        let mut f = crate::datadir::open_private(
            &tmp,
            std::fs::OpenOptions::new().write(true).create_new(true),
        )?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

fn io_err(e: crate::error::ServiceError) -> std::io::Error {
    std::io::Error::other(e.message)
}

/// Keeps `t` (replacing what was kept of it).
pub(crate) fn save(data_dir: &Path, t: &StoredTemplate) -> std::io::Result<()> {
    let dir = template_dir(data_dir, &t.owner, &t.id);
    mkdir_private(&dir).map_err(io_err)?;
    let bytes = serde_json::to_vec(t).map_err(std::io::Error::other)?;
    write_atomic(&dir.join(FILE), &bytes)
}

/// Keeps a finished build's log.
pub(crate) fn save_log(
    data_dir: &Path,
    owner: &str,
    id: &str,
    build: &str,
    lines: &[StoredLine],
) -> std::io::Result<()> {
    let dir = template_dir(data_dir, owner, id);
    mkdir_private(&dir).map_err(io_err)?;
    let mut out = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut out, l).map_err(std::io::Error::other)?;
        out.push(b'\n');
    }
    write_atomic(&dir.join(format!("{build}.log")), &out)
}

/// A kept build log (empty when there is none).
pub(crate) fn read_log(data_dir: &Path, owner: &str, id: &str, build: &str) -> Vec<StoredLine> {
    if !valid_id(id) || !valid_build_id(build) {
        return Vec::new();
    }
    let path = template_dir(data_dir, owner, id).join(format!("{build}.log"));
    let Ok(bytes) = cordon_linux::treecopy::read_small(&path, MAX_LOG) else {
        return Vec::new();
    };
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// Forgets a template: its directory goes to `.partial` in one rename (so a crash leaves it
/// whole or gone), then is removed.
pub(crate) fn remove(data_dir: &Path, owner: &str, id: &str) -> std::io::Result<()> {
    let dir = template_dir(data_dir, owner, id);
    if !dir.exists() {
        return Ok(());
    }
    let graveyard = new_partial(data_dir, "template").map_err(io_err)?;
    let dest = graveyard.join("t");
    std::fs::rename(&dir, &dest)?;
    if let Some(parent) = dir.parent() {
        let _ = fsync_dir(parent);
    }
    std::fs::remove_dir_all(&graveyard)
}

/// Why a kept file is not loaded.
fn check(t: &StoredTemplate, dir_owner: &str, dir_id: &str) -> Result<(), String> {
    use crate::template_builds::{valid_alias, valid_tag};
    if t.version != 1 {
        return Err(format!("version {} (this server reads 1)", t.version));
    }
    if t.owner != dir_owner || t.id != dir_id {
        return Err("its owner or id is not the directory it is in".into());
    }
    if !valid_id(&t.id) || !valid_alias(&t.alias) {
        return Err("an id or alias outside the alphabet".into());
    }
    if t.builds.len() > 1000 || t.tags.len() > 32 * 1000 {
        return Err("more builds or tags than a template may have".into());
    }
    for (b, rec) in &t.builds {
        if !valid_build_id(b) {
            return Err(format!(
                "build id '{}'",
                b.chars().take(40).collect::<String>()
            ));
        }
        if !matches!(
            rec.status.as_str(),
            "waiting" | "building" | "ready" | "error"
        ) {
            return Err("a build status".into());
        }
        if let Some(i) = &rec.image {
            // The one name a build of this template is stored under.
            if *i != format!("e2b-template-{}:{b}", t.id) {
                return Err("a build's image is not its own".into());
            }
        }
    }
    for (tag, tg) in &t.tags {
        if !valid_tag(tag) || !t.builds.contains_key(&tg.build) {
            return Err(format!(
                "tag '{}'",
                tag.chars().take(40).collect::<String>()
            ));
        }
    }
    if let Some(c) = t.cpus {
        if !(c.is_finite() && c > 0.0 && c <= 64.0) {
            return Err("cpus".into());
        }
    }
    if t.memory_mb.is_some_and(|m| !(64..=(1 << 20)).contains(&m)) {
        return Err("memory".into());
    }
    Ok(())
}

/// Every kept template that passes its checks; what does not is named on stderr and skipped
/// (left on disk for an operator to look at).
pub(crate) fn load_all(data_dir: &Path) -> Vec<StoredTemplate> {
    let mut out = Vec::new();
    let Ok(keys) = std::fs::read_dir(data_dir.join(DIR)) else {
        return out;
    };
    for k in keys.flatten() {
        let Some(owner) = k
            .file_name()
            .to_str()
            .and_then(|h| hex::decode(h).ok())
            .and_then(|b| String::from_utf8(b).ok())
        else {
            continue;
        };
        let Ok(ids) = std::fs::read_dir(k.path()) else {
            continue;
        };
        for e in ids.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            // A write a crash cut short left its temporary file: the old file is whole.
            for f in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                let n = f.file_name().to_string_lossy().into_owned();
                if n.starts_with('.') && n.ends_with(".partial") {
                    let _ = std::fs::remove_file(f.path());
                }
            }
            let file = path.join(FILE);
            if valid_id(&name) && !file.exists() {
                // A template whose first write never completed: nothing names it.
                let _ = std::fs::remove_dir_all(&path);
                continue;
            }
            let loaded = cordon_linux::treecopy::read_small(&file, MAX_FILE)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    serde_json::from_slice::<StoredTemplate>(&b).map_err(|e| e.to_string())
                })
                .and_then(|t| check(&t, &owner, &name).map(|()| t));
            match loaded {
                Ok(t) => out.push(t),
                Err(why) => eprintln!(
                    "cordon: warning: built template {} not loaded: {why}",
                    file.display()
                ),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("tstore-{}", crate::keys::random_hex(6)));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    fn sample(owner: &str) -> StoredTemplate {
        let b = "0123abcd-0123-4567-89ab-0123456789ab".to_string();
        StoredTemplate {
            version: 1,
            owner: owner.into(),
            id: "0123456789abcdef0123".into(),
            alias: "app".into(),
            created_ms: 1,
            updated_ms: 2,
            cpus: Some(2.0),
            memory_mb: None,
            tags: [(
                "default".to_string(),
                StoredTag {
                    build: b.clone(),
                    at_ms: 1,
                },
            )]
            .into(),
            builds: [(
                b,
                StoredBuild {
                    status: "ready".into(),
                    reason: None,
                    image: Some(
                        "e2b-template-0123456789abcdef0123:0123abcd-0123-4567-89ab-0123456789ab"
                            .into(),
                    ),
                    start_cmd: Some("x".into()),
                    ready_cmd: None,
                    created_ms: 1,
                    finished_ms: Some(2),
                },
            )]
            .into(),
        }
    }

    #[test]
    fn a_kept_template_comes_back_whole_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp();
        save(&d, &sample("k1")).expect("save");
        let back = load_all(&d);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].alias, "app");
        assert_eq!(back[0].builds.len(), 1);
        let file = template_dir(&d, "k1", "0123456789abcdef0123").join(FILE);
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left beside it.
        let left: Vec<_> = std::fs::read_dir(file.parent().expect("parent"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // What a crash mid-write leaves: the whole old file and a temporary one, removed.
        let dir = file.parent().expect("parent").to_path_buf();
        std::fs::write(dir.join(".template.json.0a0b0c.partial"), b"{\"version\":")
            .expect("leftover");
        assert_eq!(load_all(&d).len(), 1);
        assert!(!dir.join(".template.json.0a0b0c.partial").exists());
        remove(&d, "k1", "0123456789abcdef0123").expect("remove");
        assert!(load_all(&d).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_kept_file_in_another_keys_directory_or_naming_a_foreign_image_is_not_loaded() {
        let d = tmp();
        save(&d, &sample("k1")).expect("save");
        // Moved by hand into k2's directory: k2 gets nothing.
        let from = template_dir(&d, "k1", "0123456789abcdef0123");
        let to = template_dir(&d, "k2", "0123456789abcdef0123");
        std::fs::create_dir_all(to.parent().expect("parent")).expect("dir");
        std::fs::rename(&from, &to).expect("move");
        assert!(load_all(&d).is_empty());
        let _ = std::fs::remove_dir_all(&to);
        // A build naming an image that is not its own (another template's, a host's).
        let mut t = sample("k1");
        for b in t.builds.values_mut() {
            b.image = Some("someone-elses:1".into());
        }
        save(&d, &t).expect("save");
        assert!(load_all(&d).is_empty());
        let mut t = sample("k1");
        t.alias = "../x".into();
        save(&d, &t).expect("save");
        assert!(load_all(&d).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
