//! Every Redis call of the store, timed: one connection type for a single
//! Redis and for a Redis Cluster, so commands, scripts and pipelines all
//! pass through one place.

use std::time::Instant;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// The connection under the store: a single Redis through the connection
/// manager (reconnects by itself), or a cluster through redis-rs's cluster
/// client (follows `MOVED` and `ASK`, retries `TRYAGAIN` while a slot
/// moves). Both multiplex, both are cheap to clone.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(Arc<Cluster>),
}

/// A cluster connection that is replaced when a call times out, and the
/// call tried once more on the new one. Under resharding with a loaded
/// CPU, redis-rs's cluster client was seen to start a slot refresh that
/// never ended, after which every call waited behind it; a fresh
/// connection learns the slots again and goes on. A call retried after a
/// timeout may run twice: every script is idempotent or, for the counts,
/// corrected by the next tally (store/sessions/groups.rs).
pub struct Cluster {
    client: ClusterClient,
    config: ClusterConfig,
    current: ArcSwap<ClusterConnection>,
}

impl Cluster {
    pub fn new(client: ClusterClient, config: ClusterConfig) -> Self {
        let current =
            ArcSwap::from_pointee(client.get_pending_async_connection_with_config(config.clone()));
        Self {
            client,
            config,
            current,
        }
    }

    fn conn(&self) -> ClusterConnection {
        ClusterConnection::clone(&self.current.load())
    }

    /// Runs `call`, and again while the cluster answers that a slot is on
    /// the move (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`,
    /// `LOADING`) past redis-rs's own few retries, for at most
    /// [`SLOT_MOVE_PATIENCE`]: a slot of many keys takes longer to migrate
    /// than those retries wait, and a press must not fail for it (the press
    /// deadline is longer still).
    async fn call<T, F>(&self, call: impl Fn(ClusterConnection) -> F) -> RedisResult<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let give_up = Instant::now() + SLOT_MOVE_PATIENCE;
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            match self.call_once(&call).await {
                Err(error) if retryable(&error) && Instant::now() + pause < give_up => {
                    metrics::counter!("nodes_control_redis_slot_retries_total").increment(1);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(200));
                }
                answer => return answer,
            }
        }
    }

    /// Runs `call` on the connection; if it times out, replaces the
    /// connection (calls in flight on the old one finish or fail by
    /// themselves) and runs it once more.
    async fn call_once<T, F>(&self, call: &impl Fn(ClusterConnection) -> F) -> RedisResult<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let used = self.current.load_full();
        match call(ClusterConnection::clone(&used)).await {
            Err(error) if error.is_timeout() => {
                tracing::warn!("a Redis Cluster call timed out; reconnecting to the cluster");
                let fresh = Arc::new(
                    self.client
                        .get_pending_async_connection_with_config(self.config.clone()),
                );
                // Only once for the calls that timed out together.
                let _ = self.current.compare_and_swap(&used, fresh);
                call(self.conn()).await
            }
            answer => answer,
        }
    }
}

/// How long a call on a cluster is retried while its slot moves.
const SLOT_MOVE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(4);

/// A call worth making again within [`SLOT_MOVE_PATIENCE`]: a slot on the
/// move, or a call that timed out twice (once more on a fresh connection):
/// with every core busy, the slot refreshes that follow a move were seen
/// to hold lookups past a second each (the reshard tests, four clusters on
/// two cores). A read is safe to repeat; a script as the `Cluster` notes.
fn retryable(error: &redis::RedisError) -> bool {
    moving(error) || error.is_timeout()
}

/// An answer that says a slot is moving or its primary changing: the same
/// call succeeds once it has.
fn moving(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    error.is_cluster_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading)
        )
}

/// A [`Connection`] that records each call's time in
/// `nodes_control_redis_call_duration_seconds` (failures and timeouts
/// included).
#[derive(Clone)]
pub struct TimedConnection {
    inner: Connection,
    /// Told when a call loses its connection: the Redis that answers next
    /// may be another process (store/replicas/identity.rs).
    verified: Arc<Verified>,
}

impl TimedConnection {
    pub fn new(inner: Connection, verified: Arc<Verified>) -> Self {
        Self { inner, verified }
    }

    fn judge<T>(&self, answer: &RedisResult<T>) {
        if let Err(error) = answer {
            if error.is_io_error()
                || error.is_connection_dropped()
                || error.is_connection_refusal()
                || error.is_timeout()
            {
                self.verified.lost();
            }
        }
    }

    /// Sends `pipeline` to one primary of a cluster, whatever slots its
    /// keys are in (the primary answers for the slots it serves, and an
    /// error for the others). `None` on a single Redis.
    pub async fn to_primary(
        &self,
        pipeline: Pipeline,
        host: String,
        port: u16,
    ) -> Option<redis::RedisResult<Vec<Value>>> {
        let Connection::Cluster(cluster) = &self.inner else {
            return None;
        };
        let started = Instant::now();
        let count = pipeline.len();
        let route = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port };
        let answer = cluster
            .call(|mut conn| {
                let (pipeline, route) = (pipeline.clone(), route.clone());
                async move { conn.route_pipeline(pipeline, 0, count, route).await }
            })
            .await;
        record(started);
        Some(answer)
    }
}

fn record(started: Instant) {
    metrics::histogram!("nodes_control_redis_call_duration_seconds")
        .record(started.elapsed().as_secs_f64());
}

impl ConnectionLike for TimedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let started = Instant::now();
        Box::pin(async move {
            let answer = match &mut self.inner {
                Connection::Single(conn) => conn.req_packed_command(cmd).await,
                Connection::Cluster(cluster) => {
                    cluster
                        .call(|mut conn| async move { conn.req_packed_command(cmd).await })
                        .await
                }
            };
            record(started);
            self.judge(&answer);
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let started = Instant::now();
        Box::pin(async move {
            let answer = match &mut self.inner {
                Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count).await,
                Connection::Cluster(cluster) => {
                    cluster
                        .call(|mut conn| async move {
                            conn.req_packed_commands(pipeline, offset, count).await
                        })
                        .await
                }
            };
            record(started);
            self.judge(&answer);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Connection::Single(conn) => conn.get_db(),
            Connection::Cluster(cluster) => cluster.conn().get_db(),
        }
    }
}

/// Whether every call since the identity was last checked kept its
/// connection: calls that lost theirs are counted, and a check vouches
/// only for the losses counted before it began. A loss during the check
/// (the server may have changed after it answered `INFO`) leaves the
/// identity unverified for the next call. Shared by the store's
/// connection, which counts.
#[derive(Debug)]
pub struct Verified {
    losses: AtomicU64,
    /// The losses the last check that found the same Redis vouches for;
    /// `u64::MAX` before any check.
    vouched: AtomicU64,
}

impl Default for Verified {
    fn default() -> Self {
        Self {
            losses: AtomicU64::new(0),
            vouched: AtomicU64::new(u64::MAX),
        }
    }
}

impl Verified {
    /// A call lost its connection: the server that answers next may be
    /// another one.
    pub fn lost(&self) {
        self.losses.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn is_set(&self) -> bool {
        self.vouched.load(Ordering::Acquire) == self.losses.load(Ordering::Acquire)
    }

    /// Where a check begins: the losses it will vouch for.
    pub(super) fn begin(&self) -> u64 {
        self.losses.load(Ordering::Acquire)
    }

    pub(super) fn set(&self, begun: u64) {
        self.vouched.store(begun, Ordering::Release);
    }
}
