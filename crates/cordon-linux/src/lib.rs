//! cordon's isolation engine. Everything that talks to the kernel lives in this crate.
//!
//! A run goes through three processes, each with one job:
//! - the **supervisor** (the caller's process): creates the cgroup and the pipes, clones the
//!   init into fresh namespaces and writes its id maps (`launcher`, shared with persistent
//!   sandboxes), pumps output under byte caps, enforces time limits and turns what happened
//!   into an `Outcome` (`supervisor`);
//! - the **init** (PID 1 of the new pid namespace, the supervisor's child): takes on the
//!   sandbox's one unprivileged identity, builds the new root, confines itself with every
//!   layer, spawns the payload, reaps orphans and reports the payload's end. When it exits, the
//!   kernel kills whatever is left in the namespace;
//! - the **payload**: the user's command, in its own session.
//!
//! The callers of [`run`] must be single-threaded at the moment of the call (see
//! LINUX-NOTES: forking a threaded process leaves only async-signal-safe calls to the child);
//! a threaded program re-executes itself as a helper first.

mod caps_drop;
pub mod cgroup;
mod channel;
pub mod detect;
mod error;
mod exec_allow;
mod exec_learn;
pub mod freeze;
pub mod fsview;
mod idmap;
mod inroot;
mod landlock_rules;
mod launcher;
mod mounts;
mod output;
pub mod persistent;
mod plan;

mod init;
pub mod reaping;
pub mod seccomp;
pub mod selfconfine;
mod setup_heard;
pub mod snapshot;
mod supervisor;
mod sys;
pub mod treecopy;
mod watch;

/// Kept here for callers that knew it from the engine; it lives with the classifier now.
pub use cordon_policy::ending::exec_failure_message;
pub use detect::{Environment, Fix, HostReport, Obstacle, Support};
pub use error::EngineError;
pub use plan::{host_system_paths, INNER_ID};
pub use supervisor::{run, Egress, EgressFactory, OutputMode, RunRequest, StdinSource};
pub use sys::{pin_name_service, process_start};
