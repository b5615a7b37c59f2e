//! Redis may come back with older data (design.md §4.16): restarted from
//! an older RDB or AOF, or a failover to a replica that had not received
//! the last writes. Its keys then look complete, so the registry epoch
//! alone cannot tell; its identity can. Every Redis process has a random
//! `run_id`; the one that held the registry when it was declared complete
//! is kept under `P{ctl}identity`. A Redis that restarted, however much it
//! kept, or a replica promoted in its place, reports another `run_id`
//! beside the old value, and the registry counts as forgotten: it is
//! rebuilt (every node archives and is cleaned under a fresh token before
//! anything is placed), as after amnesia. A restart that kept everything
//! costs that rebuild too; telling it apart would need a write counter
//! that Postgres also knows, on every placement.
//!
//! Between the moment Redis comes back and the once-a-second registry
//! check, a replica must not serve from it: any call that lost its
//! connection marks the identity unverified, and the next session read or
//! placement checks it first (one `INFO`), so no press is placed from, or
//! forwarded under, a mapping of the older data.
//!
//! On a Redis Cluster the check is not made (each primary has its own
//! `run_id`, and the groups would need to carry theirs): a cluster primary
//! that fails over to a lagging replica goes unnoticed unless it lost its
//! groups' epochs (the README's known limits).

use redis::AsyncCommands;

use super::{Context, Replicas, StoreResult};
use crate::store::StoreError;

/// What the identity check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The Redis that holds the registry is the one that completed it.
    Same,
    /// Another process answers (restarted or failed over): its data may be
    /// older than what was served.
    Changed,
    /// No registry yet (or no identity kept: written now).
    Unknown,
}

impl Replicas {
    /// The `run_id` of the Redis answering.
    async fn run_id(&self) -> StoreResult<String> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.conn())
            .await
            .context("reading the Redis server's identity")?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .unwrap_or_default()
            .trim()
            .to_owned())
    }

    /// Which server answers: its `run_id`, new at every start and on every
    /// failover (a Redis that may hold older data). On a Redis Cluster,
    /// where each primary has its own, one fixed word (not checked there).
    pub async fn server_id(&self) -> StoreResult<String> {
        if self.cluster {
            return Ok("cluster".to_owned());
        }
        self.run_id().await
    }

    /// Compares the answering Redis with the one that completed the
    /// registry (kept before the registry: a registry without one cannot
    /// be vouched for, and is rebuilt).
    pub async fn identity(&self) -> StoreResult<Identity> {
        if self.cluster {
            return Ok(Identity::Same);
        }
        let begun = self.verified.begin();
        let run_id = self.run_id().await?;
        let (kept, registry): (Option<String>, bool) = redis::pipe()
            .get(self.key(&["identity"]))
            .exists(self.key(&["registry"]))
            .query_async(&mut self.conn())
            .await
            .context("reading the registry's identity from Redis")?;
        let found = match kept {
            Some(kept) if kept == run_id => Identity::Same,
            Some(_) => Identity::Changed,
            None if registry => Identity::Changed,
            None => Identity::Unknown,
        };
        if found != Identity::Changed {
            self.verified.set(begun);
        }
        Ok(found)
    }

    /// Records the answering Redis as the registry's (before the registry
    /// is declared complete).
    pub async fn keep_identity(&self) -> StoreResult<()> {
        if self.cluster {
            return Ok(());
        }
        let run_id = self.run_id().await?;
        self.conn()
            .set::<_, _, ()>(self.key(&["identity"]), run_id)
            .await
            .context("writing the registry's identity to Redis")
    }

    /// Before a session is read or placed: nothing is served from a Redis
    /// whose identity changed since the registry was complete.
    pub(in crate::store) async fn check_identity(&self) -> StoreResult<()> {
        if self.verified.is_set() {
            return Ok(());
        }
        self.confirm_identity().await
    }

    /// Checks the identity now, whatever the calls since: before trusting
    /// a node's word over what Redis holds (a node that refuses an epoch
    /// newer than any Redis recorded may be talking to a rolled-back Redis).
    pub async fn confirm_identity(&self) -> StoreResult<()> {
        match self.identity().await? {
            Identity::Changed => Err(StoreError {
                context: "Redis restarted or failed over and may hold older data; the registry is being rebuilt",
                source: redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "Redis identity changed",
                )),
            }),
            Identity::Same | Identity::Unknown => Ok(()),
        }
    }
}
