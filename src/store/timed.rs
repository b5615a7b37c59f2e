//! Every Redis call of the store, timed: one connection type for a single
//! Redis and for a Redis Cluster, so commands, scripts and pipelines all
//! pass through one place.

use std::time::Instant;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The connection under the store: a single Redis through the connection
/// manager (reconnects by itself), or a cluster through redis-rs's cluster
/// client (follows `MOVED` and `ASK`, retries `TRYAGAIN` while a slot
/// moves). Both multiplex, both are cheap to clone.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A [`Connection`] that records each call's time in
/// `nodes_control_redis_call_duration_seconds` (failures and timeouts
/// included).
#[derive(Clone)]
pub struct TimedConnection {
    inner: Connection,
}

impl TimedConnection {
    pub fn new(inner: Connection) -> Self {
        Self { inner }
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
        let Connection::Cluster(conn) = &self.inner else {
            return None;
        };
        let started = Instant::now();
        let count = pipeline.len();
        let route = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port };
        let answer = conn
            .clone()
            .route_pipeline(pipeline, 0, count, route)
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
        let call = match &mut self.inner {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
        };
        Box::pin(async move {
            let answer = call.await;
            record(started);
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
        let call = match &mut self.inner {
            Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        };
        Box::pin(async move {
            let answer = call.await;
            record(started);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Connection::Single(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
        }
    }
}
