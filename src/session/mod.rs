//! The press flow: find or place a session, forward the press to its node,
//! fail over once when the node fails. Testable without HTTP.

pub mod cache;
mod error;
pub mod id;
mod service;

pub use error::{Busy, PressError};
pub use id::{SessionId, SessionIdError};
pub use service::{press_budget, PressSettings, Pressed, SessionService};
