//! Round-robin and smooth weighted round-robin.

use std::collections::HashMap;

use balancing::{Node, RoundRobin, SmoothWeighted, Strategy, MAX_CYCLE, MAX_WEIGHT};
use proptest::prelude::*;

fn nodes(ids: &[&str]) -> Vec<Node> {
    ids.iter().map(|id| Node::unweighted(id)).collect()
}

fn picks(s: &dyn Strategy, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| s.pick(b"").unwrap().node().to_string())
        .collect()
}

#[test]
fn round_robin_cycles_in_strict_order() {
    let rr = RoundRobin::new();
    rr.set_nodes(&nodes(&["A1", "A2", "A3"]));
    let expected: Vec<String> = (0..30).map(|i| format!("A{}", i % 3 + 1)).collect();
    assert_eq!(picks(&rr, 30), expected);
}

#[test]
fn round_robin_counts_differ_by_at_most_one_after_1000_picks() {
    let rr = RoundRobin::new();
    rr.set_nodes(&nodes(&["a", "b", "c"]));
    let mut counts: HashMap<String, usize> = HashMap::new();
    for node in picks(&rr, 1000) {
        *counts.entry(node).or_default() += 1;
    }
    let (min, max) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(max - min <= 1, "{counts:?}");
}

#[test]
fn removing_a_node_mid_way_keeps_the_strict_cycle_over_the_rest() {
    let rr = RoundRobin::new();
    rr.set_nodes(&nodes(&["A1", "A2", "A3"]));
    assert_eq!(picks(&rr, 4), ["A1", "A2", "A3", "A1"]);
    rr.set_nodes(&nodes(&["A1", "A3"])); // A2 was due next
    assert_eq!(picks(&rr, 5), ["A3", "A1", "A3", "A1", "A3"]);
    rr.set_nodes(&nodes(&["A1", "A3", "A4"]));
    assert_eq!(picks(&rr, 4), ["A1", "A3", "A4", "A1"]);
}

#[test]
fn an_empty_set_picks_nothing() {
    let rr = RoundRobin::new();
    assert!(rr.pick(b"").is_none());
    rr.set_nodes(&nodes(&["a"]));
    rr.set_nodes(&[]);
    assert!(rr.pick(b"").is_none());
}

#[test]
fn smooth_weighted_five_one_one_interleaves_like_nginx() {
    let wrr = SmoothWeighted::new();
    wrr.set_nodes(&[
        Node::new("a", 5).unwrap(),
        Node::unweighted("b"),
        Node::unweighted("c"),
    ]);
    for _ in 0..3 {
        assert_eq!(picks(&wrr, 7), ["a", "a", "b", "a", "c", "a", "a"]);
    }
}

#[test]
fn smooth_weighted_keeps_exact_proportions_over_whole_cycles() {
    let wrr = SmoothWeighted::new();
    let weights = [("a", 3), ("b", 2), ("c", 7), ("d", 1)];
    wrr.set_nodes(
        &weights
            .iter()
            .map(|(id, w)| Node::new(id, *w).unwrap())
            .collect::<Vec<_>>(),
    );
    let cycle: usize = weights.iter().map(|(_, w)| *w as usize).sum();
    for cycles in [1, 2, 5] {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for node in picks(&wrr, cycle * cycles) {
            *counts.entry(node).or_default() += 1;
        }
        for (id, w) in weights {
            assert_eq!(counts[id], w as usize * cycles, "{counts:?}");
        }
    }
}

#[test]
fn round_robin_shared_by_threads_gives_every_node_its_exact_share() {
    let rr = RoundRobin::new();
    rr.set_nodes(&nodes(&["a", "b", "c", "d"]));
    let counts: Vec<HashMap<String, usize>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let mut counts = HashMap::new();
                    for node in picks(&rr, 1000) {
                        *counts.entry(node).or_insert(0) += 1;
                    }
                    counts
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    for id in ["a", "b", "c", "d"] {
        let total: usize = counts.iter().map(|c| c.get(id).copied().unwrap_or(0)).sum();
        assert_eq!(total, 2000, "{id}: {counts:?}");
    }
}

