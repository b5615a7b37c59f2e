//! Hardening the edges (design.md §4.13): untrusted input never touches node
//! state, redirects are not followed, strict requests, supervised loops.

use crate::common;

use std::time::Duration;

use common::{spawn_app_with, spawn_cluster, start_nodes, test_config, unique};
use testkit::{eventually, holds};

#[tokio::test]
async fn a_process_uri_too_long_to_forward_is_a_414_and_leaves_every_node_up() {
    let (app, nodes) = spawn_cluster(2).await;
    let session = unique("long-uri");
    assert_eq!(app.press(&session).await.clicks(), 1);
    for _ in 0..3 {
        let url = format!("{}/process/{}", app.address, "a".repeat(65_500));
        let response = app.http.get(url).send().await.unwrap();
        assert_eq!(response.status(), 414);
        let url = format!("{}/process/r1?user_id={}", app.address, "9".repeat(5_000));
        assert_eq!(app.http.get(url).send().await.unwrap().status(), 414);
    }
    for bad in ["a%0Ab", "a%20b", "x".repeat(129).as_str()] {
        let url = format!("{}/process/{bad}", app.address);
        assert_eq!(
            app.http.get(url).send().await.unwrap().status(),
            400,
            "{bad}"
        );
    }
    for node in app.nodes().await {
        assert_eq!(node["state"], "up", "{node}");
    }
    assert_eq!(
        app.press(&session).await.clicks(),
        2,
        "no count was touched"
    );
    assert!(nodes.iter().all(|n| n.address.starts_with("http://")));
}

/// A node whose every endpoint answers `307` to another node's same path.
async fn redirecting_node(to: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use axum::response::Redirect;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = asked.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let to = to.clone();
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move { Redirect::temporary(&format!("{to}{}", uri.path())) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, asked)
}

#[tokio::test]
async fn a_node_that_redirects_is_down_and_wipes_nothing_elsewhere() {
    let (app, nodes) = spawn_cluster(1).await;
    let victim = &nodes[0];
    let session = unique("redirect");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let (liar, asked) = redirecting_node(victim.address.clone()).await;
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": liar }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "down", "a redirect is not a healthy answer");
    // Health checks keep probing it: three more of their redirects, never
    // followed (a followed one would have wiped the victim).
    let after_add = asked.load(std::sync::atomic::Ordering::SeqCst);
    eventually(
        Duration::from_secs(10),
        "three more probes of the liar",
        || async {
            let now = asked.load(std::sync::atomic::Ordering::SeqCst);
            holds(now >= after_add + 3, || now)
        },
    )
    .await;
    assert_eq!(victim.node.session_count().await, 1, "the victim was wiped");
    assert_eq!(app.press(&session).await.clicks(), 4);
}

#[tokio::test]
async fn strict_requests_json_in_another_charset_and_invisible_ids_are_refused() {
    let (app, _nodes) = spawn_cluster(1).await;
    let url = format!("{}/press", app.address);
    let post = |content_type: &'static str, body: String| {
        app.http
            .post(&url)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let id = unique("strict");
    let body = format!(r#"{{"session_id":"{id}"}}"#);
    assert_eq!(
        post("application/json; charset=utf-16", body.clone())
            .await
            .unwrap()
            .status(),
        415
    );
    assert_eq!(
        post("application/json; charset=UTF-8", body.clone())
            .await
            .unwrap()
            .status(),
        200
    );
    for invisible in ["\u{202E}", "\u{200B}", "\u{2066}", "\u{FEFF}"] {
        let body = serde_json::json!({ "session_id": format!("{id}{invisible}") }).to_string();
        let response = post("application/json", body).await.unwrap();
        assert_eq!(response.status(), 400, "{invisible:?}");
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["code"], "invalid_session_id");
    }
    assert_eq!(app.press(&id).await.clicks(), 2, "nothing else was counted");
}

