//! Wires the egress proxy (cordon-net) into a one-shot run.

use cordon_linux::EgressFactory;
use cordon_policy::Profile;

pub fn factory(_profile: &Profile) -> Result<EgressFactory, String> {
    Err("the egress proxy is not built yet".to_string())
}
