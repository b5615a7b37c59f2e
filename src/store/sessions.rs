//! Session mappings: the hot-path read, the two-step placement, and the
//! unmapping of a clean (see the layout in the module above).

use std::collections::HashMap;

use super::groups::{by_group, mapping_bucket};
use super::lock::Lock;
use super::{Context, SessionStore, StoreResult};

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

/// The outcome of [`SessionStore::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    Placed(Placement),
    /// No node is up.
    NoNode,
    /// The registry is being rebuilt after Redis forgot it: nothing may be
    /// placed until every node's live counts are archived.
    NotReady,
}

/// `{node number}:{base}:{expires at}` -> its parts.
fn unpack_mapping(value: &str) -> Option<(u64, i64, i64)> {
    let mut parts = value.splitn(3, ':');
    let number = parts.next()?.parse().ok()?;
    let base = parts.next()?.parse().ok()?;
    let exp = parts.next()?.parse().ok()?;
    Some((number, base, exp))
}

/// How often a placement starts over when the mapping that stood named a
/// node Redis no longer knows (it is dropped and the session placed anew).
const PLACE_ATTEMPTS: usize = 3;

impl SessionStore {
    /// The hot path: one plain `HGET`, one round trip, no script (the node's
    /// address is remembered after its first read: numbers never change).
    pub async fn lookup(&self, session_id: &str) -> StoreResult<Option<Mapping>> {
        self.check_identity().await?;
        let value: Option<String> = redis::cmd("HGET")
            .arg(self.mapping_key(session_id))
            .arg(session_id)
            .query_async(&mut self.conn())
            .await
            .context("reading the session mapping from Redis")?;
        let Some((number, base, expires_at_ms)) = value.as_deref().and_then(unpack_mapping) else {
            return Ok(None);
        };
        Ok(self.node_address(number).await?.map(|node| Mapping {
            node: node.to_string(),
            base,
            expires_at_ms,
        }))
    }

    /// Places a session on `preferred_node` if it is up, else on the up node
    /// with the fewest active sessions, unless it is mapped already; a
    /// mapping to `stale_node` is dropped and replaced.
    ///
    /// Two steps, each in one hash slot (design.md, "Past one Redis"): the
    /// control slot chooses the node and counts the session there
    /// (`reserve.lua`), the session's group creates the mapping if the
    /// session has none (`claim.lua`). If it had one, the count goes back.
    pub async fn place(
        &self,
        session_id: &str,
        base: i64,
        expires_at_ms: i64,
        stale_node: Option<&str>,
        preferred_node: Option<&str>,
    ) -> StoreResult<Placed> {
        self.check_identity().await?;
        if !self.cluster {
            return self
                .place_at_once(session_id, base, expires_at_ms, stale_node, preferred_node)
                .await;
        }
        // A number the standing mapping named that Redis does not know.
        let mut unknown: Option<u64> = None;
        for _ in 0..PLACE_ATTEMPTS {
            let reply: Option<(String, i64, String)> = self
                .scripts
                .reserve
                .key(self.key(&["placeable"]))
                .key(self.key(&["registry"]))
                .key(self.key(&["counts"]))
                .key(self.key(&["node_numbers"]))
                .key(self.key(&["weights"]))
                .arg(stale_node.unwrap_or(""))
                .arg(preferred_node.unwrap_or(""))
                .invoke_async(&mut self.conn())
                .await
                .context("choosing a node for a session in Redis")?;
            let (node, number, stale_number) = match reply {
                None => return Ok(Placed::NoNode),
                Some((_, -1, _)) => return Ok(Placed::NotReady),
                Some((node, number, stale)) => (node, number as u64, stale.parse::<u64>().ok()),
            };
            let stale_number = unknown.or(stale_number);
            let bucket = mapping_bucket(session_id);
            let group = &bucket[..2];
            let chosen_index = self.index_key(group, number);
            let stale_index = stale_number.map_or_else(
                || chosen_index.clone(),
                |stale| self.index_key(group, stale),
            );
            let claimed: Vec<i64> = self
                .scripts
                .claim
                .key(self.group_key(group, &["mappings", &bucket]))
                .key(self.group_key(group, &["epoch"]))
                .key(chosen_index)
                .key(stale_index)
                .arg(self.group_prefix(group))
                .arg(session_id)
                .arg(number)
                .arg(base)
                .arg(expires_at_ms)
                .arg(stale_number.map(|n| n.to_string()).unwrap_or_default())
                .invoke_async(&mut self.conn())
                .await
                .context("creating a session mapping in Redis")?;
            let created = claimed.first() == Some(&1);
            if !created {
                // The count reserve.lua took is not this session's.
                self.set_counts(true, &[(&node, -1, None)]).await?;
            }
            let &[_, standing, base, expires_at_ms, replaced] = claimed.as_slice() else {
                return Ok(Placed::NotReady); // the group forgot: being rebuilt
            };
            let standing = standing as u64;
            if let Some(stale) = stale_number.filter(|_| replaced == 1) {
                // The session's mapping to the stale node was dropped.
                if let Some(stale_node) = self.node_address(stale).await? {
                    self.set_counts(true, &[(&stale_node, -1, None)]).await?;
                }
            }
            let Some(address) = self.node_address(standing).await? else {
                unknown = Some(standing);
                continue;
            };
            return Ok(Placed::Placed(Placement {
                mapping: Mapping {
                    node: address.to_string(),
                    base,
                    expires_at_ms,
                },
                created,
            }));
        }
        Err(mapped_to_unknown_node())
    }

