//! Presses fenced at the node (design.md §4.16, "Fencing at the node"):
//! the balancer sends each press with the node's fencing epoch, a node
//! that enforces it refuses what was read before a clean, and the balancer
//! learns the epoch and reads again; a clean a cleaner could not finish is
//! finished only when the node has done it.

use crate::common;

use std::time::Duration;

use common::{now_ms, spawn_app_with, start_nodes, test_config, unique};
use nodes_control::store::{FenceReason, Journal, NodeState};

/// What a cleaner writes before its `/clean`, under the node's lock: the
/// fence (stale after `ttl`) and the journal of a selective clean of
/// `leaving` under a fresh token.
async fn begin_clean(
    app: &common::TestApp,
    lock: &nodes_control::store::NodeLock,
    leaving: &str,
    ttl: Duration,
) -> Journal {
    let (store, addr) = (&app.ctx.store, lock.node());
    let seq = store
        .fences
        .raise_fence(lock.lock(), addr, ttl, FenceReason::Clean)
        .await
        .unwrap();
    let journal = Journal {
        seq,
        generation: app.ctx.archive.issue_token(addr).await.unwrap(),
        leaving: vec![leaving.to_owned()],
        expired_by: Some(i64::MAX),
    };
    assert!(store
        .fences
        .put_journal(lock.lock(), addr, &journal)
        .await
        .unwrap());
    journal
}

#[tokio::test]
async fn a_clean_records_its_token_as_the_nodes_epoch_and_presses_carry_it() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let addr = &nodes[0].address;
    let store = &app.ctx.store;
    let added = store.nodes.node_epoch(addr).await.unwrap();
    assert!(added > 0, "the wipe at add gave the node an epoch");
    let s = unique("epoch");
    for expected in 1..=3 {
        assert_eq!(app.press(&s).await.clicks(), expected);
    }
    app.time
        .advance(Duration::from_secs(app.config.session_ttl_secs + 1));
    let report = app
        .sweeper
        .sweep_once(app.sweeper.clock().now_ms())
        .await
        .unwrap();
    assert_eq!(report.unmapped, 1, "{report:?}");
    let cleaned = store.nodes.node_epoch(addr).await.unwrap();
    assert!(cleaned > added, "the clean moved it: {added} -> {cleaned}");
    // A press under the epoch from before the clean is refused by the node,
    // uncounted; the balancer's own press carries the new one.
    let stale = app
        .http
        .post(format!("{addr}/press"))
        .json(&serde_json::json!({ "session_id": s, "epoch": added }))
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    assert_eq!(app.press(&s).await.clicks(), 4, "restored from its 3");
}

/// A cleaner that lost Redis after its fence came down did not record the
/// epoch: its fence came down when the clean was done, so a press the node
/// refuses learns the node's word and goes on.
#[tokio::test]
async fn a_press_refused_after_a_clean_the_registry_did_not_record_is_answered() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let addr = nodes[0].address.clone();
    let (store, archive) = (&app.ctx.store, &app.ctx.archive);
    let s = unique("unrecorded");
    for _ in 0..3 {
        app.press(&s).await;
    }
    // A clean of `s`: fence, token, /clean, unmap, completed token, fence
    // down; the epoch never recorded.
    let (app, addr, s) = (&app, &addr, &s);
    let token = common::under_node_lock(store, addr, |lock| async move {
        let seq = store
            .fences
            .raise_fence(
                lock.lock(),
                addr,
                Duration::from_secs(10),
                FenceReason::Clean,
            )
            .await
            .unwrap();
        let token = archive.issue_token(addr).await.unwrap();
        let cleaned = app
            .http
            .post(format!("{addr}/clean"))
            .json(&serde_json::json!({ "archive": true, "session_ids": [s], "generation": token }))
            .send()
            .await
            .unwrap();
        assert_eq!(cleaned.status(), 200);
        store
            .sessions
            .apply_clean(lock.lock(), addr, std::slice::from_ref(s), None, &[])
            .await
            .unwrap();
        archive.complete_token(token).await.unwrap();
        store.fences.lower_fence(addr, seq).await.unwrap();
        token
    })
    .await;
    assert!(store.nodes.node_epoch(addr).await.unwrap() < token as u64);
    // Placed again from its archive, sent under the epoch this replica
    // knows, refused, learned, answered.
    let answer = app.press(s).await;
    assert_eq!(answer.clicks(), 4, "{answer:?}");
    // Only a refusal records the node's word.
    assert_eq!(store.nodes.node_epoch(addr).await.unwrap(), token as u64);
}

