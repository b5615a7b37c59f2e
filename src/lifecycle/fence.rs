//! `FenceWatcher`: this replica's half of the clean fence. It heartbeats
//! (so cleaners know to wait for it) and polls the raised fences; for each
//! one it closes its local gate to the node, which waits for its in-flight
//! presses there to finish, then acknowledges. The gate opens again when the
//! fence is lowered, and the table epoch moves on so presses that read a
//! mapping before the clean read it again.
//!
//! Polling (one `HGETALL` every [`POLL`]) rather than pub/sub: no second
//! connection to keep alive, and a lost message cannot block a clean.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::nodes::NodeTable;
use crate::store::{now_ms, SessionStore, StoreResult};

pub const POLL: Duration = Duration::from_millis(20);

#[derive(Clone)]
pub struct FenceWatcher {
    store: SessionStore,
    table: Arc<NodeTable>,
    replica: Arc<str>,
    /// Fences this replica holds: node -> (seq, release). A std mutex: never
    /// held across an await.
    held: Arc<Mutex<HashMap<String, HeldFence>>>,
}

/// A fence this replica has closed its gate for: its sequence number and
/// the sender whose drop opens the gate again.
type HeldFence = (u64, oneshot::Sender<()>);

impl FenceWatcher {
    pub fn new(store: SessionStore, table: Arc<NodeTable>) -> Self {
        Self {
            store,
            table,
            replica: uuid::Uuid::new_v4().to_string().into(),
            held: Arc::default(),
        }
    }

    pub fn replica_id(&self) -> &str {
        &self.replica
    }

    /// Heartbeat, then follow the raised fences. The heartbeat comes first:
    /// a cleaner that sees us alive waits for our ack, and we see its fence
    /// in the read that follows.
    pub async fn poll_once(&self) -> StoreResult<()> {
        self.store.heartbeat(&self.replica, now_ms()).await?;
        let fences = self.store.fences().await?;
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
                missing.push((node, fence.seq, released));
            }
            missing
        };
        for (node, seq, released) in missing {
            self.close_gate(node, seq, released).await;
        }
        Ok(())
    }

    /// Closes the local gate to `node` in a task that holds it until the
    /// fence is lowered; acks once no press of ours is in flight there.
    async fn close_gate(&self, node: String, seq: u64, released: oneshot::Receiver<()>) {
        if self.table.get(&node).is_none() {
            // A node added by another replica: learn it, so its gate exists.
            if let Ok(records) = self.store.list_nodes().await {
                self.table.sync(&records);
            }
        }
        let entry = self.table.get(&node);
        let watcher = self.clone();
        tokio::spawn(async move {
            let guard = match &entry {
                Some(entry) => Some(entry.fence().await),
                None => None, // unknown node: no press of ours can reach it
            };
            for attempt in 0.. {
                match watcher.store.ack_fence(&node, seq, &watcher.replica).await {
                    Ok(()) => break,
                    Err(error) if attempt % 50 == 0 => {
                        warn!(%node, seq, %error, "cannot ack fence; retrying")
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(POLL).await;
            }
            let _ = released.await;
            if let Some(entry) = &entry {
                watcher.table.cleaned(entry);
            }
            drop(guard);
        });
    }

    /// Polls every [`POLL`] until cancelled, then leaves the replica set.
    pub async fn run(self, cancel: CancellationToken) {
        loop {
            if let Err(error) = self.poll_once().await {
                debug!(%error, "fence poll failed");
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(POLL) => {}
            }
        }
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        if let Err(error) = self.store.remove_replica(&self.replica).await {
            warn!(%error, "could not deregister the replica; its heartbeat expires by itself");
        }
    }
}
