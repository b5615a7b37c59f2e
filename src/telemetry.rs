//! Logging and metrics set-up: `RUST_LOG` filters, `LOG_FORMAT` picks pretty
//! or JSON; metrics go to one process-wide Prometheus recorder.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tower_http=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        // Colour codes only where a person reads them: a log file or a
        // pipe to a collector gets plain text.
        LogFormat::Pretty => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The Prometheus recorder, installed on first use. One per process: the
/// `metrics` macros write to a global recorder, so several applications in
/// one test process share it.
///
/// Per-node gauges are set for every node of the view at each health round;
/// a gauge not set for `3 x health_interval` (at least 2 s) is dropped,
/// so a removed node's series leave `/metrics` instead of firing a down
/// alert for ever. Counters and histograms are never dropped by the
/// exporter: [`without_other_nodes`] leaves out, at each scrape, the
/// samples of nodes that are not in this replica's view.
pub fn metrics_handle(health_interval: Duration) -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let gauge_idle = (health_interval * 3).max(Duration::from_secs(2));
            let recorder = PrometheusBuilder::new()
                .idle_timeout(MetricKindMask::GAUGE, Some(gauge_idle))
                .set_buckets_for_metric(
                    Matcher::Suffix("duration_seconds".into()),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0,
                    ],
                )
                .expect("static buckets are valid")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then ours
            // renders empty, which /metrics shows rather than crashing.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            handle
        })
        .clone()
}

/// Counters exported from the start, at 0: an alert on their rate works
/// before the first event.
const COUNTERS: &[(&str, &str)] = &[
    (
        "nodes_control_sessions_placed_total",
        "New sessions placed on a node.",
    ),
    (
        "nodes_control_failovers_total",
        "Presses that moved their session off a failed node.",
    ),
    (
        "nodes_control_nodes_marked_down_total",
        "Times a node was declared down (by a press, a clean or the health checker).",
    ),
    (
        "nodes_control_sessions_expired_total",
        "Sessions archived and unmapped by the expiry sweep.",
    ),
    (
        "nodes_control_sessions_failed_over_total",
        "Sessions moved off failed nodes.",
    ),
    (
        "nodes_control_registry_rebuilds_total",
        "Rebuilds of the registry after Redis lost its data.",
    ),
    (
        "nodes_control_presses_refused_total",
        "Presses a fencing node refused, uncounted, as read before its last clean (read again and sent anew).",
    ),
    (
        "nodes_control_redis_slot_retries_total",
        "Redis Cluster calls retried because their slot was moving or its primary changing (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING).",
    ),
];

/// Counters whose series are labelled (by node, outcome, action, ...).
const LABELLED_COUNTERS: &[(&str, &str)] = &[
    (
        "nodes_control_presses_total",
        "Presses answered, by outcome (ok: counted and answered; error: answered with an error).",
    ),
    (
        "nodes_control_task_restarts_total",
        "Restarts of a background task (health checks, fence watcher, sweep, ...) after it ended.",
    ),
    (
        "nodes_control_node_presses_total",
        "Presses forwarded to a node, by address, name and outcome (ok, error).",
    ),
    (
        "nodes_control_process_requests_total",
        "GET /process requests forwarded, by strategy, node address and name, and outcome.",
    ),
    (
        "nodes_control_admin_operations_total",
        "POST /node commands, by action and result (added, reweighted, unchanged, draining, removed, error).",
    ),
];

/// Histograms, all in seconds.
const HISTOGRAMS: &[(&str, &str)] = &[
    (
        "nodes_control_press_duration_seconds",
        "Time to serve a press, from the parsed request to the node's answer.",
    ),
    (
        "nodes_control_sweep_duration_seconds",
        "Time one expiry sweep took.",
    ),
    (
        "nodes_control_fence_wait_seconds",
        "Time from raising a node's clean fence to every live replica's ack, by outcome (acked, failed).",
    ),
    (
        "nodes_control_redis_call_duration_seconds",
        "Time one Redis call of the balancer took: a command, a script or a pipeline (failures included).",
    ),
    (
        "nodes_control_postgres_call_duration_seconds",
        "Time one Postgres call of the balancer took (timeouts included).",
    ),
];

