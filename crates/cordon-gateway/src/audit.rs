//! The hash-chained audit log: one JSON object per line, each carrying its sequence number,
//! the hash of the record before it (`prev`) and its own (`hash`, over the exact bytes of the
//! line without the hash — or `mac`, an HMAC-SHA256 of the same bytes under the log's key). An
//! edited record no longer hashes to its `hash`; a removed one leaves a gap in `seq` and a
//! `prev` that matches nothing; two swapped ones come out of sequence. [`verify_with`] names
//! the first record that was altered, removed or reordered.
//!
//! Threat: whoever can write the log file (not the sandboxes, which never see it; a
//! compromised account, a careless script) rewrites history. A plain hash chain alone cannot
//! show records deleted at the start (the rest re-numbered and re-hashed), a whole log
//! rewritten, or records cut off the end. Two anchors, each in a file beside the log that the
//! writer keeps private and the audited sandboxes cannot reach, close those:
//! - the key ([`ChainKey`], `LOG.key`): every record from the key's `from_seq` on carries a
//!   `mac` only its holder can make, and a keyed record fixes every record before it;
//! - the head ([`Head`], `LOG.head`): the number of the next record and the last one's hash,
//!   replaced atomically after each record, so a log cut short no longer matches it.
//!
//! A log whose first record is not record 0 is refused unless the anchor of the part before
//! it (rotated away) is given ([`Anchor`]).

use std::io::{BufRead, Write};

use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn hmac_hex(key: &[u8], bytes: &[u8]) -> String {
    // HMAC takes a key of any length: new_from_slice cannot fail for it.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(bytes);
            hex::encode(m.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// The key file beside a log: `LOG.key`.
pub fn key_file(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".key");
    PathBuf::from(p)
}

/// The head file beside a log: `LOG.head`.
pub fn head_file(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".head");
    PathBuf::from(p)
}

/// The log's HMAC key, and the first record it seals (a log begun before keys existed keeps
/// its plain-hashed records before it; the first keyed record fixes them through `prev`).
#[derive(Clone, PartialEq, Eq)]
pub struct ChainKey {
    key: Vec<u8>,
    pub from_seq: u64,
}

impl std::fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainKey")
            .field("from_seq", &self.from_seq)
            .finish_non_exhaustive()
    }
}

impl ChainKey {
    /// A key of 32 random bytes (the caller draws them: this crate makes no syscalls).
    pub fn new(key: [u8; 32], from_seq: u64) -> ChainKey {
        ChainKey {
            key: key.to_vec(),
            from_seq,
        }
    }

    /// The key file's text: `{"hmac_sha256": "<64 hex>", "from_seq": N}`.
    pub fn render(&self) -> String {
        format!(
            "{}\n",
            json!({"hmac_sha256": hex::encode(&self.key), "from_seq": self.from_seq})
        )
    }

    pub fn parse(text: &str) -> Result<ChainKey, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not a key file: {e}"))?;
        let key = v
            .get("hmac_sha256")
            .and_then(Value::as_str)
            .and_then(|h| hex::decode(h).ok())
            .filter(|k| k.len() >= 32)
            .ok_or("not a key file: hmac_sha256 must be at least 32 bytes in hex")?;
        let from_seq = v
            .get("from_seq")
            .and_then(Value::as_u64)
            .ok_or("not a key file: no from_seq")?;
        Ok(ChainKey { key, from_seq })
    }

    fn mac(&self, body: &str) -> String {
        hmac_hex(&self.key, body.as_bytes())
    }
}

/// Where the writer last left the log: the next record's number and the last one's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub next_seq: u64,
    pub last: String,
}

impl Head {
    pub fn of(h: &ChainHead) -> Head {
        Head {
            next_seq: h.next_seq,
            last: h.prev.clone(),
        }
    }

    /// The head file's text: `{"next_seq": N, "last": "<hash>"}`.
    pub fn render(&self) -> String {
        format!(
            "{}\n",
            json!({"next_seq": self.next_seq, "last": self.last})
        )
    }

    pub fn parse(text: &str) -> Result<Head, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not a head file: {e}"))?;
        Ok(Head {
            next_seq: v
                .get("next_seq")
                .and_then(Value::as_u64)
                .ok_or("not a head file: no next_seq")?,
            last: v
                .get("last")
                .and_then(Value::as_str)
                .ok_or("not a head file: no last")?
                .to_string(),
        })
    }
}

/// Where a log continues a chain whose earlier part was rotated away: the first record's
/// number and the hash it chains to (what `verify` printed for the part before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub seq: u64,
    pub prev: String,
}

