//! Weighted random choice from a seeded generator.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rand::Rng;

use crate::draw::Draws;
use crate::{Node, NodeId, Pick, Strategy};

/// A node at random, in proportion to its weight.
#[derive(Debug)]
pub struct Random {
    /// Nodes with the running sum of weights up to and including each.
    nodes: ArcSwap<Vec<(NodeId, u64)>>,
    draws: Draws,
}

impl Random {
    /// Draws from a generator seeded with `seed` (reproducible runs).
    pub fn new(seed: u64) -> Self {
        Self {
            nodes: ArcSwap::default(),
            draws: Draws::new(seed),
        }
    }
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        let mut sum = 0u64;
        let cumulative: Vec<_> = nodes
            .iter()
            .map(|n| {
                sum += u64::from(n.weight);
                (n.id.clone(), sum)
            })
            .collect();
        self.nodes.store(Arc::new(cumulative));
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let nodes = self.nodes.load();
        let total = nodes.last()?.1;
        let ticket = self.draws.next().random_range(0..total);
        let i = nodes.partition_point(|(_, upto)| *upto <= ticket);
        Some(Pick::plain(nodes[i].0.clone()))
    }
}
