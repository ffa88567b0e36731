//! Append-only JSONL audit log: every lifecycle, exec and file event, with the key id —
//! never the key itself, never environment values, never file contents. Hash-chained like the
//! gateway's (`cordon audit verify`): each record carries the hash of the one before.
//!
//! [`ChainLog`] is the file side of both logs (serve's and the gateway's): the log, its HMAC
//! key (`LOG.key`, made at first open, 0600) and its head (`LOG.head`, replaced atomically),
//! all three beside each other in a directory no sandbox is given. A log found shorter than
//! its head, or keyed without its key, is not continued: appending would bury the evidence
//! under fresh records. A record a full disk cuts short is taken back (the log is shrunk to
//! where it was), so that the next one starts on a line of its own.
//!
//! Durability: a record is written to the log before the request it records is answered (the
//! page cache keeps it if the process is killed); the log is synced to disk, and the head moved
//! on to the last synced record, by a background thread within [`SYNC_INTERVAL`] of a record
//! and when the log is closed. The sync is off the request path because it costs milliseconds
//! per record on a real disk (issue 31's gateway overhead target is 1 ms). A power loss can
//! take the records of the last interval; the head never names a record the disk may lack (it
//! trails the synced log), so a restart after a power loss is never mistaken for a cut log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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

/// The longest a record waits to be synced to disk (and named by the head file).
pub const SYNC_INTERVAL: Duration = Duration::from_millis(50);

/// A chained log file with its key and head files, and the thread that syncs them.
pub struct ChainLog {
    shared: Arc<Shared>,
    syncer: Option<std::thread::JoinHandle<()>>,
}

/// What the writers and the syncing thread share.
struct Shared {
    writer: Mutex<Writer>,
    /// Wakes the syncing thread: a record waits, or the log is closing.
    wake: Condvar,
    /// The log's file once more, so that syncing it holds no writer up.
    log: std::fs::File,
    head_path: PathBuf,
    /// One sync at a time: each replaces the head's temp file.
    syncing: Mutex<()>,
}

struct Writer {
    file: std::fs::File,
    head: ChainHead,
    key: ChainKey,
    /// `next_seq` of the head last synced: records from here on wait for the syncing thread.
    synced: u64,
    closing: bool,
}

impl Writer {
    fn unsynced(&self) -> bool {
        self.head.next_seq != self.synced
    }
}

fn poisoned() -> std::io::Error {
    std::io::Error::other("the audit log's lock was poisoned by a panic")
}

/// Syncs the log, then moves the head file on to the last record the sync covered.
fn sync(shared: &Shared) -> std::io::Result<()> {
    let _one = shared.syncing.lock().map_err(|_| poisoned())?;
    let head = {
        let w = shared.writer.lock().map_err(|_| poisoned())?;
        if !w.unsynced() {
            return Ok(());
        }
        w.head.clone()
    };
    // Every record up to `head` is in the file: it was written before the head moved.
    shared.log.sync_data()?;
    replace_file(&shared.head_path, &Head::of(&head).render())?;
    if let Ok(mut w) = shared.writer.lock() {
        w.synced = head.next_seq;
    }
    Ok(())
}

/// The syncing thread: waits for a record, lets [`SYNC_INTERVAL`] gather more, syncs them
/// all at once; on close, syncs what is left and ends.
fn syncer(shared: Arc<Shared>) {
    let mut failing = false;
    loop {
        let closing = {
            let Ok(mut w) = shared.writer.lock() else {
                return;
            };
            while !w.closing && !w.unsynced() {
                w = match shared.wake.wait(w) {
                    Ok(w) => w,
                    Err(_) => return,
                };
            }
            if !w.closing {
                // Records arriving meanwhile share this sync; a close cuts the wait short.
                w = match shared.wake.wait_timeout(w, SYNC_INTERVAL) {
                    Ok((w, _)) => w,
                    Err(_) => return,
                };
            }
            w.closing
        };
        match sync(&shared) {
            Ok(()) => failing = false,
            Err(e) => {
                // Said once per failing spell (a full disk retries every interval).
                if !failing {
                    eprintln!("cordon: audit log: syncing to disk: {e}");
                }
                failing = true;
                if !closing {
                    std::thread::sleep(SYNC_INTERVAL);
                }
            }
        }
        if closing {
            return;
        }
    }
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
        let shared = Arc::new(Shared {
            log: file.try_clone()?,
            writer: Mutex::new(Writer {
                file,
                synced: head.next_seq,
                head,
                key,
                closing: false,
            }),
            wake: Condvar::new(),
            head_path,
            syncing: Mutex::new(()),
        });
        let syncer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("audit-sync".into())
                .spawn(move || syncer(shared))?
        };
        Ok(ChainLog {
            shared,
            syncer: Some(syncer),
        })
    }

    /// Appends one record; the syncing thread takes it to disk and moves the head file on.
    /// The chain's head moves only when the line is written: a failed write leaves no gap.
    pub fn append(&self, fields: Map<String, Value>) -> std::io::Result<()> {
        let mut w = self.shared.writer.lock().map_err(|_| poisoned())?;
        let mut next = w.head.clone();
        let line = next.seal_with(fields, Some(&w.key));
        let before = w.file.metadata()?.len();
        if let Err(e) = w.file.write_all(format!("{line}\n").as_bytes()) {
            // A write cut short (the disk full) must not leave half a record: the next one
            // would follow it on the same line, and the chain would read as broken from there.
            // Shrinking a file needs no space.
            let _ = w.file.set_len(before);
            return Err(e);
        }
        let was_synced = !w.unsynced();
        w.head = next;
        if was_synced {
            self.shared.wake.notify_one();
        }
        Ok(())
    }

    /// Syncs every record written so far and moves the head file on to the last, now.
    pub fn sync(&self) -> std::io::Result<()> {
        sync(&self.shared)
    }
}

