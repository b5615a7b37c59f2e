//! `Application`: wires the stores, services, background tasks and the HTTP
//! server together from a [`Config`].

mod parts;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::cluster::{HealthChecker, NodeAdmin, NodeRegistry};
use crate::config::Config;
use crate::http::{self, ApiContext, Services};
use crate::lifecycle::detached::Detached;
use crate::lifecycle::fence::Lease;
use crate::lifecycle::{FenceWatcher, Rebuilder, Sweeper};
use crate::nodes::press_history::PressHistory;
use crate::nodes::NodeTable;
use crate::routing::ProcessRouter;
use crate::session::cache::MappingCache;
use crate::session::{PressSettings, SessionService};
use crate::supervisor::Supervisor;
use parts::{
    admin_token, check_at_start, cleaner_and_fences, connect, initial_nodes, node_client,
    register_nodes, selector,
};

pub struct Application {
    listener: TcpListener,
    ctx: ApiContext,
    health: HealthChecker,
    fences: FenceWatcher,
    sweeper: Sweeper,
    rebuilder: Rebuilder,
    supervisor: Supervisor,
    fences_followed: Arc<std::sync::atomic::AtomicBool>,
    /// `NODES` not registered yet because Redis was away at start-up.
    pending_nodes: Vec<String>,
    detached: Detached,
    config: Config,
}

