//! The shared state in Redis: session -> node mappings, the node registry,
//! per-node active-session counts, the expiry index, fences, locks and
//! replicas.
//!
//! One core, [`Core`] (the connection, cluster routing, keys, script
//! loading), under a handle per concern, each with its Lua beside it:
//! [`Sessions`] (mappings and placement), [`Nodes`] (the registry),
//! [`Fences`] (the clean fence and its journals), [`Locks`] (one operation
//! per node) and [`Replicas`] (heartbeats, the Redis's identity and the
//! layout). [`Store::connect`] makes them all; each service keeps the ones
//! it uses.
//!
//! The layout runs unchanged on one Redis and on a Redis Cluster: every
//! script and every pipeline touches one hash slot. Keys are built here
//! from the configured prefix `P` (replicas sharing a prefix share state;
//! tests with their own prefix are isolated) and one of two hash tags:
//!
//! **Control** (`P{ctl}`, one slot): the registry and everything a
//! membership change or a fence touches.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{ctl}node_numbers`, `P{ctl}node_addresses` | hash | node address <-> number (Postgres assigns numbers and never reuses one, so a replica remembers number -> address for good) |
//! | `P{ctl}nodes` | zset | node address by registration time |
//! | `P{ctl}node:{addr}` | hash | `name`, `weight`, `state`, `number`, `instance`, `reason`, `drain_until` |
//! | `P{ctl}counts` | hash | node address -> active sessions, moved by the placement and unmapping scripts and set again from the sizes of the node's indexes by every sweep's tally (`groups::tally`) |
//! | `P{ctl}placeable` | zset | up nodes scored by active sessions per unit of weight (placement is `ZRANGE 0 0`) |
//! | `P{ctl}weights` | hash | node address -> weight, for the scripts that score `placeable` (a node without one weighs 1) |
//! | `P{ctl}lock:{name}` | string | short admin locks (one operation per node at a time), renewed while held |
//! | `P{ctl}fences`, `fence_seq`, `fence_acks:{addr}:{seq}`, `replicas`, `journal:{addr}` | | the clean fence, see [`Fences`] |
//! | `P{ctl}events` | pub/sub channel | wakes replicas when a fence is raised, lowered or acknowledged |
//! | `P{ctl}registry` | string | the registry's epoch: written once the registry and every group are complete; missing means Redis forgot (design.md, amnesia) |
//! | `P{ctl}identity` | string | the `run_id` of the Redis (the control slot's primary) that held the registry when it was complete: another one may hold older data (replicas/identity.rs) |
//! | `P{ctl}layout` | string | the storage layout's version ([`LAYOUT`]), written with the registry's epoch; a replica that finds another refuses to serve (`layout`) |
//!
//! **Session groups** (`P{s:gg}`, `gg` the first two hex digits of
//! SHA-1(session id): 256 groups, each in its own slot, spread over the
//! cluster's primaries): everything about a session.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{s:gg}mappings:{gghh}` | hash | session id -> `{node number}:{base}:{expires at, ms}`; 256 buckets a group by the next two hex digits (small listpacks, not a key per session) |
//! | `P{s:gg}due:{number}` | list | the group's sessions on node `number`, in the order they were placed (so, give or take a clock's skew, of their end: sessions live a fixed time): the sweep's index, each entry `{end, ms}\t{id}`, walked from the head in plain `LRANGE`s (`walk`); exact (an entry leaves with its mapping), and its length the group's count of the node (exact but for strays, entries whose session left: layout.md, Indexes). A list packs into compact nodes at any length, where a zset past 128 entries costs a skiplist node and a dict entry per session |
//! | `P{s:gg}unmaps` | string | how many times a session of the group was unmapped (`unmap.lua`): a placement refuses a base folded before the last one (`Sessions::unmaps_seen`) |
//! | `P{s:gg}epoch` | string | the registry epoch the group belongs to: missing means this group's primary forgot |
//! | `P{s:gg}identity` | string | (a cluster only) the `run_id` of the primary that held the group when the registry was complete (or when it moved there): one no live primary has means the group came back on an older snapshot (replicas/identity.rs) |
//! | `P{s:gg}closed` | set | numbers of the nodes closed to new sessions in this group (a cluster only): `claim.lua` refuses them; added before a removal, failover or wipe reads a node's sessions, removed when the node is up again (a removed node's stays) |
//!
//! A `{` in the prefix itself would become the hash tag of every key: it
//! still works, on one slot.

mod fanout;
mod fences;
mod locks;
mod nodes;
mod replicas;
mod routes;
pub mod sessions;
mod target;
mod timed;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;

