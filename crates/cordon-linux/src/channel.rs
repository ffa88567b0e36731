//! Typed messages between the supervisor and the sandbox side, over a SOCK_SEQPACKET pair.
//!
//! One datagram is one JSON message, so there is no framing to get wrong. Everything the
//! sandbox side sends is untrusted: the supervisor bounds sizes and rejects what does not parse.
//!
//! # The handshake, in order
//!
//! ```text
//! supervisor (cordon, or a persistent sandbox's `cordon __sandbox` helper)
//! │  launcher::prepare: the plan, resolved before any fork
//! │  launcher::spawn_init: clone(new user/pid/mount/net/ipc/uts ns) ─────────────┐
//! │  writes the init's uid/gid maps                                                init
//! │  ── Mapped ─────────────────────────────────────────────────────────────────▶ │ stdio, close fds,
//! │                                                                               │ take the sandbox ids,
//! │  creates the cgroup (in parallel with the init's root)                        │ pdeathsig, non-dumpable,
//! │                                                                               │ build the root, pivot,
//! │  ── Go {cgroup, count_at_end} + the cgroup's files ─────────────────────────▶ │ hostname, loopback
//! │                                                                               │ joins the cgroup,
//! │                                                                               │ cgroup ns
//! │ ◀── RootFd + O_PATH fds of the root (and an image's writable layer) (persistent) ─│
//! │ ◀── ProxyListener + a listening socket  (when the plan has the egress proxy) ─│
//! │                                                       init::confine: rlimits → close fds → caps
//! │                                                        → no_new_privs → Landlock → seccomp
//! │ ◀── Confined {layers, notes, watch} + the watched fds ───────────────────────│
//! │     (or, at any step above, SetupFailed {step, message} and the init exits 125)
//! │
//! │  one-shot (init::one_shot):                       persistent (init::persistent):
//! │ ◀── ExecFailed, or: [TasksAtEnd] then           ── Exec / Signal / Sample / Sockets / Stop ──▶
//! │     Exited | Signaled; the init exits           ◀── Started, ExecFailed, CommandUsage,
//! │  ── Stop (on timeout, limits, interrupt) ──▶        ExecExit per command; Sockets + fds
//! ```
//!
//! Without namespaces (`launcher::spawn_init` after the host refused them) the order is the
//! same but for the root: no maps (no `Mapped` wait beyond the message), no root to build, no
//! `RootFd`; the proxy's listener is on the host's loopback, on a port the kernel picks.
//! The supervisor takes each setup message once, in this order; one that comes again, or out
//! of its place, is ignored (it can only be the sandbox's doing after it is confined).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use crate::sys;

/// Largest message either side accepts. Exec requests carry whole argv/env (a code kernel's
/// driver travels as an argument), so this is generous; socket buffers are raised to match.
pub const MAX_MESSAGE: usize = 192 * 1024;

