//! Zero-copy relaying with splice(2): socket → pipe → socket. The relayed bytes stay in the
//! kernel (page references move, nothing is copied through this process), which is what lets
//! the proxy keep up with a direct connection on a machine where it competes for the same
//! cores as both ends.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rustix::pipe::{
    fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags,
};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

use crate::conn::{End, Flow};

/// Pipe capacity asked for (the default is 64 KiB; unprivileged processes may go up to
/// /proc/sys/fs/pipe-max-size, 1 MiB by default).
const PIPE_SIZE: usize = 1 << 20;

pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// `None` when no pipe can be had (out of descriptors): the caller copies instead.
    pub fn new() -> Option<Pipe> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).ok()?;
        let _ = fcntl_setpipe_size(&write, PIPE_SIZE);
        let capacity = fcntl_getpipe_size(&read).unwrap_or(64 * 1024).max(4096);
        Some(Pipe {
            read,
            write,
            capacity,
        })
    }

    pub async fn relay(
        self,
        flow: &Flow,
        r: &mut OwnedReadHalf,
        w: &mut OwnedWriteHalf,
    ) -> Result<(), End> {
        let src: &TcpStream = r.as_ref();
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        loop {
            // Take at most what the budget has left; charge what actually came. Bytes another
            // connection took meanwhile are dropped with the pipe rather than relayed.
            let limit = usize::try_from(flow.shared.bytes_left())
                .unwrap_or(usize::MAX)
                .min(self.capacity);
            if limit == 0 {
                return Err(End::ByteCap);
            }
            let n = loop {
                match flow.idle_bounded(src.readable()).await {
                    None => return Err(End::Idle),
                    Some(Err(e)) => return Err(End::Io(e)),
                    Some(Ok(())) => {}
                }
                match src.try_io(Interest::READABLE, || {
                    splice(src, None, &self.write, None, limit, flags).map_err(io::Error::from)
                }) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(End::Io(e)),
                }
            };
            if n == 0 {
                let _ = w.shutdown().await;
                return Ok(());
            }
            let granted = flow.shared.take_bytes(n);
            flow.bytes.fetch_add(granted as u64, Ordering::AcqRel);
            flow.touch();
            self.drain(flow, w, granted).await?;
            if granted < n {
                return Err(End::ByteCap);
            }
        }
    }

    /// Move exactly `n` bytes from the pipe to the socket.
    async fn drain(&self, flow: &Flow, w: &mut OwnedWriteHalf, mut n: usize) -> Result<(), End> {
        let dst: &TcpStream = w.as_ref();
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        while n > 0 {
            match tokio::time::timeout(flow.idle, dst.writable()).await {
                Err(_) => return Err(End::Idle),
                Ok(Err(e)) => return Err(End::Io(e)),
                Ok(Ok(())) => {}
            }
            match dst.try_io(Interest::WRITABLE, || {
                splice(&self.read, None, dst, None, n, flags).map_err(io::Error::from)
            }) {
                Ok(0) => return Err(End::Io(io::ErrorKind::WriteZero.into())),
                Ok(m) => {
                    n -= m;
                    flow.touch();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(End::Io(e)),
            }
        }
        Ok(())
    }
}
