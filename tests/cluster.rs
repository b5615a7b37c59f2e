//! On a Redis Cluster (a loopback cluster of the test's own, three
//! primaries): slots move under load without an error, a repeat or a gap;
//! a primary that restarts empty makes the registry rebuild and no count
//! is lost. A binary of its own, so that its clusters do not load the
//! machine under the API suite's timings. The rest of the suite runs on a
//! cluster too in CI (`make test-cluster`).

#[allow(dead_code)] // the cluster tests use part of the kit
mod common;
#[path = "cluster/loopback.rs"]
mod loopback;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::workload::{assert_counts_exact, press_for, Answers};
use common::{spawn_app_with, start_nodes, test_config, unique};
use loopback::LoopbackCluster;

/// The hash tag of a session's group (store/sessions/groups.rs): `s:` and the first
/// two hex digits of SHA-1(id).
fn group_tag(session: &str) -> String {
    let digest = sha1_smol::Sha1::from(session).digest().to_string();
    format!("{{s:{}}}", &digest[..2])
}

/// Presses `sessions` (after `delay`) in rounds of a second while
/// `moving` holds, and one round more: users press before, during and
/// after the move.
async fn press_while(
    apps: &[Arc<common::TestApp>],
    sessions: &[String],
    moving: &AtomicBool,
    delay: Duration,
) -> Answers {
    tokio::time::sleep(delay).await;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut all = Answers::new();
    loop {
        let last = !moving.load(Ordering::SeqCst);
        for (session, seen) in press_for(apps, sessions, 8, Duration::from_secs(1)).await {
            all.entry(session).or_default().extend(seen);
        }
        if last {
            return all;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the slots never finished moving"
        );
    }
}

fn config_on(cluster: &LoopbackCluster) -> nodes_control::Config {
    let mut config = test_config();
    config.redis_url = cluster.url().to_owned();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_slots_under_load_answers_every_press_without_a_repeat_or_gap() {
    moving_slots_under_load().await;
}

/// Presses of sessions placed before and while every slot they use (and
/// the control slot) moves to another primary: every answer a 200
/// (`press_for` fails on any other), none repeated or skipped.
async fn moving_slots_under_load() {
    let cluster = Arc::new(LoopbackCluster::start());
    let config = config_on(&cluster);
    let first = Arc::new(spawn_app_with(config.clone()).await);
    let _nodes = start_nodes(&first, 3, false).await;
    let apps = vec![first, Arc::new(spawn_app_with(config).await)];
    let tag = unique("reshard");
    let early: Vec<String> = (0..20).map(|i| format!("{tag}-a{i}")).collect();
    // Placed while the slots move: reserve in the control slot, claim in
    // a group that may be half-way to another primary.
    let late: Vec<String> = (0..20).map(|i| format!("{tag}-b{i}")).collect();
    let mut slots = BTreeSet::from([cluster.slot_of("{ctl}").await]);
    for session in early.iter().chain(&late) {
        slots.insert(cluster.slot_of(&group_tag(session)).await);
    }
    let moving = Arc::new(AtomicBool::new(true));
    let mover = {
        let (cluster, slots, moving) = (cluster.clone(), slots.clone(), moving.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut moved = Vec::new();
            for slot in slots {
                let from = cluster.owner(slot, cluster.base).await;
                let to = cluster.ports()[((from - cluster.base + 1) % 3) as usize];
                let keys = cluster.move_slot(slot, to).await;
                moved.push((slot, to, keys));
            }
            moving.store(false, Ordering::SeqCst);
            moved
        })
    };
    let (early_answers, late_answers) = tokio::join!(
        press_while(&apps, &early, &moving, Duration::ZERO),
        press_while(&apps, &late, &moving, Duration::from_millis(600))
    );
    let moved = mover.await.unwrap();
    // press_for failed already on any answer but 200.
    assert_counts_exact(&early_answers);
    assert_counts_exact(&late_answers);
    assert_eq!(moved.len(), slots.len());
    assert!(
        moved.iter().map(|(_, _, keys)| keys).sum::<usize>() >= slots.len(),
        "every moved slot took its keys along: {moved:?}"
    );
    for (slot, to, _) in &moved {
        for asked in cluster.ports() {
            assert_eq!(cluster.owner(*slot, asked).await, *to, "slot {slot}");
        }
    }
    for answers in [&early_answers, &late_answers] {
        assert_eq!(answers.len(), 20);
        assert!(answers.values().all(|seen| seen.len() >= 5), "{answers:?}");
    }
}

