//! cordon across machines. A cluster is a set of Ray nodes, each running a `cordon serve`
//! started and supervised by a Ray actor (Python: `cordon_sdk.ray`); Ray owns membership,
//! health and restarts. This crate is the front door: a stateless router that sends every
//! request to the node holding its sandbox (sandbox ids name their node, so no shared table)
//! and places creates by free capacity. What it knows of the nodes comes from a membership
//! process that talks to Ray and streams one JSON view per line ([`membership`]).
//!
//! Threat model: clients are hostile; the router authenticates nothing itself (each node
//! checks keys and sandbox tokens as a single `cordon serve` does) but proves itself to the
//! nodes with the cluster's secret, which no client ever sees or can supply. The membership
//! process is trusted (it runs with the router's own rights and speaks for Ray).

pub mod membership;
pub mod place;
pub mod proxy;
pub mod route;

pub use membership::{NodeView, View};
pub use proxy::{serve, RouterOptions};
