//! Round-robin in strict order, kept strict across membership changes.

use std::sync::Mutex;

use crate::{Node, NodeId, Pick, Strategy};

/// Round-robin in strict order, ignoring weights.
#[derive(Debug, Default)]
pub struct RoundRobin {
    /// A std mutex: held for a few instructions, never across an await.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    nodes: Vec<NodeId>,
    /// Index of the node the next pick returns.
    next: usize,
}

impl RoundRobin {
    /// An empty rotation; give it nodes with [`Strategy::set_nodes`](crate::Strategy::set_nodes).
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }

    /// The cycle resumes at the first surviving node at or after the one
    /// that was due next, so no node is skipped or served twice in a row
    /// because another left or joined.
    fn set_nodes(&self, nodes: &[Node]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let new: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
        let len = state.nodes.len();
        let resume = (0..len)
            .map(|i| &state.nodes[(state.next + i) % len])
            .find_map(|due| new.iter().position(|n| n == due))
            .unwrap_or(0);
        state.nodes = new;
        state.next = resume;
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.nodes.is_empty() {
            return None;
        }
        let node = state.nodes[state.next % state.nodes.len()].clone();
        state.next = (state.next + 1) % state.nodes.len();
        Some(Pick::plain(node))
    }
}
