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
//! rr.set_nodes(&[Node::unweighted("a"), Node::unweighted("b")]);
//! let picks: Vec<_> = (0..4).map(|_| rr.pick(b"").unwrap().node().to_string()).collect();
//! assert_eq!(picks, ["a", "b", "a", "b"]);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod draw;
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
pub use ring::{ConsistentHash, MAX_POINTS_PER_NODE};
pub use round_robin::RoundRobin;
pub use weighted::{SmoothWeighted, MAX_CYCLE};

/// A node's identity: cheap to clone, compared by value.
pub type NodeId = Arc<str>;

/// The heaviest weight a node may carry. Weight-aware strategies spend
/// memory in proportion (a hash ring holds `virtual nodes x weight` points
/// per node), so a typo of an extra digit must not build a huge table.
pub const MAX_WEIGHT: u32 = 10_000;

/// A member of the node set: an id and a weight in `1..=MAX_WEIGHT`.
///
/// Built only through [`Node::new`] (or [`Node::unweighted`]), so no
/// strategy ever sees a weight of 0, which would leave Maglev's table
/// unfillable and random selection with nothing to draw from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    id: NodeId,
    weight: u32,
}

/// Why [`Node::new`] refused a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidNode {
    /// Weight 0: a node that should take nothing is left out of the set.
    #[error("a node's weight must be at least 1")]
    ZeroWeight,
    /// A weight above [`MAX_WEIGHT`].
    #[error("a node's weight must be at most {MAX_WEIGHT}, not {0}")]
    TooHeavy(u32),
}

impl Node {
    /// A node of relative capacity `weight` (weight-aware strategies only).
    pub fn new(id: &str, weight: u32) -> Result<Self, InvalidNode> {
        match weight {
            0 => Err(InvalidNode::ZeroWeight),
            w if w > MAX_WEIGHT => Err(InvalidNode::TooHeavy(w)),
            w => Ok(Self {
                id: id.into(),
                weight: w,
            }),
        }
    }

    /// A node of weight 1.
    pub fn unweighted(id: &str) -> Self {
        Self {
            id: id.into(),
            weight: 1,
        }
    }

    /// The node's identity.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// Its relative capacity, in `1..=MAX_WEIGHT`.
    pub fn weight(&self) -> u32 {
        self.weight
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

    /// The chosen node.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// Whether this pick is counted in flight on its node.
    pub fn is_counted(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The chosen node, ending the in-flight count now.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_of_weight_zero_or_above_the_maximum_is_refused() {
        assert_eq!(Node::new("a", 0), Err(InvalidNode::ZeroWeight));
        assert_eq!(
            Node::new("a", MAX_WEIGHT + 1),
            Err(InvalidNode::TooHeavy(MAX_WEIGHT + 1))
        );
        let heaviest = Node::new("a", MAX_WEIGHT).unwrap();
        assert_eq!(
            (heaviest.id().as_ref(), heaviest.weight()),
            ("a", MAX_WEIGHT)
        );
        assert_eq!(Node::unweighted("b").weight(), 1);
    }
}
