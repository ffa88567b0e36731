//! Placement of a new sandbox: the power of two choices. Two eligible nodes are drawn at
//! random and the one with more free slots (as last reported, less the creates this router
//! has in flight to it) takes the sandbox.
//!
//! Why not "the node with the most free slots": the capacity a router sees is up to a
//! membership period old, and every router sees the same view, so a burst of creates from
//! several routers would all pick the same node (herding) until the next report. Two random
//! choices spread such a burst while still keeping the most-loaded node's excess to
//! O(log log n) instead of random placement's O(log n / log log n) (Mitzenmacher); E2B's
//! orchestrator places the same way (best-of-K). With K = 2 a full node is skipped as long as
//! another has room.
//!
//! Threat model: none of this is client input.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use crate::membership::View;

/// A random index below `n` (n > 0), from the standard library's per-process random keys.
fn random_below(n: usize, salt: u64) -> usize {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    (h.finish() % n as u64) as usize
}

/// The node that should take a new sandbox, given the creates in flight per node; `exclude`
/// names nodes already tried for this request. None when no node has room.
pub fn pick(
    view: &View,
    inflight: &HashMap<String, u32>,
    exclude: &[String],
    salt: u64,
) -> Option<String> {
    let free = |n: &crate::NodeView| {
        n.free()
            .saturating_sub(inflight.get(&n.node).copied().unwrap_or(0))
    };
    let candidates: Vec<_> = view
        .eligible()
        .filter(|n| !exclude.contains(&n.node) && free(n) > 0)
        .collect();
    match candidates.len() {
        0 => None,
        1 => Some(candidates[0].node.clone()),
        n => {
            let a = random_below(n, salt);
            let mut b = random_below(n - 1, salt.wrapping_add(1));
            if b >= a {
                b += 1;
            }
            let (x, y) = (candidates[a], candidates[b]);
            Some(if free(y) > free(x) { &y.node } else { &x.node }.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(nodes: &[(&str, bool, bool, u32, u32)]) -> View {
        View {
            secret: String::new(),
            nodes: nodes
                .iter()
                .map(|&(n, alive, draining, slots, live)| crate::NodeView {
                    node: n.into(),
                    addr: "127.0.0.1:1".into(),
                    alive,
                    draining,
                    slots,
                    live,
                    ray_node_id: String::new(),
                })
                .collect(),
            settling: false,
        }
    }

    #[test]
    fn dead_draining_and_full_nodes_take_no_sandbox() {
        let v = view(&[
            ("dead", false, false, 8, 0),
            ("draining", true, true, 8, 0),
            ("full", true, false, 8, 8),
            ("ok", true, false, 8, 7),
        ]);
        for salt in 0..50 {
            assert_eq!(pick(&v, &HashMap::new(), &[], salt).as_deref(), Some("ok"));
        }
        let busy = HashMap::from([("ok".to_string(), 1)]);
        assert_eq!(pick(&v, &busy, &[], 0), None);
        assert_eq!(pick(&v, &HashMap::new(), &["ok".to_string()], 0), None);
    }

    #[test]
    fn of_two_candidates_the_freer_wins() {
        let v = view(&[("a", true, false, 8, 7), ("b", true, false, 8, 0)]);
        for salt in 0..50 {
            assert_eq!(pick(&v, &HashMap::new(), &[], salt).as_deref(), Some("b"));
        }
    }

    #[test]
    fn placement_spreads_over_equal_nodes() {
        let v = view(&[
            ("a", true, false, 99, 0),
            ("b", true, false, 99, 0),
            ("c", true, false, 99, 0),
        ]);
        let mut seen = std::collections::BTreeSet::new();
        for salt in 0..200 {
            seen.insert(pick(&v, &HashMap::new(), &[], salt));
        }
        assert_eq!(seen.len(), 3);
    }
}
