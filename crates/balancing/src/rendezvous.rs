//! Rendezvous (highest-random-weight) hashing: every node scores the key,
//! the highest score wins. Weighted with the logarithmic method
//! (score = -w / ln(u)), so shares follow weights; a departure moves only
//! the departed node's keys. O(n) per pick.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::hash::hash_pair;
use crate::{Node, Pick, Strategy};

/// Rendezvous (highest random weight) hashing, weighted.
#[derive(Debug, Default)]
pub struct Rendezvous {
    nodes: ArcSwap<Vec<Node>>,
}

impl Rendezvous {
    /// An empty set; give it nodes with [`Strategy::set_nodes`](crate::Strategy::set_nodes).
    pub fn new() -> Self {
        Self::default()
    }
}

fn score(key: &[u8], node: &Node) -> f64 {
    // A uniform u in (0, 1): never 0 (ln 0) nor 1 (ln 1 = 0).
    let u = (hash_pair(key, &node.id) >> 11) as f64 / (1u64 << 53) as f64;
    let u = u.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON);
    -f64::from(node.weight) / u.ln()
}

impl Strategy for Rendezvous {
    fn name(&self) -> &'static str {
        "hrw"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        self.nodes.store(Arc::new(nodes.to_vec()));
    }

    fn pick(&self, key: &[u8]) -> Option<Pick> {
        self.nodes
            .load()
            .iter()
            .map(|n| (score(key, n), n))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, n)| Pick::plain(n.id.clone()))
    }
}