    /// [`place`](Self::place) on a single Redis: both steps in one script
    /// (`place.lua`), one round trip.
    async fn place_at_once(
        &self,
        session_id: &str,
        base: i64,
        expires_at_ms: i64,
        stale_node: Option<&str>,
        preferred_node: Option<&str>,
    ) -> StoreResult<Placed> {
        let bucket = mapping_bucket(session_id);
        let group = &bucket[..2];
        // A number the standing mapping named that Redis does not know.
        let mut unknown: Option<u64> = None;
        for _ in 0..PLACE_ATTEMPTS {
            let reply: Option<Vec<i64>> = self
                .scripts
                .place
                .key(self.key(&["placeable"]))
                .key(self.key(&["registry"]))
                .key(self.key(&["counts"]))
                .key(self.key(&["node_numbers"]))
                .key(self.group_key(group, &["mappings", &bucket]))
                .key(self.group_key(group, &["epoch"]))
                .key(self.key(&["weights"]))
                .arg(self.prefix.as_ref())
                .arg(session_id)
                .arg(base)
                .arg(expires_at_ms)
                .arg(stale_node.unwrap_or(""))
                .arg(preferred_node.unwrap_or(""))
                .arg(unknown.map(|n| n.to_string()).unwrap_or_default())
                .invoke_async(&mut self.conn())
                .await
                .context("placing a session in Redis")?;
            let Some(reply) = reply else {
                return Ok(Placed::NoNode);
            };
            let &[created, number, base, expires_at_ms] = reply.as_slice() else {
                return Ok(Placed::NotReady); // the registry or the group forgot
            };
            let Some(address) = self.node_address(number as u64).await? else {
                unknown = Some(number as u64);
                continue;
            };
            return Ok(Placed::Placed(Placement {
                mapping: Mapping {
                    node: address.to_string(),
                    base,
                    expires_at_ms,
                },
                created: created == 1,
            }));
        }
        Err(mapped_to_unknown_node())
    }

