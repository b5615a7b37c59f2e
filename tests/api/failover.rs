//! Node failure, Redis and Postgres outages (design.md §3, §4.5, §4.8).

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use common::{spawn_app_with, spawn_cluster, start_nodes, test_config, unique, TcpProxy};
use testkit::{eventually, holds};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_sessions_continue_on_the_others_where_they_left_off_without_client_errors()
{
    let (app, mut nodes) = spawn_cluster(3).await;
    let app = Arc::new(app);
    let tag = unique("kill");
    let sessions: Vec<String> = (0..30).map(|i| format!("{tag}-{i}")).collect();
    // Each worker presses its own sessions in turn, so every session's
    // answers arrive in order and can be checked one by one. Every worker
    // stops after its tenth round until the victim is dead: ten presses
    // before the failure and thirty after, however fast the machine.
    const ROUNDS_BEFORE: usize = 10;
    let (killed_tx, killed) = tokio::sync::watch::channel(false);
    let chunks: Vec<Vec<String>> = sessions.chunks(3).map(|c| c.to_vec()).collect();
    let waiting = Arc::new(tokio::sync::Barrier::new(chunks.len() + 1));
    let workers: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let (app, waiting, mut killed) = (app.clone(), waiting.clone(), killed.clone());
            tokio::spawn(async move {
                let mut seen: HashMap<String, Vec<(i64, String)>> = HashMap::new();
                for round in 0..40 {
                    if round == ROUNDS_BEFORE {
                        waiting.wait().await;
                        killed.wait_for(|k| *k).await.unwrap();
                    }
                    for session in &chunk {
                        let answer = app.press(session).await;
                        assert_eq!(answer.status, 200, "client saw an error: {answer:?}");
                        seen.entry(session.clone())
                            .or_default()
                            .push((answer.clicks(), answer.served_by.unwrap()));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen
            })
        })
        .collect();
    waiting.wait().await;
    let victim = nodes[0].name.clone();
    nodes[0].kill();
    killed_tx.send(true).unwrap();
    drop(killed);
    let mut moved = 0;
    for worker in workers {
        for (session, answers) in worker.await.unwrap() {
            let served: Vec<&str> = answers.iter().map(|(_, n)| n.as_str()).collect();
            let switch = served
                .iter()
                .position(|n| *n != served[0])
                .unwrap_or(served.len());
            if served[0] == victim.as_str() {
                moved += usize::from(switch < served.len());
            }
            // Before the failure: exactly 1, 2, 3, ... on one node.
            for (i, (clicks, _)) in answers[..switch].iter().enumerate() {
                assert_eq!(*clicks, i as i64 + 1, "{session}: {answers:?}");
            }
            // After it: one new node, counting on from the last count shown
            // (nothing was archived: the failover archived, for the dead
            // node, what this replica had shown), no click lost.
            let rest = &answers[switch..];
            for (i, (clicks, node)) in rest.iter().enumerate() {
                assert_ne!(node, &victim, "{session} went back to the dead node");
                assert_eq!(node, &rest[0].1, "{session} moved twice: {answers:?}");
                assert_eq!(*clicks, (switch + i) as i64 + 1, "{session}: {answers:?}");
            }
        }
    }
    assert!(
        moved >= 5,
        "the victim should have held about a third of 30 sessions, {moved} moved"
    );
    let down = app
        .nodes()
        .await
        .into_iter()
        .find(|n| n["name"] == victim.as_str())
        .unwrap();
    assert_eq!(down["state"], "down");
}

#[tokio::test]
async fn a_redis_outage_is_a_503_and_presses_resume_when_it_returns() {
    let redis = TcpProxy::start(testkit::single_redis_addr()).await;
    let mut config = test_config();
    config.redis_url = format!("redis://{}", redis.addr);
    let app = spawn_app_with(config).await;
    let _nodes = start_nodes(&app, 2, false).await;
    let session = unique("redis-outage");
    assert_eq!(app.press(&session).await.clicks(), 1);

    redis.cut();
    // A session this replica has not seen needs Redis: 503 at once.
    let answer = app.press(&unique("redis-new")).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["code"], "redis_unavailable");
    assert_eq!(app.readyz().await, 503);
    // A cached one is served until the replica's lease runs out, then 503.
    // Past a fencing clean's patience (2 s) without Redis, a count cannot
    // be checked against a failover and is not shown (504, counted).
    let (mut served, mut unshown) = (0, 0);
    let cut_at = tokio::time::Instant::now();
    loop {
        let answer = app.press(&session).await;
        if answer.status == 503 {
            break;
        }
        if answer.status == 504 {
            assert!(answer.body.contains("replica_paused"), "{answer:?}");
            unshown += 1;
            continue;
        }
        served += 1;
        assert_eq!(
            answer.clicks(),
            1 + served + unshown,
            "counted on while cached"
        );
        assert!(cut_at.elapsed() < app.config.silence().lease() + Duration::from_secs(2));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    redis.restore();
    let answer = common::press_until_ok(&app, &session).await;
    assert_eq!(
        answer.clicks(),
        2 + served + unshown,
        "the count must survive the outage"
    );
}

