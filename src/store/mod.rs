//! `SessionStore`: every piece of shared state in Redis: session -> node
//! mappings, node registry, per-node active-session counts, expiry index.
//!
//! Every key is built in [`SessionStore::key`] from the configured prefix, so
//! replicas sharing a prefix share state and tests with their own prefix are
//! isolated. Layout (`P` = prefix):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P session:{id}` | hash | `node`, `base`, `exp` (ms since epoch) |
//! | `P expiry` | zset | session id by expiry time (the sweep reads only expired ones) |
//! | `P nodes` | zset | node address by registration time |
//! | `P node:{addr}` | hash | `name`, `weight`, `state`, `sessions` |
//! | `P node_sessions:{addr}` | set | ids of the sessions mapped to the node |
//! | `P placeable` | zset | up nodes scored by active sessions (placement is `ZRANGE 0 0`) |
//! | `P lock:{name}` | string | short admin locks (one operation per node at a time), renewed while held |
//! | `P fences`, `P fence_seq`, `P fence_acks:{addr}:{seq}`, `P replicas`, `P journal:{addr}` | | the clean fence, see [`fences`] |
//! | `P events` | pub/sub channel | wakes replicas when a fence is raised, lowered or acknowledged |
//! | `P registry` | string | the registry's epoch: written once the registry is complete; missing means Redis forgot it (DESIGN §4.12) |

mod fences;
mod nodes;
mod sessions;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;

pub use fences::{Fence, FenceReason, Journal};
pub use nodes::{NodeRecord, NodeState};
pub use sessions::{Mapping, Placed, Placement};

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
    conn: ConnectionManager,
    prefix: std::sync::Arc<str>,
    scripts: std::sync::Arc<Scripts>,
}

struct Scripts {
    place: redis::Script,
    register_node: redis::Script,
    set_node_state: redis::Script,
    unmap_node: redis::Script,
    apply_clean: redis::Script,
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
        Ok(Self {
            client,
            conn,
            prefix: prefix.into(),
            scripts: std::sync::Arc::new(Scripts {
                place: redis::Script::new(include_str!("place.lua")),
                register_node: redis::Script::new(include_str!("register_node.lua")),
                set_node_state: redis::Script::new(include_str!("set_node_state.lua")),
                unmap_node: redis::Script::new(include_str!("unmap_node.lua")),
                apply_clean: redis::Script::new(include_str!("apply_clean.lua")),
            }),
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

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
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

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
