//! Session lifecycle (DESIGN §4.3-4.7): the clean fence shared by every
//! replica, the cleaner that archives and folds a node's sessions under it,
//! and the expiry sweep.

pub mod cleaner;
pub mod fence;
pub mod lock;
pub mod sweep;

pub use cleaner::{CleanError, CleanReport, NodeCleaner};
pub use fence::FenceWatcher;
pub use sweep::{SweepReport, Sweeper};
