//! A node's answer against its timer. A replica resumed from a pause
//! finds its timers due at once, before the runtime has polled the sockets
//! that hold the answers which arrived meanwhile: a node that answered must
//! not be taken for silent (the model's `answer_before_timer`, design.md).
//! Written by hand: `tokio::time::timeout` polls the timer as readily as
//! the answer, and is what let a paused replica take a healthy node down.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;

use super::NodeCallError;

/// `call` within `limit`: its answer if it is there when the timer fires,
/// [`NodeCallError::Timeout`] only if it still is not after one more look.
pub async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, NodeCallError>>,
) -> Result<T, NodeCallError> {
    let mut call = std::pin::pin!(call);
    tokio::select! {
        biased;
        answer = &mut call => answer,
        _ = tokio::time::sleep(limit) => last_look(&mut call).await,
    }
}

/// The timer fired: one more look at the call, after a yield that lets
/// the runtime poll its sockets first.
pub async fn last_look<T, F>(call: &mut F) -> Result<T, NodeCallError>
where
    F: Future<Output = Result<T, NodeCallError>> + Unpin,
{
    tokio::task::yield_now().await;
    call.now_or_never().unwrap_or(Err(NodeCallError::Timeout))
}
