//! What this replica has seen of one node's health: its health checks in a
//! row (for the rise/fall hysteresis), when a down node may be probed
//! again (back-off), and when it last answered anything. Written by the
//! health checker and the press path through these methods only.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::clock::mono_ms;

#[derive(Debug, Default)]
pub struct Evidence {
    fails: AtomicU32,
    oks: AtomicU32,
    /// A down node is probed not before this (ms since the Unix epoch)...
    next_probe_ms: AtomicI64,
    /// ...and the back-off that set it.
    backoff_ms: AtomicU64,
    /// When the node last answered anything (a press, a health check), on
    /// [`mono_ms`]: a node that answers is alive, however slow.
    last_answer_ms: AtomicU64,
}

impl Evidence {
    /// A check passed; returns the passes in a row.
    pub fn check_passed(&self) -> u32 {
        self.fails.store(0, Ordering::Relaxed);
        self.oks.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A check failed; returns the failures in a row.
    pub fn check_failed(&self) -> u32 {
        self.oks.store(0, Ordering::Relaxed);
        self.fails.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether a down node's next probe is due at `now_ms` (Unix ms).
    pub fn probe_due(&self, now_ms: i64) -> bool {
        self.next_probe_ms.load(Ordering::Acquire) <= now_ms
    }

    /// A down node failed its check (or could not be recovered): its
    /// passes start again, and it is probed again after twice the last
    /// back-off, within `interval_ms..=max_ms`.
    pub fn back_off(&self, now_ms: i64, interval_ms: u64, max_ms: u64) {
        self.oks.store(0, Ordering::Relaxed);
        let backoff = (self.backoff_ms.load(Ordering::Relaxed) * 2)
            .clamp(interval_ms, max_ms.max(interval_ms));
        self.backoff_ms.store(backoff, Ordering::Relaxed);
        self.next_probe_ms
            .store(now_ms + backoff as i64, Ordering::Release);
    }

    /// The node recovered: the next failure backs off from the start.
    pub fn recovered(&self) {
        self.backoff_ms.store(0, Ordering::Relaxed);
    }

    /// The node answered just now.
    pub fn answered(&self) {
        self.last_answer_ms.store(mono_ms(), Ordering::Release);
    }

    /// Whether the node answered anything at or after `since` (on [`mono_ms`]).
    pub fn answered_since(&self, since: u64) -> bool {
        self.last_answer_ms.load(Ordering::Acquire) >= since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_and_failures_count_in_a_row_and_reset_each_other() {
        let evidence = Evidence::default();
        assert_eq!(evidence.check_passed(), 1);
        assert_eq!(evidence.check_passed(), 2);
        assert_eq!(evidence.check_failed(), 1);
        assert_eq!(evidence.check_passed(), 1);
    }

    #[test]
    fn a_down_node_is_probed_after_a_doubling_back_off_within_its_bounds() {
        let evidence = Evidence::default();
        assert!(evidence.probe_due(0));
        let gaps: Vec<i64> = (0..6)
            .map(|_| {
                evidence.back_off(1_000, 200, 1_000);
                evidence.next_probe_ms.load(Ordering::Acquire) - 1_000
            })
            .collect();
        assert_eq!(gaps, [200, 400, 800, 1_000, 1_000, 1_000]);
        assert!(!evidence.probe_due(1_999));
        assert!(evidence.probe_due(2_000));
        evidence.recovered();
        evidence.back_off(1_000, 200, 1_000);
        assert!(
            evidence.probe_due(1_200),
            "it backs off from the start again"
        );
    }
}
