//! Every integration test of the balancer but the fault suite, as one test
//! binary (one link, one `common`): real Redis, Postgres and nodes on
//! ephemeral ports, one module per capability. The fault suite
//! (`tests/faults.rs`) stays a binary of its own, so its timing checks do not
//! share the machine with the rest.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod cache;
mod cli;
mod drain;
mod failover;
mod fencing;
mod front;
mod hardening;
mod held_down;
mod history;
mod layout;
mod leftovers;
mod lifecycle;
mod logs;
mod metrics;
mod model_scripts;
mod node_fence;
mod openapi;
mod press;
mod routing;
mod shutdown;
mod stack;
mod startup;
mod status;
mod store;
mod timeouts;
mod tls;
mod validation;
