//! cordon's policy layer: the [`Profile`] that says what a sandbox may do, its TOML form and
//! built-in variants, and the [`Outcome`] that reports what a run did.
//!
//! Nothing here touches the kernel: the engine (`cordon-linux`) turns a validated profile into
//! a confined process tree.

pub mod network;
pub mod outcome;
pub mod profile;
pub mod units;

pub use outcome::{Enforcement, NetworkEvent, Outcome, Status, Usage};
pub use profile::{Bind, EnvEntry, Layer, Limits, Profile, ProfileError, SystemView};