/// A primary (0, 1 or 2) that does not hold the control slot, and how
/// many of `sessions` live in its groups.
async fn primary_without_the_control_slot(
    cluster: &LoopbackCluster,
    sessions: &[String],
) -> (u16, usize) {
    let control = cluster
        .owner(cluster.slot_of("{ctl}").await, cluster.base)
        .await;
    let victim = (0..3).find(|n| cluster.base + n != control).unwrap();
    let mut held = 0;
    for session in sessions {
        let owner = cluster
            .owner(cluster.slot_of(&group_tag(session)).await, cluster.base)
            .await;
        held += usize::from(owner == cluster.base + victim);
    }
    (victim, held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_restarts_empty_makes_the_registry_rebuild_and_no_click_is_lost() {
    let cluster = LoopbackCluster::start();
    let app = spawn_app_with(config_on(&cluster)).await;
    let _nodes = start_nodes(&app, 3, false).await;
    let tag = unique("amnesia");
    let sessions: Vec<String> = (0..30).map(|i| format!("{tag}-{i}")).collect();
    for session in &sessions {
        for expected in 1..=3 {
            assert_eq!(app.press(session).await.clicks(), expected);
        }
    }
    // A primary that does not hold the control slot: only some groups
    // forget, and the registry must notice all the same.
    let (victim, forgotten) = primary_without_the_control_slot(&cluster, &sessions).await;
    assert!(forgotten > 0, "some sessions live on the crashed primary");
    cluster.crash(victim);
    app.wait_rebuilt().await;
    // Every node archived what it held before anything was placed again:
    // each session goes on from its exact count, wherever it lands.
    for session in &sessions {
        let answer = common::press_until_ok(&app, session).await;
        assert_eq!(answer.clicks(), 4, "{session}");
    }
}

/// A primary that comes back on its last snapshot (kill -9 after an RDB,
/// as Redis's `save` rules leave it): its groups look complete, their
/// epochs are in the snapshot, but the sessions placed since are not. Its
/// groups keep the identity of the primary that held them: the registry
/// is rebuilt, every node archiving first, and each session goes on from
/// its exact count, those placed after the snapshot too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_back_on_an_older_snapshot_makes_the_registry_rebuild_and_no_session_restarts() {
    let cluster = LoopbackCluster::start();
    let app = spawn_app_with(config_on(&cluster)).await;
    let _nodes = start_nodes(&app, 3, false).await;
    let tag = unique("rollback");
    let old: Vec<String> = (0..30).map(|i| format!("{tag}-old-{i}")).collect();
    let new: Vec<String> = (0..30).map(|i| format!("{tag}-new-{i}")).collect();
    for session in &old {
        for expected in 1..=3 {
            assert_eq!(app.press(session).await.clicks(), expected);
        }
    }
    let (victim, on_victim) = primary_without_the_control_slot(&cluster, &new).await;
    assert!(
        on_victim > 0,
        "some new sessions live on the primary rolled back"
    );
    cluster.save(victim);
    // What the snapshot does not hold: more presses, and new sessions.
    for session in &old {
        for expected in 4..=5 {
            assert_eq!(app.press(session).await.clicks(), expected);
        }
    }
    for session in &new {
        for expected in 1..=2 {
            assert_eq!(app.press(session).await.clicks(), expected);
        }
    }
    cluster.roll_back(victim);
    app.wait_rebuilt().await;
    for (sessions, next) in [(&old, 6), (&new, 3)] {
        for session in sessions {
            let answer = common::press_until_ok(&app, session).await;
            assert_eq!(answer.clicks(), next, "{session}");
        }
    }
}
