//! One attempt at a press's node.

use std::sync::Arc;
use std::time::Duration;

use protocol::press::{self, Heard, NodeNow};
use tracing::{info, warn};

use super::SessionService;
use crate::archive::events::Actor;
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
    /// node is let go with its connection, and its gate: the node may yet
    /// count it, and the model shows no property rests on when the gate
    /// opens (model.md).
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
    /// `held` is given back where the caller still needs the gate. An
    /// error: the press could not be sent as it is, not the node's doing
    /// (it stays up).
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
            Err(error) => self.unanswered(entry, error, sent_at, held).await,
        }
    }

    /// `Timer { failed, sent }`: the press failed or timed out; the node is
    /// judged failed (marked down by the caller, the gate still held) or
    /// spared: alive but saturated, or the last one up.
    async fn unanswered(
        &self,
        entry: &Arc<NodeEntry>,
        error: NodeCallError,
        sent_at: u64,
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
        Ok(Attempt::Spared { error, why })
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