#[tokio::test]
async fn a_postgres_outage_blocks_restores_with_503_and_never_restarts_from_zero() {
    let postgres = TcpProxy::start(testkit::postgres_addr()).await;
    common::ensure_database().await;
    let config = common::through_postgres_proxy(test_config(), &postgres);
    let app = spawn_app_with(config).await;
    let nodes = start_nodes(&app, 2, false).await;
    let session = unique("pg-outage");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let home = app.press(&session).await;
    assert_eq!(home.clicks(), 4);
    let home = nodes
        .iter()
        .find(|n| Some(&n.name) == home.served_by.as_ref())
        .unwrap();
    // Removing the node archives the session (the node writes straight to
    // Postgres); its next press must restore it from the archive.
    app.remove_node(&home.address).await;

    postgres.cut();
    let answer = app.press(&session).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["code"], "archive_unavailable");
    // A brand-new id may have history in the archive too: same answer.
    assert_eq!(app.press(&unique("pg-new")).await.status, 503);

    postgres.restore();
    let answer = common::press_until_ok(&app, &session).await;
    assert_eq!(
        answer.clicks(),
        5,
        "restored from the archived total, not from zero"
    );
}

#[tokio::test]
async fn a_node_that_comes_back_is_wiped_before_it_takes_sessions_again() {
    let (app, nodes) = spawn_cluster(2).await;
    let tag = unique("flap");
    for i in 0..10 {
        app.press(&format!("{tag}-{i}")).await;
    }
    let n1 = &nodes[0];
    assert!(n1.node.session_count().await > 0);
    // The node "failed" (as a timeout would make it) but is alive, holding
    // counts that are stale now.
    app.mark_down(&n1.address).await;
    for i in 0..10 {
        let answer = app.press(&format!("{tag}-{i}")).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.served_by.as_deref(), Some("n2"));
    }
    // The health checker sees it answer, wipes it and brings it back.
    eventually(Duration::from_secs(10), "n1 back up", || async {
        let state = app
            .nodes()
            .await
            .into_iter()
            .find(|n| n["name"] == "n1")
            .unwrap()["state"]
            .clone();
        holds(state == "up", || state)
    })
    .await;
    assert_eq!(
        n1.node.session_count().await,
        0,
        "a recovered node must be wiped"
    );
}

/// A node declared down that answers its health checks again before any
/// failover moved its sessions (alive all along, or restarted at once):
/// the recovery moves them off as a failover does, with what the replica
/// showed (the hand-over), before it wipes the node. Nothing presses in
/// between, so the recovery, not a press, is what moves them.
#[tokio::test]
async fn a_node_recovered_before_its_failover_ran_loses_no_click_a_user_was_shown() {
    let (app, nodes) = spawn_cluster(2).await;
    let tag = unique("recovered");
    let sessions: Vec<String> = (0..6).map(|i| format!("{tag}-{i}")).collect();
    for _ in 0..3 {
        for session in &sessions {
            assert_eq!(app.press(session).await.status, 200);
        }
    }
    let n1 = &nodes[0];
    assert!(n1.node.session_count().await > 0, "n1 holds sessions");
    app.mark_down(&n1.address).await;
    // Down in Redis now; up again only through a recovery.
    eventually(Duration::from_secs(10), "n1 recovered", || async {
        let n1_state = app
            .nodes()
            .await
            .into_iter()
            .find(|n| n["name"] == "n1")
            .unwrap()["state"]
            .clone();
        holds(n1_state == "up", || n1_state)
    })
    .await;
    assert_eq!(n1.node.session_count().await, 0, "n1 was wiped");
    for session in &sessions {
        let answer = app.press(session).await;
        assert_eq!(
            (answer.status, answer.clicks()),
            (200, 4),
            "{session} goes on from the 3 its user was shown: {answer:?}"
        );
    }
}

