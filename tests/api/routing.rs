//! Stateless `/process` routing by `STRATEGY`, and `PLACEMENT` strategies
//! for new sessions (design.md §3, §4.2, §7).

use crate::common;

use std::collections::{HashMap, HashSet};

use balancing::StrategyKind;
use clap::Parser;
use common::{spawn_app_with, start_nodes, test_config, unique, TestApp};
use nodes_control::config::Placement;

async fn process(
    app: &TestApp,
    req: usize,
    user: usize,
) -> (u16, Option<String>, serde_json::Value) {
    let response = app
        .http
        .get(format!("{}/process/req-{req}?user_id={user}", app.address))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let served_by = response
        .headers()
        .get("x-served-by")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, served_by, response.json().await.unwrap_or_default())
}

async fn app_with_strategy(kind: StrategyKind) -> (TestApp, Vec<common::TestNode>) {
    let mut config = test_config();
    config.strategy = kind;
    let app = spawn_app_with(config).await;
    let nodes = start_nodes(&app, 3, false).await;
    (app, nodes)
}

#[tokio::test]
async fn round_robin_spreads_process_requests_evenly_and_passes_answers_through() {
    let (app, _nodes) = app_with_strategy(StrategyKind::RoundRobin).await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for i in 0..30 {
        let (status, served_by, body) = process(&app, i, i % 7).await;
        assert_eq!(status, 200);
        let served_by = served_by.unwrap();
        assert_eq!(
            body["agent_id"],
            served_by.as_str(),
            "the node's own answer"
        );
        assert_eq!(body["request_id"], format!("req-{i}"));
        assert_eq!(body["user_id"], i % 7);
        *counts.entry(served_by).or_default() += 1;
    }
    assert_eq!(counts.len(), 3);
    assert!(counts.values().all(|&c| c == 10), "{counts:?}");
}

#[tokio::test]
async fn consistent_hashing_sends_a_user_to_the_same_node_every_time() {
    for kind in [
        StrategyKind::ConsistentHash,
        StrategyKind::Maglev,
        StrategyKind::Rendezvous,
    ] {
        let (app, _nodes) = app_with_strategy(kind).await;
        let mut home: HashMap<usize, String> = HashMap::new();
        for round in 0..3 {
            for user in 0..40 {
                let (status, served_by, _) = process(&app, round * 100 + user, user).await;
                assert_eq!(status, 200);
                let node = served_by.unwrap();
                assert_eq!(
                    home.entry(user).or_insert_with(|| node.clone()),
                    &node,
                    "{kind}: user {user} moved"
                );
            }
        }
        let used: HashSet<_> = home.values().collect();
        assert!(used.len() >= 2, "{kind}: 40 users all on {used:?}");
    }
}

#[tokio::test]
async fn a_failing_node_is_skipped_for_process_without_a_client_error() {
    let (app, mut nodes) = app_with_strategy(StrategyKind::RoundRobin).await;
    nodes[1].kill();
    for i in 0..12 {
        let (status, served_by, _) = process(&app, i, i).await;
        assert_eq!(status, 200);
        assert_ne!(served_by.as_deref(), Some("n2"));
    }
    let n2 = app
        .nodes()
        .await
        .into_iter()
        .find(|n| n["name"] == "n2")
        .unwrap();
    assert_eq!(n2["state"], "down");
}

#[tokio::test]
async fn process_without_nodes_is_503() {
    let app = spawn_app_with(test_config()).await;
    let (status, _, body) = process(&app, 1, 1).await;
    assert_eq!(status, 503);
    assert_eq!(body["code"], "no_node_available");
}

#[test]
fn an_unknown_strategy_or_placement_is_refused_at_start_up() {
    let parse =
        |args: &[&str]| nodes_control::Config::try_parse_from(["nodes-control"].iter().chain(args));
    let error = parse(&["--strategy", "fastest"]).unwrap_err().to_string();
    assert!(error.contains("fastest"), "{error}");
    assert!(parse(&["--placement", "nearest"]).is_err());
    let config = parse(&["--strategy", "maglev", "--placement", "consistent-hash"]).unwrap();
    assert_eq!(config.strategy, StrategyKind::Maglev);
    assert_eq!(config.placement, Placement::ConsistentHash);
}

async fn sessions_per_node(
    placement: Placement,
    sessions: usize,
) -> (TestApp, Vec<common::TestNode>, HashMap<String, usize>) {
    let mut config = test_config();
    config.placement = placement;
    let app = spawn_app_with(config).await;
    let nodes = start_nodes(&app, 3, false).await;
    let tag = unique("placed");
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for i in 0..sessions {
        let id = format!("{tag}-{i}");
        let first = app.press(&id).await;
        assert_eq!(first.status, 200);
        let second = app.press(&id).await;
        assert_eq!(second.clicks(), 2);
        assert_eq!(
            second.served_by, first.served_by,
            "{placement:?}: session not sticky"
        );
        *per_node.entry(first.served_by.unwrap()).or_default() += 1;
    }
    (app, nodes, per_node)
}

#[tokio::test]
async fn round_robin_placement_deals_new_sessions_in_turn() {
    let (_app, _nodes, per_node) = sessions_per_node(Placement::RoundRobin, 30).await;
    assert!(per_node.values().all(|&c| c == 10), "{per_node:?}");
}

#[tokio::test]
async fn every_placement_strategy_keeps_sessions_sticky_and_uses_every_node() {
    for placement in [
        Placement::WeightedRoundRobin,
        Placement::LeastConnections,
        Placement::ConsistentHash,
        Placement::Random,
        Placement::P2c,
    ] {
        let (_app, _nodes, per_node) = sessions_per_node(placement, 45).await;
        assert_eq!(per_node.values().sum::<usize>(), 45);
        assert_eq!(per_node.len(), 3, "{placement:?}: {per_node:?}");
    }
}

/// Presses `count` new sessions one after another; the node each landed on.
async fn place_new_sessions(app: &TestApp, tag: &str, count: usize) -> HashMap<String, usize> {
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for i in 0..count {
        let answer = app.press(&format!("{tag}-{i}")).await;
        assert_eq!(answer.status, 200);
        *per_node.entry(answer.served_by.unwrap()).or_default() += 1;
    }
    per_node
}

#[tokio::test]
async fn least_sessions_placement_weighs_sessions_per_unit_of_weight() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 3, false).await;
    let tag = unique("weighed");
    let before = place_new_sessions(&app, &format!("{tag}-a"), 30).await;
    assert!(
        before.values().all(|&c| c == 10),
        "equal weights: {before:?}"
    );

    // Re-weighted while it holds sessions: from now on it counts as a third
    // of its sessions, so it takes new ones until 48 = 3 x 16.
    let heavy = &nodes[1];
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": heavy.address, "weight": 3 }))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("reweighted")),
        "{body}"
    );
    let after = place_new_sessions(&app, &format!("{tag}-b"), 50).await;
    let total = |node: &common::TestNode| {
        [&before, &after]
            .iter()
            .map(|m| {
                m.get(&node.address)
                    .or(m.get(&node.name))
                    .copied()
                    .unwrap_or(0)
            })
            .sum::<usize>()
    };
    assert_eq!(total(heavy), 48, "before {before:?}, after {after:?}");
    assert_eq!((total(&nodes[0]), total(&nodes[2])), (16, 16));
}