impl Application {
    /// Binds the listener (port 0 in tests), connects to Redis and Postgres,
    /// applies migrations and registers the `NODES` of the configuration.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        Self::build_with_clock(config, Clock::system()).await
    }

    /// [`build`](Self::build) with sessions expiring on `clock` (tests move
    /// it forward instead of waiting out a TTL).
    pub async fn build_with_clock(config: Config, clock: Clock) -> anyhow::Result<Self> {
        config.check_order()?;
        let admin_token = admin_token(&config)?;
        // Read before anything is connected: a malformed `NODES` stops the
        // start having written nothing.
        let nodes = initial_nodes(&config)?;
        let (store, archive) = connect(&config).await?;
        let client = node_client(&config)?;
        let table = Arc::new(NodeTable::new(config.node_max_in_flight));
        let lease = Arc::new(Lease::new(config.silence()));
        // This application's cleans and admin operations, waited for at shutdown.
        let detached = Detached::default();
        let cache = Arc::new(MappingCache::new(lease.clone()));
        let (cleaner, mut fences) = cleaner_and_fences(
            &config, &store, &archive, &client, &table, &detached, &lease,
        );
        if config.failover_hand_over {
            fences = fences.handing_over(cache.clone());
        }
        archive.set_replica(fences.replica_id());
        let sweeper = Sweeper::new(
            cleaner.clone(),
            config.node_timeout(),
            config.session_ttl(),
            clock,
        );
        let rebuilder = Rebuilder::new(cleaner.clone());
        let registry = NodeRegistry::new(cleaner);
        let admin = NodeAdmin::new(registry.clone());
        // True from the start: the fence watcher's first poll runs below,
        // before the listener serves anything.
        let fences_followed = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sessions = SessionService::new(
            registry.clone(),
            sweeper.clone(),
            fences_followed.clone(),
            cache,
            PressSettings::from_config(&config),
        )
        .with_placement(
            config
                .placement
                .strategy()
                .map(|kind| selector(&config, kind, &table)),
        );
        let process_router = ProcessRouter::new(
            selector(&config, config.strategy, &table),
            registry.clone(),
            client.clone(),
            config.node_queue_timeout(),
        );
        let listener = TcpListener::bind(&config.listen_addr)
            .await
            .with_context(|| format!("binding LISTEN_ADDR {}", config.listen_addr))?;
        let ctx = ApiContext::new(Services {
            sessions,
            admin: admin.clone(),
            access_log: config.access_log,
            process_router,
            store,
            archive,
            admin_token,
            metrics_require_token: config.metrics_require_token,
            body_read_timeout: Duration::from_millis(config.body_read_timeout_ms.max(1)),
            request_timeout: Duration::from_millis(config.request_timeout_ms.max(1)),
            fences_followed: fences_followed.clone(),
            metrics: crate::telemetry::metrics_handle(config.health_check_interval()),
            press_metrics: http::PressMetrics::register(),
            press_history: Arc::new(PressHistory::new(table)),
        });
        check_at_start(&registry, &fences, &rebuilder).await?;
        let pending_nodes = register_nodes(&admin, nodes).await;
        let health = HealthChecker::new(
            registry,
            client,
            config.health_rise,
            config.health_fall,
            config.health_check_interval(),
        );
        Ok(Self {
            listener,
            health,
            fences,
            sweeper,
            rebuilder,
            supervisor: Supervisor::default(),
            fences_followed,
            pending_nodes,
            detached,
            ctx,
            config,
        })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The services behind the API, for tests that drive them directly.
    pub fn context(&self) -> ApiContext {
        self.ctx.clone()
    }

    /// This replica's id in the replica set.
    pub fn replica_id(&self) -> String {
        self.fences.replica_id().to_owned()
    }

    /// The supervisor of the background loops (tests end a loop with it).
    pub fn supervisor(&self) -> Supervisor {
        self.supervisor.clone()
    }

    /// The expiry sweep, for tests that run one step at a time they choose.
    pub fn sweeper(&self) -> Sweeper {
        self.sweeper.clone()
    }

    /// Serves until `shutdown` resolves, with the health checker, the fence
    /// watcher, the sweeper and the registry check beside the server; all
    /// stop together. They are supervised: one that ends on its own (a
    /// panic, most likely) is restarted with back-off, and while the fence
    /// watcher is not running the replica answers 503 to presses and
    /// `/readyz`.
    pub async fn run_until_stopped(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let cancel = CancellationToken::new();
        let registration = self.register_pending_nodes();
        let mut background = self.spawn_background(&cancel);
        info!(addr = %self.listener.local_addr()?, "nodes-control listening");
        let server_cancel = cancel.clone();
        let limits = self.config.listener_limits();
        let stopping_at = Arc::new(std::sync::Mutex::new(None));
        let stop_time = stopping_at.clone();
        let result = http::server::serve(
            self.listener,
            self.ctx.clone(),
            http::router(self.ctx.clone()),
            limits,
            async move {
                tokio::select! {
                    _ = shutdown => {}
                    _ = server_cancel.cancelled() => {}
                }
                *stop_time.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(tokio::time::Instant::now());
            },
        )
        .await;
        let stopped = stopping_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .unwrap_or_else(tokio::time::Instant::now);
        let grace_left = || limits.grace.saturating_sub(stopped.elapsed());
        cancel.cancel();
        registration.abort();
        while background.join_next().await.is_some() {}
        // Cleans and failovers still running finish within what is left.
        if !self.detached.wait(grace_left()).await {
            warn!("cleans still running at the end of the grace period; their journals let another replica finish them");
        }
        info!("nodes-control stopped");
        if let Some(mismatch) = self.rebuilder.refused() {
            return Err(std::io::Error::other(mismatch));
        }
        result
    }

    /// Registers the `NODES` Redis could not take at start-up, once it can.
    fn register_pending_nodes(&self) -> tokio::task::JoinHandle<()> {
        let mut pending = self.pending_nodes.clone();
        let admin = self.ctx.admin.clone();
        tokio::spawn(async move {
            while !pending.is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                pending = register_nodes(&admin, pending).await;
            }
        })
    }

    /// The loops beside the server, supervised (restarted with back-off if
    /// one ends on its own) and stopped by `cancel`.
    fn spawn_background(&self, cancel: &CancellationToken) -> tokio::task::JoinSet<()> {
        let sweep_interval = Duration::from_secs(self.config.sweep_interval_secs.max(1));
        let mut background = tokio::task::JoinSet::new();
        let supervisor = &self.supervisor;
        let health = self.health.clone();
        let interval = self.config.health_check_interval();
        let token = cancel.clone();
        supervisor.spawn(
            &mut background,
            "health checker",
            cancel.clone(),
            None,
            move || health.clone().run(interval, token.clone()),
        );
        let (fences, token) = (self.fences.clone(), cancel.clone());
        supervisor.spawn(
            &mut background,
            "fence watcher",
            cancel.clone(),
            Some(self.fences_followed.clone()),
            move || fences.clone().run(token.clone()),
        );
        let (sweeper, token) = (self.sweeper.clone(), cancel.clone());
        supervisor.spawn(
            &mut background,
            "sweeper",
            cancel.clone(),
            None,
            move || sweeper.clone().run(sweep_interval, token.clone()),
        );
        let (rebuilder, token) = (self.rebuilder.clone(), cancel.clone());
        supervisor.spawn(
            &mut background,
            "registry check",
            cancel.clone(),
            None,
            move || rebuilder.clone().run(token.clone(), token.clone()),
        );
        self.spawn_upkeep(&mut background, cancel);
        background
    }

    /// The upkeep beside them: drains, retention, caches, samples.
    fn spawn_upkeep(&self, background: &mut tokio::task::JoinSet<()>, cancel: &CancellationToken) {
        let supervisor = &self.supervisor;
        // Drained nodes are removed once empty (or at their deadline), at the
        // pace of the health checks: a drain ends soon after its last session.
        let admin = self.ctx.admin.clone();
        supervisor.spawn_periodic(
            background,
            "drain",
            self.config.health_check_interval(),
            cancel,
            move || {
                let admin = admin.clone();
                async move {
                    if let Err(error) = admin.finish_drains().await {
                        warn!(%error, "could not check the drained nodes");
                    }
                }
            },
        );
        if self.config.session_history_secs > 0 {
            let archive = self.ctx.archive.clone();
            let keep = chrono::Duration::seconds(self.config.session_history_secs as i64);
            supervisor.spawn_periodic(
                background,
                "history retention",
                Duration::from_secs(60),
                cancel,
                move || {
                    let archive = archive.clone();
                    async move {
                        let before = chrono::Utc::now() - keep;
                        if let Err(error) = archive.forget_placements_before(before).await {
                            warn!(%error, "could not trim the session history");
                        }
                    }
                },
            );
        }
        let sessions = self.ctx.sessions.clone();
        supervisor.spawn_tick(
            background,
            "cache purge",
            Duration::from_secs(10),
            cancel,
            move || {
                sessions.purge_cache();
            },
        );
        let history = self.ctx.press_history.clone();
        supervisor.spawn_tick(
            background,
            "press history",
            crate::nodes::press_history::SAMPLE_EVERY,
            cancel,
            move || {
                history.sample(crate::clock::wall_ms());
            },
        );
        // Histogram samples pile up in the recorder until drained: without
        // a scraper they would grow with every press.
        let metrics = self.ctx.metrics.clone();
        supervisor.spawn_tick(
            background,
            "metrics upkeep",
            Duration::from_secs(5),
            cancel,
            move || {
                metrics.run_upkeep();
            },
        );
    }
}
