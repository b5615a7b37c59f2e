//! One press, step by step, as the model has it (model.md):
//! each method here is one of its actions or a few in a row, named in its
//! comment. A [`Round`] is where the press stands between them.
//!
//! The one retry rule: a press goes round again only while it provably
//! was not counted (no mapping yet, the node cleaned or failed before the
//! press was sent, a fencing refusal, a connect its backlog refused), and
//! only until its deadline; a press the node may have counted is answered
//! 504 and never sent elsewhere.

use std::sync::Arc;

use protocol::press;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::attempt::{Attempt, Held};
use super::{Looked, Pressed, SessionService, MAX_REQUEUES};
use crate::lifecycle::CleanError;
use crate::nodes::{NodeCallError, NodeEntry};
use crate::session::error::{expire_error, Busy, PressError};
use crate::session::id::logged;
use crate::store::Mapping;

/// Where one press stands between its steps.
pub(super) struct Round<'a> {
    pub(super) id: &'a str,
    pub(super) deadline: Instant,
    /// The mapping the next step goes on with (`None`: place the session),
    /// and the clean mark read before it.
    pub(super) mapping: Option<Mapping>,
    pub(super) mark: u64,
    /// With no mapping read: the group's unmap count read with it, which
    /// the placement folds against (`Sessions::lookup_with_unmaps`).
    pub(super) seen: Option<String>,
    /// A node that failed this press before it was sent: a second such
    /// failure ends the press.
    failed: Option<(String, NodeCallError)>,
    /// This press moved its session off a failed node: the placement that
    /// follows is recorded as a failover.
    failed_over: bool,
    /// Until when it may queue for its node's limit, and how often it
    /// queued again after a connect the node's backlog refused.
    queued_until: Option<Instant>,
    requeues: u32,
}

/// What a round leaves the press with.
pub(super) enum Next {
    Answer(Pressed),
    /// Another round, on the mapping the round now holds.
    Again,
}

impl<'a> Round<'a> {
    pub(super) fn new(id: &'a str, deadline: Instant, (mapping, mark, seen): Looked) -> Self {
        Self {
            id,
            deadline,
            mapping,
            mark,
            seen,
            failed: None,
            failed_over: false,
            queued_until: None,
            requeues: 0,
        }
    }
}

impl SessionService {
    /// One round: the mapping (placed if there is none: `FoldOne`,
    /// `Place`), its node, the press through the gate (`SendPress`) and
    /// what came of it (`ReadAnswer`, `Timer`).
    pub(super) async fn round(&self, round: &mut Round<'_>) -> Result<Next, PressError> {
        let current = match round.mapping.take() {
            Some(m) => m,
            None => {
                let seen = round.seen.take();
                self.place(round.id, None, round.failed_over, seen).await?
            }
        };
        if current.expires_at_ms <= self.clock.now_ms() {
            self.expire(round, &current).await?;
            return Ok(Next::Again);
        }
        let Some(entry) = self.serving(round, &current).await? else {
            return Ok(Next::Again);
        };
        let Some((held, fence_epoch)) = self.enter(round, &entry).await? else {
            return Ok(Next::Again);
        };
        match self.attempt(&entry, round.id, held, fence_epoch).await {
            Ok(attempt) => self.outcome(round, entry, current, attempt).await,
            // Not the node's doing: it stays up, the press fails.
            Err(source) => {
                let node = entry.address.clone();
                Err(PressError::NodeFailed { node, source })
            }
        }
    }

    /// `Lookup` again: the mapping and the clean mark before it.
    async fn reread(&self, round: &mut Round<'_>) -> Result<(), PressError> {
        (round.mapping, round.mark, round.seen) = self.read(round.id).await?;
        Ok(())
    }

