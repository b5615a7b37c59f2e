//! Active health checks: every node's `/health` is probed each interval.
//! `fall` failures in a row take an up node down; `rise` successes in a row
//! bring a down node back (after a wipe, see [`NodeAdmin::recover`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::admin::NodeAdmin;
use super::client::NodeClient;
use crate::store::NodeState;

/// What one round of checks changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HealthReport {
    pub marked_down: Vec<String>,
    pub recovered: Vec<String>,
}

#[derive(Clone)]
pub struct HealthChecker {
    admin: NodeAdmin,
    client: NodeClient,
    rise: u32,
    fall: u32,
}

impl HealthChecker {
    pub fn new(admin: NodeAdmin, client: NodeClient, rise: u32, fall: u32) -> Self {
        Self {
            admin,
            client,
            rise: rise.max(1),
            fall: fall.max(1),
        }
    }

    /// One round: refresh the view, probe every node concurrently, act.
    pub async fn check_once(&self) -> HealthReport {
        if let Err(error) = self.admin.refresh().await {
            warn!(%error, "health check could not refresh the node list");
            return HealthReport::default();
        }
        let entries = self.admin.table().all();
        let probes = entries.iter().map(|e| self.client.health(&e.address));
        let results = futures::future::join_all(probes).await;
        let mut report = HealthReport::default();
        for (entry, result) in entries.iter().zip(results) {
            let up = f64::from(u8::from(result.is_ok()));
            metrics::gauge!("nodes_control_node_healthy", "node" => entry.name.clone()).set(up);
            metrics::gauge!("nodes_control_node_in_flight", "node" => entry.name.clone())
                .set(entry.in_flight() as f64);
            let (fails, oks) = if result.is_ok() {
                entry.health_fails.store(0, Ordering::Relaxed);
                (0, entry.health_oks.fetch_add(1, Ordering::Relaxed) + 1)
            } else {
                entry.health_oks.store(0, Ordering::Relaxed);
                (entry.health_fails.fetch_add(1, Ordering::Relaxed) + 1, 0)
            };
            match entry.state() {
                NodeState::Up | NodeState::Draining if fails >= self.fall => {
                    warn!(node = %entry.address, "health check failed {fails} times in a row");
                    self.admin.mark_down(entry).await;
                    // Its sessions move now, not at their next press.
                    let (admin, addr) = (self.admin.clone(), entry.address.clone());
                    tokio::spawn(async move {
                        if let Err(error) = admin.fail_over(&addr).await {
                            warn!(node = %addr, %error, "failover after failed health checks did not complete; presses retry it");
                        }
                    });
                    report.marked_down.push(entry.address.clone());
                }
                NodeState::Down if oks >= self.rise => {
                    match self.admin.recover(&entry.address).await {
                        Ok(true) => report.recovered.push(entry.address.clone()),
                        Ok(false) => {}
                        Err(error) => {
                            warn!(node = %entry.address, %error, "recovering node failed")
                        }
                    }
                }
                _ => {}
            }
        }
        report
    }

    /// Runs [`check_once`](Self::check_once) every `interval` until cancelled.
    pub async fn run(self, interval: Duration, cancel: CancellationToken) {
        crate::periodic::every(interval, cancel, || async {
            self.check_once().await;
        })
        .await
    }
}
