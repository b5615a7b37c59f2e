//! `NodeCleaner`: every `/clean` of a node and every move of sessions off a
//! node goes through here, under the node's fence, so that no press is in
//! flight to the node on any replica meanwhile (design.md §4.7, §4.10), and
//! every session the node archived is folded before its next press (§4.6).
//!
//! A clean runs as: lock the node, raise the fence, wait for every live
//! replica's ack, take a clean token, write the journal, `/clean` with the
//! token, fold, apply the outcome to the mappings, delete the journal, lower
//! the fence. A clean that does not end in OK has its token revoked, so
//! whatever the node archives late is never folded; one that timed out or
//! could not reach the node is a node failure, handled right there under
//! the fence it holds. If the cleaner dies after `/clean`, the fence stays up
//! until a sweep finds it stale and finishes the journal (a second fold is a
//! no-op).
//!
//! Every operation runs in a task of its own ([`Detached`]): a press that
//! started it may be cancelled, the operation is not.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{info, warn};

use super::detached::Detached;
use super::down::record_marked_down;
use crate::archive::events::Actor;
use crate::archive::{Archive, ArchiveError};
use crate::nodes::{CleanOutcome, NodeCallError, NodeClient, NodeTable};
use crate::store::lock::{NodeLock, LOCK_TTL_MS, LOCK_WAIT};
use crate::store::{FenceReason, Journal, NodeState, SessionStore, StoreError};

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
    #[error("a clean task failed: {0}")]
    Task(String),
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
    /// Of the sessions an expiry clean was asked about, those still on the
    /// node and past their end when it looked under the lock.
    pub expired: usize,
}

/// What a wipe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wiped {
    /// Sessions unmapped (they restore from the archive).
    pub dropped: usize,
    /// Whether the node showed it cleans selectively.
    pub selective: bool,
}

/// A clean of a fencing node waits for a replica that sends epochs only if
/// it was heard from within this (two heartbeats)...
pub const FENCING_SILENCE: Duration = Duration::from_secs(2);
/// ...and for at most this long: its presses that reach the node after the
/// clean are refused there, uncounted, and read their mapping again.
pub const FENCING_ACK_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct NodeCleaner {
    store: SessionStore,
    archive: Archive,
    client: NodeClient,
    table: Arc<NodeTable>,
    detached: Detached,
    /// A replica whose heartbeat is older than this is presumed dead and
    /// not waited for. Longer than a press can take, so a replica cut off
    /// from Redis has finished its in-flight presses before it is ignored.
    liveness: Duration,
    /// How long a cleaner waits for acks before giving up (and retrying later).
    ack_timeout: Duration,
    /// Notified whenever a fence event arrives (acks included), so waiting
    /// for acks wakes at once instead of polling.
    events: Arc<Notify>,
}

impl NodeCleaner {
    /// `silence`: how long a replica may be silent and still be pressing a
    /// node (a press's timeout plus how long it trusts its cache).
    pub fn new(
        store: SessionStore,
        archive: Archive,
        client: NodeClient,
        table: Arc<NodeTable>,
        detached: Detached,
        silence: Duration,
        events: Arc<Notify>,
    ) -> Self {
        Self {
            store,
            archive,
            client,
            table,
            detached,
            liveness: silence + Duration::from_secs(1),
            ack_timeout: silence + Duration::from_secs(2),
            events,
        }
    }

    /// Runs `op` under the node's lock, in a task of its own.
    async fn locked<T, F, Fut>(&self, addr: &str, wait: Duration, op: F) -> Result<T, CleanError>
    where
        T: Send + 'static,
        F: FnOnce(NodeCleaner, NodeLock) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, CleanError>> + Send + 'static,
    {
        let node = addr.to_owned();
        let busy = move || CleanError::Busy { node };
        let this = self.clone();
        self.detached
            .under_node_lock(
                self.store.clone(),
                addr.to_owned(),
                wait,
                busy,
                CleanError::Task,
                move |lock| op(this, lock),
            )
            .await
    }

