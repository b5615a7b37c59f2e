//! What a press can end in besides a count; `http/error.rs` turns each
//! into its answer.

use crate::archive::ArchiveError;
use crate::lifecycle::CleanError;
use crate::nodes::NodeCallError;
use crate::store::StoreError;

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
    /// The press reached its node, which did not answer it (in time, or
    /// at all, or a gateway in front of it answered 502 or 503): the node
    /// may have counted it, so it is not tried elsewhere (504).
    #[error("node {node} took the press and did not answer it: {source}")]
    OutcomeUnknown {
        node: String,
        #[source]
        source: NodeCallError,
    },
    /// The node counted the press, but this replica was out of touch with
    /// the fence channel meanwhile and the node was failed over: the
    /// session may have moved on, so the count is not shown (504).
    #[error("node {node} counted the press but was failed over while this replica was silent")]
    FailedOverMeanwhile { node: String },
    #[error("the registry is being rebuilt after Redis lost its data")]
    Rebuilding,
    #[error("the press did not complete within its deadline")]
    Deadline,
    #[error("this replica is not following clean fences right now")]
    NotFollowingFences,
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

/// Outages keep their own codes; anything else is a failed clean.
pub(super) fn expire_error(error: CleanError) -> PressError {
    match error {
        CleanError::Store(e) => PressError::Store(e),
        CleanError::Archive(e) => PressError::Archive(e),
        other => PressError::Expire(other),
    }
}
