//! Capped capture of one output stream: keep the first N bytes, drain and count the rest.

use std::io::Write;

/// Whether whoever reads the echoed stream is still there.
#[derive(Debug, PartialEq, Eq)]
pub enum Echo {
    Open,
    Gone,
}

pub struct Capture {
    kept: Vec<u8>,
    limit: usize,
    truncated: bool,
    /// Copy what is kept to this writer as it arrives (streaming mode).
    echo: Option<Box<dyn Write>>,
}

impl Capture {
    pub fn new(limit: u64, echo: Option<Box<dyn Write>>) -> Capture {
        Capture {
            kept: Vec::new(),
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            truncated: false,
            echo,
        }
    }

    /// Keeps (and echoes) what fits. Returns `Gone` when the echo's reader has gone away (a
    /// broken pipe): the caller then closes the stream, so that the writer inside meets a
    /// broken pipe of its own — `cordon run -- yes | head -1` ends as `yes | head -1` does.
    pub fn push(&mut self, data: &[u8]) -> Echo {
        let room = self.limit.saturating_sub(self.kept.len());
        let take = room.min(data.len());
        if take < data.len() {
            self.truncated = true;
        }
        let part = &data[..take];
        let mut echo_state = Echo::Open;
        if let Some(echo) = self.echo.as_mut() {
            if let Err(e) = echo.write_all(part).and_then(|_| echo.flush()) {
                // Anything else (a hung-up terminal) must not stop the run: drop the echo.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    echo_state = Echo::Gone;
                }
                self.echo = None;
            }
        }
        if self.echo.is_none() || take > 0 {
            self.kept.extend_from_slice(part);
        }
        echo_state
    }

    #[cfg(test)]
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes as lossy UTF-8, plus base64 of the exact bytes when anything was replaced.
    pub fn finish(self) -> (String, Option<String>, bool) {
        use base64::Engine;
        let exact = match std::str::from_utf8(&self.kept) {
            Ok(_) => None,
            Err(_) => Some(base64::engine::general_purpose::STANDARD.encode(&self.kept)),
        };
        let text = String::from_utf8_lossy(&self.kept).into_owned();
        (text, exact, self.truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_flags() {
        let mut c = Capture::new(5, None);
        assert_eq!(c.push(b"abc"), Echo::Open);
        c.push(b"defgh");
        assert!(c.truncated());
        let (text, b64, t) = c.finish();
        assert_eq!(text, "abcde");
        assert!(b64.is_none());
        assert!(t);
    }

    #[test]
    fn invalid_utf8_is_kept_exactly() {
        let mut c = Capture::new(100, None);
        c.push(&[0x66, 0xff, 0x6f]);
        let (text, b64, _) = c.finish();
        assert_eq!(text, "f\u{fffd}o");
        assert_eq!(b64.as_deref(), Some("Zv9v"));
    }
}
