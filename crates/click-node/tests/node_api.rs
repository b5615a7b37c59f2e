//! The reference node's API against a real Postgres (design.md §1).

use std::sync::Arc;

use click_node::Node;
use serde_json::{json, Value};
use sqlx::PgPool;

/// The test database with the project's migrations applied.
async fn database() -> PgPool {
    testkit::ensure_database().await;
    PgPool::connect(&testkit::database_url()).await.unwrap()
}

struct Running {
    url: String,
    node: Arc<Node>,
    http: reqwest::Client,
}

async fn start(clean_all: bool) -> Running {
    let spawned = testkit::spawn_node("n-test", clean_all).await;
    Running {
        url: spawned.address,
        node: spawned.node,
        http: reqwest::Client::new(),
    }
}

impl Running {
    async fn press(&self, id: &str) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}/press", self.url))
            .json(&json!({ "session_id": id }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn clean(&self, body: Value) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}/clean", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

fn unique(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::new_v4().simple())
}

async fn archived(pool: &PgPool, id: &str) -> Option<(i32, i32)> {
    sqlx::query_as("SELECT clicks, base_clicks FROM session_archive WHERE session_id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn press_counts_per_session() {
    let node = start(false).await;
    let (a, b) = (unique("a"), unique("b"));
    assert_eq!(node.press(&a).await, (200, "You clicked 1 times".into()));
    assert_eq!(node.press(&a).await, (200, "You clicked 2 times".into()));
    assert_eq!(node.press(&b).await, (200, "You clicked 1 times".into()));
    assert_eq!(node.node.session_count().await, 2);
}

#[tokio::test]
async fn press_with_a_bad_body_is_400() {
    let node = start(false).await;
    for body in ["{", "{}", r#"{"session_id":""}"#] {
        let r = node
            .http
            .post(format!("{}/press", node.url))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
    }
}

#[tokio::test]
async fn clean_with_archive_upserts_clicks_keeps_base_and_forgets_everything() {
    let pool = database().await;
    let node = start(false).await;
    let id = unique("archive");
    // A row the balancer folded earlier: its base must survive the upsert.
    sqlx::query("INSERT INTO session_archive (session_id, clicks, base_clicks) VALUES ($1, 0, 7)")
        .bind(&id)
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..3 {
        node.press(&id).await;
    }
    assert_eq!(
        node.clean(json!({ "archive": true })).await,
        (200, "OK".into())
    );
    assert_eq!(archived(&pool, &id).await, Some((3, 7)));
    assert_eq!(node.node.session_count().await, 0);
    assert_eq!(node.press(&id).await.1, "You clicked 1 times");
}

#[tokio::test]
async fn clean_without_archive_only_forgets() {
    let pool = database().await;
    let node = start(false).await;
    let id = unique("forget");
    node.press(&id).await;
    assert_eq!(
        node.clean(json!({ "archive": false })).await,
        (200, "OK".into())
    );
    assert_eq!(archived(&pool, &id).await, None);
    assert_eq!(node.node.session_count().await, 0);
}

#[tokio::test]
async fn selective_clean_touches_only_the_named_sessions() {
    let pool = database().await;
    let node = start(false).await;
    let (gone, kept) = (unique("gone"), unique("kept"));
    node.press(&gone).await;
    node.press(&gone).await;
    node.press(&kept).await;
    let (status, body) = node
        .clean(json!({ "archive": true, "session_ids": [gone] }))
        .await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["cleaned"], json!([gone]));
    assert_eq!(archived(&pool, &gone).await, Some((2, 0)));
    assert_eq!(archived(&pool, &kept).await, None);
    assert_eq!(node.press(&kept).await.1, "You clicked 2 times");
}

#[tokio::test]
async fn a_clean_all_node_ignores_session_ids() {
    let pool = database().await;
    let node = start(true).await;
    let (a, b) = (unique("all-a"), unique("all-b"));
    node.press(&a).await;
    node.press(&b).await;
    let (status, body) = node
        .clean(json!({ "archive": true, "session_ids": [a] }))
        .await;
    assert_eq!((status, body.as_str()), (200, "OK"));
    assert_eq!(archived(&pool, &b).await, Some((1, 0)));
    assert_eq!(node.node.session_count().await, 0);
}

#[tokio::test]
async fn process_answers_with_the_agent_and_request() {
    let node = start(false).await;
    let r = node
        .http
        .get(format!("{}/process/req-7?user_id=42", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["agent_id"], "n-test");
    assert_eq!(body["request_id"], "req-7");
    assert_eq!(body["user_id"], 42);
    assert!(body["timestamp"].as_str().is_some_and(|t| t.contains('T')));
    let health = node
        .http
        .get(format!("{}/health", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

impl Running {
    async fn press_under(&self, id: &str, epoch: u64) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/press", self.url))
            .json(&json!({ "session_id": id, "epoch": epoch }))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

#[tokio::test]
async fn a_press_under_an_epoch_older_than_its_sessions_clean_is_refused_uncounted() {
    let _pool = database().await;
    let node = start(false).await;
    let (a, b) = (unique("a"), unique("b"));
    assert_eq!(node.press_under(&a, 3).await.0, 200);
    assert_eq!(node.press_under(&b, 3).await.0, 200);
    let (status, _) = node
        .clean(json!({ "archive": false, "session_ids": [a], "generation": 10 }))
        .await;
    assert_eq!(status, 200);
    let (status, body) = node.press_under(&a, 3).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "stale_epoch");
    assert_eq!(body["fence"], 10);
    // b was not cleaned: its presses go on under the epoch it started with.
    assert_eq!(
        node.press_under(&b, 3).await.1,
        Value::String("You clicked 2 times".into())
    );
    // a's next life starts at 1 under the clean's token; nothing was counted
    // for the refused press.
    assert_eq!(
        node.press_under(&a, 10).await.1,
        Value::String("You clicked 1 times".into())
    );
    let health: Value = node
        .http
        .get(format!("{}/health", node.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(health["features"]
        .as_array()
        .unwrap()
        .contains(&json!("fencing")));
}

#[tokio::test]
async fn a_clean_all_node_refuses_every_press_read_before_its_clean() {
    let _pool = database().await;
    let node = start(true).await;
    let (a, b) = (unique("a"), unique("b"));
    node.press_under(&a, 1).await;
    let (status, _) = node
        .clean(json!({ "archive": false, "session_ids": [b], "generation": 5 }))
        .await;
    assert_eq!(status, 200);
    for id in [&a, &b] {
        assert_eq!(node.press_under(id, 4).await.0, 409);
    }
    assert_eq!(node.node.session_count().await, 0);
}
