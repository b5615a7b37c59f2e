//! Nodes: their addresses, this replica's view of them, the clients that
//! talk to them, and selection among them. Below the lifecycle: nothing
//! here starts a clean (that is `cluster`, above it).

pub mod address;
mod answer;
pub mod client;
pub mod deadline;
mod entry;
pub mod error;
pub mod evidence;
pub mod limit;
pub mod link;
pub mod pool;
pub mod press_history;
pub mod record;
pub mod selector;
pub mod table;
mod wire;

pub use address::NodeAddress;
pub use client::{CleanOutcome, NodeClient, NodeHealth, Probe};
pub use error::NodeCallError;
pub use record::{NodeRecord, NodeState, Offers};
pub use selector::Selector;
pub use table::{NodeEntry, NodeTable, Spared};
