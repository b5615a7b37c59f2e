//! The loop every background task shares: one step per interval until
//! cancelled. A slow step delays the next tick rather than bunching them.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub async fn every<F, Fut>(interval: Duration, cancel: CancellationToken, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => step().await,
        }
    }
}
