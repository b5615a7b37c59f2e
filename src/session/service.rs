use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::cache::MappingCache;
use super::SessionId;
use crate::archive::events::Actor;
use crate::archive::history::Cause;
use crate::archive::{Archive, ArchiveError};
use crate::clock::Clock;
use crate::cluster::NodeRegistry;
use crate::lifecycle::{CleanError, Sweeper};
use crate::nodes::client::Exchange;
use crate::nodes::limit::InFlightPermit;
use crate::nodes::table::InFlight;
use crate::nodes::{NodeCallError, NodeClient, NodeEntry, NodeTable, Selector, Spared};
use crate::store::{Mapping, Placed, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum PressError {
    #[error("no node is available")]
    NoNode,
    #[error("node {node} failed: {source}")]
    NodeFailed {
        node: String,
        #[source]
        source: NodeCallError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("archiving the expired session failed: {0}")]
    Expire(#[source] CleanError),
    #[error("moving the session off its failed node failed: {0}")]
    FailOver(#[source] CleanError),
    /// The press was never sent: the node's limit of presses in flight
    /// stayed full for the queue's wait, or a clean of the node held its
    /// gate for the press's whole deadline.
    #[error("node {node} is busy: {why}")]
    NodeBusy { node: String, why: Busy },
    /// The press was sent and not answered (in time, or a gateway in front
    /// of the node answered 502 or 503), by a node that is alive (it answers
    /// others) or the last one serving: it stays up, and the press may have
    /// been counted.
    #[error("node {node} did not answer the press: {source} ({why})")]
    NodeSaturated {
        node: String,
        #[source]
        source: NodeCallError,
        why: &'static str,
    },
    #[error("the registry is being rebuilt after Redis lost its data")]
    Rebuilding,
    #[error("the press did not complete within its deadline")]
    Deadline,
    #[error("this replica is not following clean fences right now")]
    NotFollowingFences,
}

/// A served press.
#[derive(Debug, Clone)]
pub struct Pressed {
    /// What the user sees: the node's count plus the session's base.
    pub clicks: i64,
    /// The node that served it.
    pub node: Arc<NodeEntry>,
}

#[derive(Clone)]
pub struct SessionService {
    /// The nodes, and through them the store, the archive and the client.
    registry: NodeRegistry,
    sweeper: Sweeper,
    /// The strategy choosing nodes for new sessions; `None`: least sessions,
    /// chosen inside the placement script.
    placement: Option<Arc<Selector>>,
    ttl: Duration,
    /// Longest a press may take, all waits included: one node timeout,
    /// a failover (its fence waits out other replicas' presses), a second
    /// node timeout. A press is bounded by time, never by a count of rounds.
    budget: Duration,
    /// Whether this replica's fence watcher is running: without it a press
    /// could reach a node another replica is cleaning (design.md §4.7).
    fences_followed: Arc<AtomicBool>,
    /// Mappings already read, trusted while the lease is fresh.
    cache: Arc<MappingCache>,
    /// Session time (the sweeper's): expiry is decided on it.
    clock: Clock,
    /// Longest a press waits for its node's limit (`NODE_QUEUE_TIMEOUT_MS`).
    queue_timeout: Duration,
    /// Presses carried on past their timeout ([`Self::carry_on`]), waited
    /// for at shutdown.
    carried: tokio_util::task::TaskTracker,
    /// Whether placements go to the session history.
    history: bool,
}

/// Why a press was never sent to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Its queue stayed full (`NODE_QUEUE_TIMEOUT_MS`).
    Queue,
    /// A clean of the node held its gate past the press's deadline.
    Cleaning,
}

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Busy::Queue => "its queue is full",
            Busy::Cleaning => "it is being cleaned",
        })
    }
}

/// A press's hold on its node: the gate (no clean of the node starts while
/// it is held), its place under the node's limit, its count in flight.
struct Held {
    _gate: tokio::sync::OwnedRwLockReadGuard<()>,
    _permit: InFlightPermit,
    _in_flight: InFlight,
}

