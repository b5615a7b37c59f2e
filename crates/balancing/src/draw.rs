//! Seeded random draws without a lock: each draw seeds a small generator
//! from the next value of an atomic sequence, so concurrent picks never
//! wait for each other and a single-threaded run is reproducible.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::SeedableRng;

#[derive(Debug)]
pub(crate) struct Draws(AtomicU64);

impl Draws {
    pub(crate) fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    /// A generator for one pick's draws. Consecutive seeds: the seeding
    /// (SplitMix64) spreads them; a golden-ratio step here would make
    /// neighbouring picks share three of their four state words.
    pub(crate) fn next(&self) -> SmallRng {
        SmallRng::seed_from_u64(self.0.fetch_add(1, Ordering::Relaxed))
    }
}