/// A cleaner wrote its journal and died before its `/clean` reached the
/// node, which still counts the session. Finishing the clean sends it
/// again; assuming it done would unmap the session and restart it from an
/// archive that does not hold its clicks.
#[tokio::test]
async fn an_interrupted_clean_the_node_never_got_is_sent_again_not_assumed() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let addr = nodes[0].address.clone();
    let (s, stays) = (unique("never-cleaned"), unique("stays"));
    for _ in 0..5 {
        app.press(&s).await;
    }
    app.press(&stays).await;
    // A second, emptier node: a session unmapped from the first goes there.
    let second = common::TestNode::start("n2", false);
    app.add_node(&second.address, "n2").await;
    let (store, archive) = (&app.ctx.store, &app.ctx.archive);
    let (app_ref, s_ref) = (&app, s.as_str());
    common::under_node_lock(store, &addr, |lock| async move {
        begin_clean(app_ref, &lock, s_ref, Duration::ZERO).await;
    })
    .await;
    // The stale fence is found and the clean finished: sent, then settled.
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.recovered, 1, "{report:?}");
    assert!(store.fences.fences().await.unwrap().is_empty());
    assert_eq!(
        archive.total(&s).await.unwrap(),
        Some(5),
        "the node archived"
    );
    let answer = app.press(&s).await;
    assert_eq!(answer.served_by.as_deref(), Some("n2"));
    assert_eq!(answer.clicks(), 6, "not restarted from 0");
    assert_eq!(app.press(&stays).await.clicks(), 2);
}

/// Deletes `key` wherever it lives (a cluster answers MOVED on the others):
/// what the lock's expiry does to a holder that paused past its lifetime.
async fn expire_key(key: &str) {
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: Result<i64, _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
    }
}

/// A cleaner sends its `/clean` and pauses past its lock's life; the sweep
/// finishes its journal (sending the clean again) and the session is
/// placed again on the node. When the first cleaner resumes, its late
/// `/clean` forgets nothing placed since (the node takes only counts older
/// than the token), and each of its writes to Redis is refused: the
/// session counts on, with no repeat.
#[tokio::test]
async fn a_cleaner_resuming_after_its_lock_passed_on_changes_nothing() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let addr = nodes[0].address.clone();
    let store = &app.ctx.store;
    let s = unique("resumed");
    for _ in 0..3 {
        app.press(&s).await;
    }
    let lock_key = store.core().key(&["lock", &format!("node:{addr}")]);
    let (app_ref, addr_ref, s_ref) = (&app, addr.as_str(), s.as_str());
    common::under_node_lock(store, addr_ref, |lock| async move {
        let journal = begin_clean(app_ref, &lock, s_ref, Duration::ZERO).await;
        let (seq, generation) = (journal.seq, journal.generation);
        let clean = serde_json::json!({
            "archive": true, "session_ids": [s_ref], "generation": generation
        });
        let cleaned = app_ref
            .http
            .post(format!("{addr_ref}/clean"))
            .json(&clean)
            .send()
            .await
            .unwrap();
        assert_eq!(cleaned.status(), 200);
        // The pause: the lock expires and the sweep takes the node over.
        expire_key(&lock_key).await;
        let report = app_ref.sweeper.sweep_once(now_ms()).await.unwrap();
        assert_eq!(report.recovered, 1, "{report:?}");
        assert_eq!(app_ref.press(s_ref).await.clicks(), 4, "restored from 3");
        // The first cleaner resumes where it stopped.
        let late = app_ref
            .http
            .post(format!("{addr_ref}/clean"))
            .json(&clean)
            .send()
            .await
            .unwrap();
        assert_eq!(late.status(), 200);
        let unmap = store
            .sessions
            .apply_clean(lock.lock(), addr_ref, &[s_ref.to_owned()], None, &[])
            .await;
        assert!(unmap.is_err_and(|e| e.is_lock_lost()), "the unmap landed");
        let ended = store
            .fences
            .end_journal(lock.lock(), addr_ref, seq, Some(generation as u64))
            .await;
        assert!(ended.is_err_and(|e| e.is_lock_lost()));
        let raised = store
            .fences
            .raise_fence(lock.lock(), addr_ref, Duration::ZERO, FenceReason::Clean)
            .await;
        assert!(raised.is_err_and(|e| e.is_lock_lost()));
        assert!(!store
            .fences
            .put_journal(lock.lock(), addr_ref, &journal)
            .await
            .is_ok_and(|w| w));
        // A recovery that resumes late does not bring the node back up.
        let up = store
            .nodes
            .set_node_state_locked(lock.lock(), addr_ref, NodeState::Up, &[NodeState::Up])
            .await;
        assert!(up.is_err_and(|e| e.is_lock_lost()));
        assert!(lock.lock().check_held(&store.locks).await.is_err());
    })
    .await;
    assert!(store.fences.fences().await.unwrap().is_empty());
    assert_eq!(app.press(&s).await.clicks(), 5, "counted on, no repeat");
}

