//! `FenceWatcher`: this replica's half of the clean fence. It heartbeats
//! (so cleaners know to wait for it) and follows the raised fences; for each
//! one it closes its local gate to the node, which waits for its in-flight
//! presses there to finish, then acknowledges. The gate opens again when the
//! fence is lowered, and the node's clean mark moves on so presses that
//! read a mapping before the clean read it again.
//!
//! Wake, don't poll: every raise, lower and ack is published on the events
//! channel, and a subscriber task re-reads the fences at once. A read every
//! [`HEARTBEAT`] is the fallback (a lost message delays a clean by at most
//! that) and doubles as the heartbeat.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use protocol::silence::Silence;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::nodes::NodeTable;
use crate::store::{
    FenceReason, Fences, HandedOver, NodeState, Nodes, Replicas, Store, StoreResult,
};

/// How often a replica heartbeats and re-reads the fences without being woken.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// This replica's side of its silence (`protocol::silence`): the lease
/// is fresh while its last successful contact with the fence channel (a
/// heartbeat and a read of the fences, timed from when it was *sent*) is
/// younger than `LEASE_MS`. Past it, the replica trusts neither its cache
/// nor a count read since, and voids every mapping on its next contact;
/// cleaners go on without it only later (`Silence::others_wait`).
#[derive(Debug)]
pub struct Lease {
    origin: std::time::Instant,
    /// Milliseconds since `origin` of the last successful contact's start,
    /// plus one (0: never).
    renewed: std::sync::atomic::AtomicU64,
    silence: Silence,
    /// How often this replica's lease lapsed between two contacts.
    gaps: std::sync::atomic::AtomicU64,
}

/// This replica's contact with the fence channel when a press went out
/// ([`Lease::contact`]).
#[derive(Debug, Clone, Copy)]
pub struct Contact(u64);

