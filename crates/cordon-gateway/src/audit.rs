//! The hash-chained audit log: one JSON object per line, each carrying its sequence number,
//! the hash of the record before it (`prev`) and its own (`hash`, over the exact bytes of the
//! line without the hash). An edited record no longer hashes to its `hash`; a removed one
//! leaves a gap in `seq` and a `prev` that matches nothing; two swapped ones come out of
//! sequence. [`verify`] names the first record that was altered, removed or reordered.
//!
//! What a chain cannot show by itself: records cut off the end, or a last record rewritten
//! together with its hash. [`Verified`] gives the count and the last hash so that an operator
//! can anchor them elsewhere.

use std::io::{BufRead, Write};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const HASH_SUFFIX_LEN: usize = r#","hash":""#.len() + 64 + r#""}"#.len();

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where the chain stands: the next record's number and the hash it chains to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    pub next_seq: u64,
    pub prev: String,
}

impl Default for ChainHead {
    fn default() -> Self {
        ChainHead {
            next_seq: 0,
            prev: GENESIS.to_string(),
        }
    }
}

impl ChainHead {
    /// The head after the last line of an existing log, to continue its chain. A log whose
    /// last line is not a chained record (an older unchained log) starts a new chain after it:
    /// `verify` reports where.
    pub fn after(last_line: Option<&str>) -> ChainHead {
        let Some(line) = last_line else {
            return ChainHead::default();
        };
        match split_line(line) {
            Some((_, hash)) => {
                let seq = serde_json::from_str::<Value>(line)
                    .ok()
                    .and_then(|v| v.get("seq").and_then(Value::as_u64));
                match seq {
                    Some(s) => ChainHead {
                        next_seq: s + 1,
                        prev: hash.to_string(),
                    },
                    None => ChainHead::default(),
                }
            }
            None => ChainHead::default(),
        }
    }

    /// Seals one record: adds `seq` and `prev` to `fields`, serialises it and appends its
    /// hash. Returns the line (without the newline) and moves the head on.
    pub fn seal(&mut self, fields: Map<String, Value>) -> String {
        let mut rec = Map::new();
        rec.insert("seq".into(), Value::from(self.next_seq));
        rec.insert("prev".into(), Value::from(self.prev.clone()));
        for (k, v) in fields {
            if k != "seq" && k != "prev" && k != "hash" {
                rec.insert(k, v);
            }
        }
        let body = Value::Object(rec).to_string();
        let hash = sha256_hex(body.as_bytes());
        let line = format!(r#"{},"hash":"{hash}"}}"#, &body[..body.len() - 1]);
        self.next_seq += 1;
        self.prev = hash;
        line
    }
}

/// Splits a sealed line into the body it was hashed over and its stated hash.
fn split_line(line: &str) -> Option<(String, &str)> {
    if line.len() < HASH_SUFFIX_LEN + 2 || !line.is_char_boundary(line.len() - HASH_SUFFIX_LEN) {
        return None;
    }
    let (head, tail) = line.split_at(line.len() - HASH_SUFFIX_LEN);
    let hash = tail.strip_prefix(r#","hash":""#)?.strip_suffix(r#""}"#)?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((format!("{head}}}"), hash))
}

/// A chained log writer over any `Write` (the gateway's file; tests' buffers).
pub struct ChainWriter<W: Write> {
    out: W,
    head: ChainHead,
}

impl<W: Write> ChainWriter<W> {
    pub fn new(out: W, head: ChainHead) -> Self {
        ChainWriter { out, head }
    }

    /// Appends one record (one write of the whole line, so a crash leaves no half record
    /// before the next one).
    pub fn append(&mut self, fields: Map<String, Value>) -> std::io::Result<()> {
        let mut head = self.head.clone();
        let line = head.seal(fields);
        self.out.write_all(format!("{line}\n").as_bytes())?;
        self.out.flush()?;
        self.head = head;
        Ok(())
    }

    pub fn head(&self) -> &ChainHead {
        &self.head
    }
}

/// A log whose chain holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub records: u64,
    pub last_hash: String,
}

/// The first break in a chain. `line` is 1-based, as editors show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("line {line}: record {seq} was altered: its content no longer hashes to its hash")]
    Altered { line: usize, seq: u64 },
    #[error("line {line}: record {seq} was altered: record {next} chains to a different hash than the one it carries now")]
    AlteredBefore { line: usize, seq: u64, next: u64 },
    #[error("line {line}: record {missing} was removed: the record here is {found} and chains to a record that is not in the log")]
    Removed {
        line: usize,
        missing: u64,
        found: u64,
    },
    #[error("line {line}: records were reordered: record {found} stands where record {expected} belongs (record {expected} is on line {elsewhere})")]
    Reordered {
        line: usize,
        expected: u64,
        found: u64,
        elsewhere: usize,
    },
    #[error("line {line}: not a chained audit record ({why})")]
    Malformed { line: usize, why: String },
    #[error("reading the log: {0}")]
    Io(String),
}

