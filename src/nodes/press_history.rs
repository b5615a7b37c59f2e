//! The last five minutes of presses this replica forwarded to each node,
//! sampled every two seconds: what the status page draws, so that a tab
//! opened now shows the minutes before it (a page that kept its own history
//! showed a dot until it had polled for a while).
//!
//! A sample is each node's running total ([`NodeMetrics::forwarded`]); the
//! page turns neighbouring samples into rates. Memory is bounded by the
//! window: 150 samples of one total per node.
//!
//! [`NodeMetrics::forwarded`]: super::link::NodeMetrics::forwarded

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::NodeTable;

/// How often the totals are sampled; the page polls at the same pace.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// How far back the history reaches.
pub const WINDOW: Duration = Duration::from_secs(5 * 60);

/// One sampling: wall time (ms) and each node's total then.
struct Sample {
    at_ms: i64,
    totals: Vec<(Arc<str>, u64)>,
}

/// One node's samples, oldest first: `(wall ms, presses forwarded so far)`.
#[derive(Debug, PartialEq, Eq)]
pub struct NodeSeries {
    pub address: Arc<str>,
    pub points: Vec<(i64, u64)>,
}

pub struct PressHistory {
    table: Arc<NodeTable>,
    samples: Mutex<VecDeque<Sample>>,
}

impl PressHistory {
    pub fn new(table: Arc<NodeTable>) -> Self {
        Self {
            table,
            samples: Mutex::new(VecDeque::new()),
        }
    }

    /// Samples every node in the view now, and forgets what fell out of
    /// the window.
    pub fn sample(&self, at_ms: i64) {
        let totals = self
            .table
            .all()
            .iter()
            .map(|entry| {
                (
                    Arc::from(entry.address.as_str()),
                    entry.link.metrics.forwarded(),
                )
            })
            .collect();
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.push_back(Sample { at_ms, totals });
        let oldest = at_ms - WINDOW.as_millis() as i64;
        while samples.front().is_some_and(|s| s.at_ms < oldest) {
            samples.pop_front();
        }
    }

    /// The samples of every node now in the view (a removed node's are not
    /// shown), in the view's order.
    pub fn series(&self) -> Vec<NodeSeries> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        self.table
            .all()
            .iter()
            .map(|entry| NodeSeries {
                address: Arc::from(entry.address.as_str()),
                points: samples
                    .iter()
                    .filter_map(|sample| {
                        let (_, total) = sample
                            .totals
                            .iter()
                            .find(|(address, _)| **address == *entry.address)?;
                        Some((sample.at_ms, *total))
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{NodeRecord, NodeState};

    fn record(address: &str) -> NodeRecord {
        NodeRecord {
            address: address.into(),
            name: address.into(),
            weight: 1,
            state: NodeState::Up,
            active_sessions: 0,
            instance: None,
            reason: None,
            held_down: false,
            number: 1,
            offers: Default::default(),
            epoch: 0,
        }
    }

    fn presses(table: &NodeTable, address: &str, n: usize) {
        let entry = table.get(address).unwrap();
        for _ in 0..n {
            entry.link.metrics.served();
        }
    }

    #[test]
    fn each_node_s_totals_are_kept_for_the_window_and_no_longer() {
        let table = Arc::new(NodeTable::new(8));
        table.upsert(&record("http://a:1"));
        let history = PressHistory::new(table.clone());
        history.sample(0);
        presses(&table, "http://a:1", 3);
        history.sample(2_000);
        table.upsert(&record("http://b:1"));
        presses(&table, "http://b:1", 1);
        let window = WINDOW.as_millis() as i64;
        history.sample(window);

        let series = history.series();
        assert_eq!(series[0].points, vec![(0, 0), (2_000, 3), (window, 3)]);
        // A node that joined later has the samples taken since.
        assert_eq!(series[1].points, vec![(window, 1)]);

        history.sample(window + 2_000);
        let series = history.series();
        assert_eq!(
            series[0].points.first(),
            Some(&(2_000, 3)),
            "the first sample fell out"
        );
    }

    #[test]
    fn a_node_removed_from_the_view_is_not_shown() {
        let table = Arc::new(NodeTable::new(8));
        table.upsert(&record("http://a:1"));
        table.upsert(&record("http://b:1"));
        let history = PressHistory::new(table.clone());
        history.sample(0);
        table.remove("http://a:1");
        let addresses: Vec<_> = history.series().into_iter().map(|s| s.address).collect();
        assert_eq!(addresses, vec![Arc::from("http://b:1")]);
    }
}
