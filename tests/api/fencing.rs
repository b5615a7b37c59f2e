//! Fencing of superseded state and Redis amnesia, step by step (design.md
//! §4.10, §4.12): clean tokens, their revocation, the failover a timed-out
//! clean triggers, and the rebuild of a registry Redis forgot.

use crate::common;

use common::process::{NodeProcess, RedisProcess};
use common::{spawn_app, spawn_app_with, test_config, unique, TestNode};
use nodes_control::store::NodeState;

/// Presses `session` `times` times straight at a node.
async fn press_node(http: &reqwest::Client, node: &str, session: &str, times: usize) {
    for _ in 0..times {
        let response = http
            .post(format!("{node}/press"))
            .json(&serde_json::json!({ "session_id": session }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// `/clean archive=true` of one session with a clean token, as the cleaner sends it.
async fn clean_with_token(http: &reqwest::Client, node: &str, session: &str, generation: i64) {
    let response = http
        .post(format!("{node}/clean"))
        .json(&serde_json::json!({ "archive": true, "session_ids": [session], "generation": generation }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn what_a_revoked_token_archived_is_never_folded() {
    let app = spawn_app().await;
    let node = TestNode::start("n1", false);
    let archive = &app.ctx.archive;
    let http = reqwest::Client::new();
    let (kept, dropped) = (unique("kept"), unique("dropped"));
    for session in [&kept, &dropped] {
        press_node(&http, &node.address, session, 3).await;
        let token = archive.issue_token(&node.address).await.unwrap();
        clean_with_token(&http, &node.address, session, token).await;
        if session == &dropped {
            archive.revoke_token(token).await.unwrap();
        }
    }
    assert_eq!(
        archive.total(&dropped).await.unwrap(),
        Some(3),
        "the node did write it"
    );
    assert_eq!(archive.fold_one(&kept).await.unwrap(), 3);
    assert_eq!(
        archive.fold_one(&dropped).await.unwrap(),
        0,
        "a revoked write was folded"
    );
    assert_eq!(
        archive.fold_one(&dropped).await.unwrap(),
        0,
        "and it is gone for good"
    );
}

#[tokio::test]
async fn a_late_archive_never_replaces_a_row_written_under_a_newer_token() {
    let app = spawn_app().await;
    let (old, new) = (TestNode::start("old", false), TestNode::start("new", false));
    let archive = &app.ctx.archive;
    let http = reqwest::Client::new();
    let session = unique("late");
    press_node(&http, &old.address, &session, 5).await;
    press_node(&http, &new.address, &session, 2).await;
    let older = archive.issue_token(&old.address).await.unwrap();
    let newer = archive.issue_token(&new.address).await.unwrap();
    assert!(newer > older, "tokens increase");
    clean_with_token(&http, &new.address, &session, newer).await;
    // The old node's clean, issued first, lands last.
    clean_with_token(&http, &old.address, &session, older).await;
    assert_eq!(archive.fold_one(&session).await.unwrap(), 2);
}

/// A node that hangs in its clean is failed over by that clean, with what
/// the replica showed handed over; what it archives late, under the
/// revoked token, is never counted beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_the_node_never_answers_revokes_its_token_and_moves_its_sessions() {
    common::ensure_database().await;
    let mut config = test_config();
    config.node_timeout_ms = 1000;
    config.health_check_interval_ms = 60_000; // only the clean finds out
    let app = spawn_app_with(config).await;
    let hung = NodeProcess::start("hung", &common::database_url());
    app.add_node(&hung.address, "hung").await;
    let session = unique("hung");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let spare = TestNode::start("spare", false);
    app.add_node(&spare.address, "spare").await;
    hung.pause();
    // Expire the session now: its clean goes to a node that hangs.
    let result = app
        .sweeper
        .sweep_node(&hung.address, &session, i64::MAX)
        .await;
    assert!(
        result.is_err(),
        "the clean cannot have succeeded: {result:?}"
    );
    let record = app
        .ctx
        .store
        .nodes
        .get_node(&hung.address)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, NodeState::Down);
    assert_eq!(
        app.ctx.store.sessions.lookup(&session).await.unwrap(),
        None,
        "moved off"
    );
    let revoked: Vec<bool> =
        // The hand-over's own token is issued completed.
        sqlx::query_scalar("SELECT revoked FROM clean_tokens WHERE cluster = $1 AND node = $2 AND NOT completed")
            .bind(&app.config.redis_key_prefix)
            .bind(&hung.address)
            .fetch_all(app.ctx.archive.pool())
            .await
            .unwrap();
    assert!(
        !revoked.is_empty() && revoked.iter().all(|r| *r),
        "{revoked:?}"
    );
    // It wakes up. click-node drops a clean whose caller hung up, so the
    // late archive a node may write after the balancer gave up on it (a
    // node finishing its write) is written here as click-node writes it
    // (crates/click-node/src/archive.rs): its 3 clicks under the clean's
    // token, now revoked.
    hung.resume();
    let token: i64 = sqlx::query_scalar(
        "SELECT max(generation) FROM clean_tokens WHERE cluster = $1 AND node = $2 AND revoked",
    )
    .bind(&app.config.redis_key_prefix)
    .bind(&hung.address)
    .fetch_one(app.ctx.archive.pool())
    .await
    .unwrap();
    let written = sqlx::query(
        "INSERT INTO session_archive (session_id, clicks, archived_at, generation)
         VALUES ($1, 3, now(), $2)
         ON CONFLICT (session_id) DO UPDATE
           SET clicks = EXCLUDED.clicks, archived_at = now(), generation = EXCLUDED.generation
           WHERE session_archive.generation IS NULL OR session_archive.generation <= $2",
    )
    .bind(&session)
    .bind(token)
    .execute(app.ctx.archive.pool())
    .await
    .unwrap();
    assert_eq!(
        written.rows_affected(),
        0,
        "the hand-over's row, under a newer token, is not replaced"
    );
    // ...and are never counted.
    let answer = app.press(&session).await;
    assert_eq!(answer.served_by.as_deref(), Some("spare"));
    assert_eq!(
        answer.clicks(),
        4,
        "goes on from the 3 shown (handed over), not from the late archive too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_redis_forgot_is_rebuilt_from_postgres_and_not_ready_until_then() {
    let mut redis = RedisProcess::start(false);
    let mut config = test_config();
    config.redis_url = redis.url();
    let app = spawn_app_with(config).await;
    let nodes = common::start_nodes(&app, 2, false).await;
    let members = app.ctx.archive.members().await.unwrap();
    assert_eq!(members.len(), 2, "membership is durable in Postgres");
    let session = unique("amnesia");
    for expected in 1..=4 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    redis.kill();
    redis.start_again(); // empty: no persistence
    app.wait_rebuilt().await;
    assert_eq!(app.nodes().await.len(), 2, "the nodes are registered again");
    let answer = app.press(&session).await;
    assert_eq!(
        answer.clicks(),
        5,
        "continues from the nodes' live count: {answer:?}"
    );
    // Removal forgets the node in Postgres too.
    app.remove_node(&nodes[0].address).await;
    assert_eq!(app.ctx.archive.members().await.unwrap().len(), 1);
}
