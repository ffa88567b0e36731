//! Descriptors: pipes, the seqpacket pair of the supervisor's channel and its packets with
//! SCM_RIGHTS, poll, close-on-exec and closing what a new process must not inherit, small
//! file writes.

#[allow(unused_imports)]
use super::*;

/// Marks every fd from `first` upward close-on-exec, so nothing leaks into the payload.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on fds.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret == 0 {
        return Ok(());
    }
    // Fallback for kernels without close_range: walk /proc/self/fd.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &RawFd| *fd >= first as RawFd)
        .collect();
    for fd in fds {
        // SAFETY: setting FD_CLOEXEC on an fd number is harmless even if it was just closed.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Closes the fd number `fd` without an owner's say: for a forked child dropping its copy of
/// an fd that its parent's code owns.
///
/// # Safety
/// Nothing in this process may use `fd` afterwards.
pub unsafe fn close_raw(fd: RawFd) {
    // SAFETY: the caller guarantees the fd is not used again here.
    unsafe { libc::close(fd) };
}

/// Closes `fd` and reports the error that dropping it would swallow (some file systems report
/// a full disk only there). rustix's close returns nothing.
pub fn close_checked(fd: OwnedFd) -> io::Result<()> {
    let raw = fd.into_raw_fd();
    // SAFETY: `raw` came from into_raw_fd, so it is open and owned by nothing else; after
    // close it is gone whatever the result (Linux never leaves it open on EINTR).
    cvt(unsafe { libc::close(raw) }).map(drop)
}

/// Async-signal-safe (a plain syscall), so it may run between fork and exec.
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: plain integers; dup2 clears CLOEXEC on `to`, which is what stdio needs.
    cvt(unsafe { libc::dup2(from, to) }).map(drop)
}

/// Reads exactly `buf.len()` bytes (a few, from a pipe); false at end of file or on error.
pub fn read_exact(fd: RawFd, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of a valid buffer.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        match n {
            n if n > 0 => got += n as usize,
            -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return false,
        }
    }
    true
}

pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes one small message whole (a few bytes to a pipe: never partial).
pub fn write_all(fd: RawFd, data: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: writing from a valid buffer of the given length.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n == data.len() as isize {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if n >= 0 || e.raw_os_error() != Some(libc::EINTR) {
            return Err(if n >= 0 {
                io::ErrorKind::WriteZero.into()
            } else {
                e
            });
        }
    }
}

/// Blocks for one byte; `None` at end of file or on error.
pub fn read_byte(fd: RawFd) -> Option<u8> {
    let mut b = 0u8;
    loop {
        // SAFETY: reading one byte into a valid local.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        match n {
            1 => return Some(b),
            -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return None,
        }
    }
}

pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-int array.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // Room for large messages (see channel::MAX_MESSAGE); best effort, capped by wmem_max.
    for fd in fds {
        for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
            let size: libc::c_int = 1 << 20;
            // SAFETY: setsockopt with a pointer to a live c_int of the stated size.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    &size as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
        }
    }
    // SAFETY: socketpair returned two fresh fds that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an fd we own.
    let fl = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) }).map(drop)
}

/// Most fds one message carries. The init's `Confined` carries the most: four scratch
/// filesystems and, without a cgroup, its /proc — at 4, a rootless run's report was refused
/// ("too many fds") and its `enforcement` came out all false.
pub const MAX_FDS: usize = 8;

/// Sends one datagram, carrying up to [`MAX_FDS`] fds.
pub fn send_packet(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: msghdr is plain data; zeroed is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        // SAFETY: msg_control points at CMSG_SPACE(payload) bytes, so the first header and
        // `fds.len()` fds fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as usize;
            let data = libc::CMSG_DATA(cmsg) as *mut RawFd;
            for (i, fd) in fds.iter().enumerate() {
                std::ptr::write_unaligned(data.add(i), *fd);
            }
        }
    }
    loop {
        // SAFETY: msg and everything it points to are valid for the call.
        let ret = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if ret >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Waits for the next datagram and returns its full length without consuming it (0 at EOF).
pub fn peek_packet_len(sock: RawFd) -> io::Result<usize> {
    let mut reset_seen = false;
    loop {
        // SAFETY: a zero-length read into no buffer; MSG_TRUNC makes the kernel report the
        // datagram's real length, MSG_PEEK leaves it (and any fds it carries) queued.
        let ret = unsafe {
            libc::recv(
                sock,
                std::ptr::null_mut(),
                0,
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let e = io::Error::last_os_error();
        // A peer that closed with messages of ours unread (an init that failed before reading
        // `Go`) leaves ECONNRESET on our socket, and the kernel reports it before what the
        // peer sent first — its setup report, lost about one run in twelve. Reporting the
        // error clears it: ask once more.
        if e.raw_os_error() == Some(libc::ECONNRESET) && !reset_seen {
            reset_seen = true;
            continue;
        }
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Receives one datagram into `buf`; returns its length (0 at EOF) and the fds it carried.
pub fn recv_packet(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: pure size computation.
    let space =
        unsafe { libc::CMSG_SPACE((std::mem::size_of::<RawFd>() * MAX_FDS) as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: zeroed msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space;
    let n = loop {
        // SAFETY: msg points at valid buffers; MSG_CMSG_CLOEXEC keeps received fds from leaking.
        let ret = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if ret >= 0 {
            break ret as usize;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    };
    let mut received = Vec::new();
    // SAFETY: walking the control buffer the kernel filled, with the CMSG_* helpers; every fd
    // in an SCM_RIGHTS message is new and ours to own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let count =
                    ((*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    received.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n, received, msg.msg_flags & libc::MSG_TRUNC != 0))
}

/// A poll entry asking for `events` on `fd` (an fd of -1 is an entry poll skips).
pub fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: fds is a valid slice of pollfd.
    let ret = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if ret == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(ret as usize)
}

/// Whether this process may create entries in `dir` (access(2) with W_OK: it honours
/// read-only mounts, and for root only those).
pub fn writable(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path and a flag constant.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

pub fn write_file(path: &Path, data: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

/// Closes every fd except 0-2 and `keep` (close_range over the gaps; /proc/self/fd fallback).
pub fn close_fds_except(keep: &[RawFd]) -> io::Result<()> {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut start: u32 = 3;
    let mut ranges = Vec::new();
    for k in &keep {
        if (*k as u32) > start {
            ranges.push((start, *k as u32 - 1));
        }
        start = *k as u32 + 1;
    }
    ranges.push((start, u32::MAX));
    for (lo, hi) in ranges {
        // SAFETY: close_range only closes fds in [lo, hi]; none of them is in use by Rust
        // objects we keep (callers pass every fd they still need in `keep`).
        let ret = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
        if ret != 0 {
            let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|fd: &RawFd| *fd as u32 >= lo && (*fd as u32) <= hi)
                .collect();
            for fd in fds {
                // SAFETY: as above.
                unsafe { libc::close(fd) };
            }
        }
    }
    Ok(())
}