impl Anchor {
    /// `SEQ:HASH`.
    pub fn parse(text: &str) -> Result<Anchor, String> {
        let (seq, prev) = text
            .split_once(':')
            .ok_or_else(|| format!("'{text}' is not SEQ:HASH"))?;
        let seq = seq
            .parse()
            .map_err(|_| format!("'{seq}' is not a record number"))?;
        if prev.len() != 64 || !prev.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("'{prev}' is not a 64-digit hex hash"));
        }
        Ok(Anchor {
            seq,
            prev: prev.to_ascii_lowercase(),
        })
    }
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
            Some((_, _, hash)) => {
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

    /// Seals one record with a plain hash: adds `seq` and `prev` to `fields`, serialises it
    /// and appends its hash. Returns the line (without the newline) and moves the head on.
    pub fn seal(&mut self, fields: Map<String, Value>) -> String {
        self.seal_with(fields, None)
    }

    /// Seals one record: with a key (from its `from_seq` on), a `mac` instead of a `hash`.
    pub fn seal_with(&mut self, fields: Map<String, Value>, key: Option<&ChainKey>) -> String {
        let mut rec = Map::new();
        rec.insert("seq".into(), Value::from(self.next_seq));
        rec.insert("prev".into(), Value::from(self.prev.clone()));
        for (k, v) in fields {
            if k != "seq" && k != "prev" && k != "hash" && k != "mac" {
                rec.insert(k, v);
            }
        }
        let body = Value::Object(rec).to_string();
        let (field, hash) = match key.filter(|k| self.next_seq >= k.from_seq) {
            Some(k) => ("mac", k.mac(&body)),
            None => ("hash", sha256_hex(body.as_bytes())),
        };
        let line = format!(r#"{},"{field}":"{hash}"}}"#, &body[..body.len() - 1]);
        self.next_seq += 1;
        self.prev = hash;
        line
    }
}

/// How a record is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    Hash,
    Mac,
}

