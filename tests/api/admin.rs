//! Node administration: add, remove, list, auth (design.md §3).

use crate::common;

use common::{spawn_app, spawn_cluster, unique, TestNode};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn adding_a_node_twice_is_idempotent_and_addresses_are_normalised() {
    let app = spawn_app().await;
    let node = TestNode::start("n1", false);
    app.add_node(&node.address, "n1").await;
    // Same node, other spelling: upper-case host, trailing slash.
    let shouted = format!("{}/", node.address.to_uppercase());
    let (status, body) = app
        .node_command(json!({ "action": "add", "address": shouted }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["message"], "OK");
    let nodes = app.nodes().await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(nodes[0]["address"], node.address.as_str());
    assert_eq!(nodes[0]["name"], "n1");
    assert_eq!(nodes[0]["state"], "up");
    assert_eq!(nodes[0]["weight"], 1);
    assert_eq!(nodes[0]["active_sessions"], 0);
    assert_eq!(nodes[0]["in_flight"], 0);
}

#[tokio::test]
async fn adding_a_node_again_keeps_its_sessions_and_counts() {
    let (app, nodes) = spawn_cluster(1).await;
    let session = unique("keep");
    assert_eq!(app.press(&session).await.clicks(), 1);
    app.add_node(&nodes[0].address, "n1").await;
    assert_eq!(app.press(&session).await.clicks(), 2);
}

#[tokio::test]
async fn removing_an_unknown_node_is_404() {
    let app = spawn_app().await;
    let (status, body) = app
        .node_command(json!({ "action": "remove", "address": "http://127.0.0.1:9" }))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "not_found");
}

#[tokio::test]
async fn admin_endpoints_need_the_bearer_token() {
    let app = spawn_app().await;
    let add = json!({ "action": "add", "address": "http://127.0.0.1:9" });
    for token in [None, Some("wrong"), Some("")] {
        let mut request = app.http.post(format!("{}/node", app.address)).json(&add);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "token {token:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["code"], "unauthorized");
        let list = app.http.get(format!("{}/nodes", app.address));
        let list = match token {
            Some(t) => list.bearer_auth(t),
            None => list,
        };
        assert_eq!(list.send().await.unwrap().status(), 401);
    }
    assert!(
        app.nodes().await.is_empty(),
        "an unauthorised add registered a node"
    );
}

