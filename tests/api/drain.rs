//! Admin answers that say what happened, the audit log behind them
//! (`GET /events`), and draining a node (design.md §3).

use crate::common;

use std::time::Duration;

use common::{spawn_app, spawn_app_with, start_nodes, test_config, unique, TestApp, TestNode};
use serde_json::{json, Value};
use testkit::{eventually, holds};

/// `GET /events` with a query; status and body.
async fn events(app: &TestApp, query: &str) -> (u16, Value) {
    let response = app
        .http
        .get(format!("{}/events{query}", app.address))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The node's events, newest first, once at least `count` are written (the
/// log is written in the background).
async fn node_events(app: &TestApp, node: &str, count: usize) -> Vec<Value> {
    eventually(
        Duration::from_secs(5),
        &format!("{count} events"),
        || async {
            let (status, body) = events(app, &format!("?node={node}")).await;
            assert_eq!(status, 200, "{body}");
            let list = body.as_array().unwrap().clone();
            if list.len() >= count {
                Ok(list)
            } else {
                Err(list)
            }
        },
    )
    .await
}

async fn node_gone(app: &TestApp, address: &str, within: Duration) {
    eventually(within, &format!("{address} unregistered"), || async {
        let nodes = app.nodes().await;
        holds(!nodes.iter().any(|n| n["address"] == address), || nodes)
    })
    .await
}

/// The node's state as `GET /nodes` lists it (`None`: not registered).
async fn node_state(app: &TestApp, address: &str) -> Option<String> {
    app.nodes()
        .await
        .iter()
        .find(|n| n["address"] == address)
        .and_then(|n| n["state"].as_str().map(str::to_owned))
}

async fn node_marked_down(app: &TestApp, address: &str) {
    eventually(Duration::from_secs(10), "marked down", || async {
        let state = node_state(app, address).await;
        holds(state.as_deref() == Some("down"), || state)
    })
    .await
}

#[tokio::test]
async fn every_admin_answer_says_what_happened_and_lands_in_the_audit_log() {
    let app = spawn_app().await;
    let node = TestNode::start("told", false);
    let add = json!({ "action": "add", "address": node.address });
    let (status, body) = app.node_command(add.clone()).await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("added")),
        "{body}"
    );
    assert_eq!(body["message"], "OK");
    let (_, body) = app.node_command(add).await;
    assert_eq!(body["result"], "unchanged", "{body}");
    let (_, body) = app
        .node_command(json!({ "action": "add", "address": node.address, "weight": 3 }))
        .await;
    assert_eq!(
        (body["result"].as_str(), body["weight"].as_u64()),
        (Some("reweighted"), Some(3))
    );
    let session = unique("audited");
    app.press(&session).await;
    let (_, body) = app
        .node_command(json!({ "action": "remove", "address": node.address }))
        .await;
    assert_eq!(body["result"], "removed", "{body}");
    assert_eq!(body["sessions"], 1);

    let log = node_events(&app, &node.address, 3).await;
    let actions: Vec<&str> = log.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["removed", "reweighted", "added"], "{log:?}");
    for event in &log {
        assert_eq!(event["actor"], "admin");
        assert_eq!(event["node"], node.address.as_str());
        assert!(event["replica"].as_str().is_some_and(|r| !r.is_empty()));
        assert!(event["at"].as_str().is_some());
    }
    assert_eq!(log[0]["state_before"], "up");
    assert_eq!(log[0]["sessions"], 1);
    assert_eq!(log[2]["state_after"], "up");
    // `since` after everything, and `limit`, narrow it down.
    let (status, body) = events(&app, "?since=2999-01-01T00:00:00Z").await;
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(0)));
    let (_, body) = events(&app, &format!("?node={}&limit=1", node.address)).await;
    assert_eq!(body.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_audit_log_asks_for_the_token_and_refuses_bad_queries() {
    let app = spawn_app().await;
    let response = app
        .http
        .get(format!("{}/events", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    for query in [
        "?since=yesterday",
        "?limit=0",
        "?limit=100000",
        "?node=ftp://x",
    ] {
        let (status, body) = events(&app, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body["code"].as_str().is_some(), "{body}");
    }
}

#[tokio::test]
async fn a_drained_node_takes_no_new_session_serves_its_own_until_they_expire_then_leaves() {
    let app = spawn_app_with(test_config()).await; // health rounds every 200 ms
    let nodes = start_nodes(&app, 2, false).await;
    let (drained, other) = (&nodes[0], &nodes[1]);
    // Sessions on both nodes.
    let sessions: Vec<String> = (0..10).map(|i| unique(&format!("drain{i}"))).collect();
    let mut on_drained = Vec::new();
    for s in &sessions {
        let answer = app.press(s).await;
        if answer.served_by.as_deref() == Some(drained.name.as_str()) {
            on_drained.push(s.clone());
        }
    }
    assert!(
        !on_drained.is_empty(),
        "least-sessions put some on each node"
    );
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": drained.address }))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("draining")),
        "{body}"
    );
    assert_eq!(body["sessions"], on_drained.len());
    // New sessions go elsewhere; the drained node keeps its own.
    for i in 0..10 {
        let answer = app.press(&unique(&format!("new{i}"))).await;
        assert_eq!(answer.served_by.as_deref(), Some(other.name.as_str()));
    }
    for s in &on_drained {
        let answer = app.press(s).await;
        assert_eq!(answer.served_by.as_deref(), Some(drained.name.as_str()));
        assert_eq!(answer.clicks(), 2);
    }
    let listed = app.nodes().await;
    assert!(listed
        .iter()
        .any(|n| n["address"] == drained.address.as_str() && n["state"] == "draining"));
    // Its sessions expire and are archived; then it holds none and goes.
    app.time
        .advance(Duration::from_secs(app.config.session_ttl_secs + 1));
    let now = app.sweeper.clock().now_ms();
    app.sweeper.sweep_once(now).await.unwrap();
    node_gone(&app, &drained.address, Duration::from_secs(10)).await;
    // No click lost: each continues from its archive, on the other node.
    for s in &on_drained {
        let answer = app.press(s).await;
        assert_eq!(answer.served_by.as_deref(), Some(other.name.as_str()));
        assert_eq!(answer.clicks(), 3, "{s}");
    }
    let log = node_events(&app, &drained.address, 3).await;
    assert_eq!(log[0]["action"], "removed", "{log:?}");
    assert_eq!(log[0]["actor"], "drain");
    assert_eq!(log[1]["action"], "draining");
    assert_eq!(log[1]["actor"], "admin");
}

#[tokio::test]
async fn a_drain_deadline_removes_the_node_with_its_sessions_archived() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 2, false).await;
    let (drained, other) = (&nodes[0], &nodes[1]);
    let mut on_drained = Vec::new();
    for i in 0..10 {
        let s = unique(&format!("deadline{i}"));
        if app.press(&s).await.served_by.as_deref() == Some(drained.name.as_str()) {
            on_drained.push(s);
        }
    }
    assert!(!on_drained.is_empty());
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": drained.address, "deadline_secs": 1 }))
        .await;
    assert_eq!(status, 200, "{body}");
    node_gone(&app, &drained.address, Duration::from_secs(10)).await;
    for s in &on_drained {
        let answer = app.press(s).await;
        assert_eq!(answer.served_by.as_deref(), Some(other.name.as_str()));
        assert_eq!(answer.clicks(), 2, "{s}: archived at removal, restored");
    }
    let log = node_events(&app, &drained.address, 3).await;
    assert_eq!(log[0]["reason"], "drain deadline passed", "{log:?}");
}

