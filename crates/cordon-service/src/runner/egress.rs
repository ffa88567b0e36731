//! Wires the egress proxy (cordon-net) into a run of this process: the engine hands over the
//! listening socket it created inside the sandbox, the proxy serves it from here.
//!
//! Threat model: everything that reaches the listener is the sandbox's, hence hostile; the
//! proxy (cordon-net) is what judges it. With the network off the allowlist is empty and the
//! proxy refuses every request, reporting it.

use cordon_linux::{Egress, EgressFactory};
use std::sync::Arc;

use cordon_net::{EgressProxy, Interception, ProxyConfig};
use cordon_policy::{NetworkEvent, Profile};

struct Running(EgressProxy);

impl Egress for Running {
    fn finish(self: Box<Self>) -> Vec<NetworkEvent> {
        self.0.shutdown()
    }
}

/// Checks the policy now (so a bad entry fails before anything starts) and returns the
/// factory the engine calls once the sandbox's listener exists.
pub fn factory(profile: &Profile) -> Result<EgressFactory, String> {
    factory_with(profile, None)
}

/// [`factory`] with the run's secrets (see `runner::secrets`): the proxy terminates TLS for
/// their hosts and injects their values.
pub fn factory_with(
    profile: &Profile,
    secrets: Option<Arc<Interception>>,
) -> Result<EgressFactory, String> {
    starter_with(profile, secrets).map(|f| Box::new(f) as EgressFactory)
}

/// What `factory` gives, as a closure that may be called from another thread (a persistent
/// sandbox's helper hands its listener over from the thread that creates it).
pub fn starter(
    profile: &Profile,
) -> Result<
    impl FnOnce(std::net::TcpListener) -> Result<Box<dyn Egress>, String> + Send + 'static,
    String,
> {
    starter_with(profile, None)
}

fn starter_with(
    profile: &Profile,
    secrets: Option<Arc<Interception>>,
) -> Result<
    impl FnOnce(std::net::TcpListener) -> Result<Box<dyn Egress>, String> + Send + 'static,
    String,
> {
    // Still the only thread: the proxy's lookups come later, from its own.
    cordon_linux::pin_name_service();
    let mut config = ProxyConfig::from_policy(&profile.network).map_err(|e| e.to_string())?;
    config.secrets = secrets;
    Ok(move |listener| {
        EgressProxy::start(listener, config)
            .map(|p| Box::new(Running(p)) as Box<dyn Egress>)
            .map_err(|e| e.to_string())
    })
}
