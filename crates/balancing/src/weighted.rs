//! Smooth weighted round-robin, the nginx algorithm: every pick adds each
//! node's weight to its current value, takes the largest, and subtracts the
//! total from the winner. Deterministic, interleaved (5:1:1 gives
//! a a b a c a a), exact proportions over each cycle of `sum(weights)` picks.

use std::sync::Mutex;

use crate::{Node, NodeId, Pick, Strategy};

/// Smooth weighted round-robin (nginx's): exact shares, interleaved.
#[derive(Debug, Default)]
pub struct SmoothWeighted {
    peers: Mutex<Vec<Peer>>,
}

#[derive(Debug)]
struct Peer {
    id: NodeId,
    weight: i64,
    current: i64,
}

impl SmoothWeighted {
    /// An empty rotation; give it nodes with [`Strategy::set_nodes`](crate::Strategy::set_nodes).
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for SmoothWeighted {
    fn name(&self) -> &'static str {
        "wrr"
    }

    /// Surviving nodes keep their current value, so a weight change or a
    /// departure does not restart the sequence.
    fn set_nodes(&self, nodes: &[Node]) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let next: Vec<Peer> = nodes
            .iter()
            .map(|n| Peer {
                id: n.id.clone(),
                weight: i64::from(n.weight),
                current: peers
                    .iter()
                    .find(|p| p.id == n.id)
                    .map(|p| p.current)
                    .unwrap_or(0),
            })
            .collect();
        *peers = next;
    }

    fn pick(&self, _key: &[u8]) -> Option<Pick> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let total: i64 = peers.iter().map(|p| p.weight).sum();
        let mut best: Option<(usize, i64)> = None;
        for (i, peer) in peers.iter_mut().enumerate() {
            peer.current += peer.weight;
            // Strictly greater: ties go to the earlier node, as in nginx.
            if best.is_none_or(|(_, current)| peer.current > current) {
                best = Some((i, peer.current));
            }
        }
        let (best, _) = best?;
        peers[best].current -= total;
        Some(Pick::plain(peers[best].id.clone()))
    }
}
