//! One stable 64-bit hash (XXH3) for every key-based strategy: the same key
//! maps the same way in every process, replica and version of this crate.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The 64-bit XXH3 hash of `key`: stable across processes and versions.
pub fn hash_key(key: &[u8]) -> u64 {
    xxh3_64(key)
}

pub(crate) fn hash_seeded(key: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(key, seed)
}

/// Combines a key and a node id into one hash (rendezvous hashing).
pub(crate) fn hash_pair(key: &[u8], node: &str) -> u64 {
    hash_seeded(node.as_bytes(), hash_key(key))
}
