//! Least-connections: the node with the fewest requests in flight. The
//! request counts until its [`Pick`] drops.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::load::{CountedNodes, LoadTracker};
use crate::{Node, Pick, Strategy};

/// The node with the fewest requests in flight (ties rotate).
#[derive(Debug, Default)]
pub struct LeastConnections {
    tracker: LoadTracker,
    nodes: CountedNodes,
    /// Where ties start to be broken, moved on every pick, so equal loads
    /// spread instead of all landing on the first node.
    rotation: AtomicUsize,
}

impl LeastConnections {
    /// With counts of its own.
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

    /// The in-flight counts it decides on.
    pub fn tracker(&self) -> &LoadTracker {
        &self.tracker
    }
}

impl Strategy for LeastConnections {
    fn name(&self) -> &'static str {
        "lc"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        self.nodes.set(&self.tracker, nodes);
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        self.nodes.pick(|len, load| {
            let start = self.rotation.fetch_add(1, Ordering::Relaxed) % len.max(1);
            (0..len).map(|i| (start + i) % len).min_by_key(|&i| load(i))
        })
    }
}
