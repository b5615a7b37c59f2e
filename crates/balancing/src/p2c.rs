//! Power of two choices: two distinct nodes at random, the less loaded of
//! the two wins. Nearly as even as least-connections at O(1) per pick.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::load::{InFlight, LoadTracker};
use crate::{Node, NodeId, Pick, Strategy};

#[derive(Debug)]
pub struct PowerOfTwoChoices {
    tracker: LoadTracker,
    nodes: RwLock<Vec<(NodeId, Arc<AtomicUsize>)>>,
    rng: Mutex<StdRng>,
}

impl PowerOfTwoChoices {
    /// Seeded, so a run can be reproduced.
    pub fn new(seed: u64) -> Self {
        Self::with_tracker(seed, LoadTracker::new())
    }

    pub fn with_tracker(seed: u64, tracker: LoadTracker) -> Self {
        Self {
            tracker,
            nodes: RwLock::default(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    pub fn tracker(&self) -> &LoadTracker {
        &self.tracker
    }
}

impl Strategy for PowerOfTwoChoices {
    fn name(&self) -> &'static str {
        "p2c"
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
        let (a, b) = match len {
            0 => return None,
            1 => (0, 0),
            _ => {
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                let a = rng.random_range(0..len);
                let b = (a + rng.random_range(1..len)) % len;
                (a, b)
            }
        };
        let load = |i: usize| nodes[i].1.load(Ordering::Acquire);
        let winner = if load(b) < load(a) { b } else { a };
        let (id, counter) = &nodes[winner];
        Some(Pick::counted(id.clone(), InFlight::new(counter.clone())))
    }
}
