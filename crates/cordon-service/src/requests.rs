//! Request bodies into what the engine takes: profiles from a built-in and overrides, sizes,
//! durations and signals.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_policy::{EnvEntry, Profile};

use crate::error::ServiceError;
use crate::types::*;

pub(super) fn size(a: &Amount, field: &str) -> Result<u64, ServiceError> {
    a.size(field)
}

pub(super) fn duration(a: &Amount, field: &str) -> Result<Duration, ServiceError> {
    a.duration(field)
}

/// Refuses a TTL or timeout beyond the server's ceiling for it.
pub(super) fn at_most(value: Duration, max: Duration, field: &str) -> Result<(), ServiceError> {
    if value > max {
        return Err(ServiceError::bad_request(format!(
            "{field}: at most {}s",
            max.as_secs()
        )));
    }
    Ok(())
}

/// A signal by number or name.
pub fn signal_number(a: &Amount) -> Result<i32, ServiceError> {
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
) -> Result<Profile, ServiceError> {
    let name = name.unwrap_or("default");
    // Only built-ins: a client must never make the server read a file of its choosing.
    let mut p = Profile::builtin(name).map_err(|_| {
        ServiceError::bad_request(format!(
            "profile: '{name}' is not one of this server's profiles: it accepts only the \
             built-in names ({}) and reads no profile file a client names; profile files are \
             for the command line (cordon run --profile FILE); over HTTP, set limits, env and \
             network in the request itself",
            cordon_policy::profile::BUILTINS.join(", ")
        ))
    })?;
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
        .map_err(|e| ServiceError::bad_request(e.to_string()))?;
    Ok(p)
}

impl super::Service {
    /// Resolves `profile.image` in this node's store (pulling it first if the server is
    /// configured to) and puts what the engine needs into the profile. A request (`trusted`
    /// false) may only name images: a directory would be a host path of the client's choosing.
    /// The returned root holds the image's layers: keep it for the sandbox's lifetime.
    pub(crate) async fn attach_image(
        &self,
        profile: &mut Profile,
        trusted: bool,
    ) -> Result<Option<cordon_image::ImageRoot>, ServiceError> {
        let Some(name) = profile.image.clone() else {
            return Ok(None);
        };
        if profile.root_image.is_some() {
            // A front end resolved it from its own configuration and holds it.
            return Ok(None);
        }
        if !trusted && cordon_image::store::names_directory(&name) {
            return Err(ServiceError::bad_request(format!(
                "image: '{name}' is a path; name an image in the server's store (a directory \
                 as a root is only for cordon run and cordon mcp)"
            )));
        }
        let store = cordon_image::Store::open(&self.cfg.data_dir)
            .map_err(|e| ServiceError::internal(format!("the image store: {e}")))?;
        // Checked before the store is asked: an image the server may not pull is refused
        // the same way whether or not it would have to be pulled.
        let pull = match self.cfg.image_pull {
            super::ImagePull::Missing => match cordon_image::Reference::parse(&name) {
                Ok(r) => Some(self.pull_options(&r, cordon_image::Platform::host())?),
                // A digest prefix or other store-only name: nothing to pull.
                Err(_) => None,
            },
            super::ImagePull::Never => None,
        };
        let root = tokio::task::spawn_blocking(move || {
            match store.resolve(&name) {
                Err(cordon_image::ImageError::NotFound { .. }) if pull.is_some() => {
                    let opts = pull.unwrap_or_default();
                    cordon_image::pull(&store, &name, &opts, &cordon_image::Quiet).map_err(
                        |e| ServiceError::bad_request(format!("image: pulling {name}: {e}")),
                    )?;
                    store.resolve(&name)
                }
                other => other,
            }
            .map_err(|e| match e {
                cordon_image::ImageError::NotFound { .. } => ServiceError::bad_request(format!(
                    "image: {name} is not in this server's image store; pull it first \
                     (cordon image pull {name} --data-dir <the server's data dir>), or start \
                     cordon serve with --image-pull missing to pull on demand"
                )),
                other => ServiceError::bad_request(format!("image: {name}: {other}")),
            })
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))??;
        profile.root_image = Some(root.root_image());
        profile
            .validate()
            .map_err(|e| ServiceError::bad_request(e.to_string()))?;
        Ok(Some(root))
    }
}
