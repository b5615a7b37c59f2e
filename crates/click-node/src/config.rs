use clap::Parser;

/// Command line of `click-node` (design.md §2). Every flag has an environment
/// fallback so the same binary runs under docker compose and by hand.
#[derive(Debug, Clone, Parser)]
#[command(name = "click-node", version, about = "Reference click-counter node")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "NODE_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "NODE_PORT", default_value_t = 8081)]
    pub port: u16,
    /// Name this node reports (as `agent_id` and in logs).
    #[arg(long, env = "NODE_NAME", default_value = "n1")]
    pub name: String,
    /// Postgres holding `session_archive`, written by `/clean {"archive":true}`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/nodes_control"
    )]
    pub database_url: String,
    /// Smallest simulated latency of `/process`, in milliseconds.
    #[arg(long, env = "MIN_DELAY_MS", default_value_t = 50)]
    pub min_delay_ms: u64,
    /// Largest simulated latency of `/process`, in milliseconds (0 0 = none).
    #[arg(long, env = "MAX_DELAY_MS", default_value_t = 150)]
    pub max_delay_ms: u64,
    /// Behave like a third-party node: ignore `session_ids` on `/clean` and
    /// always clean every session.
    #[arg(long, env = "CLEAN_ALL", default_value_t = false)]
    pub clean_all: bool,
    /// Longest wait for Postgres when `/clean` archives; past it the clean
    /// answers 503 and forgets nothing. Keep it below the balancer's
    /// `NODE_TIMEOUT_MS`, so a slow archive is not taken for a dead node.
    #[arg(long, env = "ARCHIVE_TIMEOUT_MS", default_value_t = 2000)]
    pub archive_timeout_ms: u64,
    /// On SIGTERM or Ctrl-C: finish requests in flight, exit at the latest
    /// after this many seconds.
    #[arg(long, env = "SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
}

impl Config {
    /// A configuration for tests: no latency, the given database.
    pub fn for_tests(name: &str, database_url: &str) -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 0,
            name: name.into(),
            database_url: database_url.into(),
            min_delay_ms: 0,
            max_delay_ms: 0,
            clean_all: false,
            archive_timeout_ms: 1000,
            shutdown_grace_secs: 10,
        }
    }
}