/// The node types live in `nodes::record`; re-exported for the store's
/// callers.
pub use crate::nodes::record::{NodeRecord, NodeState};
pub use fences::{Fence, FenceReason, Fences, HandedOver, Journal};
pub use locks::{with_lock, with_node_lock, Lock, Locks, NodeLock, LOCK_TTL_MS, LOCK_WAIT};
pub use nodes::{Nodes, StateChange};
pub use replicas::{Identity, Layout, LayoutMismatch, Replicas, LAYOUT};
pub use sessions::{Mapping, Placed, Placement, Sessions};
pub use target::RedisTarget;
use timed::{Connection, TimedConnection, Verified};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}")]
pub struct StoreError {
    pub context: &'static str,
    #[source]
    pub source: redis::RedisError,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What a guarded write (or [`Lock::check`]) reports when the operation's
/// lock is no longer its holder's.
const LOCK_LOST: &str = "the node's lock passed to another operation (this one paused past its lifetime); it stops here";

impl StoreError {
    pub fn lock_lost() -> Self {
        Self {
            context: LOCK_LOST,
            source: redis::RedisError::from((redis::ErrorKind::Client, "LOCKLOST")),
        }
    }

    /// The operation lost its lock: nothing it would write next may land.
    pub fn is_lock_lost(&self) -> bool {
        self.context == LOCK_LOST
    }

    /// Redis restarted or failed over since the registry was complete:
    /// nothing is read from it until the registry is rebuilt.
    pub fn identity_changed() -> Self {
        Self {
            context: IDENTITY_CHANGED,
            source: redis::RedisError::from((redis::ErrorKind::Client, "Redis identity changed")),
        }
    }

    pub fn is_identity_changed(&self) -> bool {
        self.context == IDENTITY_CHANGED
    }
}

const IDENTITY_CHANGED: &str =
    "Redis restarted or failed over and may hold older data; the registry is being rebuilt";

/// Attaches what we were doing to a Redis error.
pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> StoreResult<T>;
}

impl<T> Context<T> for redis::RedisResult<T> {
    fn context(self, context: &'static str) -> StoreResult<T> {
        self.map_err(|source| match source.code() {
            // A guarded script found the lock another's (guard.lua).
            Some("LOCKLOST") => StoreError::lock_lost(),
            _ => StoreError { context, source },
        })
    }
}

/// Every handle at once, as [`Store::connect`] makes them. Cheap to clone:
/// the connection multiplexes and reconnects by itself after an outage.
#[derive(Clone)]
pub struct Store {
    pub sessions: Sessions,
    pub nodes: Nodes,
    pub fences: Fences,
    pub locks: Locks,
    pub replicas: Replicas,
}

impl Store {
    /// Connects lazily: the balancer starts (and reports not ready) while
    /// Redis is down, and every command fails fast instead of hanging.
    pub fn connect(redis_url: &str, prefix: &str) -> StoreResult<Self> {
        let core = Arc::new(Core::connect(redis_url, prefix)?);
        let replicas = Replicas::new(core.clone());
        let view = Arc::new(sessions::PlacementView::default());
        let sessions = Sessions::new(core.clone(), replicas.clone(), view);
        Ok(Self {
            nodes: Nodes::new(core.clone(), sessions.clone()),
            sessions,
            fences: Fences::new(core.clone()),
            locks: Locks::new(core),
            replicas,
        })
    }

    /// This store, on a cluster, choosing new sessions' nodes from views
    /// that serve `ttl` before they are read again (sessions/view.rs; 50 ms
    /// unless set): for tests that need a view to stay as it was read.
    pub fn with_view_ttl(mut self, ttl: Duration) -> Self {
        let view = Arc::new(sessions::PlacementView::with_ttl(ttl));
        self.sessions = self.sessions.with_view(view);
        self.nodes = Nodes::new(self.nodes.core().clone(), self.sessions.clone());
        self
    }

    pub fn core(&self) -> &Core {
        &self.locks
    }
}

/// The connection, the keys and the cluster's routes, shared by every
/// handle.
pub struct Core {
    /// For the pub/sub connection, which cannot be multiplexed.
    client: redis::Client,
    conn: TimedConnection,
    prefix: Arc<str>,
    /// A Redis Cluster: pipelines must stay within one hash slot, unless
    /// sent to the primary that serves them all (see [`routes`]).
    cluster: bool,
    routes: routes::Routes,
    /// Node number -> address, filled on first sight: a number is never
    /// given to another address, so an entry never goes stale.
    node_addresses: RwLock<HashMap<u64, Arc<str>>>,
    /// Cleared whenever a call loses its connection
    /// (see replicas/identity.rs).
    verified: Arc<Verified>,
}

