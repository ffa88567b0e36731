//! Append-only JSONL audit log: every lifecycle, exec and file event, with the key id —
//! never the key itself, never environment values, never file contents. Hash-chained like the
//! gateway's (`cordon audit verify`): each record carries the hash of the one before.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Value};

use cordon_gateway::audit::ChainHead;

pub struct Audit {
    file: Mutex<(std::fs::File, ChainHead)>,
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
        let head = ChainHead::after(last_line(path)?.as_deref());
        let file = crate::datadir::open_private(
            path,
            std::fs::OpenOptions::new().create(true).append(true),
        )?;
        Ok(Audit {
            file: Mutex::new((file, head)),
        })
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
        if let Ok(mut g) = self.file.lock() {
            let (f, head) = &mut *g;
            let mut next = head.clone();
            let line = next.seal(fields);
            // The head moves on only when the line is written: a failed write leaves no gap.
            if writeln!(f, "{line}").is_ok() {
                *head = next;
            }
        }
    }
}