    /// Drops every session still mapped to `address`, under the node's
    /// lock. Returns their ids.
    pub async fn unmap_node(&self, lock: &Lock, address: &str) -> StoreResult<Vec<String>> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(Vec::new());
        };
        let ids = self.node_sessions(address).await?;
        let dropped = self.unmap_in_groups(lock, number, &ids, &[]).await?;
        self.set_counts(false, &[(address, 0, None)]).await?;
        Ok(dropped)
    }

    /// The node and expiry time of each session (`None` where it has no
    /// mapping), in pipelined round trips.
    pub async fn placements_of(
        &self,
        session_ids: &[String],
    ) -> StoreResult<Vec<Option<(String, i64)>>> {
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
                if let Some((number, _, exp)) = value.as_deref().and_then(unpack_mapping) {
                    placements[i] = self
                        .node_address(number)
                        .await?
                        .map(|node| (node.to_string(), exp));
                }
            }
        }
        Ok(placements)
    }

    /// After a clean and fold, under the node's lock: unmaps `leaving`,
    /// sets the new base of the sessions in `rebased` that are still on
    /// the node. Returns how many were unmapped. Repeating it changes
    /// nothing.
    pub async fn apply_clean(
        &self,
        lock: &Lock,
        address: &str,
        leaving: &[String],
        rebased: &[(String, i64)],
    ) -> StoreResult<usize> {
        let Some(number) = self.node_number(address).await? else {
            return Ok(0);
        };
        let unmapped = self
            .unmap_in_groups(lock, number, leaving, rebased)
            .await?
            .len();
        if unmapped > 0 {
            self.set_counts(true, &[(address, -(unmapped as i64), None)])
                .await?;
        }
        Ok(unmapped)
    }

    /// `unmap.lua` over the groups the ids fall in: one call per group on
    /// a cluster (a script stays in one slot), all at once; one call for
    /// every group on a single Redis (one script instead of up to 256).
    ///
    /// Only while `lock` is its holder's: a cleaner that paused past the
    /// lock's life must not unmap sessions placed again since. On a single
    /// Redis the script checks the lock itself; on a cluster the lock is in
    /// another slot, so it is read just before (a pause between that read
    /// and the calls is the one window left: design.md, "A cleaner that
    /// pauses").
    async fn unmap_in_groups(
        &self,
        lock: &Lock,
        number: u64,
        leaving: &[String],
        rebased: &[(String, i64)],
    ) -> StoreResult<Vec<String>> {
        /// A call's part of the clean: its leaving ids, its re-based pairs.
        type Part<'a> = (Vec<&'a String>, Vec<&'a (String, i64)>);
        let mut parts: HashMap<String, Part> = HashMap::new();
        let call_of = |id: &str| {
            if self.cluster {
                mapping_bucket(id)[..2].to_owned()
            } else {
                String::new()
            }
        };
        for id in leaving {
            parts.entry(call_of(id)).or_default().0.push(id);
        }
        for pair in rebased {
            parts.entry(call_of(&pair.0)).or_default().1.push(pair);
        }
        let (lock_key, token) = lock.key_and_token(self);
        let guard = if self.cluster {
            self.check_lock(&lock_key, &token).await?;
            String::new()
        } else {
            lock_key
        };
        let calls = parts.into_values().map(|(leaving, rebased)| {
            let mut invocation = self.scripts.unmap.prepare_invoke();
            let ids = || {
                leaving
                    .iter()
                    .map(|id| id.as_str())
                    .chain(rebased.iter().map(|(id, _)| id.as_str()))
            };
            let mut keys: Vec<String> = ids()
                .flat_map(|id| {
                    let bucket = mapping_bucket(id);
                    [
                        self.index_key(&bucket[..2], number),
                        self.group_key(&bucket[..2], &["mappings", &bucket]),
                    ]
                })
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                invocation.key(key);
            }
            invocation
                .arg(guard.as_str())
                .arg(token.as_str())
                .arg(self.prefix.as_ref())
                .arg(number)
                .arg(leaving.len());
            for id in &leaving {
                invocation.arg(id.as_str());
            }
            for (id, base) in &rebased {
                invocation.arg(id.as_str()).arg(*base);
            }
            async move {
                invocation
                    .invoke_async::<Vec<String>>(&mut self.conn())
                    .await
                    .context("unmapping sessions in Redis")
            }
        });
        let mut unmapped = Vec::new();
        for ids in futures::future::join_all(calls).await {
            unmapped.extend(ids?);
        }
        Ok(unmapped)
    }
}

/// A placement that kept finding the session mapped to a node number Redis
/// has no address for.
fn mapped_to_unknown_node() -> super::StoreError {
    super::StoreError {
        context: "placing a session in Redis",
        source: redis::RedisError::from((
            redis::ErrorKind::Client,
            "the session stays mapped to a node Redis does not know",
        )),
    }
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
