//! Rows written off the request path: a bounded queue and one task that
//! inserts what arrived in batches. Used by the audit log and the session
//! history, which are accounts of what happened, not part of the protocol:
//! what cannot be written (Postgres away, queue full) is dropped with a
//! warning instead of slowing anything down.

use std::future::Future;

use tokio::sync::mpsc;

use super::ArchiveResult;

/// Rows waiting for the writer at most.
const QUEUE: usize = 10_000;
/// Most rows in one insert.
const BATCH: usize = 500;

pub(crate) struct BatchWriter<T> {
    what: &'static str,
    queue: mpsc::Sender<T>,
}

impl<T: Send + 'static> BatchWriter<T> {
    /// Starts the writing task (on the current runtime); it ends when the
    /// writer is dropped. `what` names the rows in warnings.
    pub(crate) fn start<F, Fut>(what: &'static str, insert: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ArchiveResult<()>> + Send,
    {
        let (queue, mut rows) = mpsc::channel::<T>(QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while rows.recv_many(&mut batch, BATCH).await > 0 {
                let count = batch.len();
                if let Err(error) = insert(std::mem::take(&mut batch)).await {
                    tracing::warn!(%error, rows = count, "could not write {what}");
                }
            }
        });
        Self { what, queue }
    }

    /// Queues a row without waiting.
    pub(crate) fn send(&self, row: T) {
        if self.queue.try_send(row).is_err() {
            tracing::warn!(what = self.what, "write queue full; a row is dropped");
        }
    }
}
