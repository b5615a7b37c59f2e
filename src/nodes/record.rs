//! What a node is to the rest of the balancer: its state and its record in
//! the registry. Plain data with no dependency, so the store can persist it
//! and everything above can speak of it.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Takes new sessions and presses.
    Up,
    /// Failed: no traffic until it is healthy again and wiped.
    Down,
    /// Being removed: no new sessions; its sessions are being archived.
    Draining,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Draining => "draining",
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "up" => Ok(NodeState::Up),
            "down" => Ok(NodeState::Down),
            "draining" => Ok(NodeState::Draining),
            _ => Err(()),
        }
    }
}

/// A node as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub address: String,
    pub name: String,
    pub weight: u32,
    pub state: NodeState,
    pub active_sessions: i64,
    /// The instance id the node reported when it was last wiped, if any:
    /// a node reporting another one restarted and lost its counts.
    pub instance: Option<String>,
    /// Why the node is down, when it is.
    pub reason: Option<String>,
    /// Its number (Postgres assigns it): session mappings name their node
    /// by it.
    pub number: u64,
}
