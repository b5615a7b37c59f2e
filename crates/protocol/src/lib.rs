//! The protocol's decisions as plain functions, without I/O.
//!
//! The balancer does the I/O of each step (a Lua script, a call to a node,
//! a timer) and asks these functions what follows from what it saw; the
//! model (`crates/model`) calls the same functions in its actions. So what
//! the checker proves of the model is what the code decides, the way
//! quinn-proto and rustls keep their state machines apart from sockets.
//! The Lua scripts cannot call Rust: [`placement`] states what they decide,
//! and the balancer's tests run each script on every state of the model's
//! domain and compare.

pub mod placement;
pub mod press;
