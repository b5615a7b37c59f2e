//! The cluster as operators and the press flow change it: the replica's
//! registry (refresh, mark down, fail over, recover), the admin commands
//! (add, remove, list) and the health checks. Above the lifecycle (it
//! starts cleans) and above `nodes` (it changes the replica's view).

pub mod admin;
pub mod health;
pub mod registry;

pub use admin::{AdminError, NodeAdmin, NodeView, Outcome, Removal};
pub use admin::{Drain, MAX_DRAIN_SECS};
pub use health::{HealthChecker, HealthReport};
pub use registry::NodeRegistry;
