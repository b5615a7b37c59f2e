//! Draining a node: no new sessions, its own served until they end, then
//! removed (with archive) when empty or at the deadline.

use tracing::{info, warn};

use super::{AdminError, NodeAdmin};
use crate::archive::events::{Actor, NodeEvent};
use crate::nodes::address::NodeAddress;
use crate::store::{NodeRecord, NodeState};

/// Longest drain deadline accepted (a week).
pub const MAX_DRAIN_SECS: u64 = 7 * 24 * 3600;

/// What a drain did: the node takes no new session from now on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drain {
    /// Sessions still on the node; it is removed (with archive) when none
    /// is left, or at the deadline.
    pub sessions: i64,
    /// When it is removed at the latest (ms since the epoch).
    pub deadline_ms: i64,
}

impl NodeAdmin {
    /// Drains a node: it takes no new session from now on, keeps serving the
    /// ones it has until they expire, and is removed (with archive, as by
    /// `remove`) by [`finish_drains`](Self::finish_drains) once it holds
    /// none, or at the deadline. Draining a draining node moves its deadline.
    pub async fn drain(
        &self,
        address: &str,
        deadline: Option<std::time::Duration>,
    ) -> Result<Drain, AdminError> {
        let address = NodeAddress::parse(address)?;
        let deadline = match deadline {
            Some(d) if d.is_zero() || d.as_secs() > MAX_DRAIN_SECS => {
                return Err(AdminError::DrainDeadline)
            }
            // Sessions live at most their TTL; a drain without a deadline
            // waits for them, and a week bounds a forgotten one.
            Some(d) => d,
            None => std::time::Duration::from_secs(MAX_DRAIN_SECS),
        };
        self.with_node_lock(address.as_str(), move |this, lock| async move {
            let addr = lock.node();
            let record = this
                .store()
                .nodes
                .get_node(addr)
                .await?
                .ok_or_else(|| AdminError::UnknownNode(addr.to_owned()))?;
            if record.state == NodeState::Down {
                return Err(AdminError::DrainDown(addr.to_owned()));
            }
            let deadline_ms = crate::clock::wall_ms() + deadline.as_millis() as i64;
            this.archive().set_member_draining(addr).await?;
            this.store()
                .nodes
                .set_drain_until(addr, deadline_ms)
                .await?;
            this.store()
                .nodes
                .set_node_state(
                    addr,
                    NodeState::Draining,
                    &[NodeState::Up, NodeState::Draining],
                )
                .await?;
            this.table().upsert(&NodeRecord {
                state: NodeState::Draining,
                ..record.clone()
            });
            info!(node = %addr, sessions = record.active_sessions, deadline_ms, "node draining");
            this.archive().record(
                NodeEvent::new(Actor::Admin, addr, "draining")
                    .states(Some(record.state.as_str()), Some("draining"))
                    .sessions(record.active_sessions)
                    .reason(format!(
                        "removed when empty, or in {} s at the latest",
                        deadline.as_secs()
                    )),
            );
            Ok(Drain {
                sessions: record.active_sessions,
                deadline_ms,
            })
        })
        .await
    }

    /// Removes every draining node that holds no session any more, or whose
    /// drain deadline passed. Returns the nodes removed. Any replica may run
    /// it; the node lock makes one of them do each removal.
    pub async fn finish_drains(&self) -> Result<Vec<String>, AdminError> {
        let mut removed = Vec::new();
        for record in self.store().nodes.list_nodes().await? {
            if record.state != NodeState::Draining {
                continue;
            }
            let Some(until) = self.store().nodes.drain_until(&record.address).await? else {
                continue; // a removal's own draining: it finishes by itself
            };
            let reason = if record.active_sessions <= 0 {
                "drain finished: no session left"
            } else if crate::clock::wall_ms() >= until {
                "drain deadline passed"
            } else {
                continue;
            };
            match self.remove_as(&record.address, Actor::Drain, reason).await {
                Ok(_) => removed.push(record.address),
                Err(AdminError::UnknownNode(_) | AdminError::Busy(_)) => {}
                Err(error) => warn!(node = %record.address, %error, "could not finish a drain"),
            }
        }
        Ok(removed)
    }
}