/// How many `NODE_TIMEOUT_MS` periods a carried press may hold its node's
/// gate ([`SessionService::carry_on`]).
const CARRY_LIMIT: u32 = 10;

/// How long a press refused by a node that is being cleaned waits before
/// it reads its mapping again.
const REFUSED_RETRY: Duration = Duration::from_millis(50);

/// How often a press queues again for a node whose backlog timed out its
/// connect (nothing was sent) before it is answered `node_busy`.
const MAX_REQUEUES: u32 = 2;

/// What happened to one attempt at a node.
enum Attempt {
    Served(i64),
    /// The node was declared down while we waited for it.
    Abandoned(Held),
    /// The press could not be sent as it is: not the node's doing.
    NotTheNode(NodeCallError),
    /// A fencing node refused the press, uncounted: it cleaned the session
    /// (token `fence`) after the mapping was read.
    Refused {
        fence: u64,
    },
    /// Time ran out (or a gateway answered 502/503) at a node that is
    /// alive, or the last one serving: it stays up. A press still at the
    /// node was carried on ([`SessionService::carry_on`]).
    Spared {
        error: NodeCallError,
        why: Spared,
    },
    /// The node failed: it must be marked down while the gate is held.
    Failed(NodeCallError, Held),
}

/// What the press flow follows from the configuration.
#[derive(Debug, Clone)]
pub struct PressSettings {
    /// Sessions live this long from their first press (`SESSION_TTL_SECS`).
    pub ttl: Duration,
    /// A press's whole budget follows from its node's timeout.
    pub node_timeout: Duration,
    /// Presses wait at most this long for their node's limit.
    pub queue_timeout: Duration,
    /// Every placement goes to the session history (`GET /sessions/{id}`).
    pub history: bool,
}

impl PressSettings {
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            ttl: config.session_ttl(),
            node_timeout: config.node_timeout(),
            queue_timeout: config.node_queue_timeout(),
            history: config.session_history_secs > 0,
        }
    }
}

/// The press budget ([`SessionService`]'s `budget`) for a node timeout.
fn press_budget(node_timeout: Duration) -> Duration {
    node_timeout * 3 + Duration::from_secs(2)
}

impl SessionService {
    pub fn new(
        registry: NodeRegistry,
        sweeper: Sweeper,
        fences_followed: Arc<AtomicBool>,
        cache: MappingCache,
        settings: PressSettings,
    ) -> Self {
        Self {
            clock: sweeper.clock().clone(),
            registry,
            sweeper,
            placement: None,
            ttl: settings.ttl,
            budget: press_budget(settings.node_timeout),
            fences_followed,
            cache: Arc::new(cache),
            history: settings.history,
            queue_timeout: settings.queue_timeout,
            carried: tokio_util::task::TaskTracker::new(),
        }
    }

    /// New sessions go where `placement` picks (least-sessions without one).
    pub fn with_placement(mut self, placement: Option<Selector>) -> Self {
        self.placement = placement.map(Arc::new);
        self
    }

    fn table(&self) -> &Arc<NodeTable> {
        self.registry.table()
    }

    fn store(&self) -> &Store {
        self.registry.store()
    }

    fn archive(&self) -> &Archive {
        self.registry.archive()
    }

    fn client(&self) -> &NodeClient {
        self.registry.client()
    }

