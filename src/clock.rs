//! The time a session's life is measured on. Expiry is decided in two
//! places only, the press flow and the sweep, and both read this clock, so
//! a test can move it forward and watch sessions expire without waiting
//! out their TTL. Everything that coordinates replicas (fence deadlines,
//! heartbeats, leases, lock lifetimes) stays on real time: those deadlines
//! are about processes that may really have died, not about sessions.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Real time: milliseconds since the Unix epoch.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// Milliseconds on this process's monotonic clock (never 0, so 0 can mean
/// "never"). For measuring within one process only: no safety decision
/// compares it with another host's.
pub fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1
}

/// Session time: real time, or real time moved forward by a [`ManualTime`].
#[derive(Debug, Clone, Default)]
pub struct Clock {
    ahead_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock (what a deployment runs on).
    pub fn system() -> Self {
        Self::default()
    }

    /// Milliseconds since the Unix epoch, as sessions see them.
    pub fn now_ms(&self) -> i64 {
        let ahead = self
            .ahead_ms
            .as_ref()
            .map_or(0, |ahead| ahead.load(Ordering::Relaxed));
        wall_ms() + ahead
    }
}

/// The hand that moves a clock forward (tests). Time never goes back:
/// `advance` only adds, so expiry stays monotonic for every reader.
#[derive(Debug, Clone, Default)]
pub struct ManualTime {
    ahead_ms: Arc<AtomicI64>,
}

impl ManualTime {
    /// Starts level with real time.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that reads real time plus every advance so far.
    pub fn clock(&self) -> Clock {
        Clock {
            ahead_ms: Some(self.ahead_ms.clone()),
        }
    }

    /// Moves every clock of this hand forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.ahead_ms
            .fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advanced_clock_runs_ahead_of_the_system_clock_by_the_advance() {
        let time = ManualTime::new();
        let (clock, system) = (time.clock(), Clock::system());
        time.advance(Duration::from_secs(600));
        let ahead = clock.now_ms() - system.now_ms();
        assert!((599_000..=600_000).contains(&ahead), "{ahead} ms ahead");
    }
}
