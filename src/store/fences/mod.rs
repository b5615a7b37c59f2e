//! The distributed clean fence (design.md §4.7) and the replica registry it
//! needs: a node being cleaned has an entry in `fences`; every live replica
//! (heartbeat in `replicas`) closes its local gate to the node and acks; the
//! cleaner proceeds only when every live replica has acked.
//!
//! Every raise, lower and ack is also published on `events`, so replicas
//! and cleaners wake at once; the replicas' one-second poll is the fallback
//! that a lost message cannot defeat.
//!
//! Keys: `fences` (hash node -> "seq:deadline_ms:reason"), `fence_seq` (counter),
//! `fence_acks:{node}:{seq}` (set of replica ids), `replicas` (zset replica
//! id -> last heartbeat ms), `journal:{node}` (the clean in progress, so a
//! crashed cleaner's fold can be repeated), `handover:{node}:{seq}:{replica}`
//! (what a replica showed of a failed node's sessions: `hand_over`).

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use super::{guarded, timed, Context, Core, Lock, StoreResult};

mod hand_over;
pub use hand_over::HandedOver;

/// The clean fence and its journals.
#[derive(Clone)]
pub struct Fences {
    core: Arc<Core>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    raise_fence: redis::Script,
    lower_fence: redis::Script,
    fences_now: redis::Script,
    put_journal: redis::Script,
    end_journal: redis::Script,
}

impl Fences {
    pub(super) fn new(core: Arc<Core>) -> Self {
        let raise_fence = format!(
            "{}\n{}",
            include_str!("../redis_now.lua"),
            include_str!("raise_fence.lua")
        );
        let scripts = Scripts {
            raise_fence: guarded(&raise_fence),
            lower_fence: redis::Script::new(include_str!("lower_fence.lua")),
            fences_now: timed(include_str!("fences_now.lua")),
            put_journal: guarded(include_str!("put_journal.lua")),
            end_journal: guarded(include_str!("end_journal.lua")),
        };
        Self {
            core,
            scripts: Arc::new(scripts),
        }
    }

    /// Wakes every replica: a fence changed.
    async fn publish_event(&self, event: &str) -> StoreResult<()> {
        self.conn()
            .publish::<_, _, ()>(self.key(&["events"]), event)
            .await
            .context("publishing a fence event in Redis")
    }

    /// A dedicated connection subscribed to the events channel.
    pub async fn subscribe_events(&self) -> StoreResult<redis::aio::PubSub> {
        let mut pubsub =
            tokio::time::timeout(Duration::from_secs(2), self.client.get_async_pubsub())
                .await
                .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timed out")))
                .context("opening the Redis pub/sub connection")?
                .context("opening the Redis pub/sub connection")?;
        pubsub
            .subscribe(self.key(&["events"]))
            .await
            .context("subscribing to fence events in Redis")?;
        Ok(pubsub)
    }
}

/// A handle is the core with its own scripts: the core's keys and
/// connection are its own.
impl std::ops::Deref for Fences {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// A raised fence as the `fences` hash holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    pub seq: u64,
    pub deadline_ms: i64,
    pub reason: FenceReason,
}

/// Why a fence is up: replicas abort their presses in flight to a node
/// that failed instead of letting them run into the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceReason {
    /// A clean (sweep, removal, recovery, rebuild): presses wait.
    Clean,
    /// The node failed: presses in flight there are abandoned and fail over.
    Down,
}

impl FenceReason {
    fn as_str(self) -> &'static str {
        match self {
            FenceReason::Clean => "clean",
            FenceReason::Down => "down",
        }
    }
}

/// What a cleaner is about to do to a node, written before `/clean` and
/// deleted after the fold, so a crash in between can be finished by anyone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub seq: u64,
    /// The clean token the node was given.
    pub generation: i64,
    /// Sessions that leave the node (expired, or all of them on removal).
    /// The ones that stay are read from the node's set when folding.
    pub leaving: Vec<String>,
    /// An expiry's clean: the node was asked to clean only `leaving`,
    /// and only their placements that ended by then leave (one placed
    /// anew on the node meanwhile ends later and stays). `None`: a
    /// removal's, every session of the node leaves.
    pub expired_by: Option<i64>,
}

impl Journal {
    /// Whether the node was asked to clean only `leaving`.
    pub fn selective(&self) -> bool {
        self.expired_by.is_some()
    }
}

impl Fences {
    /// Raises a fence on a node, under its lock; returns its sequence
    /// number. The fence is stale `ttl` after now on Redis's clock
    /// (redis_now.lua).
    pub async fn raise_fence(
        &self,
        lock: &Lock,
        address: &str,
        ttl: std::time::Duration,
        reason: FenceReason,
    ) -> StoreResult<u64> {
        let (lock_key, token) = lock.key_and_token(self);
        let seq: u64 = self
            .scripts
            .raise_fence
            .key(lock_key)
            .key(self.key(&["fence_seq"]))
            .key(self.key(&["fences"]))
            .arg(token)
            .arg(address)
            .arg(ttl.as_millis().min(i64::MAX as u128 / 2) as i64)
            .arg(reason.as_str())
            .invoke_async(&mut self.conn())
            .await
            .context("raising a fence in Redis")?;
        self.publish_event("fence").await?;
        Ok(seq)
    }