    /// One press. An existing session on a live node costs one forward (and
    /// one Redis read when it is not cached); everything else is the rare
    /// path.
    pub async fn press(&self, id: &SessionId) -> Result<Pressed, PressError> {
        let id = id.as_str();
        if !self.fences_followed.load(Ordering::Acquire) {
            return Err(PressError::NotFollowingFences);
        }
        let deadline = Instant::now() + self.budget;
        // The clean mark is read before the mapping: a clean of the node
        // that ends after this point makes us read the mapping again. From
        // the cache, it is the mark the cached mapping was read at.
        let (mut mapping, mut mark) = match self.cache.get(id, self.clock.now_ms()) {
            Some((cached, mark)) => (Some(cached), mark),
            None => self.read(id).await?,
        };
        let mut failed: Option<(String, NodeCallError)> = None;
        // Set once this press moved its session off a failed node: the
        // placement that follows is recorded as a failover.
        let mut failed_over = false;
        // Until when this press may queue for its node's limit, and how
        // often it queued again after a connect the node's backlog refused.
        let mut queued_until: Option<Instant> = None;
        let mut requeues = 0;
        loop {
            if Instant::now() >= deadline {
                return Err(PressError::Deadline);
            }
            let current = match mapping.take() {
                Some(m) => m,
                None => self.place(id, None, failed_over).await?,
            };
            if current.expires_at_ms <= self.clock.now_ms() {
                // Never serve an expired session (design.md §4.3): archive it
                // (with its node's other expired sessions) and start anew.
                match self
                    .sweeper
                    .sweep_node(&current.node, id, self.clock.now_ms())
                    .await
                {
                    Ok(()) => {}
                    // The node died under the clean: the cleaner declared it
                    // down and moved its sessions off under the clean's fence,
                    // so this one starts anew elsewhere, from its archive.
                    Err(CleanError::Node { source, .. }) if source.is_unreachable() => {
                        failed_over = true;
                    }
                    Err(error) => return Err(expire_error(error)),
                }
                (mapping, mark) = self.read(id).await?;
                continue;
            }
            let entry = match self.entry(&current.node).await? {
                Some(entry) if entry.serves_presses() => entry,
                // Failed: the session moves, but only under the node's fence
                // (design.md §4.10); then it is placed anew.
                Some(entry) => {
                    self.fail_over(&entry, id, deadline).await?;
                    failed_over = true;
                    (mapping, mark) = self.read(id).await?;
                    continue;
                }
                // Removed: nobody presses it any more; drop the mapping.
                None => {
                    mapping = Some(self.place(id, Some(&current.node), failed_over).await?);
                    continue;
                }
            };
            let in_flight = entry.start_request();
            let Some(gate) = entry.enter(deadline - Instant::now()).await else {
                return Err(PressError::NodeBusy {
                    node: entry.address.clone(),
                    why: Busy::Cleaning,
                });
            };
            // The fencing epoch first, then the clean mark: an epoch learned
            // after the mapping was read shows as a clean since (see
            // `NodeTable::learn_epoch`), and the mapping is read again.
            let fence_epoch = entry.fence_epoch();
            // While we hold the gate no clean of this node starts on a
            // replica that answers its fence (the fence waits for us), so a
            // mapping read now holds until the press is answered; a node
            // that fences refuses it if a clean overtook it all the same.
            if entry.cleaned_since(mark) {
                (mapping, mark) = self.read(id).await?;
                continue;
            }
            // A place at the node, waited for in this replica's queue. Taken
            // with the gate held: a press that waits out a clean does not
            // spend its queue time on it, and a clean waits for the queue at
            // most `NODE_QUEUE_TIMEOUT_MS`.
            let queue_left = (*queued_until
                .get_or_insert_with(|| Instant::now() + self.queue_timeout))
            .min(deadline)
            .saturating_duration_since(Instant::now());
            let Some(permit) = entry.link.limit.acquire(queue_left).await else {
                metrics::counter!("nodes_control_node_busy_total").increment(1);
                return Err(PressError::NodeBusy {
                    node: entry.address.clone(),
                    why: Busy::Queue,
                });
            };
            let held = Held {
                _gate: gate,
                _permit: permit,
                _in_flight: in_flight,
            };
            let held = match self.attempt(&entry, id, held, fence_epoch).await {
                Attempt::Served(count) => {
                    return Ok(Pressed {
                        clicks: count + current.base,
                        node: entry,
                    });
                }
                Attempt::Abandoned(held) => {
                    debug!(node = %entry.address, session = %super::id::logged(id), "press abandoned: node declared down");
                    held
                }
                // The node cleaned the session after its mapping was read:
                // nothing was counted. Learn the node's epoch, read again.
                Attempt::Refused { fence } => {
                    metrics::counter!("nodes_control_presses_refused_total").increment(1);
                    debug!(node = %entry.address, session = %super::id::logged(id), fence, "press refused under an older fencing epoch");
                    self.cache.forget(id);
                    self.learn_after_refusal(&entry, fence).await?;
                    (mapping, mark) = self.read(id).await?;
                    continue;
                }
                // Not the node's doing: it stays up, the press fails.
                Attempt::NotTheNode(error) => {
                    return Err(PressError::NodeFailed {
                        node: entry.address.clone(),
                        source: error,
                    });
                }
                Attempt::Spared { error, why } => {
                    if !matches!(error, NodeCallError::ConnectTimeout) {
                        return Err(PressError::NodeSaturated {
                            node: entry.address.clone(),
                            source: error,
                            why: why.as_str(),
                        });
                    }
                    // Nothing was sent: queue for the node again, with a
                    // fresh queue time (the connect's own wait was the
                    // node's backlog, not our queue), a few times at most.
                    requeues += 1;
                    if requeues > MAX_REQUEUES {
                        metrics::counter!("nodes_control_node_busy_total").increment(1);
                        return Err(PressError::NodeBusy {
                            node: entry.address.clone(),
                            why: Busy::Queue,
                        });
                    }
                    queued_until = None;
                    mapping = Some(current);
                    continue;
                }
                Attempt::Failed(error, held) => {
                    self.failed(&entry, id, error, &mut failed).await?;
                    held
                }
            };
            drop(held);
            self.cache.forget(id);
            self.fail_over(&entry, id, deadline).await?;
            failed_over = true;
            (mapping, mark) = self.read(id).await?;
        }
    }