#[tokio::test]
async fn a_drain_of_an_unknown_or_down_node_or_with_a_bad_deadline_is_refused() {
    let (app, _nodes) = common::spawn_cluster(1).await;
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": "http://127.0.0.1:1" }))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let node = TestNode::start("dead", false);
    app.add_node(&node.address, "dead").await;
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": node.address, "deadline_secs": 0 }))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_deadline")),
        "{body}"
    );
    app.mark_down(&node.address).await;
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": node.address }))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("node_down")),
        "{body}"
    );
}

#[tokio::test]
async fn a_drained_node_that_goes_down_and_comes_back_is_still_drained_and_leaves() {
    let app = spawn_app_with(test_config()).await; // health rounds every 200 ms
    let mut nodes = start_nodes(&app, 2, false).await;
    let mut on_drained = Vec::new();
    for i in 0..10 {
        let s = unique(&format!("downdrain{i}"));
        if app.press(&s).await.served_by.as_deref() == Some(nodes[0].name.as_str()) {
            on_drained.push(s);
        }
    }
    assert!(!on_drained.is_empty());
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": nodes[0].address }))
        .await;
    assert_eq!(status, 200, "{body}");
    let address = nodes[0].address.clone();
    // Down while draining: its sessions move to the other node.
    nodes[0].kill();
    node_marked_down(&app, &address).await;
    // Back, empty: the drain an admin asked for still stands, so it is
    // not put back into service; it holds nothing, so the drain finishes.
    nodes[0].restart();
    node_gone(&app, &address, Duration::from_secs(15)).await;
    // The log is written in the background: wait for the removal itself
    // (a count of events could be met by the four before it).
    let log = eventually(Duration::from_secs(5), "the removal in the log", || async {
        let log = node_events(&app, &address, 1).await;
        if log[0]["action"] == "removed" {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await;
    let recovered = log
        .iter()
        .find(|e| e["action"] == "recovered")
        .unwrap_or_else(|| panic!("no recovery in {log:?}"));
    assert_eq!(recovered["state_after"], "draining", "{recovered}");
    assert_eq!(log[0]["action"], "removed", "{log:?}");
    assert_eq!(log[0]["reason"], "drain finished: no session left");
    // Nothing was placed on it in between, and no click was lost: each
    // session carries on from the archive on the other node.
    for s in &on_drained {
        let answer = app.press(s).await;
        assert_eq!(answer.served_by.as_deref(), Some(nodes[1].name.as_str()));
        let clicks = answer.clicks();
        assert!(
            (1..=2).contains(&clicks),
            "{s}: {clicks}, never above the truth"
        );
    }
}

#[tokio::test]
async fn a_drain_survives_redis_forgetting_while_the_drained_node_is_down() {
    let mut redis = common::process::RedisProcess::start(false);
    let mut config = test_config();
    config.redis_url = redis.url();
    let app = spawn_app_with(config).await;
    let mut nodes = start_nodes(&app, 2, false).await;
    let address = nodes[0].address.clone();
    // Sessions on it, or the drain would finish at once.
    let mut on_drained = 0;
    for i in 0..10 {
        let s = unique(&format!("forgotdrain{i}"));
        on_drained +=
            usize::from(app.press(&s).await.served_by.as_deref() == Some(nodes[0].name.as_str()));
    }
    assert!(on_drained > 0);
    let (status, body) = app
        .node_command(json!({ "action": "drain", "address": address }))
        .await;
    assert_eq!(status, 200, "{body}");
    nodes[0].kill();
    node_marked_down(&app, &address).await;
    // Redis restarts empty: the registry is rebuilt from Postgres, where
    // the node is still on record as draining.
    redis.kill();
    redis.start_again();
    app.wait_rebuilt().await;
    assert_eq!(node_state(&app, &address).await.as_deref(), Some("down"));
    // Back: the drain still stands, so it leaves instead of taking traffic.
    nodes[0].restart();
    node_gone(&app, &address, Duration::from_secs(40)).await;
}

#[tokio::test]
async fn nodes_of_the_configuration_are_recorded_as_added_at_start_up_not_by_an_admin() {
    let node = TestNode::start("configured", false);
    let mut config = test_config();
    config.nodes = vec![node.address.clone()];
    let app = spawn_app_with(config).await;
    let log = node_events(&app, &node.address, 1).await;
    assert_eq!(log[0]["action"], "added", "{log:?}");
    assert_eq!(log[0]["actor"], "startup", "{log:?}");
}

#[tokio::test]
async fn a_node_marked_down_records_the_sessions_it_held() {
    let app = spawn_app_with(test_config()).await;
    let mut doomed = TestNode::start("doomed", false);
    app.add_node(&doomed.address, "doomed").await;
    let sessions: Vec<String> = (0..5).map(|i| unique(&format!("held-{i}"))).collect();
    for session in &sessions {
        assert_eq!(app.press(session).await.clicks(), 1);
    }
    let spare = TestNode::start("spare", false);
    app.add_node(&spare.address, "spare").await;
    doomed.kill();
    assert_eq!(app.press(&sessions[0]).await.status, 200, "failed over");
    let log = node_events(&app, &doomed.address, 2).await;
    let down = log
        .iter()
        .find(|e| e["action"] == "marked_down")
        .unwrap_or_else(|| panic!("no marked_down in {log:?}"));
    assert_eq!(down["sessions"], 5, "{down}");
}
