//! The conformance suite: nodes we did not write for the balancer
//! (`tests/nodes/task_node.py`: the task's `/press` and `/clean` and nothing
//! else; no `/health`, no instance id, no clean tokens, every clean forgets
//! everything), each variant taken with default settings through presses,
//! expiry, an admin removal, kill -9 and an overload burst. The checking
//! client knows every session's true count: never above it; without a
//! fault every answer is the last one plus one.

#[allow(dead_code)] // the suite uses part of the kit
mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::task_node::{Certificates, TaskNode, Variant};
use common::workload::{assert_counts_exact, press_for};
use common::{spawn_app_with, test_config, unique, TestApp};
use nodes_control::config::HealthCheck;
use serde_json::{json, Value};
use testkit::checker;

/// One variant at a time: an overload burst on two cores would spill into
/// a neighbour's timings.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_the_task_api_only_without_health_is_served() {
    conform(Variant::TaskOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_you_clicked_the_button_n_times_is_served() {
    conform(Variant::ButtonWording).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_node_serving_one_request_at_a_time_is_served() {
    conform(Variant::OneAtATime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_a_proxy_closing_keep_alive_connections_is_served() {
    conform(Variant::BehindProxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_node_of_the_task_api_is_served() {
    conform(Variant::Https).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_in_50_to_150_ms_is_served() {
    conform(Variant::Slow).await;
}

/// The whole tour for one variant, on two nodes.
async fn conform(variant: Variant) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let certificates = (variant == Variant::Https).then(|| Certificates::generate(&unique("ca")));
    let mut config = test_config();
    config.node_ca_file = certificates.as_ref().map(|c| c.ca.clone());
    let app = Arc::new(spawn_app_with(config).await);
    let a = TaskNode::start(variant, certificates.as_ref());
    let mut b = TaskNode::start(variant, certificates.as_ref());
    app.add_node(&a.address, "a").await;
    app.add_node(&b.address, "b").await;
    for node in app.nodes().await {
        assert_eq!(node["state"], "up", "{variant:?}: {node}");
        assert_eq!(
            node["offers"],
            json!({"health": false, "instance_id": false, "clean_tokens": false, "selective_clean": false, "fencing": false}),
            "{variant:?}: the node offers nothing beyond the task's API: {node}"
        );
    }

    // Presses, for several rounds of the default health check: a node
    // without /health stays up, every answer is the last one plus one.
    let sessions: Vec<String> = (0..8).map(|i| unique(&format!("conf{i}"))).collect();
    let answers = press_for(
        std::slice::from_ref(&app),
        &sessions,
        4,
        Duration::from_millis(1500),
    )
    .await;
    assert_counts_exact(&answers);
    let mut last: HashMap<String, i64> = answers
        .iter()
        .map(|(s, seen)| (s.clone(), seen.len() as i64))
        .collect();
    let mut truth = last.clone();
    let mut served_by: HashMap<String, String> = HashMap::new();

    // Expiry: the sweep archives every session (each clean forgets all of
    // the node's); each goes on from its archive.
    app.time
        .advance(app.config.session_ttl() + Duration::from_secs(1));
    let now = app.sweeper.clock().now_ms();
    app.sweeper.sweep_once(now).await.expect("the sweep runs");
    press_each_exactly(&app, &sessions, &mut last, &mut truth, &mut served_by).await;

    // An admin removal: the node archives, its sessions go on elsewhere.
    let removed = app.remove_node(&a.address).await;
    assert_eq!(removed["archived"], true, "{variant:?}: {removed}");
    press_each_exactly(&app, &sessions, &mut last, &mut truth, &mut served_by).await;
    assert!(served_by.values().all(|n| n == "b"), "{served_by:?}");

    // Back again (wiped), then b is killed with kill -9: its sessions go on
    // on a from the count last shown, never above the truth; a's stay exact.
    app.add_node(&a.address, "a").await;
    let fresh: Vec<String> = (0..4).map(|i| unique(&format!("conf-new{i}"))).collect();
    press_each_exactly(&app, &fresh, &mut last, &mut truth, &mut served_by).await;
    b.kill();
    let everyone: Vec<String> = sessions.iter().chain(&fresh).cloned().collect();
    for session in &everyone {
        let answer = press_until_answered(&app, session, &mut truth).await;
        let clicks = answer.clicks();
        let was_on = served_by[session].clone();
        assert!(
            clicks <= truth[session],
            "{variant:?} {session}: {clicks} above the truth {}",
            truth[session]
        );
        if was_on == "a" {
            assert_eq!(
                clicks,
                last[session] + 1,
                "{variant:?} {session} was on the node that lived"
            );
        } else {
            // The failover archived for the dead node the count the
            // replica showed (the hand-over): no click shown is lost,
            // though the node of the task's API archived nothing.
            assert!(
                clicks > last[session],
                "{variant:?} {session}: {clicks} after {} was shown: a click shown was lost",
                last[session]
            );
        }
        assert_eq!(answer.served_by.as_deref(), Some("a"));
        last.insert(session.clone(), clicks);
    }

    // b comes back as a new process: checked, wiped, serving again.
    b.restart();
    wait_until_up(&app, &b.address).await;

    // An overload burst: no node is taken down, no session resets, nothing
    // above the truth; what the nodes cannot take is answered node_busy
    // (or a 504 node_timeout: a press sent to a saturated node, maybe
    // counted).
    let burst_started = chrono::Utc::now();
    let crowd: Vec<String> = (0..64).map(|i| unique(&format!("crowd{i}"))).collect();
    let (report, _) = checker::run(
        std::slice::from_ref(&app.address),
        &crowd,
        64,
        Duration::from_secs(3),
    )
    .await;
    println!(
        "{}",
        report.summary(&format!("conformance {variant:?} burst"), None)
    );
    assert!(
        report.above_truth.is_empty(),
        "{variant:?}: {:?}",
        report.above_truth
    );
    assert_no_node_went_down(&app, &[&a.address, &b.address], burst_started).await;
    assert_eq!(report.repeats, 0, "{variant:?}: a session reset");
    assert!(report.ok > 0, "{variant:?}: nothing served");
    for code in report.errors.keys() {
        assert!(
            ["node_busy", "node_timeout", "node_unavailable"].contains(&code.as_str()),
            "{variant:?}: {:?}",
            report.errors
        );
    }
}

/// Issue 54 (contract §4.21): a node of the task's API (no clean tokens)
/// killed with kill -9 while a clean of it is in flight (an admin's
/// removal, its `/clean` held at the node until the kill, so the test does
/// not rest on luck) loses no click its users were shown, under eight
/// closed-loop clients on two replicas: the clean's failover hands over
/// what the replicas showed, and nothing is counted twice or above the
/// truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_during_a_clean_of_it_loses_no_click_a_user_was_shown() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let config = test_config();
    let first = Arc::new(spawn_app_with(config.clone()).await);
    let second = spawn_app_with(config).await;
    let marker = std::env::temp_dir().join(unique("held-clean"));
    let a = TaskNode::start(Variant::TaskOnly, None);
    let mut b = TaskNode::holding_cleans(&marker);
    first.add_node(&a.address, "a").await;
    first.add_node(&b.address, "b").await;
    let urls = vec![first.address.clone(), second.address.clone()];
    let sessions: Vec<String> = (0..16).map(|i| unique(&format!("held{i}"))).collect();
    let load = {
        let (urls, sessions) = (urls.clone(), sessions.clone());
        tokio::spawn(async move { checker::run(&urls, &sessions, 8, Duration::from_secs(8)).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let removal = {
        let (app, address) = (first.clone(), b.address.clone());
        tokio::spawn(async move {
            app.node_command(json!({ "action": "remove", "address": address }))
                .await
        })
    };
    testkit::eventually(
        Duration::from_secs(10),
        "the removal's /clean held at the node",
        || async { testkit::holds(marker.exists(), || ()) },
    )
    .await;
    b.kill();
    let (status, body) = removal.await.unwrap();
    let (report, finals) = load.await.unwrap();
    let _ = std::fs::remove_file(&marker);
    println!(
        "{}",
        report.summary(
            "kill -9 of a task-API node during its removal's clean",
            Some("b")
        )
    );
    assert_eq!(status, 200, "the removal: {body}");
    let shown_by_b = report
        .answers
        .iter()
        .filter(|answer| answer.served_by.as_deref() == Some("b") && answer.clicks.is_some())
        .count();
    assert!(shown_by_b > 0, "b showed nothing: nothing to lose");
    assert!(report.above_truth.is_empty(), "{:?}", report.above_truth);
    let beyond = report.loss_beyond_unshown(&finals);
    assert!(
        beyond.is_empty(),
        "lost clicks users were shown: {beyond:?}"
    );
    assert_eq!(report.repeats, 0, "answers repeated");
}

/// Presses each session once; each must answer its last count plus one.
async fn press_each_exactly(
    app: &TestApp,
    sessions: &[String],
    last: &mut HashMap<String, i64>,
    truth: &mut HashMap<String, i64>,
    served_by: &mut HashMap<String, String>,
) {
    for session in sessions {
        let answer = app.press(session).await;
        *truth.entry(session.clone()).or_default() += 1;
        let expected = last.get(session).copied().unwrap_or(0) + 1;
        assert_eq!(answer.status, 200, "{session}: {answer:?}");
        assert_eq!(answer.clicks(), expected, "{session}: {answer:?}");
        last.insert(session.clone(), expected);
        served_by.insert(session.clone(), answer.served_by.unwrap_or_default());
    }
}

/// Presses until the balancer answers with a count (a press answered with
/// an error may have been counted: it counts as sent).
async fn press_until_answered(
    app: &TestApp,
    session: &str,
    truth: &mut HashMap<String, i64>,
) -> common::PressAnswer {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        *truth.entry(session.to_owned()).or_default() += 1;
        let answer = app.press(session).await;
        if answer.status == 200 {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{session}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_until_up(app: &TestApp, address: &str) {
    testkit::eventually(
        Duration::from_secs(20),
        &format!("{address} up"),
        || async {
            let nodes = app.nodes().await;
            let node = nodes.iter().find(|n| n["address"] == address).cloned();
            testkit::holds(node.as_ref().is_some_and(|n| n["state"] == "up"), || node)
        },
    )
    .await
}

/// No `marked_down` event for `nodes` since `since`, and every one up. The
/// audit log is written in the background: an event recorded after the
/// burst (a re-weighting) is waited for first, so the log surely holds
/// whatever came before it.
async fn assert_no_node_went_down(
    app: &TestApp,
    nodes: &[&str],
    since: chrono::DateTime<chrono::Utc>,
) {
    let (status, body) = app
        .node_command(json!({ "action": "add", "address": nodes[0], "weight": 2 }))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("reweighted")),
        "{body}"
    );
    let log = testkit::eventually(
        Duration::from_secs(10),
        "the re-weighting in the log",
        || async {
            let log = events_since(app, since).await;
            if log.iter().any(|e| e["action"] == "reweighted") {
                Ok(log)
            } else {
                Err(log)
            }
        },
    )
    .await;
    let downs: Vec<&Value> = log
        .iter()
        .filter(|e| e["action"] == "marked_down")
        .collect();
    assert!(
        downs.is_empty(),
        "a node was taken down under load: {downs:?}"
    );
    for node in app.nodes().await {
        if nodes.contains(&node["address"].as_str().unwrap_or_default()) {
            assert_eq!(node["state"], "up", "{node}");
        }
    }
}

async fn events_since(app: &TestApp, since: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    // UTC with a Z: nothing in it to escape in a query string.
    let since = since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let log = app.admin_get(&format!("/events?since={since}")).await;
    serde_json::from_value(log).unwrap()
}

/// The overload of the issue that asked for all this: two nodes that serve
/// one request at a time, 20 ms a press, meet 160 concurrent users. Before,
/// both were marked down and most answers were 503s of dead nodes; now
/// neither goes down, no session resets, and the nodes serve near their
/// capacity while the excess is answered node_busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_at_a_time_nodes_under_160_users_are_saturated_not_taken_down() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let app = spawn_app_with(test_config()).await;
    let a = TaskNode::start(Variant::OneAtATime, None);
    let b = TaskNode::start(Variant::OneAtATime, None);
    app.add_node(&a.address, "a").await;
    app.add_node(&b.address, "b").await;
    let started = chrono::Utc::now();
    let users: Vec<String> = (0..160).map(|i| unique(&format!("user{i}"))).collect();
    let duration = Duration::from_secs(6);
    let (report, _) = checker::run(std::slice::from_ref(&app.address), &users, 160, duration).await;
    let capacity = 2.0 * duration.as_secs_f64() / 0.020;
    println!(
        "FIGURES one-at-a-time overload: {} served of ~{capacity:.0} the nodes can serve; {:?}",
        report.ok, report.errors
    );
    println!("{}", report.summary("one-at-a-time overload", None));
    assert!(report.above_truth.is_empty(), "{:?}", report.above_truth);
    assert_eq!(report.repeats, 0, "a session reset");
    for code in report.errors.keys() {
        assert!(
            ["node_busy", "node_timeout"].contains(&code.as_str()),
            "{:?}",
            report.errors
        );
    }
    assert_no_node_went_down(&app, &[&a.address, &b.address], started).await;
    // Not a speed goal: a floor far below capacity that a balancer taking
    // its nodes down (or queueing without end) does not reach.
    assert!(
        report.ok as f64 >= capacity / 4.0,
        "{} served of ~{capacity:.0}",
        report.ok
    );
}

/// `HEALTH_CHECK=tcp` and `off`: a killed node is taken down (by the
/// check, or by the press that fails), and comes back when it answers
/// again (under `off`, a down node is tried with a connect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_off_health_checks_take_a_dead_node_down_and_bring_it_back() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for check in [HealthCheck::Tcp, HealthCheck::Off] {
        let mut config = test_config();
        config.health_check = check;
        let app = spawn_app_with(config).await;
        let mut a = TaskNode::start(Variant::TaskOnly, None);
        let b = TaskNode::start(Variant::TaskOnly, None);
        app.add_node(&a.address, "a").await;
        app.add_node(&b.address, "b").await;
        let session = unique("probe");
        let first = app.press(&session).await;
        assert_eq!(first.clicks(), 1);
        let on_a = first.served_by.as_deref() == Some("a");
        let victim_address = if on_a {
            a.address.clone()
        } else {
            b.address.clone()
        };
        // Kill the session's node (a, or b by swapping roles).
        let mut b = b;
        let victim = if on_a { &mut a } else { &mut b };
        victim.kill();
        // A press marks it down (the tcp check may have done it already)
        // and the session goes on elsewhere from its archive (none: 1).
        let mut truth = HashMap::from([(session.clone(), 1)]);
        let answer = press_until_answered(&app, &session, &mut truth).await;
        assert!(answer.clicks() <= truth[&session], "{check:?}: {answer:?}");
        assert_ne!(answer.served_by.as_deref(), first.served_by.as_deref());
        let state = |nodes: Vec<Value>| {
            nodes
                .into_iter()
                .find(|n| n["address"] == victim_address.as_str())
                .map(|n| n["state"].clone())
        };
        assert_eq!(state(app.nodes().await), Some(json!("down")), "{check:?}");
        victim.restart();
        wait_until_up(&app, &victim_address).await;
    }
}

/// The minimal node the README shows, run as it is printed there: added
/// with default settings, pressed, cleaned by an expiry, removed with its
/// archive, every answer the last one plus one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_s_minimal_python_node_is_served() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let code = readme
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows a Python node");
    let script = std::env::temp_dir().join(format!("{}.py", unique("readme-node")));
    std::fs::write(&script, code).unwrap();
    let app = Arc::new(spawn_app_with(test_config()).await);
    let mut nodes = Vec::new();
    for name in ["r1", "r2"] {
        let port = common::process::free_port();
        let child = std::process::Command::new("python3")
            .arg(&script)
            .arg(port.to_string())
            .arg(common::database_url())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs");
        nodes.push(KillOnDrop(child));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the README's node did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        app.add_node(&format!("http://127.0.0.1:{port}"), name)
            .await;
    }
    let sessions: Vec<String> = (0..6).map(|i| unique(&format!("readme{i}"))).collect();
    let (mut last, mut truth, mut served_by) = (HashMap::new(), HashMap::new(), HashMap::new());
    for _ in 0..3 {
        press_each_exactly(&app, &sessions, &mut last, &mut truth, &mut served_by).await;
    }
    app.time
        .advance(app.config.session_ttl() + Duration::from_secs(1));
    let now = app.sweeper.clock().now_ms();
    app.sweeper.sweep_once(now).await.expect("the sweep runs");
    press_each_exactly(&app, &sessions, &mut last, &mut truth, &mut served_by).await;
    let victim = app.nodes().await[0]["address"].as_str().unwrap().to_owned();
    assert_eq!(app.remove_node(&victim).await["archived"], true);
    press_each_exactly(&app, &sessions, &mut last, &mut truth, &mut served_by).await;
    assert!(sessions.iter().all(|s| last[s] == 5), "{last:?}");
    let _ = std::fs::remove_file(&script);
}

/// A child process killed (SIGKILL) when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Timeouts alone never take the last node down: the only node is stopped
/// (SIGSTOP) under a press; the press answers 504 node_timeout, the node
/// stays up, and once it resumes its sessions go on with their counts
/// (the press it took late may count: at most the truth, never a reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_last_node_is_waited_for_not_taken_down() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mut config = test_config();
    config.node_timeout_ms = 500;
    let app = spawn_app_with(config).await;
    let node = common::process::NodeProcess::start("only", &common::database_url());
    app.add_node(&node.address, "only").await;
    let started = chrono::Utc::now();
    let session = unique("hung");
    for expected in 1..=3 {
        assert_eq!(app.press(&session).await.clicks(), expected);
    }
    node.pause();
    let stalled = app.press(&session).await;
    assert_eq!(stalled.status, 504, "{stalled:?}");
    assert!(stalled.body.contains("node_timeout"), "{stalled:?}");
    node.resume();
    let answer =
        press_until_answered(&app, &session, &mut HashMap::from([(session.clone(), 4)])).await;
    // Four presses before this one: the stalled press was counted late (5)
    // or not at all (4); never a reset to 1, never above the truth.
    let clicks = answer.clicks();
    assert!((4..=5).contains(&clicks), "{answer:?}");
    assert_no_node_went_down(&app, &[&node.address], started).await;
}
