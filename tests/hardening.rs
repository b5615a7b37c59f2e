//! Hardening the edges (DESIGN §4.13): untrusted input never touches node
//! state, redirects are not followed, strict requests, supervised loops.

mod common;

use std::time::Duration;

use common::{spawn_app_with, spawn_cluster, start_nodes, test_config, unique};

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
async fn redirecting_node(to: String) -> String {
    use axum::response::Redirect;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let to = to.clone();
        async move { Redirect::temporary(&format!("{to}{}", uri.path())) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

#[tokio::test]
async fn a_node_that_redirects_is_down_and_wipes_nothing_elsewhere() {
    let (app, nodes) = spawn_cluster(1).await;
    let victim = &nodes[0];
    let session = unique("redirect");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    let liar = redirecting_node(victim.address.clone()).await;
    let (status, body) = app
        .node_command(serde_json::json!({ "action": "add", "address": liar }))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "down", "a redirect is not a healthy answer");
    // Health checks keep probing it for a while: they never follow it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
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
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while app.readyz().await == 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never reported it"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = app.press(&session).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.body.contains("replica_not_ready"), "{refused:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while app.readyz().await != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never restarted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.press(&session).await.clicks(), 2);
}
