//! Session mappings: the hot-path read, the atomic placement, and each
//! node's expiry lists (see the layout in the module above).

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

/// What the placement script decided.
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

/// A node's sessions that expire by some time, from its expiry lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiring {
    /// Sessions placed on the node whose life ends by then (unchecked: see
    /// [`SessionStore::expiring`]).
    pub ids: Vec<String>,
    /// Seconds read whole and wholly past: once `ids` are archived, hand
    /// them to [`SessionStore::forget_expiring`].
    pub passed: Vec<String>,
}

/// The hash bucket of a session's mapping: the first four hex digits of
/// SHA-1(id), as `prelude.lua` computes it. 65,536 buckets keep each one a
/// small listpack-encoded hash (about 15 mappings per bucket at a million
/// sessions) where one key per session would cost a key's overhead each.
pub(super) fn mapping_bucket(session_id: &str) -> String {
    let digest = sha1_smol::Sha1::from(session_id).digest().to_string();
    digest[..4].to_owned()
}

/// `{node number}:{base}:{expires at}` -> its parts.
fn unpack_mapping(value: &str) -> Option<(u64, i64, i64)> {
    let mut parts = value.splitn(3, ':');
    let number = parts.next()?.parse().ok()?;
    let base = parts.next()?.parse().ok()?;
    let exp = parts.next()?.parse().ok()?;
    Some((number, base, exp))
}

impl SessionStore {
    fn mapping_key(&self, session_id: &str) -> String {
        self.key(&["mappings", &mapping_bucket(session_id)])
    }

    /// The hot path: one plain `HGET`, one round trip, no script (the node's
    /// address is remembered after its first read: numbers never change).
    pub async fn lookup(&self, session_id: &str) -> StoreResult<Option<Mapping>> {
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
    /// mapping to `stale_node` is dropped and replaced. Returns `None` when
    /// no node is up.
    pub async fn place(
        &self,
        session_id: &str,
        base: i64,
        expires_at_ms: i64,
        stale_node: Option<&str>,
        preferred_node: Option<&str>,
    ) -> StoreResult<Placed> {
        let reply: Option<(String, i64, i64, i64)> = self
            .scripts
            .place
            .key(self.mapping_key(session_id))
            .key(self.key(&["placeable"]))
            .key(self.key(&["registry"]))
            .arg(self.prefix.as_ref())
            .arg(session_id)
            .arg(base)
            .arg(expires_at_ms)
            .arg(stale_node.unwrap_or(""))
            .arg(preferred_node.unwrap_or(""))
            .invoke_async(&mut self.conn())
            .await
            .context("placing a session in Redis")?;
        Ok(match reply {
            None => Placed::NoNode,
            Some((_, _, _, -1)) => Placed::NotReady,
            Some((node, base, exp, created)) => Placed::Placed(Placement {
                mapping: Mapping {
                    node,
                    base,
                    expires_at_ms: exp,
                },
                created: created == 1,
            }),
        })
    }

    /// Drops every session still mapped to `address`. Returns their ids.
    pub async fn unmap_node(&self, address: &str) -> StoreResult<Vec<String>> {
        self.scripts
            .unmap_node
            .key(self.key(&["node", address]))
            .key(self.key(&["placeable"]))
            .arg(self.prefix.as_ref())
            .arg(address)
            .invoke_async(&mut self.conn())
            .await
            .context("unmapping a node's sessions in Redis")
    }

    /// Ids of the sessions mapped to a node. O(sessions of the node).
    pub async fn node_sessions(&self, address: &str) -> StoreResult<Vec<String>> {
        Ok(self
            .read_expiring(address, None, usize::MAX, true)
            .await?
            .ids)
    }

    /// The sessions placed on `address` whose life ends at or before `by_ms`,
    /// at most `limit`, oldest first, read from the node's expiry lists:
    /// O(entries of the seconds read). Unchecked: some may have left the
    /// node or live longer since; the cleaner re-reads them under the lock.
    pub async fn expiring(&self, address: &str, by_ms: i64, limit: usize) -> StoreResult<Expiring> {
        self.read_expiring(address, Some(by_ms), limit, false).await
    }

    async fn read_expiring(
        &self,
        address: &str,
        by_ms: Option<i64>,
        limit: usize,
        checked: bool,
    ) -> StoreResult<Expiring> {
        let (ids, passed): (Vec<String>, Vec<String>) = self
            .scripts
            .expiring
            .arg(self.prefix.as_ref())
            .arg(address)
            .arg(by_ms.map_or_else(|| "all".to_owned(), |by| by.to_string()))
            .arg(limit.min(i64::MAX as usize) as i64)
            .arg(if checked { "checked" } else { "" })
            .invoke_async(&mut self.conn())
            .await
            .context("reading a node's expiring sessions from Redis")?;
        Ok(Expiring { ids, passed })
    }

    /// Forgets the expiry-list entries [`Self::expiring`] read of seconds
    /// that passed, once their sessions were archived.
    pub async fn forget_expiring(&self, address: &str, passed: &[String]) -> StoreResult<()> {
        if passed.is_empty() {
            return Ok(());
        }
        self.scripts
            .forget_expiring
            .arg(self.prefix.as_ref())
            .arg(address)
            .arg(passed)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("forgetting passed expiry lists in Redis")?;
        Ok(())
    }

    /// The node and expiry time of each session (`None` where it has no
    /// mapping), in one pipelined round trip.
    pub async fn placements_of(
        &self,
        session_ids: &[String],
    ) -> StoreResult<Vec<Option<(String, i64)>>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in session_ids {
            pipe.cmd("HGET").arg(self.mapping_key(id)).arg(id);
        }
        let values: Vec<Option<String>> = pipe
            .query_async(&mut self.conn())
            .await
            .context("reading the nodes and expiries of sessions from Redis")?;
        let mut placements = Vec::with_capacity(values.len());
        for value in values {
            let placed = match value.as_deref().and_then(unpack_mapping) {
                Some((number, _, exp)) => self
                    .node_address(number)
                    .await?
                    .map(|node| (node.to_string(), exp)),
                None => None,
            };
            placements.push(placed);
        }
        Ok(placements)
    }

    /// After a clean and fold: unmaps `leaving`, sets the new base of the
    /// sessions in `rebased` that are still on the node.
    pub async fn apply_clean(
        &self,
        address: &str,
        leaving: &[String],
        rebased: &[(String, i64)],
    ) -> StoreResult<usize> {
        let mut invocation = self.scripts.apply_clean.prepare_invoke();
        invocation
            .key(self.key(&["node", address]))
            .key(self.key(&["placeable"]))
            .arg(self.prefix.as_ref())
            .arg(address)
            .arg(leaving.len());
        for id in leaving {
            invocation.arg(id);
        }
        for (id, base) in rebased {
            invocation.arg(id).arg(*base);
        }
        invocation
            .invoke_async(&mut self.conn())
            .await
            .context("applying a clean to the session mappings in Redis")
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

    #[test]
    fn the_bucket_is_the_first_four_hex_digits_of_the_ids_sha1() {
        // SHA-1("u1") = 4b8e3f5c...; Redis's sha1hex gives the same digits
        // (checked against a real Redis in tests/store.rs).
        assert_eq!(mapping_bucket("u1").len(), 4);
        assert!(mapping_bucket("u1").chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(mapping_bucket("u1"), mapping_bucket("u1"));
    }
}
