//! Folds of sessions being placed, gathered into one query. Every new
//! session costs a fold (design.md §4.6) before it is placed; one statement per
//! session made Postgres round trips the cost of a new session. Here, the
//! folds asked for while one batch is in Postgres go together in the next
//! (group commit): under load a batch holds as many sessions as arrived
//! during one round trip, and a lone placement waits for nothing.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{Archive, ArchiveError, ArchiveResult};

/// Most sessions in one batch.
const MAX_BATCH: usize = 512;
/// Batches in Postgres at once.
const IN_FLIGHT: usize = 4;

type Waiter = (String, oneshot::Sender<ArchiveResult<i64>>);

/// The sending side; the batching task ends when the last one is dropped.
pub struct FoldBatcher {
    queue: mpsc::UnboundedSender<Waiter>,
}

impl FoldBatcher {
    /// Starts the batching task on the current runtime.
    pub fn start(archive: Archive) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(run(archive, waiting));
        Self { queue }
    }

    /// The session's archived total after the fold (0 if never archived).
    pub async fn fold_one(&self, session_id: &str) -> ArchiveResult<i64> {
        let (answer, answered) = oneshot::channel();
        if self.queue.send((session_id.to_owned(), answer)).is_err() {
            return Err(gone());
        }
        answered.await.unwrap_or_else(|_| Err(gone()))
    }
}

async fn run(archive: Archive, mut waiting: mpsc::UnboundedReceiver<Waiter>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut batch = Vec::new();
    while waiting.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // What arrived while we waited for a slot goes too.
        while batch.len() < MAX_BATCH {
            match waiting.try_recv() {
                Ok(waiter) => batch.push(waiter),
                Err(_) => break,
            }
        }
        let archive = archive.clone();
        let waiters = std::mem::take(&mut batch);
        tokio::spawn(async move {
            let ids: Vec<String> = waiters.iter().map(|(id, _)| id.clone()).collect();
            let result = archive.fold(&ids).await;
            answer(waiters, result);
            drop(slot);
        });
    }
}

fn answer(waiters: Vec<Waiter>, result: ArchiveResult<HashMap<String, i64>>) {
    match result {
        Ok(totals) => {
            for (id, waiter) in waiters {
                let _ = waiter.send(Ok(totals.get(&id).copied().unwrap_or(0)));
            }
        }
        Err(error) => {
            for (_, waiter) in waiters {
                let _ = waiter.send(Err(ArchiveError {
                    context: error.context,
                    source: error.source.replicate(),
                }));
            }
        }
    }
}

fn gone() -> ArchiveError {
    ArchiveError {
        context: "folding a session's archived clicks in Postgres",
        source: super::ArchiveFailure::Open,
    }
}
