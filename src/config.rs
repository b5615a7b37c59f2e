//! The balancer's one configuration, parsed by clap from flags, the
//! environment and `.env` (design.md §5). Tests build it in code with
//! [`Config::new`] and never touch the environment.

use std::time::Duration;

use balancing::StrategyKind;
use clap::{Parser, ValueEnum};

pub const DEFAULT_SESSION_TTL_SECS: u64 = 600;
pub const DEFAULT_SWEEP_INTERVAL_SECS: u64 = 10;
pub const DEFAULT_NODE_TIMEOUT_MS: u64 = 5000;
pub const DEFAULT_NODE_CONNECT_TIMEOUT_MS: u64 = 1000;
pub const DEFAULT_ARCHIVE_TIMEOUT_MS: u64 = 1000;
pub const DEFAULT_LEASE_MS: u64 = 3000;
pub const DEFAULT_HEALTH_INTERVAL_MS: u64 = 2000;
pub const DEFAULT_VIRTUAL_NODES: u32 = 150;
pub const DEFAULT_HEALTH_CHECK_PATH: &str = "/health";
/// Above what a replica sends one node at full speed, so a healthy node
/// never waits in the queue.
pub const DEFAULT_NODE_MAX_IN_FLIGHT: usize = 256;
pub const DEFAULT_NODE_QUEUE_TIMEOUT_MS: u64 = 1000;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "nodes-control",
    version,
    about = "Sticky-session balancer for click-counter nodes",
    after_help = "The admin API from a terminal: nodes-control admin --help"
)]
pub struct Config {
    /// Address the HTTP API listens on (port 0 picks a free one).
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8000")]
    pub listen_addr: String,
    /// Postgres holding `session_archive`; migrations run at start-up.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/nodes_control"
    )]
    pub database_url: String,
    /// Redis holding sessions and nodes, shared by every balancer replica;
    /// a Redis Cluster as `redis+cluster://host:port,host:port`.
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// Prefix of every Redis key this balancer writes.
    #[arg(long, env = "REDIS_KEY_PREFIX", default_value = "nodes-control:")]
    pub redis_key_prefix: String,
    /// Bearer token of the admin endpoints (`POST /node`, `GET /nodes`). Required.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Longest life of a session, from its creation.
    #[arg(long, env = "SESSION_TTL_SECS", default_value_t = DEFAULT_SESSION_TTL_SECS)]
    pub session_ttl_secs: u64,
    /// How often the expiry sweep runs.
    #[arg(long, env = "SWEEP_INTERVAL_SECS", default_value_t = DEFAULT_SWEEP_INTERVAL_SECS)]
    pub sweep_interval_secs: u64,
    /// Whole-request timeout of a press forwarded to a node.
    #[arg(long, env = "NODE_TIMEOUT_MS", default_value_t = DEFAULT_NODE_TIMEOUT_MS)]
    pub node_timeout_ms: u64,
    /// TCP connect timeout towards a node.
    #[arg(long, env = "NODE_CONNECT_TIMEOUT_MS", default_value_t = DEFAULT_NODE_CONNECT_TIMEOUT_MS)]
    pub node_connect_timeout_ms: u64,
    /// Deadline of every Postgres call of the balancer; past it the call
    /// fails (503) and Postgres is left alone for a second.
    #[arg(long, env = "ARCHIVE_TIMEOUT_MS", default_value_t = DEFAULT_ARCHIVE_TIMEOUT_MS)]
    pub archive_timeout_ms: u64,
    /// PEM file of extra CA certificates trusted for `https://` nodes
    /// (besides the bundled Mozilla roots).
    #[arg(long, env = "NODE_CA_FILE")]
    pub node_ca_file: Option<std::path::PathBuf>,
    /// How nodes are checked: `http` (`GET HEALTH_CHECK_PATH`; any answer
    /// below 500 proves the process serves), `tcp` (a connect), `off` (only
    /// failed presses count; a down node is tried again with a connect).
    #[arg(long, env = "HEALTH_CHECK", value_enum, default_value_t = HealthCheck::Http)]
    pub health_check: HealthCheck,
    /// The path of the `http` health check. A node without it answers 404,
    /// which is an answer: the process serves.
    #[arg(long, env = "HEALTH_CHECK_PATH", default_value = DEFAULT_HEALTH_CHECK_PATH)]
    pub health_check_path: String,
    /// How often every node is checked.
    #[arg(long, env = "HEALTH_CHECK_INTERVAL_MS", default_value_t = DEFAULT_HEALTH_INTERVAL_MS)]
    pub health_check_interval_ms: u64,
    /// Most presses this replica has in flight to one node (HAProxy's
    /// per-server `maxconn`); the limit adapts below it when the node shows
    /// it is saturated (connects that time out while it answers others).
    #[arg(long, env = "NODE_MAX_IN_FLIGHT", default_value_t = DEFAULT_NODE_MAX_IN_FLIGHT)]
    pub node_max_in_flight: usize,
    /// Longest a press waits in this replica's queue for its node's limit;
    /// past it the press is answered 503 `node_busy` (nothing counted).
    #[arg(long, env = "NODE_QUEUE_TIMEOUT_MS", default_value_t = DEFAULT_NODE_QUEUE_TIMEOUT_MS)]
    pub node_queue_timeout_ms: u64,
    /// Consecutive successful health checks before a down node is wiped
    /// and takes traffic again (a flapping node is not wiped at every flap).
    #[arg(long, env = "HEALTH_RISE", default_value_t = 3)]
    pub health_rise: u32,
    /// Consecutive failed health checks before an up node is marked down.
    #[arg(long, env = "HEALTH_FALL", default_value_t = 2)]
    pub health_fall: u32,
    /// Longest a client may take to send a request's headers; also how long
    /// an idle keep-alive connection is kept (it is waiting for headers).
    #[arg(long, env = "HEADER_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_read_timeout_ms: u64,
    /// Longest a client may take to send a request's body (408 past it).
    #[arg(long, env = "BODY_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_read_timeout_ms: u64,
    /// Longest any request may take, all included (504 past it).
    #[arg(long, env = "REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// Most client connections open at once; beyond it new connections
    /// wait in the listen backlog instead of taking file descriptors.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// On SIGTERM: stop accepting, finish what is in flight (presses,
    /// cleans), and exit at the latest after this many seconds.
    #[arg(long, env = "SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
    /// Threads serving requests; 0: one per CPU this process may run on.
    /// With one, the runtime is tokio's current-thread scheduler, which
    /// wakes no other thread for a press.
    #[arg(long, env = "WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,
    /// How long this replica trusts its cached session mappings after its
    /// last contact with the fence channel (0 turns the cache off).
    #[arg(long, env = "LEASE_MS", default_value_t = DEFAULT_LEASE_MS)]
    pub lease_ms: u64,
    /// Create the database `DATABASE_URL` names if it does not exist (the
    /// development stack); otherwise a missing database stops the start.
    #[arg(long, env = "CREATE_DATABASE", default_value_t = false)]
    pub create_database: bool,
    /// Serve `GET /metrics` only with the admin token.
    #[arg(long, env = "METRICS_REQUIRE_TOKEN", default_value_t = false)]
    pub metrics_require_token: bool,
    /// How new sessions are placed.
    #[arg(long, env = "PLACEMENT", value_enum, default_value_t = Placement::LeastSessions)]
    pub placement: Placement,
    /// Stateless routing strategy of `GET /process/{req_id}`: rr, wrr, lc,
    /// ch, maglev, hrw, key-hash, ip-hash, random, p2c.
    #[arg(long, env = "STRATEGY", default_value = "rr")]
    pub strategy: StrategyKind,
    /// Virtual nodes per node (and unit of weight) on the consistent-hash ring.
    #[arg(long, env = "VIRTUAL_NODES", default_value_t = DEFAULT_VIRTUAL_NODES)]
    pub virtual_nodes: u32,
    /// Consistent hashing with bounded loads: no node above this factor
    /// times the average in-flight load (e.g. 1.25). Unset: the plain ring.
    #[arg(long, env = "CH_LOAD_FACTOR")]
    pub ch_load_factor: Option<f64>,
    /// Nodes registered at start-up, comma-separated (`http://n1:8081,http://n2:8081`).
    #[arg(long, env = "NODES", value_delimiter = ',', default_value = "")]
    pub nodes: Vec<String>,
    /// How long the history of each session's placements is kept (`GET
    /// /sessions/{id}`); 0 (the default) keeps none: recording costs about
    /// a tenth of the rate of new sessions (README).
    #[arg(long, env = "SESSION_HISTORY_SECS", default_value_t = 0)]
    pub session_history_secs: u64,
    /// A failover archives, on the failed node's behalf, the highest total
    /// the replicas showed of each of its sessions, so a node's death loses
    /// no click a user saw (design.md, Failover). `false`: its sessions go
    /// on from their last archive, as before 0.3.
    #[arg(long, env = "FAILOVER_HAND_OVER", default_value_t = true, action = clap::ArgAction::Set)]
    pub failover_hand_over: bool,
    /// One log line per request (method, path, status, node, duration, the
    /// session id hashed), at target `access`.
    #[arg(long, env = "ACCESS_LOG", default_value_t = false)]
    pub access_log: bool,
    /// Log output: `pretty` for people (colours only on a terminal), `json`
    /// for collectors.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// The up node with the fewest active sessions per unit of weight
    /// (atomic in Redis).
    LeastSessions,
    /// Each replica cycles through the up nodes.
    RoundRobin,
    /// Smooth weighted round-robin (nginx), by node weight.
    WeightedRoundRobin,
    /// The up node with the fewest presses in flight from this replica.
    LeastConnections,
    /// The ring (bounded loads with `CH_LOAD_FACTOR`), keyed by session id.
    ConsistentHash,
    /// Weighted random.
    Random,
    /// Power of two choices on presses in flight.
    P2c,
}

