//! The binary's start-up: the `c_main!` shim every cordon binary starts in, what runs first
//! in it, and pinning glibc's name service before any lookup.

#[allow(unused_imports)]
use super::*;

/// What std's runtime does before `main` that cordon relies on, for a binary that skips that
/// runtime (`#![no_main]`; see the cordon binary's entry point for why): fds 0-2 are open
/// (on /dev/null if the caller closed them, so that no pipe or socket of ours lands on them
/// and gets mistaken for stdio), and SIGPIPE is ignored (a write to a reader that left fails
/// with EPIPE, which the supervisor and the server handle, instead of killing cordon).
pub fn process_start() {
    let mut fds = [0, 1, 2].map(|fd| pollfd(fd, 0));
    // Nothing can be done about a failing poll this early; std ignores it too.
    let _ = poll(&mut fds, 0);
    for p in fds {
        if p.revents & libc::POLLNVAL != 0 {
            // SAFETY: a constant NUL-terminated path; the fd returned is the lowest free one,
            // which is `p.fd` since it is closed, and it is meant to stay open for good.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
    // SAFETY: installs SIG_IGN, which involves no handler code in this process.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Defines the C `main` of a `#![no_main]` binary, which glibc's start code calls: it runs
/// [`process_start`], then `$run` (a `fn() -> i32` returning the exit status) with a panic
/// reported as exit 101 instead of an abort, and flushes stdout on the way out — what std's
/// `main` would add. std still has the arguments (glibc hands them to std's own .init_array
/// hook) and the allocator.
///
/// A macro so that the one `unsafe` attribute this takes (`no_mangle`: the symbol `main` must
/// be this function and nothing else's) is written here, in the engine, the one crate allowed
/// `unsafe`, and not in the binary, which forbids it.
#[macro_export]
macro_rules! c_main {
    ($run:path) => {
        // SAFETY: `main` is defined once per binary (a second definition fails to link), and
        // a `#![no_main]` binary leaves the symbol to us.
        #[unsafe(no_mangle)]
        pub extern "C" fn main(
            _argc: ::std::ffi::c_int,
            _argv: *const *const ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            $crate::process_start();
            let code = ::std::panic::catch_unwind($run).unwrap_or(101);
            let _ = ::std::io::Write::flush(&mut ::std::io::stdout());
            code
        }
    };
}

/// A statically linked cordon (the release build, see scripts/build-release.sh) resolves names
/// with glibc's built-in `files` and `dns` sources only. Anything else nsswitch.conf lists
/// (nss-resolve, mdns, …) would be dlopen'ed from the system into cordon — code built against
/// whatever glibc the host has now, not the one linked into cordon, which glibc does not
/// support. The egress proxy is the only user of the name service, and /etc/hosts plus
/// resolv.conf's servers is all it needs.
///
/// Call it before the first name lookup, while no other thread can be resolving: the
/// commands that may start an egress proxy do, first thing. Not at every start: glibc reads
/// nsswitch.conf when asked, and most runs never resolve a name. Later calls do nothing.
pub fn pin_name_service() {
    #[cfg(all(target_env = "gnu", target_feature = "crt-static"))]
    {
        unsafe extern "C" {
            // glibc's own (exported, long-standing) way to set one database's sources.
            fn __nss_configure_lookup(
                db: *const std::ffi::c_char,
                line: *const std::ffi::c_char,
            ) -> std::ffi::c_int;
        }
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: two constant NUL-terminated strings; the caller guarantees no lookup runs
        // concurrently, and `ONCE` that it happens once.
        ONCE.call_once(|| unsafe {
            __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
        });
    }
}
