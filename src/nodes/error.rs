//! Why a call to a node failed: what the client reports and the table,
//! the cleaner and the press flow judge the node by.

use http::StatusCode;

/// Why a call to a node failed. Every variant but [`Request`](Self::Request)
/// is something the node did, and counts as a node failure (design.md §4.8,
/// §4.13).
#[derive(Debug, thiserror::Error)]
pub enum NodeCallError {
    /// The request could not be built: the client's doing, not the node's.
    #[error("the request to the node could not be built: {0}")]
    Request(String),
    /// No connection (refused, unreachable): nothing was sent.
    #[error("cannot reach the node: {0}")]
    Unsent(String),
    /// The connection failed after the request went out: the node may
    /// have counted it.
    #[error("the connection to the node failed: {0}")]
    Transport(String),
    /// No connection within the connect timeout: nothing was sent.
    #[error("connecting to the node timed out")]
    ConnectTimeout,
    #[error("the node did not answer in time")]
    Timeout,
    /// The node was declared down (by this replica or another) while the
    /// press was at it.
    #[error("the node was declared down while the press was at it")]
    Abandoned,
    #[error("the node answered HTTP {0}")]
    Status(StatusCode),
    #[error("the node answered an unexpected body: {0:?}")]
    Body(String),
    /// A fencing node refused the press, uncounted: its epoch is older
    /// than the node's last clean of the session (`fence`). The node is
    /// well; the mapping the press was sent with is not.
    #[error("the node refused a press under an older fencing epoch (its fence is {fence})")]
    StaleEpoch { fence: u64 },
}

impl NodeCallError {
    /// The node did not answer at all (as opposed to answering badly), or
    /// was declared down before it did.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            NodeCallError::Unsent(_)
                | NodeCallError::Transport(_)
                | NodeCallError::Timeout
                | NodeCallError::ConnectTimeout
                | NodeCallError::Abandoned
        )
    }

    /// Whether the node may have counted a press that ended so: anything
    /// after the request went out, but a fencing refusal. A press is tried
    /// on another node only when this is false (design.md §4.17,
    /// the retry rule).
    pub fn may_have_counted(&self) -> bool {
        !matches!(
            self,
            NodeCallError::Request(_)
                | NodeCallError::Unsent(_)
                | NodeCallError::ConnectTimeout
                | NodeCallError::StaleEpoch { .. }
        )
    }

    /// Only time ran out: no refusal, no reset, no bad answer.
    pub fn is_timeout(&self) -> bool {
        matches!(self, NodeCallError::Timeout | NodeCallError::ConnectTimeout)
    }

    /// A gateway's word that it could not reach the node behind it (502,
    /// 503): what a proxy in front of a saturated node answers, mostly
    /// before the press reached the node. Not 504: the node behind may
    /// still be working on the press, so it counts as the node's failure.
    pub fn is_gateway(&self) -> bool {
        matches!(self, NodeCallError::Status(s) if matches!(s.as_u16(), 502 | 503))
    }

    /// No evidence that the node is gone: time ran out, or a gateway said
    /// the node behind it is unavailable. From a node that goes on
    /// answering others this is load, not death (design.md, "Overload is
    /// not death").
    pub fn is_inconclusive(&self) -> bool {
        self.is_timeout() || self.is_gateway()
    }

    /// Whether the node is to blame (everything but a request we could
    /// not build, and a fencing refusal, which is the node doing its job).
    pub fn is_node_fault(&self) -> bool {
        !matches!(
            self,
            NodeCallError::Request(_) | NodeCallError::StaleEpoch { .. }
        )
    }
}

/// Whether an error was caused by time running out (hyper's connector
/// says so with an `io::Error` of kind `TimedOut` in its chain).
pub(super) fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(error) = source {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = error.source();
    }
    false
}

pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
