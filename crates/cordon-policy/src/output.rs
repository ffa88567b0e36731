//! The one output capper: every door (one-shot supervisor, persistent commands, code cells)
//! keeps the first N bytes of a stream the same way and reports the rest as cut, so the same
//! program prints the same `stdout`/`stdout_truncated`/`stdout_b64` whichever door it came
//! through.

use base64::Engine;

/// The first `limit` bytes of one stream, and whether anything past them was dropped.
#[derive(Debug, Clone, Default)]
pub struct OutputCap {
    kept: Vec<u8>,
    limit: usize,
    truncated: bool,
    /// Every byte the stream carried, kept or not.
    total: u64,
}

/// One stream as an `Outcome` carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedText {
    /// The kept bytes, invalid UTF-8 replaced by U+FFFD.
    pub text: String,
    /// The kept bytes exactly (standard base64), present only when `text` replaced any.
    pub b64: Option<String>,
    /// Bytes past the cap were dropped.
    pub truncated: bool,
}

impl OutputCap {
    pub fn new(limit: u64) -> OutputCap {
        OutputCap {
            kept: Vec::new(),
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            truncated: false,
            total: 0,
        }
    }

    /// Keeps what still fits and returns that part (what a live echo should pass on: an echo
    /// never shows more than the Outcome keeps).
    pub fn push<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        self.total = self.total.saturating_add(data.len() as u64);
        let room = self.limit.saturating_sub(self.kept.len());
        let take = room.min(data.len());
        if take < data.len() {
            self.truncated = true;
        }
        let part = &data[..take];
        self.kept.extend_from_slice(part);
        part
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Bytes the stream carried in all, including those dropped.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// The kept bytes as the Outcome carries them, without giving them up (a background
    /// command's output is read while it still runs).
    pub fn text(&self) -> CapturedText {
        captured(&self.kept, self.truncated)
    }

    pub fn finish(self) -> CapturedText {
        let exact = std::str::from_utf8(&self.kept).is_err();
        let b64 = exact.then(|| base64::engine::general_purpose::STANDARD.encode(&self.kept));
        let text = match String::from_utf8(self.kept) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        CapturedText {
            text,
            b64,
            truncated: self.truncated,
        }
    }
}

fn captured(bytes: &[u8], truncated: bool) -> CapturedText {
    let b64 = std::str::from_utf8(bytes)
        .is_err()
        .then(|| base64::engine::general_purpose::STANDARD.encode(bytes));
    CapturedText {
        text: String::from_utf8_lossy(bytes).into_owned(),
        b64,
        truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_flags() {
        let mut c = OutputCap::new(5);
        assert_eq!(c.push(b"abc"), b"abc");
        assert!(!c.truncated());
        assert_eq!(c.push(b"defgh"), b"de");
        assert!(c.truncated());
        assert_eq!(c.push(b"ij"), b"");
        assert_eq!(c.total(), 10);
        let t = c.finish();
        assert_eq!(t.text, "abcde");
        assert!(t.b64.is_none());
        assert!(t.truncated);
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let mut c = OutputCap::new(3);
        c.push(b"abc");
        c.push(b"");
        assert!(!c.truncated());
        assert!(!c.finish().truncated);
    }

    #[test]
    fn zero_cap_keeps_nothing_and_says_so() {
        let mut c = OutputCap::new(0);
        assert_eq!(c.push(b"x"), b"");
        assert_eq!(c.text().text, "");
        assert!(c.text().truncated);
    }

    #[test]
    fn invalid_utf8_is_kept_exactly() {
        let mut c = OutputCap::new(100);
        c.push(&[0x66, 0xff, 0x6f]);
        let live = c.text();
        let t = c.finish();
        assert_eq!(live, t);
        assert_eq!(t.text, "f\u{fffd}o");
        assert_eq!(t.b64.as_deref(), Some("Zv9v"));
    }

    #[test]
    fn a_cut_inside_a_character_is_carried_exactly() {
        // "é" is two bytes; a cap of one splits it.
        let mut c = OutputCap::new(1);
        c.push("é".as_bytes());
        let t = c.finish();
        assert_eq!(t.text, "\u{fffd}");
        assert_eq!(t.b64.as_deref(), Some("ww=="));
        assert!(t.truncated);
    }
}
