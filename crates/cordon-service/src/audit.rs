//! Append-only JSONL audit log: every lifecycle, exec and file event, with the key id —
//! never the key itself, never environment values, never file contents. Hash-chained like the
//! gateway's (`cordon audit verify`): each record carries the hash of the one before.
//!
//! [`ChainLog`] is the file side of both logs (serve's and the gateway's): the log, its HMAC
//! key (`LOG.key`, made at first open, 0600) and its head (`LOG.head`, replaced atomically
//! after every record), all three beside each other in a directory no sandbox is given. A
//! log found shorter than its head, or keyed without its key, is not continued: appending
//! would bury the evidence under fresh records. A record a full disk cuts short is taken
//! back (the log is shrunk to where it was), so that the next one starts on a line of its own.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use cordon_gateway::audit::{head_file, is_keyed, key_file, ChainHead, ChainKey, Head};

pub struct Audit {
    log: Mutex<ChainLog>,
    path: std::path::PathBuf,
}

/// What a key may read of the audit log: its own records (newest first) and whether the
/// whole chain holds (a fact about the log, naming no other key's records).
#[derive(Debug, serde::Serialize)]
pub struct AuditView {
    pub records: Vec<Value>,
    pub chain: ChainStatus,
}

/// The log's chain, checked against its key and head as `cordon audit verify` does.
#[derive(Debug, serde::Serialize)]
pub struct ChainStatus {
    pub intact: bool,
    /// Records in the log (all keys').
    pub records: u64,
    /// The first break, as `cordon audit verify` names it (its line, 1-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

/// A chained log file with its key and head files.
pub struct ChainLog {
    file: std::fs::File,
    head: ChainHead,
    key: ChainKey,
    head_path: std::path::PathBuf,
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Replaces `path` with `text`: a private temp file beside it, synced, renamed over it.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = crate::datadir::open_private(
        &tmp,
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true),
    )?;
    f.write_all(text.as_bytes())?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)
}

