//! Nodes: their addresses, this replica's view of them, the clients that
//! talk to them, admin operations and health checks.

pub mod address;
pub mod admin;
pub mod client;
pub mod health;
pub mod pool;
pub mod selector;
pub mod table;
mod wire;

pub use address::NodeAddress;
pub use admin::{AdminError, NodeAdmin, NodeView, Removal};
pub use client::{CleanOutcome, NodeCallError, NodeClient, NodeHealth};
pub use health::{HealthChecker, HealthReport};
pub use selector::Selector;
pub use table::{NodeEntry, NodeTable};