struct Parsed {
    line: usize,
    seq: u64,
    prev: String,
    hash: String,
    intact: bool,
}

/// Checks a whole log and names the first record that was altered, removed or reordered.
pub fn verify(input: impl BufRead) -> Result<Verified, ChainError> {
    let mut recs = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| ChainError::Io(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |why: &str| ChainError::Malformed {
            line: line_no,
            why: why.to_string(),
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| malformed(&e.to_string()))?;
        let seq = v
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| malformed("no seq"))?;
        let prev = v
            .get("prev")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("no prev"))?
            .to_string();
        let (body, hash) = split_line(&line).ok_or_else(|| malformed("no hash at its end"))?;
        recs.push(Parsed {
            line: line_no,
            seq,
            prev,
            hash: hash.to_string(),
            intact: sha256_hex(body.as_bytes()) == hash,
        });
    }
    let first_seq = recs.first().map(|r| r.seq).unwrap_or(0);
    let mut prev_hash = match recs.first() {
        // A log that starts mid-chain (rotated) is checked from its first record on.
        Some(r) if r.seq != 0 => r.prev.clone(),
        _ => GENESIS.to_string(),
    };
    for (i, r) in recs.iter().enumerate() {
        let expected = first_seq + i as u64;
        if r.seq != expected {
            if let Some(other) = recs[i + 1..].iter().find(|o| o.seq == expected) {
                return Err(ChainError::Reordered {
                    line: r.line,
                    expected,
                    found: r.seq,
                    elsewhere: other.line,
                });
            }
            return Err(ChainError::Removed {
                line: r.line,
                missing: expected,
                found: r.seq,
            });
        }
        if !r.intact {
            return Err(ChainError::Altered {
                line: r.line,
                seq: r.seq,
            });
        }
        if r.prev != prev_hash {
            // The record before was rewritten with a fresh hash of its own.
            let before = &recs[i.saturating_sub(1)];
            return Err(ChainError::AlteredBefore {
                line: before.line,
                seq: before.seq,
                next: r.seq,
            });
        }
        prev_hash = r.hash.clone();
    }
    Ok(Verified {
        records: recs.len() as u64,
        last_hash: prev_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log(n: usize) -> Vec<String> {
        let mut w = ChainWriter::new(Vec::new(), ChainHead::default());
        for i in 0..n {
            let Value::Object(m) = json!({"event": "call", "tool": format!("mail.t{i}")}) else {
                unreachable!()
            };
            w.append(m).unwrap();
        }
        String::from_utf8(w.out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn check(lines: &[String]) -> Result<Verified, ChainError> {
        verify(std::io::Cursor::new(lines.join("\n")))
    }

    #[test]
    fn intact_log_verifies_and_continues_after_reopen() {
        let lines = log(5);
        let v = check(&lines).unwrap();
        assert_eq!(v.records, 5);
        let mut head = ChainHead::after(lines.last().map(String::as_str));
        assert_eq!(head.next_seq, 5);
        let mut more = lines.clone();
        more.push(head.seal(Map::new()));
        assert_eq!(check(&more).unwrap().records, 6);
    }

    #[test]
    fn edited_record_is_named() {
        let mut lines = log(5);
        lines[2] = lines[2].replace("mail.t2", "mail.t9");
        assert_eq!(check(&lines), Err(ChainError::Altered { line: 3, seq: 2 }));
    }

    #[test]
    fn edited_record_with_a_recomputed_hash_is_named() {
        let mut lines = log(5);
        let mut head = ChainHead::after(Some(&lines[1]));
        let Value::Object(m) = json!({"event": "call", "tool": "mail.forged"}) else {
            unreachable!()
        };
        lines[2] = head.seal(m);
        let err = check(&lines).unwrap_err();
        assert_eq!(
            err,
            ChainError::AlteredBefore {
                line: 3,
                seq: 2,
                next: 3
            }
        );
        assert!(err.to_string().contains("record 2 was altered"), "{err}");
    }

    #[test]
    fn removed_record_is_named() {
        let mut lines = log(5);
        lines.remove(3);
        let err = check(&lines).unwrap_err();
        assert_eq!(
            err,
            ChainError::Removed {
                line: 4,
                missing: 3,
                found: 4
            }
        );
        assert!(err.to_string().contains("record 3 was removed"), "{err}");
    }

    #[test]
    fn swapped_records_are_named() {
        let mut lines = log(5);
        lines.swap(1, 2);
        let err = check(&lines).unwrap_err();
        assert_eq!(
            err,
            ChainError::Reordered {
                line: 2,
                expected: 1,
                found: 2,
                elsewhere: 3
            }
        );
    }

    #[test]
    fn garbage_and_unchained_lines_are_named() {
        let mut lines = log(3);
        lines.insert(1, "{\"event\":\"x\"}".into());
        assert!(matches!(
            check(&lines),
            Err(ChainError::Malformed { line: 2, .. })
        ));
        assert!(matches!(
            check(&["not json".to_string()]),
            Err(ChainError::Malformed { line: 1, .. })
        ));
    }
}
