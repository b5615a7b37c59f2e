//! Every Redis call of the store, timed: the connection manager wrapped so
//! commands, scripts and pipelines all pass through one place.

use std::time::Instant;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A [`ConnectionManager`] that records each call's time in
/// `nodes_control_redis_call_duration_seconds` (failures and timeouts
/// included). Cheap to clone, like the manager.
#[derive(Clone)]
pub struct TimedConnection {
    inner: ConnectionManager,
}

impl TimedConnection {
    pub fn new(inner: ConnectionManager) -> Self {
        Self { inner }
    }
}

fn record(started: Instant) {
    metrics::histogram!("nodes_control_redis_call_duration_seconds")
        .record(started.elapsed().as_secs_f64());
}

impl ConnectionLike for TimedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let started = Instant::now();
        let call = self.inner.req_packed_command(cmd);
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
        let call = self.inner.req_packed_commands(pipeline, offset, count);
        Box::pin(async move {
            let answer = call.await;
            record(started);
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
