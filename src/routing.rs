//! Stateless routing of `GET /process/{req_id}?user_id=N` (design.md §3): each
//! request goes to the node `STRATEGY` picks, keyed by `user_id` (by the
//! client address for `ip-hash`), and the node's answer comes back as is.

use std::ops::ControlFlow;
use std::sync::Arc;

use balancing::{hash_key, StrategyKind};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use tracing::{debug, warn};

use crate::archive::events::Actor;
use crate::clock::mono_ms;
use crate::cluster::NodeRegistry;
use crate::nodes::{NodeCallError, NodeClient, NodeEntry, Selector};

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("no node is available")]
    NoNode,
    /// The request cannot be sent as it is: the client's error, not a node's.
    #[error("{0}")]
    BadRequest(String),
    #[error("node {node} failed: {source}")]
    NodeFailed {
        node: String,
        #[source]
        source: NodeCallError,
    },
    /// The node's limit stayed full for the queue's wait, or it timed out
    /// while alive: it stays up.
    #[error("node {0} is busy")]
    Busy(String),
}

/// A node's answer, passed through.
#[derive(Debug)]
pub struct Routed {
    pub status: StatusCode,
    pub content_type: Option<HeaderValue>,
    pub body: Bytes,
    /// The `X-Served-By` value of the node that answered.
    pub served_by: Option<HeaderValue>,
}

#[derive(Clone)]
pub struct ProcessRouter {
    selector: Arc<Selector>,
    registry: NodeRegistry,
    client: NodeClient,
    /// Longest a request waits for its node's limit (`NODE_QUEUE_TIMEOUT_MS`).
    queue_timeout: std::time::Duration,
}

impl ProcessRouter {
    pub fn new(
        selector: Selector,
        registry: NodeRegistry,
        client: NodeClient,
        queue_timeout: std::time::Duration,
    ) -> Self {
        Self {
            selector: Arc::new(selector),
            registry,
            client,
            queue_timeout,
        }
    }

    pub fn strategy(&self) -> StrategyKind {
        self.selector.kind()
    }

    /// Forwards `path_and_query` (already `/process/..`) to the node picked
    /// for `key`. A node that fails is marked down and the request goes once
    /// more, to the node picked without it.
    pub async fn route(&self, path_and_query: &str, key: &[u8]) -> Result<Routed, RouteError> {
        let mut last = None;
        for _ in 0..2 {
            let Some(pick) = self.selector.pick(key) else {
                break;
            };
            let Some(entry) = self.registry.table().get(pick.node()) else {
                break;
            };
            debug!(
                strategy = %self.selector.kind(),
                node = %entry.name,
                key = %String::from_utf8_lossy(key),
                hash = hash_key(key),
                "routing /process"
            );
            let _in_flight = if pick.is_counted() {
                None
            } else {
                Some(entry.start_request())
            };
            let Some(_permit) = entry.link.limit.acquire(self.queue_timeout).await else {
                return Err(RouteError::Busy(entry.address.clone()));
            };
            let sent_at = mono_ms();
            let answer = self.client.get(&entry.address, path_and_query).await;
            self.count(&entry, answer.is_ok());
            match answer {
                Ok(answer) => {
                    entry.evidence.answered();
                    entry.link.limit.answered();
                    return Ok(Routed {
                        status: answer.status,
                        content_type: answer.content_type,
                        body: answer.body,
                        served_by: entry.served_by.clone(),
                    });
                }
                Err(source) => match self.failed(&entry, source, sent_at).await {
                    ControlFlow::Break(error) => return Err(error),
                    ControlFlow::Continue(error) => last = Some(error),
                },
            }
        }
        Err(last.unwrap_or(RouteError::NoNode))
    }

    fn count(&self, entry: &NodeEntry, ok: bool) {
        metrics::counter!(
            "nodes_control_process_requests_total",
            "strategy" => self.selector.kind().as_str(),
            "address" => entry.address.clone(),
            "name" => entry.name.clone(),
            "outcome" => if ok { "ok" } else { "error" },
        )
        .increment(1);
    }

    /// What a failed `/process` makes of its node, as a press's failure
    /// does: a bad request of ours ends it, a node spared (alive but slow,
    /// or the last one up) answers busy, a node that failed is marked down
    /// and the request goes to the next node (`Continue`).
    async fn failed(
        &self,
        entry: &NodeEntry,
        source: NodeCallError,
        sent_at: u64,
    ) -> ControlFlow<RouteError, RouteError> {
        let reason = format!("/process failed: {source}");
        if !source.is_node_fault() {
            return ControlFlow::Break(RouteError::BadRequest(source.to_string()));
        }
        if self
            .registry
            .table()
            .spare(entry, &source, sent_at)
            .is_some()
        {
            entry.link.limit.saturated(None);
            warn!(node = %entry.address, error = %source, "/process timed out on a node that stays up");
            return ControlFlow::Break(RouteError::Busy(entry.address.clone()));
        }
        if source.is_inconclusive() {
            let marked = self
                .registry
                .mark_down_unless_last(entry, Actor::PressFailure, &reason);
            if !marked.await {
                return ControlFlow::Break(RouteError::Busy(entry.address.clone()));
            }
        } else {
            self.registry
                .mark_down(entry, Actor::PressFailure, &reason)
                .await;
        }
        warn!(node = %entry.address, error = %source, "/process failed; node marked down");
        ControlFlow::Continue(RouteError::NodeFailed {
            node: entry.address.clone(),
            source,
        })
    }
}
