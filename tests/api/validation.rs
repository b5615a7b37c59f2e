//! Bad input gets a clear 4xx and loses nothing (design.md §3).

use crate::common;

use common::{spawn_cluster, unique};

#[tokio::test]
async fn bad_press_bodies_get_their_4xx_and_change_nothing() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("valid");
    assert_eq!(app.press(&session).await.clicks(), 1);
    let url = format!("{}/press", app.address);
    let json = "application/json";
    let cases: Vec<(Option<&str>, Vec<u8>, u16)> = vec![
        (Some(json), b"{not json".to_vec(), 400),
        (Some(json), b"{}".to_vec(), 400),
        (Some(json), br#"{"session_id":""}"#.to_vec(), 400),
        (Some(json), br#"{"session_id":42}"#.to_vec(), 400),
        (Some(json), br#"{"session_id":null}"#.to_vec(), 400),
        (Some(json), br#"["u1"]"#.to_vec(), 400),
        (
            Some(json),
            format!(r#"{{"session_id":"{}"}}"#, "x".repeat(256)).into_bytes(),
            400,
        ),
        (Some(json), br#"{"session_id":"a\nb"}"#.to_vec(), 400),
        (Some(json), br#"{"session_id":"a\u0000b"}"#.to_vec(), 400),
        (
            Some(json),
            format!(r#"{{"session_id":"{}"}}"#, "x".repeat(5000)).into_bytes(),
            413,
        ),
        (
            Some("text/plain"),
            format!(r#"{{"session_id":"{session}"}}"#).into_bytes(),
            415,
        ),
        (
            None,
            format!(r#"{{"session_id":"{session}"}}"#).into_bytes(),
            415,
        ),
    ];
    for (content_type, body, expected) in cases {
        let mut request = app.http.post(&url).body(body.clone());
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(
            status,
            expected,
            "{content_type:?} {:?} -> {text}",
            String::from_utf8_lossy(&body[..body.len().min(60)])
        );
        let error: serde_json::Value = serde_json::from_str(&text).expect("error bodies are JSON");
        assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()));
        assert!(error["code"].as_str().is_some_and(|c| !c.is_empty()));
    }
    // None of that touched the session.
    assert_eq!(app.press(&session).await.clicks(), 2);
}

#[tokio::test]
async fn a_255_byte_unicode_session_id_is_accepted() {
    let (app, _nodes) = spawn_cluster(1).await;
    let id = format!("{}{}", unique("é"), "é".repeat(100));
    let id: String = id.chars().take(120).collect();
    assert!(id.len() <= 255);
    assert_eq!(app.press(&id).await.clicks(), 1);
    assert_eq!(app.press(&id).await.clicks(), 2);
}

#[tokio::test]
async fn unknown_paths_are_json_404s_and_health_endpoints_answer() {
    let (app, _nodes) = spawn_cluster(1).await;
    let response = app
        .http
        .get(format!("{}/nope", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
    let healthz = app
        .http
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), 200);
    let readyz = app
        .http
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.status(), 200);
    let body: serde_json::Value = readyz.json().await.unwrap();
    assert_eq!(body["redis"], "ok");
    assert_eq!(body["postgres"], "ok");
}

#[tokio::test]
async fn the_server_refuses_to_start_without_an_admin_token() {
    let mut config = common::test_config();
    config.admin_token = None;
    let error = nodes_control::Application::build(config.clone())
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("ADMIN_TOKEN"), "{error}");
    config.admin_token = Some("   ".into());
    assert!(nodes_control::Application::build(config).await.is_err());
}

#[tokio::test]
async fn metrics_are_served_in_prometheus_text_format() {
    let (app, _nodes) = spawn_cluster(1).await;
    app.press(&unique("metrics")).await;
    let response = app
        .http
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("nodes_control_presses_total"), "{text}");
    assert!(
        text.contains("nodes_control_press_duration_seconds_bucket"),
        "{text}"
    );
}
