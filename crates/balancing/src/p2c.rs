//! Power of two choices: two distinct nodes at random, the less loaded of
//! the two wins. Nearly as even as least-connections at O(1) per pick.

use rand::Rng;

use crate::draw::Draws;
use crate::load::{CountedNodes, LoadTracker};
use crate::{Node, Pick, Strategy};

/// Power of two choices: the less loaded of two nodes drawn at random.
#[derive(Debug)]
pub struct PowerOfTwoChoices {
    tracker: LoadTracker,
    nodes: CountedNodes,
    draws: Draws,
}

impl PowerOfTwoChoices {
    /// Seeded, so a run can be reproduced.
    /// With counts of its own, draws from a generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_tracker(seed, LoadTracker::new())
    }

    /// Shares in-flight counts with other users of `tracker`.
    pub fn with_tracker(seed: u64, tracker: LoadTracker) -> Self {
        Self {
            tracker,
            nodes: CountedNodes::default(),
            draws: Draws::new(seed),
        }
    }

    /// The in-flight counts it decides on.
    pub fn tracker(&self) -> &LoadTracker {
        &self.tracker
    }
}

impl Strategy for PowerOfTwoChoices {
    fn name(&self) -> &'static str {
        "p2c"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        self.nodes.set(&self.tracker, nodes);
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        self.nodes.pick(|len, load| {
            let (a, b) = match len {
                0 => return None,
                1 => (0, 0),
                _ => {
                    let mut rng = self.draws.next();
                    let a = rng.random_range(0..len);
                    (a, (a + rng.random_range(1..len)) % len)
                }
            };
            Some(if load(b) < load(a) { b } else { a })
        })
    }
}
