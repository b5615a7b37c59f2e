//! Maglev hashing (Eisenbud et al., NSDI 2016): a lookup table of prime
//! size where every node fills slots in its own permutation order, in turns
//! proportional to its weight. Near-perfect balance (each node's share is
//! within a slot or two per turn of its weight's share) and O(1) lookups;
//! a membership change moves a few keys beyond the departed node's.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::hash::{hash_key, hash_seeded};
use crate::{Node, NodeId, Pick, Strategy};

/// The paper's small table size: prime, and much larger than the node count.
pub const DEFAULT_TABLE_SIZE: usize = 65_537;

/// Maglev hashing: a prime-sized lookup table filled in weighted turns.
#[derive(Debug)]
pub struct Maglev {
    size: usize,
    table: ArcSwap<Table>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<u32>,
    nodes: Vec<NodeId>,
}

impl Maglev {
    /// `size` should be a prime well above the number of nodes (the
    /// permutations are only full cycles for a prime size).
    /// An empty table of `size` slots (best a prime well above the number
    /// of nodes times their weights; [`DEFAULT_TABLE_SIZE`] is 65,537).
    pub fn new(size: usize) -> Self {
        Self {
            size: size.max(1),
            table: ArcSwap::default(),
        }
    }

    /// Slots owned by each node, in node order (for tests and benchmarks).
    /// Slots per node in the current table.
    pub fn shares(&self) -> Vec<(NodeId, usize)> {
        let table = self.table.load();
        let mut counts = vec![0usize; table.nodes.len()];
        for &slot in &table.slots {
            counts[slot as usize] += 1;
        }
        table.nodes.iter().cloned().zip(counts).collect()
    }
}

impl Default for Maglev {
    fn default() -> Self {
        Self::new(DEFAULT_TABLE_SIZE)
    }
}

fn populate(nodes: &[Node], size: usize) -> Vec<u32> {
    const EMPTY: u32 = u32::MAX;
    let m = size as u64;
    let perms: Vec<(u64, u64)> = nodes
        .iter()
        .map(|n| {
            let offset = hash_seeded(n.id.as_bytes(), 0x6d61676c) % m;
            let skip = if m > 1 {
                hash_seeded(n.id.as_bytes(), 0x65763031) % (m - 1) + 1
            } else {
                1
            };
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; nodes.len()];
    let mut slots = vec![EMPTY; size];
    let mut filled = 0;
    while filled < size {
        for (i, node) in nodes.iter().enumerate() {
            // A node of weight w takes w turns per round.
            for _ in 0..node.weight {
                let (offset, skip) = perms[i];
                let mut c = (offset + next[i] * skip) % m;
                while slots[c as usize] != EMPTY {
                    next[i] += 1;
                    c = (offset + next[i] * skip) % m;
                }
                slots[c as usize] = i as u32;
                next[i] += 1;
                filled += 1;
                if filled == size {
                    return slots;
                }
            }
        }
    }
    slots
}

impl Strategy for Maglev {
    fn name(&self) -> &'static str {
        "maglev"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        let table = if nodes.is_empty() {
            Table::default()
        } else {
            Table {
                slots: populate(nodes, self.size),
                nodes: nodes.iter().map(|n| n.id.clone()).collect(),
            }
        };
        self.table.store(Arc::new(table));
    }

    fn pick(&self, key: &[u8]) -> Option<Pick> {
        let table = self.table.load();
        if table.slots.is_empty() {
            return None;
        }
        let slot = table.slots[(hash_key(key) % table.slots.len() as u64) as usize];
        Some(Pick::plain(table.nodes[slot as usize].clone()))
    }
}
