//! `NodeCleaner`: every `/clean` of a node goes through here, under the
//! fence, so that no press is in flight to the node on any replica while it
//! forgets its sessions (DESIGN §4.7), and every session it archived is
//! folded before its next press (§4.6).
//!
//! A clean runs as: lock the node, raise the fence, wait for every live
//! replica's ack, write the journal, `/clean`, fold, apply the outcome to the
//! mappings, delete the journal, lower the fence. If the cleaner dies after
//! `/clean`, the fence stays up (presses of that node wait) until a sweep
//! finds the stale fence and finishes the journal: the fold is safe to repeat.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::lock::{with_node_lock, LOCK_TTL_MS};
use crate::archive::{Archive, ArchiveError};
use crate::nodes::{CleanOutcome, NodeCallError, NodeClient, NodeTable};
use crate::store::{now_ms, Journal, NodeState, SessionStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("node {node} is busy with another operation")]
    Busy { node: String },
    #[error("replicas {missing:?} did not close their gates to {node} in time")]
    FenceTimeout { node: String, missing: Vec<String> },
    #[error("node {node} could not clean: {source}")]
    Node {
        node: String,
        #[source]
        source: NodeCallError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// What one clean did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Sessions unmapped (they restore from the archive on their next press).
    pub unmapped: usize,
    /// Live sessions that stayed on the node with a new base.
    pub rebased: usize,
    /// Whether the node archived (false: it was down or did not answer).
    pub archived: bool,
}

#[derive(Clone)]
pub struct NodeCleaner {
    store: SessionStore,
    archive: Archive,
    client: NodeClient,
    table: Arc<NodeTable>,
    /// A replica whose heartbeat is older than this is presumed dead and
    /// not waited for. Longer than a press can take, so a replica cut off
    /// from Redis has finished its in-flight presses before it is ignored.
    liveness: Duration,
    /// How long a cleaner waits for acks before giving up (and retrying later).
    ack_timeout: Duration,
}

impl NodeCleaner {
    pub fn new(
        store: SessionStore,
        archive: Archive,
        client: NodeClient,
        table: Arc<NodeTable>,
        node_timeout: Duration,
    ) -> Self {
        Self {
            store,
            archive,
            client,
            table,
            liveness: node_timeout + Duration::from_secs(1),
            ack_timeout: node_timeout + Duration::from_secs(2),
        }
    }

