//! `GET /metrics` of a balancer process of its own (the recorder is global
//! to a process, so these run the binary): every family described, counters
//! present from the start, a removed node's series gone (counters too).

use crate::common;

use std::time::Duration;

use common::process::BalancerProcess;
use common::TestNode;

#[tokio::test]
async fn every_family_is_described_and_counters_are_there_before_their_first_event() {
    let balancer = BalancerProcess::start(&[], std::process::Stdio::null()).await;
    let text = balancer.metrics().await;
    for family in [
        "nodes_control_presses_total",
        "nodes_control_sessions_placed_total",
        "nodes_control_failovers_total",
        "nodes_control_nodes_marked_down_total",
        "nodes_control_sessions_expired_total",
        "nodes_control_sessions_failed_over_total",
        "nodes_control_registry_rebuilds_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {family} counter")),
            "no TYPE for {family}:\n{text}"
        );
    }
    // Nothing happened yet, and every counter already says so.
    assert!(
        text.contains("nodes_control_sessions_placed_total 0\n"),
        "{text}"
    );
    assert!(
        text.contains("nodes_control_presses_total{outcome=\"ok\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("nodes_control_presses_total{outcome=\"error\"} 0\n"),
        "{text}"
    );
    // Every family printed has its HELP.
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line.split_whitespace().nth(2).unwrap();
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}"
        );
    }
}

#[tokio::test]
async fn a_removed_node_leaves_no_series_and_a_node_s_series_carry_address_and_name() {
    let balancer = BalancerProcess::start(&[], std::process::Stdio::null()).await;
    let node = TestNode::start("m1", false);
    balancer.node("add", &node.address).await;
    let series = format!(
        "nodes_control_node_healthy{{address=\"{}\",name=\"m1\"}} 1",
        node.address
    );
    testkit::eventually(Duration::from_secs(10), &series, || async {
        testkit::holds(balancer.metrics().await.contains(&series), || ())
    })
    .await;
    // A press is counted and timed per node; the add per admin action.
    assert_eq!(
        balancer.press(&common::unique("metered")).await.status(),
        200
    );
    let text = balancer.metrics().await;
    let pressed = format!(
        "nodes_control_node_presses_total{{address=\"{}\",name=\"m1\",outcome=\"ok\"}} 1",
        node.address
    );
    assert!(text.contains(&pressed), "no {pressed}:\n{text}");
    assert!(
        text.contains("nodes_control_admin_operations_total{action=\"add\",result=\"added\"} 1"),
        "{text}"
    );
    // The new session's placement went to Redis and its fold to Postgres.
    for family in [
        "nodes_control_redis_call_duration_seconds",
        "nodes_control_postgres_call_duration_seconds",
    ] {
        let count = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{family}_count ")))
            .unwrap_or_else(|| panic!("no {family}:\n{text}"));
        assert!(
            count.trim().parse::<u64>().unwrap() > 0,
            "{family}: {count}"
        );
    }
    balancer.node("remove", &node.address).await;
    // Every series of the node goes, its counters too: no down alert for a
    // node removed on purpose, no dead address in every scrape.
    testkit::eventually(
        Duration::from_secs(15),
        "the node's series gone",
        || async {
            let text = balancer.metrics().await;
            let left: Vec<String> = text
                .lines()
                .filter(|l| !l.starts_with('#') && l.contains(&node.address))
                .map(str::to_owned)
                .collect();
            testkit::holds(left.is_empty(), || left)
        },
    )
    .await;
    // The families themselves stay, and what is not a node's.
    let text = balancer.metrics().await;
    assert!(
        text.contains("# TYPE nodes_control_node_presses_total counter"),
        "{text}"
    );
    assert!(
        text.contains("nodes_control_presses_total{outcome=\"ok\"} 1"),
        "{text}"
    );
}
