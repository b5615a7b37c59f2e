//! The balancer's protocol as a small model, checked with stateright.
//!
//! One session, pressed by one client through two replicas, on two nodes:
//! node 0 fences (it refuses a press older than its last clean, and stamps
//! its archive rows with the clean's token), node 1 speaks the task's API
//! only. Redis is one server (or, where it comes back on a snapshot, a
//! cluster whose primaries of the session group and of the control slot
//! come back apart); Postgres is the archive. Every action is one
//! atomic step of the code, named as there (a Lua script, a Postgres
//! statement, a call to a node, a timer): `docs/model.md` has the table.
//!
//! Nothing here is timed. A timer may fire at any moment, a message may
//! wait in the network for ever or overtake another, and any actor may
//! stop between two steps (a paused replica is one whose steps are not
//! taken for a while): the checker tries every interleaving.
//!
//! The replicas decide as the balancer does: their actions call the
//! functions of the `protocol` crate, which the balancer calls too.
//! [`Guards`] switches each fix of the protocol on or off, so that a test
//! shows the checker failing with the guard out, and passing with all in:
//! a guard out replaces the shared decision with the one 0.1.0 made.

mod check;
mod state;

pub use check::{check, check_until_broken, shortest_counterexamples, Report};
pub use state::{Action, Answer, Guards, Part, Protocol, State};
