//! The protocol's decisions as plain functions, without I/O.
//!
//! The balancer does the I/O of each step (a Lua script, a call to a node,
//! a timer) and asks these functions what follows from what it saw; the
//! model (`crates/model`) calls the same functions in its actions, so the
//! decisions the checker explores are the code's own (the way quinn-proto
//! and rustls keep their state machines apart from sockets). What the
//! model still states in its own words, the steps' I/O and their order,
//! docs/design.md's table maps to the code.
//! The Lua scripts cannot call Rust: [`placement`] states what they decide,
//! and the balancer's tests run each script on every state of the model's
//! domain and compare.

pub mod failover;
pub mod placement;
pub mod press;
pub mod silence;
