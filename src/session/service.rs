use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use super::SessionId;
use crate::archive::{Archive, ArchiveError};
use crate::lifecycle::{CleanError, Sweeper};
use crate::nodes::{NodeAdmin, NodeCallError, NodeClient, NodeEntry, NodeTable, Selector};
use crate::store::{now_ms, Mapping, SessionStore, StoreError};

/// Bound on the press loop (lookups after a fence, placements after a node
/// failed or went down): a press never spins.
const MAX_ROUNDS: usize = 16;

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
    Expire(#[from] CleanError),
    #[error("node {0} is being cleaned for too long")]
    Fenced(String),
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
    store: SessionStore,
    archive: Archive,
    admin: NodeAdmin,
    client: NodeClient,
    sweeper: Sweeper,
    /// The strategy choosing nodes for new sessions; `None`: least sessions,
    /// chosen inside the placement script.
    placement: Option<Arc<Selector>>,
    ttl: Duration,
}

/// Longest a press waits for a clean of its node to finish (DESIGN §4.7).
const FENCE_WAIT: Duration = Duration::from_secs(10);

impl SessionService {
    pub fn new(
        store: SessionStore,
        archive: Archive,
        admin: NodeAdmin,
        client: NodeClient,
        sweeper: Sweeper,
        placement: Option<Selector>,
        ttl: Duration,
    ) -> Self {
        Self {
            store,
            archive,
            admin,
            client,
            sweeper,
            placement: placement.map(Arc::new),
            ttl,
        }
    }

    fn table(&self) -> &Arc<NodeTable> {
        self.admin.table()
    }

    /// One press. An existing session on a live node costs one Redis read
    /// and one forward; everything else is the rare path.
    pub async fn press(&self, id: &SessionId) -> Result<Pressed, PressError> {
        let id = id.as_str();
        let mut epoch = self.table().epoch();
        let mut mapping = self.store.lookup(id).await?;
        let mut failed: Option<(String, NodeCallError)> = None;
        for _ in 0..MAX_ROUNDS {
            let current = match mapping.take() {
                Some(m) => m,
                None => self.place(id, None).await?,
            };
            if current.expires_at_ms <= now_ms() {
                // Never serve an expired session (DESIGN §4.3): archive it
                // (with its node's other expired sessions) and start anew.
                match self.sweeper.sweep_node(&current.node, id, now_ms()).await {
                    Ok(()) => {}
                    // The node is gone: it fails like a press would, and the
                    // session restores elsewhere from its last archive.
                    Err(CleanError::Node { source, .. }) if source.is_unreachable() => {
                        if let Some(entry) = self.table().get(&current.node) {
                            self.admin.mark_down(&entry).await;
                        }
                    }
                    Err(error) => return Err(error.into()),
                }
                mapping = self.store.lookup(id).await?;
                continue;
            }
            let entry = match self.entry(&current.node).await? {
                Some(entry) if entry.serves_presses() => entry,
                // Removed or down: move the session (DESIGN §4.5, §4.8).
                _ => {
                    mapping = Some(self.place(id, Some(&current.node)).await?);
                    continue;
                }
            };
            let in_flight = entry.start_request();
            let Some(gate) = entry.enter(FENCE_WAIT).await else {
                return Err(PressError::Fenced(entry.address.clone()));
            };
            if entry.cleaned_since(epoch) {
                // The node was cleaned after we read the mapping: read it
                // again (it may have moved, or have a new base).
                drop((gate, in_flight));
                epoch = self.table().epoch();
                mapping = self.store.lookup(id).await?;
                continue;
            }
            let result = self.client.press(&entry, id).await;
            drop((gate, in_flight));
            match result {
                Ok(count) => {
                    return Ok(Pressed {
                        clicks: count + current.base,
                        node: entry,
                    })
                }
                Err(error) => {
                    warn!(node = %entry.address, session = %id, %error, "press failed; node marked down");
                    self.admin.mark_down(&entry).await;
                    if let Some((node, source)) = failed {
                        return Err(PressError::NodeFailed { node, source });
                    }
                    failed = Some((entry.address.clone(), error));
                    metrics::counter!("nodes_control_failovers_total").increment(1);
                    // Retry once on a newly placed node.
                    mapping = Some(self.place(id, Some(&entry.address)).await?);
                }
            }
        }
        Err(match failed {
            Some((node, source)) => PressError::NodeFailed { node, source },
            None => PressError::NoNode,
        })
    }

    /// Places a session, restored from the archive: fold first (so the
    /// node's next archive cannot overwrite clicks we counted), then the
    /// atomic placement with the folded total as base.
    async fn place(&self, id: &str, stale_node: Option<&str>) -> Result<Mapping, PressError> {
        let base = self.archive.fold_one(id).await?;
        let expires_at_ms = now_ms() + self.ttl.as_millis() as i64;
        // The strategy's choice is a preference: the script still places
        // atomically, and falls back to least sessions if it went down.
        let preferred = self
            .placement
            .as_ref()
            .and_then(|s| s.pick(id.as_bytes()))
            .map(|p| p.into_node());
        let placement = self
            .store
            .place(id, base, expires_at_ms, stale_node, preferred.as_deref())
            .await?
            .ok_or(PressError::NoNode)?;
        if placement.created {
            metrics::counter!("nodes_control_sessions_placed_total").increment(1);
            debug!(session = %id, node = %placement.mapping.node, base, "session placed");
        }
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
        self.admin.refresh().await?;
        Ok(self.table().get(address))
    }
}
