//! The numbers a load experiment reports, as plain functions over what was
//! measured (tested against hand-computed cases).

use std::collections::{BTreeMap, HashMap, HashSet};

/// Mean of the per-node counts.
pub fn mean(counts: &[f64]) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    counts.iter().sum::<f64>() / counts.len() as f64
}

/// Population variance of the per-node counts.
pub fn variance(counts: &[f64]) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    let m = mean(counts);
    counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / counts.len() as f64
}

/// Standard deviation as a percentage of the mean (the coefficient of
/// variation, in %): 0 is a perfectly even spread.
pub fn std_pct(counts: &[f64]) -> f64 {
    let m = mean(counts);
    if m == 0.0 {
        return 0.0;
    }
    variance(counts).sqrt() / m * 100.0
}

/// Largest minus smallest count.
pub fn spread(counts: &[f64]) -> f64 {
    let max = counts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = counts.iter().copied().fold(f64::INFINITY, f64::min);
    if counts.is_empty() {
        0.0
    } else {
        max - min
    }
}

/// Share of users (or sessions) always served by one node, from every
/// (user, node) answer seen. Users with no answer do not count.
pub fn stickiness<U: Eq + std::hash::Hash, N: Eq + std::hash::Hash>(served: &[(U, N)]) -> f64 {
    let mut nodes_by_user: HashMap<&U, HashSet<&N>> = HashMap::new();
    for (user, node) in served {
        nodes_by_user.entry(user).or_default().insert(node);
    }
    if nodes_by_user.is_empty() {
        return 0.0;
    }
    let sticky = nodes_by_user
        .values()
        .filter(|nodes| nodes.len() == 1)
        .count();
    sticky as f64 / nodes_by_user.len() as f64
}

/// The `p`-th percentile (0..=100) by the nearest-rank method: the smallest
/// value with at least p % of the values at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    pub fn of(samples_ms: &[f64]) -> Self {
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            mean: mean(&sorted),
            p50: percentile(&sorted, 50.0),
            p95: percentile(&sorted, 95.0),
            p99: percentile(&sorted, 99.0),
            max: sorted.last().copied().unwrap_or(0.0),
        }
    }
}

/// Count per node, in name order.
pub fn per_node<'a>(nodes: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for node in nodes {
        *counts.entry(node.to_owned()).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_variance_std_and_spread_match_hand_computed_values() {
        let counts = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&counts), 5.0);
        assert_eq!(variance(&counts), 4.0);
        assert!((std_pct(&counts) - 40.0).abs() < 1e-9); // sd 2 of mean 5
        assert_eq!(spread(&counts), 7.0);
        let even = [667.0, 667.0, 666.0];
        assert_eq!(spread(&even), 1.0);
        assert!((variance(&even) - 2.0 / 9.0).abs() < 1e-9);
        assert_eq!(std_pct(&[0.0, 0.0]), 0.0);
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(spread(&[]), 0.0);
    }

    #[test]
    fn stickiness_counts_users_seen_on_one_node_only() {
        let served = [
            ("u1", "a"),
            ("u1", "a"),
            ("u2", "a"),
            ("u2", "b"),
            ("u3", "c"),
            ("u4", "b"),
            ("u4", "b"),
        ];
        assert_eq!(stickiness(&served), 0.75);
        assert_eq!(stickiness::<&str, &str>(&[]), 0.0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 50.0), 50.0);
        assert_eq!(percentile(&sorted, 95.0), 95.0);
        assert_eq!(percentile(&sorted, 99.0), 99.0);
        assert_eq!(percentile(&sorted, 100.0), 100.0);
        assert_eq!(percentile(&sorted, 0.0), 1.0);
        let small = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&small, 50.0), 20.0);
        assert_eq!(percentile(&small, 95.0), 40.0);
        let l = Latency::of(&[3.0, 1.0, 2.0]);
        assert_eq!((l.mean, l.p50, l.max), (2.0, 2.0, 3.0));
    }

    #[test]
    fn per_node_counts_in_name_order() {
        let counts = per_node(["b", "a", "b"]);
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [("a".into(), 1), ("b".into(), 2)]
        );
    }
}
