//! Weighted random choice from a seeded generator.

use std::sync::{Mutex, RwLock};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{Node, NodeId, Pick, Strategy};

/// A node at random, in proportion to its weight.
#[derive(Debug)]
pub struct Random {
    /// Nodes with the running sum of weights up to and including each.
    nodes: RwLock<Vec<(NodeId, u64)>>,
    rng: Mutex<StdRng>,
}

impl Random {
    /// Draws from a generator seeded with `seed` (reproducible runs).
    pub fn new(seed: u64) -> Self {
        Self {
            nodes: RwLock::default(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        let mut sum = 0u64;
        let cumulative = nodes
            .iter()
            .map(|n| {
                sum += u64::from(n.weight);
                (n.id.clone(), sum)
            })
            .collect();
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) = cumulative;
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let total = nodes.last()?.1;
        let ticket = self
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .random_range(0..total);
        let i = nodes.partition_point(|(_, upto)| *upto <= ticket);
        Some(Pick::plain(nodes[i].0.clone()))
    }
}
