//! Key hash (`hash(key) mod n`) and IP hash (nginx `ip_hash`: an IPv4
//! client is keyed by its first three octets, so a /24 sticks together).
//! Simple and even, but a membership change remaps most keys: prefer the
//! ring, Maglev or rendezvous hashing when nodes come and go.

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::hash::hash_key;
use crate::{Node, NodeId, Pick, Strategy};

/// `hash(key) mod n`: even and stateless, but a change of membership moves
/// most keys.
#[derive(Debug, Default)]
pub struct KeyHash {
    nodes: ArcSwap<Vec<NodeId>>,
}

impl KeyHash {
    /// An empty key hash; give it nodes with [`Strategy::set_nodes`].
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for KeyHash {
    fn name(&self) -> &'static str {
        "key-hash"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        self.nodes
            .store(Arc::new(nodes.iter().map(|n| n.id.clone()).collect()));
    }

    fn pick(&self, key: &[u8]) -> Option<Pick> {
        let nodes = self.nodes.load();
        if nodes.is_empty() {
            return None;
        }
        let i = (hash_key(key) % nodes.len() as u64) as usize;
        Some(Pick::plain(nodes[i].clone()))
    }
}

/// [`KeyHash`] over the client address given as the key (text, e.g.
/// `192.0.2.7` or `2001:db8::1`).
#[derive(Debug, Default)]
pub struct IpHash {
    inner: KeyHash,
}

impl IpHash {
    /// An empty IP hash; give it nodes with [`Strategy::set_nodes`].
    pub fn new() -> Self {
        Self::default()
    }

    /// What an address is hashed on: the first three octets of IPv4, the
    /// whole of anything else.
    pub fn key_of(key: &[u8]) -> Vec<u8> {
        match std::str::from_utf8(key)
            .ok()
            .and_then(|s| s.trim().parse::<IpAddr>().ok())
        {
            Some(IpAddr::V4(v4)) => v4.octets()[..3].to_vec(),
            Some(IpAddr::V6(v6)) => v6.octets().to_vec(),
            None => key.to_vec(),
        }
    }
}

impl Strategy for IpHash {
    fn name(&self) -> &'static str {
        "ip-hash"
    }

    fn set_nodes(&self, nodes: &[Node]) {
        self.inner.set_nodes(nodes);
    }

    fn pick(&self, key: &[u8]) -> Option<Pick> {
        self.inner.pick(&Self::key_of(key))
    }
}