/// A failover raised its fence over an unsettled clean and lowered it:
/// the fence stays, now the journal's and stale, so the next sweep
/// finishes the clean instead of leaving its journal behind with nothing
/// pointing at it.
#[tokio::test]
async fn a_fence_never_comes_down_over_an_unsettled_journal() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let s = unique("journaled");
    for _ in 0..2 {
        app.press(&s).await;
    }
    let (addr, s_ref) = (nodes[0].address.as_str(), s.as_str());
    let app_ref = &app;
    let journal_seq = common::under_node_lock(store, addr, |lock| async move {
        let journal = begin_clean(app_ref, &lock, s_ref, Duration::from_secs(3600)).await;
        let seq = journal.seq;
        assert!(
            !store
                .fences
                .put_journal(lock.lock(), addr, &journal)
                .await
                .unwrap(),
            "a second journal over the first"
        );
        let over = store
            .fences
            .raise_fence(
                lock.lock(),
                addr,
                Duration::from_secs(3600),
                FenceReason::Down,
            )
            .await
            .unwrap();
        store.fences.lower_fence(addr, over).await.unwrap();
        seq
    })
    .await;
    let fences = store.fences.fences().await.unwrap();
    assert_eq!(fences.len(), 1, "{fences:?}");
    assert_eq!(fences[0].1.seq, journal_seq);
    let report = app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert_eq!(report.recovered, 1, "{report:?}");
    assert!(store.fences.journal(addr).await.unwrap().is_none());
    assert!(store.fences.fences().await.unwrap().is_empty());
    assert_eq!(app.press(&s).await.clicks(), 3);
}

/// Sets `key` to `value` wherever it lives (see [`expire_key`]).
async fn set_key(key: &str, value: &str) {
    for server in testkit::redis_servers() {
        let client = redis::Client::open(server).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: Result<(), _> = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query_async(&mut conn)
            .await;
    }
}

/// A journal that does not parse (written by hand, or by a version that
/// wrote another shape) would keep its fence up for ever, and every clean
/// of the node would answer busy: the sweep deletes it and lowers the fence.
#[tokio::test]
async fn a_journal_that_does_not_parse_is_dropped_and_its_fence_lowered() {
    let app = spawn_app_with(test_config()).await;
    let nodes = start_nodes(&app, 1, false).await;
    let store = &app.ctx.store;
    let s = unique("garbled");
    app.press(&s).await;
    let addr = nodes[0].address.as_str();
    common::under_node_lock(store, addr, |lock| async move {
        store
            .fences
            .raise_fence(lock.lock(), addr, Duration::ZERO, FenceReason::Clean)
            .await
            .unwrap();
    })
    .await;
    set_key(&store.core().key(&["journal", addr]), "{\"leaving\": 7}").await;
    app.sweeper.sweep_once(now_ms()).await.unwrap();
    assert!(
        store.fences.fences().await.unwrap().is_empty(),
        "the fence stayed"
    );
    assert!(!store.fences.clean_in_progress(addr).await.unwrap());
    assert_eq!(app.press(&s).await.clicks(), 2);
}

/// The tokens a failover revokes are those issued before it held the node:
/// one that resumes after a pause cannot revoke what a later clean archived
/// (whose completion then finds it revoked and applies nothing).
#[tokio::test]
async fn a_failover_revokes_only_the_tokens_issued_before_it() {
    let app = spawn_app_with(test_config()).await;
    let archive = &app.ctx.archive;
    let node = format!("http://{}.invalid", unique("tokens"));
    let earlier = archive.issue_token(&node).await.unwrap();
    let below = archive.wipe_token().await.unwrap();
    let later = archive.issue_token(&node).await.unwrap();
    assert_eq!(archive.fence_failed_node(&node, below).await.unwrap(), 1);
    assert!(archive.token_revoked(earlier).await.unwrap());
    assert!(!archive.token_revoked(later).await.unwrap());
    assert!(archive.complete_token(later).await.unwrap());
    assert!(
        !archive.complete_token(earlier).await.unwrap(),
        "a revoked token completed"
    );
    // A completed token stays completed whoever revokes it after.
    archive.revoke_token(later).await.unwrap();
    assert!(!archive.token_revoked(later).await.unwrap());
}
