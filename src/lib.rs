//! nodes-control: a sticky-session balancer and cluster controller for
//! stateful click-counter nodes. See docs/design.md for how it works.

pub mod admin_cli;
pub mod archive;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod group_commit;
pub mod http;
pub mod lifecycle;
pub mod nodes;
pub mod periodic;
pub mod routing;
pub mod session;
pub mod startup;
pub mod store;
pub mod supervisor;
pub mod telemetry;

pub use config::Config;
pub use startup::Application;
