//! The lease-guarded mapping cache (design.md §4.9, §4.11): an existing
//! session costs no Redis round trip once cached, and a replica that cannot
//! hear of fences stops trusting its cache within its lease.

use crate::common;

use std::time::Duration;

use common::{spawn_app_with, start_nodes, test_config, unique, TcpProxy};

/// A replica whose Redis goes through a proxy the test can watch and cut.
async fn app_behind_redis_proxy(lease_ms: u64) -> (common::TestApp, TcpProxy) {
    let redis = TcpProxy::start(testkit::single_redis_addr()).await;
    let mut config = test_config();
    config.redis_url = format!("redis://{}", redis.addr);
    config.lease_ms = lease_ms;
    (spawn_app_with(config).await, redis)
}

#[tokio::test]
async fn an_existing_session_costs_no_redis_round_trip_once_cached() {
    let (app, redis) = app_behind_redis_proxy(3000).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let session = unique("cached");
    assert_eq!(app.press(&session).await.clicks(), 1);
    let before = redis.bytes_up();
    let started = tokio::time::Instant::now();
    for expected in 2..=201 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let bytes = redis.bytes_up() - before;
    let seconds = started.elapsed().as_secs_f64().ceil();
    // Each `HMGET` of the mapping is about 90 bytes: 200 of them would be
    // 18 kB. What goes to Redis is the heartbeat and fence poll (a few
    // hundred bytes a second; a poll may fall on either side of the
    // window, hence the second more).
    assert!(
        (bytes as f64) < 1_000.0 * (seconds + 1.0),
        "{bytes} bytes sent to Redis in {seconds} s for 200 cached presses"
    );
}

#[tokio::test]
async fn a_replica_cut_off_from_its_fence_channel_stops_serving_from_its_cache_within_the_lease() {
    let lease = Duration::from_millis(2000);
    let (app, redis) = app_behind_redis_proxy(lease.as_millis() as u64).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let session = unique("lease");
    assert_eq!(app.press(&session).await.clicks(), 1);
    redis.cut();
    let cut_at = tokio::time::Instant::now();
    let first = app.press(&session).await;
    assert_eq!(
        first.status, 200,
        "served from the cache at first: {first:?}"
    );
    let mut last = first.clicks();
    // A press out when the lease lapses was counted by the node but is not
    // shown (504 replica_paused): no clean could have moved the session
    // meanwhile, so the next count shown includes it.
    let unshown = loop {
        let answer = app.press(&session).await;
        if answer.status == 503 {
            break 0;
        }
        if answer.status == 504 {
            assert!(answer.body.contains("replica_paused"), "{answer:?}");
            break 1;
        }
        last = answer.clicks();
        // The lease was renewed at most a heartbeat (1 s) before the cut.
        assert!(
            cut_at.elapsed() < lease + Duration::from_millis(1500),
            "still served from the cache {:?} after the cut",
            cut_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    redis.restore();
    let answer = common::press_until_ok(&app, &session).await;
    assert_eq!(
        answer.clicks(),
        last + unshown + 1,
        "nothing counted twice or lost"
    );
}