    /// Archives the expired sessions `ids` of a node and unmaps them; the
    /// node's other sessions stay on it (with a new base if the node cleaned
    /// them too). Sessions no longer mapped to the node are skipped.
    pub async fn expire(
        &self,
        addr: &str,
        ids: &[String],
        expired_by_ms: i64,
    ) -> Result<CleanReport, CleanError> {
        let ids = ids.to_vec();
        self.locked(addr, LOCK_WAIT, move |this, lock| async move {
            let addr = lock.node();
            // Re-read under the lock: another replica (or a press of ours)
            // may have done it, and the session may have been placed anew
            // since, on this very node; a live session is not archived.
            let placements = this.store.placements_of(&ids).await?;
            let leaving: Vec<String> = ids
                .iter()
                .zip(placements)
                .filter(|(_, placed)| {
                    placed
                        .as_ref()
                        .is_some_and(|(node, exp)| *node == addr && *exp <= expired_by_ms)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if leaving.is_empty() {
                return Ok(CleanReport::default());
            }
            let expired = leaving.len();
            let report = match this.store.get_node(addr).await?.map(|n| n.state) {
                Some(NodeState::Up | NodeState::Draining) => {
                    this.fenced_clean(&lock, leaving, true).await?
                }
                // Failed: its sessions leave under its fence, after its
                // archive writes are revoked; their last archive stands.
                Some(NodeState::Down) => CleanReport {
                    unmapped: this.fail_over_locked(&lock).await?,
                    ..CleanReport::default()
                },
                // Gone: nobody can press it any more.
                None => CleanReport {
                    unmapped: this
                        .store
                        .apply_clean(lock.lock(), addr, &leaving, &[])
                        .await?,
                    ..CleanReport::default()
                },
            };
            Ok(CleanReport { expired, ..report })
        })
        .await
    }

    /// Removal: archive every session of the node (unless it is down),
    /// unmap them all, delete the node.
    pub async fn remove(
        &self,
        lock: &NodeLock,
        state: NodeState,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        let report = if state == NodeState::Down {
            // Its counts are stale and some sessions live elsewhere already:
            // archiving would overwrite newer totals. Move what is left.
            CleanReport {
                unmapped: self.fail_over_locked(lock).await?,
                ..CleanReport::default()
            }
        } else {
            let leaving = self.store.node_sessions(addr).await?;
            match self.fenced_clean(lock, leaving, false).await {
                Err(CleanError::Node { source, .. }) if source.is_unreachable() => {
                    // The node failed and was failed over under the fence.
                    warn!(node = %addr, error = %source, "node did not archive on removal; its clicks since the last archive are lost");
                    CleanReport::default()
                }
                // A node that refused to archive still holds its counts:
                // it stays (draining) until a removal succeeds.
                other => other?,
            }
        };
        self.store.delete_node(addr).await?;
        Ok(report)
    }

    /// Recovery of a down node: under the fence, unmap its sessions (they
    /// restore from the archive) and wipe it with `/clean archive=false`.
    pub async fn wipe(&self, lock: &NodeLock) -> Result<Wiped, CleanError> {
        let addr = lock.node();
        let seq = self.raise_and_wait(lock, FenceReason::Clean, false).await?;
        let result = async {
            // The wipe archives nothing: its token only fences the node.
            // Taken before anything moves, so a wipe that arrives late (its
            // cleaner paused past the lock) forgets nothing placed after a
            // later operation, whose token is newer.
            let token = self.archive.wipe_token().await?;
            self.fence_out(lock, token).await?;
            let dropped = self.store.unmap_node(lock.lock(), addr).await?;
            lock.lock().check_held(&self.store).await?;
            let selective = self
                .client
                .wipe(addr, Some(token))
                .await
                .map_err(|source| CleanError::Node {
                    node: addr.to_owned(),
                    source,
                })?;
            self.store.set_node_epoch(addr, token as u64).await?;
            Ok(Wiped {
                dropped: dropped.len(),
                selective,
            })
        }
        .await;
        self.lower(addr, seq).await;
        result
    }

    /// A node was declared down: once every replica has stopped pressing it
    /// (the fence), revoke whatever it may still archive, then unmap its
    /// sessions so they continue elsewhere from their last archive
    /// (design.md §4.5, §4.10). Returns the sessions moved. Idempotent.
    pub async fn fail_over(&self, addr: &str) -> Result<usize, CleanError> {
        self.locked(addr, LOCK_WAIT, |this, lock| async move {
            if this.store.get_node(lock.node()).await?.map(|n| n.state) != Some(NodeState::Down) {
                return Ok(0); // recovered (and wiped) or removed meanwhile
            }
            this.fail_over_locked(&lock).await
        })
        .await
    }

    /// [`fail_over`](Self::fail_over) with the node lock held.
    async fn fail_over_locked(&self, lock: &NodeLock) -> Result<usize, CleanError> {
        let addr = lock.node();
        if self.store.node_sessions(addr).await?.is_empty() {
            // Nothing left to move, but what the node may still archive
            // must stay fenced out all the same.
            let below = self.archive.wipe_token().await?;
            self.fence_out(lock, below).await?;
            return Ok(0);
        }
        let seq = self.raise_and_wait(lock, FenceReason::Down, false).await?;
        let result = self.move_sessions_off(lock).await;
        self.lower(addr, seq).await;
        result
    }

    /// Under the fence: revoke the node's tokens, then unmap its sessions.
    async fn move_sessions_off(&self, lock: &NodeLock) -> Result<usize, CleanError> {
        let addr = lock.node();
        let below = self.archive.wipe_token().await?;
        let revoked = self.fence_out(lock, below).await?;
        let moved = self.store.unmap_node(lock.lock(), addr).await?.len();
        warn!(node = %addr, sessions = moved, tokens_revoked = revoked, "failed node's sessions moved off it");
        metrics::counter!("nodes_control_sessions_failed_over_total").increment(moved as u64);
        Ok(moved)
    }

    /// Revokes what a failed node may still archive: its tokens below
    /// `below`, a number this operation took from the sequence while it
    /// held the node. The lock is read after that number was taken, so an
    /// operation that paused before it (and lost the node) stops here, and
    /// one that pauses after it revokes nothing a later operation issued.
    async fn fence_out(&self, lock: &NodeLock, below: i64) -> Result<u64, CleanError> {
        lock.lock().check_held(&self.store).await?;
        Ok(self.archive.fence_failed_node(lock.node(), below).await?)
    }

    /// The clean proper, under the fence: `/clean archive=true`, asking the
    /// node to clean only `leaving` when `selective` (a node may clean all
    /// anyway). `leaving` are unmapped afterwards.
    async fn fenced_clean(
        &self,
        lock: &NodeLock,
        leaving: Vec<String>,
        selective: bool,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        // A clean left unsettled (its journal and fence stay up) is
        // finished by the sweep first: a new fence or journal over it
        // would orphan what the node archived under its token.
        if self.store.journal(addr).await?.is_some() {
            return Err(CleanError::Busy {
                node: addr.to_owned(),
            });
        }
        let seq = self.raise_and_wait(lock, FenceReason::Clean, true).await?;
        let result = self.clean_under_fence(lock, seq, leaving, selective).await;
        self.lower_unless_journaled(addr, seq);
        result
    }

    /// Lowers the fence once Redis answers, unless a journal was left behind
    /// (Redis failed after the node archived): then it stays up until a
    /// sweep finishes the clean. In the background, so a Redis outage does
    /// not keep the node fenced until the fence's deadline once Redis is back.
    fn lower_unless_journaled(&self, addr: &str, seq: u64) {
        let (this, addr) = (self.clone(), addr.to_owned());
        self.detached.spawn(async move {
            let give_up = tokio::time::Instant::now() + Duration::from_millis(LOCK_TTL_MS);
            while tokio::time::Instant::now() < give_up {
                match this.store.journal(&addr).await {
                    Ok(Some(journal)) if journal.seq == seq => return,
                    Ok(_) => {
                        if this.store.lower_fence(&addr, seq).await.is_ok() {
                            return;
                        }
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }

    async fn clean_under_fence(
        &self,
        lock: &NodeLock,
        seq: u64,
        leaving: Vec<String>,
        selective: bool,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        // The node may have failed while we waited for the acks: a failed
        // node is never asked to archive (its counts are stale).
        if self.store.get_node(addr).await?.map(|n| n.state) == Some(NodeState::Down) {
            return Ok(CleanReport {
                unmapped: self.move_sessions_off(lock).await?,
                ..CleanReport::default()
            });
        }
        let generation = self.archive.issue_token(addr).await?;
        let journal = Journal {
            seq,
            generation: Some(generation),
            leaving,
            selective,
        };
        if !self.store.put_journal(lock.lock(), addr, &journal).await? {
            self.archive.revoke_token(generation).await?;
            return Err(CleanError::Busy {
                node: addr.to_owned(),
            });
        }
        lock.lock().check()?;
        let only = selective.then_some(journal.leaving.as_slice());
        let outcome = match self.client.clean(addr, true, only, Some(generation)).await {
            Ok(outcome) => outcome,
            Err(source) => return Err(self.clean_failed(lock, &journal, source).await),
        };
        // From here on the node has forgotten sessions. If Postgres or
        // Redis fails before the clean is settled, the journal stays and
        // with it the fence: the sweep finishes the clean once they answer
        // ([`finish_stale`](Self::finish_stale)), and not one session is
        // unmapped before its token is recorded completed (a token left
        // neither completed nor revoked would be revoked by a later
        // failover, and what the node archived with it lost).
        self.settle(lock, &journal, generation, outcome).await
    }

    /// The end of a clean the node did: fold and apply it, record its
    /// token as the node's fencing epoch (before the fence comes down, so
    /// presses read after it carry the epoch) and delete the journal.
    async fn settle(
        &self,
        lock: &NodeLock,
        journal: &Journal,
        generation: i64,
        outcome: CleanOutcome,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        let report = self.fold_and_apply(lock, journal, outcome).await?;
        self.store
            .end_journal(lock.lock(), addr, journal.seq, Some(generation as u64))
            .await?;
        info!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, generation, "node cleaned");
        Ok(report)
    }

    /// A `/clean` that did not end in OK: its token is revoked (whatever the
    /// node wrote with it is never folded). A node that did not answer at
    /// all failed: it is declared down and its sessions move off it now,
    /// under the fence this clean holds. A node that answered an error
    /// forgot nothing and keeps its sessions. The journal is ended last: a
    /// cleaner that pauses anywhere in here leaves it, and its fence, to the
    /// sweep, which finds the token revoked and fails the node over
    /// ([`finish_stale`](Self::finish_stale)). An operation that lost the
    /// node's lock meanwhile stops where it finds out.
    async fn clean_failed(
        &self,
        lock: &NodeLock,
        journal: &Journal,
        source: NodeCallError,
    ) -> CleanError {
        let addr = lock.node();
        let handled = async {
            if let Some(generation) = journal.generation {
                lock.lock().check_held(&self.store).await?;
                self.archive.revoke_token(generation).await?;
            }
            if source.is_unreachable() {
                warn!(node = %addr, error = %source, "node did not answer its clean; declaring it down");
                let reason = format!("did not answer a clean: {source}");
                self.declare_down(lock, &reason).await?;
                self.move_sessions_off(lock).await?;
            }
            self.store
                .end_journal(lock.lock(), addr, journal.seq, None)
                .await?;
            Ok::<_, CleanError>(())
        };
        match handled.await {
            Ok(()) => CleanError::Node {
                node: addr.to_owned(),
                source,
            },
            Err(error) => error,
        }
    }

    /// Marks the node down, under its lock: in this view first, then in
    /// Redis (only while the lock is still this operation's).
    async fn declare_down(&self, lock: &NodeLock, reason: &str) -> Result<(), CleanError> {
        let addr = lock.node();
        if let Some(entry) = self.table.get(addr) {
            entry.set_state(NodeState::Down);
        }
        let before = self
            .store
            .set_node_state_locked(
                lock.lock(),
                addr,
                NodeState::Down,
                &[NodeState::Up, NodeState::Draining],
            )
            .await?;
        if let Some(before) = before {
            record_marked_down(
                &self.store,
                &self.archive,
                addr,
                Actor::Clean,
                before,
                reason,
            )
            .await;
        }
        Ok(())
    }

    /// Settle what the node archived, then unmap the leaving sessions and
    /// re-base the live ones the node forgot too.
    ///
    /// A node that archived only the leaving sessions needs no fold now:
    /// their rows stand as written, under a token marked completed (one row
    /// updated), and each is folded when its session comes back, since
    /// placement folds first. A node that forgot everything is folded at
    /// once: its live sessions are re-based on their totals, and the node
    /// will archive them again from zero.
    async fn fold_and_apply(
        &self,
        lock: &NodeLock,
        journal: &Journal,
        outcome: CleanOutcome,
    ) -> Result<CleanReport, CleanError> {
        let addr = lock.node();
        if let (CleanOutcome::Only(_), Some(generation)) = (&outcome, journal.generation) {
            if !self.archive.complete_token(generation).await? {
                // Revoked: another operation took the node over (this one
                // paused) and failed it; the journal is its to finish.
                return Err(StoreError::lock_lost().into());
            }
            let unmapped = self
                .store
                .apply_clean(lock.lock(), addr, &journal.leaving, &[])
                .await?;
            return Ok(CleanReport {
                unmapped,
                archived: true,
                ..CleanReport::default()
            });
        }
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
            .apply_clean(lock.lock(), addr, &journal.leaving, &rebased)
            .await?;
        Ok(CleanReport {
            unmapped,
            rebased: rebased.len(),
            archived: true,
            ..CleanReport::default()
        })
    }

    /// Finishes a clean whose cleaner died (or lost Postgres or Redis)
    /// after writing its journal: the stale fence stays up until then.
    /// Finished only when the node finished it: the clean is sent again,
    /// with its token and its sessions. A node that did it already holds
    /// nothing of those sessions (no press reached it since: the fence is
    /// up, and a fencing node refuses presses from before the clean), so
    /// it archives nothing and forgets nothing new; one that never got it
    /// does it now. Then it is settled as any clean. A node that does not
    /// answer failed (its token is revoked and its sessions move, as for
    /// any clean it does not answer); one that answers an error keeps the
    /// journal for the next sweep, since the first `/clean` may have been
    /// done. A journal without a token (an older version's) is folded as
    /// before, whichever way the node cleaned (a second fold is a no-op).
    /// Skipped while another operation holds the node.
    pub async fn finish_stale(&self, addr: &str, seq: u64) -> Result<bool, CleanError> {
        self.locked(addr, Duration::ZERO, move |this, lock| async move {
            let addr = lock.node().to_owned();
            let Some(journal) = this.store.journal(&addr).await? else {
                // None, or one that does not parse (deleted here, or the
                // fence it keeps would never come down).
                this.store.end_journal(lock.lock(), &addr, seq, None).await?;
                this.store.lower_fence(&addr, seq).await?;
                return Ok(false);
            };
            let state = this.store.get_node(&addr).await?.map(|n| n.state);
            let report = match journal.generation {
                // Failed (or gone) since: it is never asked to archive, and
                // what it wrote under the token is revoked with its others.
                _ if state != Some(NodeState::Up) && state != Some(NodeState::Draining) => {
                    let unmapped = match state {
                        Some(_) => this.move_sessions_off(&lock).await?,
                        None => 0,
                    };
                    this.store.end_journal(lock.lock(), &addr, journal.seq, None).await?;
                    CleanReport {
                        unmapped,
                        ..CleanReport::default()
                    }
                }
                // Its cleaner gave up on the clean (or a failover raised
                // over it did), and whether the node did it is unknown:
                // the node is failed over, so nothing it forgot is counted
                // from zero.
                Some(generation) if this.archive.token_revoked(generation).await? => {
                    this.declare_down(&lock, "an interrupted clean was given up").await?;
                    let unmapped = this.move_sessions_off(&lock).await?;
                    this.store.end_journal(lock.lock(), &addr, journal.seq, None).await?;
                    CleanReport {
                        unmapped,
                        ..CleanReport::default()
                    }
                }
                Some(generation) => {
                    lock.lock().check_held(&this.store).await?;
                    let only = journal.selective.then_some(journal.leaving.as_slice());
                    match this.client.clean(&addr, true, only, Some(generation)).await {
                        Ok(outcome) => this.settle(&lock, &journal, generation, outcome).await?,
                        Err(source) if source.is_unreachable() => {
                            let error = this.clean_failed(&lock, &journal, source).await;
                            this.store.lower_fence(&addr, journal.seq).await?;
                            return Err(error);
                        }
                        Err(source) => {
                            return Err(CleanError::Node {
                                node: addr.clone(),
                                source,
                            })
                        }
                    }
                }
                None => {
                    let report = this.fold_and_apply(&lock, &journal, CleanOutcome::All).await?;
                    this.store.end_journal(lock.lock(), &addr, journal.seq, None).await?;
                    report
                }
            };
            this.store.lower_fence(&addr, journal.seq).await?;
            if journal.seq != seq {
                this.store.lower_fence(&addr, seq).await?;
            }
            warn!(node = %addr, unmapped = report.unmapped, rebased = report.rebased, "finished an interrupted clean");
            Ok(true)
        })
        .await
    }

    /// After Redis forgot everything (design.md §4.12): under the fence, a node
    /// that was up archives every session it holds with a fresh token, which
    /// is folded at once; a node that was down is only wiped (its counts are
    /// stale). Returns whether the node answered, and the clean's token:
    /// the node's fencing epoch from now on.
    pub async fn archive_all(
        &self,
        lock: &NodeLock,
        was_up: bool,
    ) -> Result<(bool, u64), CleanError> {
        let addr = lock.node();
        let seq = self.raise_and_wait(lock, FenceReason::Clean, true).await?;
        let result = async {
            lock.lock().check()?;
            if !was_up {
                let generation = self.archive.wipe_token().await?;
                self.fence_out(lock, generation).await?;
                let wiped = self.client.clean(addr, false, None, Some(generation)).await;
                return Ok((wiped.is_ok(), generation as u64));
            }
            let generation = self.archive.issue_token(addr).await?;
            match self.client.clean(addr, true, None, Some(generation)).await {
                Ok(_) => {
                    let folded = self.archive.fold_generation(generation).await?;
                    info!(node = %addr, sessions = folded, generation, "node archived after Redis forgot its sessions");
                    Ok((true, generation as u64))
                }
                Err(error) => {
                    warn!(node = %addr, %error, "node could not archive during the rebuild; it stays down");
                    self.archive.revoke_token(generation).await?;
                    self.fence_out(lock, generation).await?;
                    Ok((false, generation as u64))
                }
            }
        }
        .await;
        self.lower(addr, seq).await;
        result
    }

    /// Raises the fence on a node and waits until every live replica has
    /// closed its gate to it.
    /// `token_first`: the node gets the clean's token before any mapping
    /// changes, so a fencing node refuses what a silent replica sends
    /// afterwards and the wait may be short. A failover (nothing reaches
    /// the node) and a wipe (it unmaps first) wait for every replica.
    async fn raise_and_wait(
        &self,
        lock: &NodeLock,
        reason: FenceReason,
        token_first: bool,
    ) -> Result<u64, CleanError> {
        let started = std::time::Instant::now();
        let raised = self.raise_and_wait_acks(lock, reason, token_first).await;
        let outcome = if raised.is_ok() { "acked" } else { "failed" };
        metrics::histogram!("nodes_control_fence_wait_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        raised
    }

    async fn raise_and_wait_acks(
        &self,
        lock: &NodeLock,
        reason: FenceReason,
        token_first: bool,
    ) -> Result<u64, CleanError> {
        let addr = lock.node();
        let seq = self
            .store
            .raise_fence(
                lock.lock(),
                addr,
                Duration::from_millis(LOCK_TTL_MS),
                reason,
            )
            .await?;
        let started = tokio::time::Instant::now();
        let deadline = started + self.ack_timeout;
        // A node that enforces fencing epochs refuses whatever a replica
        // sends it from before this clean, so the replicas that send epochs
        // are waited for only while they answer promptly (design.md,
        // "Fencing at the node"): a paused one stalls nobody.
        let fencing = token_first && self.table.get(addr).is_some_and(|e| e.fences());
        loop {
            // Armed before the check, so an ack arriving meanwhile wakes us.
            let event = self.events.notified();
            let prompt = match started.elapsed() < FENCING_ACK_WAIT {
                true => FENCING_SILENCE,
                false => Duration::ZERO,
            };
            let live = self
                .store
                .replicas_to_wait_for(self.liveness, fencing.then_some(prompt))
                .await?;
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
            // The event wakes us; the timer covers a lost message.
            let _ = tokio::time::timeout(Duration::from_millis(100), event).await;
        }
    }

    /// Lowers a fence; if Redis refuses, the stale fence is lowered by the
    /// next sweep once its deadline passed.
    async fn lower(&self, addr: &str, seq: u64) {
        if let Err(error) = self.store.lower_fence(addr, seq).await {
            warn!(node = %addr, %error, "could not lower a fence; the sweep will");
        }
    }
}
