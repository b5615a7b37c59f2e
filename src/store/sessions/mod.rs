//! Session mappings: the hot-path read and the placements of many (see
//! the layout in the module above; placing a session is `placement.rs`,
//! unmapping them `unmap.rs`).

mod closed;
mod groups;
mod placement;
mod unmap;
mod view;
mod walk;

use std::collections::HashMap;
use std::sync::Arc;

use super::{with_prelude, Context, Core, Replicas, StoreResult};
use groups::by_group;
pub(super) use view::PlacementView;

/// Session mappings and their placement: the press path's handle, and the
/// sweep's (expiry, counts, unmapping).
#[derive(Clone)]
pub struct Sessions {
    core: Arc<Core>,
    scripts: Arc<Scripts>,
    /// Asked before a session is read or placed whether the Redis is still
    /// the one that completed the registry (replicas/identity.rs).
    replicas: Replicas,
    /// Placements asked for at once go to Redis together (placement.rs).
    batchers: Arc<placement::Batchers>,
    /// On a cluster, where new sessions go (view.rs).
    view: Arc<PlacementView>,
}

struct Scripts {
    view: redis::Script,
    place: redis::Script,
    claim: redis::Script,
    unmap: redis::Script,
    drop_strays: redis::Script,
    set_counts: redis::Script,
}

impl Sessions {
    pub(super) fn new(core: Arc<Core>, replicas: Replicas, view: Arc<PlacementView>) -> Self {
        let scripts = Scripts {
            view: with_prelude(include_str!("view.lua")),
            place: with_prelude(include_str!("place.lua")),
            claim: with_prelude(include_str!("claim.lua")),
            unmap: with_prelude(include_str!("unmap.lua")),
            drop_strays: with_prelude(include_str!("drop_strays.lua")),
            set_counts: with_prelude(include_str!("set_counts.lua")),
        };
        Self {
            core,
            scripts: Arc::new(scripts),
            replicas,
            batchers: Default::default(),
            view,
        }
    }

    pub(super) fn with_view(self, view: Arc<PlacementView>) -> Self {
        Self { view, ..self }
    }

    /// After a change to the registry: the next placement reads it again.
    pub(super) fn invalidate_view(&self) {
        self.view.invalidate();
    }

    /// A handle for a batching task: holding the batchers themselves would
    /// keep the task's own queue open, and the task would never end.
    fn without_batchers(&self) -> Self {
        Self {
            batchers: Default::default(),
            ..self.clone()
        }
    }
}

/// A handle is the core with its own scripts: the core's keys and
/// connection are its own.
impl std::ops::Deref for Sessions {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// Where a session lives and what its node's count must be offset by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Normalised address of the node holding the session.
    pub node: String,
    /// Clicks already folded into the archive (design.md §4.6): the user sees
    /// `node_count + base`.
    pub base: i64,
    /// Absolute end of the session's life, ms since the Unix epoch.
    pub expires_at_ms: i64,
}

/// What the placement decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub mapping: Mapping,
    /// False when another press (on any replica) placed the session first.
    pub created: bool,
}

/// The outcome of [`Sessions::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    Placed(Placement),
    /// No node is up.
    NoNode,
    /// The session's group unmapped a session since its base was folded:
    /// the archive may hold clicks the base lacks. Fold again.
    Stale,
    /// The registry is being rebuilt after Redis forgot it: nothing may be
    /// placed until every node's live counts are archived.
    NotReady,
}

/// `{node number}:{base}:{expires at}` -> its parts.
pub(super) fn unpack_mapping(value: &str) -> Option<(u64, i64, i64)> {
    let mut parts = value.splitn(3, ':');
    let number = parts.next()?.parse().ok()?;
    let base = parts.next()?.parse().ok()?;
    let exp = parts.next()?.parse().ok()?;
    Some((number, base, exp))
}

impl Sessions {
    /// The session's mapping ([`Self::lookup_with_unmaps`] without the
    /// count).
    pub async fn lookup(&self, session_id: &str) -> StoreResult<Option<Mapping>> {
        Ok(self.lookup_with_unmaps(session_id).await?.0)
    }

