//! `GET /sessions/{id}`: where a session lives and its placements, written
//! off the request path and kept for `SESSION_HISTORY_SECS`.

use crate::common;

use std::time::Duration;

use common::{spawn_app_with, start_nodes, test_config, unique, TestApp};
use serde_json::Value;
use testkit::eventually;

fn with_history() -> nodes_control::Config {
    let mut config = test_config();
    config.session_history_secs = 3600;
    config
}

async fn session(app: &TestApp, id: &str) -> (u16, Value) {
    let response = app
        .http
        .get(format!("{}/sessions/{id}", app.address))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The session's answer once its history holds `count` placements.
async fn with_placements(app: &TestApp, id: &str, count: usize) -> Value {
    eventually(
        Duration::from_secs(5),
        &format!("{count} placements"),
        || async {
            let (status, body) = session(app, id).await;
            assert_eq!(status, 200, "{body}");
            if body["placements"]
                .as_array()
                .is_some_and(|p| p.len() >= count)
            {
                Ok(body)
            } else {
                Err(body)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_shows_where_it_lives_and_every_placement_with_its_cause() {
    let app = spawn_app_with(with_history()).await;
    let mut nodes = start_nodes(&app, 2, false).await;
    let id = unique("history");
    app.press(&id).await;
    let first = app.press(&id).await.served_by.unwrap();
    let body = with_placements(&app, &id, 1).await;
    assert_eq!(body["current"]["node_name"], first.as_str(), "{body}");
    assert_eq!(body["current"]["base"], 0);
    assert_eq!(body["current"]["expired"], false);
    assert_eq!(body["archived_clicks"], Value::Null, "nothing archived yet");
    assert_eq!(body["placements"][0]["cause"], "new");
    assert_eq!(body["placements"][0]["base"], 0);

    // Its life ends; the sweep archives its 2 clicks; it comes back from them.
    app.time
        .advance(Duration::from_secs(app.config.session_ttl_secs + 1));
    let now = app.sweeper.clock().now_ms();
    app.sweeper.sweep_once(now).await.unwrap();
    let (_, body) = session(&app, &id).await;
    assert_eq!(body["current"], Value::Null, "unmapped: {body}");
    assert_eq!(body["archived_clicks"], 2);
    let on = app.press(&id).await;
    assert_eq!(on.clicks(), 3);
    let body = with_placements(&app, &id, 2).await;
    assert_eq!(body["placements"][0]["cause"], "restored", "{body}");
    assert_eq!(body["placements"][0]["base"], 2);

    // Its node dies: it moves, from its archive, and the history says why.
    let victim = nodes
        .iter_mut()
        .find(|n| Some(n.name.as_str()) == on.served_by.as_deref())
        .unwrap();
    victim.kill();
    let moved = app.press(&id).await;
    assert_eq!(moved.status, 200);
    assert_ne!(moved.served_by, on.served_by);
    let body = with_placements(&app, &id, 3).await;
    assert_eq!(body["placements"][0]["cause"], "failed_over", "{body}");
    assert_eq!(
        body["current"]["node_name"],
        moved.served_by.unwrap().as_str()
    );
}

#[tokio::test]
async fn an_unknown_session_is_a_404_an_invalid_id_a_400_and_history_is_off_by_default() {
    let app = spawn_app_with(test_config()).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let (status, body) = session(&app, &unique("never")).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = session(&app, &"x".repeat(256)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_session_id"))
    );
    // Beside it, a replica with history on (same Redis prefix, same
    // Postgres) places a session at the same moment: once its placement is
    // recorded, the one without history has had every chance to record its.
    let mut on = with_history();
    on.redis_key_prefix = app.config.redis_key_prefix.clone();
    let recording = spawn_app_with(on).await;
    let (id, witness) = (unique("unrecorded"), unique("recorded"));
    let (a, b) = tokio::join!(app.press(&id), recording.press(&witness));
    assert_eq!((a.status, b.status), (200, 200));
    with_placements(&recording, &witness, 1).await;
    let (status, body) = session(&app, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["current"]["base"], 0);
    assert_eq!(body["placements"], serde_json::json!([]), "history is off");
}

#[tokio::test]
async fn history_older_than_the_retention_is_dropped() {
    let app = spawn_app_with(with_history()).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let id = unique("retained");
    app.press(&id).await;
    with_placements(&app, &id, 1).await;
    let dropped = app
        .ctx
        .archive
        .forget_placements_before(chrono::Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert!(dropped >= 1);
    let (_, body) = session(&app, &id).await;
    assert_eq!(body["placements"], serde_json::json!([]), "{body}");
}