/// A script with the shared helpers (prelude.lua) first: the mapping
/// format, the session's keys, and how placement weighs a node.
fn with_prelude(body: &str) -> redis::Script {
    redis::Script::new(&format!("{}\n{body}", include_str!("prelude.lua")))
}

/// A script run under its node's lock: guard.lua first.
fn guarded(body: &str) -> redis::Script {
    redis::Script::new(&format!("{}\n{body}", include_str!("guard.lua")))
}

/// A script on Redis's clock: redis_now.lua (`now`) first.
fn timed(body: &str) -> redis::Script {
    redis::Script::new(&format!("{}\n{body}", include_str!("redis_now.lua")))
}

impl Core {
    fn connect(redis_url: &str, prefix: &str) -> StoreResult<Self> {
        let invalid = |message: String| StoreError {
            context: "parsing REDIS_URL",
            source: redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "invalid REDIS_URL",
                message,
            )),
        };
        let target = RedisTarget::parse(redis_url).map_err(invalid)?;
        let (client, conn) = match &target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str()).context("parsing REDIS_URL")?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(Some(Duration::from_secs(1)))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .context("creating the Redis connection manager")?;
                (client, Connection::Single(conn))
            }
            RedisTarget::Cluster(seeds) => {
                // Pub/sub stays on the first seed: a cluster delivers every
                // message to subscribers on any node.
                let client = redis::Client::open(seeds[0].as_str()).context("parsing REDIS_URL")?;
                let cluster = redis::cluster::ClusterClient::builder(seeds.clone())
                    .retries(6)
                    .min_retry_wait(10)
                    .max_retry_wait(500)
                    // Retries included (and once more on a fresh connection).
                    .overall_response_timeout(Some(Duration::from_secs(5)))
                    .build()
                    .context("parsing the Redis Cluster seeds in REDIS_URL")?;
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(Duration::from_secs(1))
                    .set_response_timeout(Duration::from_secs(1));
                let cluster = timed::Cluster::new(cluster, config);
                (client, Connection::Cluster(Arc::new(cluster)))
            }
        };
        let verified = Arc::new(Verified::default());
        Ok(Self {
            client,
            conn: TimedConnection::new(conn, verified.clone()),
            verified,
            prefix: prefix.into(),
            cluster: matches!(target, RedisTarget::Cluster(_)),
            routes: Default::default(),
            node_addresses: Default::default(),
        })
    }

    /// The one place a control key is built (`P{ctl}a:b`).
    pub fn key(&self, parts: &[&str]) -> String {
        join_key(&self.prefix, "{ctl}", parts)
    }

    /// A key of session group `group` (`P{s:gg}a:b`).
    pub fn group_key(&self, group: &str, parts: &[&str]) -> String {
        join_key(&self.prefix, &format!("{{s:{group}}}"), parts)
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether this store knows the cluster's slot map (never on a single
    /// Redis). A walk that finds it stale forgets it and goes group by
    /// group; a test reads it to see that a walk had no cause to.
    pub fn knows_slot_map(&self) -> bool {
        self.routes.get().is_some()
    }

    pub async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<()>(&mut self.conn())
            .await
            .context("pinging Redis")
    }

    fn conn(&self) -> TimedConnection {
        self.conn.clone()
    }

    /// The address of node `number`, from memory after the first read.
    /// `None` if Redis does not know the number (it forgot everything).
    async fn node_address(&self, number: u64) -> StoreResult<Option<Arc<str>>> {
        let known = self
            .node_addresses
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&number)
            .cloned();
        if known.is_some() {
            return Ok(known);
        }
        let address: Option<String> = self
            .conn()
            .hget(self.key(&["node_addresses"]), number)
            .await
            .context("reading a node's address from Redis")?;
        Ok(address.map(|address| {
            let address: Arc<str> = address.into();
            self.node_addresses
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(number, address.clone());
            address
        }))
    }
}

pub(crate) use crate::clock::wall_ms as now_ms;

/// `prefix` + `tag` + the parts joined by `:`.
fn join_key(prefix: &str, tag: &str, parts: &[&str]) -> String {
    let mut key = String::with_capacity(prefix.len() + tag.len() + 48);
    key.push_str(prefix);
    key.push_str(tag);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push(':');
        }
        key.push_str(part);
    }
    key
}
