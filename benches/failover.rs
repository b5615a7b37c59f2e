//! Failover benchmark (issue 46): how long the failover of a node holding
//! `FAILOVER_SESSIONS` (10,000) sessions takes with the hand-over (the
//! replicas' shown totals archived on the node's behalf) and without, and
//! what the replica's mapping cache holds per session at a million:
//!
//!     cargo bench --bench failover          # FAILOVER_SESSIONS=10000 CACHE_SESSIONS=1000000
//!
//! Each run uses its own key prefix and session ids, and deletes its keys.

use std::time::Instant;

use futures::StreamExt;
use nodes_control::lifecycle::fence::Shown;
use nodes_control::session::cache::MappingCache;
use nodes_control::session::SessionId;
use nodes_control::store::{Mapping, NodeState};
use nodes_control::{Application, Config};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One failover of a node holding `sessions` sessions, each pressed once
/// through the balancer; returns its wall time in ms and the sessions moved.
async fn one_failover(sessions: usize, hand_over: bool) -> (f64, usize) {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("bench-{run}:");
    let mut config = Config::new(&testkit::database_url(), &testkit::redis_url(), "bench");
    config.redis_key_prefix = prefix.clone();
    config.sweep_interval_secs = 3600;
    config.health_check_interval_ms = 60_000;
    config.failover_hand_over = hand_over;
    let app = Application::build(config)
        .await
        .expect("Redis and Postgres answer");
    let ctx = app.context();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let serving = tokio::spawn(app.run_until_stopped(async move { stopped.cancelled().await }));
    let nodes = testkit::spawn_cluster("f", 2, false).await;
    // Every session on the first node: the second joins afterwards.
    ctx.admin.add(&nodes[0].address, None, None).await.unwrap();
    futures::stream::iter(0..sessions)
        .map(|i| {
            let sessions = &ctx.sessions;
            let id = SessionId::parse(format!("{run}-{i}")).unwrap();
            async move { sessions.press(&id).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    ctx.admin.add(&nodes[1].address, None, None).await.unwrap();
    let dead = &nodes[0].address;
    ctx.store
        .nodes
        .set_node_state(dead, NodeState::Down, &[NodeState::Up])
        .await
        .unwrap();
    let started = Instant::now();
    let moved = ctx.admin.registry().fail_over(dead).await.unwrap();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    stop.cancel();
    let _ = serving.await;
    // This run's keys (a single Redis).
    testkit::unlink_prefix(&testkit::redis_url(), &prefix, |_| true)
        .await
        .unwrap();
    (ms, moved)
}

/// Resident memory of this process, in bytes (Linux).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; nothing to list
    }
    testkit::ensure_database().await;
    let sessions = env_or("FAILOVER_SESSIONS", 10_000);
    for hand_over in [false, true, false, true] {
        let (ms, moved) = one_failover(sessions, hand_over).await;
        println!("failover of a node with {moved} sessions, hand_over={hand_over}: {ms:.1} ms");
    }

    // The cache a replica keeps for a million live sessions, each with a
    // total shown, and the hand-over's scan of it for one node.
    let cached = env_or("CACHE_SESSIONS", 1_000_000);
    let lease = std::sync::Arc::new(nodes_control::lifecycle::fence::Lease::new(
        protocol::silence::Silence::new(std::time::Duration::from_secs(3)),
    ));
    let before = rss();
    let cache = MappingCache::new(lease);
    for i in 0..cached {
        let mapping = Mapping {
            node: format!("http://127.0.0.1:{}", 9000 + i % 3),
            base: 0,
            expires_at_ms: 1_800_000_000_000 + i as i64,
        };
        let id = format!("{:032x}-{i}", i);
        cache.put(&id, &mapping, 0);
        cache.answered(&id, &mapping, 7);
    }
    let after = rss();
    println!(
        "mapping cache: {cached} sessions, {:.0} MiB resident, {:.0} bytes a session (8 of them the total shown)",
        (after - before) as f64 / 1048576.0,
        (after - before) as f64 / cached as f64
    );
    let started = Instant::now();
    let handed = cache.shown_on("http://127.0.0.1:9000").len();
    println!(
        "hand-over scan for one node: {handed} sessions in {:.1} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
}
