//! Unmapping many sessions at once: a clean's leaving and re-based
//! sessions, a removal's or a failover's whole node, the sweep's strays
//! (unmap.lua, drop_strays.lua), in scripts of a bounded size, a few in
//! flight.

use std::collections::HashMap;

use futures::StreamExt;

use super::groups::{by_group, entry_id, mapping_bucket};
use super::{Context, Sessions, StoreResult};
use crate::store::{Lock, StoreError};

impl Sessions {
    /// Drops every session still mapped to `address`, under the node's
    /// lock. Returns their ids.
    pub async fn unmap_node(&self, lock: &Lock, address: &str) -> StoreResult<Vec<String>> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(Vec::new());
        };
        self.close_to_new_sessions(address).await?;
        // Strays too, in list order, each named as its list holds it: at
        // its list's head when its turn comes, where unmap.lua finds it
        // without reading the list.
        let entries = self.index_entries(address).await?;
        match self
            .unmap_in_groups(lock, number, &entries, None, &[])
            .await
        {
            // Repeated until it succeeds; the sweep's tally counts the node
            // exactly meanwhile.
            (_, Some(error)) => Err(error),
            (dropped, None) => {
                self.set_counts(false, &[(address, 0)]).await?;
                Ok(dropped)
            }
        }
    }

    /// After a clean and fold, under the node's lock: unmaps `leaving`
    /// (with `expired_by`, an expiry's: only placements that ended by
    /// then), sets the new base of the sessions in `rebased` that are
    /// still on the node. Returns how many were unmapped. Repeating it
    /// changes nothing, even after a session was placed anew on the node:
    /// on a Redis Cluster a script whose reply was lost is sent again.
    pub async fn apply_clean(
        &self,
        lock: &Lock,
        address: &str,
        leaving: &[String],
        expired_by: Option<i64>,
        rebased: &[(String, i64)],
    ) -> StoreResult<usize> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(0);
        };
        let (unmapped, failed) = self
            .unmap_in_groups(lock, number, leaving, expired_by, rebased)
            .await;
        // What was unmapped leaves the count even if a later slice failed:
        // the clean's repeat finds those sessions gone and counts only
        // the rest.
        let unmapped = unmapped.len();
        if unmapped > 0 {
            self.set_counts(true, &[(address, -(unmapped as i64))])
                .await?;
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(unmapped),
        }
    }

    /// The keys of a script over sessions of node `number` (a cluster
    /// needs every key a script touches named): each id's bucket and the
    /// node's list in its group, each key once. Worked out here, so
    /// that the script finds a session's keys by their places in KEYS
    /// (prelude.lua's `session_keys`) instead of hashing the id again.
    fn session_keys<'a>(&self, number: u64, ids: impl Iterator<Item = &'a str>) -> SessionKeys {
        let mut keys = SessionKeys::default();
        for id in ids {
            let bucket = mapping_bucket(id);
            let group = &bucket[..2];
            let indexes = keys.place(self.index_key(group, number));
            let bucket = keys.place(self.group_key(group, &["mappings", &bucket]));
            keys.of.push((bucket, indexes));
        }
        keys
    }

    /// Drops `entries` (each with how far from
    /// its list's head the walk saw it, 0 if not known) from node
    /// `number`'s lists where no mapping of their id to the node stands
    /// (for a dated entry, none that ends when it says: drop_strays.lua
    /// checks each again), in calls of at most [`MAX_PER_SCRIPT`] (each
    /// within one group on a cluster), a few in flight. Needs no lock.
    pub(super) async fn drop_strays(
        &self,
        number: u64,
        entries: &[(String, usize)],
    ) -> StoreResult<()> {
        let (calls, in_flight): (Vec<Vec<&(String, usize)>>, _) = if self.cluster {
            let groups = by_group(entries.iter(), |(entry, _)| entry_id(entry));
            let calls = groups
                .into_values()
                .flat_map(|group| {
                    group
                        .chunks(MAX_PER_SCRIPT)
                        .map(<[_]>::to_vec)
                        .collect::<Vec<_>>()
                })
                .collect();
            (calls, SCRIPTS_IN_FLIGHT_ON_A_CLUSTER)
        } else {
            let calls = entries
                .chunks(MAX_PER_SCRIPT)
                .map(|slice| slice.iter().collect())
                .collect();
            (calls, SCRIPTS_IN_FLIGHT)
        };
        let calls = calls.into_iter().map(|entries| {
            let mut invocation = self.scripts.drop_strays.prepare_invoke();
            let keys = self.session_keys(number, entries.iter().map(|(entry, _)| entry_id(entry)));
            keys.declare(&mut invocation);
            invocation.arg(number);
            for ((entry, seen_at), (bucket, indexes)) in entries.iter().zip(&keys.of) {
                invocation
                    .arg(entry.as_str())
                    .arg(*seen_at)
                    .arg(*bucket)
                    .arg(*indexes);
            }
            async move {
                invocation
                    .invoke_async::<i64>(&mut self.conn())
                    .await
                    .context("dropping index entries without a mapping in Redis")
            }
        });
        let calls: Vec<_> = calls.collect();
        let mut calls = futures::stream::iter(calls).buffer_unordered(in_flight);
        while let Some(dropped) = calls.next().await {
            dropped?;
        }
        Ok(())
    }

    /// `unmap.lua` over the groups the ids (or list entries, which name
    /// their id) fall in, in the calls [`unmap_calls`] cuts: on a cluster
    /// each within one group (a script stays in one slot), on a single
    /// Redis across groups; a few in flight at a time.
    ///
    /// Only while `lock` is its holder's: a cleaner that paused past the
    /// lock's life must not unmap sessions placed again since. On a single
    /// Redis the script checks the lock itself; on a cluster the lock is in
    /// another slot, so it is read just before (a pause between that read
    /// and the calls is the one window left: design.md, "A cleaner that
    /// pauses").
    ///
    /// Returns the ids unmapped, and the error that stopped the calls, if
    /// one did: the slices before it stand (each session's unmapping is
    /// atomic, the clean's is not), and the caller counts them before it
    /// fails.
    async fn unmap_in_groups(
        &self,
        lock: &Lock,
        number: u64,
        leaving: &[String],
        expired_by: Option<i64>,
        rebased: &[(String, i64)],
    ) -> (Vec<String>, Option<StoreError>) {
        let parts = unmap_calls(leaving, rebased, self.cluster);
        let (lock_key, token) = lock.key_and_token(self);
        let guard = if self.cluster {
            if let Err(error) = self.check_lock(&lock_key, &token).await {
                return (Vec::new(), Some(error));
            }
            String::new()
        } else {
            lock_key
        };
        let calls = parts.into_iter().map(|(leaving, rebased)| {
            let invocation =
                self.unmap_invocation(number, &guard, &token, expired_by, &leaving, &rebased);
            async move {
                invocation
                    .invoke_async::<Vec<String>>(&mut self.conn())
                    .await
                    .context("unmapping sessions in Redis")
            }
        });
        let in_flight = if self.cluster {
            SCRIPTS_IN_FLIGHT_ON_A_CLUSTER
        } else {
            SCRIPTS_IN_FLIGHT
        };
        // Collected first: a stream over a lazy `map` borrows in a way the
        // compiler cannot prove `Send` for the callers' futures.
        let calls: Vec<_> = calls.collect();
        let mut calls = futures::stream::iter(calls).buffered(in_flight);
        let mut unmapped = Vec::new();
        while let Some(ids) = calls.next().await {
            match ids {
                Ok(ids) => unmapped.extend(ids),
                Err(error) => return (unmapped, Some(error)),
            }
        }
        (unmapped, None)
    }

    /// One call of `unmap.lua`: the sessions' keys by their places in KEYS,
    /// then for each leaving session its list entry, for each re-based one
    /// its id and new base.
    fn unmap_invocation<'a>(
        &'a self,
        number: u64,
        guard: &str,
        token: &str,
        expired_by: Option<i64>,
        leaving: &[&String],
        rebased: &[&(String, i64)],
    ) -> redis::ScriptInvocation<'a> {
        let mut invocation = self.scripts.unmap.prepare_invoke();
        let ids = leaving
            .iter()
            .map(|entry| entry_id(entry))
            .chain(rebased.iter().map(|(id, _)| id.as_str()));
        let keys = self.session_keys(number, ids);
        keys.declare(&mut invocation);
        invocation
            .arg(guard)
            .arg(token)
            .arg(number)
            .arg(expired_by.map_or(String::new(), |at| at.to_string()))
            .arg(leaving.len());
        let (leaving_keys, rebased_keys) = keys.of.split_at(leaving.len());
        for (entry, (bucket, indexes)) in leaving.iter().zip(leaving_keys) {
            invocation.arg(entry.as_str()).arg(*bucket).arg(*indexes);
        }
        for ((id, base), (bucket, indexes)) in rebased.iter().zip(rebased_keys) {
            invocation
                .arg(id.as_str())
                .arg(*base)
                .arg(*bucket)
                .arg(*indexes);
        }
        invocation
    }
}

