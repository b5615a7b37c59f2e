//! This replica's cache of session mappings (design.md §4.9, §4.11): an
//! existing session costs no Redis round trip once cached.
//!
//! Why a cached mapping can be trusted (the argument in full is in
//! `docs/design.md`, "The mapping cache"): every change of a live session's
//! node or base happens under a fence on its node, and lowering that fence
//! moves the node's clean mark on this replica; an entry remembers the
//! mark it was read at and is void once its node was cleaned since. That
//! needs this replica to follow fences, so the cache is used only while the
//! lease is fresh ([`Lease`]); cleaners wait for our ack, or wait out every
//! replica whose lease may still be fresh. Expiry is checked here, from the
//! cached expiry time.
//!
//! Beside each mapping it keeps the highest total this replica answered
//! for that placement: when its node dies, the failover's fence asks for
//! it ([`Shown`]) and archives it on the node's behalf (design.md,
//! Failover), so a node's death loses no click a user was shown.
//!
//! An entry is 48 bytes beside its id (docs/benchmarks.md, "The mapping
//! cache at 157 bytes a session"): the node is a number of this cache's
//! own ([`NodeNames`]), not a copy of its address, and the mark is kept in
//! 32 bits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use dashmap::DashMap;

use crate::lifecycle::fence::{Lease, Shown};
use crate::store::{HandedOver, Mapping};

/// Most entries kept: past it new mappings are not cached (they are read
/// from Redis, as without a cache) until expired ones are purged.
pub const MAX_ENTRIES: usize = 2_000_000;

struct Cached {
    /// The node's number in [`NodeNames`].
    node: u32,
    /// The table's clean mark read before the mapping was. One past
    /// `u32::MAX` (four billion cleans into this process's life) is kept
    /// as `u32::MAX`: earlier than it was, so any clean since voids the
    /// entry (as if it had been read before that clean), never the other
    /// way round; the cache then serves less, and keeps what was shown.
    mark: u32,
    base: i64,
    expires_at_ms: i64,
    /// The highest total answered for this placement (0: none yet).
    shown: AtomicI64,
}

/// The addresses of the nodes cached entries name, each numbered once
/// (numbers are never reused: a node removed and added again keeps its
/// number). A handful of nodes against a million entries, so an entry
/// keeps the number and not the address.
#[derive(Default)]
struct NodeNames {
    names: Vec<Arc<str>>,
    numbers: HashMap<Arc<str>, u32>,
}

pub struct MappingCache {
    entries: DashMap<Box<str>, Cached>,
    nodes: RwLock<NodeNames>,
    lease: Arc<Lease>,
}

impl MappingCache {
    pub fn new(lease: Arc<Lease>) -> Self {
        Self {
            entries: DashMap::new(),
            nodes: RwLock::default(),
            lease,
        }
    }

    /// This replica's lease, whose contact presses stamp.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The cached mapping of `id` and the clean mark it was read at, if the lease
    /// is fresh and the session has not expired. The caller still checks
    /// that its node was not cleaned since that mark.
    pub fn get(&self, id: &str, now_ms: i64) -> Option<(Mapping, u64)> {
        if !self.lease.is_fresh() {
            return None;
        }
        let cached = self.entries.get(id)?;
        if cached.expires_at_ms <= now_ms {
            return None;
        }
        let node = self.names().names.get(cached.node as usize)?.to_string();
        let mapping = Mapping {
            node,
            base: cached.base,
            expires_at_ms: cached.expires_at_ms,
        };
        Some((mapping, u64::from(cached.mark)))
    }

    /// Remembers a mapping read from Redis after the clean mark `mark`,
    /// keeping what was shown of the same placement (read again after a
    /// clean of its node, re-based or not).
    pub fn put(&self, id: &str, mapping: &Mapping, mark: u64) {
        let mark = u32::try_from(mark).unwrap_or(u32::MAX);
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(id) {
            return;
        }
        let node = self.number_of(&mapping.node);
        let shown = self
            .entries
            .get(id)
            .filter(|cached| cached.node == node && cached.expires_at_ms == mapping.expires_at_ms)
            .map_or(0, |cached| cached.shown.load(Ordering::Relaxed));
        self.entries.insert(
            id.into(),
            Cached {
                node,
                mark,
                base: mapping.base,
                expires_at_ms: mapping.expires_at_ms,
                shown: AtomicI64::new(shown),
            },
        );
    }

    /// A 200 answer of `total` for the placement `mapping`: kept if it is
    /// the placement cached and the highest answered for it.
    pub fn answered(&self, id: &str, mapping: &Mapping, total: i64) {
        if let Some(cached) = self.entries.get(id) {
            if self.same_placement(&cached, mapping) {
                cached.shown.fetch_max(total, Ordering::Relaxed);
            }
        }
    }

    pub fn forget(&self, id: &str) {
        self.entries.remove(id);
    }

