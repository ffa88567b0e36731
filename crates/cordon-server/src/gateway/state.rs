//! The gateway's state directory: pins (approved and pending tool definitions) and held calls
//! waiting for a person. Files, so that `cordon gateway approve` (another process) can answer
//! a running gateway; written whole and renamed into place, so a reader never sees half.

use std::path::{Path, PathBuf};

use cordon_gateway::pin::PinFile;
use serde::{Deserialize, Serialize};

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut f = cordon_service::datadir::open_private(
            &tmp,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true),
        )?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

pub struct StateDir {
    pub dir: PathBuf,
    /// The pins as last read, with the file's (mtime, size, inode): a call costs a stat, not
    /// a read and a parse, and `cordon gateway approve` (a rename) is seen at the next call.
    pins_cache: std::sync::Mutex<Option<(FileStamp, PinFile)>>,
}

type FileStamp = (std::time::SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

impl StateDir {
    pub fn open(dir: &Path) -> std::io::Result<StateDir> {
        cordon_service::datadir::prepare(dir)?;
        std::fs::create_dir_all(dir.join("approvals"))?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
            pins_cache: Default::default(),
        })
    }

    fn pins_path(&self) -> PathBuf {
        self.dir.join("pins.json")
    }

    pub fn load_pins(&self) -> std::io::Result<PinFile> {
        let now = stamp(&self.pins_path());
        if let (Some(st), Ok(cache)) = (now, self.pins_cache.lock()) {
            if let Some((_, p)) = cache.as_ref().filter(|(s, _)| *s == st) {
                return Ok(p.clone());
            }
        }
        let pins = self.read_pins()?;
        if let (Some(st), Ok(mut cache)) = (now, self.pins_cache.lock()) {
            *cache = Some((st, pins.clone()));
        }
        Ok(pins)
    }

    fn read_pins(&self) -> std::io::Result<PinFile> {
        match std::fs::read(self.pins_path()) {
            Ok(b) => serde_json::from_slice(&b).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(PinFile::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save_pins(&self, pins: &PinFile) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(pins).map_err(std::io::Error::other)?;
        write_atomic(&self.pins_path(), &bytes)
    }

    fn approval_path(&self, id: &str) -> Option<PathBuf> {
        // Ids are ours (hex); anything else never names a file.
        (id.starts_with("call-") && id[5..].bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join("approvals").join(format!("{id}.json")))
    }

    pub fn save_approval(&self, a: &Approval) -> std::io::Result<()> {
        let p = self
            .approval_path(&a.id)
            .ok_or_else(|| std::io::Error::other("bad approval id"))?;
        let bytes = serde_json::to_vec_pretty(a).map_err(std::io::Error::other)?;
        write_atomic(&p, &bytes)
    }

    pub fn load_approval(&self, id: &str) -> Option<Approval> {
        let p = self.approval_path(id)?;
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    }

    pub fn remove_approval(&self, id: &str) {
        if let Some(p) = self.approval_path(id) {
            let _ = std::fs::remove_file(p);
        }
    }

    pub fn approvals(&self) -> Vec<Approval> {
        let mut out: Vec<Approval> = std::fs::read_dir(self.dir.join("approvals"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                self.load_approval(name.strip_suffix(".json")?)
            })
            .collect();
        out.sort_by_key(|a| a.requested_ms);
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Answer {
    Pending,
    Granted,
    Refused,
}

/// A call held for a person's approval. The answer is bound to the call's argument digest,
/// its rule and its expiry: a grant for other arguments, another rule or after the expiry
/// lets nothing through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub id: String,
    pub tool: String,
    pub rule: String,
    pub client: String,
    pub args_digest: String,
    pub requested_ms: u64,
    pub expires_ms: u64,
    pub answer: Answer,
    /// The digest the person approved (what `cordon gateway approvals` showed).
    pub answered_digest: Option<String>,
}