/// A script's keys, each once, and where each of its sessions finds its
/// own: (its bucket, its node's list), as places in KEYS from 1.
#[derive(Default)]
struct SessionKeys {
    keys: Vec<String>,
    placed: HashMap<String, usize>,
    of: Vec<(usize, usize)>,
}

impl SessionKeys {
    fn place(&mut self, key: String) -> usize {
        if let Some(&at) = self.placed.get(&key) {
            return at;
        }
        self.keys.push(key.clone());
        self.placed.insert(key, self.keys.len());
        self.keys.len()
    }

    fn declare(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        for key in &self.keys {
            invocation.key(key);
        }
    }
}

/// Most sessions (or list entries) one `unmap.lua` or `drop_strays.lua`
/// call names. A script holds Redis's one thread while it runs, about
/// 6 µs a session, so a sweep's or a removal's thousands (and a clean-all
/// node's re-based live sessions, all of them) go in slices of a few
/// milliseconds, between which other clients' commands (the presses'
/// lookups and placements) are served.
const MAX_PER_SCRIPT: usize = 512;

/// Calls of one such script a caller keeps in flight on a single Redis. Redis
/// runs them one at a time anyway; more queued on the shared connection
/// would only delay this replica's own lookups behind them (and a reply
/// is awaited at most a second from when its request was queued: a
/// clean-all node's million re-based sessions, all sent at once, would
/// time out).
const SCRIPTS_IN_FLIGHT: usize = 2;
/// The same on a cluster, where the calls (one group each, so smaller)
/// spread over the primaries.
const SCRIPTS_IN_FLIGHT_ON_A_CLUSTER: usize = 16;