    fn busy(node: &str) -> impl FnOnce() -> CleanError + '_ {
        move || CleanError::Busy {
            node: node.to_owned(),
        }
    }

    /// Archives the expired sessions `ids` of a node and unmaps them; the
    /// node's other sessions stay on it (with a new base if the node cleaned
    /// them too). Sessions no longer mapped to the node are skipped.
    pub async fn expire(&self, addr: &str, ids: &[String]) -> Result<CleanReport, CleanError> {
        with_node_lock(&self.store, addr, Self::busy(addr), async {
            // Re-read under the lock: another replica may have done it.
            let nodes = self.store.nodes_of(ids).await?;
            let leaving: Vec<String> = ids
                .iter()
                .zip(nodes)
                .filter(|(_, node)| node.as_deref() == Some(addr))
                .map(|(id, _)| id.clone())
                .collect();
            if leaving.is_empty() {
                return Ok(CleanReport::default());
            }
            let state = self.store.get_node(addr).await?.map(|n| n.state);
            if state != Some(NodeState::Up) && state != Some(NodeState::Draining) {
                // Down or gone: nothing to archive, their last archive stands.
                let unmapped = self.store.apply_clean(addr, &leaving, &[]).await?;
                return Ok(CleanReport {
                    unmapped,
                    ..CleanReport::default()
                });
            }
            self.fenced_clean(addr, leaving, true).await
        })
        .await
    }

    /// Removal: archive every session of the node (unless it is down),
    /// unmap them all, delete the node. The caller holds the node lock.
    pub async fn remove(&self, addr: &str, state: NodeState) -> Result<CleanReport, CleanError> {
        let report = if state == NodeState::Down {
            // Its counts are stale and some sessions live elsewhere already:
            // archiving would overwrite newer totals. Drop its mappings.
            let unmapped = self.store.unmap_node(addr).await?.len();
            CleanReport {
                unmapped,
                ..CleanReport::default()
            }
        } else {
            let leaving = self.store.node_sessions(addr).await?;
            match self.fenced_clean(addr, leaving, false).await {
                Err(CleanError::Node { source, .. }) => {
                    warn!(node = %addr, error = %source, "node did not archive on removal; its clicks since the last archive are lost");
                    let unmapped = self.store.unmap_node(addr).await?.len();
                    CleanReport {
                        unmapped,
                        ..CleanReport::default()
                    }
                }
                other => other?,
            }
        };
        self.store.delete_node(addr).await?;
        Ok(report)
    }

    /// Recovery of a down node: under the fence, unmap its sessions (they
    /// restore from the archive) and wipe it with `/clean archive=false`.
    /// The caller holds the node lock.
    pub async fn wipe(&self, addr: &str) -> Result<usize, CleanError> {
        let seq = self.raise_and_wait(addr).await?;
        let result = async {
            let dropped = self.store.unmap_node(addr).await?;
            self.client
                .clean(addr, false, None)
                .await
                .map_err(|source| CleanError::Node {
                    node: addr.to_owned(),
                    source,
                })?;
            Ok(dropped.len())
        }
        .await;
        self.store.lower_fence(addr, seq).await?;
        result
    }

    /// The clean proper, under the fence: `/clean archive=true`, asking the
    /// node to clean only `leaving` when `selective` (a node may clean all
    /// anyway). `leaving` are unmapped afterwards.
    async fn fenced_clean(
        &self,
        addr: &str,
        leaving: Vec<String>,
        selective: bool,
    ) -> Result<CleanReport, CleanError> {
        let seq = self.raise_and_wait(addr).await?;
        let journal = Journal { seq, leaving };
        if let Err(error) = self.store.put_journal(addr, &journal).await {
            self.store.lower_fence(addr, seq).await?;
            return Err(error.into());
        }
        let only = selective.then_some(journal.leaving.as_slice());
        let outcome = match self.client.clean(addr, true, only).await {
            Ok(outcome) => outcome,
            Err(source) => {
                // Nothing was forgotten: lift the fence, leave the mappings.
                self.store.delete_journal(addr).await?;
                self.store.lower_fence(addr, seq).await?;
                return Err(CleanError::Node {
                    node: addr.to_owned(),
                    source,
                });
            }
        };
        // From here on the node has forgotten sessions.
        let report = match self.fold_and_apply(addr, &journal, outcome.clone()).await {
            Ok(report) => report,
            Err(CleanError::Archive(error)) => {
                // Postgres went away between the node's archive and our fold:
                // unmap everything the node forgot. Their totals are safe in
                // the archive; their next press restores them (503 until
                // Postgres is back) instead of waiting behind the fence.
                let forgotten = match outcome {
                    CleanOutcome::Only(_) => journal.leaving.clone(),
                    CleanOutcome::All => self.store.node_sessions(addr).await?,
                };
                self.store.apply_clean(addr, &forgotten, &[]).await?;
                self.store.delete_journal(addr).await?;
                self.store.lower_fence(addr, seq).await?;
                return Err(CleanError::Archive(error));
            }
            // Redis failed: the fence and the journal stay until a sweep
            // finishes the clean.
            Err(other) => return Err(other),
        };
        self.store.delete_journal(addr).await?;
        self.store.lower_fence(addr, seq).await?;
        info!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, "node cleaned");
        Ok(report)
    }

    /// Fold what the node archived, then unmap the leaving sessions and
    /// re-base the live ones the node forgot too.
    async fn fold_and_apply(
        &self,
        addr: &str,
        journal: &Journal,
        outcome: CleanOutcome,
    ) -> Result<CleanReport, CleanError> {
        let (folded_ids, cleaned_all) = match outcome {
            CleanOutcome::Only(_) => (journal.leaving.clone(), false),
            CleanOutcome::All => (self.store.node_sessions(addr).await?, true),
        };
        let totals = self.archive.fold(&folded_ids).await?;
        let leaving: HashSet<&String> = journal.leaving.iter().collect();
        // A live session without an archive row had no clicks on the node:
        // its base is unchanged and stays as it is.
        let rebased: Vec<(String, i64)> = if cleaned_all {
            totals
                .into_iter()
                .filter(|(id, _)| !leaving.contains(id))
                .collect()
        } else {
            Vec::new()
        };
        let unmapped = self
            .store
            .apply_clean(addr, &journal.leaving, &rebased)
            .await?;
        Ok(CleanReport {
            unmapped,
            rebased: rebased.len(),
            archived: true,
        })
    }

    /// Finishes a clean whose cleaner died after `/clean`: the stale fence
    /// stays up until the fold is repeated. Folding every session of the
    /// node is right whichever way the node cleaned (a second fold is a no-op).
    pub async fn finish_stale(&self, addr: &str, seq: u64) -> Result<bool, CleanError> {
        with_node_lock(&self.store, addr, Self::busy(addr), async {
            let Some(journal) = self.store.journal(addr).await? else {
                self.store.lower_fence(addr, seq).await?;
                return Ok(false);
            };
            let report = self.fold_and_apply(addr, &journal, CleanOutcome::All).await?;
            self.store.delete_journal(addr).await?;
            self.store.lower_fence(addr, journal.seq).await?;
            if journal.seq != seq {
                self.store.lower_fence(addr, seq).await?;
            }
            warn!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, "finished an interrupted clean");
            Ok(true)
        })
        .await
    }

    /// Raises the fence on a node and waits until every live replica has
    /// closed its gate to it.
    async fn raise_and_wait(&self, addr: &str) -> Result<u64, CleanError> {
        let seq = self
            .store
            .raise_fence(addr, now_ms() + LOCK_TTL_MS as i64)
            .await?;
        let deadline = tokio::time::Instant::now() + self.ack_timeout;
        loop {
            let since = now_ms() - self.liveness.as_millis() as i64;
            let live = self.store.live_replicas(since).await?;
            let acks = self.store.fence_acks(addr, seq).await?;
            let missing: Vec<String> = live.into_iter().filter(|r| !acks.contains(r)).collect();
            if missing.is_empty() {
                return Ok(seq);
            }
            if tokio::time::Instant::now() >= deadline {
                self.store.lower_fence(addr, seq).await?;
                return Err(CleanError::FenceTimeout {
                    node: addr.to_owned(),
                    missing,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn table(&self) -> &Arc<NodeTable> {
        &self.table
    }
}
