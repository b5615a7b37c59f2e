//! Session lifecycle without lost clicks (design.md §4.3-4.7): expiry, sweep,
//! fold, fence, restore after removal and failure.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::workload::{
    assert_counts_exact, expire_on_the_way, press_for, press_through_faults, UNKNOWN,
};
use common::{now_ms, short_lived_config, spawn_app_on, spawn_app_with, start_nodes, unique};
use nodes_control::clock::ManualTime;
use nodes_control::store::FenceReason;

fn session_ids(tag: &str, n: usize) -> Vec<String> {
    let tag = unique(tag);
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// The sessions of a lifecycle workload, in session time: a TTL of 2 s,
/// lived four times faster than real time (0.4 s per 0.1 s), swept at
/// every step.
const TTL_SECS: u64 = 2;
const TICK: Duration = Duration::from_millis(100);
const STEP: Duration = Duration::from_millis(400);
/// Real time of a workload: ten seconds of session time, five lives.
const RUN: Duration = Duration::from_millis(2500);

/// 200 sessions pressed concurrently through five expiries each.
async fn two_hundred_sessions_through_expiries(clean_all: bool, replicas: usize, remove_one: bool) {
    let mut config = short_lived_config(TTL_SECS);
    config.sweep_interval_secs = 3600; // the workload's own sweeps only
    let time = ManualTime::new();
    let first = spawn_app_on(config.clone(), time.clone()).await;
    let nodes = start_nodes(&first, 3, clean_all).await;
    let mut apps = vec![Arc::new(first)];
    for _ in 1..replicas {
        apps.push(Arc::new(spawn_app_on(config.clone(), time.clone()).await));
    }
    let sessions = session_ids("life", 200);
    let removal = remove_one.then(|| {
        let app = apps[0].clone();
        let address = nodes[1].address.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RUN * 2 / 5).await;
            app.remove_node(&address).await
        })
    });
    let started_ms = apps[0].sweeper.clock().now_ms();
    let sweeps = expire_on_the_way(&apps, TICK, STEP, RUN);
    let answers = press_for(&apps, &sessions, 20, RUN).await;
    assert!(sweeps.await.unwrap() >= 5, "several sweeps ran");
    let lived_ms = apps[0].sweeper.clock().now_ms() - started_ms;
    assert!(
        lived_ms >= 4 * TTL_SECS as i64 * 1000,
        "the sessions lived several times: {lived_ms} ms of session time"
    );
    if let Some(removal) = removal {
        removal.await.unwrap();
        assert_eq!(apps[0].nodes().await.len(), 2);
    }
    assert_eq!(answers.len(), 200);
    assert_counts_exact(&answers);
    // The sweep really ran: every session was archived at least once.
    for session in &sessions {
        let total = apps[0].ctx.archive.total(session).await.unwrap();
        assert!(total.is_some_and(|t| t > 0), "{session} was never archived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_through_expiries_and_sweeps() {
    two_hundred_sessions_through_expiries(false, 1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_through_expiries_with_clean_all_nodes() {
    two_hundred_sessions_through_expiries(true, 1, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_when_a_node_is_removed_mid_run() {
    two_hundred_sessions_through_expiries(false, 1, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_with_two_replicas_and_clean_all_nodes_and_a_removal() {
    two_hundred_sessions_through_expiries(true, 2, true).await;
}

#[tokio::test]
async fn a_sweep_touches_only_expired_sessions_and_leaves_live_ones_counting() {
    let app = spawn_app_with(common::test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let sweeper = app.sweeper.clone();
    let old = session_ids("old", 5);
    for s in &old {
        app.press(s).await;
        app.press(s).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = now_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let young = session_ids("young", 20);
    for s in &young {
        app.press(s).await;
    }
    // Sweep as if the 600 s TTL had run out for the first five only.
    let report = sweeper.sweep_once(cutoff + 600_000).await.unwrap();
    assert_eq!(report.expired, 5, "{report:?}");
    assert_eq!(report.unmapped, 5);
    assert_eq!(report.rebased, 0, "a selective node keeps its live counts");
    assert_eq!(
        nodes[0].node.session_count().await,
        20,
        "only the expired were cleaned"
    );
    for s in &old {
        assert_eq!(app.ctx.archive.total(s).await.unwrap(), Some(2));
        assert_eq!(app.press(s).await.clicks(), 3, "restored from the archive");
    }
    for s in &young {
        assert_eq!(app.press(s).await.clicks(), 2);
    }
    let again = sweeper.sweep_once(cutoff + 600_000).await.unwrap();
    assert_eq!(again.unmapped, 0, "a second sweep has nothing to do");
}

#[tokio::test]
async fn a_clean_all_node_re_bases_its_live_sessions_and_a_killed_node_s_sessions_go_on_from_what_was_shown(
) {
    let app = spawn_app_with(common::test_config()).await;
    let mut nodes = start_nodes(&app, 1, true).await;
    let (a, b) = (unique("a"), unique("b"));
    app.press(&a).await;
    app.press(&a).await;
    // B is younger than A by more than the expiry batch (a quarter of the
    // TTL, at most a second): A's expiry does not take B along.
    app.time.advance(Duration::from_millis(1100));
    for _ in 0..3 {
        app.press(&b).await;
    }
    // A expires; the clean-all node archives and forgets A and B.
    let a_expires = app
        .ctx
        .store
        .sessions
        .lookup(&a)
        .await
        .unwrap()
        .unwrap()
        .expires_at_ms;
    app.sweeper
        .sweep_node(&nodes[0].address, &a, a_expires)
        .await
        .unwrap();
    assert_eq!(nodes[0].node.session_count().await, 0);
    assert_eq!(app.ctx.archive.total(&b).await.unwrap(), Some(3));
    // B stayed on the node with base 3: 1 + 3.
    assert_eq!(app.press(&b).await.clicks(), 4);
    assert_eq!(app.press(&b).await.clicks(), 5);
    // The node dies; B continues elsewhere from the last count this
    // replica showed (5: the failover archives it for the dead node), not
    // from its last archive (3).
    let spare = common::TestNode::start("spare", true);
    app.add_node(&spare.address, "spare").await;
    nodes[0].kill();
    // A press on the node as it dies answers 504 (it may have counted
    // there); the node's counts are lost either way.
    let answer = common::press_until_ok(&app, &b).await;
    assert_eq!(answer.served_by.as_deref(), Some("spare"));
    assert_eq!(answer.clicks(), 6);
    assert_eq!(app.press(&a).await.clicks(), 3, "A restores its archived 2");
}

#[tokio::test]
async fn a_press_waits_behind_a_raised_fence_and_then_counts_on() {
    let app = Arc::new(spawn_app_with(common::test_config()).await);
    let nodes = start_nodes(&app, 1, false).await;
    let s = unique("fenced");
    app.press(&s).await;
    let store = &app.ctx.store;
    let seq = common::under_node_lock(store, &nodes[0].address, |lock| async move {
        store
            .fences
            .raise_fence(
                lock.lock(),
                lock.node(),
                Duration::from_secs(3600),
                FenceReason::Clean,
            )
            .await
            .unwrap()
    })
    .await;
    // Wait until our replica closed its gate and acknowledged.
    testkit::eventually(Duration::from_secs(5), "the replica's ack", || async {
        let acks = store
            .fences
            .fence_acks(&nodes[0].address, seq)
            .await
            .unwrap();
        testkit::holds(!acks.is_empty(), || acks)
    })
    .await;
    let pending = tokio::spawn({
        let app = app.clone();
        let s = s.clone();
        async move { app.press(&s).await }
    });
    // The press is held at the node's gate (the evidence to wait for), and
    // held there while the fence stands: it has not reached the node.
    let entry = app
        .ctx
        .admin
        .registry()
        .table()
        .get(&nodes[0].address)
        .unwrap();
    testkit::eventually(
        Duration::from_secs(5),
        "the press held at the gate",
        || async { testkit::holds(entry.presses_held() == 1, || entry.presses_held()) },
    )
    .await;
    assert!(!pending.is_finished(), "a press reached a fenced node");
    store
        .fences
        .lower_fence(&nodes[0].address, seq)
        .await
        .unwrap();
    let answer = pending.await.unwrap();
    assert_eq!(answer.clicks(), 2);
}

#[tokio::test]
async fn an_interrupted_clean_is_finished_by_the_next_sweep_by_cleaning_and_folding_again() {
    let app = spawn_app_with(common::test_config()).await;
    let nodes = start_nodes(&app, 1, true).await;
    let addr = nodes[0].address.clone();
    let (a, b) = (unique("crash-a"), unique("crash-b"));
    for _ in 0..4 {
        app.press(&a).await;
    }
    app.press(&b).await;
    // A cleaner raises the fence, writes its journal, the node archives and
    // forgets everything, and the cleaner dies before the fold.
    let store = &app.ctx.store;
    let (addr, a) = (&addr, &a);
    let token = app.ctx.archive.issue_token(addr).await.unwrap();
    common::under_node_lock(store, addr, |lock| async move {
        let seq = store
            .fences
            .raise_fence(lock.lock(), addr, Duration::ZERO, FenceReason::Clean)
            .await
            .unwrap();
        let journal = nodes_control::store::Journal {
            seq,
            generation: token,
            leaving: vec![a.clone()],
            expired_by: None,
        };
        assert!(store
            .fences
            .put_journal(lock.lock(), addr, &journal)
            .await
            .unwrap());
    })
    .await;
    let cleaned = app
        .http
        .post(format!("{addr}/clean"))
        .json(&serde_json::json!({ "archive": true, "generation": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(cleaned.status(), 200);
    assert_eq!(nodes[0].node.session_count().await, 0);
    // The stale fence (deadline passed) is found, the clean sent again
    // (the node holds nothing more to archive) and folded.
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.recovered, 1, "{report:?}");
    assert!(
        store.fences.fences().await.unwrap().is_empty(),
        "the fence is lowered"
    );
    // A repeated fold changes nothing.
    let totals = app.ctx.archive.fold(&[a.clone(), b.clone()]).await.unwrap();
    assert_eq!(totals.get(a), Some(&4));
    assert_eq!(totals.get(&b), Some(&1));
    assert_eq!(app.press(a).await.clicks(), 5, "A left and restored from 4");
    assert_eq!(app.press(&b).await.clicks(), 2, "B stayed, re-based on 1");
}

#[tokio::test]
async fn a_postgres_outage_at_expiry_is_a_503_and_the_session_continues_after() {
    let postgres = common::TcpProxy::start(testkit::postgres_addr()).await;
    common::ensure_database().await;
    let mut config = common::through_postgres_proxy(short_lived_config(1), &postgres);
    config.sweep_interval_secs = 3600; // only presses archive here
    let app = spawn_app_with(config).await;
    let _nodes = start_nodes(&app, 2, false).await;
    let s = unique("pg-expiry");
    for expected in 1..=3 {
        assert_eq!(app.press(&s).await.clicks(), expected);
    }
    postgres.cut();
    app.time.advance(Duration::from_millis(1100)); // the session expires
    let answer = app.press(&s).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["code"], "archive_unavailable");
    postgres.restore();
    let answer = common::press_until_ok(&app, &s).await;
    assert_eq!(answer.clicks(), 4, "not reset to zero, not double counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_a_node_killed_mid_run_continue_from_their_last_archived_total() {
    let mut config = short_lived_config(1);
    config.sweep_interval_secs = 3600; // the workload's own sweeps only
    let app = Arc::new(spawn_app_with(config).await);
    let mut nodes = start_nodes(&app, 3, false).await;
    let sessions = session_ids("killed", 60);
    let victim = nodes[0].name.clone();
    // A life of 1 s in session time is 0.4 s of real time here.
    let run = Duration::from_secs(3);
    let sweeps = expire_on_the_way(
        std::slice::from_ref(&app),
        TICK,
        Duration::from_millis(250),
        run,
    );
    let workload = tokio::spawn({
        let apps = vec![app.clone()];
        let sessions = sessions.clone();
        async move { press_through_faults(&apps, &sessions, 10, run).await }
    });
    tokio::time::sleep(run / 2).await;
    // What was archived just before the kill: a lower bound of what was
    // archived when the node died. (Read after the kill, the 60 reads race
    // the sessions' next lives: moved, pressed and archived again on their
    // new node, a session's total can pass the count it restarted from.)
    let mut archived_at_kill = std::collections::HashMap::new();
    for s in &sessions {
        archived_at_kill.insert(
            s.clone(),
            app.ctx.archive.total(s).await.unwrap().unwrap_or(0),
        );
    }
    nodes[0].kill();
    let answers = workload.await.unwrap();
    sweeps.await.unwrap();
    let mut moved = 0;
    for (session, all) in &answers {
        // The 200s, each with the 504s just before it (presses at the node
        // when it died: their outcome unknown, each may have counted).
        let mut seen = Vec::new();
        let mut unknown = 0;
        for (clicks, node) in all {
            match *clicks {
                UNKNOWN => unknown += 1,
                _ => seen.push((*clicks, node.clone(), std::mem::take(&mut unknown))),
            }
        }
        for (i, window) in seen.windows(2).enumerate() {
            let ((before, from, _), (after, to, unknown)) = (&window[0], &window[1]);
            if from == &victim && to != &victim {
                moved += 1;
            }
            if *after > *before && *after <= before + 1 + unknown {
                continue;
            }
            // The only allowed break: leaving the dead node, restarting from
            // the last archived total: never above the truth, never below
            // what was archived when it died.
            assert_eq!(
                from, &victim,
                "{session}: {before} -> {after} at press {i} without a failure"
            );
            assert_ne!(to, &victim);
            assert!(*after <= before + 1 + unknown, "{session}: above the truth");
            assert!(
                *after > archived_at_kill[session],
                "{session}: {after} is below its archive"
            );
        }
        assert_eq!(seen[0].0, 1);
    }
    assert!(
        moved >= 10,
        "about a third of 60 sessions lived on the victim; {moved} left it"
    );
}

#[tokio::test]
async fn a_sweep_cleans_a_backlog_larger_than_one_clean_in_batches() {
    let app = spawn_app_with(common::test_config()).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let tag = unique("backlog");
    let n = nodes_control::lifecycle::sweep::MAX_PER_CLEAN + 500;
    let store = std::sync::Arc::new(app.ctx.store.clone());
    let placements = (0..n).map(|i| {
        let (store, id) = (store.clone(), format!("{tag}-{i}"));
        async move {
            store
                .sessions
                .place(&id, 0, 1, None, None, None)
                .await
                .unwrap()
        }
    });
    futures::future::join_all(placements).await;
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.expired, n);
    assert_eq!(report.unmapped, n, "{report:?}");
    assert!(report.failed_nodes.is_empty());
    assert_eq!(app.nodes().await[0]["active_sessions"], 0);
}

#[tokio::test]
async fn an_expiry_clean_takes_the_sessions_about_to_expire_and_leaves_younger_ones() {
    let app = spawn_app_with(common::test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let (first, near, young) = (unique("first"), unique("near"), unique("young"));
    app.press(&first).await;
    app.press(&near).await;
    app.press(&near).await;
    app.time.advance(Duration::from_millis(1100));
    app.press(&young).await;
    let expires = app
        .ctx
        .store
        .sessions
        .lookup(&first)
        .await
        .unwrap()
        .unwrap()
        .expires_at_ms;
    app.sweeper
        .sweep_node(&nodes[0].address, &first, expires)
        .await
        .unwrap();
    let mapped = |id: String| {
        let store = app.ctx.store.clone();
        async move { store.sessions.lookup(&id).await.unwrap().is_some() }
    };
    assert!(
        !mapped(first.clone()).await,
        "the expired session is archived"
    );
    assert!(
        !mapped(near.clone()).await,
        "so is the one expiring with it"
    );
    assert!(mapped(young.clone()).await, "a younger session stays");
    assert_eq!(app.ctx.archive.total(&near).await.unwrap(), Some(2));
    assert_eq!(
        app.press(&near).await.clicks(),
        3,
        "and continues from the archive"
    );
    assert_eq!(app.press(&young).await.clicks(), 2);
}

#[tokio::test]
async fn an_expired_session_keeps_its_archive_when_its_node_fails_after_the_clean() {
    let app = spawn_app_with(common::test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let s = unique("kept");
    for _ in 0..3 {
        app.press(&s).await;
    }
    app.time
        .advance(Duration::from_secs(app.config.session_ttl_secs + 1));
    let report = app
        .sweeper
        .sweep_once(app.sweeper.clock().now_ms())
        .await
        .unwrap();
    assert_eq!(report.unmapped, 1, "{report:?}");
    let tokens: Vec<(bool, bool)> = sqlx::query_as(
        "SELECT completed, revoked FROM clean_tokens WHERE cluster = $1 AND node = $2",
    )
    .bind(&app.config.redis_key_prefix)
    .bind(&nodes[0].address)
    .fetch_all(app.ctx.archive.pool())
    .await
    .unwrap();
    assert_eq!(tokens, [(true, false)], "the clean completed its token");
    // The node fails afterwards: failing it over revokes what it may still
    // write, not what its completed clean archived.
    let below = app.ctx.archive.wipe_token().await.unwrap();
    app.ctx
        .archive
        .fence_failed_node(&nodes[0].address, below)
        .await
        .unwrap();
    assert_eq!(app.ctx.archive.total(&s).await.unwrap(), Some(3));
    assert_eq!(app.press(&s).await.clicks(), 4, "restored from its 3");
}
