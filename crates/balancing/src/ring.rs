//! Consistent hashing on a ring of virtual nodes, optionally with bounded
//! loads (Mirrokni, Thorup, Zadimoghaddam 2018): a key goes to the first
//! node clockwise from its hash whose in-flight load is below
//! `ceil(c * (total + 1) / n)`, so no node carries more than `c` times the
//! average while keys still move as little as the plain ring allows.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::hash::hash_key;
use crate::load::{InFlight, LoadTracker};
use crate::{Node, NodeId, Pick, Strategy};

/// Most points one node puts on the ring (`virtual nodes x weight`, capped):
/// 100,000 points are 1.2 MB. A heavier node's share stops growing there.
pub const MAX_POINTS_PER_NODE: u32 = 100_000;

/// Consistent hashing on a ring of virtual nodes, optionally with bounded
/// loads.
#[derive(Debug)]
pub struct ConsistentHash {
    virtual_nodes: u32,
    /// `Some(c)`, c > 1, for bounded loads.
    bound: Option<f64>,
    tracker: LoadTracker,
    /// Swapped whole on a membership change: a pick never sees half a ring.
    ring: ArcSwap<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    /// (hash, index into `nodes`), sorted by hash.
    points: Vec<(u64, u32)>,
    nodes: Vec<(NodeId, Arc<AtomicUsize>)>,
}

impl ConsistentHash {
    /// A plain ring with `virtual_nodes` points per unit of weight.
    pub fn new(virtual_nodes: u32) -> Self {
        Self {
            virtual_nodes: virtual_nodes.max(1),
            bound: None,
            tracker: LoadTracker::new(),
            ring: ArcSwap::default(),
        }
    }

    /// A ring with bounded loads: no node above `ceil(c * average)` in flight.
    pub fn bounded(virtual_nodes: u32, c: f64, tracker: LoadTracker) -> Self {
        Self {
            bound: Some(c.max(1.0)),
            tracker,
            ..Self::new(virtual_nodes)
        }
    }

    /// The in-flight counts the bound is checked against.
    pub fn tracker(&self) -> &LoadTracker {
        &self.tracker
    }

    /// Number of points on the ring (for the benchmarks).
    pub fn points(&self) -> usize {
        self.ring.load().points.len()
    }
}

impl Strategy for ConsistentHash {
    fn name(&self) -> &'static str {
        "ch"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        let per_node = |node: &Node| {
            self.virtual_nodes
                .saturating_mul(node.weight)
                .min(MAX_POINTS_PER_NODE)
        };
        let total: usize = nodes.iter().map(|n| per_node(n) as usize).sum();
        let mut points = Vec::with_capacity(total);
        for (i, node) in nodes.iter().enumerate() {
            for v in 0..per_node(node) {
                points.push((hash_key(format!("{}#{v}", node.id).as_bytes()), i as u32));
            }
        }
        points.sort_unstable();
        let ring = Ring {
            points,
            nodes: nodes
                .iter()
                .map(|n| (n.id.clone(), self.tracker.counter(&n.id)))
                .collect(),
        };
        self.ring.store(Arc::new(ring));
    }

    fn pick(&self, key: &[u8]) -> Option<Pick> {
        let ring = self.ring.load();
        if ring.points.is_empty() {
            return None;
        }
        let h = hash_key(key);
        let start = ring.points.partition_point(|(p, _)| *p < h) % ring.points.len();
        let Some(c) = self.bound else {
            let (id, _) = &ring.nodes[ring.points[start].1 as usize];
            return Some(Pick::plain(id.clone()));
        };
        let total: usize = ring
            .nodes
            .iter()
            .map(|(_, l)| l.load(Ordering::Acquire))
            .sum();
        let capacity = (c * (total + 1) as f64 / ring.nodes.len() as f64).ceil() as usize;
        // Walk clockwise to the first node with room; some node always has
        // room since capacity * n > total.
        let chosen = (0..ring.points.len())
            .map(|i| ring.points[(start + i) % ring.points.len()].1 as usize)
            .find(|&n| ring.nodes[n].1.load(Ordering::Acquire) < capacity)
            .unwrap_or(ring.points[start].1 as usize);
        let (id, counter) = &ring.nodes[chosen];
        Some(Pick::counted(id.clone(), InFlight::new(counter.clone())))
    }
}
