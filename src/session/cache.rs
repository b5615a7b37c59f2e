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

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

use crate::lifecycle::fence::{Lease, Shown};
use crate::store::{HandedOver, Mapping};

/// Most entries kept: past it new mappings are not cached (they are read
/// from Redis, as without a cache) until expired ones are purged.
pub const MAX_ENTRIES: usize = 2_000_000;

struct Cached {
    mapping: Mapping,
    /// The table's clean mark read before the mapping was.
    mark: u64,
    /// The highest total answered for this placement (0: none yet).
    shown: AtomicI64,
}

pub struct MappingCache {
    entries: DashMap<String, Cached>,
    lease: Arc<Lease>,
}

impl MappingCache {
    pub fn new(lease: Arc<Lease>) -> Self {
        Self {
            entries: DashMap::new(),
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
        if cached.mapping.expires_at_ms <= now_ms {
            return None;
        }
        Some((cached.mapping.clone(), cached.mark))
    }

    /// Remembers a mapping read from Redis after the clean mark `mark`,
    /// keeping what was shown of the same placement (read again after a
    /// clean of its node, re-based or not).
    pub fn put(&self, id: &str, mapping: &Mapping, mark: u64) {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(id) {
            return;
        }
        let shown = self
            .entries
            .get(id)
            .filter(|cached| same_placement(&cached.mapping, mapping))
            .map_or(0, |cached| cached.shown.load(Ordering::Relaxed));
        self.entries.insert(
            id.to_owned(),
            Cached {
                mapping: mapping.clone(),
                mark,
                shown: AtomicI64::new(shown),
            },
        );
    }

    /// A 200 answer of `total` for the placement `mapping`: kept if it is
    /// the placement cached and the highest answered for it.
    pub fn answered(&self, id: &str, mapping: &Mapping, total: i64) {
        if let Some(cached) = self.entries.get(id) {
            if same_placement(&cached.mapping, mapping) {
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
            .retain(|_, cached| cached.mapping.expires_at_ms > now_ms);
        before.saturating_sub(self.entries.len())
    }
}

impl Shown for MappingCache {
    /// Every session cached on `node` with a total answered. O(entries):
    /// run once per failover, never on the press path.
    fn shown_on(&self, node: &str) -> Vec<HandedOver> {
        self.entries
            .iter()
            .filter(|cached| cached.mapping.node == node)
            .filter_map(|cached| {
                let total = cached.shown.load(Ordering::Relaxed);
                (total > 0).then(|| HandedOver {
                    session: cached.key().clone(),
                    expires_at_ms: cached.mapping.expires_at_ms,
                    total,
                })
            })
            .collect()
    }
}

/// One placement of a session, whatever its base: a session placed anew
/// ends later (placements are a fence apart), a re-based one keeps its end.
fn same_placement(a: &Mapping, b: &Mapping) -> bool {
    a.node == b.node && a.expires_at_ms == b.expires_at_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::silence::Silence;
    use std::time::Duration;

    fn cache() -> MappingCache {
        MappingCache::new(Arc::new(Lease::new(Silence::new(Duration::from_secs(2)))))
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
}
