use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

mod attempt;
mod round;

use super::cache::MappingCache;
use super::error::PressError;
use super::SessionId;
use crate::archive::history::Cause;
use crate::archive::Archive;
use crate::clock::Clock;
use crate::cluster::NodeRegistry;
use crate::lifecycle::{CleanError, Sweeper};
use crate::nodes::{NodeClient, NodeEntry, NodeTable, Selector};
use crate::store::{Mapping, Placed, Store};
use round::{Next, Round};

/// What a lookup found: the mapping, the clean mark read before it, and,
/// with no mapping, the group's unmap count a placement folds against.
type Looked = (Option<Mapping>, u64, Option<String>);

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
    /// Whether placements go to the session history.
    history: bool,
}

/// How often a press queues again for a node whose backlog timed out its
/// connect (nothing was sent) before it is answered `node_busy`.
const MAX_REQUEUES: u32 = 2;

/// How often a placement folds again when its group unmapped a session
/// between its fold and its placement (each unmap a sweep's or a
/// failover's, so a few at most in a row).
const MAX_FOLDS: u32 = 4;

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

/// The press budget ([`SessionService`]'s `budget`) for a node timeout:
/// rounds start until it is spent, and the last may take two node
/// timeouts more (its timer started again after a stall of this process,
/// `nodes::deadline::node_silence`).
pub fn press_budget(node_timeout: Duration) -> Duration {
    node_timeout * 3 + Duration::from_secs(2)
}

impl SessionService {
    pub fn new(
        registry: NodeRegistry,
        sweeper: Sweeper,
        fences_followed: Arc<AtomicBool>,
        cache: Arc<MappingCache>,
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
            cache,
            history: settings.history,
            queue_timeout: settings.queue_timeout,
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
        // `Lookup`. The clean mark is read before the mapping: a clean of
        // the node that ends after this point makes us read the mapping
        // again. From the cache, it is the mark the cached mapping was
        // read at.
        let looked = match self.cache.get(id, self.clock.now_ms()) {
            Some((cached, mark)) => (Some(cached), mark, None),
            None => self.read(id).await?,
        };
        let mut round = Round::new(id, deadline, looked);
        loop {
            if Instant::now() >= deadline {
                return Err(PressError::Deadline);
            }
            if let Next::Answer(pressed) = self.round(&mut round).await? {
                return Ok(pressed);
            }
        }
    }

    /// Reads the mapping from Redis (the clean mark first) and caches it;
    /// with none, what its placement folds against, read with it.
    async fn read(&self, id: &str) -> Result<Looked, PressError> {
        let mark = self.table().clean_mark();
        let (mapping, seen) = self.store().sessions.lookup_with_unmaps(id).await?;
        match &mapping {
            Some(m) => self.cache.put(id, m, mark),
            None => self.cache.forget(id),
        }
        let seen = mapping.is_none().then_some(seen);
        Ok((mapping, mark, seen))
    }

    /// Session time now (ms since the epoch): what expiry is decided on.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Drops cached mappings of sessions that expired by now.
    pub fn purge_cache(&self) -> usize {
        self.cache.purge_expired(self.clock.now_ms())
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
    /// atomic placement with the folded total as base. A placement whose
    /// group unmapped a session since the fold began folds again: the
    /// archive may have grown meanwhile (model.md: base_guard).
    async fn place(
        &self,
        id: &str,
        stale_node: Option<&str>,
        after_failover: bool,
        mut seen_at_lookup: Option<String>,
    ) -> Result<Mapping, PressError> {
        let mark = self.table().clean_mark();
        // The strategy's choice is a preference: the script still places
        // atomically, and falls back to least sessions if it went down.
        let preferred = self
            .placement
            .as_ref()
            .and_then(|s| s.pick(id.as_bytes()))
            .map(|p| p.into_node());
        let mut folds = 0;
        let (base, placement) = loop {
            let seen = match seen_at_lookup.take() {
                Some(seen) => seen,
                None => self.store().sessions.unmaps_seen(id).await?,
            };
            let base = self.archive().fold_one(id).await?;
            let expires_at_ms = self.clock.now_ms() + self.ttl.as_millis() as i64;
            let placed = self
                .store()
                .sessions
                .place(
                    id,
                    base,
                    expires_at_ms,
                    stale_node,
                    preferred.as_deref(),
                    Some(&seen),
                )
                .await?;
            folds += 1;
            match placed {
                Placed::Placed(placement) => break (base, placement),
                Placed::NoNode => return Err(PressError::NoNode),
                Placed::NotReady => return Err(PressError::Rebuilding),
                Placed::Stale if folds < MAX_FOLDS => continue,
                Placed::Stale => return Err(PressError::Deadline),
            }
        };
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