    /// Never serve an expired session (design.md §4.3): archive it (with
    /// its node's other expired sessions, a clean: `RaiseFence` ...
    /// `Settle`) and start anew.
    async fn expire(&self, round: &mut Round<'_>, current: &Mapping) -> Result<(), PressError> {
        let now = self.clock.now_ms();
        // Boxed, as every rare step here: the press's future stays small.
        match Box::pin(self.sweeper.sweep_node(&current.node, round.id, now)).await {
            Ok(()) => {}
            // The node died under the clean: the cleaner declared it down
            // and moved its sessions off under the clean's fence, so this
            // one starts anew elsewhere, from its archive.
            Err(CleanError::Node { source, .. }) if source.is_unreachable() => {
                round.failed_over = true;
            }
            Err(error) => return Err(expire_error(error)),
        }
        self.reread(round).await
    }

    /// The mapping's node, if it serves presses. A failed one is failed
    /// over first (the session moves only under its fence, design.md
    /// §4.10); a removed one leaves the session to be placed anew.
    async fn serving(
        &self,
        round: &mut Round<'_>,
        current: &Mapping,
    ) -> Result<Option<Arc<NodeEntry>>, PressError> {
        match self.entry(&current.node).await? {
            Some(entry) if entry.serves_presses() => Ok(Some(entry)),
            Some(entry) => {
                Box::pin(self.fail_over(&entry, round.id, round.deadline)).await?;
                round.failed_over = true;
                self.reread(round).await?;
                Ok(None)
            }
            None => {
                let placed = self.place(round.id, Some(&current.node), round.failed_over, None);
                round.mapping = Some(placed.await?);
                Ok(None)
            }
        }
    }

    /// `SendPress` up to the wire: through the node's gate (no clean of it
    /// starts while the press holds it) and into its queue. `None`: the
    /// node was cleaned since the mapping was read, which is read again.
    async fn enter(
        &self,
        round: &mut Round<'_>,
        entry: &Arc<NodeEntry>,
    ) -> Result<Option<(Held, u64)>, PressError> {
        let in_flight = entry.start_request();
        let Some(gate) = entry.enter(round.deadline - Instant::now()).await else {
            return Err(busy(entry, Busy::Cleaning));
        };
        // The fencing epoch first, then the clean mark: an epoch learned
        // after the mapping was read shows as a clean since (see
        // `NodeTable::learn_epoch`). While the gate is held no clean of
        // this node starts on a replica that answers its fence, so a
        // mapping read now holds until the press is answered; a node that
        // fences refuses it if a clean overtook it all the same.
        let fence_epoch = entry.fence_epoch();
        if entry.cleaned_since(round.mark) {
            self.reread(round).await?;
            return Ok(None);
        }
        // A place at the node, waited for in this replica's queue, taken
        // with the gate held: a press that waits out a clean does not spend
        // its queue time on it, and a clean waits for the queue at most
        // `NODE_QUEUE_TIMEOUT_MS`.
        let queue_until = *round
            .queued_until
            .get_or_insert_with(|| Instant::now() + self.queue_timeout);
        let queue_left = queue_until
            .min(round.deadline)
            .saturating_duration_since(Instant::now());
        let Some(permit) = entry.link.limit.acquire(queue_left).await else {
            metrics::counter!("nodes_control_node_busy_total").increment(1);
            return Err(busy(entry, Busy::Queue));
        };
        let held = Held {
            _gate: gate,
            _permit: permit,
            _in_flight: in_flight,
        };
        Ok(Some((held, fence_epoch)))
    }

    /// What the attempt makes of the press, by the retry rule
    /// (`protocol::press::next`): its answer, 504, or another round where
    /// nothing was counted.
    async fn outcome(
        &self,
        round: &mut Round<'_>,
        entry: Arc<NodeEntry>,
        current: Mapping,
        attempt: Attempt,
    ) -> Result<Next, PressError> {
        let heard = attempt.heard();
        let failed = matches!(attempt, Attempt::Failed(..));
        if let Attempt::Failed(error, _) = &attempt {
            Box::pin(self.mark_failed(&entry, round.id, error)).await;
        }
        match press::next(heard, current.base) {
            press::Next::Answer(clicks) => {
                // Remembered for a failover of the node (its hand-over).
                self.cache.answered(round.id, &current, clicks);
                Ok(Next::Answer(Pressed {
                    clicks,
                    node: entry,
                }))
            }
            press::Next::Unknown => {
                if failed {
                    // This press is over; its node is failed over apart.
                    self.fail_over_later(&entry);
                }
                Err(unknown(round.id, &entry, attempt))
            }
            press::Next::Again(how) => self.again(round, entry, current, attempt, how).await,
        }
    }

