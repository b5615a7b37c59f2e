//! Strategies by name, as `STRATEGY` spells them, and one constructor.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::{
    ConsistentHash, IpHash, KeyHash, LeastConnections, LoadTracker, Maglev, PowerOfTwoChoices,
    Random, Rendezvous, RoundRobin, SmoothWeighted, Strategy,
};

/// Every strategy of the crate, by the name `STRATEGY` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// `rr`: [`RoundRobin`](crate::RoundRobin).
    RoundRobin,
    /// `wrr`: [`SmoothWeighted`](crate::SmoothWeighted) round-robin.
    SmoothWeighted,
    /// `lc`: [`LeastConnections`](crate::LeastConnections).
    LeastConnections,
    /// `ch`: [`ConsistentHash`](crate::ConsistentHash), a ring with bounded loads.
    ConsistentHash,
    /// `maglev`: [`Maglev`](crate::Maglev).
    Maglev,
    /// `hrw`: [`Rendezvous`](crate::Rendezvous) (highest random weight).
    Rendezvous,
    /// `key-hash`: [`KeyHash`](crate::KeyHash).
    KeyHash,
    /// `ip-hash`: [`IpHash`](crate::IpHash).
    IpHash,
    /// `random`: [`Random`](crate::Random), weighted.
    Random,
    /// `p2c`: [`PowerOfTwoChoices`](crate::PowerOfTwoChoices).
    PowerOfTwoChoices,
}

impl StrategyKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [StrategyKind; 10] = [
        StrategyKind::RoundRobin,
        StrategyKind::SmoothWeighted,
        StrategyKind::LeastConnections,
        StrategyKind::ConsistentHash,
        StrategyKind::Maglev,
        StrategyKind::Rendezvous,
        StrategyKind::KeyHash,
        StrategyKind::IpHash,
        StrategyKind::Random,
        StrategyKind::PowerOfTwoChoices,
    ];

    /// The name `STRATEGY` and [`FromStr`] use.
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::RoundRobin => "rr",
            StrategyKind::SmoothWeighted => "wrr",
            StrategyKind::LeastConnections => "lc",
            StrategyKind::ConsistentHash => "ch",
            StrategyKind::Maglev => "maglev",
            StrategyKind::Rendezvous => "hrw",
            StrategyKind::KeyHash => "key-hash",
            StrategyKind::IpHash => "ip-hash",
            StrategyKind::Random => "random",
            StrategyKind::PowerOfTwoChoices => "p2c",
        }
    }

    /// Whether the same key always goes to the same node (for a fixed set).
    pub fn is_key_based(self) -> bool {
        matches!(
            self,
            StrategyKind::ConsistentHash
                | StrategyKind::Maglev
                | StrategyKind::Rendezvous
                | StrategyKind::KeyHash
                | StrategyKind::IpHash
        )
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A strategy name that is none of [`StrategyKind`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?}: expected one of rr, wrr, lc, ch, maglev, hrw, key-hash, ip-hash, random, p2c")]
pub struct UnknownStrategy(pub String);

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    /// The short names, and the long ones `PLACEMENT` uses.
    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "rr" | "round-robin" => StrategyKind::RoundRobin,
            "wrr" | "weighted-round-robin" => StrategyKind::SmoothWeighted,
            "lc" | "least-connections" => StrategyKind::LeastConnections,
            "ch" | "consistent-hash" => StrategyKind::ConsistentHash,
            "maglev" => StrategyKind::Maglev,
            "hrw" | "rendezvous" => StrategyKind::Rendezvous,
            "key-hash" | "hash" => StrategyKind::KeyHash,
            "ip-hash" => StrategyKind::IpHash,
            "random" => StrategyKind::Random,
            "p2c" | "power-of-two-choices" => StrategyKind::PowerOfTwoChoices,
            _ => return Err(UnknownStrategy(s.to_owned())),
        })
    }
}

/// Builds a strategy. `virtual_nodes` sizes the ring; `bound` turns the ring
/// into consistent hashing with bounded loads; load-aware strategies count
/// in `tracker`; random choices use `seed`.
pub fn build(
    kind: StrategyKind,
    virtual_nodes: u32,
    bound: Option<f64>,
    tracker: LoadTracker,
    seed: u64,
) -> Arc<dyn Strategy> {
    match kind {
        StrategyKind::RoundRobin => Arc::new(RoundRobin::new()),
        StrategyKind::SmoothWeighted => Arc::new(SmoothWeighted::new()),
        StrategyKind::LeastConnections => Arc::new(LeastConnections::with_tracker(tracker)),
        StrategyKind::ConsistentHash => match bound {
            Some(c) => Arc::new(ConsistentHash::bounded(virtual_nodes, c, tracker)),
            None => Arc::new(ConsistentHash::new(virtual_nodes)),
        },
        StrategyKind::Maglev => Arc::new(Maglev::default()),
        StrategyKind::Rendezvous => Arc::new(Rendezvous::new()),
        StrategyKind::KeyHash => Arc::new(KeyHash::new()),
        StrategyKind::IpHash => Arc::new(IpHash::new()),
        StrategyKind::Random => Arc::new(Random::new(seed)),
        StrategyKind::PowerOfTwoChoices => Arc::new(PowerOfTwoChoices::with_tracker(seed, tracker)),
    }
}
