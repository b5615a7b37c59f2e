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

use dashmap::DashMap;

use crate::lifecycle::fence::Lease;
use crate::store::Mapping;
use std::sync::Arc;

/// Most entries kept: past it new mappings are not cached (they are read
/// from Redis, as without a cache) until expired ones are purged.
pub const MAX_ENTRIES: usize = 2_000_000;

#[derive(Clone)]
struct Cached {
    mapping: Mapping,
    /// The table's clean mark read before the mapping was.
    mark: u64,
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

    /// Remembers a mapping read from Redis after the clean mark `mark`.
    pub fn put(&self, id: &str, mapping: &Mapping, mark: u64) {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(id) {
            return;
        }
        self.entries.insert(
            id.to_owned(),
            Cached {
                mapping: mapping.clone(),
                mark,
            },
        );
    }

    pub fn forget(&self, id: &str) {
        self.entries.remove(id);
    }

    /// Drops entries whose session expired by `now_ms`; returns how many.
    pub fn purge_expired(&self, now_ms: i64) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, cached| cached.mapping.expires_at_ms > now_ms);
        before.saturating_sub(self.entries.len())
    }
}
