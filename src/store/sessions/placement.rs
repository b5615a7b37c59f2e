//! Placing a new session: the press path's one write to Redis.
//!
//! On a single Redis, placements asked for at the same time on this
//! replica go to Redis together ([`GroupCommit`]): one `place.lua` decides
//! a batch. On a cluster the replica chooses the node from its view of the
//! up nodes ([`super::view`], read again at most every few tens of
//! milliseconds), and the session's own group claims its mapping
//! (`claim.lua`): no call to the control slot per new session. Either way
//! the mapping is created by one script in the session's slot, so one
//! mapping stands however many replicas place one id at once (docs/cluster.md).

use std::sync::OnceLock;

use super::groups::mapping_bucket;
use super::view::Choice;
use super::{Context, Sessions, StoreResult};
use super::{Mapping, Placed, Placement};
use crate::group_commit::GroupCommit;
use crate::store::StoreError;

/// Most placements in one script: it holds Redis for its whole run (a
/// placement inside a batch costs Redis a few microseconds more than its
/// own calls), so a batch stays around a millisecond at most.
const MAX_BATCH: usize = 64;
/// Scripts of one replica in Redis at once: while one runs, the next
/// batch gathers.
const IN_FLIGHT: usize = 2;

/// How often a placement starts over when the mapping that stood named a
/// node Redis no longer knows (it is dropped and the session placed anew).
const PLACE_ATTEMPTS: usize = 3;

/// One placement of a `place.lua` batch (single Redis).
#[derive(Clone)]
struct PlaceRequest {
    id: String,
    base: i64,
    expires_at_ms: i64,
    stale: String,
    preferred: String,
    /// A node number the standing mapping named that Redis does not know:
    /// that mapping does not stand.
    unknown: String,
    /// What the base was folded against ([`Sessions::unmaps_seen`]; empty
    /// for a base that was not folded).
    seen: String,
}

impl PlaceRequest {
    fn new(id: &str, base: i64, expires_at_ms: i64, stale: &str, preferred: &str) -> Self {
        Self {
            id: id.to_owned(),
            base,
            expires_at_ms,
            stale: stale.to_owned(),
            preferred: preferred.to_owned(),
            unknown: String::new(),
            seen: String::new(),
        }
    }
}

/// `place.lua`'s answer for one placement: `None` when no node is up.
type PlaceAnswer = StoreResult<Option<Vec<i64>>>;
/// The batching tasks of one store, started on first use (on the runtime
/// that places the first session).
#[derive(Default)]
pub(super) struct Batchers {
    place: OnceLock<GroupCommit<PlaceRequest, PlaceAnswer>>,
}

/// The mapping Redis holds for a session, its node by number, and
/// whether this placement created it.
struct Mapped {
    number: u64,
    base: i64,
    expires_at_ms: i64,
    created: bool,
}

impl Mapped {
    /// The placement, its node known by `address`.
    fn at(self, address: &str) -> Placement {
        let mapping = Mapping {
            node: address.to_owned(),
            base: self.base,
            expires_at_ms: self.expires_at_ms,
        };
        Placement {
            mapping,
            created: self.created,
        }
    }
}

/// What Redis decided for one session.
enum Decided {
    Mapped(Mapped),
    NoNode,
    NotReady,
    /// The group unmapped a session since the base was folded.
    Stale,
    /// Chosen from a view that still offered a node closed to new
    /// sessions: chosen again, without it.
    Closed(String),
}