    /// The hot path: the mapping and, in the same round trip, what a
    /// placement would fold against ([`Self::unmaps_seen`]), no script
    /// (the node's address is remembered after its first read: numbers
    /// never change). A press that finds no mapping places the session
    /// next, and a count read before its fold is as good as one read just
    /// before it (an unmap in between makes the placement fold again): a
    /// new session spares a round trip.
    pub async fn lookup_with_unmaps(
        &self,
        session_id: &str,
    ) -> StoreResult<(Option<Mapping>, String)> {
        // The bucket once: its group is checked, its key read. One slot:
        // the bucket and the group's counters share its tag.
        let bucket = groups::mapping_bucket(session_id);
        let group = &bucket[..2];
        self.replicas.check_identity(group).await?;
        let (value, epoch, unmaps): (Option<String>, Option<String>, Option<String>) =
            redis::pipe()
                .hget(self.group_key(group, &["mappings", &bucket]), session_id)
                .get(self.group_key(group, &["epoch"]))
                .get(self.group_key(group, &["unmaps"]))
                .query_async(&mut self.conn())
                .await
                .context("reading the session mapping from Redis")?;
        let seen = seen(epoch, unmaps);
        let Some((number, base, expires_at_ms)) = value.as_deref().and_then(unpack_mapping) else {
            return Ok((None, seen));
        };
        let mapping = self.node_address(number).await?.map(|node| Mapping {
            node: node.to_string(),
            base,
            expires_at_ms,
        });
        Ok((mapping, seen))
    }

    /// What a base folded now is folded against: the session's group's
    /// epoch and how many unmaps it has seen (`unmaps_seen` in
    /// prelude.lua). Read before the fold, given to [`Self::place`].
    pub async fn unmaps_seen(&self, session_id: &str) -> StoreResult<String> {
        let group = &groups::mapping_bucket(session_id)[..2];
        let (epoch, unmaps): (Option<String>, Option<String>) = redis::pipe()
            .get(self.group_key(group, &["epoch"]))
            .get(self.group_key(group, &["unmaps"]))
            .query_async(&mut self.conn())
            .await
            .context("reading a session group's unmaps from Redis")?;
        Ok(seen(epoch, unmaps))
    }

    /// The node and expiry time of each session (`None` where it has no
    /// mapping), in pipelined round trips.
    pub async fn placements_of(
        &self,
        session_ids: &[String],
    ) -> StoreResult<Vec<Option<(String, i64)>>> {
        Ok(self
            .mappings_of(session_ids)
            .await?
            .into_iter()
            .map(|m| m.map(|m| (m.node, m.expires_at_ms)))
            .collect())
    }

    /// Each session's mapping (`None` where it has none), in pipelined
    /// round trips.
    pub async fn mappings_of(&self, session_ids: &[String]) -> StoreResult<Vec<Option<Mapping>>> {
        if session_ids.is_empty() {
            return Ok(Vec::new()); // an empty pipeline is an error to redis-rs
        }
        // One pipeline per group on a cluster, one for all on a single Redis.
        let groups = if self.cluster {
            by_group(session_ids.iter().enumerate(), |(_, id)| id.as_str())
        } else {
            HashMap::from([(String::new(), session_ids.iter().enumerate().collect())])
        };
        let reads = groups.into_values().map(|members| async move {
            let mut pipe = redis::pipe();
            for (_, id) in &members {
                pipe.cmd("HGET").arg(self.mapping_key(id)).arg(*id);
            }
            let values: Vec<Option<String>> = pipe
                .query_async(&mut self.conn())
                .await
                .context("reading the nodes and expiries of sessions from Redis")?;
            Ok::<_, super::StoreError>(members.into_iter().map(|(i, _)| i).zip(values))
        });
        let mut placements = vec![None; session_ids.len()];
        for read in futures::future::join_all(reads).await {
            for (i, value) in read? {
                if let Some((number, base, expires_at_ms)) =
                    value.as_deref().and_then(unpack_mapping)
                {
                    placements[i] = self.node_address(number).await?.map(|node| Mapping {
                        node: node.to_string(),
                        base,
                        expires_at_ms,
                    });
                }
            }
        }
        Ok(placements)
    }
}

/// `unmaps_seen` as prelude.lua compares it: `{epoch}:{unmaps}`.
fn seen(epoch: Option<String>, unmaps: Option<String>) -> String {
    format!(
        "{}:{}",
        epoch.unwrap_or_default(),
        unmaps.as_deref().unwrap_or("0")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_value_unpacks_into_number_base_and_expiry() {
        assert_eq!(
            unpack_mapping("7:-3:1796000000000"),
            Some((7, -3, 1_796_000_000_000))
        );
        assert_eq!(unpack_mapping("7:3"), None);
        assert_eq!(unpack_mapping("x:3:4"), None);
    }
}
