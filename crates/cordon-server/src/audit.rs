//! Append-only JSONL audit log: every lifecycle, exec and file event, with the key id —
//! never the key itself, never environment values, never file contents.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{json, Value};

pub struct Audit {
    file: Mutex<std::fs::File>,
}

impl Audit {
    pub fn open(path: &Path) -> std::io::Result<Audit> {
        let file = crate::datadir::open_private(
            path,
            std::fs::OpenOptions::new().create(true).append(true),
        )?;
        Ok(Audit {
            file: Mutex::new(file),
        })
    }

    /// Records one event. `fields` must not contain secrets; callers pass names, not values.
    pub fn record(&self, event: &str, key_id: &str, sandbox: Option<&str>, fields: Value) {
        let line = json!({
            "time_ms": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            "event": event,
            "key_id": key_id,
            "sandbox": sandbox,
            "details": fields,
        });
        if let Ok(mut f) = self.file.lock() {
            let _ = writeln!(f, "{line}");
        }
    }
}