/// A call's part of a clean: its leaving ids (or entries), its re-based
/// pairs.
type UnmapCall<'a> = (Vec<&'a String>, Vec<&'a (String, i64)>);

/// How the unmapping of a clean is cut into `unmap.lua` calls: the
/// sessions in group order (a call's hints, read once per list, then
/// serve many of its entries), at most [`MAX_PER_SCRIPT`] a call, and
/// on a `cluster` never two groups in one call.
fn unmap_calls<'a>(
    leaving: &'a [String],
    rebased: &'a [(String, i64)],
    cluster: bool,
) -> Vec<UnmapCall<'a>> {
    enum Item<'a> {
        Leaving(&'a String),
        Rebased(&'a (String, i64)),
    }
    let mut items: Vec<(String, Item)> = leaving
        .iter()
        .map(|entry| (mapping_bucket(entry_id(entry)), Item::Leaving(entry)))
        .chain(
            rebased
                .iter()
                .map(|pair| (mapping_bucket(&pair.0), Item::Rebased(pair))),
        )
        .collect();
    // Stable: entries of one list keep their order.
    items.sort_by(|a, b| a.0[..2].cmp(&b.0[..2]));
    let mut calls: Vec<UnmapCall> = Vec::new();
    let mut current_group: Option<&str> = None;
    let mut size = 0;
    for (bucket, item) in &items {
        let group = &bucket[..2];
        let new_group = cluster && current_group != Some(group);
        if calls.is_empty() || size == MAX_PER_SCRIPT || new_group {
            calls.push(UnmapCall::default());
            size = 0;
        }
        current_group = Some(group);
        let call = calls.last_mut().expect("a call was just pushed");
        match item {
            Item::Leaving(entry) => call.0.push(entry),
            Item::Rebased(pair) => call.1.push(pair),
        }
        size += 1;
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each session finds its bucket and its node's list in its group at
    /// the places it is given (from 1, as Lua's KEYS), and a key
    /// two sessions share is declared once.
    #[tokio::test]
    async fn each_session_finds_its_own_keys_at_the_places_it_is_given() {
        let store = crate::store::Store::connect("redis://127.0.0.1:1", "t:")
            .unwrap()
            .sessions;
        // Two entries of the same session, and others.
        let entries = ["1796000000000\tu1", "1796000000001\tu1", "u2", "u3", "u4"];
        let keys = store.session_keys(7, entries.iter().map(|e| entry_id(e)));
        assert_eq!(keys.of.len(), entries.len());
        let mut unique = keys.keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.keys.len(), "each key once");
        for (entry, &(bucket, indexes)) in entries.iter().zip(&keys.of) {
            let id = entry_id(entry);
            let expected = mapping_bucket(id);
            let group = &expected[..2];
            assert_eq!(
                keys.keys[bucket - 1],
                store.group_key(group, &["mappings", &expected])
            );
            assert_eq!(keys.keys[indexes - 1], store.index_key(group, 7), "{id}");
        }
        assert_eq!(keys.of[0], keys.of[1], "one session, one set of keys");
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("unmap-{i}")).collect()
    }

    #[test]
    fn a_large_unmapping_goes_in_calls_of_at_most_512_sessions_each_naming_every_session_once() {
        let leaving = ids(1_300);
        let rebased: Vec<(String, i64)> = (0..700).map(|i| (format!("live-{i}"), i)).collect();
        let calls = unmap_calls(&leaving, &rebased, false);
        assert_eq!(calls.len(), 4); // 2,000 sessions
        assert!(calls
            .iter()
            .all(|(l, r)| l.len() + r.len() <= MAX_PER_SCRIPT));
        let mut named: Vec<&str> = calls
            .iter()
            .flat_map(|(l, r)| {
                l.iter()
                    .map(|id| id.as_str())
                    .chain(r.iter().map(|p| p.0.as_str()))
            })
            .collect();
        named.sort_unstable();
        let mut expected: Vec<&str> = leaving
            .iter()
            .map(String::as_str)
            .chain(rebased.iter().map(|p| p.0.as_str()))
            .collect();
        expected.sort_unstable();
        assert_eq!(named, expected);
    }

    #[test]
    fn on_a_cluster_no_unmapping_call_spans_two_groups() {
        let leaving = ids(2_000);
        let calls = unmap_calls(&leaving, &[], true);
        let groups: std::collections::HashSet<String> = leaving
            .iter()
            .map(|id| mapping_bucket(id)[..2].to_owned())
            .collect();
        // About 8 a group here, far under a call's most: one call a group.
        assert_eq!(calls.len(), groups.len());
        for (l, _) in &calls {
            let groups: std::collections::HashSet<String> = l
                .iter()
                .map(|id| mapping_bucket(id)[..2].to_owned())
                .collect();
            assert_eq!(groups.len(), 1);
        }
        assert_eq!(calls.iter().map(|(l, _)| l.len()).sum::<usize>(), 2_000);
    }

    #[test]
    fn the_entries_of_one_session_keep_their_order_across_the_cut() {
        // Two entries of one id (a stray, then the live one): an unmapping
        // that walks a list names both, in its order.
        let leaving = vec![
            "1796000000000\tsame".to_owned(),
            "1796000000001\tsame".to_owned(),
        ];
        let calls = unmap_calls(&leaving, &[], false);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, vec![&leaving[0], &leaving[1]]);
    }
}
