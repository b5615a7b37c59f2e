//! One admin operation per node at a time, across replicas: add, remove,
//! recovery, failover and every clean take the node's lock in Redis.
//!
//! The lock lives [`LOCK_TTL_MS`] and is renewed while its holder works, so
//! it outlives any clean yet frees itself soon after a holder that died.
//! Callers run such work in a task of its own (`lifecycle::detached`), so a
//! client that hangs up cannot cancel it halfway and leave the lock held.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use tokio_util::task::AbortOnDropHandle;
use tracing::warn;

use super::{Context, Core, StoreError, StoreResult};

/// Short locks in Redis, one operation per node at a time.
#[derive(Clone)]
pub struct Locks {
    core: Arc<Core>,
    scripts: Arc<Scripts>,
}

struct Scripts {
    renew_lock: redis::Script,
    unlock: redis::Script,
}

impl Locks {
    pub(super) fn new(core: Arc<Core>) -> Self {
        let scripts = Scripts {
            renew_lock: redis::Script::new(include_str!("renew_lock.lua")),
            unlock: redis::Script::new(include_str!("unlock.lua")),
        };
        Self {
            core,
            scripts: Arc::new(scripts),
        }
    }

    /// Takes a short lock named `name`; returns its token if taken.
    pub async fn try_lock(&self, name: &str, ttl_ms: u64) -> StoreResult<Option<String>> {
        let token = uuid::Uuid::new_v4().to_string();
        let taken: Option<String> = redis::cmd("SET")
            .arg(self.key(&["lock", name]))
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut self.conn())
            .await
            .context("taking a lock in Redis")?;
        Ok(taken.map(|_| token))
    }

    /// Extends a lock's life if it is still ours; false if it is not.
    pub async fn renew_lock(&self, name: &str, token: &str, ttl_ms: u64) -> StoreResult<bool> {
        let renewed: i64 = self
            .scripts
            .renew_lock
            .key(self.key(&["lock", name]))
            .arg(token)
            .arg(ttl_ms)
            .invoke_async(&mut self.conn())
            .await
            .context("renewing a lock in Redis")?;
        Ok(renewed == 1)
    }

    /// Releases a lock if it is still ours.
    pub async fn unlock(&self, name: &str, token: &str) -> StoreResult<()> {
        self.scripts
            .unlock
            .key(self.key(&["lock", name]))
            .arg(token)
            .invoke_async::<i64>(&mut self.conn())
            .await
            .context("releasing a lock in Redis")?;
        Ok(())
    }
}

impl Core {
    /// Fails unless the lock under `key` holds `token`.
    pub(in crate::store) async fn check_lock(&self, key: &str, token: &str) -> StoreResult<()> {
        let held: Option<String> = self
            .conn()
            .get(key)
            .await
            .context("reading a node lock from Redis")?;
        match held.as_deref() == Some(token) {
            true => Ok(()),
            false => Err(StoreError::lock_lost()),
        }
    }
}

/// A handle is the core with its own scripts: the core's keys and
/// connection are its own.
impl std::ops::Deref for Locks {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

/// How long an operation waits for another one on the same node.
pub const LOCK_WAIT: Duration = Duration::from_secs(15);
/// Lock lifetime without renewal: how soon a dead holder's lock frees.
pub const LOCK_TTL_MS: u64 = 10_000;
/// How often a live holder renews its lock.
const RENEW_EVERY: Duration = Duration::from_millis(LOCK_TTL_MS / 3);

/// A lock held: its name, the token that proves it ours in Redis, and
/// whether its renewal found it gone (its holder paused past its TTL and
/// another operation may have taken it). Every write of a node operation
/// that must not land after such a takeover is conditioned on the token
/// in the same script (guard.lua); work outside Redis asks
/// [`Self::check`] first.
#[derive(Debug, Clone)]
pub struct Lock {
    name: String,
    token: String,
    lost: Arc<AtomicBool>,
}

impl Lock {
    /// The lock's key and token, for a script that checks them.
    pub(in crate::store) fn key_and_token(&self, core: &Core) -> (String, String) {
        (core.key(&["lock", &self.name]), self.token.clone())
    }

