//! Capped capture of one output stream with an optional live echo: the cap itself is
//! `cordon_policy::OutputCap`, shared with every other door.

use std::io::Write;

use cordon_policy::{CapturedText, OutputCap};

/// Whether whoever reads the echoed stream is still there.
#[derive(Debug, PartialEq, Eq)]
pub enum Echo {
    Open,
    Gone,
}

pub struct Capture {
    cap: OutputCap,
    /// Copy what is kept to this writer as it arrives (streaming mode).
    echo: Option<Box<dyn Write>>,
}

impl Capture {
    pub fn new(limit: u64, echo: Option<Box<dyn Write>>) -> Capture {
        Capture {
            cap: OutputCap::new(limit),
            echo,
        }
    }

    /// Keeps (and echoes) what fits. Returns `Gone` when the echo's reader has gone away (a
    /// broken pipe): the caller then closes the stream, so that the writer inside meets a
    /// broken pipe of its own — `cordon run -- yes | head -1` ends as `yes | head -1` does.
    pub fn push(&mut self, data: &[u8]) -> Echo {
        let part = self.cap.push(data);
        let mut echo_state = Echo::Open;
        if let Some(echo) = self.echo.as_mut() {
            if part.is_empty() {
                return echo_state;
            }
            if let Err(e) = echo.write_all(part).and_then(|_| echo.flush()) {
                // Anything else (a hung-up terminal) must not stop the run: drop the echo.
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    echo_state = Echo::Gone;
                }
                self.echo = None;
            }
        }
        echo_state
    }

    pub fn truncated(&self) -> bool {
        self.cap.truncated()
    }

    /// The kept bytes as the Outcome carries them.
    pub fn finish(self) -> CapturedText {
        self.cap.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_echo_shows_what_is_kept_and_no_more() {
        let seen = Shared::default();
        let mut c = Capture::new(5, Some(Box::new(seen.clone())));
        assert_eq!(c.push(b"abc"), Echo::Open);
        assert_eq!(c.push(b"defgh"), Echo::Open);
        assert!(c.truncated());
        let t = c.finish();
        assert_eq!(t.text, "abcde");
        assert!(t.truncated);
        assert_eq!(&*seen.0.lock().unwrap(), b"abcde");
    }
}