    /// Drops entries whose session expired by `now_ms` (and what was shown
    /// of them: an expired session is archived by its expiry's clean);
    /// returns how many.
    pub fn purge_expired(&self, now_ms: i64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, cached| cached.expires_at_ms > now_ms);
        before.saturating_sub(self.entries.len())
    }

    /// One placement of a session, whatever its base: a session placed anew
    /// ends later (placements are a fence apart), a re-based one keeps its
    /// end.
    fn same_placement(&self, cached: &Cached, mapping: &Mapping) -> bool {
        cached.expires_at_ms == mapping.expires_at_ms
            && self
                .names()
                .names
                .get(cached.node as usize)
                .is_some_and(|name| **name == *mapping.node)
    }

    fn names(&self) -> RwLockReadGuard<'_, NodeNames> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of `node`, given it the first time it is seen.
    fn number_of(&self, node: &str) -> u32 {
        if let Some(&number) = self.names().numbers.get(node) {
            return number;
        }
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&number) = nodes.numbers.get(node) {
            return number;
        }
        // Numbers count the distinct addresses this process has cached: a
        // u32 of them is beyond any registry.
        let number = nodes.names.len() as u32;
        let name: Arc<str> = node.into();
        nodes.names.push(name.clone());
        nodes.numbers.insert(name, number);
        number
    }
}

impl Shown for MappingCache {
    /// Every session cached on `node` with a total answered. O(entries):
    /// run once per failover, never on the press path.
    fn shown_on(&self, node: &str) -> Vec<HandedOver> {
        let Some(&number) = self.names().numbers.get(node) else {
            return Vec::new();
        };
        self.entries
            .iter()
            .filter(|cached| cached.node == number)
            .filter_map(|cached| {
                let total = cached.shown.load(Ordering::Relaxed);
                (total > 0).then(|| HandedOver {
                    session: cached.key().to_string(),
                    expires_at_ms: cached.expires_at_ms,
                    total,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::silence::Silence;
    use std::time::Duration;

    /// A cache whose lease was just renewed (it serves mappings).
    fn cache() -> MappingCache {
        let lease = Lease::new(Silence::new(Duration::from_secs(2)));
        lease.renew(std::time::Instant::now());
        MappingCache::new(Arc::new(lease))
    }

    fn mapping(node: &str, base: i64, expires_at_ms: i64) -> Mapping {
        Mapping {
            node: node.to_owned(),
            base,
            expires_at_ms,
        }
    }

    #[test]
    fn the_highest_total_answered_of_a_placement_is_handed_over_for_its_node() {
        let cache = cache();
        let placed = mapping("http://a", 3, 1_000);
        cache.put("s1", &placed, 0);
        cache.answered("s1", &placed, 5);
        cache.answered("s1", &placed, 4);
        cache.put("s2", &mapping("http://b", 0, 1_000), 0);
        cache.answered("s2", &mapping("http://b", 0, 1_000), 9);
        let shown = cache.shown_on("http://a");
        assert_eq!(
            shown,
            [HandedOver {
                session: "s1".into(),
                expires_at_ms: 1_000,
                total: 5
            }]
        );
    }

    #[test]
    fn a_placement_read_again_keeps_what_was_shown_and_a_new_one_starts_afresh() {
        let cache = cache();
        cache.put("s1", &mapping("http://a", 0, 1_000), 0);
        cache.answered("s1", &mapping("http://a", 0, 1_000), 5);
        // Re-based by a clean of its node: the same placement.
        cache.put("s1", &mapping("http://a", 5, 1_000), 1);
        assert_eq!(cache.shown_on("http://a")[0].total, 5);
        // An answer for another placement than the one cached is not kept.
        cache.answered("s1", &mapping("http://a", 0, 2_000), 9);
        assert_eq!(cache.shown_on("http://a")[0].total, 5);
        // Placed anew: nothing shown of it yet.
        cache.put("s1", &mapping("http://a", 5, 2_000), 2);
        assert!(cache.shown_on("http://a").is_empty());
    }

    #[test]
    fn a_mapping_comes_back_with_its_node_base_end_and_mark() {
        let cache = cache();
        cache.put("s1", &mapping("http://a", 3, 1_000), 7);
        cache.put("s2", &mapping("http://b", 0, 2_000), 8);
        cache.put("s3", &mapping("http://a", 1, 3_000), 9);
        assert_eq!(cache.get("s1", 0), Some((mapping("http://a", 3, 1_000), 7)));
        assert_eq!(cache.get("s2", 0), Some((mapping("http://b", 0, 2_000), 8)));
        assert_eq!(cache.get("s3", 0), Some((mapping("http://a", 1, 3_000), 9)));
        assert_eq!(cache.get("s2", 2_000), None, "expired");
    }

    #[test]
    fn a_mark_past_32_bits_is_kept_as_an_earlier_one() {
        let cache = cache();
        let placed = mapping("http://a", 0, 1_000);
        cache.put("s1", &placed, 1);
        cache.answered("s1", &placed, 4);
        cache.put("s1", &placed, u64::from(u32::MAX) + 7);
        // Earlier than the truth: a clean since u32::MAX voids it too.
        assert_eq!(cache.get("s1", 0), Some((placed, u64::from(u32::MAX))));
        assert_eq!(cache.shown_on("http://a")[0].total, 4);
    }
}
