//! The replicas sharing the state, and whether the Redis they share is
//! still the one that holds what they served: heartbeats (the fence waits
//! for the replicas heard from), the Redis's identity (identity.rs) and
//! the storage layout's version (layout.rs).

mod identity;
mod layout;

use std::sync::Arc;

use redis::AsyncCommands;

use super::{timed, Context, Core, StoreResult};
pub use identity::Identity;
pub use layout::{Layout, LayoutMismatch, LAYOUT};

#[derive(Clone)]
pub struct Replicas {
    core: Arc<Core>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    heartbeat: redis::Script,
    identity: redis::Script,
    live_replicas: redis::Script,
}

impl Replicas {
    pub(super) fn new(core: Arc<Core>) -> Self {
        let scripts = Scripts {
            heartbeat: timed(include_str!("heartbeat.lua")),
            identity: redis::Script::new(include_str!("identity.lua")),
            live_replicas: timed(include_str!("live_replicas.lua")),
        };
        Self {
            core,
            scripts: Arc::new(scripts),
        }
    }

    /// Records that `replica` is alive, at now on Redis's clock, and
    /// forgets replicas silent for an hour (they died without leaving; the
    /// fence stopped waiting for them long before).
    pub async fn heartbeat(&self, replica: &str) -> StoreResult<()> {
        self.scripts
            .heartbeat
            .key(self.key(&["replicas"]))
            .arg(replica)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("recording a replica heartbeat in Redis")?;
        Ok(())
    }

    pub async fn remove_replica(&self, replica: &str) -> StoreResult<()> {
        self.conn()
            .zrem::<_, _, ()>(self.key(&["replicas"]), replica)
            .await
            .context("removing a replica from Redis")
    }

    /// Replicas that sent a heartbeat within `silence` of now, both on
    /// Redis's clock.
    pub async fn live_replicas(&self, silence: std::time::Duration) -> StoreResult<Vec<String>> {
        self.scripts
            .live_replicas
            .key(self.key(&["replicas"]))
            .arg(silence.as_millis() as i64)
            .invoke_async(&mut self.conn())
            .await
            .context("listing live replicas in Redis")
    }
}

/// A handle is the core with its own scripts: the core's keys and
/// connection are its own.
impl std::ops::Deref for Replicas {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}
