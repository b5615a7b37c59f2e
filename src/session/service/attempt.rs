//! One attempt at a press's node, and the press carried on past its
//! timeout at a node that is alive.

use std::sync::Arc;
use std::time::Duration;

use protocol::press::{self, Heard, NodeNow};
use tracing::{info, warn};

use super::SessionService;
use crate::archive::events::Actor;
use crate::cluster::NodeRegistry;
use crate::nodes::client::Exchange;
use crate::nodes::deadline::node_silence;
use crate::nodes::limit::InFlightPermit;
use crate::nodes::table::InFlight;
use crate::nodes::{NodeCallError, NodeEntry, Spared};
use crate::session::PressError;

/// How long a press refused by a node that is being cleaned waits before
/// it reads its mapping again.
const REFUSED_RETRY: Duration = Duration::from_millis(50);

/// A press's hold on its node: the gate (no clean of the node starts while
/// it is held), its place under the node's limit, its count in flight.
pub(super) struct Held {
    pub(super) _gate: tokio::sync::OwnedRwLockReadGuard<()>,
    pub(super) _permit: InFlightPermit,
    pub(super) _in_flight: InFlight,
}

/// How many `NODE_TIMEOUT_MS` periods a carried press may hold its node's
/// gate ([`SessionService::carry_on`]).
const CARRY_LIMIT: u32 = 10;

/// What happened to one attempt at a node.
pub(super) enum Attempt {
    /// The node counted it. `shown`: the count is still the session's
    /// (`protocol::press::count_shown`).
    Served { count: i64, shown: bool },
    /// The node was declared down before the press was sent (`sent`
    /// false: nothing was counted), or while it was at the node.
    Abandoned { sent: bool, held: Held },
    /// A fencing node refused the press, uncounted: it cleaned the session
    /// (token `fence`) after the mapping was read.
    Refused { fence: u64 },
    /// Time ran out (or a gateway answered 502/503) at a node that is
    /// alive, or the last one serving: it stays up. A press still at the
    /// node was carried on ([`SessionService::carry_on`]).
    Spared { error: NodeCallError, why: Spared },
    /// The node failed: it must be marked down while the gate is held.
    Failed(NodeCallError, Held),
}

impl Attempt {
    /// What the replica heard, for the retry rule (`protocol::press`).
    pub(super) fn heard(&self) -> Heard<i64> {
        match self {
            Attempt::Served { count, shown } => Heard::Counted {
                count: *count,
                shown: *shown,
            },
            Attempt::Refused { .. } => Heard::Refused,
            Attempt::Abandoned { sent, .. } => Heard::Failed { sent: *sent },
            Attempt::Failed(error, _) => Heard::Failed {
                sent: error.may_have_counted(),
            },
            Attempt::Spared { error, .. } => Heard::Spared {
                sent: error.may_have_counted(),
            },
        }
    }
}

impl SessionService {
    /// Forwards the press, giving up as soon as the node is declared down
    /// (by us or another replica): it will be wiped, its answer is moot.
    /// `held` is given back where the caller still needs the gate; a press
    /// the node may still count is carried on holding it (see
    /// [`carry_on`](Self::carry_on)). An error: the press could not be
    /// sent as it is, not the node's doing (it stays up).
    pub(super) async fn attempt(
        &self,
        entry: &Arc<NodeEntry>,
        id: &str,
        held: Held,
        fence_epoch: u64,
    ) -> Result<Attempt, NodeCallError> {
        let down = entry.declared_down();
        if !entry.serves_presses() {
            return Ok(Attempt::Abandoned { sent: false, held });
        }
        let epoch = entry.fences().then_some(fence_epoch);
        let contact = self.cache.lease().contact();
        let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut exchange = self.client().press(&entry.link, id, epoch, sent.clone())?;
        let sent_at = crate::clock::mono_ms();
        // The timer runs only while this replica does (`node_silence`):
        // one stopped or starved meanwhile reads the answer that came,
        // rather than take the node for silent.
        let result = tokio::select! {
            biased;
            result = &mut exchange => result,
            _ = down => {
                let sent = sent.load(std::sync::atomic::Ordering::Acquire);
                return Ok(Attempt::Abandoned { sent, held });
            }
            _ = node_silence(self.client().timeout()) => Err(NodeCallError::Timeout),
        };
        match result {
            Ok(count) => {
                entry.link.metrics.served();
                entry.evidence.answered();
                entry.link.limit.answered();
                let silent = !self.cache.lease().unbroken_since(contact);
                let now = match silent {
                    true => self.node_now(entry).await,
                    false => None,
                };
                let shown = press::count_shown(silent, now, fence_epoch);
                Ok(Attempt::Served { count, shown })
            }
            // The node is well and counted nothing.
            Err(NodeCallError::StaleEpoch { fence }) => {
                entry.evidence.answered();
                Ok(Attempt::Refused { fence })
            }
            Err(error) => self.unanswered(entry, error, sent_at, exchange, held).await,
        }
    }

