//! Least-connections: the node with the fewest requests in flight. The
//! request counts until its [`Pick`] drops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::load::{InFlight, LoadTracker};
use crate::{Node, NodeId, Pick, Strategy};

#[derive(Debug, Default)]
pub struct LeastConnections {
    tracker: LoadTracker,
    nodes: RwLock<Vec<(NodeId, Arc<AtomicUsize>)>>,
    /// Where ties start to be broken, moved on every pick, so equal loads
    /// spread instead of all landing on the first node.
    rotation: AtomicUsize,
}

impl LeastConnections {
    pub fn new() -> Self {
        Self::default()
    }

    /// Shares in-flight counts with other users of `tracker`.
    pub fn with_tracker(tracker: LoadTracker) -> Self {
        Self {
            tracker,
            ..Self::default()
        }
    }

    pub fn tracker(&self) -> &LoadTracker {
        &self.tracker
    }
}

impl Strategy for LeastConnections {
    fn name(&self) -> &'static str {
        "lc"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        let resolved = nodes
            .iter()
            .map(|n| (n.id.clone(), self.tracker.counter(&n.id)))
            .collect();
        *self.nodes.write().unwrap_or_else(|e| e.into_inner()) = resolved;
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let nodes = self.nodes.read().unwrap_or_else(|e| e.into_inner());
        let len = nodes.len();
        if len == 0 {
            return None;
        }
        let start = self.rotation.fetch_add(1, Ordering::Relaxed) % len;
        let (id, counter) = (0..len)
            .map(|i| &nodes[(start + i) % len])
            .min_by_key(|(_, c)| c.load(Ordering::Acquire))?;
        Some(Pick::counted(id.clone(), InFlight::new(counter.clone())))
    }
}