impl Sessions {
    /// Places a session on `preferred_node` if it is up, else on the up node
    /// with the fewest active sessions per unit of weight, unless it is
    /// mapped already; a mapping to `stale_node` is dropped and replaced.
    /// `seen`: what `base` was folded against ([`Self::unmaps_seen`]); a
    /// new mapping is refused ([`Placed::Stale`]) if the session's group
    /// unmapped a session since.
    pub async fn place(
        &self,
        session_id: &str,
        base: i64,
        expires_at_ms: i64,
        stale_node: Option<&str>,
        preferred_node: Option<&str>,
        seen: Option<&str>,
    ) -> StoreResult<Placed> {
        self.replicas
            .check_identity(&mapping_bucket(session_id)[..2])
            .await?;
        let stale = stale_node.unwrap_or_default();
        let preferred = preferred_node.unwrap_or_default();
        let mut request = PlaceRequest {
            seen: seen.unwrap_or_default().to_owned(),
            ..PlaceRequest::new(session_id, base, expires_at_ms, stale, preferred)
        };
        // Nodes a claim found closed: not chosen again by this placement. A
        // refusal uses no attempt (each one leaves one node fewer to
        // choose), and no node left is believed only after the view is read
        // again (it may know a node added since).
        let mut closed: Vec<String> = Vec::new();
        let mut read_again = false;
        let mut attempts = 0;
        while attempts < PLACE_ATTEMPTS {
            let decided = if self.cluster {
                self.choose_and_claim(request.clone(), &closed).await?
            } else {
                self.place_at_once(request.clone()).await?
            };
            let mapped = match decided {
                Decided::Mapped(mapped) => mapped,
                Decided::NoNode if !closed.is_empty() && !read_again => {
                    self.view.invalidate();
                    read_again = true;
                    continue;
                }
                Decided::NoNode => return Ok(Placed::NoNode),
                Decided::NotReady => return Ok(Placed::NotReady),
                Decided::Stale => return Ok(Placed::Stale),
                Decided::Closed(node) => {
                    closed.push(node);
                    continue;
                }
            };
            let Some(address) = self.node_address(mapped.number).await? else {
                // The standing mapping named a number Redis does not know.
                request.unknown = mapped.number.to_string();
                attempts += 1;
                continue;
            };
            return Ok(Placed::Placed(mapped.at(&address)));
        }
        Err(mapped_to_unknown_node())
    }

    /// On a single Redis: both steps in one script (`place.lua`), shared
    /// with the placements asked for at the same time.
    async fn place_at_once(&self, request: PlaceRequest) -> StoreResult<Decided> {
        let batcher = self.batchers.place.get_or_init(|| {
            let store = self.without_batchers();
            GroupCommit::start(MAX_BATCH, IN_FLIGHT, move |batch| {
                let store = store.clone();
                async move { store.place_batch(batch).await }
            })
        });
        let Some(reply) = batcher
            .submit(request)
            .await
            .unwrap_or_else(|| Err(gone()))?
        else {
            return Ok(Decided::NoNode);
        };
        match *reply.as_slice() {
            [created, number, base, expires_at_ms] => Ok(Decided::Mapped(Mapped {
                number: number as u64,
                base,
                expires_at_ms,
                created: created == 1,
            })),
            [-2] => Ok(Decided::Stale),
            _ => Ok(Decided::NotReady), // the registry or the group forgot
        }
    }

    /// The control keys `place.lua` and `view.lua` start with: placeable,
    /// registry epoch, counts, node numbers, weights.
    pub(super) fn placement_keys(&self, invocation: &mut redis::ScriptInvocation<'_>) {
        for key in ["placeable", "registry", "counts", "node_numbers", "weights"] {
            invocation.key(self.key(&[key]));
        }
    }

    async fn place_batch(&self, batch: Vec<PlaceRequest>) -> Vec<PlaceAnswer> {
        let mut invocation = self.scripts.place.prepare_invoke();
        self.placement_keys(&mut invocation);
        for request in &batch {
            let bucket = mapping_bucket(&request.id);
            let group = &bucket[..2];
            invocation
                .key(self.group_key(group, &["mappings", &bucket]))
                .key(self.group_key(group, &["epoch"]))
                .arg(self.group_prefix(group))
                .arg(&request.id)
                .arg(request.base)
                .arg(request.expires_at_ms)
                .arg(&request.stale)
                .arg(&request.preferred)
                .arg(&request.unknown)
                .arg(&request.seen);
        }
        let replies = invocation
            .invoke_async::<Vec<Option<Vec<i64>>>>(&mut self.conn())
            .await
            .context("placing sessions in Redis");
        answer_each(batch.len(), replies)
    }