/// A node that counts a press and then answers 500, and a Redis that
/// refuses writes at that very moment: the mark-down cannot be written.
/// The replica keeps the node down all the same (the registry's stale
/// "up" does not bring it back) and writes the mark once Redis takes
/// writes again; the next presses never reach the node that may have
/// counted the failed one.
#[tokio::test]
async fn a_mark_down_redis_refused_is_kept_and_the_node_never_pressed_again() {
    use axum::{extract::State, routing::post, Json, Router};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    struct Treacherous {
        presses: AtomicUsize,
        armed: AtomicBool,
        redis: String,
    }
    async fn press(
        State(node): State<Arc<Treacherous>>,
        Json(_): Json<serde_json::Value>,
    ) -> (axum::http::StatusCode, String) {
        let n = node.presses.fetch_add(1, Ordering::SeqCst) + 1;
        if node.armed.load(Ordering::SeqCst) {
            set_refusing(&node.redis, true).await;
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom".into());
        }
        (axum::http::StatusCode::OK, format!("You clicked {n} times"))
    }
    async fn set_refusing(redis: &str, refusing: bool) {
        let client = redis::Client::open(redis).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("min-replicas-to-write")
            .arg(if refusing { "1" } else { "0" })
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }

    let redis = common::process::RedisProcess::start(false);
    let mut config = test_config();
    config.redis_url = redis.url();
    // No recovery of the failed node within the test.
    config.health_check_interval_ms = 600_000;
    let app = spawn_app_with(config).await;
    let node = Arc::new(Treacherous {
        presses: AtomicUsize::new(0),
        armed: AtomicBool::new(false),
        redis: redis.url(),
    });
    let router = Router::new()
        .route("/press", post(press))
        .route("/clean", post(|| async { "OK" }))
        .with_state(node.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    app.add_node(&address, "treacherous").await;
    let s = unique("refused-mark");
    assert_eq!(app.press(&s).await.clicks(), 1);
    let other = common::TestNode::start("other", false);
    app.add_node(&other.address, "other").await;

    node.armed.store(true, Ordering::SeqCst);
    // Counted and answered 500: the outcome is unknown to the balancer,
    // which answers 504 and never tries the press elsewhere.
    let failed = app.press(&s).await;
    assert_eq!(failed.status, 504, "{failed:?}");
    assert!(failed.body.contains("node_failed"), "{failed:?}");
    let counted = node.presses.load(Ordering::SeqCst);
    assert_eq!(counted, 2, "the node counted the failed press");
    // A registry refresh, which still reads the node up, before the next
    // press (one that started after this call, if the health checker's
    // was under way).
    app.ctx.admin.registry().refresh().await.unwrap();
    let meanwhile = app.press(&s).await;
    assert_ne!(meanwhile.status, 200, "{meanwhile:?}");
    assert_eq!(
        node.presses.load(Ordering::SeqCst),
        counted,
        "pressed again"
    );
    node.armed.store(false, Ordering::SeqCst);
    set_refusing(&redis.url(), false).await;
    let answer = common::press_until_ok(&app, &s).await;
    assert_eq!(answer.served_by.as_deref(), Some("other"), "{answer:?}");
    assert_eq!(
        node.presses.load(Ordering::SeqCst),
        counted,
        "pressed again"
    );
    let listed = app
        .ctx
        .store
        .nodes
        .get_node(&address)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(listed.state, nodes_control::store::NodeState::Down);
}

/// A node of the task's API that answers every press until `armed`, then
/// takes the next press (reads it whole, counts it) and hangs up without
/// an answer. Anything but `POST /press` is answered `OK`.
async fn node_that_hangs_up(
    taken: Arc<std::sync::atomic::AtomicUsize>,
    armed: Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (taken, armed) = (taken.clone(), armed.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request);
                    let Some(head_end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() < head_end + 4 + length {
                        continue;
                    }
                    let body = if text.starts_with("POST /press") {
                        let n = taken.fetch_add(1, Ordering::SeqCst) + 1;
                        if armed.load(Ordering::SeqCst) {
                            return; // counted; the connection closes unanswered
                        }
                        format!("You clicked {n} times")
                    } else {
                        "OK".to_owned()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    request.clear();
                }
            });
        }
    });
    address
}

