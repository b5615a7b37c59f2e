//! loadgen against a real balancer: three reference nodes with no delay,
//! the balancer in rr then ch, `agents` with small numbers.

use std::path::Path;
use std::time::Duration;

use balancing::StrategyKind;
use loadgen::agents::{self, AgentsOptions};
use loadgen::compare::{self, CompareOptions};
use loadgen::plot::PNG_SIZE;
use nodes_control::{Application, Config};

async fn start_nodes(prefix: &str, n: usize) -> Vec<String> {
    testkit::spawn_cluster(prefix, n, false)
        .await
        .into_iter()
        .map(|node| node.address)
        .collect()
}

/// A balancer of this test's own (its own key prefix), stopped and its
/// keys removed by [`Balancer::stop`].
struct Balancer {
    url: String,
    prefix: String,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Balancer {
    /// Shuts it down, then removes what it kept in Redis.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.running.await;
        let _ = testkit::unlink_prefix(&testkit::redis_url(), &self.prefix, |_| true).await;
    }
}

async fn start_balancer(strategy: StrategyKind, nodes: &[String]) -> Balancer {
    testkit::ensure_database().await;
    let mut config = Config::new(
        &testkit::database_url(),
        &testkit::redis_url(),
        "loadgen-test",
    );
    config.redis_key_prefix = format!("loadgen-test-{}:", uuid::Uuid::new_v4().simple());
    config.strategy = strategy;
    config.nodes = nodes.to_vec();
    let prefix = config.redis_key_prefix.clone();
    let app = Application::build(config).await.unwrap();
    let url = format!("http://127.0.0.1:{}", app.port());
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let running = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    Balancer {
        url,
        prefix,
        stop,
        running,
    }
}

fn options(url: &str, label: &str, out_dir: &Path) -> AgentsOptions {
    AgentsOptions {
        url: url.to_owned(),
        requests: 300,
        users: 30,
        concurrency: 10,
        label: label.to_owned(),
        out_dir: out_dir.to_owned(),
        seed: 7,
        timeout: Duration::from_secs(10),
    }
}

fn assert_png(path: &Path) {
    assert_png_of(path, PNG_SIZE);
}