    /// Fails once the renewal found the lock gone.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.lost.load(Ordering::Acquire) {
            true => Err(StoreError::lock_lost()),
            false => Ok(()),
        }
    }

    /// Fails unless Redis still holds the lock for us: asked just before a
    /// write Redis cannot condition (Postgres, a node), so that one made
    /// after a pause that cost the lock is not made. The window left is
    /// the pause between this read and the write.
    pub async fn check_held(&self, locks: &Locks) -> Result<(), StoreError> {
        self.check()?;
        let (key, token) = self.key_and_token(locks);
        locks.check_lock(&key, &token).await
    }
}

/// Proof that its holder works under a node's lock: made only here, and
/// handed to the work [`with_node_lock`] runs. A function that must run
/// under the lock takes it as an argument (and the node from it), so the
/// types say who holds the lock; the lock is not reentrant, so such a
/// function never takes it again. Its [`Lock`] conditions the operation's
/// writes on the lock still being this holder's.
#[derive(Debug)]
pub struct NodeLock {
    node: String,
    lock: Lock,
}

impl NodeLock {
    /// The node this lock is held on.
    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn lock(&self) -> &Lock {
        &self.lock
    }
}

/// Runs `op` holding the node's lock, waiting at most `wait` for it. `busy`
/// makes the error returned when the lock cannot be had in time.
pub async fn with_node_lock<T, E, Fut>(
    store: &Locks,
    addr: &str,
    wait: Duration,
    busy: impl FnOnce() -> E,
    op: impl FnOnce(NodeLock) -> Fut,
) -> Result<T, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<T, E>>,
{
    let node = addr.to_owned();
    with_lock(store, &format!("node:{addr}"), wait, busy, move |lock| {
        op(NodeLock { node, lock })
    })
    .await
}

/// Runs `op` holding the lock `lock` (renewed meanwhile), waiting at most
/// `wait` for it.
pub async fn with_lock<T, E: From<StoreError>, Fut: Future<Output = Result<T, E>>>(
    store: &Locks,
    lock: &str,
    wait: Duration,
    busy: impl FnOnce() -> E,
    op: impl FnOnce(Lock) -> Fut,
) -> Result<T, E> {
    let lock = lock.to_owned();
    let deadline = tokio::time::Instant::now() + wait;
    let token = loop {
        if let Some(token) = store.try_lock(&lock, LOCK_TTL_MS).await? {
            break token;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(busy());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let lost = Arc::new(AtomicBool::new(false));
    // Stopped on drop, so an `op` that panics (or is cancelled) does not
    // leave the lock renewed for ever: it then frees within its TTL.
    let renewal = AbortOnDropHandle::new(tokio::spawn({
        let (store, lock, token, lost) = (store.clone(), lock.clone(), token.clone(), lost.clone());
        async move {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                match store.renew_lock(&lock, &token, LOCK_TTL_MS).await {
                    Ok(true) => {}
                    Ok(false) => {
                        lost.store(true, Ordering::Release);
                        warn!(%lock, "lost a node lock while working under it; the operation stops");
                        return;
                    }
                    Err(error) => warn!(%lock, %error, "could not renew a node lock"),
                }
            }
        }
    }));
    let held = Lock {
        name: lock.clone(),
        token: token.clone(),
        lost,
    };
    let result = op(held).await;
    drop(renewal);
    if let Err(error) = store.unlock(&lock, &token).await {
        warn!(%lock, %error, "could not release the lock; retrying until Redis answers");
        release_later(store.clone(), lock, token);
    }
    result
}

/// Keeps trying to release a lock Redis did not let go of (it was away).
/// Left alone, the lock would outlive the outage by up to its TTL (Redis
/// may come back from its AOF with it): the node's cleans, and with them
/// every press of its sessions that expired meanwhile, would wait for it.
fn release_later(store: Locks, lock: String, token: String) {
    tokio::spawn(async move {
        let give_up = tokio::time::Instant::now() + Duration::from_millis(LOCK_TTL_MS);
        while tokio::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if store.unlock(&lock, &token).await.is_ok() {
                return;
            }
        }
    });
}
