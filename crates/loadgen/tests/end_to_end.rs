//! loadgen against a real balancer: three reference nodes with no delay,
//! the balancer in rr then ch, `agents` with small numbers.

use std::path::Path;
use std::time::Duration;

use balancing::StrategyKind;
use loadgen::agents::{self, AgentsOptions};
use loadgen::plot::PNG_SIZE;
use nodes_control::{Application, Config};

async fn start_nodes(prefix: &str, n: usize) -> Vec<String> {
    testkit::spawn_cluster(prefix, n, false)
        .await
        .into_iter()
        .map(|node| node.address)
        .collect()
}

async fn start_balancer(strategy: StrategyKind, nodes: &[String]) -> String {
    testkit::ensure_database().await;
    let mut config = Config::new(
        &testkit::database_url(),
        &testkit::redis_url(),
        "loadgen-test",
    );
    config.redis_key_prefix = format!("loadgen-test-{}:", uuid::Uuid::new_v4().simple());
    config.strategy = strategy;
    config.nodes = nodes.to_vec();
    let app = Application::build(config).await.unwrap();
    let address = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    address
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
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{} is not a PNG: {e}", path.display()));
    let info = reader.info();
    assert_eq!((info.width, info.height), PNG_SIZE, "{}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_through_rr_is_even_and_through_ch_fully_sticky_with_charts() {
    let nodes = start_nodes("n", 3).await;
    let out = std::env::temp_dir().join(format!("loadgen-e2e-{}", uuid::Uuid::new_v4().simple()));

    let rr = start_balancer(StrategyKind::RoundRobin, &nodes).await;
    let outputs = agents::run(&options(&rr, "rr", &out)).await.unwrap();
    let report = &outputs.report;
    assert_eq!((report.requests, report.ok, report.errors), (300, 300, 0));
    assert_eq!(report.nodes.len(), 3, "{:?}", report.nodes);
    assert!(
        report.spread <= 1.0,
        "rr counts differ by more than one: {:?}",
        report.nodes
    );

    let ch = start_balancer(StrategyKind::ConsistentHash, &nodes).await;
    let report = agents::run(&options(&ch, "ch", &out)).await.unwrap().report;
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
    let url = start_balancer(StrategyKind::RoundRobin, &nodes).await;
    let out = std::env::temp_dir().join(format!(
        "loadgen-sessions-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let opts = loadgen::sessions::SessionsOptions {
        url,
        sessions: 20,
        presses: 5,
        concurrency: 8,
        label: "sessions".into(),
        out_dir: out.clone(),
        timeout: Duration::from_secs(10),
    };
    let report = loadgen::sessions::run(&opts).await.unwrap().report;
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
