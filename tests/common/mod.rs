//! Test harness: a real Redis, a real Postgres, real HTTP on ephemeral ports.
//! Every test gets its own Redis key prefix and its own session ids, so tests
//! run in parallel against the same servers without seeing each other.

pub mod node;
pub mod process;
pub mod proxy;
#[allow(dead_code)] // the conformance suite's nodes, unused elsewhere
pub mod task_node;
pub(crate) mod teardown;
pub mod workload;

use std::time::Duration;

use nodes_control::clock::ManualTime;
use nodes_control::http::ApiContext;
use nodes_control::{Application, Config};
use serde_json::Value;

#[allow(unused_imports)]
pub use node::TestNode;
#[allow(unused_imports)]
pub use proxy::TcpProxy;

pub const ADMIN_TOKEN: &str = "test-admin-token";

pub use testkit::{database_url, deal, ensure_database, redis_url};

/// Wall-clock time as the store keeps it: ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A unique tag for this test's keys and session ids.
pub fn unique(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// The balancer's log on stderr when `TEST_LOG` holds a filter
/// (`TEST_LOG=nodes_control=debug`): to see what a failing test went
/// through. Silent otherwise.
fn log_if_asked() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// A configuration for one test: its own key prefix, quick health checks.
pub fn test_config() -> Config {
    let mut config = Config::new(&database_url(), &redis_url(), ADMIN_TOKEN);
    config.redis_key_prefix = format!("{}:", unique("test"));
    config.health_check_interval_ms = 200;
    config.node_timeout_ms = 2000;
    config
}

pub struct TestApp {
    pub address: String,
    pub config: Config,
    pub ctx: ApiContext,
    pub sweeper: nodes_control::lifecycle::Sweeper,
    pub supervisor: nodes_control::supervisor::Supervisor,
    pub http: reqwest::Client,
    /// Moves this app's session clock: sessions expire when a test says,
    /// not when a TTL has run out in real time.
    pub time: ManualTime,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(test_config()).await
}

pub async fn spawn_app_with(config: Config) -> TestApp {
    spawn_app_on(config, ManualTime::new()).await
}

/// An app whose sessions expire on `time` (replicas of one test share it).
pub async fn spawn_app_on(config: Config, time: ManualTime) -> TestApp {
    log_if_asked();
    ensure_database().await;
    teardown::joined(&config.redis_key_prefix);
    let app = Application::build_with_clock(config.clone(), time.clock())
        .await
        .expect("application builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    let ctx = app.context();
    let sweeper = app.sweeper();
    let supervisor = app.supervisor();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let leaves = teardown::LeavesOnDrop(config.redis_key_prefix.clone());
    tokio::spawn(async move {
        let _leaves = leaves;
        app.run_until_stopped(async {
            let _ = rx.await;
        })
        .await
    });
    TestApp {
        address,
        config,
        ctx,
        sweeper,
        supervisor,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        time,
        shutdown: Some(tx),
    }
}

/// One answer of `POST /press`.
#[derive(Debug, Clone)]
pub struct PressAnswer {
    pub status: u16,
    pub body: String,
    pub served_by: Option<String>,
}

impl PressAnswer {
    /// The count in `You clicked N times`.
    pub fn clicks(&self) -> i64 {
        testkit::parse_clicks(&self.body)
            .unwrap_or_else(|| panic!("not a click answer: {} {}", self.status, self.body))
    }
}

impl TestApp {
    pub async fn press(&self, session_id: &str) -> PressAnswer {
        teardown::pressed(&self.config.redis_key_prefix, session_id);
        let response = self
            .http
            .post(format!("{}/press", self.address))
            .json(&serde_json::json!({ "session_id": session_id }))
            .send()
            .await
            .expect("balancer answers");
        let status = response.status().as_u16();
        let served_by = response
            .headers()
            .get("x-served-by")
            .map(|v| v.to_str().unwrap().to_owned());
        PressAnswer {
            status,
            body: response.text().await.unwrap(),
            served_by,
        }
    }

    /// A press sent from a task of its own (its answer comes later).
    pub fn press_in_background(&self, session_id: &str) -> tokio::task::JoinHandle<PressAnswer> {
        teardown::pressed(&self.config.redis_key_prefix, session_id);
        let (http, url) = (self.http.clone(), format!("{}/press", self.address));
        let body = serde_json::json!({ "session_id": session_id });
        tokio::spawn(async move {
            let response = http.post(url).json(&body).send().await.unwrap();
            PressAnswer {
                status: response.status().as_u16(),
                served_by: None,
                body: response.text().await.unwrap(),
            }
        })
    }

    /// `POST /node` with the admin token; returns status and JSON body.
    pub async fn node_command(&self, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/node", self.address))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn add_node(&self, address: &str, name: &str) {
        let (status, body) = self
            .node_command(serde_json::json!({ "action": "add", "address": address, "name": name }))
            .await;
        assert_eq!(status, 200, "adding {address}: {body}");
    }

    pub async fn remove_node(&self, address: &str) -> Value {
        let (status, body) = self
            .node_command(serde_json::json!({ "action": "remove", "address": address }))
            .await;
        assert_eq!(status, 200, "removing {address}: {body}");
        body
    }

    /// Status of `GET /readyz`.
    pub async fn readyz(&self) -> u16 {
        let response = self
            .http
            .get(format!("{}/readyz", self.address))
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    }

    /// Waits for a registry rebuild after Redis forgot: not ready, then
    /// ready again, within 15 s.
    pub async fn wait_rebuilt(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
        let mut saw_not_ready = false;
        loop {
            let ready = self.readyz().await == 200;
            saw_not_ready |= !ready;
            if ready && saw_not_ready {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "never rebuilt");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Marks the node at `address` down, as a failed health check would,
    /// and nothing more (no failover is started).
    pub async fn mark_down(&self, address: &str) {
        let registry = self.ctx.admin.registry();
        let entry = registry.table().get(address).expect("a node of this app");
        registry
            .mark_down(
                &entry,
                nodes_control::archive::events::Actor::HealthCheck,
                "a test says so",
            )
            .await;
    }

    pub async fn nodes(&self) -> Vec<Value> {
        serde_json::from_value(self.admin_get("/nodes").await).unwrap()
    }

    /// `GET path_and_query` with the admin token; must answer 200 JSON.
    pub async fn admin_get(&self, path_and_query: &str) -> Value {
        let response = self
            .http
            .get(format!("{}{path_and_query}", self.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path_and_query}");
        response.json().await.unwrap()
    }

    /// Active sessions per node name, from `GET /nodes`.
    pub async fn active_sessions(&self) -> Vec<(String, i64)> {
        self.nodes()
            .await
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap().to_owned(),
                    n["active_sessions"].as_i64().unwrap(),
                )
            })
            .collect()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts `n` reference nodes and an app with all of them registered.
pub async fn spawn_cluster(n: usize) -> (TestApp, Vec<TestNode>) {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, n, false).await;
    (app, nodes)
}

/// `config` with Postgres reached through `proxy` (which a test can cut).
pub fn through_postgres_proxy(mut config: Config, proxy: &TcpProxy) -> Config {
    let db_name = database_url().rsplit_once('/').unwrap().1.to_owned();
    config.database_url = format!("postgres://postgres@{}/{db_name}", proxy.addr);
    config
}

/// Presses until the balancer answers 200 (at most 15 s), after an outage.
pub async fn press_until_ok(app: &TestApp, session: &str) -> PressAnswer {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = app.press(session).await;
        if answer.status == 200 || tokio::time::Instant::now() > deadline {
            assert_eq!(answer.status, 200, "did not recover: {answer:?}");
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A configuration whose sessions live `ttl_secs` and are swept every second.
pub fn short_lived_config(ttl_secs: u64) -> Config {
    let mut config = test_config();
    config.session_ttl_secs = ttl_secs;
    config.sweep_interval_secs = 1;
    config
}

pub async fn start_nodes(app: &TestApp, n: usize, clean_all: bool) -> Vec<TestNode> {
    ensure_database().await;
    let mut nodes = Vec::new();
    for i in 0..n {
        let node = TestNode::start(&format!("n{}", i + 1), clean_all);
        app.add_node(&node.address, &node.name).await;
        nodes.push(node);
    }
    nodes
}

/// Runs `work` under the node's lock, as a node operation does: what a
/// test plays of a cleaner (a fence, a journal, an unmap) is written with
/// the lock's token, as the cleaner's writes are.
pub async fn under_node_lock<T, Fut>(
    store: &nodes_control::store::Store,
    addr: &str,
    work: impl FnOnce(nodes_control::store::NodeLock) -> Fut,
) -> T
where
    Fut: std::future::Future<Output = T>,
{
    nodes_control::store::with_node_lock(
        &store.locks,
        addr,
        Duration::from_secs(15),
        || -> nodes_control::store::StoreError { panic!("the node {addr} stayed locked") },
        |lock| async move { Ok(work(lock).await) },
    )
    .await
    .unwrap()
}