impl ChainLog {
    pub fn open(path: &Path) -> std::io::Result<ChainLog> {
        let last = last_line(path)?;
        let head = ChainHead::after(last.as_deref());
        let key_path = key_file(path);
        let key = match std::fs::read_to_string(&key_path) {
            Ok(text) => ChainKey::parse(&text)
                .map_err(|e| invalid(format!("{}: {e}", key_path.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if last.as_deref().is_some_and(is_keyed) {
                    return Err(invalid(format!(
                        "its records are sealed with a key and the key file {} is missing: restore it, or move the log aside to start a new one",
                        key_path.display()
                    )));
                }
                let mut bytes = [0u8; 32];
                getrandom::getrandom(&mut bytes)
                    .map_err(|e| std::io::Error::other(format!("no random key: {e}")))?;
                // A log begun before keys keeps its plain records; the key seals from here.
                let key = ChainKey::new(bytes, head.next_seq);
                replace_file(&key_path, &key.render())?;
                key
            }
            Err(e) => return Err(e),
        };
        let head_path = head_file(path);
        match std::fs::read_to_string(&head_path) {
            Ok(text) => {
                let saved = Head::parse(&text)
                    .map_err(|e| invalid(format!("{}: {e}", head_path.display())))?;
                if saved.next_seq > head.next_seq
                    || (saved.next_seq == head.next_seq && saved.last != head.prev)
                {
                    return Err(invalid(format!(
                        "it does not reach its head {} (record {} was written; the log ends at {}): records were cut off or rewritten. Keep it as evidence (`cordon audit verify` names the break) and move the log and its .head aside to start a new one",
                        head_path.display(),
                        saved.next_seq.saturating_sub(1),
                        head.next_seq.saturating_sub(1),
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // A log ahead of its head (a crash between the two writes) is the writer's own.
        replace_file(&head_path, &Head::of(&head).render())?;
        let file = crate::datadir::open_private(
            path,
            std::fs::OpenOptions::new().create(true).append(true),
        )?;
        Ok(ChainLog {
            file,
            head,
            key,
            head_path,
        })
    }

    /// Appends one record, then moves the head file on. The chain's head moves only when
    /// the line is written: a failed write leaves no gap.
    pub fn append(&mut self, fields: Map<String, Value>) -> std::io::Result<()> {
        let mut next = self.head.clone();
        let line = next.seal_with(fields, Some(&self.key));
        let before = self.file.metadata()?.len();
        if let Err(e) = self.file.write_all(format!("{line}\n").as_bytes()) {
            // A write cut short (the disk full) must not leave half a record: the next one
            // would follow it on the same line, and the chain would read as broken from there.
            // Shrinking a file needs no space.
            let _ = self.file.set_len(before);
            return Err(e);
        }
        self.head = next;
        replace_file(&self.head_path, &Head::of(&self.head).render())
    }
}

/// The last line of a log, to continue its chain (read from the end: logs grow large).
pub fn last_line(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    // A record is well under this; a longer tail is read again from further back.
    let mut back = 64 * 1024u64;
    loop {
        let start = len.saturating_sub(back);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        let trimmed = text.trim_end_matches('\n');
        match trimmed.rfind('\n') {
            Some(i) => return Ok(Some(trimmed[i + 1..].to_string())),
            None if start == 0 => return Ok((!trimmed.is_empty()).then(|| trimmed.to_string())),
            None => back *= 4,
        }
    }
}

impl Audit {
    pub fn open(path: &Path) -> std::io::Result<Audit> {
        Ok(Audit {
            log: Mutex::new(ChainLog::open(path)?),
            path: path.to_path_buf(),
        })
    }

    /// The records of `key_id` whose text holds `query` (all of them when empty), newest
    /// first, at most `limit`; and the whole chain checked. Read with appends held off, so a
    /// record half written is never taken for a break.
    pub fn view(&self, key_id: &str, query: &str, limit: usize) -> std::io::Result<AuditView> {
        use cordon_gateway::audit::{verify_with, Anchors, ChainError};
        let _held = self.log.lock();
        let text = std::fs::read_to_string(&self.path)?;
        let anchors = Anchors {
            key: std::fs::read_to_string(key_file(&self.path))
                .ok()
                .and_then(|t| ChainKey::parse(&t).ok()),
            head: std::fs::read_to_string(head_file(&self.path))
                .ok()
                .and_then(|t| Head::parse(&t).ok()),
            from: None,
        };
        let chain = match verify_with(std::io::Cursor::new(text.as_bytes()), &anchors) {
            Ok(v) => ChainStatus {
                intact: true,
                records: v.records,
                broken: None,
                line: None,
            },
            Err(e) => {
                let line = match &e {
                    ChainError::Altered { line, .. }
                    | ChainError::AlteredBefore { line, .. }
                    | ChainError::Removed { line, .. }
                    | ChainError::Malformed { line, .. } => Some(*line),
                    _ => None,
                };
                ChainStatus {
                    intact: false,
                    records: text.lines().filter(|l| !l.trim().is_empty()).count() as u64,
                    broken: Some(e.to_string()),
                    line,
                }
            }
        };
        let query = query.to_lowercase();
        let records = text
            .lines()
            .rev()
            .filter(|l| query.is_empty() || l.to_lowercase().contains(&query))
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["key_id"] == key_id)
            .take(limit)
            .collect();
        Ok(AuditView { records, chain })
    }

    /// Records one event. `fields` must not contain secrets; callers pass names, not values.
    pub fn record(&self, event: &str, key_id: &str, sandbox: Option<&str>, fields: Value) {
        let serde_json::Value::Object(fields) = json!({
            "time_ms": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            "event": event,
            "key_id": key_id,
            "sandbox": sandbox,
            "details": fields,
        }) else {
            return;
        };
        if let Ok(mut log) = self.log.lock() {
            if let Err(e) = log.append(fields) {
                eprintln!("cordon: audit log: {e}");
            }
        }
    }
}