    /// Lowers a fence if it is still the one raised with `seq`, unless a
    /// journal waits on the node: a fence never comes down over a clean the
    /// node may have done and nobody settled. Then the fence stays, stale
    /// at once if it is not the journal's own (a failover raised over it),
    /// so the next sweep finishes the journal
    /// ([`NodeCleaner::finish_stale`](crate::lifecycle::NodeCleaner::finish_stale)).
    pub async fn lower_fence(&self, address: &str, seq: u64) -> StoreResult<()> {
        self.scripts
            .lower_fence
            .key(self.key(&["fences"]))
            .key(self.key(&["fence_acks", address, &seq.to_string()]))
            .key(self.key(&["journal", address]))
            .arg(address)
            .arg(seq.to_string())
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("lowering a fence in Redis")?;
        self.publish_event("lowered").await
    }

    /// Every raised fence: one `HGETALL`, polled by each replica.
    pub async fn fences(&self) -> StoreResult<Vec<(String, Fence)>> {
        Ok(self.fences_now().await?.1)
    }

    /// Every raised fence, and now on Redis's clock, which their deadlines
    /// are on: whether a fence is stale is judged on the clock that set it.
    pub async fn fences_now(&self) -> StoreResult<(i64, Vec<(String, Fence)>)> {
        let (now, flat): (i64, Vec<String>) = self
            .scripts
            .fences_now
            .key(self.key(&["fences"]))
            .invoke_async(&mut self.conn())
            .await
            .context("reading fences from Redis")?;
        let raw = flat
            .chunks_exact(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()));
        Ok((
            now,
            raw.filter_map(|(node, value)| {
                let mut parts = value.split(':');
                let seq = parts.next()?.parse().ok()?;
                let deadline_ms = parts.next()?.parse().ok()?;
                let reason = match parts.next() {
                    Some("down") => FenceReason::Down,
                    _ => FenceReason::Clean,
                };
                Some((
                    node,
                    Fence {
                        seq,
                        deadline_ms,
                        reason,
                    },
                ))
            })
            .collect(),
        ))
    }

    pub async fn ack_fence(&self, address: &str, seq: u64, replica: &str) -> StoreResult<()> {
        let key = self.key(&["fence_acks", address, &seq.to_string()]);
        redis::pipe()
            .sadd(&key, replica)
            .expire(&key, 300)
            .query_async::<()>(&mut self.conn())
            .await
            .context("acknowledging a fence in Redis")?;
        self.publish_event("ack").await
    }

    pub async fn fence_acks(&self, address: &str, seq: u64) -> StoreResult<Vec<String>> {
        self.conn()
            .smembers(self.key(&["fence_acks", address, &seq.to_string()]))
            .await
            .context("reading fence acknowledgements from Redis")
    }

    /// Whether a clean of the node is under way: its fence is up, or its
    /// journal waits to be finished.
    pub async fn clean_in_progress(&self, address: &str) -> StoreResult<bool> {
        let (fenced, journaled): (bool, bool) = redis::pipe()
            .hexists(self.key(&["fences"]), address)
            .exists(self.key(&["journal", address]))
            .query_async(&mut self.conn())
            .await
            .context("reading whether a node is being cleaned from Redis")?;
        Ok(fenced || journaled)
    }

    /// Writes the journal of a clean about to start, under the node's
    /// lock; false if one is there already (it must be finished first).
    pub async fn put_journal(
        &self,
        lock: &Lock,
        address: &str,
        journal: &Journal,
    ) -> StoreResult<bool> {
        let (lock_key, token) = lock.key_and_token(self);
        let value = serde_json::to_string(journal).unwrap_or_default();
        let written: i64 = self
            .scripts
            .put_journal
            .key(lock_key)
            .key(self.key(&["journal", address]))
            .arg(token)
            .arg(value)
            .invoke_async(&mut self.conn())
            .await
            .context("writing a clean journal to Redis")?;
        Ok(written == 1)
    }

    pub async fn journal(&self, address: &str) -> StoreResult<Option<Journal>> {
        let value: Option<String> = self
            .conn()
            .get(self.key(&["journal", address]))
            .await
            .context("reading a clean journal from Redis")?;
        Ok(value.and_then(|v| serde_json::from_str(&v).ok()))
    }

    /// Ends the clean of journal `seq`, under the node's lock: records
    /// `epoch` (its token, when the node did it) as the node's fencing
    /// epoch and deletes the journal, in one script, so neither lands
    /// without the other, and neither after another operation took the
    /// node over. A journal of another clean is left alone.
    pub async fn end_journal(
        &self,
        lock: &Lock,
        address: &str,
        seq: u64,
        epoch: Option<u64>,
    ) -> StoreResult<()> {
        let (lock_key, token) = lock.key_and_token(self);
        self.scripts
            .end_journal
            .key(lock_key)
            .key(self.key(&["journal", address]))
            .key(self.key(&["node", address]))
            .arg(token)
            .arg(seq)
            .arg(epoch.map_or_else(String::new, |e| e.to_string()))
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("ending a clean journal in Redis")?;
        Ok(())
    }
}