/// Splits a sealed line into the body it was sealed over, how, and its stated hash or mac.
fn split_line(line: &str) -> Option<(String, Seal, &str)> {
    for (field, seal) in [("hash", Seal::Hash), ("mac", Seal::Mac)] {
        let prefix = format!(r#","{field}":""#);
        let suffix_len = prefix.len() + 64 + 2;
        if line.len() < suffix_len + 2 || !line.is_char_boundary(line.len() - suffix_len) {
            continue;
        }
        let (head, tail) = line.split_at(line.len() - suffix_len);
        let Some(hash) = tail
            .strip_prefix(prefix.as_str())
            .and_then(|t| t.strip_suffix(r#""}"#))
        else {
            continue;
        };
        if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some((format!("{head}}}"), seal, hash));
        }
    }
    None
}

/// Whether a log's line is sealed with a mac (the log needs its key to go on).
pub fn is_keyed(line: &str) -> bool {
    matches!(split_line(line), Some((_, Seal::Mac, _)))
}

/// A chained log writer over any `Write` (tests' buffers; the servers' files add the key and
/// head files around it).
pub struct ChainWriter<W: Write> {
    out: W,
    head: ChainHead,
    key: Option<ChainKey>,
}

impl<W: Write> ChainWriter<W> {
    pub fn new(out: W, head: ChainHead) -> Self {
        ChainWriter {
            out,
            head,
            key: None,
        }
    }

    pub fn keyed(out: W, head: ChainHead, key: ChainKey) -> Self {
        ChainWriter {
            out,
            head,
            key: Some(key),
        }
    }

    /// Appends one record (one write of the whole line, so a crash leaves no half record
    /// before the next one).
    pub fn append(&mut self, fields: Map<String, Value>) -> std::io::Result<()> {
        let mut head = self.head.clone();
        let line = head.seal_with(fields, self.key.as_ref());
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
    /// The first record's number (0 unless an anchor was given).
    pub first_seq: u64,
    /// The next record's number and the last hash: the anchor of a part that follows.
    pub next_seq: u64,
    pub last_hash: String,
    /// Records sealed with a mac (checked against the key).
    pub keyed: u64,
    /// Records after the head (written after the head was last replaced: a crash between
    /// the two writes).
    pub past_head: u64,
}

/// What a log is checked against besides itself.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    pub key: Option<ChainKey>,
    pub head: Option<Head>,
    /// Where a log that does not start at record 0 continues a rotated chain.
    pub from: Option<Anchor>,
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
    #[error("line {line}: the log starts at record {first}, not 0: records 0 to {} were removed (if they were rotated into another file, give that part's anchor: --from-anchor {first}:HASH)", .first - 1)]
    StartsLate { line: usize, first: u64 },
    #[error("line {line}: record {seq} does not continue the anchor {}:{} (it is record {seq} chaining to {prev}): records were removed or the log is another chain's", .anchor.seq, .anchor.prev)]
    NotAnchored {
        line: usize,
        seq: u64,
        prev: String,
        anchor: Anchor,
    },
    #[error("line {line}: record {seq} was not sealed with the log's key: its mac does not verify (the record was altered, or the log re-numbered and re-hashed without the key)")]
    Forged { line: usize, seq: u64 },
    #[error("line {line}: record {seq} has a plain hash where the key seals every record from {from} on: the log was rewritten without the key")]
    Unsealed { line: usize, seq: u64, from: u64 },
    #[error("line {line}: record {seq} is sealed with a key (mac) and no key was given: it cannot be checked (--key FILE)")]
    NoKey { line: usize, seq: u64 },
    #[error("records were cut off the end: the log ends before record {expected}, which {what} says was written (its last record is {})", last_record(.next))]
    Truncated {
        next: u64,
        expected: u64,
        what: &'static str,
    },
    #[error("line {line}: record {seq} is not the record the head file names (its hash differs): the end of the log was rewritten")]
    HeadMismatch { line: usize, seq: u64 },
    #[error("reading the log: {0}")]
    Io(String),
}

fn last_record(next: &u64) -> String {
    match next {
        0 => "none".to_string(),
        n => (n - 1).to_string(),
    }
}

struct Parsed {
    line: usize,
    seq: u64,
    prev: String,
    hash: String,
    seal: Seal,
    body: String,
}

/// Checks a whole log by its own chain only (no key, no head): see [`verify_with`].
pub fn verify(input: impl BufRead) -> Result<Verified, ChainError> {
    verify_with(input, &Anchors::default())
}

/// Checks a whole log and names the first record that was altered, removed or reordered;
/// with a key, that every record from the key's `from_seq` on was sealed by its holder; with
/// a head, that the log reaches it unchanged.
pub fn verify_with(input: impl BufRead, anchors: &Anchors) -> Result<Verified, ChainError> {
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
        let (body, seal, hash) =
            split_line(&line).ok_or_else(|| malformed("no hash or mac at its end"))?;
        recs.push(Parsed {
            line: line_no,
            seq,
            prev,
            hash: hash.to_string(),
            seal,
            body,
        });
    }
    let (first_seq, mut prev_hash) = match (&anchors.from, recs.first()) {
        (Some(a), Some(r)) if r.seq != a.seq || r.prev != a.prev => {
            return Err(ChainError::NotAnchored {
                line: r.line,
                seq: r.seq,
                prev: r.prev.clone(),
                anchor: a.clone(),
            })
        }
        (Some(a), _) => (a.seq, a.prev.clone()),
        // Without an anchor a log starts at record 0: one that starts later lost its start,
        // whatever its first `prev` claims.
        (None, Some(r)) if r.seq != 0 => {
            return Err(ChainError::StartsLate {
                line: r.line,
                first: r.seq,
            })
        }
        (None, _) => (0, GENESIS.to_string()),
    };
    let mut keyed = 0;
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
        let key = anchors.key.as_ref();
        match (r.seal, key) {
            (Seal::Hash, Some(k)) if r.seq >= k.from_seq => {
                return Err(ChainError::Unsealed {
                    line: r.line,
                    seq: r.seq,
                    from: k.from_seq,
                })
            }
            (Seal::Hash, _) => {
                if sha256_hex(r.body.as_bytes()) != r.hash {
                    return Err(ChainError::Altered {
                        line: r.line,
                        seq: r.seq,
                    });
                }
            }
            (Seal::Mac, None) => {
                return Err(ChainError::NoKey {
                    line: r.line,
                    seq: r.seq,
                })
            }
            (Seal::Mac, Some(k)) => {
                if k.mac(&r.body) != r.hash {
                    return Err(ChainError::Forged {
                        line: r.line,
                        seq: r.seq,
                    });
                }
                keyed += 1;
            }
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
    let next_seq = first_seq + recs.len() as u64;
    if let Some(k) = &anchors.key {
        // The key was made when the log had reached `from_seq`: a log that ends before it
        // lost its keyed records (and with them what fixed the plain ones).
        if next_seq < k.from_seq {
            return Err(ChainError::Truncated {
                next: next_seq,
                expected: k.from_seq - 1,
                what: "the key file",
            });
        }
    }
    let mut past_head = 0;
    if let Some(h) = &anchors.head {
        if next_seq < h.next_seq {
            return Err(ChainError::Truncated {
                next: next_seq,
                expected: h.next_seq - 1,
                what: "the head file",
            });
        }
        if h.next_seq > first_seq {
            let idx = (h.next_seq - 1 - first_seq) as usize;
            if let Some(r) = recs.get(idx) {
                if r.hash != h.last {
                    return Err(ChainError::HeadMismatch {
                        line: r.line,
                        seq: r.seq,
                    });
                }
            }
        }
        past_head = next_seq - h.next_seq.max(first_seq);
    }
    Ok(Verified {
        records: recs.len() as u64,
        first_seq,
        next_seq,
        last_hash: prev_hash,
        keyed,
        past_head,
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

    fn keyed_log(n: usize, key: &ChainKey) -> Vec<String> {
        let mut w = ChainWriter::keyed(Vec::new(), ChainHead::default(), key.clone());
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

    fn check_with(lines: &[String], a: &Anchors) -> Result<Verified, ChainError> {
        verify_with(std::io::Cursor::new(lines.join("\n")), a)
    }

    /// Re-seals lines from record 0 with plain hashes, as someone without the key would.
    fn renumbered(lines: &[String]) -> Vec<String> {
        let mut head = ChainHead::default();
        lines
            .iter()
            .map(|l| {
                let Value::Object(m) = serde_json::from_str::<Value>(l).unwrap() else {
                    unreachable!()
                };
                head.seal(m)
            })
            .collect()
    }

    #[test]
    fn a_log_missing_its_first_records_is_refused_without_the_anchor_of_what_came_before() {
        let lines = log(6);
        let err = check(&lines[2..]).unwrap_err();
        assert_eq!(err, ChainError::StartsLate { line: 1, first: 2 });
        let before = check(&lines[..2]).unwrap();
        let from = Anchor::parse(&format!("{}:{}", before.next_seq, before.last_hash)).unwrap();
        let a = Anchors {
            from: Some(from.clone()),
            ..Default::default()
        };
        assert_eq!(check_with(&lines[2..], &a).unwrap().records, 4);
        assert!(matches!(
            check_with(&lines[3..], &a),
            Err(ChainError::NotAnchored { seq: 3, .. })
        ));
    }

    #[test]
    fn a_keyed_log_rewritten_without_the_key_is_named() {
        let key = ChainKey::new([7; 32], 0);
        let lines = keyed_log(6, &key);
        let a = Anchors {
            key: Some(key.clone()),
            ..Default::default()
        };
        assert_eq!(check_with(&lines, &a).unwrap().keyed, 6);
        // The first two removed, the rest re-numbered and re-hashed: a chain that holds by
        // itself, and that the key does not recognise.
        let forged = renumbered(&lines[2..]);
        assert_eq!(check(&forged).unwrap().records, 4);
        assert!(matches!(
            check_with(&forged, &a),
            Err(ChainError::Unsealed { seq: 0, .. })
        ));
        let other = keyed_log(4, &ChainKey::new([8; 32], 0));
        assert!(matches!(
            check_with(&other, &a),
            Err(ChainError::Forged { seq: 0, .. })
        ));
        assert!(matches!(
            check(&lines),
            Err(ChainError::NoKey { line: 1, seq: 0 })
        ));
        assert_eq!(ChainKey::parse(&key.render()).unwrap(), key);
        assert!(
            !format!("{key:?}").contains("0707"),
            "the key is never printed"
        );
    }

    #[test]
    fn a_key_made_for_an_older_log_fixes_the_plain_records_before_it() {
        let mut lines = log(3);
        let key = ChainKey::new([9; 32], 3);
        let mut head = ChainHead::after(lines.last().map(String::as_str));
        lines.push(head.seal_with(Map::new(), Some(&key)));
        let a = Anchors {
            key: Some(key.clone()),
            ..Default::default()
        };
        let v = check_with(&lines, &a).unwrap();
        assert_eq!((v.records, v.keyed), (4, 1));
        // Cut back to before the key was made: the key knows the log had reached record 2.
        assert!(matches!(
            check_with(&lines[..2], &a),
            Err(ChainError::Truncated { next: 2, .. })
        ));
    }

    #[test]
    fn records_cut_off_the_end_are_named_with_the_head() {
        let lines = log(6);
        let mut head = ChainHead::default();
        for l in &lines {
            head = ChainHead::after(Some(l));
        }
        let a = Anchors {
            head: Some(Head::parse(&Head::of(&head).render()).unwrap()),
            ..Default::default()
        };
        assert_eq!(check_with(&lines, &a).unwrap().past_head, 0);
        let err = check_with(&lines[..4], &a).unwrap_err();
        assert!(matches!(
            err,
            ChainError::Truncated {
                next: 4,
                expected: 5,
                ..
            }
        ));
        assert!(err.to_string().contains("cut off the end"), "{err}");
        // The last record rewritten with a fresh hash: the head no longer names it.
        let mut rewritten = lines.clone();
        let mut h = ChainHead::after(Some(&lines[4]));
        rewritten[5] = h.seal(Map::new());
        assert!(matches!(
            check_with(&rewritten, &a),
            Err(ChainError::HeadMismatch { seq: 5, .. })
        ));
    }
}
