//! What every mark-down of a node records, whoever made it (the press
//! path, the health checker, a clean the node did not answer): one
//! counter, one log line, one event with the state it left and the
//! sessions it held, the reason on the node.

use tracing::warn;

use crate::archive::events::{Actor, NodeEvent};
use crate::archive::Archive;
use crate::store::{NodeState, Nodes};

/// Records that `addr` went from `before` to down for `reason`. The state
/// itself is written by the caller, under whatever guard it holds; this
/// runs only once that write changed it, so a node marked down twice is
/// recorded once, with the first reason.
pub async fn record_marked_down(
    nodes: &Nodes,
    archive: &Archive,
    addr: &str,
    actor: Actor,
    before: NodeState,
    reason: &str,
) {
    metrics::counter!("nodes_control_nodes_marked_down_total").increment(1);
    warn!(node = %addr, from = %before, %reason, "node marked down");
    let mut event = NodeEvent::new(actor, addr, "marked_down")
        .states(Some(before.as_str()), Some("down"))
        .reason(reason);
    // The sessions it holds: those its failover moves off it.
    if let Ok(Some(node)) = nodes.get_node(addr).await {
        event = event.sessions(node.active_sessions);
    }
    archive.record(event);
    if let Err(error) = nodes.set_node_notes(addr, reason, None).await {
        warn!(node = %addr, %error, "could not record why the node is down");
    }
}