    /// On a cluster: the node is chosen from this replica's view and
    /// counted there, and the session's group creates the mapping if the
    /// session has none (`claim.lua`). If it had one, the count goes back.
    async fn choose_and_claim(
        &self,
        request: PlaceRequest,
        closed: &[String],
    ) -> StoreResult<Decided> {
        let choice = self
            .choose(&request.stale, &request.preferred, closed)
            .await?;
        let (node, number) = match choice {
            Choice::NotReady => return Ok(Decided::NotReady),
            Choice::NoNode => return Ok(Decided::NoNode),
            Choice::Chosen { address, number } => (address, number),
        };
        let stale_number = match request.stale.as_str() {
            "" => None,
            stale => self.node_number(stale).await?,
        };
        let stale_number = request.unknown.parse::<u64>().ok().or(stale_number);
        let claimed = self.claim(&request, number, stale_number).await?;
        if claimed.first() == Some(&-2) {
            self.view.state.lock().await.count(&node, -1);
            return Ok(Decided::Stale);
        }
        if claimed.first() == Some(&-3) {
            // Closed in this group: the view is older than the node's state.
            self.view.state.lock().await.refuse(&node);
            return Ok(Decided::Closed(node));
        }
        let created = claimed.first() == Some(&1);
        if !created {
            // The count the choice took is not this session's.
            self.view.state.lock().await.count(&node, -1);
        }
        let &[_, standing, base, expires_at_ms, replaced] = claimed.as_slice() else {
            return Ok(Decided::NotReady); // the group forgot: being rebuilt
        };
        if let Some(stale) = stale_number.filter(|_| replaced == 1) {
            // The session's mapping to the stale node was dropped.
            if let Some(stale_node) = self.node_address(stale).await? {
                self.view.state.lock().await.count(&stale_node, -1);
            }
        }
        Ok(Decided::Mapped(Mapped {
            number: standing as u64,
            base,
            expires_at_ms,
            created,
        }))
    }

    /// `claim.lua` in the session's group: the mapping to node `number`,
    /// unless one stands (one to `stale` is replaced).
    async fn claim(
        &self,
        request: &PlaceRequest,
        number: u64,
        stale: Option<u64>,
    ) -> StoreResult<Vec<i64>> {
        let bucket = mapping_bucket(&request.id);
        let group = &bucket[..2];
        self.scripts
            .claim
            .key(self.group_key(group, &["mappings", &bucket]))
            .key(self.group_key(group, &["epoch"]))
            .key(self.index_key(group, number))
            .key(self.group_key(group, &["closed"]))
            .arg(self.group_prefix(group))
            .arg(&request.id)
            .arg(number)
            .arg(request.base)
            .arg(request.expires_at_ms)
            .arg(stale.map(|n| n.to_string()).unwrap_or_default())
            .arg(&request.seen)
            .invoke_async(&mut self.conn())
            .await
            .context("creating a session mapping in Redis")
    }
}

/// One answer per placement of a batch: each its own reply, or each the
/// error of the whole script (a connection lost is lost for all of them). A reply that does not have one answer per
/// placement is an error for all of them.
fn answer_each<T: Clone>(len: usize, replies: StoreResult<Vec<T>>) -> Vec<StoreResult<T>> {
    match replies {
        Ok(replies) if replies.len() == len => replies.into_iter().map(Ok).collect(),
        Ok(replies) => {
            let error = StoreError {
                context: "placing sessions in Redis",
                source: redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a placement script answered the wrong number of placements",
                    format!("{} answers for {len} placements", replies.len()),
                )),
            };
            vec![Err(error); len]
        }
        Err(error) => vec![Err(error); len],
    }
}

/// The batching task ended: its runtime is shutting down.
fn gone() -> StoreError {
    client_error(
        "placing a session in Redis",
        "the placement batch gave no answer (shutting down, or its run failed)",
    )
}

/// A placement that kept finding the session mapped to a node number Redis
/// has no address for.
fn mapped_to_unknown_node() -> StoreError {
    client_error(
        "placing a session in Redis",
        "the session stays mapped to a node Redis does not know",
    )
}

/// A failure found by this side, not reported by Redis.
fn client_error(context: &'static str, what: &'static str) -> StoreError {
    StoreError {
        context,
        source: redis::RedisError::from((redis::ErrorKind::Client, what)),
    }
}