impl Placement {
    /// The strategy that chooses the node; `None`: least sessions, chosen
    /// inside the placement script from the shared counts.
    pub fn strategy(self) -> Option<StrategyKind> {
        match self {
            Placement::LeastSessions => None,
            Placement::RoundRobin => Some(StrategyKind::RoundRobin),
            Placement::WeightedRoundRobin => Some(StrategyKind::SmoothWeighted),
            Placement::LeastConnections => Some(StrategyKind::LeastConnections),
            Placement::ConsistentHash => Some(StrategyKind::ConsistentHash),
            Placement::Random => Some(StrategyKind::Random),
            Placement::P2c => Some(StrategyKind::PowerOfTwoChoices),
        }
    }
}

/// How the health checker tells that a node's process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthCheck {
    /// `GET HEALTH_CHECK_PATH`: any answer below 500 (a 404 too) is healthy;
    /// a JSON answer may name the node and its instance id.
    Http,
    /// A TCP connect.
    Tcp,
    /// No probes of serving nodes: only failed presses count. A down node
    /// is tried again with a TCP connect.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

impl Config {
    /// Every default of the command line, with the three settings that have
    /// no sensible default for a test given explicitly.
    pub fn new(database_url: &str, redis_url: &str, admin_token: &str) -> Self {
        Self {
            listen_addr: "127.0.0.1:0".into(),
            database_url: database_url.into(),
            redis_url: redis_url.into(),
            redis_key_prefix: "nodes-control:".into(),
            admin_token: Some(admin_token.into()),
            session_ttl_secs: DEFAULT_SESSION_TTL_SECS,
            sweep_interval_secs: DEFAULT_SWEEP_INTERVAL_SECS,
            node_timeout_ms: DEFAULT_NODE_TIMEOUT_MS,
            node_connect_timeout_ms: DEFAULT_NODE_CONNECT_TIMEOUT_MS,
            archive_timeout_ms: DEFAULT_ARCHIVE_TIMEOUT_MS,
            health_check: HealthCheck::Http,
            health_check_path: DEFAULT_HEALTH_CHECK_PATH.into(),
            health_check_interval_ms: DEFAULT_HEALTH_INTERVAL_MS,
            node_max_in_flight: DEFAULT_NODE_MAX_IN_FLIGHT,
            node_queue_timeout_ms: DEFAULT_NODE_QUEUE_TIMEOUT_MS,
            health_rise: 3,
            health_fall: 2,
            metrics_require_token: false,
            create_database: false,
            lease_ms: DEFAULT_LEASE_MS,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            max_connections: 10_000,
            shutdown_grace_secs: 10,
            worker_threads: 0,
            node_ca_file: None,
            placement: Placement::LeastSessions,
            strategy: StrategyKind::RoundRobin,
            virtual_nodes: DEFAULT_VIRTUAL_NODES,
            ch_load_factor: None,
            nodes: Vec::new(),
            log_format: LogFormat::Pretty,
            access_log: false,
            session_history_secs: 0,
            failover_hand_over: true,
        }
    }

