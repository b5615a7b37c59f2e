//! `SessionStore`: every piece of shared state in Redis: session -> node
//! mappings, node registry, per-node active-session counts, expiry index.
//!
//! Every key is built in [`SessionStore::key`] from the configured prefix, so
//! replicas sharing a prefix share state and tests with their own prefix are
//! isolated. Layout (`P` = prefix):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P mappings:{hhhh}` | hash | session id -> `{node number}:{base}:{expires at, ms}`; 65,536 buckets by SHA-1 of the id (small listpacks, not a key per session) |
//! | `P expiring:{number}` | zset | the seconds in which sessions placed on the node expire |
//! | `P expiring:{number}:{second}` | list | ids placed on the node that expire in that second (entries of sessions that left are skipped when read, dropped when the second is swept) |
//! | `P node_numbers`, `P node_addresses` | hash | node address <-> number (Postgres assigns numbers and never reuses one, so a replica remembers number -> address for good) |
//! | `P nodes` | zset | node address by registration time |
//! | `P node:{addr}` | hash | `name`, `weight`, `state`, `sessions`, `number`, `instance`, `reason` |
//! | `P placeable` | zset | up nodes scored by active sessions (placement is `ZRANGE 0 0`) |
//! | `P lock:{name}` | string | short admin locks (one operation per node at a time), renewed while held |
//! | `P fences`, `P fence_seq`, `P fence_acks:{addr}:{seq}`, `P replicas`, `P journal:{addr}` | | the clean fence, see [`fences`] |
//! | `P events` | pub/sub channel | wakes replicas when a fence is raised, lowered or acknowledged |
//! | `P registry` | string | the registry's epoch: written once the registry is complete; missing means Redis forgot it (design.md §4.12) |
//!
//! About 120 bytes of Redis per session with 45-byte ids (the mapping and
//! one expiry-list entry); ids over 64 bytes turn their bucket into a plain
//! hash table and cost more.

mod fences;
pub mod lock;
mod nodes;
mod sessions;
mod timed;

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;

/// The node types live in `nodes::record`; re-exported for the store's
/// callers.
pub use crate::nodes::record::{NodeRecord, NodeState};
pub use fences::{Fence, FenceReason, Journal};
pub use sessions::{Expiring, Mapping, Placed, Placement};

#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct StoreError {
    pub context: &'static str,
    #[source]
    pub source: redis::RedisError,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Attaches what we were doing to a Redis error.
pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> StoreResult<T>;
}

impl<T> Context<T> for redis::RedisResult<T> {
    fn context(self, context: &'static str) -> StoreResult<T> {
        self.map_err(|source| StoreError { context, source })
    }
}

/// Handle on the shared Redis state. Cheap to clone: the connection manager
/// multiplexes one connection and reconnects by itself after an outage.
#[derive(Clone)]
pub struct SessionStore {
    /// For the pub/sub connection, which cannot be multiplexed.
    client: redis::Client,
    conn: timed::TimedConnection,
    prefix: std::sync::Arc<str>,
    scripts: std::sync::Arc<Scripts>,
    /// Node number -> address, filled on first sight: a number is never
    /// given to another address, so an entry never goes stale.
    node_addresses: std::sync::Arc<std::sync::RwLock<HashMap<u64, std::sync::Arc<str>>>>,
}

struct Scripts {
    place: redis::Script,
    register_node: redis::Script,
    set_node_state: redis::Script,
    unmap_node: redis::Script,
    apply_clean: redis::Script,
    expiring: redis::Script,
    forget_expiring: redis::Script,
    delete_node: redis::Script,
}

/// A script that works on session mappings: the shared helpers first.
fn mapping_script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{}\n{body}", include_str!("prelude.lua")))
}

impl SessionStore {
    /// Connects lazily: the balancer starts (and reports not ready) while
    /// Redis is down, and every command fails fast instead of hanging.
    pub fn connect(redis_url: &str, prefix: &str) -> StoreResult<Self> {
        let client = redis::Client::open(redis_url).context("parsing REDIS_URL")?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .context("creating the Redis connection manager")?;
        let conn = timed::TimedConnection::new(conn);
        Ok(Self {
            client,
            conn,
            prefix: prefix.into(),
            scripts: std::sync::Arc::new(Scripts {
                place: mapping_script(include_str!("place.lua")),
                register_node: redis::Script::new(include_str!("register_node.lua")),
                set_node_state: redis::Script::new(include_str!("set_node_state.lua")),
                unmap_node: mapping_script(include_str!("unmap_node.lua")),
                apply_clean: mapping_script(include_str!("apply_clean.lua")),
                expiring: mapping_script(include_str!("expiring.lua")),
                forget_expiring: mapping_script(include_str!("forget_expiring.lua")),
                delete_node: mapping_script(include_str!("delete_node.lua")),
            }),
            node_addresses: Default::default(),
        })
    }

    /// The one place a Redis key is built.
    pub fn key(&self, parts: &[&str]) -> String {
        let mut key = String::with_capacity(self.prefix.len() + 48);
        key.push_str(&self.prefix);
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                key.push(':');
            }
            key.push_str(part);
        }
        key
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .context("pinging Redis")
    }

    fn conn(&self) -> timed::TimedConnection {
        self.conn.clone()
    }

    /// The address of node `number`, from memory after the first read.
    /// `None` if Redis does not know the number (it forgot everything).
    async fn node_address(&self, number: u64) -> StoreResult<Option<std::sync::Arc<str>>> {
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
            let address: std::sync::Arc<str> = address.into();
            self.node_addresses
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(number, address.clone());
            address
        }))
    }

    /// Wakes every replica: a fence changed (see [`fences`]).
    pub async fn publish_event(&self, event: &str) -> StoreResult<()> {
        self.conn()
            .publish::<_, _, ()>(self.key(&["events"]), event)
            .await
            .context("publishing a fence event in Redis")
    }

    /// A dedicated connection subscribed to the events channel.
    pub async fn subscribe_events(&self) -> StoreResult<redis::aio::PubSub> {
        let mut pubsub =
            tokio::time::timeout(Duration::from_secs(2), self.client.get_async_pubsub())
                .await
                .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timed out")))
                .context("opening the Redis pub/sub connection")?
                .context("opening the Redis pub/sub connection")?;
        pubsub
            .subscribe(self.key(&["events"]))
            .await
            .context("subscribing to fence events in Redis")?;
        Ok(pubsub)
    }

    /// The registry's epoch, if Redis has one (see the module docs).
    pub async fn registry_epoch(&self) -> StoreResult<Option<String>> {
        self.conn()
            .get(self.key(&["registry"]))
            .await
            .context("reading the registry epoch from Redis")
    }

    /// Declares the registry complete (fresh, or rebuilt after amnesia).
    pub async fn set_registry_epoch(&self, epoch: &str) -> StoreResult<()> {
        self.conn()
            .set::<_, _, ()>(self.key(&["registry"]), epoch)
            .await
            .context("writing the registry epoch to Redis")
    }
}

pub(crate) use crate::clock::wall_ms as now_ms;
