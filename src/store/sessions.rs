//! Session mappings: the hot-path read and the atomic placement.

use redis::AsyncCommands;

use super::{Context, SessionStore, StoreResult};

/// Where a session lives and what its node's count must be offset by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Normalised address of the node holding the session.
    pub node: String,
    /// Clicks already folded into the archive (DESIGN §4.6): the user sees
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

impl SessionStore {
    /// The hot path: one plain `HMGET`, one round trip, no script.
    pub async fn lookup(&self, session_id: &str) -> StoreResult<Option<Mapping>> {
        let (node, base, exp): (Option<String>, Option<i64>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.key(&["session", session_id]))
            .arg(&["node", "base", "exp"])
            .query_async(&mut self.conn())
            .await
            .context("reading the session mapping from Redis")?;
        Ok(node.map(|node| Mapping {
            node,
            base: base.unwrap_or(0),
            expires_at_ms: exp.unwrap_or(i64::MAX),
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
            .key(self.key(&["session", session_id]))
            .key(self.key(&["placeable"]))
            .key(self.key(&["expiry"]))
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
            .key(self.key(&["node_sessions", address]))
            .key(self.key(&["node", address]))
            .key(self.key(&["expiry"]))
            .key(self.key(&["placeable"]))
            .arg(self.prefix.as_ref())
            .arg(address)
            .invoke_async(&mut self.conn())
            .await
            .context("unmapping a node's sessions in Redis")
    }

    /// Ids of the sessions mapped to a node.
    pub async fn node_sessions(&self, address: &str) -> StoreResult<Vec<String>> {
        self.conn()
            .smembers(self.key(&["node_sessions", address]))
            .await
            .context("listing a node's sessions in Redis")
    }
}

impl SessionStore {
    /// Up to `limit` sessions whose life ended at or before `now_ms`:
    /// `ZRANGEBYSCORE` on the expiry index, O(log n + expired).
    pub async fn expired(&self, now_ms: i64, limit: usize) -> StoreResult<Vec<String>> {
        redis::cmd("ZRANGEBYSCORE")
            .arg(self.key(&["expiry"]))
            .arg("-inf")
            .arg(now_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut self.conn())
            .await
            .context("reading expired sessions from Redis")
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
            pipe.cmd("HMGET")
                .arg(self.key(&["session", id]))
                .arg(&["node", "exp"]);
        }
        let rows: Vec<(Option<String>, Option<i64>)> = pipe
            .query_async(&mut self.conn())
            .await
            .context("reading the nodes and expiries of sessions from Redis")?;
        Ok(rows
            .into_iter()
            .map(|(node, exp)| node.map(|node| (node, exp.unwrap_or(i64::MAX))))
            .collect())
    }

    /// The node of each session (`None` where it has no mapping), in one
    /// pipelined round trip.
    pub async fn nodes_of(&self, session_ids: &[String]) -> StoreResult<Vec<Option<String>>> {
        let placements = self.placements_of(session_ids).await?;
        Ok(placements
            .into_iter()
            .map(|placed| placed.map(|(node, _)| node))
            .collect())
    }

    /// Drops index entries of sessions that no longer have a mapping (left
    /// behind only if a script was interrupted; keeps the sweep O(expired)).
    pub async fn forget_expiry(&self, session_ids: &[String]) -> StoreResult<()> {
        if session_ids.is_empty() {
            return Ok(());
        }
        self.conn()
            .zrem::<_, _, ()>(self.key(&["expiry"]), session_ids)
            .await
            .context("cleaning the expiry index in Redis")
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
            .key(self.key(&["node_sessions", address]))
            .key(self.key(&["expiry"]))
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
