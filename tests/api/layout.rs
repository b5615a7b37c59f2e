//! The storage layout's version: a replica serves only the layout it was
//! built for, and says what to do when Redis holds another.

use std::time::Duration;

use crate::common;

use common::test_config;
use nodes_control::store::{Layout, LAYOUT};
use nodes_control::Application;

/// Sets `key` on the server that owns it (the others, on a cluster,
/// answer MOVED and are skipped).
async fn set_on_owner(key: &str, value: &str) {
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut conn)
            .await;
        if set.is_ok() {
            return;
        }
    }
    panic!("no Redis server took {key}");
}

/// The error a replica refuses to start with, on a prefix where `found`
/// (a layout version, or none) stands beside a registry.
async fn refusal_to_start(found: Option<&str>) -> String {
    let config = test_config();
    let key = |name: &str| format!("{}{{ctl}}{name}", config.redis_key_prefix);
    set_on_owner(&key("registry"), "an-epoch").await;
    if let Some(found) = found {
        set_on_owner(&key("layout"), found).await;
    }
    common::ensure_database().await;
    let prefix = config.redis_key_prefix.clone();
    let error = Application::build(config)
        .await
        .err()
        .expect("a replica started on a layout it does not know");
    common::teardown::joined(&prefix);
    common::teardown::left(&prefix);
    format!("{error:#}")
}

#[tokio::test]
async fn a_replica_refuses_to_start_on_a_layout_it_does_not_know_and_says_what_to_do() {
    let error = refusal_to_start(Some("999")).await;
    assert!(error.contains("storage layout 999"), "{error}");
    assert!(error.contains(&format!("reads layout {LAYOUT}")), "{error}");
    assert!(error.contains("Stop every replica"), "{error}");
}

#[tokio::test]
async fn a_replica_refuses_to_start_on_state_a_commit_before_0_1_wrote() {
    let error = refusal_to_start(None).await;
    assert!(error.contains("before 0.1.0"), "{error}");
}

#[tokio::test]
async fn a_fresh_prefix_gets_this_releases_layout() {
    let app = common::spawn_app().await;
    let store = &app.ctx.store;
    assert_eq!(store.replicas.layout().await.unwrap(), Layout::Known);
    let version: Option<String> = store_get(store, "layout").await;
    assert_eq!(version, Some(LAYOUT.to_string()));
}

async fn store_get(store: &nodes_control::store::Store, name: &str) -> Option<String> {
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        if let Ok(value) = redis::cmd("GET")
            .arg(store.core().key(&[name]))
            .query_async(&mut conn)
            .await
        {
            return value;
        }
    }
    panic!("no Redis server answered for {name}");
}

/// A newer release took the prefix over (after every replica of this one
/// should have stopped): one still serving stops at its next registry
/// check, and says why, rather than write its layout over the other's.
#[tokio::test]
async fn a_serving_replica_stops_when_another_layout_appears() {
    let config = test_config();
    common::ensure_database().await;
    let app = Application::build(config.clone()).await.unwrap();
    let store = app.context().store.clone();
    let running = tokio::spawn(app.run_until_stopped(std::future::pending()));
    assert_eq!(
        store_get(&store, "layout").await,
        Some(LAYOUT.to_string()),
        "written at start"
    );
    set_on_owner(&store.core().key(&["layout"]), "999").await;
    let stopped = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the replica went on serving another layout")
        .unwrap();
    let error = stopped.expect_err("stopped without an error").to_string();
    assert!(error.contains("storage layout 999"), "{error}");
    common::teardown::joined(&config.redis_key_prefix);
    common::teardown::left(&config.redis_key_prefix);
}