    pub fn session_ttl(&self) -> Duration {
        Duration::from_secs(self.session_ttl_secs)
    }
    pub fn node_timeout(&self) -> Duration {
        Duration::from_millis(self.node_timeout_ms)
    }
    pub fn node_connect_timeout(&self) -> Duration {
        Duration::from_millis(self.node_connect_timeout_ms)
    }
    /// The listener's limits.
    pub fn listener_limits(&self) -> ListenerLimits {
        ListenerLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms.max(1)),
            max_connections: self.max_connections.max(1),
            grace: Duration::from_secs(self.shutdown_grace_secs),
        }
    }
    /// Refuses settings whose order the protocol relies on, and warns of
    /// those that only make answers less telling.
    pub fn check_order(&self) -> anyhow::Result<()> {
        let heartbeat = crate::lifecycle::fence::HEARTBEAT;
        anyhow::ensure!(
            self.silence().lease() >= heartbeat * 2,
            "LEASE_MS is {} ms: it must be at least {} ms (two heartbeats), or a single \
             slow heartbeat lapses the replica's lease and its presses answer 504 replica_paused",
            self.lease_ms,
            (heartbeat * 2).as_millis()
        );
        let press = crate::session::press_budget(self.node_timeout()) + self.node_timeout() * 2;
        if Duration::from_millis(self.request_timeout_ms) < press {
            tracing::warn!(
                request_timeout_ms = self.request_timeout_ms,
                press_ms = press.as_millis() as u64,
                "REQUEST_TIMEOUT_MS is shorter than a press may take (5 x NODE_TIMEOUT_MS + 2 s): \
                 a press it cuts answers 504 request_timeout, where it would have said what happened"
            );
        }
        Ok(())
    }

    /// The one setting a replica's silence is judged by, on both sides
    /// (`protocol::silence`).
    pub fn silence(&self) -> protocol::silence::Silence {
        protocol::silence::Silence::new(Duration::from_millis(self.lease_ms))
    }
    pub fn archive_timeout(&self) -> Duration {
        Duration::from_millis(self.archive_timeout_ms.max(1))
    }
    pub fn node_queue_timeout(&self) -> Duration {
        Duration::from_millis(self.node_queue_timeout_ms)
    }
    pub fn health_check_interval(&self) -> Duration {
        Duration::from_millis(self.health_check_interval_ms.max(10))
    }
}

/// What the listener allows (`HEADER_READ_TIMEOUT_MS`, `MAX_CONNECTIONS`,
/// `SHUTDOWN_GRACE_SECS`).
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Longest shutdown waits for requests in flight.
    pub grace: Duration,
}
