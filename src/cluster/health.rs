//! Active health checks, as `HEALTH_CHECK` says: `GET HEALTH_CHECK_PATH`
//! (any answer below 500 proves the process serves, so a node without the
//! path passes with its 404, one without any GET with its 501), a TCP connect, or none (`off`: only failed
//! presses take a node down; a down node is tried with a connect). `fall`
//! failures in a row take a node down; `rise` successes in a row bring a
//! down node back (after a wipe, see [`NodeRegistry::recover`]). A down node
//! is probed with back-off (doubling up to [`MAX_BACKOFF_MS`]), so an
//! address that answers something other than HTTP is not hammered.
//!
//! A check that timed out while the node answered presses is no failure:
//! the node is saturated (a one-request-at-a-time server answers its check
//! after our presses), and taking it down would cost its sessions' clicks.
//! Timeouts alone never take the last serving node down either. A node that
//! reports another instance id than at its last wipe restarted: its counts
//! are gone, so it is taken down and its sessions restore from the archive,
//! as after any failure. Only a node whose health answer carries an
//! instance id can be caught that way.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::registry::NodeRegistry;
use crate::archive::events::Actor;
use crate::clock::mono_ms;
use crate::nodes::client::{NodeClient, NodeHealth, Probe};
use crate::nodes::table::NodeEntry;
use crate::nodes::NodeCallError;
use crate::store::{now_ms, NodeState};

/// Longest wait between two probes of a down node.
pub const MAX_BACKOFF_MS: u64 = 30_000;

/// What one round of checks changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HealthReport {
    pub marked_down: Vec<String>,
    pub recovered: Vec<String>,
}

#[derive(Clone)]
pub struct HealthChecker {
    registry: NodeRegistry,
    client: NodeClient,
    rise: u32,
    fall: u32,
    interval: Duration,
}

impl HealthChecker {
    pub fn new(
        registry: NodeRegistry,
        client: NodeClient,
        rise: u32,
        fall: u32,
        interval: Duration,
    ) -> Self {
        Self {
            registry,
            client,
            rise: rise.max(1),
            fall: fall.max(1),
            interval,
        }
    }

    /// One round: refresh the view, probe every node that is due
    /// concurrently, act.
    pub async fn check_once(&self) -> HealthReport {
        if let Err(error) = self.registry.refresh().await {
            warn!(%error, "health check could not refresh the node list");
            // The view we have still stands: keep its gauges (by state)
            // rather than let them lapse while Redis is away.
            for entry in self.registry.table().all() {
                set_node_gauges(&entry, entry.state() != NodeState::Down);
            }
            return HealthReport::default();
        }
        let now = now_ms();
        let unprobed = *self.client.probe_kind() == Probe::Off;
        let (entries, resting): (Vec<_>, Vec<_>) = self
            .registry
            .table()
            .all()
            .into_iter()
            .partition(|e| match e.state() {
                NodeState::Down => e.evidence.probe_due(now),
                NodeState::Up | NodeState::Draining => !unprobed,
            });
        // Every node of the view has its gauges set every round (a gauge
        // left alone long enough is dropped: that is how a removed node's
        // series go); a down node waiting for its next probe is 0.
        for entry in &resting {
            set_node_gauges(entry, entry.serves_presses());
        }
        let started = mono_ms();
        let probes = entries
            .iter()
            .map(|e| self.client.check(&e.address, e.state() == NodeState::Down));
        let results = futures::future::join_all(probes).await;
        let mut report = HealthReport::default();
        for (entry, result) in entries.iter().zip(results) {
            // Only press answers prove a node alive enough to spare: a TCP
            // connect or a health path answered by a front end does not.
            match result {
                Ok(health) => {
                    set_node_gauges(entry, true);
                    self.healthy(entry, &health, &mut report).await
                }
                Err(error) => match self.registry.table().spare(entry, &error, started) {
                    Some(spared) if entry.serves_presses() => {
                        set_node_gauges(entry, true);
                        debug!(node = %entry.address, %error, why = spared.as_str(), "health check timed out; not counted");
                    }
                    _ => {
                        set_node_gauges(entry, false);
                        self.unhealthy(entry, &error, &mut report).await
                    }
                },
            }
        }
        report
    }

    async fn healthy(&self, entry: &NodeEntry, health: &NodeHealth, report: &mut HealthReport) {
        let oks = entry.evidence.check_passed();
        let restarted = match (entry.instance(), &health.instance) {
            (Some(recorded), Some(reported)) => &recorded != reported,
            _ => false,
        };
        match entry.state() {
            NodeState::Up | NodeState::Draining if restarted => {
                self.take_down(
                    entry,
                    "restarted: it reports a new instance id, so its counts are gone",
                    report,
                )
                .await;
            }
            NodeState::Down if oks >= self.rise => {
                match self.registry.recover(&entry.address).await {
                    Ok(true) => {
                        entry.evidence.recovered();
                        report.recovered.push(entry.address.clone())
                    }
                    Ok(false) => self.back_off(entry),
                    Err(error) => {
                        warn!(node = %entry.address, %error, "recovering node failed");
                        self.back_off(entry);
                    }
                }
            }
            _ => {}
        }
    }

    async fn unhealthy(&self, entry: &NodeEntry, error: &NodeCallError, report: &mut HealthReport) {
        let fails = entry.evidence.check_failed();
        match entry.state() {
            NodeState::Up | NodeState::Draining if fails >= self.fall => {
                let reason = format!("failed {fails} health checks in a row: {error}");
                if error.is_inconclusive()
                    && !self
                        .registry
                        .mark_down_unless_last(entry, Actor::HealthCheck, &reason)
                        .await
                {
                    return;
                }
                self.take_down(entry, &reason, report).await;
            }
            NodeState::Down => self.back_off(entry),
            _ => {}
        }
    }

    /// A down node that failed its check, or answered it but could not be
    /// recovered (a process whose port takes connects but which does not
    /// serve: a TCP check passes, the wipe does not), is checked again
    /// later, not every interval.
    fn back_off(&self, entry: &NodeEntry) {
        entry
            .evidence
            .back_off(now_ms(), self.interval.as_millis() as u64, MAX_BACKOFF_MS);
    }

    /// Marks the node down and moves its sessions off it now, not at their
    /// next press.
    async fn take_down(&self, entry: &NodeEntry, reason: &str, report: &mut HealthReport) {
        warn!(node = %entry.address, %reason, "health check takes the node down");
        self.registry
            .mark_down(entry, Actor::HealthCheck, reason)
            .await;
        let (registry, addr) = (self.registry.clone(), entry.address.clone());
        tokio::spawn(async move {
            if let Err(error) = registry.fail_over(&addr).await {
                warn!(node = %addr, %error, "failover after failed health checks did not complete; presses retry it");
            }
        });
        report.marked_down.push(entry.address.clone());
    }

    /// Runs [`check_once`](Self::check_once) every interval until cancelled.
    pub async fn run(self, interval: Duration, cancel: CancellationToken) {
        crate::periodic::every(interval, cancel, || async {
            self.check_once().await;
        })
        .await
    }
}

fn set_node_gauges(entry: &NodeEntry, healthy: bool) {
    let labels = [
        ("address", entry.address.clone()),
        ("name", entry.name.clone()),
    ];
    metrics::gauge!("nodes_control_node_healthy", &labels).set(f64::from(u8::from(healthy)));
    metrics::gauge!("nodes_control_node_in_flight", &labels).set(entry.in_flight() as f64);
}
