//! Background loops under supervision: each runs in its own task; one that
//! ends or panics while the replica is running is logged and restarted with
//! back-off (1 s, doubling, at most 30 s). Whether a loop is running right
//! now is visible to the rest of the replica (`/readyz` reports the fence
//! watcher: a replica that cannot honour fences must not serve presses).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Handle on the supervised loops. Cheap to clone.
#[derive(Clone, Default)]
pub struct Supervisor {
    /// The current run of each loop, by name. A std mutex: never held
    /// across an await.
    running: Arc<Mutex<HashMap<&'static str, AbortHandle>>>,
}

impl Supervisor {
    /// Runs `make()` under supervision in `set` until `cancel`; `up` (if
    /// given) says whether a run is in progress.
    pub fn spawn<F, Fut>(
        &self,
        set: &mut JoinSet<()>,
        name: &'static str,
        cancel: CancellationToken,
        up: Option<Arc<AtomicBool>>,
        make: F,
    ) where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let running = self.running.clone();
        set.spawn(async move {
            let mut backoff = FIRST_BACKOFF;
            loop {
                let run = tokio::spawn(make());
                running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name, run.abort_handle());
                if let Some(up) = &up {
                    up.store(true, Ordering::Release);
                }
                let ended = run.await;
                if let Some(up) = &up {
                    up.store(false, Ordering::Release);
                }
                if cancel.is_cancelled() {
                    return;
                }
                let how = match ended {
                    Ok(()) => "returned".to_owned(),
                    Err(e) if e.is_panic() => "panicked".to_owned(),
                    Err(e) => e.to_string(),
                };
                error!(task = name, %how, restart_in = ?backoff, "background task ended; restarting it");
                metrics::counter!("nodes_control_task_restarts_total", "task" => name).increment(1);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                info!(task = name, "background task restarted");
            }
        });
    }

    /// Runs `step` every `interval`, supervised.
    pub fn spawn_periodic<F, Fut>(
        &self,
        set: &mut JoinSet<()>,
        name: &'static str,
        interval: Duration,
        cancel: &CancellationToken,
        step: F,
    ) where
        F: Fn() -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let token = cancel.clone();
        self.spawn(set, name, cancel.clone(), None, move || {
            crate::periodic::every(interval, token.clone(), step.clone())
        });
    }

    /// Runs `tick`, which does not wait, every `interval`, supervised.
    pub fn spawn_tick<F>(
        &self,
        set: &mut JoinSet<()>,
        name: &'static str,
        interval: Duration,
        cancel: &CancellationToken,
        tick: F,
    ) where
        F: Fn() + Clone + Send + Sync + 'static,
    {
        self.spawn_periodic(set, name, interval, cancel, move || {
            tick();
            std::future::ready(())
        });
    }

    /// Ends the current run of a loop as a crash would (for tests and
    /// operators' drills); the supervisor restarts it.
    pub fn abort(&self, name: &str) -> bool {
        match self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            Some(handle) => {
                handle.abort();
                true
            }
            None => false,
        }
    }
}
