//! The session groups (see the layout in the module above): 256 hash
//! slots that hold every session's mapping, its node's index entry, and
//! so each node's count of sessions, which is the size of its indexes
//! (exact but for strays, until they are dropped: layout.md, Indexes).
//! A node's sessions are the union of its 256 indexes: the sweep, the
//! removal and the failover walk them, every group at once (a cluster
//! serves them from all its primaries in parallel).
//!
//! Amnesia is per group as well: each group carries the registry's epoch,
//! and a group that lost it lost its mappings (its primary restarted
//! empty). The registry check (lifecycle/rebuild.rs) then rebuilds the
//! whole registry, as when the control slot forgets.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::walk::{ListWalk, Next, FIRST_CHUNK};
use super::{Context, Sessions, StoreResult};
use crate::store::fanout::GROUPS;
use crate::store::NodeRecord;

/// The most sessions one walk of a group's list returns: a
/// burst that ends more at once is swept over several sweeps, and no
/// script holds Redis long.
const MAX_DUE_PER_GROUP: usize = 4_096;

/// Entries without their mapping a walk reads past, besides the ones it
/// returns (strays count among the ended until the caller checks them):
/// drop_strays.lua drops them, so a later walk does not read them again.
const MAX_STRAYS_PER_WALK: usize = 1_024;

/// The four hex digits that name a session's mapping bucket: the first
/// four of SHA-1(id), as `prelude.lua` computes them. 65,536 buckets keep
/// each one a small listpack-encoded hash (about 15 mappings per bucket at
/// a million sessions) where one key per session would cost a key's
/// overhead each. The first two digits are the session's group.
pub(super) fn mapping_bucket(session_id: &str) -> String {
    let digest = sha1_smol::Sha1::from(session_id).digest().to_string();
    digest[..4].to_owned()
}

/// The session id of an entry of a node's list, `{end, ms}\t{id}`
/// (prelude.lua). Ids hold no tab. Agrees with prelude.lua's `parse_entry`
/// on every entry written (ends are i64s, written without a sign but a
/// minus): the scripts read a session's keys where this says.
pub(super) fn entry_id(entry: &str) -> &str {
    match entry.split_once('\t') {
        Some((end, id)) if end.parse::<i64>().is_ok() => id,
        _ => entry,
    }
}

/// A dated list entry, as prelude.lua's `dated_entry` writes it.
pub(super) fn dated_entry(id: &str, expires_at_ms: i64) -> String {
    format!("{expires_at_ms}\t{id}")
}

/// A group's index (0 to 255) from its name (`00` to `ff`).
fn group_index(group: &str) -> usize {
    usize::from_str_radix(group, 16).unwrap_or(usize::MAX)
}

/// What the sweep's reads of a node's indexes fail with.
const EXPIRING: &str = "reading a node's expiring sessions from Redis";

/// A reply of the sweep's reads, as `T`.
fn from_value<T: redis::FromRedisValue>(value: redis::Value) -> StoreResult<T> {
    redis::from_redis_value(value)
        .map_err(redis::RedisError::from)
        .context(EXPIRING)
}

/// `ids` sorted into their groups (order kept within a group).
pub(super) fn by_group<T>(
    items: impl IntoIterator<Item = T>,
    id: impl Fn(&T) -> &str,
) -> HashMap<String, Vec<T>> {
    let mut groups: HashMap<String, Vec<T>> = HashMap::new();
    for item in items {
        let bucket = mapping_bucket(id(&item));
        groups.entry(bucket[..2].to_owned()).or_default().push(item);
    }
    groups
}

impl Sessions {
    /// `P{s:gg}`: what the scripts of a group build their keys from.
    pub(super) fn group_prefix(&self, group: &str) -> String {
        self.group_key(group, &[])
    }

    pub(super) fn mapping_key(&self, session_id: &str) -> String {
        let bucket = mapping_bucket(session_id);
        self.group_key(&bucket[..2], &["mappings", &bucket])
    }

    /// Node `number`'s index in `group`: a list of its sessions there, in
    /// the order they were placed (and so, give or take, of their end).
    pub(super) fn index_key(&self, group: &str, number: u64) -> String {
        self.group_key(group, &["due", &number.to_string()])
    }

    /// A node's number, if it is registered (read each time: a removed
    /// address added again gets a new number).
    pub(in crate::store) async fn node_number(&self, address: &str) -> StoreResult<Option<u64>> {
        self.conn()
            .hget(self.key(&["node_numbers"]), address)
            .await
            .context("reading a node's number from Redis")
    }

