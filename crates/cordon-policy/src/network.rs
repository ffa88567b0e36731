//! Egress policy: which destinations the sandbox's proxy may reach. Pure data and matching.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::profile::ProfileError;

/// The `[network]` section of a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    /// `DOMAIN[:PORT]`, `*.DOMAIN[:PORT]`, `IP[:PORT]` or `CIDR` entries. Empty: no network.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Names the proxy resolves to fixed addresses instead of asking DNS.
    #[serde(default)]
    pub hosts: BTreeMap<String, IpAddr>,
}

impl NetworkPolicy {
    /// True when the sandbox gets an egress proxy at all.
    pub fn is_enabled(&self) -> bool {
        !self.allow.is_empty()
    }

    pub fn validate(&self) -> Result<(), ProfileError> {
        for entry in &self.allow {
            if entry.trim().is_empty() || entry.contains(char::is_whitespace) {
                return Err(ProfileError::invalid(
                    "--allow-net",
                    format!("'{entry}' is not DOMAIN[:PORT], e.g. pypi.org or api.example.com:8443"),
                ));
            }
        }
        Ok(())
    }
}
