//! Load-balancing strategies, as plain synchronous types behind one small,
//! object-safe trait, plus a client-side [`Balancer`] over unreliable
//! backends. No I/O: usable by any Rust program.
//!
//! Every strategy is built empty, given its node set with
//! [`Strategy::set_nodes`] (again whenever membership or weights change, at
//! run time), and asked for a node with [`Strategy::pick`]. Load-aware
//! strategies (least-connections, power of two choices, consistent hashing
//! with bounded loads) count the request as in flight until the returned
//! [`Pick`] is dropped, so counts stay right when a request future is
//! cancelled or panics.
//!
//! ```
//! use balancing::{Node, RoundRobin, Strategy};
//!
//! let rr = RoundRobin::new();
//! rr.set_nodes(&[Node::new("a", 1), Node::new("b", 1)]);
//! let picks: Vec<_> = (0..4).map(|_| rr.pick(b"").unwrap().node().to_string()).collect();
//! assert_eq!(picks, ["a", "b", "a", "b"]);
//! ```

#![forbid(unsafe_code)]

mod client;
mod hash;
mod key_hash;
mod kind;
mod least_conn;
mod load;
mod maglev;
mod p2c;
mod random;
mod rendezvous;
mod ring;
mod round_robin;
mod weighted;

use std::fmt;
use std::sync::Arc;

pub use client::{Backend, Balancer, BalancerConfig, BalancerError};
pub use hash::hash_key;
pub use key_hash::{IpHash, KeyHash};
pub use kind::{build, StrategyKind, UnknownStrategy};
pub use least_conn::LeastConnections;
pub use load::{InFlight, LoadTracker};
pub use maglev::{Maglev, DEFAULT_TABLE_SIZE};
pub use p2c::PowerOfTwoChoices;
pub use random::Random;
pub use rendezvous::Rendezvous;
pub use ring::ConsistentHash;
pub use round_robin::RoundRobin;
pub use weighted::SmoothWeighted;

/// A node's identity: cheap to clone, compared by value.
pub type NodeId = Arc<str>;

/// A member of the node set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    pub id: NodeId,
    /// Relative capacity, at least 1 (weight-aware strategies only).
    pub weight: u32,
}

impl Node {
    pub fn new(id: &str, weight: u32) -> Self {
        Self {
            id: id.into(),
            weight: weight.max(1),
        }
    }
}

/// The node chosen for one request. Load-aware strategies count the
/// request in flight on that node until this is dropped.
pub struct Pick {
    node: NodeId,
    in_flight: Option<InFlight>,
}

impl Pick {
    pub(crate) fn plain(node: NodeId) -> Self {
        Self {
            node,
            in_flight: None,
        }
    }

    pub(crate) fn counted(node: NodeId, in_flight: InFlight) -> Self {
        Self {
            node,
            in_flight: Some(in_flight),
        }
    }

    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// Whether this pick is counted in flight on its node.
    pub fn is_counted(&self) -> bool {
        self.in_flight.is_some()
    }

    pub fn into_node(self) -> NodeId {
        self.node
    }
}

impl fmt::Debug for Pick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pick")
            .field("node", &self.node)
            .field("counted", &self.in_flight.is_some())
            .finish()
    }
}

/// Picks a node for a request or key from the current node set.
pub trait Strategy: Send + Sync {
    /// Short name, as `STRATEGY` spells it.
    fn name(&self) -> &'static str;
    /// Replaces the node set. Strategies keep what state survives the change
    /// (the round-robin position, smooth-WRR current weights, in-flight counts).
    fn set_nodes(&self, nodes: &[Node]);
    /// A node for `key` (key-less strategies ignore it), or `None` when the
    /// set is empty.
    fn pick(&self, key: &[u8]) -> Option<Pick>;
}