    /// `Timer { failed, sent }`: the press failed or timed out; the node is
    /// judged failed (marked down by the caller, the gate still held) or
    /// spared: alive but saturated, or the last one up. A press still at a
    /// spared node is carried on.
    async fn unanswered(
        &self,
        entry: &Arc<NodeEntry>,
        error: NodeCallError,
        sent_at: u64,
        exchange: Exchange,
        held: Held,
    ) -> Result<Attempt, NodeCallError> {
        entry.link.metrics.failed();
        if !error.is_node_fault() {
            return Err(error);
        }
        let why = match self.table().spare(entry, &error, sent_at) {
            Some(why) => why,
            // Other nodes serve in this view, but another replica may be
            // taking them down at this moment: Redis has the last word.
            None if error.is_inconclusive()
                && !self
                    .registry
                    .mark_down_unless_last(
                        entry,
                        Actor::PressFailure,
                        &format!("a press failed: {error}"),
                    )
                    .await =>
            {
                Spared::LastNode
            }
            None => return Ok(Attempt::Failed(error, held)),
        };
        if why == Spared::Saturated {
            let accepted = match error {
                NodeCallError::ConnectTimeout => entry.link.connections_busy(),
                _ => None,
            };
            if let Some(limit) = entry.link.limit.saturated(accepted) {
                info!(node = %entry.address, limit, %error, "node saturated: fewer presses in flight to it");
            }
        }
        if matches!(error, NodeCallError::Timeout) {
            self.carry_on(entry.clone(), exchange, held);
        }
        Ok(Attempt::Spared { error, why })
    }

    /// A press that its node, alive but saturated, did not answer within
    /// `NODE_TIMEOUT_MS` is still at the node, which may yet count it. It
    /// keeps the node's gate, in a task of its own, until the node answers:
    /// no clean of the node starts on any replica meanwhile, so a count the
    /// node makes late can never land after a clean forgot the session
    /// (design.md, "Overload is not death"). Every `NODE_TIMEOUT_MS` it
    /// looks again: a node that answered nothing else meanwhile is marked
    /// down (before the gate opens, as any failed press; unless it is the
    /// last up node) and failed over. After [`CARRY_LIMIT`] periods the
    /// node is marked down whether it answers others or not, and the last
    /// up node's gate opens (its connection is dropped), with a warning.
    fn carry_on(&self, entry: Arc<NodeEntry>, exchange: Exchange, held: Held) {
        let (registry, patience) = (self.registry.clone(), self.client().timeout());
        self.carried.spawn(async move {
            let Some(reason) = watch_carried(&registry, &entry, exchange, patience).await else {
                return;
            };
            warn!(node = %entry.address, %reason, "node marked down");
            drop(held);
            if let Err(error) = registry.fail_over(&entry.address).await {
                warn!(node = %entry.address, %error, "failover did not complete; presses retry it");
            }
        });
    }

    /// The registry's word on a press's node, read after a silence of
    /// this replica (paused, or its heartbeat held up): a clean of it may
    /// have gone by without this replica (`protocol::press::count_shown`).
    async fn node_now(&self, entry: &NodeEntry) -> Option<NodeNow<u64>> {
        let (record, fenced) = self.store().nodes.node_now(&entry.address).await.ok()??;
        Some(NodeNow {
            down: record.state == crate::store::NodeState::Down,
            fenced,
            epoch: record.epoch,
        })
    }

    /// Waits (at most `limit`) for the presses carried on past their
    /// timeout: at shutdown, before this replica stops following fences,
    /// so no clean elsewhere overtakes one. Returns whether all ended.
    pub async fn finish_carried(&self, limit: Duration) -> bool {
        self.carried.close();
        tokio::time::timeout(limit, self.carried.wait())
            .await
            .is_ok()
    }

