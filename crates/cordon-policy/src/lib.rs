//! cordon's policy layer: the [`Profile`] that says what a sandbox may do, its TOML form and
//! built-in variants, and the [`Outcome`] that reports what a run did.
//!
//! Nothing here touches the kernel: the engine (`cordon-linux`) turns a validated profile into
//! a confined process tree.

pub mod ending;
pub mod exec;
pub mod explain;
pub mod learn;
pub mod lexical;
pub mod network;
pub mod notices;
pub mod outcome;
pub mod output;
pub mod profile;
pub mod secrets;
pub mod units;
pub mod wasm;

pub use ending::{classify, EndFacts, Ending, ExecFailure, LimitHit, ProcessEnd, Stopped};
pub use outcome::{Backend, Enforcement, ImageRef, NetworkEvent, Outcome, Status, Usage};
pub use output::{CapturedText, OutputCap};
pub use profile::{Bind, EnvEntry, Layer, Limits, Profile, ProfileError, RootImage, SystemView};
