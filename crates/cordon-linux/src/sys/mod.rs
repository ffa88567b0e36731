//! The narrow syscall layer: thin, checked wrappers over `libc`, each `unsafe` justified.
//!
//! Written by hand because the sandbox needs a few calls that the safe crates do not offer in
//! the form required here (`fork` and `clone` in a known single-threaded process, `setgroups`, mounts with
//! arbitrary flag sets and data, `wait4` with resource usage, SCM_RIGHTS on a seqpacket pair).
//!
//! Split by kind: [`process`], [`fd`], [`mount`], [`procfs`], [`pty`], [`startup`]; callers
//! name them through `sys::` (re-exported here).

mod fd;
mod mount;
mod process;
mod procfs;
mod pty;
mod startup;

pub use fd::*;
pub use mount::*;
pub use process::*;
pub use procfs::*;
pub use pty::*;
pub use startup::*;

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}