#[test]
fn smooth_weighted_reduces_weights_by_their_common_divisor() {
    let wrr = SmoothWeighted::new();
    wrr.set_nodes(&[
        Node::new("a", 500).unwrap(),
        Node::new("b", 100).unwrap(),
        Node::new("c", 100).unwrap(),
    ]);
    assert_eq!(wrr.cycle_len(), 7);
    assert_eq!(picks(&wrr, 7), ["a", "a", "b", "a", "c", "a", "a"]);
}

#[test]
fn smooth_weighted_heavy_sets_keep_each_share_within_one_turn_per_cycle() {
    let weights: Vec<u32> = (0..40).map(|i| MAX_WEIGHT - i * 37).collect();
    let wrr = SmoothWeighted::new();
    wrr.set_nodes(
        &weights
            .iter()
            .enumerate()
            .map(|(i, w)| Node::new(&format!("n{i}"), *w).unwrap())
            .collect::<Vec<_>>(),
    );
    let cycle = wrr.cycle_len();
    assert!(cycle <= MAX_CYCLE, "cycle of {cycle}");
    let seen = picks(&wrr, cycle);
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    for (i, w) in weights.iter().enumerate() {
        let id = format!("n{i}");
        let got = seen.iter().filter(|s| **s == id).count() as f64;
        let want = cycle as f64 * f64::from(*w) / total as f64;
        assert!(
            (got - want).abs() <= 1.0 + want * 1e-3,
            "{id}: {got} turns, share {want:.1}"
        );
    }
}

proptest! {
    /// Over any node set, n * k picks give each node exactly k, in a cycle
    /// that never repeats a node before all others had a turn.
    #[test]
    fn round_robin_is_a_strict_cycle(n in 1usize..20, k in 1usize..10) {
        let ids: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let rr = RoundRobin::new();
        rr.set_nodes(&ids.iter().map(|id| Node::unweighted(id)).collect::<Vec<_>>());
        let seen = picks(&rr, n * k);
        for window in seen.chunks(n) {
            let mut sorted = window.to_vec();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), n);
        }
    }

    /// After removing any subset, the cycle continues over the survivors
    /// without serving one twice before the others.
    #[test]
    fn round_robin_stays_strict_after_removals(n in 2usize..15, before in 0usize..30, keep in proptest::collection::vec(any::<bool>(), 15)) {
        let ids: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let rr = RoundRobin::new();
        rr.set_nodes(&ids.iter().map(|id| Node::unweighted(id)).collect::<Vec<_>>());
        picks(&rr, before);
        let survivors: Vec<Node> = ids.iter().zip(&keep).filter(|(_, k)| **k).map(|(id, _)| Node::unweighted(id)).collect();
        prop_assume!(!survivors.is_empty());
        rr.set_nodes(&survivors);
        let seen = picks(&rr, survivors.len() * 3);
        for window in seen.chunks(survivors.len()) {
            let mut sorted = window.to_vec();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), survivors.len());
        }
    }

    /// Smooth WRR: over one cycle each node gets exactly its weight and no
    /// node gets two turns in a row unless its weight exceeds everyone
    /// else's combined.
    #[test]
    fn smooth_weighted_proportions_hold_for_any_weights(weights in proptest::collection::vec(1u32..20, 1..8)) {
        let wrr = SmoothWeighted::new();
        let nodes: Vec<Node> = weights.iter().enumerate().map(|(i, w)| Node::new(&format!("n{i}"), *w).unwrap()).collect();
        wrr.set_nodes(&nodes);
        let total: u32 = weights.iter().sum();
        let seen = picks(&wrr, total as usize);
        for (i, w) in weights.iter().enumerate() {
            let id = format!("n{i}");
            prop_assert_eq!(seen.iter().filter(|s| **s == id).count(), *w as usize);
        }
    }
}
