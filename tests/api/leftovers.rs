//! What the tests leave in the developer's Redis: nothing that stays.

use crate::common;

use std::time::Duration;

use common::{spawn_cluster, unique};

/// Keys under `prefix` without an expiry, on every server (each primary of
/// a cluster).
async fn lasting_keys(prefix: &str) -> Vec<String> {
    let mut lasting = Vec::new();
    for (server, key) in testkit::keys_under(prefix).await {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let ttl: i64 = redis::cmd("TTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if ttl < 0 {
            lasting.push(key);
        }
    }
    lasting
}

/// An application that served presses and is dropped while its loops still
/// run leaves no key without an expiry under its prefix: its teardown
/// tombstones the prefix's layout (which stops a replica still running)
/// before it deletes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_application_leaves_no_lasting_key_under_its_prefix() {
    let (app, nodes) = spawn_cluster(2).await;
    for i in 0..20 {
        app.press(&unique(&format!("left-{i}"))).await;
    }
    let prefix = app.config.redis_key_prefix.clone();
    let written = lasting_keys(&prefix).await.len();
    assert!(
        written > 256,
        "the application wrote its registry: {written} keys"
    );
    drop(app);
    drop(nodes);
    // Longer than a registry check (a second): an application still
    // running would have declared an empty registry complete again by now.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let lasting = lasting_keys(&prefix).await;
    assert!(
        lasting.is_empty(),
        "keys left without an expiry: {lasting:?}"
    );
}