/// A press its node took and then hung up on may have been counted (the
/// model's hole 6, design.md): it answers 504 `node_failed` and is never
/// sent to another node, where it would count a second time.
#[tokio::test]
async fn a_press_its_node_took_and_hung_up_on_answers_504_and_is_not_sent_elsewhere() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let app = spawn_app_with(test_config()).await;
    let (taken, armed) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let address = node_that_hangs_up(taken.clone(), armed.clone()).await;
    app.add_node(&address, "hangs-up").await;
    let s = unique("hung-up");
    assert_eq!(app.press(&s).await.clicks(), 1);
    let other = common::TestNode::start("other", false);
    app.add_node(&other.address, "other").await;

    armed.store(true, Ordering::SeqCst);
    let answer = app.press(&s).await;
    assert_eq!(answer.status, 504, "{answer:?}");
    assert!(answer.body.contains("node_failed"), "{answer:?}");
    assert_eq!(taken.load(Ordering::SeqCst), 2, "the node took the press");
    assert_eq!(
        other.node.session_count().await,
        0,
        "the press went to the other node as well"
    );
    // The node is down and the session moves on from its archive.
    let next = common::press_until_ok(&app, &s).await;
    assert_eq!(next.served_by.as_deref(), Some("other"), "{next:?}");
}

/// A reference node whose health path fails once, on the first read after
/// it is wiped: the read a recovery makes to learn what the node offers.
async fn node_whose_health_fails_after_a_wipe(name: &str) -> (String, Arc<AtomicBool>) {
    let config = click_node::Config::for_tests(name, &common::database_url());
    let node = click_node::Node::new(&config).unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let fail_next_health = Arc::new(AtomicBool::new(false));
    let front = {
        let (armed, fail) = (armed.clone(), fail_next_health.clone());
        axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let (armed, fail) = (armed.clone(), fail.clone());
                async move {
                    let path = request.uri().path().to_owned();
                    if path == "/health" && fail.swap(false, Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    let answer = next.run(request).await;
                    if path == "/clean" && armed.swap(false, Ordering::SeqCst) {
                        fail.store(true, Ordering::SeqCst);
                    }
                    answer
                }
            },
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, click_node::app(node).layer(front)).await });
    (address, armed)
}

/// What a node offers is only ever recorded from its answer (hole 5): a
/// fencing node whose health read fails once while it recovers stays down
/// for another round, and comes back offering fencing, not nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_read_that_fails_during_a_recovery_never_switches_fencing_off() {
    let app = spawn_app_with(test_config()).await;
    let _other = start_nodes(&app, 1, false).await;
    let (address, armed) = node_whose_health_fails_after_a_wipe("flaky").await;
    app.add_node(&address, "flaky").await;
    let flaky = || async {
        let node = app
            .nodes()
            .await
            .into_iter()
            .find(|n| n["name"] == "flaky")
            .unwrap();
        (node["state"].clone(), node["offers"]["fencing"].clone())
    };
    assert_eq!(flaky().await.1, true, "a reference node offers fencing");
    armed.store(true, Ordering::SeqCst);
    app.mark_down(&address).await;
    eventually(Duration::from_secs(10), "flaky back up", || async {
        let (state, _) = flaky().await;
        holds(state == "up", || state)
    })
    .await;
    assert!(
        !armed.load(Ordering::SeqCst),
        "the recovery wiped the node and read its health after"
    );
    assert_eq!(
        flaky().await.1,
        true,
        "fencing is still offered: {:?}",
        flaky().await
    );
}

/// The base guard through the press path (the model's `base_guard`): a
/// replica folds a returning session's archive, and before it places the
/// session, another replica serves the session elsewhere and removes that
/// node, which archives more clicks and unmaps it again. The first
/// replica's fold is stale: placed on it, the session would restart below
/// clicks already shown. Its answer is held back in a proxy in front of
/// Postgres (the fold ran, its result waits) while the other replica
/// works. Without the guard (`SessionService::place` passing no unmap
/// count) the late press answers 5 again, placed on the fold of 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_on_a_fold_older_than_the_sessions_last_unmap_folds_again() {
    common::ensure_database().await;
    let postgres = TcpProxy::start(testkit::postgres_addr()).await;
    let config = test_config();
    let other = spawn_app_with(config.clone()).await;
    let mut slow = common::through_postgres_proxy(config, &postgres);
    slow.archive_timeout_ms = 10_000;
    let folding = spawn_app_with(slow).await;
    let nodes = start_nodes(&other, 3, false).await;
    let session = unique("stale-fold");
    for expected in 1..=3 {
        assert_eq!(other.press(&session).await.clicks(), expected);
    }
    let on = |answer: &common::PressAnswer| {
        let name = answer.served_by.clone().unwrap();
        nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap()
            .address
            .clone()
    };
    let first = other.press(&session).await;
    assert_eq!(first.clicks(), 4);
    other.remove_node(&on(&first)).await;
    // The fold reaches Postgres and runs; its answer waits.
    postgres.hold_answers_to(&session);
    let late = folding.press_in_background(&session);
    eventually(Duration::from_secs(5), "the fold answered", || async {
        match postgres.held_bytes() {
            0 => Err(0),
            held => Ok(held),
        }
    })
    .await;
    // Meanwhile the session goes on elsewhere and leaves that node too.
    let elsewhere = other.press(&session).await;
    assert_eq!(elsewhere.clicks(), 5);
    other.remove_node(&on(&elsewhere)).await;
    postgres.restore();
    let late = late.await.unwrap();
    assert_eq!(late.status, 200, "{}", late.body);
    assert_eq!(
        testkit::parse_clicks(&late.body),
        Some(6),
        "placed on a fold from before the last unmap: {}",
        late.body
    );
}

