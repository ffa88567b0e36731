//! Pseudo-terminals: a pty pair of a given size, window size, the controlling terminal.

#[allow(unused_imports)]
use super::*;

/// A new pseudo-terminal pair from `/dev/ptmx` (inside a sandbox: its own devpts instance),
/// both ends close-on-exec, the master not becoming anyone's controlling terminal. The slave is
/// opened through the master (`TIOCGPTPEER`), so no path lookup can hand us another one.
pub fn open_pty(rows: u16, cols: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: a constant NUL-terminated path; the result is checked.
    let m = cvt(unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: open returned a fresh fd that we now own.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from a valid pointer.
    cvt(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new fd.
    let s = cvt(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: the ioctl returned a fresh fd that we now own.
    let slave = unsafe { OwnedFd::from_raw_fd(s) };
    set_winsize(master.as_raw_fd(), rows, cols)?;
    Ok((master, slave))
}

/// Sets a terminal's window size (either end of a pty pair).
pub fn set_winsize(fd: RawFd, rows: u16, cols: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(drop)
}

/// Makes the terminal on `fd` the controlling terminal of this process's (new) session.
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an int by value (0: do not steal it from another session).
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(drop)
}
