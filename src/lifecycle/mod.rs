//! Session lifecycle (design.md §4.3-4.7, §4.10, §4.12): the clean fence shared
//! by every replica, the cleaner that archives, folds and fails over a
//! node's sessions under it, the expiry sweep, and the rebuild of a registry
//! Redis forgot.

pub mod cleaner;
pub mod detached;
pub mod down;
pub mod fence;
pub mod rebuild;
pub mod sweep;

pub use cleaner::{CleanError, CleanReport, NodeCleaner};
pub use fence::FenceWatcher;
pub use rebuild::{Rebuilder, Registry};
pub use sweep::{SweepReport, Sweeper};
