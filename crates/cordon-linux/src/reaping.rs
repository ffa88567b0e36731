//! Waiting for a process tree to be entirely gone, for `cordon bench`: a sandbox tool can
//! exit before its sandbox is torn down (bubblewrap's outer process does not wait for its
//! pid 1), so "exited" and "gone" are timed apart, and CPU is counted for the whole tree.

use std::io;
use std::time::Duration;

use crate::sys;

/// Makes the calling process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER),
/// so that a tree's last process is waited for here instead of by the host's init.
pub fn become_subreaper() -> io::Result<()> {
    sys::set_child_subreaper()
}

/// How one child ended, and the CPU (user + system) it and the children it reaped used.
pub struct Reaped {
    /// Exit code, or 128 + signal.
    pub code: i32,
    pub cpu: Duration,
}

fn reaped(exit: &sys::Exit) -> Reaped {
    let s = exit.status;
    let code = if libc::WIFSIGNALED(s) {
        128 + libc::WTERMSIG(s)
    } else {
        libc::WEXITSTATUS(s)
    };
    Reaped {
        code,
        cpu: {
            let (user, system) = exit.cpu();
            user + system
        },
    }
}

/// Waits for the child `pid`.
pub fn wait_child(pid: u32) -> io::Result<Reaped> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    match sys::wait4(pid, false)? {
        Some((_, exit)) => Ok(reaped(&exit)),
        None => Err(io::Error::other("wait4 returned without a child")),
    }
}

/// Waits for every remaining child (orphans adopted as subreaper included); returns the CPU
/// they used. The caller must have no other children it means to keep.
pub fn wait_all() -> io::Result<Duration> {
    let mut cpu = Duration::ZERO;
    loop {
        match sys::wait4(-1, false) {
            Ok(Some((_, exit))) => cpu += reaped(&exit).cpu,
            Ok(None) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => return Ok(cpu),
            Err(e) => return Err(e),
        }
    }
}
