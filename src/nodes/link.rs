//! How presses reach one node: its press URI, its own connections (plain
//! `http://` nodes), this replica's limit on presses in flight to it and
//! their queue, and its press metrics. What changes with traffic, apart
//! from the view's state (`table.rs`) and the health evidence
//! (`evidence.rs`).

use http::Uri;

use super::limit::InFlightLimit;
use super::pool::PressPool;

#[derive(Debug)]
pub struct Link {
    /// `http://host:port/press`, parsed once so forwarding allocates no URI.
    pub press_uri: Uri,
    /// Connections for presses, made on first use (plain HTTP nodes).
    press_pool: std::sync::OnceLock<PressPool>,
    /// This replica's limit on presses in flight to the node, and its queue.
    pub limit: InFlightLimit,
    /// This node's press metrics, registered once.
    pub metrics: NodeMetrics,
}

impl Link {
    /// `None` when the address makes no press URI.
    pub(super) fn new(address: &str, name: &str, max_in_flight: usize) -> Option<Self> {
        Some(Self {
            press_uri: format!("{address}/press").parse().ok()?,
            press_pool: std::sync::OnceLock::new(),
            limit: InFlightLimit::new(max_in_flight),
            metrics: NodeMetrics::new(address, name),
        })
    }

    /// The node's press connections, for a plain `http://` node.
    pub fn press_pool(&self, connect_timeout: std::time::Duration) -> Option<&PressPool> {
        if self.press_uri.scheme_str() != Some("http") {
            return None;
        }
        let authority = self.press_uri.authority()?;
        let port = authority.port_u16().unwrap_or(80);
        Some(self.press_pool.get_or_init(|| {
            PressPool::new(
                format!("{}:{port}", authority.host()),
                authority.as_str(),
                self.press_uri.path(),
                connect_timeout,
            )
        }))
    }

    /// Connections now carrying a press to the node, when this replica
    /// can tell (plain `http://` nodes): what the node has accepted.
    pub fn connections_busy(&self) -> Option<usize> {
        self.press_pool.get().map(|pool| pool.busy())
    }
}

/// Presses forwarded to one node, by `address` and `name`: handles
/// registered with the entry, so a press only bumps an atomic. (No per-node
/// latency histogram: a second histogram sample per press cost measurable
/// p99 in the yardstick; the press histogram covers the whole press.)
#[derive(Debug)]
pub struct NodeMetrics {
    served: metrics::Counter,
    failed: metrics::Counter,
    /// Presses forwarded, either outcome: what the status page's history
    /// samples (`nodes::press_history`); the recorder's counters cannot be
    /// read back.
    forwarded: std::sync::atomic::AtomicU64,
}

impl NodeMetrics {
    fn new(address: &str, name: &str) -> Self {
        let labels = |outcome: &'static str| {
            [
                ("address", address.to_owned()),
                ("name", name.to_owned()),
                ("outcome", outcome.to_owned()),
            ]
        };
        Self {
            served: metrics::counter!("nodes_control_node_presses_total", &labels("ok")),
            failed: metrics::counter!("nodes_control_node_presses_total", &labels("error")),
            forwarded: Default::default(),
        }
    }

    /// Counts a press the node answered with its count.
    pub fn served(&self) {
        self.served.increment(1);
        self.forwarded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a press forwarded to the node that failed.
    pub fn failed(&self) {
        self.failed.increment(1);
        self.forwarded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Presses forwarded to the node by this replica since it joined the view.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(std::sync::atomic::Ordering::Relaxed)
    }
}
