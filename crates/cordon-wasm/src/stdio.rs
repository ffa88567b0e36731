//! The guest's stdout and stderr when this process keeps them: every byte goes through the
//! shared [`OutputCap`] (the first `--output-limit` bytes kept, the rest drained and counted,
//! as the process backend does), and what is kept may be echoed live.

use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use cordon_policy::{CapturedText, OutputCap};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Where kept bytes are echoed.
#[derive(Debug, Clone, Copy)]
pub enum Echo {
    None,
    Stdout,
    Stderr,
}

struct State {
    cap: OutputCap,
    echo: Echo,
}

/// One guest stream; clones share the same cap (a guest may open its stdout many times).
#[derive(Clone)]
pub struct Captured(Arc<Mutex<State>>);

/// How much a guest may hand over in one write.
const WRITE_BUDGET: usize = 64 << 10;

impl Captured {
    pub fn new(limit: u64, echo: Echo) -> Captured {
        Captured(Arc::new(Mutex::new(State {
            cap: OutputCap::new(limit),
            echo,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the cap consistent (push is one step).
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, data: &[u8]) {
        let mut s = self.lock();
        let echo = s.echo;
        let kept = s.cap.push(data);
        if kept.is_empty() {
            return;
        }
        // An echo that fails (closed terminal) must not fail the guest's write: the Outcome
        // still has the bytes.
        let _ = match echo {
            Echo::None => Ok(()),
            Echo::Stdout => std::io::stdout().lock().write_all(kept),
            Echo::Stderr => std::io::stderr().lock().write_all(kept),
        };
    }

    pub fn truncated(&self) -> bool {
        self.lock().cap.truncated()
    }

    pub fn text(&self) -> CapturedText {
        self.lock().cap.text()
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BUDGET)
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
