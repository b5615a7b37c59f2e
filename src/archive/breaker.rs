//! A minimal circuit breaker: after Postgres timed out or could not be
//! reached, calls fail at once for [`OPEN_FOR`], then one is let through.
//! Without it a blackholed Postgres would hold every press that needs the
//! archive for the whole query deadline.

use std::sync::atomic::{AtomicI64, Ordering};

/// How long the breaker stays open after a failure.
const OPEN_FOR_MS: i64 = 1_000;

#[derive(Debug, Default)]
pub(super) struct Breaker {
    /// Milliseconds since the epoch until which calls fail fast.
    open_until_ms: AtomicI64,
}

impl Breaker {
    pub(super) fn is_open(&self) -> bool {
        now_ms() < self.open_until_ms.load(Ordering::Acquire)
    }

    pub(super) fn trip(&self) {
        self.open_until_ms
            .store(now_ms() + OPEN_FOR_MS, Ordering::Release);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