impl Lease {
    pub fn new(silence: Silence) -> Self {
        Self {
            origin: std::time::Instant::now(),
            renewed: std::sync::atomic::AtomicU64::new(0),
            silence,
            gaps: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a contact that started at `renewed` (ms since `origin`,
    /// plus one; 0: never) leaves the lease lapsed at `at`.
    fn lapsed_between(&self, renewed: u64, at: u64) -> bool {
        renewed == 0
            || self
                .silence
                .lapsed(Duration::from_millis(at.saturating_sub(renewed)))
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64 + 1
    }

    /// Where the contact stands when a press goes out.
    pub fn contact(&self) -> Contact {
        Contact(self.gaps.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Whether this replica's lease held since `contact`: it never lapsed
    /// between two contacts, and has not lapsed now. After a lapse, a
    /// clean of the press's node may have gone by without this replica
    /// (the model's `lease_voids_answers`).
    pub fn unbroken_since(&self, contact: Contact) -> bool {
        self.is_fresh() && self.contact().0 == contact.0
    }

    /// At the end of a contact, before it renews the lease: whether the
    /// lease ran out at any moment from the last renewal until now (or was
    /// never renewed). Judged at the end, not at the contact's start: a
    /// contact that stalled past the lease may have read the fences after
    /// one was raised and lowered without this replica. A lapse is counted
    /// here, before the lease is fresh again, so a press that reads the
    /// lease sees the one or the other.
    fn lapsed_until_now(&self) -> bool {
        let renewed = self.renewed.load(std::sync::atomic::Ordering::Acquire);
        let lapsed = self.lapsed_between(renewed, self.now());
        if lapsed {
            self.gaps.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        lapsed
    }

    /// Renews from a contact that started at `sent` (polls are serialised:
    /// `FenceWatcher::polling`).
    pub(crate) fn renew(&self, sent: std::time::Instant) {
        let at = sent.duration_since(self.origin).as_millis() as u64 + 1;
        self.renewed
            .fetch_max(at, std::sync::atomic::Ordering::AcqRel);
    }

    pub fn is_fresh(&self) -> bool {
        let renewed = self.renewed.load(std::sync::atomic::Ordering::Acquire);
        !self.lapsed_between(renewed, self.now())
    }
}

#[derive(Clone)]
pub struct FenceWatcher {
    fences: Fences,
    nodes: Nodes,
    replicas: Replicas,
    table: Arc<NodeTable>,
    replica: Arc<str>,
    /// Fences this replica holds: node -> (seq, release). A std mutex: never
    /// held across an await.
    held: Arc<Mutex<HashMap<String, HeldFence>>>,
    /// Notified on every event from the channel, for cleaners waiting on acks.
    events: Arc<Notify>,
    /// Serialises [`poll_once`](Self::poll_once) between the timer and the
    /// subscriber, so one fence is never taken twice.
    polling: Arc<tokio::sync::Mutex<()>>,
    /// Renewed by every poll that succeeds (see [`Lease`]).
    lease: Arc<Lease>,
    /// What it hands over with a failover's acknowledgement (`None`:
    /// nothing, `FAILOVER_HAND_OVER=false`).
    shown: Option<Arc<dyn Shown>>,
}

/// What this replica showed of a node's sessions: the highest total it
/// answered of each one's present placement (the mapping cache keeps it).
/// Handed over with the acknowledgement of the node's failover.
pub trait Shown: Send + Sync {
    fn shown_on(&self, node: &str) -> Vec<HandedOver>;
}

/// A fence this replica has closed its gate for: its sequence number and
/// the sender whose drop opens the gate again.
type HeldFence = (u64, oneshot::Sender<()>);

impl FenceWatcher {
    pub fn new(
        store: &Store,
        table: Arc<NodeTable>,
        events: Arc<Notify>,
        lease: Arc<Lease>,
    ) -> Self {
        Self {
            fences: store.fences.clone(),
            nodes: store.nodes.clone(),
            replicas: store.replicas.clone(),
            table,
            replica: uuid::Uuid::new_v4().to_string().into(),
            held: Arc::default(),
            events,
            polling: Arc::default(),
            lease,
            shown: None,
        }
    }

    /// Hands over what `shown` remembers with every acknowledgement of a
    /// failover's fence (`FAILOVER_HAND_OVER`).
    pub fn handing_over(mut self, shown: Arc<dyn Shown>) -> Self {
        self.shown = Some(shown);
        self
    }

    pub fn replica_id(&self) -> &str {
        &self.replica
    }

    /// Heartbeat, then follow the raised fences. The heartbeat comes first:
    /// a cleaner that sees us alive waits for our ack, and we see its fence
    /// in the read that follows.
    pub async fn poll_once(&self) -> StoreResult<()> {
        let _one_at_a_time = self.polling.lock().await;
        let sent = std::time::Instant::now();
        self.replicas.heartbeat(&self.replica).await?;
        let fences = self.fences.fences().await?;
        let missing = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.retain(|node, (seq, _)| {
                let still = fences.iter().any(|(n, f)| n == node && f.seq == *seq);
                if !still {
                    debug!(%node, seq, "fence lowered");
                }
                still // dropping the sender releases the gate
            });
            let mut missing = Vec::new();
            for (node, fence) in fences {
                if held.contains_key(&node) {
                    continue;
                }
                let (release, released) = oneshot::channel();
                held.insert(node.clone(), (fence.seq, release));
                missing.push((node, fence.seq, fence.reason, released));
            }
            missing
        };
        for (node, seq, reason, released) in missing {
            self.close_gate(node, seq, reason, released).await;
        }
        // A lease that ran out, even while this poll ran, may have missed
        // fences raised and lowered while this replica was paused or cut
        // off: every mapping read before now (cached or in flight) is
        // void, before the lease is trusted again.
        if self.lease.lapsed_until_now() {
            self.table.cleaned_all();
        }
        // Every fence raised before `sent` is being honoured now.
        self.lease.renew(sent);
        Ok(())
    }

    /// Closes the local gate to `node` in a task that holds it until the
    /// fence is lowered; acks once no press of ours is in flight there.
    async fn close_gate(
        &self,
        node: String,
        seq: u64,
        reason: FenceReason,
        released: oneshot::Receiver<()>,
    ) {
        if self.table.get(&node).is_none() {
            // A node added by another replica: learn it, so its gate exists.
            if let Ok(records) = self.nodes.list_nodes().await {
                self.table.sync(&records);
            }
        }
        let entry = self.table.get(&node);
        if let (Some(entry), FenceReason::Down) = (&entry, reason) {
            // The node failed: our presses in flight there give up now
            // rather than at their timeout, so the gate closes at once.
            entry.set_state(NodeState::Down);
        }
        let watcher = self.clone();
        tokio::spawn(async move {
            let mut released = released;
            let guard = match &entry {
                Some(entry) => tokio::select! {
                    guard = entry.fence() => Some(guard),
                    // Lowered before our presses there were done (the
                    // cleaner gave up waiting): stop queueing for the gate,
                    // or new presses would queue behind us for nothing.
                    _ = &mut released => return,
                },
                None => None, // unknown node: no press of ours can reach it
            };
            // A failover's: with no press of ours left at the node, what
            // we showed of its sessions is final; handed over before the
            // ack, so the failover that sees the ack finds it.
            let handed = match (&watcher.shown, reason) {
                (Some(shown), FenceReason::Down) => {
                    let (shown, node) = (shown.clone(), node.clone());
                    // A scan of the whole cache: off the runtime's threads.
                    tokio::task::spawn_blocking(move || shown.shown_on(&node))
                        .await
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            };
            for attempt in 0u32.. {
                match watcher.ack_with(&node, seq, &handed).await {
                    Ok(()) => break,
                    Err(error) if attempt % 20 == 0 => {
                        warn!(%node, seq, %error, "cannot ack fence; retrying")
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = (&mut released).await;
            if let Some(entry) = &entry {
                // The clean's token, recorded before its fence came down:
                // presses that enter once the gate opens carry it. (If the
                // read fails, the node's first refusal teaches it.)
                if let Ok(epoch) = watcher.nodes.node_epoch(&node).await {
                    watcher.table.learn_epoch(entry, epoch);
                }
                watcher.table.cleaned(entry);
            }
            drop(guard);
        });
    }

    /// The hand-over (if any), then the acknowledgement.
    async fn ack_with(&self, node: &str, seq: u64, handed: &[HandedOver]) -> StoreResult<()> {
        self.fences
            .hand_over(node, seq, &self.replica, handed)
            .await?;
        self.fences.ack_fence(node, seq, &self.replica).await
    }

    /// Follows fences until cancelled (woken by the events channel, with a
    /// poll every [`HEARTBEAT`] as fallback and heartbeat), then leaves the
    /// replica set.
    pub async fn run(self, cancel: CancellationToken) {
        // Ends with this run, also when the run is aborted (the supervisor
        // then starts a new one with a subscriber of its own).
        let _subscriber = AbortOnDrop(tokio::spawn(self.clone().follow_events(cancel.clone())));
        loop {
            if let Err(error) = self.poll_once().await {
                debug!(%error, "fence poll failed");
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(HEARTBEAT) => {}
            }
        }
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        if let Err(error) = self.replicas.remove_replica(&self.replica).await {
            warn!(%error, "could not deregister the replica; its heartbeat expires by itself");
        }
    }

    /// Re-reads the fences whenever an event arrives; resubscribes after
    /// the connection drops.
    async fn follow_events(self, cancel: CancellationToken) {
        while !cancel.is_cancelled() {
            match self.fences.subscribe_events().await {
                Ok(pubsub) => {
                    let mut messages = pubsub.into_on_message();
                    // Events may have been missed while unsubscribed.
                    let _ = self.poll_once().await;
                    while let Some(message) = messages.next().await {
                        self.events.notify_waiters();
                        if message.get_payload_bytes() != b"ack" {
                            if let Err(error) = self.poll_once().await {
                                debug!(%error, "fence read after an event failed");
                            }
                        }
                    }
                    debug!("fence event subscription ended; resubscribing");
                }
                Err(error) => debug!(%error, "cannot subscribe to fence events"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(HEARTBEAT) => {}
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lease whose last renewal started `ago_ms` before now.
    fn renewed_ago(ago_ms: u64) -> Lease {
        let mut lease = Lease::new(Silence::new(Duration::from_secs(3)));
        lease.origin -= Duration::from_secs(10);
        let at = lease.now() - ago_ms;
        lease
            .renewed
            .store(at, std::sync::atomic::Ordering::Release);
        lease
    }

    /// A poll that started within the lease and ended past it (it
    /// stalled) may have read the fences after one went by: it voids, and
    /// a press sent before is no longer in touch, though the lease is
    /// fresh again from the poll's start.
    #[test]
    fn a_contact_that_ends_after_the_lease_ran_out_counts_a_lapse() {
        let lease = renewed_ago(3_100);
        let press = lease.contact();
        assert!(!lease.is_fresh());
        let sent = lease.origin + Duration::from_millis(lease.now() - 200);
        assert!(lease.lapsed_until_now());
        lease.renew(sent);
        assert!(lease.is_fresh());
        assert!(!lease.unbroken_since(press));
    }

    #[test]
    fn a_contact_that_ends_within_the_lease_keeps_it_unbroken() {
        let lease = renewed_ago(1_000);
        let press = lease.contact();
        let sent = lease.origin + Duration::from_millis(lease.now() - 200);
        assert!(!lease.lapsed_until_now());
        lease.renew(sent);
        assert!(lease.unbroken_since(press));
    }
}
