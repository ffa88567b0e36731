//! cordon's tool gateway as policy, free of syscalls: the config, which rules apply to a
//! tool, argument checks (the tool's own input schema and the rule's), path normalisation
//! and path sets, rate limits, pinning of tool definitions, approvals and the hash-chained
//! audit log. The MCP front end (`cordon-server`'s `gateway`) asks this crate what to do.

pub mod audit;
pub mod carve;
pub mod config;
pub mod paths;
pub mod pin;
pub mod policy;
pub mod rate;

pub use config::{Config, ConfigError};
pub use jsonschema;
pub use policy::{Admitted, Kind, Policy, Reason, Refusal};
