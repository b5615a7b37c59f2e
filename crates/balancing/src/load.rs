//! In-flight counts per node, shared by the load-aware strategies and by
//! whoever sends the requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;

use crate::NodeId;

/// Per-node in-flight counters. Cheap to clone; clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct LoadTracker {
    counters: Arc<RwLock<HashMap<NodeId, Arc<AtomicUsize>>>>,
}

impl LoadTracker {
    /// No counts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The node's counter, created at zero on first use.
    pub fn counter(&self, node: &NodeId) -> Arc<AtomicUsize> {
        if let Some(c) = self
            .counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
        {
            return c.clone();
        }
        self.counters
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.clone())
            .or_default()
            .clone()
    }

    /// Requests in flight on `node` now (0 for a node never counted).
    pub fn load(&self, node: &NodeId) -> usize {
        self.counters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
            .map(|c| c.load(Ordering::Acquire))
            .unwrap_or(0)
    }

    /// Counts one request in flight on `node` until the guard drops.
    pub fn start(&self, node: &NodeId) -> InFlight {
        InFlight::new(self.counter(node))
    }
}

/// One request in flight; dropping it (even by cancellation or unwinding)
/// releases the slot exactly once.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub(crate) fn new(counter: Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(counter)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A node set with each node's in-flight counter resolved once, for the
/// load-aware strategies: choosing reads plain atomics, no map lookups, and
/// the set is swapped whole, so a pick takes no lock.
#[derive(Debug, Default)]
pub(crate) struct CountedNodes(ArcSwap<Vec<(NodeId, Arc<AtomicUsize>)>>);

impl CountedNodes {
    pub(crate) fn set(&self, tracker: &LoadTracker, nodes: &[crate::Node]) {
        let resolved = nodes
            .iter()
            .map(|n| (n.id.clone(), tracker.counter(&n.id)))
            .collect();
        self.0.store(Arc::new(resolved));
    }

    /// Picks the node `choose` returns, given the number of nodes and each
    /// node's current load by index, and counts the request on it.
    pub(crate) fn pick(
        &self,
        choose: impl FnOnce(usize, &dyn Fn(usize) -> usize) -> Option<usize>,
    ) -> Option<crate::Pick> {
        let nodes = self.0.load();
        let load = |i: usize| nodes[i].1.load(Ordering::Acquire);
        let (id, counter) = nodes.get(choose(nodes.len(), &load)?)?;
        Some(crate::Pick::counted(
            id.clone(),
            InFlight::new(counter.clone()),
        ))
    }
}
