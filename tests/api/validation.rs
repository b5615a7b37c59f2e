//! Bad input gets a clear 4xx and loses nothing (design.md §3).

use crate::common;

use common::{spawn_cluster, unique};

/// Content type, body, and the status and code expected.
type BadBody<'a> = (Option<&'a str>, Vec<u8>, (u16, &'a str));

#[tokio::test]
async fn bad_press_bodies_get_their_4xx_and_change_nothing() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("valid");
    assert_eq!(app.press(&session).await.clicks(), 1);
    let url = format!("{}/press", app.address);
    let json = "application/json";
    let invalid_id = (400, "invalid_session_id");
    let cases: Vec<BadBody> = vec![
        (Some(json), b"{not json".to_vec(), (400, "invalid_json")),
        (Some(json), br#"["u1"]"#.to_vec(), (400, "invalid_json")),
        (
            Some(json),
            br#"{"session_id":"u1""#.to_vec(),
            (400, "invalid_json"),
        ),
        (Some(json), b"{}".to_vec(), invalid_id),
        (Some(json), br#"{"session_id":""}"#.to_vec(), invalid_id),
        (Some(json), br#"{"session_id":42}"#.to_vec(), invalid_id),
        (Some(json), br#"{"session_id":5}"#.to_vec(), invalid_id),
        (Some(json), br#"{"session_id":null}"#.to_vec(), invalid_id),
        (Some(json), br#"{"session_id":["u1"]}"#.to_vec(), invalid_id),
        (
            Some(json),
            br#"{"session_id":{"id":"u1"}}"#.to_vec(),
            invalid_id,
        ),
        (
            Some(json),
            format!(r#"{{"session_id":"{}"}}"#, "x".repeat(256)).into_bytes(),
            invalid_id,
        ),
        (Some(json), br#"{"session_id":"a\nb"}"#.to_vec(), invalid_id),
        (
            Some(json),
            br#"{"session_id":"a\u0000b"}"#.to_vec(),
            invalid_id,
        ),
        (
            Some(json),
            format!(r#"{{"session_id":"{}"}}"#, "x".repeat(5000)).into_bytes(),
            (413, "payload_too_large"),
        ),
        (
            Some("text/plain"),
            format!(r#"{{"session_id":"{session}"}}"#).into_bytes(),
            (415, "unsupported_media_type"),
        ),
        (
            None,
            format!(r#"{{"session_id":"{session}"}}"#).into_bytes(),
            (415, "unsupported_media_type"),
        ),
    ];
    for (content_type, body, (expected, code)) in cases {
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
        assert_eq!(error["code"], code, "{text}");
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
async fn a_known_path_with_another_method_is_a_json_405_naming_the_allowed_ones() {
    let (app, _nodes) = spawn_cluster(1).await;
    for (method, path, allowed) in [
        (reqwest::Method::GET, "/press", "POST"),
        (reqwest::Method::DELETE, "/nodes", "GET"),
        (reqwest::Method::PUT, "/node", "POST"),
    ] {
        let response = app
            .http
            .request(method.clone(), format!("{}{path}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method} {path}");
        let allow = response
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            allow.as_deref().is_some_and(|a| a.contains(allowed)),
            "{method} {path}: Allow {allow:?}"
        );
        let body: serde_json::Value = response.json().await.expect("a JSON body");
        assert_eq!(body["code"], "method_not_allowed");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
}

#[tokio::test]
async fn a_missing_database_stops_the_start_unless_create_database_is_set() {
    common::ensure_database().await;
    let name = format!("nc_missing_{}", uuid::Uuid::new_v4().simple());
    let mut config = common::test_config();
    let base = common::database_url();
    let server = &base[..base.rfind('/').expect("a database URL names a database")];
    config.database_url = format!("{server}/{name}");
    let error = nodes_control::Application::build(config.clone())
        .await
        .err()
        .expect("a missing database is refused");
    let message = format!("{error:#}");
    assert!(message.contains(&name), "{message}");
    assert!(message.contains("CREATE_DATABASE"), "{message}");
    config.create_database = true;
    let prefix = config.redis_key_prefix.clone();
    let app = nodes_control::Application::build(config)
        .await
        .expect("created and migrated");
    drop(app);
    common::teardown::joined(&prefix);
    common::teardown::left(&prefix);
    let pool = sqlx::PgPool::connect(&base).await.unwrap();
    let existed: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(existed, "the database was created");
    // Its pool may still hold connections for a moment: force them out.
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(&pool)
        .await
        .unwrap();
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