    /// A press failed at its node, which is gone: marked down *before the
    /// gate is released* (the caller holds it), so a clean waiting for the
    /// gate sees it down and never asks it to archive counts that may
    /// include this press. A second failure ends the press.
    async fn failed(
        &self,
        entry: &NodeEntry,
        id: &str,
        error: NodeCallError,
        failed: &mut Option<(String, NodeCallError)>,
    ) -> Result<(), PressError> {
        warn!(node = %entry.address, session = %super::id::logged(id), %error, "press failed; node marked down");
        self.registry
            .mark_down(
                entry,
                Actor::PressFailure,
                &format!("a press failed: {error}"),
            )
            .await;
        if let Some((node, source)) = failed.take() {
            return Err(PressError::NodeFailed { node, source });
        }
        *failed = Some((entry.address.clone(), error));
        metrics::counter!("nodes_control_failovers_total").increment(1);
        Ok(())
    }

    /// A fencing node refused a press: it has done a clean (token `fence`)
    /// newer than the epoch this replica knows. Learned from the registry
    /// when the clean is recorded there; while one is under way (its fence
    /// is up, or its journal waits to be finished) the press waits a moment
    /// and reads again. A clean that ended without recording its epoch (the
    /// cleaner lost Redis after its fence came down) ended when its fence
    /// came down, so the node's word is recorded and learned.
    async fn learn_after_refusal(&self, entry: &NodeEntry, fence: u64) -> Result<(), PressError> {
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

    /// Reads the mapping from Redis (the clean mark first) and caches it.
    async fn read(&self, id: &str) -> Result<(Option<Mapping>, u64), PressError> {
        let mark = self.table().clean_mark();
        let mapping = self.store().sessions.lookup(id).await?;
        match &mapping {
            Some(m) => self.cache.put(id, m, mark),
            None => self.cache.forget(id),
        }
        Ok((mapping, mark))
    }

    /// Session time now (ms since the epoch): what expiry is decided on.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Drops cached mappings of sessions that expired by now.
    pub fn purge_cache(&self) -> usize {
        self.cache.purge_expired(self.clock.now_ms())
    }

    /// Forwards the press, giving up as soon as the node is declared down
    /// (by us or another replica): it will be wiped, its answer is moot.
    /// `held` is given back where the caller still needs the gate; a press
    /// the node may still count is carried on holding it (see
    /// [`carry_on`](Self::carry_on)).
    async fn attempt(
        &self,
        entry: &Arc<NodeEntry>,
        id: &str,
        held: Held,
        fence_epoch: u64,
    ) -> Attempt {
        let down = entry.declared_down();
        if !entry.serves_presses() {
            return Attempt::Abandoned(held);
        }
        let epoch = entry.fences().then_some(fence_epoch);
        let mut exchange = match self.client().press(&entry.link, id, epoch) {
            Ok(exchange) => exchange,
            Err(error) => return Attempt::NotTheNode(error),
        };
        let sent_at = crate::clock::mono_ms();
        let result = tokio::select! {
            result = &mut exchange => result,
            _ = down => return Attempt::Abandoned(held),
            _ = tokio::time::sleep(self.client().timeout()) => Err(NodeCallError::Timeout),
        };
        let error = match result {
            Ok(count) => {
                entry.link.metrics.served();
                entry.evidence.answered();
                entry.link.limit.answered();
                return Attempt::Served(count);
            }
            // The node is well and counted nothing.
            Err(NodeCallError::StaleEpoch { fence }) => {
                entry.evidence.answered();
                return Attempt::Refused { fence };
            }
            Err(error) => error,
        };
        entry.link.metrics.failed();
        if !error.is_node_fault() {
            return Attempt::NotTheNode(error);
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
            None => return Attempt::Failed(error, held),
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
        Attempt::Spared { error, why }
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
    fn carry_on(&self, entry: Arc<NodeEntry>, mut exchange: Exchange, held: Held) {
        let (registry, patience) = (self.registry.clone(), self.client().timeout());
        let mut looked_at = crate::clock::mono_ms();
        self.carried.spawn(async move {
            let down = entry.declared_down();
            let mut down = std::pin::pin!(down);
            if !entry.serves_presses() {
                return; // declared down meanwhile: its counts are moot
            }
            let mut tick = tokio::time::interval_at(Instant::now() + patience, patience);
            let mut periods = 0;
            let reason = loop {
                tokio::select! {
                    result = &mut exchange => match result {
                        // A refusal is an answer too: nothing was counted.
                        Ok(_) | Err(NodeCallError::StaleEpoch { .. }) => {
                            entry.evidence.answered();
                            entry.link.limit.answered();
                            return;
                        }
                        Err(error) => {
                            let reason = format!("a press failed after its timeout: {error}");
                            if !error.is_inconclusive() {
                                registry.mark_down(&entry, Actor::PressFailure, &reason).await;
                                break reason;
                            }
                            if registry.mark_down_unless_last(&entry, Actor::PressFailure, &reason).await {
                                break reason;
                            }
                            return; // the last node; the exchange is over
                        }
                    },
                    _ = &mut down => return,
                    _ = tick.tick() => {
                        periods += 1;
                        let alive = entry.evidence.answered_since(looked_at);
                        looked_at = crate::clock::mono_ms();
                        if alive && periods < CARRY_LIMIT {
                            continue;
                        }
                        let reason = format!("a press was not answered in {} ms", patience.as_millis() * (periods + 1) as u128);
                        if registry.mark_down_unless_last(&entry, Actor::PressFailure, &reason).await {
                            break reason;
                        }
                        if periods >= CARRY_LIMIT {
                            warn!(node = %entry.address, %reason, "the last up node holds a press too long: its gate opens");
                            return;
                        }
                    }
                }
            };
            warn!(node = %entry.address, %reason, "node marked down");
            drop(held);
            if let Err(error) = registry.fail_over(&entry.address).await {
                warn!(node = %entry.address, %error, "failover did not complete; presses retry it");
            }
        });
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

    /// Makes sure the session no longer lives on a failed node: the first
    /// press of this replica to get here runs the failover (fence, revoke,
    /// unmap), the others find their session moved already.
    async fn fail_over(
        &self,
        entry: &NodeEntry,
        id: &str,
        deadline: Instant,
    ) -> Result<(), PressError> {
        let Ok(_one_at_a_time) = tokio::time::timeout_at(deadline, entry.failover.lock()).await
        else {
            return Err(PressError::Deadline);
        };
        match self.store().sessions.lookup(id).await? {
            Some(m) if m.node == entry.address => {}
            _ => return Ok(()),
        }
        // Bounded by the press's deadline; the failover itself runs on (it
        // is detached), and the next press finds its session moved.
        match tokio::time::timeout_at(deadline, self.registry.fail_over(&entry.address)).await {
            Err(_) => Err(PressError::Deadline),
            Ok(result) => result.map(drop).map_err(|error| match error {
                CleanError::Store(e) => PressError::Store(e),
                CleanError::Archive(e) => PressError::Archive(e),
                other => PressError::FailOver(other),
            }),
        }
    }

    /// Places a session, restored from the archive: fold first (so the
    /// node's next archive cannot overwrite clicks we counted), then the
    /// atomic placement with the folded total as base.
    async fn place(
        &self,
        id: &str,
        stale_node: Option<&str>,
        after_failover: bool,
    ) -> Result<Mapping, PressError> {
        let mark = self.table().clean_mark();
        let base = self.archive().fold_one(id).await?;
        let expires_at_ms = self.clock.now_ms() + self.ttl.as_millis() as i64;
        // The strategy's choice is a preference: the script still places
        // atomically, and falls back to least sessions if it went down.
        let preferred = self
            .placement
            .as_ref()
            .and_then(|s| s.pick(id.as_bytes()))
            .map(|p| p.into_node());
        match self
            .store()
            .sessions
            .place(id, base, expires_at_ms, stale_node, preferred.as_deref())
            .await?
        {
            Placed::Placed(placement) => {
                if placement.created {
                    metrics::counter!("nodes_control_sessions_placed_total").increment(1);
                    debug!(session = %super::id::logged(id), node = %placement.mapping.node, base, "session placed");
                    if self.history {
                        let cause = match (after_failover, base) {
                            (true, _) => Cause::FailedOver,
                            (false, 0) => Cause::New,
                            (false, _) => Cause::Restored,
                        };
                        self.archive()
                            .record_placement(id, &placement.mapping.node, base, cause);
                    }
                }
                self.cache.put(id, &placement.mapping, mark);
                Ok(placement.mapping)
            }
            Placed::NoNode => Err(PressError::NoNode),
            Placed::NotReady => Err(PressError::Rebuilding),
        }
    }

    /// The node's entry in this replica's view. The view is refreshed
    /// first when it does not know the node (another replica added it) or
    /// thinks it down (another replica may have recovered it): moving a
    /// session off a node that is in fact up would lose its clicks there.
    async fn entry(&self, address: &str) -> Result<Option<Arc<NodeEntry>>, PressError> {
        if let Some(entry) = self.table().get(address).filter(|e| e.serves_presses()) {
            return Ok(Some(entry));
        }
        self.registry.refresh().await?;
        Ok(self.table().get(address))
    }
}

/// Outages keep their own codes; anything else is a failed clean.
fn expire_error(error: CleanError) -> PressError {
    match error {
        CleanError::Store(e) => PressError::Store(e),
        CleanError::Archive(e) => PressError::Archive(e),
        other => PressError::Expire(other),
    }
}
