//! Request bodies into what the engine takes: profiles from a built-in and overrides, sizes,
//! durations and signals.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_policy::{EnvEntry, Profile};

use crate::error::ApiError;
use crate::types::*;

pub(super) fn size(a: &Amount, field: &str) -> Result<u64, ApiError> {
    a.size(field)
}

pub(super) fn duration(a: &Amount, field: &str) -> Result<Duration, ApiError> {
    a.duration(field)
}

/// Refuses a TTL or timeout beyond the server's ceiling for it.
pub(super) fn at_most(value: Duration, max: Duration, field: &str) -> Result<(), ApiError> {
    if value > max {
        return Err(ApiError::bad_request(format!(
            "{field}: at most {}s",
            max.as_secs()
        )));
    }
    Ok(())
}

/// A signal by number or name.
pub fn signal_number(a: &Amount) -> Result<i32, ApiError> {
    a.signal()
}

/// Builds a profile from a built-in and the request's overrides.
#[allow(clippy::too_many_arguments)]
pub fn profile_from(
    name: Option<&str>,
    memory: Option<&Amount>,
    cpus: Option<f64>,
    pids: Option<u32>,
    disk: Option<&Amount>,
    timeout: Option<&Amount>,
    env: &BTreeMap<String, String>,
    network: Option<&cordon_policy::network::NetworkPolicy>,
) -> Result<Profile, ApiError> {
    let name = name.unwrap_or("default");
    // Only built-ins: a client must never make the server read a file of its choosing.
    let mut p =
        Profile::builtin(name).map_err(|e| ApiError::bad_request(format!("profile: {e}")))?;
    if let Some(m) = memory {
        p.limits.memory = size(m, "memory")?;
    }
    if let Some(c) = cpus {
        p.limits.cpus = c;
    }
    if let Some(n) = pids {
        p.limits.pids = n;
    }
    if let Some(d) = disk {
        p.limits.disk = size(d, "disk")?;
    }
    if let Some(t) = timeout {
        p.limits.timeout = duration(t, "timeout")?;
    }
    check_env(env)?;
    for (k, v) in env {
        p.env.push(EnvEntry::Set(k.clone(), v.clone()));
    }
    if let Some(n) = network {
        p.network = n.clone();
    }
    p.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(p)
}
