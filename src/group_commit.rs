//! Group commit: requests that arrive while a batch is in flight go
//! together in the next one. Under load a batch holds what arrived during
//! one round trip; a lone request waits for nothing. The archive's folds
//! (`archive::batch`) and the placements of new sessions
//! (`store::placement`) go through it, so that a burst of new sessions
//! costs a few statements and scripts, not one each.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

type Waiter<T, R> = (T, oneshot::Sender<R>);

/// The sending side; the batching task ends when the last one is dropped.
pub struct GroupCommit<T, R> {
    queue: mpsc::UnboundedSender<Waiter<T, R>>,
}

impl<T: Send + 'static, R: Send + 'static> GroupCommit<T, R> {
    /// Starts the batching task on the current runtime: at most
    /// `in_flight` batches of at most `max_batch` requests run at once;
    /// `run` answers a batch with one answer per request, in order (a
    /// batch answered otherwise leaves each of its requests without one).
    pub fn start<F, Fut>(max_batch: usize, in_flight: usize, run: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<R>> + Send + 'static,
    {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(waiting, max_batch, in_flight, run));
        Self { queue }
    }

    /// The answer to `request`, or `None` if it got none: the batching task
    /// is gone (its runtime is shutting down), or its batch's run panicked
    /// or answered the wrong number of requests.
    pub async fn submit(&self, request: T) -> Option<R> {
        let (answer, answered) = oneshot::channel();
        self.queue.send((request, answer)).ok()?;
        answered.await.ok()
    }
}

async fn gather<T, R, F, Fut>(
    mut waiting: mpsc::UnboundedReceiver<Waiter<T, R>>,
    max_batch: usize,
    in_flight: usize,
    run: F,
) where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<R>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(in_flight));
    let mut batch = Vec::new();
    while waiting.recv_many(&mut batch, max_batch).await > 0 {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // What arrived while we waited for a slot goes too.
        while batch.len() < max_batch {
            match waiting.try_recv() {
                Ok(waiter) => batch.push(waiter),
                Err(_) => break,
            }
        }
        // A request whose caller gave up is not run: nobody waits for its
        // answer, and what it would do (count a placement that no claim
        // follows) is better left undone.
        let (requests, answers): (Vec<T>, Vec<oneshot::Sender<R>>) = std::mem::take(&mut batch)
            .into_iter()
            .filter(|(_, answer)| !answer.is_closed())
            .unzip();
        if requests.is_empty() {
            continue;
        }
        let done = run(requests);
        tokio::spawn(async move {
            let results = done.await;
            // Answers are matched to requests by position: a batch answered
            // with too few or too many answers none of them.
            if results.len() == answers.len() {
                for (answer, result) in answers.into_iter().zip(results) {
                    let _ = answer.send(result);
                }
            }
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::sync::Notify;

    /// A runner that records each batch it is given and answers each
    /// request with its double; the first batch waits for `release`.
    /// The batches a runner was given, in order.
    type Seen = Arc<Mutex<Vec<Vec<u32>>>>;

    fn recording(release: Arc<Notify>) -> (GroupCommit<u32, u32>, Seen) {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let seen = batches.clone();
        let commit = GroupCommit::start(8, 1, move |batch: Vec<u32>| {
            let first = {
                let mut seen = seen.lock().unwrap();
                seen.push(batch.clone());
                seen.len() == 1
            };
            let release = release.clone();
            async move {
                if first {
                    release.notified().await;
                }
                batch.into_iter().map(|n| n * 2).collect()
            }
        });
        (commit, batches)
    }

    /// Submits request 0 and waits until its batch is running (held until
    /// `release`): what is submitted next queues behind it.
    async fn first_batch_held(
        commit: &Arc<GroupCommit<u32, u32>>,
        batches: &Seen,
    ) -> tokio::task::JoinHandle<Option<u32>> {
        let first = tokio::spawn({
            let commit = commit.clone();
            async move { commit.submit(0).await }
        });
        while batches.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        first
    }

    #[tokio::test]
    async fn a_lone_request_goes_at_once_and_gets_its_own_answer() {
        let release = Arc::new(Notify::new());
        release.notify_one(); // the first batch need not wait
        let (commit, batches) = recording(release);
        assert_eq!(commit.submit(21).await, Some(42));
        assert_eq!(*batches.lock().unwrap(), [vec![21]]);
    }

    #[tokio::test]
    async fn requests_that_arrive_during_a_batch_go_together_in_the_next() {
        let release = Arc::new(Notify::new());
        let (commit, batches) = recording(release.clone());
        let commit = Arc::new(commit);
        let first = first_batch_held(&commit, &batches).await;
        // Twelve more while the first is in flight: one batch of the most
        // allowed (8), then the rest.
        let waiting: Vec<_> = (1..=12)
            .map(|n| {
                let commit = commit.clone();
                tokio::spawn(async move { commit.submit(n).await })
            })
            .collect();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        assert_eq!(first.await.unwrap(), Some(0));
        for (n, answer) in (1..=12).zip(waiting) {
            assert_eq!(answer.await.unwrap(), Some(n * 2), "request {n}");
        }
        let sizes: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 8, 4]);
    }

    #[tokio::test]
    async fn a_batch_answered_short_leaves_every_request_without_an_answer() {
        let short = GroupCommit::start(8, 1, |batch: Vec<u32>| async move {
            batch.into_iter().skip(1).collect::<Vec<_>>()
        });
        // Both are queued before the batching task runs: one batch of two,
        // answered with one answer.
        let (a, b) = tokio::join!(short.submit(1), short.submit(2));
        assert_eq!((a, b), (None, None), "no answer given to the wrong request");
    }

    #[tokio::test]
    async fn a_request_whose_caller_gave_up_is_not_run() {
        let release = Arc::new(Notify::new());
        let (commit, batches) = recording(release.clone());
        let commit = Arc::new(commit);
        let first = first_batch_held(&commit, &batches).await;
        // Queued behind the first batch, then given up on.
        let given_up = tokio::spawn({
            let commit = commit.clone();
            async move { commit.submit(1).await }
        });
        let kept = tokio::spawn({
            let commit = commit.clone();
            async move { commit.submit(2).await }
        });
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        given_up.abort();
        let _ = given_up.await;
        release.notify_one();
        assert_eq!(first.await.unwrap(), Some(0));
        assert_eq!(kept.await.unwrap(), Some(4));
        assert_eq!(*batches.lock().unwrap(), [vec![0], vec![2]]);
    }
}
