//! A node's answer against its timer (the model's `answer_before_timer`).
//!
//! A timer is evidence that a node is silent only over a stretch of time
//! this replica ran through: a replica stopped (SIGSTOP, a VM paused) or
//! starved of CPU may find its timers due before it has read the answers
//! that arrived meanwhile, and the order in which the runtime then polls
//! the ready timer and the ready socket is not something to rest a
//! node's life on. So a node's time runs only while this process runs:
//! a stretch in which the process stalled is started again
//! ([`node_silence`]). Stalls are seen by a thread of its own that ticks
//! every [`TICK`]: a tick late by more than [`STALL`] marks a stall, and a
//! tick that has not come for that long marks one under way, so whoever
//! looks first, the timer or the ticker, sees it (design.md, "Timers and
//! ready futures").

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::NodeCallError;
use crate::clock::mono_ms;

/// How often the stall watch ticks.
const TICK: Duration = Duration::from_millis(10);
/// A tick this much late is a stall of the process.
pub const STALL: Duration = Duration::from_millis(100);

/// The stall watch: when it last ticked, and when the last stall it saw
/// ended (both `mono_ms`).
struct Watch {
    ticked: AtomicU64,
    stall_ended: AtomicU64,
}

fn watch() -> &'static Watch {
    static WATCH: OnceLock<Watch> = OnceLock::new();
    WATCH.get_or_init(|| {
        std::thread::Builder::new()
            .name("stall-watch".into())
            .spawn(|| loop {
                std::thread::sleep(TICK);
                let watch = watch();
                let now = mono_ms();
                if now.saturating_sub(watch.ticked.load(Ordering::Acquire))
                    > STALL.as_millis() as u64
                {
                    // Before the tick: a reader that sees this tick sees
                    // the stall too.
                    watch.stall_ended.store(now, Ordering::Release);
                }
                watch.ticked.store(now, Ordering::Release);
            })
            .expect("the stall watch thread starts");
        Watch {
            ticked: AtomicU64::new(mono_ms()),
            stall_ended: AtomicU64::new(0),
        }
    })
}

/// Whether this process ran without a stall from `since` (`mono_ms`) to
/// now.
pub fn ran_through(since: u64) -> bool {
    watch().ran_through(since, mono_ms())
}

impl Watch {
    /// Read in the order the ticker writes in reverse: a fresh tick
    /// brings the stall recorded before it.
    fn ran_through(&self, since: u64, now: u64) -> bool {
        let ticked = self.ticked.load(Ordering::Acquire);
        let stalling = now.saturating_sub(ticked) > STALL.as_millis() as u64;
        !stalling && self.stall_ended.load(Ordering::Acquire) <= since
    }
}

/// Resolves once `limit` has passed in one stretch this process ran
/// through: the timer of a node call. A stretch with a stall in it is
/// started once more, and the second is judged whatever happened in it:
/// a host that stalls in every stretch of a node timeout cannot be waited
/// on for ever (a clean, a health check has no other bound), and one its
/// timer then wrongs loses a node's clicks since its archive, never
/// above the truth. A node call takes at most two `limit`s.
pub async fn node_silence(limit: Duration) {
    // Watched from before the stretch begins.
    watch();
    let since = mono_ms();
    tokio::time::sleep(limit).await;
    if !ran_through(since) {
        tokio::time::sleep(limit).await;
    }
}

/// `call` within `limit` of [`node_silence`]; an answer ready in the same
/// poll as the timer is taken (`biased`).
pub async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, NodeCallError>>,
) -> Result<T, NodeCallError> {
    tokio::select! {
        biased;
        answer = call => answer,
        _ = node_silence(limit) => Err(NodeCallError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch_at(ticked: u64, stall_ended: u64) -> Watch {
        Watch {
            ticked: AtomicU64::new(ticked),
            stall_ended: AtomicU64::new(stall_ended),
        }
    }

    /// The watch sees a stall whether the timer looks before the ticker
    /// does (a tick overdue) or after (a stall recorded).
    #[test]
    fn a_stall_is_seen_by_whoever_looks_first() {
        let stall = STALL.as_millis() as u64;
        assert!(watch_at(10_000, 0).ran_through(5_000, 10_005));
        // Recorded: it ended after the stretch began.
        assert!(!watch_at(10_000, 9_000).ran_through(5_000, 10_005));
        assert!(watch_at(10_000, 4_000).ran_through(5_000, 10_005));
        // Under way: no tick for longer than a stall.
        assert!(!watch_at(10_000, 0).ran_through(5_000, 10_001 + stall));
    }
}
