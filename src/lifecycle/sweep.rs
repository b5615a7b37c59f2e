//! The expiry sweep (design.md §4.3): every `SWEEP_INTERVAL_SECS`, archive the
//! sessions whose life ended, node by node, through the cleaner. It reads
//! only the expired part of each node's indexes: O(expired), never a
//! scan of the live sessions.
//! Nodes are cleaned concurrently, each within its own deadline: a hung node
//! delays only its own sessions (design.md §4.13).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::cleaner::{CleanError, CleanReport, NodeCleaner};
use crate::clock::Clock;
use crate::store::{NodeRecord, NodeState, StoreError};

/// Most sessions one sweep takes on; the rest wait for the next round.
pub const MAX_PER_SWEEP: usize = 100_000;
/// Most sessions one clean names: keeps the `/clean` body of a selective
/// node well under common request-size limits (about 250 KiB of ids).
pub const MAX_PER_CLEAN: usize = 5_000;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Expired sessions found (still on their node and past their end).
    pub expired: usize,
    /// Sessions unmapped (archived, or dropped from a down node).
    pub unmapped: usize,
    /// Live sessions re-based after a clean-all node forgot them.
    pub rebased: usize,
    /// Nodes whose clean failed; their sessions are retried next round.
    pub failed_nodes: Vec<String>,
    /// Interrupted cleans finished.
    pub recovered: usize,
}

impl SweepReport {
    /// One node's clean: what it did, or why it is retried next round.
    fn add(
        &mut self,
        node: String,
        sessions: usize,
        outcome: Option<Result<CleanReport, CleanError>>,
    ) {
        match outcome {
            Some(Ok(clean)) => {
                self.expired += clean.expired;
                self.unmapped += clean.unmapped;
                self.rebased += clean.rebased;
            }
            Some(Err(error)) => {
                warn!(%node, %error, sessions, "sweep could not clean node; retrying next round");
                self.failed_nodes.push(node);
            }
            None => {
                warn!(%node, sessions, "sweep gave up waiting for node; retrying next round");
                self.failed_nodes.push(node);
            }
        }
    }
}

#[derive(Clone)]
pub struct Sweeper {
    cleaner: NodeCleaner,
    /// How long one sweep waits for one node's cleans (they go on in the
    /// background if it passes; the node lock keeps them one at a time).
    node_deadline: Duration,
    /// A press that finds its session expired archives, in the same clean,
    /// its node's sessions that expire within this much: sessions created
    /// together expire together, and one fenced clean for the wave pauses
    /// the node's presses once instead of once per session. A session
    /// lives *at most* its TTL (design.md §4.3), so ending these a moment early
    /// is allowed, and their next press continues from the archive.
    expiry_batch_ms: i64,
    /// One press-triggered clean per node at a time in this replica: the
    /// presses of a wave that find their sessions expired wait here, on a
    /// local lock, and most find their session archived already, instead
    /// of queueing one by one on the node's Redis lock to learn it.
    expiring: Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// Session time: what "expired" is measured against.
    clock: Clock,
}

impl Sweeper {
    pub fn new(cleaner: NodeCleaner, node_timeout: Duration, ttl: Duration, clock: Clock) -> Self {
        Self {
            cleaner,
            node_deadline: node_timeout * 3 + Duration::from_secs(2),
            expiry_batch_ms: (ttl / 4).min(Duration::from_secs(1)).as_millis() as i64,
            expiring: Arc::default(),
            clock,
        }
    }

    /// The clock sessions expire on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// One sweep at session time `now_ms`: finish interrupted cleans (a
    /// fence past its deadline in real time), then archive every session
    /// expired by `now_ms`.
    pub async fn sweep_once(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        let started = std::time::Instant::now();
        let report = self.sweep_at(now_ms).await;
        metrics::histogram!("nodes_control_sweep_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        report
    }

    async fn sweep_at(&self, now_ms: i64) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport {
            recovered: self.finish_stale_fences().await?,
            ..SweepReport::default()
        };
        // Each node's indexes, read only as far as `now_ms`.
        let nodes = self.cleaner.store().nodes.list_nodes().await?;
        let reads = nodes.iter().map(|node| {
            self.cleaner
                .store()
                .sessions
                .expiring(&node.address, now_ms, MAX_PER_SWEEP)
        });
        let mut due = Vec::new();
        for (node, expiring) in nodes.iter().zip(futures::future::join_all(reads).await) {
            let expiring = expiring?;
            if !expiring.is_empty() {
                due.push((node.address.clone(), expiring));
            }
        }
        let cleans = due.into_iter().map(|(node, expiring)| async move {
            let outcome = self.sweep_one(&node, &expiring, now_ms).await;
            (node, expiring.len(), outcome)
        });
        for (node, sessions, outcome) in futures::future::join_all(cleans).await {
            report.add(node, sessions, outcome);
        }
        // The counts placement goes by, made exact again (a placement that
        // lost a race, or whose replica died, may have left one too many).
        self.cleaner.store().sessions.tally(&nodes).await?;
        self.reopen_closed(&nodes).await?;
        if report.expired > 0 {
            info!(
                expired = report.expired,
                unmapped = report.unmapped,
                rebased = report.rebased,
                failed = report.failed_nodes.len(),
                "sweep done"
            );
        }
        metrics::counter!("nodes_control_sessions_expired_total").increment(report.unmapped as u64);
        Ok(report)
    }