    /// Another round: nothing was counted. `how` (`protocol::press::Again`):
    /// a fencing refusal reads the mapping again; a spared node's full
    /// backlog queues again; a failed node is failed over first
    /// (`Timer { failed: true, sent: false }`, then `Lookup`).
    async fn again(
        &self,
        round: &mut Round<'_>,
        entry: Arc<NodeEntry>,
        current: Mapping,
        attempt: Attempt,
        how: press::Again,
    ) -> Result<Next, PressError> {
        let id = round.id;
        if how == press::Again::Requeue {
            return requeue(round, &entry, current);
        }
        let held = match attempt {
            // The node cleaned the session after its mapping was read.
            // Learn the node's epoch, read again.
            Attempt::Refused { fence } => {
                metrics::counter!("nodes_control_presses_refused_total").increment(1);
                debug!(node = %entry.address, session = %logged(id), fence, "press refused under an older fencing epoch");
                self.cache.forget(id);
                Box::pin(self.learn_after_refusal(&entry, fence)).await?;
                self.reread(round).await?;
                return Ok(Next::Again);
            }
            // Never another round but a requeue by the rule: the node may
            // have counted it.
            spared @ Attempt::Spared { .. } => return Err(unknown(id, &entry, spared)),
            Attempt::Abandoned { held, .. } => {
                debug!(node = %entry.address, session = %logged(id), "press not sent: node declared down");
                held
            }
            Attempt::Failed(error, held) => {
                // A second node failing an unsent press ends it.
                if let Some((node, source)) = round.failed.take() {
                    return Err(PressError::NodeFailed { node, source });
                }
                round.failed = Some((entry.address.clone(), error));
                metrics::counter!("nodes_control_failovers_total").increment(1);
                held
            }
            // Never another round by the rule: the node counted it.
            served @ Attempt::Served { .. } => return Err(unknown(id, &entry, served)),
        };
        drop(held);
        // The cached entry stays: it holds what this replica showed of the
        // session, which the failover's hand-over must find (its fence
        // voids the mapping itself).
        Box::pin(self.fail_over(&entry, id, round.deadline)).await?;
        round.failed_over = true;
        self.reread(round).await?;
        Ok(Next::Again)
    }
}

/// 504: the node may have counted the press.
fn unknown(id: &str, entry: &NodeEntry, attempt: Attempt) -> PressError {
    let node = entry.address.clone();
    let source = match attempt {
        Attempt::Served { .. } => {
            warn!(%node, session = %logged(id), "the node was failed over while this replica was silent; its count is not shown");
            return PressError::FailedOverMeanwhile { node };
        }
        Attempt::Failed(error, _) => error,
        Attempt::Spared { error, why } => {
            warn!(%node, %error, why = why.as_str(), "press not answered; the node stays up");
            error
        }
        Attempt::Abandoned { .. } => NodeCallError::Abandoned,
        // Never 504 by the rule: nothing was counted.
        Attempt::Refused { fence } => NodeCallError::StaleEpoch { fence },
    };
    PressError::OutcomeUnknown { node, source }
}

/// Spared, and provably not sent: the node's backlog refused the
/// connect. It queues again with a fresh queue time (the connect's wait
/// was the node's, not our queue's), a few times at most.
fn requeue(round: &mut Round<'_>, entry: &NodeEntry, current: Mapping) -> Result<Next, PressError> {
    round.requeues += 1;
    if round.requeues > MAX_REQUEUES {
        metrics::counter!("nodes_control_node_busy_total").increment(1);
        return Err(busy(entry, Busy::Queue));
    }
    round.queued_until = None;
    round.mapping = Some(current);
    Ok(Next::Again)
}

fn busy(entry: &NodeEntry, why: Busy) -> PressError {
    PressError::NodeBusy {
        node: entry.address.clone(),
        why,
    }
}