    /// A press failed at its node, which is gone: marked down *before the
    /// gate is released* (the caller holds it), so a clean waiting for the
    /// gate sees it down and never asks it to archive counts that may
    /// include this press.
    pub(super) async fn mark_failed(&self, entry: &NodeEntry, id: &str, error: &NodeCallError) {
        warn!(node = %entry.address, session = %crate::session::id::logged(id), %error, "press failed; node marked down");
        self.registry
            .mark_down(
                entry,
                Actor::PressFailure,
                &format!("a press failed: {error}"),
            )
            .await;
    }

    /// Fails `entry` over in the background: a press that may have been
    /// counted there answers 504 now, and does not wait for the failover.
    pub(super) fn fail_over_later(&self, entry: &NodeEntry) {
        let (registry, node) = (self.registry.clone(), entry.address.clone());
        tokio::spawn(async move {
            if let Err(error) = registry.fail_over(&node).await {
                warn!(%node, %error, "failover did not complete; presses retry it");
            }
        });
    }

    /// A fencing node refused a press: it has done a clean (token `fence`)
    /// newer than the epoch this replica knows. Learned from the registry
    /// when the clean is recorded there; while one is under way (its fence
    /// is up, or its journal waits to be finished) the press waits a moment
    /// and reads again. A clean that ended without recording its epoch (the
    /// cleaner lost Redis after its fence came down) ended when its fence
    /// came down, so the node's word is recorded and learned.
    pub(super) async fn learn_after_refusal(
        &self,
        entry: &NodeEntry,
        fence: u64,
    ) -> Result<(), PressError> {
        let recorded = self.store().nodes.node_epoch(&entry.address).await?;
        if recorded >= fence {
            self.table().learn_epoch(entry, recorded);
            return Ok(());
        }
        if self
            .store()
            .fences
            .clean_in_progress(&entry.address)
            .await?
        {
            tokio::time::sleep(REFUSED_RETRY).await;
            return Ok(());
        }
        // The node knows a newer clean than Redis does: its cleaner lost
        // Redis, or Redis lost what was recorded. The latter is rebuilt, not learned.
        self.store().replicas.confirm_identity().await?;
        self.store()
            .nodes
            .set_node_epoch(&entry.address, fence)
            .await?;
        self.table().learn_epoch(entry, fence);
        Ok(())
    }
}

/// A carried press, watched until its node answers or is declared down
/// (`None`: the gate may open) or is marked down here (the reason: it is
/// failed over, the gate opening after).
async fn watch_carried(
    registry: &NodeRegistry,
    entry: &NodeEntry,
    mut exchange: Exchange,
    patience: Duration,
) -> Option<String> {
    let down = entry.declared_down();
    let mut down = std::pin::pin!(down);
    if !entry.serves_presses() {
        return None; // declared down meanwhile: its counts are moot
    }
    let (mut periods, mut looked_at) = (0, crate::clock::mono_ms());
    loop {
        let answered = tokio::select! {
            biased;
            result = &mut exchange => Some(result),
            _ = &mut down => return None,
            _ = node_silence(patience) => None,
        };
        match answered {
            // A refusal is an answer too: nothing was counted.
            Some(Ok(_) | Err(NodeCallError::StaleEpoch { .. })) => {
                entry.evidence.answered();
                entry.link.limit.answered();
                return None;
            }
            Some(Err(error)) => return failed_late(registry, entry, error).await,
            None => {
                periods += 1;
                let alive = entry.evidence.answered_since(looked_at);
                looked_at = crate::clock::mono_ms();
                if alive && periods < CARRY_LIMIT {
                    continue;
                }
                let waited = patience.as_millis() * (periods + 1) as u128;
                let reason = format!("a press was not answered in {waited} ms");
                if registry
                    .mark_down_unless_last(entry, Actor::PressFailure, &reason)
                    .await
                {
                    return Some(reason);
                }
                if periods >= CARRY_LIMIT {
                    warn!(node = %entry.address, %reason, "the last up node holds a press too long: its gate opens");
                    return None;
                }
            }
        }
    }
}

/// A carried press failed at last: its node is marked down (unless only
/// time ran out at the last node up). The exchange is over either way.
async fn failed_late(
    registry: &NodeRegistry,
    entry: &NodeEntry,
    error: NodeCallError,
) -> Option<String> {
    let reason = format!("a press failed after its timeout: {error}");
    if !error.is_inconclusive() {
        registry
            .mark_down(entry, Actor::PressFailure, &reason)
            .await;
        return Some(reason);
    }
    let marked = registry.mark_down_unless_last(entry, Actor::PressFailure, &reason);
    marked.await.then_some(reason)
}