    /// Finishes the cleans whose fences went stale (their cleaner stopped
    /// past the deadline, on Redis's clock, which set it). Returns how many.
    async fn finish_stale_fences(&self) -> Result<usize, StoreError> {
        let (redis_now, fences) = self.cleaner.store().fences.fences_now().await?;
        let mut recovered = 0;
        for (node, fence) in fences {
            if fence.deadline_ms > redis_now {
                continue;
            }
            match self.cleaner.finish_stale(&node, fence.seq).await {
                Ok(true) => recovered += 1,
                Ok(false) => {}
                Err(error) => warn!(%node, %error, "could not finish an interrupted clean"),
            }
        }
        Ok(recovered)
    }

    /// Opens the up nodes a group still holds closed to new sessions (on a
    /// cluster: their claims are refused, so they would get none).
    async fn reopen_closed(&self, nodes: &[NodeRecord]) -> Result<(), StoreError> {
        let closed = self.cleaner.store().sessions.closed_numbers().await?;
        for node in nodes {
            if node.state == NodeState::Up && closed.contains(&node.number) {
                match self.cleaner.reopen(&node.address).await {
                    Ok(true) => {
                        warn!(node = %node.address, "node was up but closed to new sessions; opened")
                    }
                    Ok(false) => {}
                    Err(error) => {
                        warn!(node = %node.address, %error, "could not open a node to new sessions")
                    }
                }
            }
        }
        Ok(())
    }

    /// One node's part of a sweep: its expired sessions archived. `None`
    /// if it outlasted the node's deadline.
    async fn sweep_one(
        &self,
        node: &str,
        expiring: &[String],
        now_ms: i64,
    ) -> Option<Result<CleanReport, CleanError>> {
        tokio::time::timeout(self.node_deadline, self.expire_all(node, expiring, now_ms))
            .await
            .ok()
    }

    /// Every expired session of one node, in batches of [`MAX_PER_CLEAN`].
    async fn expire_all(
        &self,
        node: &str,
        ids: &[String],
        now_ms: i64,
    ) -> Result<CleanReport, CleanError> {
        let mut total = CleanReport::default();
        for batch in ids.chunks(MAX_PER_CLEAN) {
            let clean = self.cleaner.expire(node, batch, now_ms).await?;
            total.expired += clean.expired;
            total.unmapped += clean.unmapped;
            total.rebased += clean.rebased;
        }
        Ok(total)
    }

    /// Archives an expired session now, with the other sessions of its node
    /// that expired or are about to (one clean for all of them): a press
    /// found it expired before the sweep got to it.
    pub async fn sweep_node(
        &self,
        addr: &str,
        session_id: &str,
        now_ms: i64,
    ) -> Result<(), super::CleanError> {
        let one_at_a_time = self
            .expiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr.to_owned())
            .or_default()
            .clone();
        let _turn = one_at_a_time.lock().await;
        // The clean we waited for may have taken this session along.
        match self
            .cleaner
            .store()
            .sessions
            .placements_of(&[session_id.to_owned()])
            .await?
            .pop()
        {
            Some(Some((node, expires))) if node == addr && expires <= now_ms => {}
            _ => return Ok(()),
        }
        let expired_by_ms = now_ms.saturating_add(self.expiry_batch_ms);
        let mut mine = self
            .cleaner
            .store()
            .sessions
            .expiring(addr, expired_by_ms, MAX_PER_CLEAN)
            .await?;
        if !mine.iter().any(|id| id == session_id) {
            mine.truncate(MAX_PER_CLEAN - 1);
            mine.push(session_id.to_owned());
        }
        self.cleaner.expire(addr, &mine, expired_by_ms).await?;
        Ok(())
    }

    /// Sweeps every `interval` until cancelled.
    pub async fn run(self, interval: Duration, cancel: CancellationToken) {
        crate::periodic::every(interval, cancel, || async {
            if let Err(error) = self.sweep_once(self.clock.now_ms()).await {
                warn!(%error, "sweep failed");
            }
        })
        .await
    }
}