/// Issue 54: a session pressed 3 times on a node without clean tokens
/// that is slow, not dead, during its removal's clean: the clean reaches
/// the node and is held there, its timer fires, and the node is failed
/// over with the hand-over; the session goes on on `next` (of the task's
/// API too) from the 3 its user saw, and is pressed there once.
async fn handed_over_from_a_slow_clean(
    config: nodes_control::Config,
) -> (
    Arc<common::TestApp>,
    String,
    common::task_node::TaskNode,
    common::task_node::TaskNode,
) {
    use common::task_node::{TaskNode, Variant};
    let app = Arc::new(spawn_app_with(config).await);
    let marker = std::env::temp_dir().join(unique("late-clean"));
    let slow = TaskNode::holding_cleans(&marker);
    app.add_node(&slow.address, "slow").await;
    let session = unique("late-row");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let next = TaskNode::start(Variant::TaskOnly, None);
    app.add_node(&next.address, "next").await;
    let removed = app.remove_node(&slow.address).await;
    assert!(marker.exists(), "the clean reached the node: {removed}");
    let _ = std::fs::remove_file(&marker);
    let answer = app.press(&session).await;
    assert_eq!(
        (answer.clicks(), answer.served_by.as_deref()),
        (4, Some("next")),
        "goes on from the 3 shown"
    );
    (app, session, slow, next)
}

/// The late `/clean` then reaches the slow node, which archives its 3
/// clicks as the task's nodes do (written here with their statement: the
/// test's node holds the clean for ever). Those rows must not count beside
/// the hand-over's: here `next` restarts (it archives nothing of the
/// session), is removed, and the fold of its removal would find them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_clean_of_a_node_without_tokens_is_not_counted_beside_the_hand_over() {
    let (app, session, _slow, mut next) = handed_over_from_a_slow_clean(test_config()).await;
    sqlx::query(
        "INSERT INTO session_archive (session_id, clicks, archived_at) VALUES ($1, 3, now())
         ON CONFLICT (session_id) DO UPDATE SET clicks = EXCLUDED.clicks, archived_at = now()",
    )
    .bind(&session)
    .execute(app.ctx.archive.pool())
    .await
    .unwrap();
    next.restart(); // the 4th click is lost with it
    let last = common::task_node::TaskNode::start(common::task_node::Variant::TaskOnly, None);
    app.add_node(&last.address, "last").await;
    app.remove_node(&next.address).await;
    let answer = app.press(&session).await;
    assert_eq!(answer.served_by.as_deref(), Some("last"));
    assert!(
        answer.clicks() <= 5,
        "{} above the truth, 5: the late clean's clicks were counted again",
        answer.clicks()
    );
}

/// The row the hand-over closed is opened before a clean of the node the
/// session is on: what `next` archives of it (the 4th click) counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_next_node_without_tokens_archives_of_a_handed_over_session_counts() {
    let (app, session, _slow, next) = handed_over_from_a_slow_clean(test_config()).await;
    let last = common::task_node::TaskNode::start(common::task_node::Variant::TaskOnly, None);
    app.add_node(&last.address, "last").await;
    app.remove_node(&next.address).await;
    let answer = app.press(&session).await;
    assert_eq!(
        (answer.clicks(), answer.served_by.as_deref()),
        (5, Some("last")),
        "goes on from the 4 next archived"
    );
}

/// After Redis forgot everything the rebuild knows no session by name: it
/// opens every closed row before the nodes archive what they hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_forgot_what_a_node_without_tokens_holds_of_a_handed_over_session_counts() {
    let mut redis = common::process::RedisProcess::start(false);
    let mut config = test_config();
    config.redis_url = redis.url();
    let (app, session, _slow, _next) = handed_over_from_a_slow_clean(config).await;
    redis.kill();
    redis.start_again(); // empty
    app.wait_rebuilt().await;
    let answer = app.press(&session).await;
    assert_eq!(
        (answer.clicks(), answer.served_by.as_deref()),
        (5, Some("next")),
        "goes on from the 4 next archived in the rebuild"
    );
}
