//! One notion of a silent replica, from one setting (`LEASE_MS`).
//!
//! A replica out of touch with the fence channel (paused, starved, cut
//! off from Redis) may miss a fence: a clean or failover of a node could go
//! by without it. Two sides act on its silence, and their order is the
//! model's guard `silence_order`:
//!
//! 1. the replica itself, once its last contact *started* a lease ago: it
//!    stops trusting what it cached (`MappingCache`), shows a count read
//!    after the silence only if the registry confirms it
//!    (`press::count_shown`), and voids every mapping read before on its
//!    next contact;
//! 2. the others (a cleaner waiting for acknowledgements), once its last
//!    heartbeat, stamped by Redis after the replica sent it, is older than
//!    the lease and a margin: they go on without it.
//!
//! (2) must never come before (1). The heartbeat's stamp is no earlier
//! than the contact the replica times its lease from, so the order holds
//! when the others' clock runs no more than [`MARGIN_PERCENT`] faster than
//! the replica's: the margin is for clock rates, not for scheduling.

use std::time::Duration;

/// How much faster than a replica's clock the others' (Redis's) may run.
/// Clocks that keep time differ by parts per million; a quarter covers a
/// clock being slewed hard and leaves the order a wide berth.
pub const MARGIN_PERCENT: u32 = 25;

/// The thresholds of a replica's silence, from the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silence {
    lease: Duration,
}

impl Silence {
    pub fn new(lease: Duration) -> Self {
        Self { lease }
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether a replica whose last contact started `since` ago has
    /// stopped trusting itself (side 1).
    pub fn lapsed(&self, since: Duration) -> bool {
        since >= self.lease
    }

    /// How long the others wait for a silent replica's heartbeat before
    /// they go on without its acknowledgement (side 2).
    pub fn others_wait(&self) -> Duration {
        self.lease + self.lease * MARGIN_PERCENT / 100
    }

    /// Whether the others go on without a replica last heard from `since`
    /// ago, on their clock.
    pub fn given_up(&self, since: Duration) -> bool {
        since > self.others_wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's `silence_order`: whatever the lease, the others never
    /// give up on a replica whose own clock, running up to the margin
    /// slower than theirs, has not yet lapsed it.
    #[test]
    fn a_replica_lapses_before_the_others_give_up_on_it() {
        for lease_ms in [1, 10, 250, 1000, 3000, 60_000] {
            let silence = Silence::new(Duration::from_millis(lease_ms));
            for theirs_ms in (0..=3 * lease_ms).step_by(1.max(lease_ms as usize / 50)) {
                let theirs = Duration::from_millis(theirs_ms);
                // The replica's clock, up to the margin slower.
                let ours = theirs * 100 / (100 + MARGIN_PERCENT);
                if silence.given_up(theirs) {
                    assert!(silence.lapsed(ours), "lease {lease_ms} ms, {theirs_ms} ms");
                }
            }
        }
    }

    #[test]
    fn the_others_wait_the_lease_and_its_margin() {
        let silence = Silence::new(Duration::from_secs(4));
        assert_eq!(silence.lease(), Duration::from_secs(4));
        assert_eq!(silence.others_wait(), Duration::from_secs(5));
        assert!(!silence.given_up(Duration::from_secs(5)));
        assert!(silence.given_up(Duration::from_millis(5001)));
        assert!(!silence.lapsed(Duration::from_millis(3999)));
        assert!(silence.lapsed(Duration::from_secs(4)));
    }
}
