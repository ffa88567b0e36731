//! Persistent sandboxes: a sandbox that stays up and runs many commands.
//!
//! The server (multi-threaded) never forks a sandbox itself: it spawns `cordon __sandbox`, a
//! single-threaded helper that is this sandbox's supervisor. The helper builds the sandbox
//! exactly as a one-shot run does (same profile, same layers), except that the init serves
//! exec requests. Commands' pipes are created inside the sandbox and passed, as fds, through
//! the helper to the server, which pumps them; the helper only routes small messages.
//!
//! Lifetime: the helper lives as long as the sandbox. When the server goes away (even by
//! SIGKILL) the helper sees EOF on its control socket, kills the sandbox and removes its
//! cgroup, so no sandbox outlives the server that owned it. The helper is never part of what a
//! pause freezes (the init and its descendants), and a paused sandbox's freezer cgroup is
//! ended (killed, then thawed) before the init is killed and waited for.

//!
//! The code is split by the process it runs in: `helper` (the helper process) and `handle`
//! (the server's side); what crosses between them is defined here.

mod handle;
mod helper;

use std::collections::BTreeMap;
use std::os::fd::RawFd;
use std::time::Duration;

use cordon_policy::{Enforcement, Profile};
use serde::{Deserialize, Serialize};

use crate::channel::{CommandEnd, ToSupervisor};

pub use crate::channel::{ExecSpec, PtySize};
pub use handle::{ExitInfo, LearnedSoFar, OnProxyListener, Sandbox, Started};
pub use helper::helper_main;

/// The fd number on which the helper finds its control socket.
const CONTROL_FD: RawFd = 3;
/// How long a new sandbox may take to confine itself before its creation fails.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Server → helper.
#[derive(Debug, Serialize, Deserialize)]
enum ToHelper {
    Create {
        profile: Box<Profile>,
        env: BTreeMap<String, String>,
        /// Learn mode (`Profile::learn_exec`, which the profile's own encoding leaves out):
        /// the helper records the programs every command executes.
        #[serde(default)]
        learn: bool,
    },
    Exec {
        id: u64,
        spec: ExecSpec,
    },
    Signal {
        id: u64,
        signal: i32,
    },
    /// What command `id` has used so far (answered with `FromHelper::Usage`).
    Usage {
        id: u64,
    },
    /// Learn mode: the programs executed so far (answered with `FromHelper::Executed`).
    Executed,
    /// Unconnected sockets made inside the sandbox's network namespace (answered with
    /// `FromHelper::Sandbox(ToSupervisor::Sockets)`).
    Sockets {
        id: u64,
        count: u8,
    },
    Shutdown,
}

/// Helper → server.
#[derive(Debug, Serialize, Deserialize)]
enum FromHelper {
    Ready {
        enforcement: Box<Enforcement>,
        init_pid: i32,
        host_uid: u32,
        host_gid: u32,
    },
    /// `errno`: the kernel's answer to the step that failed, when there was one.
    Failed {
        message: String,
        #[serde(default)]
        errno: Option<i32>,
    },
    Sandbox(ToSupervisor),
    /// Command `id` ended (the init's report, with what its accounting domain counted).
    Exit {
        id: u64,
        end: CommandEnd,
        usage: CommandUsage,
    },
    /// The answer to `ToHelper::Usage`; `None` for a command the helper does not know.
    Usage {
        id: u64,
        usage: Option<CommandUsage>,
    },
    /// The answer to `ToHelper::Executed`: the programs executed so far (sandbox paths) and
    /// the file needs (host paths), as many as fit one message, empty without learn mode.
    Executed {
        paths: Vec<std::path::PathBuf>,
        #[serde(default)]
        files: Vec<cordon_policy::outcome::FileAccess>,
    },
    Ended {
        reason: String,
    },
}

/// What one command of a persistent sandbox used and ran into, as its accounting domain
/// (its cgroup, or without one the init's samples) counted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandUsage {
    /// Peak memory of the command's processes together; 0 without a cgroup.
    pub peak_memory_bytes: u64,
    /// Most processes and threads of the command at once.
    pub peak_pids: u64,
    /// Processes of the command the OOM killer killed.
    pub oom_kills: u64,
    /// Forks or threads the process limit refused. Without a cgroup, the samples that
    /// found the sandbox at its limit (`RLIMIT_NPROC`, where every fork fails) while this
    /// command held the most tasks.
    pub pids_refused: u64,
    /// The command's CPU time passed the profile's `cpu_time`, and it was killed for it.
    pub cpu_time_exceeded: bool,
    /// A scratch filesystem (`/tmp`, the workspace tmpfs, `/dev/shm`) was seen out of space,
    /// or out of inodes, while the command ran.
    pub disk_full: bool,
    pub inodes_exhausted: bool,
}
