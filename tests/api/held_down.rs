//! A node declared down because a `/clean` to it timed out (design.md,
//! "Held down"): that clean may still reach the node after it serves again.
//! One without clean tokens cannot tell it from a new clean, so it stays
//! down until an admin adds it again; one with tokens recovers by itself.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{extract::State, routing::get, routing::post, Json, Router};
use common::{short_lived_config, spawn_app_with, unique, TestApp};
use serde_json::{json, Value};
use testkit::{eventually, holds};

/// A node of the task's API whose `/clean` can be made to hang: the
/// request reaches it and is answered (and acted on) only once released,
/// long after the balancer gave up on it.
struct StallingNode {
    address: String,
    counts: Mutex<HashMap<String, u64>>,
    stall_cleans: AtomicBool,
    /// Whether its `/health` says it takes clean tokens.
    tokens: bool,
}

impl StallingNode {
    async fn start(tokens: bool) -> Arc<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let node = Arc::new(Self {
            address: format!("http://{}", listener.local_addr().unwrap()),
            counts: Mutex::default(),
            stall_cleans: AtomicBool::new(false),
            tokens,
        });
        let router = Router::new()
            .route("/press", post(press))
            .route("/clean", post(clean))
            .route("/health", get(health))
            .with_state(node.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        node
    }
}

async fn press(State(node): State<Arc<StallingNode>>, Json(body): Json<Value>) -> String {
    let id = body["session_id"].as_str().unwrap_or_default().to_owned();
    let mut counts = node.counts.lock().unwrap();
    let count = counts.entry(id).or_default();
    *count += 1;
    format!("You clicked {count} times")
}

async fn clean(State(node): State<Arc<StallingNode>>) -> &'static str {
    while node.stall_cleans.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.counts.lock().unwrap().clear();
    "OK"
}

async fn health(State(node): State<Arc<StallingNode>>) -> Json<Value> {
    let features: &[&str] = if node.tokens { &["clean_tokens"] } else { &[] };
    Json(json!({ "features": features }))
}

fn node_view(nodes: &[Value], address: &str) -> Value {
    nodes
        .iter()
        .find(|n| n["address"] == address)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Two nodes; a session pressed on `stalling` expires, and the sweep's
/// clean of the node times out (the node declared
/// down with its clean still pending there) and is let through once the
/// balancer gave up.
async fn a_clean_that_timed_out(
    redis_url: Option<String>,
    tokens: bool,
) -> (TestApp, Arc<StallingNode>, Arc<StallingNode>) {
    let mut config = short_lived_config(1);
    config.sweep_interval_secs = 3600; // only the test sweeps
    if let Some(url) = redis_url {
        config.redis_url = url;
    }
    let app = spawn_app_with(config).await;
    let stalling = StallingNode::start(tokens).await;
    app.add_node(&stalling.address, &unique("stalling")).await;
    let session = unique("held");
    assert_eq!(app.press(&session).await.clicks(), 1);
    let other = StallingNode::start(false).await;
    app.add_node(&other.address, &unique("other")).await;

    stalling.stall_cleans.store(true, Ordering::SeqCst);
    app.time.advance(Duration::from_millis(1100)); // the session expires
    let swept = app
        .sweeper
        .sweep_once(app.sweeper.clock().now_ms())
        .await
        .unwrap();
    assert_eq!(
        swept.failed_nodes,
        std::slice::from_ref(&stalling.address),
        "{swept:?}"
    );
    let node = node_view(&app.nodes().await, &stalling.address);
    assert_eq!(node["state"], "down", "{node}");
    // The late clean reaches the node now; it answers every check since.
    stalling.stall_cleans.store(false, Ordering::SeqCst);
    (app, stalling, other)
}

#[tokio::test]
async fn a_node_without_tokens_whose_clean_timed_out_stays_down_until_an_admin_adds_it() {
    let (app, stalling, other) = a_clean_that_timed_out(None, false).await;
    let node = node_view(&app.nodes().await, &stalling.address);
    assert_eq!(node["held_down"], true, "{node}");
    let reason = node["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("until an admin adds it again"), "{reason}");

    still_held_when_the_health_checks_recover_another(&app, &stalling, &other).await;

    let (status, body) = app
        .node_command(json!({ "action": "add", "address": stalling.address, "weight": 3 }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["weight"], 3, "the add's weight applies: {body}");
    assert_eq!(
        (&body["result"], &body["state"]),
        (&json!("released"), &json!("up")),
        "{body}"
    );
    let node = node_view(&app.nodes().await, &stalling.address);
    assert_eq!(
        (&node["state"], &node["held_down"]),
        (&json!("up"), &json!(false)),
        "{node}"
    );
    // The audit log says why it stayed down, and that an admin lifted it.
    let path = format!("/events?node={}&limit=20", stalling.address);
    eventually(Duration::from_secs(5), "the hold's events", || async {
        let events = app.admin_get(&path).await;
        let all = events.as_array().cloned().unwrap_or_default();
        let held = all.iter().any(|e| {
            e["action"] == "marked_down"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("until an admin adds it again"))
        });
        let released = all.iter().any(|e| e["action"] == "released");
        holds(held && released, || events)
    })
    .await;
}

/// The evidence that the health checks had their chance: `other`, marked
/// down after `stalling` was (and answering as long), recovers by them.
async fn still_held_when_the_health_checks_recover_another(
    app: &TestApp,
    stalling: &StallingNode,
    other: &StallingNode,
) {
    app.mark_down(&other.address).await;
    eventually(Duration::from_secs(10), "other recovered", || async {
        let state = node_view(&app.nodes().await, &other.address)["state"].clone();
        holds(state == "up", || state)
    })
    .await;
    let node = node_view(&app.nodes().await, &stalling.address);
    assert_eq!(
        (&node["state"], &node["held_down"]),
        (&json!("down"), &json!(true)),
        "{node}"
    );
}

/// The hold is in Postgres too: a registry rebuilt after Redis restarted
/// empty neither wipes the node (a clean the late one could follow) nor
/// brings it up.
#[tokio::test]
async fn a_node_held_down_stays_held_when_redis_forgets() {
    let mut redis = common::process::RedisProcess::start(false);
    let (app, stalling, other) = a_clean_that_timed_out(Some(redis.url()), false).await;
    redis.kill();
    redis.start_again();
    app.wait_rebuilt().await;
    let node = node_view(&app.nodes().await, &stalling.address);
    let reason = node["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("until an admin adds it again"), "{node}");
    still_held_when_the_health_checks_recover_another(&app, &stalling, &other).await;
}

#[tokio::test]
async fn a_node_with_clean_tokens_whose_clean_timed_out_recovers_by_itself() {
    let (app, stalling, _other) = a_clean_that_timed_out(None, true).await;
    let node = node_view(&app.nodes().await, &stalling.address);
    assert_eq!(node["held_down"], false, "{node}");
    eventually(Duration::from_secs(10), "recovered", || async {
        let state = node_view(&app.nodes().await, &stalling.address)["state"].clone();
        holds(state == "up", || state)
    })
    .await;
}