/// What the init or the payload tells the supervisor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToSupervisor {
    /// The init is confined and about to start the payload; these layers are in force.
    Confined {
        landlock_abi: u32,
        landlock_partial: bool,
        seccomp: bool,
        rlimits: bool,
        notes: Vec<String>,
        /// What each attached fd is, in order (see [`Watched`]).
        #[serde(default)]
        watch: Vec<Watched>,
    },
    /// A listening socket inside the sandbox's network namespace, attached as an fd.
    ProxyListener,
    /// Persistent sandbox: an O_PATH fd of the sandbox's root directory, attached, so the
    /// supervisor can resolve file paths inside it without going through /proc; with an
    /// image, a second: the directory holding its writable layer (`upper/`, `work/`), which
    /// nothing inside the sandbox can name (what `cordon image commit` reads).
    RootFd,
    /// The payload (or, in a persistent sandbox, command `id`) could not be executed.
    ExecFailed {
        #[serde(default)]
        id: u64,
        errno: i32,
        path: String,
        /// The working directory, not the program, was the problem.
        #[serde(default)]
        cwd: bool,
    },
    /// Setup failed before the payload ran; `errno` when the step failed on a syscall.
    SetupFailed {
        step: String,
        message: String,
        #[serde(default)]
        errno: Option<i32>,
    },
    /// One-shot, when `Go` asked for it (`count_at_end`): the tasks in the sandbox, the init
    /// not counted, at the moment the payload ended — counted before its zombie was reaped,
    /// while it still held its place in the kernel's count. What a fork bomb leaves behind is
    /// ended right after; the supervisor's own looks, some milliseconds apart, can miss it.
    TasksAtEnd { tasks: u64 },
    /// The payload exited with this code.
    Exited { code: i32 },
    /// The payload was killed by this signal.
    Signaled { signal: i32 },
    /// Persistent sandbox: command `id` runs as `pid` (in the sandbox's pid namespace); its
    /// stdin (write end), stdout and stderr (read ends) are attached, in that order.
    Started { id: u64, pid: i32 },
    /// Persistent sandbox: the answer to `ToSandbox::Sockets { id, .. }`: with `errno` 0 the
    /// sockets (non-blocking, unconnected) are attached; else the refusal.
    Sockets { id: u64, errno: i32 },
    /// Persistent sandbox: command `id` ended, and with it everything it started.
    ExecExit {
        id: u64,
        end: CommandEnd,
        /// Without a cgroup: what the init's samples saw (see [`ToSupervisor::CommandUsage`]).
        #[serde(default)]
        peak_pids: u64,
        #[serde(default)]
        pids_at_limit: u64,
    },
    /// Persistent sandbox without a cgroup: what the init's samples of `/proc` saw of command
    /// `id` so far — its most tasks at once, and how many samples found the sandbox at its
    /// process limit (`RLIMIT_NPROC`: every fork refused) while the command was the largest.
    CommandUsage {
        id: u64,
        peak_pids: u64,
        pids_at_limit: u64,
    },
}

/// How a command of a persistent sandbox ended, as the init reaped it; the helper passes it
/// on unchanged. CPU and peak RSS cover every process of the command, killed ones included.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CommandEnd {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_user_us: u64,
    pub cpu_system_us: u64,
    pub max_rss_kb: u64,
}

/// A descriptor the init hands over with `Confined`, through which the supervisor watches the
/// run from outside without trusting anything the sandbox says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Watched {
    /// A scratch tmpfs (`/tmp`, the workspace tmpfs, `/dev/shm`), opened `O_PATH`: its free
    /// blocks and inodes tell whether it filled up (`fstatfs`). The fd also keeps it alive
    /// after the sandbox is gone, for a last look.
    Scratch,
    /// The sandbox's own /proc, where processes and threads are counted when no cgroup does.
    Proc,
    /// Learn mode: the listener of the filter notifying each `execve` (see `exec_learn`).
    ExecNotify,
}

/// One command to run in a persistent sandbox: what the server asks for (`persistent::Sandbox::
/// exec`), and what travels on, unchanged, server → helper → init. The init adds it to the
/// profile's environment and resolves `cwd` against the profile's working directory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    /// Variables set on top of the sandbox's environment, in order (a later one wins).
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    /// Run the command on a terminal of this size: a pty pair of the sandbox's own devpts,
    /// whose slave is the command's controlling terminal and fds 0-2. The master comes back
    /// as both the stdin and the stdout fd of `Started` (stderr is then an empty pipe).
    #[serde(default)]
    pub pty: Option<PtySize>,
}

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub rows: u16,
    pub cols: u16,
}

/// What the supervisor tells the sandbox side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToSandbox {
    /// The init's uid and gid maps are written: it can take on its sandbox identity.
    Mapped,
    /// Go on. With `cgroup: true` the message carries the files through which the init joins
    /// its cgroup (`cgroup::join`); without one, per-process rlimits must stand in for the
    /// memory and pid limits. `count_at_end`: no kernel count keeps the peak of the sandbox's
    /// tasks (no cgroup, or one without `pids.peak`), so the one-shot init counts them when
    /// the payload ends ([`ToSupervisor::TasksAtEnd`]).
    Go {
        cgroup: bool,
        #[serde(default)]
        count_at_end: bool,
    },
    /// Persistent sandbox: start a command. With `cgroup: true` the message carries the
    /// files through which the command's sub-init joins the command's own cgroup.
    Exec {
        id: u64,
        spec: ExecSpec,
        #[serde(default)]
        cgroup: bool,
    },
    /// Persistent sandbox: signal command `id`'s process group (SIGKILL: its whole tree).
    Signal { id: u64, signal: i32 },
    /// Persistent sandbox without a cgroup: sample now and report command `id`'s usage.
    Sample { id: u64 },
    /// Persistent sandbox: make `count` (at most [`crate::sys::MAX_FDS`]) unconnected TCP
    /// sockets in the sandbox's own network namespace, for the supervisor to connect to its
    /// loopback (a socket's namespace is the one it was made in; see
    /// `Sandbox::connect_port`). Answered with [`ToSupervisor::Sockets`]. Refused without a
    /// network namespace of the sandbox's own: its loopback would be the host's.
    Sockets { id: u64, count: u8 },
    /// End the sandbox: kill everything in it, reap it all (so its CPU time is counted), report
    /// the payload's end if it came, and exit.
    Stop,
}

pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    pub fn new(fd: OwnedFd) -> Channel {
        Channel { fd }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The channel's poll state right now (`revents`; 0 when poll fails). POLLHUP — the other
    /// end closed, its process gone — is reported whatever `events` asks for.
    pub fn poll_now(&self, events: libc::c_short) -> libc::c_short {
        let mut p = [sys::pollfd(self.raw(), events)];
        match sys::poll(&mut p, 0) {
            Ok(n) if n > 0 => p[0].revents,
            _ => 0,
        }
    }

    pub fn send<T: Serialize>(&self, msg: &T) -> io::Result<()> {
        self.send_with_fds(msg, &[])
    }

    pub fn send_with_fds<T: Serialize>(&self, msg: &T, fds: &[RawFd]) -> io::Result<()> {
        let data = serde_json::to_vec(msg).map_err(io::Error::other)?;
        if data.len() > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "message of {} bytes exceeds the {MAX_MESSAGE}-byte limit",
                    data.len()
                ),
            ));
        }
        sys::send_packet(self.fd.as_raw_fd(), &data, fds)
    }

    /// Receives one message; `Ok(None)` when the other side has closed.
    pub fn recv<T: for<'de> Deserialize<'de>>(&self) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
        // Sized to the message, not to the limit: a fresh zeroed 192 KiB per message cost more
        // than everything else a sandbox start does with the channel.
        let mut reset_seen = false;
        let (buf, n, fds, truncated) = loop {
            let len = sys::peek_packet_len(self.fd.as_raw_fd())?;
            let mut buf = vec![0u8; len.clamp(1, MAX_MESSAGE)];
            match sys::recv_packet(self.fd.as_raw_fd(), &mut buf) {
                // The peer closed between our peek and this read, with a message of ours
                // unread: the kernel reports that ECONNRESET before the datagram we peeked
                // (an init's last word, its setup failure). Reporting it cleared it.
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) && !reset_seen => {
                    reset_seen = true;
                }
                Err(e) => return Err(e),
                Ok((n, fds, truncated)) => break (buf, n, fds, truncated),
            }
        };
        if truncated {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message too large",
            ));
        }
        if n == 0 {
            return Ok(None);
        }
        let msg = serde_json::from_slice(&buf[..n]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad message from sandbox: {e}"),
            )
        })?;
        Ok(Some((msg, fds)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rootless, the init hands over four scratch filesystems and /proc with `Confined`.
    #[test]
    fn confined_carries_every_watched_fd() {
        let (a, b) = sys::seqpacket_pair().expect("socket pair");
        let (tx, rx) = (Channel::new(a), Channel::new(b));
        let watch = vec![
            Watched::Scratch,
            Watched::Scratch,
            Watched::Scratch,
            Watched::Scratch,
            Watched::Proc,
        ];
        let files: Vec<OwnedFd> = watch
            .iter()
            .map(|_| std::fs::File::open("/dev/null").expect("/dev/null").into())
            .collect();
        let raw: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        let msg = ToSupervisor::Confined {
            landlock_abi: 0,
            landlock_partial: false,
            seccomp: true,
            rlimits: true,
            notes: Vec::new(),
            watch: watch.clone(),
        };
        tx.send_with_fds(&msg, &raw).expect("send");
        let (got, fds) = rx.recv::<ToSupervisor>().expect("recv").expect("a message");
        assert!(matches!(got, ToSupervisor::Confined { watch: w, .. } if w == watch));
        assert_eq!(fds.len(), 5);
    }
}
