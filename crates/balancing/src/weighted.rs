//! Smooth weighted round-robin, the nginx algorithm: every pick adds each
//! node's weight to its current value, takes the largest, and subtracts the
//! total from the winner. Deterministic, interleaved (5:1:1 gives
//! a a b a c a a), exact proportions over each cycle of `sum(weights)` picks.
//!
//! The sequence only depends on the weights, so it is computed once per
//! membership change, one cycle long, and a pick is a counter bump into it:
//! no lock on the request path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::{Node, NodeId, Pick, Strategy};

/// The longest cycle kept (256 KiB of indexes). Weights are first divided
/// by their greatest common divisor; a set still heavier than this is
/// scaled down in proportion, so each share is exact to within one turn in
/// this many.
pub const MAX_CYCLE: usize = 65_536;

/// Smooth weighted round-robin (nginx's): exact shares, interleaved.
#[derive(Debug, Default)]
pub struct SmoothWeighted {
    schedule: ArcSwap<Schedule>,
}

#[derive(Debug, Default)]
struct Schedule {
    nodes: Vec<NodeId>,
    /// One cycle of picks, as indexes into `nodes`.
    cycle: Vec<u32>,
    next: AtomicUsize,
}

impl SmoothWeighted {
    /// An empty rotation; give it nodes with [`Strategy::set_nodes`](crate::Strategy::set_nodes).
    pub fn new() -> Self {
        Self::default()
    }

    /// Length of the current cycle (for tests and benchmarks).
    pub fn cycle_len(&self) -> usize {
        self.schedule.load().cycle.len()
    }
}

impl Strategy for SmoothWeighted {
    fn name(&self) -> &'static str {
        "wrr"
    }

    /// A change of membership or weights starts a new cycle, as an nginx
    /// reload does.
    fn set_nodes(&self, nodes: &[Node]) {
        let weights = cycle_weights(nodes.iter().map(|n| u64::from(n.weight)).collect());
        self.schedule.store(Arc::new(Schedule {
            nodes: nodes.iter().map(|n| n.id.clone()).collect(),
            cycle: smooth_cycle(&weights),
            next: AtomicUsize::new(0),
        }));
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let schedule = self.schedule.load();
        if schedule.cycle.is_empty() {
            return None;
        }
        let turn = schedule.next.fetch_add(1, Ordering::Relaxed) % schedule.cycle.len();
        Some(Pick::plain(
            schedule.nodes[schedule.cycle[turn] as usize].clone(),
        ))
    }
}

/// The weights reduced to their smallest exact ratio, then, if their sum
/// still exceeds [`MAX_CYCLE`], scaled down in proportion (never below 1).
fn cycle_weights(weights: Vec<u64>) -> Vec<u64> {
    let divisor = weights.iter().copied().fold(0, gcd).max(1);
    let weights: Vec<u64> = weights.iter().map(|w| w / divisor).collect();
    let total: u64 = weights.iter().sum();
    if total as usize <= MAX_CYCLE {
        return weights;
    }
    let budget = (MAX_CYCLE - weights.len()) as u64;
    weights
        .iter()
        .map(|w| (w * budget / total).max(1))
        .collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One cycle of nginx's smooth weighted round-robin from the zero state.
fn smooth_cycle(weights: &[u64]) -> Vec<u32> {
    let total: i64 = weights.iter().map(|&w| w as i64).sum();
    let mut current = vec![0i64; weights.len()];
    (0..total)
        .map(|_| {
            let mut best = 0;
            for (i, w) in weights.iter().enumerate() {
                current[i] += *w as i64;
                // Strictly greater: ties go to the earlier node, as in nginx.
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            best as u32
        })
        .collect()
}