#[tokio::test]
async fn metrics_can_be_put_behind_the_admin_token() {
    let mut config = test_config();
    config.metrics_require_token = true;
    let app = spawn_app_with(config).await;
    let url = format!("{}/metrics", app.address);
    assert_eq!(app.http.get(&url).send().await.unwrap().status(), 401);
    let response = app
        .http
        .get(&url)
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_fence_watcher_that_dies_is_restarted_and_the_replica_is_not_ready_meanwhile() {
    let app = spawn_app_with(test_config()).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let session = unique("supervised");
    assert_eq!(app.press(&session).await.clicks(), 1);
    assert_eq!(app.readyz().await, 200);
    assert!(app.supervisor.abort("fence watcher"));
    // Until it runs again, the replica cannot honour fences: not ready, and
    // presses are refused rather than risk reaching a node being cleaned.
    eventually(
        Duration::from_millis(500),
        "/readyz reporting it",
        || async {
            let status = app.readyz().await;
            holds(status != 200, || status)
        },
    )
    .await;
    let refused = app.press(&session).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.body.contains("replica_not_ready"), "{refused:?}");
    eventually(
        Duration::from_secs(5),
        "the fence watcher restarted",
        || async {
            let status = app.readyz().await;
            holds(status == 200, || status)
        },
    )
    .await;
    assert_eq!(app.press(&session).await.clicks(), 2);
}

#[tokio::test]
async fn a_second_address_of_a_registered_node_is_refused_and_its_counts_are_intact() {
    let (app, nodes) = spawn_cluster(1).await;
    let node = &nodes[0];
    let session = unique("alias");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let alias = format!("http://localhost:{}", node.addr.port());
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": alias }))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "node_alias");
    assert_eq!(app.nodes().await.len(), 1);
    assert_eq!(node.node.session_count().await, 1, "the node was wiped");
    assert_eq!(app.press(&session).await.clicks(), 4);
}