#[tokio::test]
async fn bad_node_commands_are_400_and_register_nothing() {
    let app = spawn_app().await;
    let cases = [
        json!({ "action": "explode", "address": "http://127.0.0.1:9" }),
        json!({ "action": "add", "address": "127.0.0.1:9" }),
        json!({ "action": "add", "address": "ftp://127.0.0.1:9" }),
        json!({ "action": "add", "address": "http://user:pw@127.0.0.1:9" }),
        json!({ "action": "add", "address": "http://127.0.0.1:9/path" }),
        json!({ "action": "add", "address": "http://127.0.0.1:9?q=1" }),
        json!({ "action": "add", "address": "http://127.0.0.1:9#f" }),
        json!({ "action": "add", "address": "" }),
        json!({ "action": "add", "address": "http://127.0.0.1:9", "weight": 0 }),
        json!({ "action": "add" }),
        json!({ "address": "http://127.0.0.1:9" }),
        json!({ "action": "add", "address": 42 }),
    ];
    for case in cases {
        let (status, body) = app.node_command(case.clone()).await;
        assert_eq!(status, 400, "{case} -> {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
    assert!(app.nodes().await.is_empty());
}

#[tokio::test]
async fn an_unreachable_node_is_registered_down_and_takes_no_sessions() {
    let (app, _nodes) = spawn_cluster(1).await;
    let (status, answer) = app
        .node_command(serde_json::json!({ "action": "add", "address": "http://127.0.0.1:9", "name": "ghost" }))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["state"], "down", "{answer}");
    let reason = answer["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("did not answer"), "{answer}");
    let ghost = app
        .nodes()
        .await
        .into_iter()
        .find(|n| n["name"] == "ghost")
        .unwrap();
    assert_eq!(ghost["state"], "down");
    for i in 0..10 {
        let answer = app.press(&format!("{}-{i}", unique("ghost"))).await;
        assert_eq!(answer.served_by.as_deref(), Some("n1"));
    }
}

#[tokio::test]
async fn removing_a_node_archives_its_sessions_which_continue_elsewhere() {
    let (app, nodes) = spawn_cluster(2).await;
    let tag = unique("remove");
    let sessions: Vec<String> = (0..20).map(|i| format!("{tag}-{i}")).collect();
    let mut on_removed = Vec::new();
    for session in &sessions {
        for _ in 0..3 {
            if app.press(session).await.served_by.as_deref() == Some("n1") {
                on_removed.push(session.clone());
            }
        }
    }
    on_removed.dedup();
    assert!(!on_removed.is_empty());
    let removed = &nodes[0];
    let body = app.remove_node(&removed.address).await;
    assert_eq!(body["message"], "OK");
    assert_eq!(body["archived"], true);
    assert_eq!(
        removed.node.session_count().await,
        0,
        "the node was not cleaned"
    );
    let remaining = app.nodes().await;
    assert_eq!(remaining.len(), 1);
    for session in &sessions {
        let answer = app.press(session).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.clicks(), 4, "{session} lost or gained clicks");
        assert_eq!(answer.served_by.as_deref(), Some("n2"));
    }
    for session in &on_removed {
        let total = app.ctx.archive.total(session).await.unwrap();
        assert_eq!(
            total,
            Some(3),
            "{session} was archived with its 3 clicks before moving"
        );
    }
    assert_eq!(app.nodes().await[0]["active_sessions"], 20);
}

#[tokio::test]
async fn removing_a_dead_node_still_removes_it() {
    let (app, mut nodes) = spawn_cluster(2).await;
    nodes[0].kill();
    let body = app.remove_node(&nodes[0].address).await;
    assert_eq!(body["archived"], false);
    assert_eq!(app.nodes().await.len(), 1);
}

/// A dead node that held no session lost nothing: the audit log says so,
/// not that its clicks are lost.
#[tokio::test]
async fn removing_a_dead_node_that_held_no_session_records_nothing_to_archive() {
    let (app, mut nodes) = spawn_cluster(2).await;
    nodes[0].kill();
    let body = app.remove_node(&nodes[0].address).await;
    assert_eq!(
        (body["archived"].as_bool(), body["sessions"].as_u64()),
        (Some(false), Some(0))
    );
    let path = format!("/events?node={}&limit=10", nodes[0].address);
    let reason = testkit::eventually(Duration::from_secs(5), "the removal's event", || async {
        let events = app.admin_get(&path).await;
        let removed = events
            .as_array()
            .and_then(|all| all.iter().find(|e| e["action"] == "removed").cloned());
        removed
            .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
            .ok_or(events)
    })
    .await;
    assert!(reason.contains("nothing to archive"), "{reason}");
    assert!(!reason.contains("lost"), "{reason}");
}

#[tokio::test]
async fn node_names_and_weights_are_kept() {
    let app = spawn_app().await;
    let node = TestNode::start("alpha", false);
    let (status, _) = app
        .node_command(
            json!({ "action": "add", "address": node.address, "name": "alpha", "weight": 5 }),
        )
        .await;
    assert_eq!(status, 200);
    let nodes = app.nodes().await;
    assert_eq!(nodes[0]["name"], "alpha");
    assert_eq!(nodes[0]["weight"], 5);
}

#[tokio::test]
async fn a_node_added_without_a_name_takes_the_name_it_reports() {
    let app = spawn_app().await;
    let node = TestNode::start("reported-name", false);
    let (status, _) = app
        .node_command(json!({ "action": "add", "address": node.address }))
        .await;
    assert_eq!(status, 200);
    assert_eq!(app.nodes().await[0]["name"], "reported-name");
    assert_eq!(
        app.press(&unique("named")).await.served_by.as_deref(),
        Some("reported-name")
    );
}

#[tokio::test]
async fn adding_a_known_node_with_a_new_weight_re_weights_it_at_run_time() {
    let mut config = common::test_config();
    config.strategy = balancing::StrategyKind::SmoothWeighted;
    let app = common::spawn_app_with(config).await;
    let (a, b) = (TestNode::start("a", false), TestNode::start("b", false));
    app.add_node(&a.address, "a").await;
    app.add_node(&b.address, "b").await;
    let served = |app: &common::TestApp| {
        let (http, url) = (app.http.clone(), app.address.clone());
        async move {
            let mut a = 0;
            for i in 0..40 {
                let r = http.get(format!("{url}/process/{i}")).send().await.unwrap();
                a += usize::from(r.headers()["x-served-by"] == "a");
            }
            a
        }
    };
    assert_eq!(served(&app).await, 20, "equal weights share evenly");
    let (status, body) = app
        .node_command(json!({ "action": "add", "address": a.address, "weight": 3 }))
        .await;
    assert_eq!(status, 200, "{body}");
    let nodes = app.nodes().await;
    let weight_of =
        |name: &str| nodes.iter().find(|n| n["name"] == name).unwrap()["weight"].clone();
    assert_eq!(weight_of("a"), 3);
    assert_eq!(weight_of("b"), 1);
    assert_eq!(served(&app).await, 30, "3:1 after the re-weighting");
    // Re-adding without a weight changes nothing.
    app.add_node(&a.address, "a").await;
    assert_eq!(
        app.nodes().await.iter().find(|n| n["name"] == "a").unwrap()["weight"],
        3
    );
}

#[tokio::test]
async fn concurrent_reloads_of_the_view_read_the_registry_once_between_them() {
    let (app, _nodes) = spawn_cluster(2).await;
    let registry = app.ctx.admin.registry().clone();
    let before = registry.reads();
    let reloads = (0..20).map(|_| {
        let registry = registry.clone();
        async move { registry.refresh().await }
    });
    for reloaded in futures::future::join_all(reloads).await {
        reloaded.unwrap();
    }
    let reads = registry.reads() - before;
    // One read started after all twenty asked serves them all (the health
    // checker's own reload, every 200 ms here, may add one or two).
    assert!((1..=3).contains(&reads), "{reads} reads for 20 reloads");
    assert_eq!(app.nodes().await.len(), 2);
}