    /// The sessions on `address` whose life ends at or before `by_ms`, at
    /// most `limit`, those ending first first: O(expired) per group. Each
    /// list is read from its head in plain `LRANGE`s, every group at once
    /// (walk.rs). The ended
    /// entries are checked against their mappings in one pipelined read,
    /// and those without a mapping to the node that ends when they say
    /// (strays) are dropped on the way (drop_strays.lua).
    pub async fn expiring(
        &self,
        address: &str,
        by_ms: i64,
        limit: usize,
    ) -> StoreResult<Vec<String>> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(Vec::new());
        };
        let per_group = limit.min(MAX_DUE_PER_GROUP);
        let most = per_group + MAX_STRAYS_PER_WALK;
        let mut walks = vec![ListWalk::default(); GROUPS];
        let mut due: Vec<(String, i64)> = Vec::new();
        let mut dated: Vec<(String, i64, usize)> = Vec::new();
        let mut strays: Vec<(String, usize)> = Vec::new();

        // Every list's head.
        let first: Vec<Vec<redis::Value>> = self
            .query_groups(EXPIRING, |group, pipe| {
                pipe.lrange(self.index_key(group, number), 0, FIRST_CHUNK as isize - 1);
            })
            .await?;
        for (walk, replies) in walks.iter_mut().zip(first) {
            if let Some(head) = replies.into_iter().next() {
                walk.take(from_value(head)?, FIRST_CHUNK, by_ms, per_group, most);
            }
        }
        // Lists with more ended entries than their head held, read on.
        loop {
            let reads: HashMap<usize, (usize, usize)> = walks
                .iter()
                .enumerate()
                .filter_map(|(i, walk)| match walk.next(most) {
                    Some(Next::Read { start, stop }) => Some((i, (start, stop))),
                    _ => None,
                })
                .collect();
            if reads.is_empty() {
                break;
            }
            let more: Vec<Vec<Vec<String>>> = self
                .query_groups(EXPIRING, |group, pipe| {
                    if let Some(&(start, stop)) = reads.get(&group_index(group)) {
                        pipe.lrange(self.index_key(group, number), start as isize, stop as isize);
                    }
                })
                .await?;
            for (i, chunk) in more.into_iter().enumerate() {
                if let (Some(&(start, stop)), Some(chunk)) =
                    (reads.get(&i), chunk.into_iter().next())
                {
                    walks[i].take(chunk, stop + 1 - start, by_ms, per_group, most);
                }
            }
        }
        for walk in walks {
            dated.extend(walk.ended);
        }
        // A dated entry is the node's while its mapping names the node and
        // the same end. Any other is a stray: its session moved off the node
        // when it failed, or another replica's
        // clean took it (and its entry) since the walk.
        let ids: Vec<String> = dated.iter().map(|(id, _, _)| id.clone()).collect();
        let placements = self.placements_of(&ids).await?;
        for ((id, end, seen_at), placed) in dated.into_iter().zip(placements) {
            match placed {
                Some((node, exp)) if node == address && exp == end => due.push((id, end)),
                _ => strays.push((dated_entry(&id, end), seen_at)),
            }
        }
        if !strays.is_empty() {
            // Best effort: an entry left now is dropped by the next walk
            // (while a cluster moves a slot, its keys may be out of reach).
            if let Err(error) = self.drop_strays(number, &strays).await {
                tracing::warn!(%error, strays = strays.len(), "index entries without a mapping not dropped");
            }
        }
        due.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut seen = std::collections::HashSet::new();
        due.retain(|(id, _)| seen.insert(id.clone()));
        due.truncate(limit);
        Ok(due.into_iter().map(|(id, _)| id).collect())
    }

    /// Every session mapped to a node. O(sessions of the node): its index
    /// entries, each checked against its mapping (an entry left behind, a
    /// stray, names a session that lives elsewhere now or nowhere).
    pub async fn node_sessions(&self, address: &str) -> StoreResult<Vec<String>> {
        let mut seen = std::collections::HashSet::new();
        let entries: Vec<String> = self
            .index_entries(address)
            .await?
            .iter()
            .map(|entry| entry_id(entry).to_owned())
            .filter(|id| seen.insert(id.clone()))
            .collect();
        if entries.is_empty() {
            return Ok(entries);
        }
        let placements = self.placements_of(&entries).await?;
        Ok(entries
            .into_iter()
            .zip(placements)
            .filter(|(_, placed)| placed.as_ref().is_some_and(|(node, _)| node == address))
            .map(|(id, _)| id)
            .collect())
    }

    /// Every entry of a node's lists as Redis holds it, strays included,
    /// in the lists' order (each list from its head). O(sessions of the
    /// node).
    pub(super) async fn index_entries(&self, address: &str) -> StoreResult<Vec<String>> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(Vec::new());
        };
        let found: Vec<Vec<Vec<String>>> = self
            .query_groups("reading a node's sessions from Redis", |group, pipe| {
                pipe.lrange(self.index_key(group, number), 0, -1);
            })
            .await?;
        let mut seen = std::collections::HashSet::new();
        Ok(found
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| seen.insert(entry.clone()))
            .collect())
    }

    /// Sets every node's active-session count to the exact sum of its
    /// group indexes. Placement counts a session on its node before the
    /// mapping exists (place.lua; on a cluster the replica's view, settled
    /// later: view.rs); a replica that died in between, or a race it lost,
    /// leaves a count one too high until this runs.
    pub async fn tally(&self, nodes: &[NodeRecord]) -> StoreResult<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let sizes: Vec<Vec<u64>> = self
            .query_groups("counting a group's sessions in Redis", |group, pipe| {
                for node in nodes {
                    pipe.llen(self.index_key(group, node.number));
                }
            })
            .await?;
        let mut totals = vec![0u64; nodes.len()];
        for group in sizes {
            for (total, size) in totals.iter_mut().zip(group) {
                *total += size;
            }
        }
        let counts: Vec<(&str, i64)> = nodes
            .iter()
            .zip(totals)
            .map(|(node, total)| (node.address.as_str(), total as i64))
            .collect();
        self.set_counts(false, &counts).await
    }

    /// Sets (or, with `add`, moves) registered nodes' counts
    /// (set_counts.lua). On a cluster a move goes with the ones this
    /// replica's placements made (view.rs), and those are settled before a
    /// count is set.
    pub(super) async fn set_counts(&self, add: bool, counts: &[(&str, i64)]) -> StoreResult<()> {
        if self.cluster {
            if add {
                return self.settle_counts(counts).await;
            }
            self.settle_counts(&[]).await?;
        }
        let mut invocation = self.scripts.set_counts.prepare_invoke();
        invocation
            .key(self.key(&["placeable"]))
            .key(self.key(&["counts"]))
            .key(self.key(&["weights"]))
            .arg(if add { "add" } else { "set" });
        for (address, count) in counts {
            invocation.arg(*address).arg(*count);
        }
        invocation
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("setting nodes' session counts in Redis")?;
        Ok(())
    }

    /// How many groups have lost their epoch (their primary forgot them).
    pub async fn groups_without_epoch(&self) -> StoreResult<usize> {
        let present: Vec<Vec<bool>> = self
            .query_groups("reading the groups' epochs from Redis", |group, pipe| {
                pipe.exists(self.group_key(group, &["epoch"]));
            })
            .await?;
        Ok(present
            .into_iter()
            .flatten()
            .filter(|present| !present)
            .count())
    }

    /// Declares every group complete.
    pub async fn set_group_epochs(&self, epoch: &str) -> StoreResult<()> {
        self.query_groups::<redis::Value>("writing the groups' epochs to Redis", |group, pipe| {
            pipe.set(self.group_key(group, &["epoch"]), epoch);
        })
        .await?;
        Ok(())
    }

    /// Forgets every mapping and index entry of every group (and the
    /// groups' epochs, so nothing is placed until they are set again):
    /// after amnesia, what a surviving group still maps is stale, since
    /// the nodes archive and forget everything they hold. `numbers`: the
    /// nodes whose indexes to delete.
    pub async fn wipe_groups(&self, numbers: &[u64]) -> StoreResult<()> {
        self.query_groups::<redis::Value>("wiping the session groups in Redis", |group, pipe| {
            let mut keys = vec![
                self.group_key(group, &["epoch"]),
                self.group_key(group, &["closed"]),
            ];
            keys.extend((0..GROUPS).map(|bucket| {
                self.group_key(group, &["mappings", &format!("{group}{bucket:02x}")])
            }));
            keys.extend(numbers.iter().map(|number| self.index_key(group, *number)));
            pipe.del(keys);
        })
        .await?;
        Ok(())
    }

    /// Deletes a removed node's indexes (they are empty once its sessions
    /// were unmapped; anything left would never be read again).
    pub(in crate::store) async fn delete_indexes(&self, number: u64) -> StoreResult<()> {
        self.query_groups::<redis::Value>("deleting a node's indexes in Redis", |group, pipe| {
            pipe.del(self.index_key(group, number));
        })
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_is_four_hex_digits_and_its_first_two_are_the_group() {
        // SHA-1("u1") = 4b8e3f5c...; Redis's sha1hex gives the same digits
        // (checked against a real Redis in tests/api/store.rs).
        let bucket = mapping_bucket("u1");
        assert_eq!(bucket.len(), 4);
        assert!(bucket.chars().all(|c| c.is_ascii_hexdigit()));
        let groups = by_group(["u1"], |id| id);
        assert_eq!(groups.keys().collect::<Vec<_>>(), [&bucket[..2]]);
    }
}
