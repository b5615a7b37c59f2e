//! Round-robin in strict order, kept strict across membership changes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::{Node, NodeId, Pick, Strategy};

/// Round-robin in strict order, ignoring weights.
#[derive(Debug, Default)]
pub struct RoundRobin {
    /// Swapped whole on a membership change; a pick only bumps its counter.
    rotation: ArcSwap<Rotation>,
}

#[derive(Debug, Default)]
struct Rotation {
    nodes: Vec<NodeId>,
    /// Picks made from this rotation, offset by where it started: the next
    /// pick is `nodes[next % len]`.
    next: AtomicUsize,
}

impl RoundRobin {
    /// An empty rotation; give it nodes with [`Strategy::set_nodes`](crate::Strategy::set_nodes).
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }

    /// The cycle resumes at the first surviving node at or after the one
    /// that was due next, so no node is skipped or served twice in a row
    /// because another left or joined. (A pick racing the change may still
    /// be served from the old rotation: at most one extra turn, once.)
    fn set_nodes(&self, nodes: &[Node]) {
        let old = self.rotation.load();
        let new: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
        let len = old.nodes.len();
        let due = old.next.load(Ordering::Relaxed);
        let resume = (0..len)
            .map(|i| &old.nodes[(due + i) % len])
            .find_map(|node| new.iter().position(|n| n == node))
            .unwrap_or(0);
        self.rotation.store(Arc::new(Rotation {
            nodes: new,
            next: AtomicUsize::new(resume),
        }));
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let rotation = self.rotation.load();
        if rotation.nodes.is_empty() {
            return None;
        }
        let turn = rotation.next.fetch_add(1, Ordering::Relaxed);
        Some(Pick::plain(
            rotation.nodes[turn % rotation.nodes.len()].clone(),
        ))
    }
}
