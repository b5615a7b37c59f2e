//! What each replica hands over with its acknowledgement of a failover's
//! fence: for every session it served on the failed node, the highest
//! total it answered of that placement (design.md, Failover). The failover
//! archives the highest on the node's behalf before it unmaps.
//!
//! Keys: `handover:{node}:{seq}:{replica}` (hash session id ->
//! "{expires at}:{total}"), written before the replica's ack, so a
//! failover that sees the ack finds the hand-over whole; they expire on
//! their own.

use super::Fences;
use crate::store::{Context, StoreResult};

/// Fields written per command: a node with many sessions is handed over
/// in slices, so no one command holds Redis for long.
const SLICE: usize = 1_000;

/// How long a hand-over is kept: longer than any failover waits for acks.
const KEEP_SECS: i64 = 300;

/// One session a replica showed on a failed node: which placement (its
/// end) and the highest total it answered for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOver {
    pub session: String,
    pub expires_at_ms: i64,
    pub total: i64,
}

impl Fences {
    /// Writes what `replica` showed of `address`'s sessions for the fence
    /// `seq`. Call it before acknowledging the fence.
    pub async fn hand_over(
        &self,
        address: &str,
        seq: u64,
        replica: &str,
        shown: &[HandedOver],
    ) -> StoreResult<()> {
        let key = self.key(&["handover", address, &seq.to_string(), replica]);
        for slice in shown.chunks(SLICE) {
            let fields: Vec<(&str, String)> = slice
                .iter()
                .map(|s| {
                    (
                        s.session.as_str(),
                        format!("{}:{}", s.expires_at_ms, s.total),
                    )
                })
                .collect();
            redis::pipe()
                .hset_multiple(&key, &fields)
                .expire(&key, KEEP_SECS)
                .query_async::<()>(&mut self.conn())
                .await
                .context("handing over the totals shown of a failed node's sessions in Redis")?;
        }
        Ok(())
    }

    /// Every hand-over of the fence `seq` on `address` from these replicas
    /// (those that acknowledged it), each replica's entries as it wrote them.
    pub async fn handed_over(
        &self,
        address: &str,
        seq: u64,
        replicas: &[String],
    ) -> StoreResult<Vec<HandedOver>> {
        let mut handed = Vec::new();
        for replica in replicas {
            let key = self.key(&["handover", address, &seq.to_string(), replica]);
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut self.conn())
                .await
                .context("reading the totals handed over for a failed node from Redis")?;
            handed.extend(fields.into_iter().filter_map(|(session, value)| {
                let (expires, total) = value.split_once(':')?;
                Some(HandedOver {
                    session,
                    expires_at_ms: expires.parse().ok()?,
                    total: total.parse().ok()?,
                })
            }));
        }
        Ok(handed)
    }
}