fn assert_png_of(path: &Path, size: (u32, u32)) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{} is not a PNG: {e}", path.display()));
    let info = reader.info();
    assert_eq!((info.width, info.height), size, "{}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_through_rr_is_even_and_through_ch_fully_sticky_with_charts() {
    let nodes = start_nodes("n", 3).await;
    let out = std::env::temp_dir().join(format!("loadgen-e2e-{}", uuid::Uuid::new_v4().simple()));

    let rr = start_balancer(StrategyKind::RoundRobin, &nodes).await;
    let outputs = agents::run(&options(&rr.url, "rr", &out)).await.unwrap();
    rr.stop().await;
    let report = &outputs.report;
    assert_eq!((report.requests, report.ok, report.errors), (300, 300, 0));
    assert_eq!(report.nodes.len(), 3, "{:?}", report.nodes);
    assert!(
        report.spread <= 1.0,
        "rr counts differ by more than one: {:?}",
        report.nodes
    );

    let ch = start_balancer(StrategyKind::ConsistentHash, &nodes).await;
    let report = agents::run(&options(&ch.url, "ch", &out))
        .await
        .unwrap()
        .report;
    ch.stop().await;
    assert_eq!(report.errors, 0);
    assert_eq!(
        report.stickiness, 1.0,
        "every user stays on one node under ch"
    );

    for label in ["rr", "ch"] {
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("{label}.json"))).unwrap(),
        )
        .unwrap();
        for field in [
            "nodes",
            "mean",
            "variance",
            "std_pct",
            "spread",
            "stickiness",
            "p50_ms",
            "p99_ms",
        ] {
            assert!(!json[field].is_null(), "{label}.json lacks {field}");
        }
        let sum: u64 = json["nodes"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum, 300);
        assert!(std::fs::read_to_string(out.join(format!("{label}.md")))
            .unwrap()
            .contains("| node |"));
        assert_png(&out.join(format!("distribution_{label}.png")));
        assert_png(&out.join(format!("latency_{label}.png")));
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test]
async fn an_unreachable_balancer_is_reported_and_the_run_still_writes_its_files() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::env::temp_dir().join(format!("loadgen-down-{}", uuid::Uuid::new_v4().simple()));
    let mut opts = options(&format!("http://127.0.0.1:{port}"), "down", &out);
    opts.requests = 20;
    let report = agents::run(&opts).await.unwrap().report;
    assert_eq!((report.ok, report.errors), (0, 20));
    assert!(
        report.error_samples[0].contains("cannot connect"),
        "{:?}",
        report.error_samples
    );
    assert!(out.join("down.json").exists());
    assert_png(&out.join("distribution_down.png"));
    let _ = std::fs::remove_dir_all(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_scenario_checks_counts_and_stickiness() {
    let nodes = start_nodes("s", 2).await;
    let balancer = start_balancer(StrategyKind::RoundRobin, &nodes).await;
    let out = std::env::temp_dir().join(format!(
        "loadgen-sessions-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let opts = loadgen::sessions::SessionsOptions {
        url: balancer.url.clone(),
        sessions: 20,
        presses: 5,
        concurrency: 8,
        label: "sessions".into(),
        out_dir: out.clone(),
        timeout: Duration::from_secs(10),
    };
    let report = loadgen::sessions::run(&opts).await.unwrap().report;
    balancer.stop().await;
    let check = report.session_check.unwrap();
    assert_eq!(
        (
            check.sessions,
            check.sessions_ok,
            check.broken_sequences,
            check.moved_sessions
        ),
        (20, 20, 0, 0)
    );
    assert_eq!(report.stickiness, 1.0);
    assert_eq!(report.nodes.values().sum::<u64>(), 100);
    let _ = std::fs::remove_dir_all(&out);
}

/// `nodes-control` as `cargo test --workspace` builds it, beside this test.
fn balancer_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("nodes-control");
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build -p nodes-control` (cargo test --workspace builds it)",
        binary.display()
    );
    binary
}

fn compare_options(strategies: &[&str], nodes: &[String], out_dir: &Path) -> CompareOptions {
    CompareOptions {
        strategies: strategies.iter().map(|s| s.to_string()).collect(),
        key_prefix: format!("loadgen-test-{}-", uuid::Uuid::new_v4().simple()),
        urls: Vec::new(),
        url: "http://127.0.0.1:1".into(),
        admin_token: None,
        nodes: nodes.to_vec(),
        balancer_bin: Some(balancer_binary()),
        balancer_env: vec![("DATABASE_URL".into(), testkit::database_url())],
        agents: AgentsOptions {
            requests: 40,
            users: 8,
            ..options("", "", out_dir)
        },
    }
}

async fn press_node(node: &str, session: &str) -> String {
    reqwest::Client::new()
        .post(format!("{node}/press"))
        .json(&serde_json::json!({ "session_id": session }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn compare_refuses_an_unknown_strategy_before_touching_any_node() {
    let nodes = start_nodes("u", 1).await;
    assert_eq!(press_node(&nodes[0], "kept").await, "You clicked 1 times");
    let out = std::env::temp_dir().join(format!("loadgen-bogus-{}", uuid::Uuid::new_v4().simple()));
    let error = compare::run(&compare_options(&["rr", "bogus"], &nodes, &out))
        .await
        .expect_err("an unknown strategy is refused");
    assert!(error.to_string().contains("bogus"), "{error}");
    // No balancer registered the node (which would have wiped it).
    assert_eq!(press_node(&nodes[0], "kept").await, "You clicked 2 times");
    assert!(!out.exists(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_deletes_the_redis_keys_of_the_balancers_it_started() {
    testkit::ensure_database().await;
    let nodes = start_nodes("k", 2).await;
    let out = std::env::temp_dir().join(format!("loadgen-keys-{}", uuid::Uuid::new_v4().simple()));
    let opts = compare_options(&["rr", "p2c"], &nodes, &out);
    let (comparison, _files) = compare::run(&opts).await.expect("the comparison runs");
    assert_eq!(comparison.strategies.len(), 2);
    assert!(comparison
        .strategies
        .iter()
        .all(|r| r.requests == 40 && r.errors == 0));
    let client = redis::Client::open(testkit::redis_url().as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", opts.key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(left.is_empty(), "{} keys left: {left:?}", left.len());
    // One grouped chart for the comparison, the one compare.md shows.
    assert_png_of(&out.join("compare.png"), loadgen::plot::COMPARE_PNG_SIZE);
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert_eq!(md.matches("![").count(), 1, "{md}");
    assert!(md.contains("](compare.png)"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
