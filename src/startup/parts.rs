//! The parts [`Application::build_with_clock`](super::Application) puts
//! together, each from the configuration: the admin token, the connections,
//! the node client, the cleaner and its fence watcher, the placement
//! strategy, the checks made at start and the nodes named in `NODES`.

use std::sync::Arc;

use anyhow::Context as _;
use tracing::{info, warn};

use crate::archive::events::Actor;
use crate::archive::Archive;
use crate::cluster::{NodeAdmin, NodeRegistry};
use crate::config::{Config, HealthCheck};
use crate::lifecycle::detached::Detached;
use crate::lifecycle::fence::Lease;
use crate::lifecycle::{CleanError, FenceWatcher, NodeCleaner, Rebuilder, Registry};
use crate::nodes::{NodeAddress, NodeClient, NodeTable, Probe, Selector};
use crate::store::Store;

/// Registers nodes (idempotent); returns those Redis could not take yet.
pub(super) async fn register_nodes(admin: &NodeAdmin, nodes: Vec<String>) -> Vec<String> {
    let mut pending = Vec::new();
    for address in nodes {
        match admin.add_as(&address, None, None, Actor::Startup).await {
            Ok((node, _)) => {
                info!(node = %node.address, state = %node.state, "initial node registered")
            }
            Err(error) => {
                warn!(node = %address, %error, "initial node not registered yet; retrying");
                pending.push(address);
            }
        }
    }
    pending
}

/// `ADMIN_TOKEN`, which the admin endpoints need.
pub(super) fn admin_token(config: &Config) -> anyhow::Result<String> {
    anyhow::ensure!(
        config.health_check_path.starts_with('/'),
        "HEALTH_CHECK_PATH must be a path starting with '/', not {:?}",
        config.health_check_path
    );
    config
        .admin_token
        .clone()
        .filter(|t| !t.trim().is_empty())
        .context(
            "ADMIN_TOKEN is not set: the admin endpoints need a secret. \
             Set ADMIN_TOKEN in the environment or in .env (e.g. ADMIN_TOKEN=$(openssl rand -hex 24))",
        )
}

/// Redis (lazily: the balancer starts while it is away) and Postgres, its
/// database made ready and migrated.
pub(super) async fn connect(config: &Config) -> anyhow::Result<(Store, Archive)> {
    let store = Store::connect(&config.redis_url, &config.redis_key_prefix)?;
    let archive = Archive::connect_lazy(
        &config.database_url,
        &config.redis_key_prefix,
        config.archive_timeout(),
    )?;
    Archive::prepare_database(&config.database_url, config.create_database).await?;
    archive
        .migrate()
        .await
        .context("applying migrations to DATABASE_URL (is Postgres up?)")?;
    Ok((store, archive))
}

/// The one client towards nodes: `NODE_CA_FILE`'s roots, the health probe.
pub(super) fn node_client(config: &Config) -> anyhow::Result<NodeClient> {
    let extra_roots = match &config.node_ca_file {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("reading NODE_CA_FILE {}", path.display()))?,
        ),
        None => None,
    };
    let probe = match config.health_check {
        HealthCheck::Http => Probe::Http {
            path: config.health_check_path.clone(),
        },
        HealthCheck::Tcp => Probe::Tcp,
        HealthCheck::Off => Probe::Off,
    };
    let client = NodeClient::new(
        config.node_timeout(),
        config.node_connect_timeout(),
        extra_roots.as_deref(),
    )?;
    Ok(client.with_probe(probe))
}

/// The cleaner of nodes and the watcher of the fences it raises, which
/// share the fence events (raises, lowers, acks wake the waiting cleans).
pub(super) fn cleaner_and_fences(
    config: &Config,
    store: &Store,
    archive: &Archive,
    client: &NodeClient,
    table: &Arc<NodeTable>,
    detached: &Detached,
    lease: &Arc<Lease>,
) -> (NodeCleaner, FenceWatcher) {
    let events = Arc::new(tokio::sync::Notify::new());
    let cleaner = NodeCleaner::new(
        store.clone(),
        archive.clone(),
        client.clone(),
        table.clone(),
        detached.clone(),
        config.silence(),
        events.clone(),
    );
    let fences = FenceWatcher::new(store, table.clone(), events, lease.clone());
    (cleaner, fences)
}

/// A node selector of `kind` over this replica's view.
pub(super) fn selector(
    config: &Config,
    kind: balancing::StrategyKind,
    table: &Arc<NodeTable>,
) -> Selector {
    Selector::new(
        kind,
        table.clone(),
        config.virtual_nodes,
        config.ch_load_factor,
    )
}

/// Before serving: the view of the nodes, the replica set and its fences
/// joined, the registry checked (a layout this release does not read stops
/// the start; Redis being away only delays the rest).
pub(super) async fn check_at_start(
    registry: &NodeRegistry,
    fences: &FenceWatcher,
    rebuilder: &Rebuilder,
) -> anyhow::Result<()> {
    if let Err(error) = registry.refresh().await {
        warn!(%error, "Redis is not reachable at start-up; serving 503 until it is");
    }
    if let Err(error) = fences.poll_once().await {
        warn!(%error, "could not read clean fences at start-up");
    }
    match rebuilder.start_if_fresh().await {
        Ok(Registry::Ready) => {}
        Ok(Registry::Rebuilding) => {
            warn!("Redis lost the registry; it is rebuilt from Postgres before sessions are served")
        }
        Err(CleanError::Layout(mismatch)) => return Err(mismatch.into()),
        Err(error) => warn!(%error, "could not check the registry at start-up"),
    }
    Ok(())
}

/// `NODES`, checked: a typo stops the start.
pub(super) fn initial_nodes(config: &Config) -> anyhow::Result<Vec<String>> {
    let mut nodes = Vec::new();
    for address in config.nodes.iter().filter(|a| !a.trim().is_empty()) {
        let address =
            NodeAddress::parse(address).with_context(|| format!("NODES lists {address:?}"))?;
        nodes.push(address.to_string());
    }
    Ok(nodes)
}
