//! Stateless routing of `GET /process/{req_id}?user_id=N` (design.md §3): each
//! request goes to the node `STRATEGY` picks, keyed by `user_id` (by the
//! client address for `ip-hash`), and the node's answer comes back as is.

use std::sync::Arc;

use balancing::{hash_key, StrategyKind};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use tracing::{debug, warn};

use crate::archive::events::Actor;
use crate::cluster::NodeRegistry;
use crate::nodes::{NodeCallError, NodeClient, Selector};

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
pub struct Router {
    selector: Arc<Selector>,
    registry: NodeRegistry,
    client: NodeClient,
}

impl Router {
    pub fn new(selector: Selector, registry: NodeRegistry, client: NodeClient) -> Self {
        Self {
            selector: Arc::new(selector),
            registry,
            client,
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
            let answer = self.client.get(&entry.address, path_and_query).await;
            let outcome = if answer.is_ok() { "ok" } else { "error" };
            metrics::counter!(
                "nodes_control_process_requests_total",
                "strategy" => self.selector.kind().as_str(),
                "address" => entry.address.clone(),
                "name" => entry.name.clone(),
                "outcome" => outcome,
            )
            .increment(1);
            match answer {
                Ok(answer) => {
                    return Ok(Routed {
                        status: answer.status,
                        content_type: answer.content_type,
                        body: answer.body,
                        served_by: entry.served_by.clone(),
                    })
                }
                Err(source) if !source.is_node_fault() => {
                    return Err(RouteError::BadRequest(source.to_string()));
                }
                Err(source) => {
                    warn!(node = %entry.address, error = %source, "/process failed; node marked down");
                    self.registry
                        .mark_down(
                            &entry,
                            Actor::PressFailure,
                            &format!("/process failed: {source}"),
                        )
                        .await;
                    last = Some(RouteError::NodeFailed {
                        node: entry.address.clone(),
                        source,
                    });
                }
            }
        }
        Err(last.unwrap_or(RouteError::NoNode))
    }
}