const GAUGES: &[(&str, &str)] = &[
    (
        "nodes_control_node_healthy",
        "1 if the node answered its last health probe (0 while it is down), by address and name.",
    ),
    (
        "nodes_control_node_in_flight",
        "Presses in flight from this replica to the node, by address and name.",
    ),
];

/// `# HELP` and `# TYPE` for every family, and every unlabelled counter
/// (and each outcome of the labelled ones) at 0 from the start, so a rate or
/// an alert has a series before the first event.
fn describe() {
    for (name, help) in COUNTERS {
        describe_counter!(*name, Unit::Count, *help);
        metrics::counter!(*name).absolute(0);
    }
    for (name, help) in LABELLED_COUNTERS {
        describe_counter!(*name, Unit::Count, *help);
    }
    for outcome in ["ok", "error"] {
        metrics::counter!("nodes_control_presses_total", "outcome" => outcome).absolute(0);
    }
    for (name, help) in HISTOGRAMS {
        describe_histogram!(*name, Unit::Seconds, *help);
    }
    for (name, help) in GAUGES {
        describe_gauge!(*name, *help);
    }
}

/// `text` (Prometheus' text format) without the samples whose `address`
/// label names a node for which `known` is false. The exporter keeps every
/// series it ever created, so a removed node's press counters would stay in
/// every scrape; and applications sharing a process (the tests) share its
/// recorder. Lines without an `address` label pass as they are.
pub fn without_other_nodes(text: &str, known: impl Fn(&str) -> bool) -> String {
    let mut kept = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with('#') || address_label(line).is_none_or(&known) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The value of a sample line's `address` label (addresses hold no `"` or
/// `\\`, so there is nothing to unescape).
fn address_label(line: &str) -> Option<&str> {
    let labels = &line[line.find('{')? + 1..];
    let labels = &labels[..labels.find('}')?];
    let start = labels
        .match_indices("address=\"")
        .find(|(at, _)| *at == 0 || labels[..*at].ends_with(','))?
        .0
        + "address=\"".len();
    let value = &labels[start..];
    Some(&value[..value.find('"')?])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "# HELP nodes_control_node_presses_total Presses forwarded to a node.
# TYPE nodes_control_node_presses_total counter
nodes_control_node_presses_total{address=\"http://a:1\",name=\"a\",outcome=\"ok\"} 5
nodes_control_node_presses_total{address=\"http://gone:1\",name=\"gone\",outcome=\"ok\"} 7
nodes_control_process_requests_total{strategy=\"rr\",address=\"http://gone:1\",name=\"gone\"} 1
nodes_control_presses_total{outcome=\"ok\"} 12
nodes_control_sweeps_total 3
";

    #[test]
    fn a_node_outside_the_view_leaves_no_sample_and_the_rest_stays() {
        let kept = without_other_nodes(SCRAPE, |address| address == "http://a:1");
        assert!(!kept.contains("gone"), "{kept}");
        assert!(kept.contains("address=\"http://a:1\""), "{kept}");
        assert!(kept.contains("nodes_control_presses_total{outcome=\"ok\"} 12"));
        assert!(kept.contains("nodes_control_sweeps_total 3"));
        assert!(kept.contains("# TYPE nodes_control_node_presses_total counter"));
    }

    #[test]
    fn only_the_address_label_itself_is_read() {
        let line = "m{node_address=\"http://x:1\",address=\"http://a:1\"} 1";
        assert_eq!(address_label(line), Some("http://a:1"));
        assert_eq!(address_label("m{node_address=\"http://x:1\"} 1"), None);
        assert_eq!(address_label("m 1"), None);
    }
}