#[tokio::test]
async fn an_address_that_does_not_speak_http_is_registered_down_with_the_reason() {
    let (app, _nodes) = spawn_cluster(1).await;
    // Redis's port: it answers, but not HTTP.
    let not_http = format!("http://{}", testkit::single_redis_addr());
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": not_http }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "down");
    let listed = app.nodes().await;
    let redis = listed
        .iter()
        .find(|n| n["address"] == not_http.as_str())
        .unwrap();
    assert_eq!(redis["state"], "down");
    let reason = redis["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("health check"), "{redis}");
    let (status, _) = app
        .node_command(serde_json::json!({ "action": "add", "address": format!("http://{}.example", "a".repeat(260)) }))
        .await;
    assert_eq!(status, 400, "a host longer than 253 bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_restarted_is_taken_down_since_its_counts_are_gone() {
    let mut config = test_config();
    config.health_rise = 50; // stays down long enough to be looked at
    let app = spawn_app_with(config).await;
    let mut nodes = start_nodes(&app, 1, false).await;
    let session = unique("restarted");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    nodes[0].restart(); // same address, new process: a new instance id
                        // The state and the reason are two writes (on a cluster, two round
                        // trips): the node is looked at once both are there.
    let node = eventually(
        Duration::from_secs(5),
        "taken down with a reason",
        || async {
            let node = app.nodes().await.remove(0);
            if node["state"] == "down" && node["reason"].is_string() {
                Ok(node)
            } else {
                Err(node)
            }
        },
    )
    .await;
    assert!(
        node["reason"].as_str().unwrap().contains("restarted"),
        "{node}"
    );
    // Its sessions move off it once every replica stopped pressing it.
    eventually(
        Duration::from_secs(5),
        "its sessions moved off it",
        || async {
            let mapping = app.ctx.store.sessions.lookup(&session).await.unwrap();
            holds(mapping.is_none(), || mapping)
        },
    )
    .await;
}

/// A node that restarted and recovered is recorded in Postgres with its new
/// instance id: a registry rebuilt from there after Redis forgot would
/// otherwise restore the old one and take the healthy node down as
/// "restarted" at the next health check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_node_s_new_instance_id_is_durable_in_postgres() {
    let app = spawn_app_with(test_config()).await;
    let mut nodes = start_nodes(&app, 1, false).await;
    let first = nodes[0].node.instance().to_owned();
    let recorded = |members: Vec<nodes_control::archive::Member>| members[0].instance.clone();
    assert_eq!(
        recorded(app.ctx.archive.members().await.unwrap()),
        Some(first.clone())
    );
    nodes[0].restart(); // same address, new process: a new instance id
    let now = nodes[0].node.instance().to_owned();
    assert_ne!(now, first);
    eventually(
        Duration::from_secs(10),
        "the new instance in Postgres",
        || async {
            let node = app.nodes().await.remove(0);
            let instance = recorded(app.ctx.archive.members().await.unwrap());
            holds(
                node["state"] == "up" && instance == Some(now.clone()),
                || (node, instance),
            )
        },
    )
    .await;
}

#[tokio::test]
async fn a_blackholed_postgres_answers_503_within_about_a_second() {
    common::ensure_database().await;
    let postgres = common::TcpProxy::start(testkit::postgres_addr()).await;
    let app = spawn_app_with(common::through_postgres_proxy(test_config(), &postgres)).await;
    let _nodes = start_nodes(&app, 1, false).await;
    assert_eq!(app.press(&unique("pg-warm")).await.clicks(), 1);
    postgres.blackhole();
    // A new session needs the archive (its fold): a fast, clear 503.
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        let answer = app.press(&unique("pg-blackholed")).await;
        assert_eq!(answer.status, 503, "{answer:?}");
        assert!(answer.body.contains("archive_unavailable"), "{answer:?}");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "took {:?}",
            started.elapsed()
        );
    }
    postgres.restore();
    let answer = common::press_until_ok(&app, &unique("pg-back")).await;
    assert_eq!(answer.clicks(), 1);
}

/// Sends `raw` on a fresh connection and returns the status line.
async fn raw_status(address: &str, raw: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&answer[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_request_with_both_content_length_and_transfer_encoding_is_refused() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("smuggle");
    let body = format!(r#"{{"session_id":"{session}"}}"#);
    let both = format!(
        "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len(),
        body.len()
    );
    assert!(raw_status(&app.address, &both).await.contains(" 400 "));
    let plain = format!(
        "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert!(raw_status(&app.address, &plain).await.contains(" 200 "));
    assert_eq!(
        app.press(&session).await.clicks(),
        2,
        "the refused press was not counted"
    );
}

#[tokio::test]
async fn a_down_node_is_probed_with_back_off_not_every_interval() {
    use std::sync::Arc;
    use tokio::io::AsyncWriteExt;
    // Answers every connection with something that is not HTTP, and counts them.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let probes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = probes.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            seen.lock().unwrap().push(tokio::time::Instant::now());
            let _ = stream.write_all(b"-ERR not http\r\n").await;
        }
    });
    let app = spawn_app_with(test_config()).await; // probes every 200 ms
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": address }))
        .await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("down")),
        "{body}"
    );
    let before = probes.lock().unwrap().len();
    // Four more probes: it is still probed, and their gaps show the pace.
    let at = testkit::eventually(Duration::from_secs(30), "four more probes", || async {
        let at = probes.lock().unwrap()[before..].to_vec();
        testkit::holds(at.len() >= 4, || at.len()).map(|()| at)
    })
    .await;
    // Every 200 ms would keep the gaps even; doubling (in steps of the
    // checker's rounds) makes the third two to four times the first.
    let (first, third) = (at[1] - at[0], at[3] - at[2]);
    assert!(
        third >= first * 3 / 2,
        "gaps {first:?} then {third:?}: not backing off"
    );
}