impl Drop for ChainLog {
    /// Closing the log syncs what is left.
    fn drop(&mut self) {
        if let Ok(mut w) = self.shared.writer.lock() {
            w.closing = true;
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
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

    /// Syncs every record written so far (a server shutting down: the syncing thread would
    /// take up to [`SYNC_INTERVAL`]).
    pub fn sync(&self) -> std::io::Result<()> {
        self.log.lock().map_err(|_| poisoned())?.sync()
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
        if let Ok(log) = self.log.lock() {
            if let Err(e) = log.append(fields) {
                eprintln!("cordon: audit log: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "cordon-audit-{tag}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        let _ = std::fs::create_dir_all(&dir);
        dir.join("audit.jsonl")
    }

    fn record(i: usize) -> Map<String, Value> {
        let Value::Object(m) = json!({"event": "exec", "n": i}) else {
            return Map::new();
        };
        m
    }

    fn saved_head(log: &Path) -> Head {
        let text = std::fs::read_to_string(head_file(log)).unwrap_or_default();
        Head::parse(&text).unwrap_or_else(|e| panic!("head file: {e}"))
    }

    fn verifies(log: &Path) -> Result<u64, String> {
        use cordon_gateway::audit::{verify_with, Anchors};
        let text = std::fs::read_to_string(log).map_err(|e| e.to_string())?;
        let anchors = Anchors {
            key: std::fs::read_to_string(key_file(log))
                .ok()
                .and_then(|t| ChainKey::parse(&t).ok()),
            head: Some(saved_head(log)),
            from: None,
        };
        verify_with(std::io::Cursor::new(text.as_bytes()), &anchors)
            .map(|v| v.records)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_record_is_in_the_log_as_soon_as_append_returns() {
        let path = scratch("written");
        let log = ChainLog::open(&path).expect("open");
        for i in 0..3 {
            log.append(record(i)).expect("append");
            let lines = std::fs::read_to_string(&path)
                .expect("read")
                .lines()
                .count();
            assert_eq!(lines, i + 1);
        }
        drop(log);
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn sync_moves_the_head_to_the_last_record_and_the_log_verifies_against_it() {
        let path = scratch("sync");
        let log = ChainLog::open(&path).expect("open");
        for i in 0..5 {
            log.append(record(i)).expect("append");
        }
        log.sync().expect("sync");
        assert_eq!(saved_head(&path).next_seq, 5);
        assert_eq!(verifies(&path), Ok(5));
        drop(log);
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn closing_the_log_syncs_what_the_thread_had_not_yet() {
        let path = scratch("close");
        {
            let log = ChainLog::open(&path).expect("open");
            for i in 0..20 {
                log.append(record(i)).expect("append");
            }
        }
        assert_eq!(saved_head(&path).next_seq, 20);
        // Reopened, the chain continues and a cut at its end is still caught.
        let log = ChainLog::open(&path).expect("reopen");
        log.append(record(20)).expect("append");
        drop(log);
        assert_eq!(verifies(&path), Ok(21));
        let text = std::fs::read_to_string(&path).expect("read");
        let cut: Vec<&str> = text.lines().take(19).collect();
        std::fs::write(&path, cut.join("\n") + "\n").expect("cut");
        assert!(
            ChainLog::open(&path).is_err(),
            "a log cut at its end was continued"
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn the_thread_syncs_a_record_within_its_interval_without_being_asked() {
        let path = scratch("thread");
        let log = ChainLog::open(&path).expect("open");
        log.append(record(0)).expect("append");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while saved_head(&path).next_seq != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the head never moved on"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(log);
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn the_head_never_names_a_record_the_log_lacks_while_records_arrive() {
        let path = scratch("trail");
        let log = ChainLog::open(&path).expect("open");
        for i in 0..200 {
            log.append(record(i)).expect("append");
            let lines = std::fs::read_to_string(&path)
                .expect("read")
                .lines()
                .count() as u64;
            assert!(saved_head(&path).next_seq <= lines);
        }
        drop(log);
        assert_eq!(verifies(&path), Ok(200));
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }
}
