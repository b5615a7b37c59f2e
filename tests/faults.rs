//! The fault suite (design.md §4.5, §4.10-4.13): real `click-node` processes
//! and a real Redis are killed, stopped and restarted under load; Postgres is
//! cut or silently blackholed through a proxy; clients hang up mid-clean.
//! The checking client (`testkit::checker`) knows every session's true count and
//! judges every answer. Each scenario prints a `FIGURES` line (run with
//! `--nocapture` to see them; docs/faults.md quotes them).
//!
//! Must hold everywhere: no answer and no final count above the truth.
//! Without a fault: no repeat, no gap, no error. With one: the clicks lost
//! are at most those the faulty part held, and sessions on healthy nodes
//! keep being served every second.

#[allow(dead_code)] // the fault suite uses part of the kit
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::process::{NodeProcess, RedisProcess};
use common::{database_url, spawn_app_with, unique, TcpProxy, TestApp};
use nodes_control::Config;
use testkit::checker::{self, Finals, Report};

/// Scenarios run one at a time: each judges throughput second by second,
/// which a neighbour's load on the same two cores would blur.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A balancer (or two sharing state) over three `click-node` processes.
struct Cluster {
    apps: Vec<Arc<TestApp>>,
    nodes: Vec<NodeProcess>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    async fn start(config: Config, replicas: usize, node_database_url: &str) -> Self {
        let turn = ONE_AT_A_TIME.lock().await;
        let first = Arc::new(spawn_app_with(config.clone()).await);
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let node = NodeProcess::start(&format!("n{i}"), node_database_url);
            first.add_node(&node.address, &node.name).await;
            nodes.push(node);
        }
        let mut apps = vec![first];
        for _ in 1..replicas {
            apps.push(Arc::new(spawn_app_with(config.clone()).await));
        }
        Self {
            apps,
            nodes,
            _turn: turn,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.apps.iter().map(|a| a.address.clone()).collect()
    }
}

/// TTL `ttl` s, sweeps every second, node timeout 2 s.
fn config(ttl: u64) -> Config {
    let mut config = common::short_lived_config(ttl);
    config.node_timeout_ms = 2000;
    config
}

/// Starts the checking client on `n` fresh sessions (one client task
/// each) for `secs` seconds, in the background.
fn start_load(
    cluster: &Cluster,
    tag: &str,
    n: usize,
    secs: u64,
) -> tokio::task::JoinHandle<(Report, Finals)> {
    let (urls, sessions) = (cluster.urls(), sessions(tag, n));
    tokio::spawn(async move { checker::run(&urls, &sessions, n, Duration::from_secs(secs)).await })
}

fn sessions(tag: &str, n: usize) -> Vec<String> {
    let tag = unique(tag);
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// What must hold in every scenario.
fn assert_never_above_truth(report: &Report) {
    assert!(
        report.above_truth.is_empty(),
        "{} answers above the truth, first: {:?}",
        report.above_truth.len(),
        report.above_truth.first()
    );
}

/// What must hold without a fault: exact counts, no error at all.
fn assert_exact(report: &Report, finals: &Finals) {
    assert_never_above_truth(report);
    assert_eq!(
        report.errors.len(),
        0,
        "errors without a fault: {:?}",
        report.errors
    );
    assert_eq!(
        (report.repeats, report.gaps),
        (0, 0),
        "repeats, gaps without a fault"
    );
    assert_eq!(report.lost, 0, "clicks lost without a fault");
    assert!(report.loss_beyond(None, finals).is_empty());
    assert_steady(report, None);
}

/// Sessions not on `faulty` were served every whole second: no second with
/// fewer than half the median answers.
fn assert_steady(report: &Report, faulty: Option<&str>) {
    let (worst, median) = report.worst_second(faulty);
    assert!(
        worst * 2 >= median,
        "a second with {worst} answers against a median of {median}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_counts_are_exact_through_expiries() {
    let cluster = Cluster::start(config(2), 1, &database_url()).await;
    let (report, finals) = checker::run(
        &cluster.urls(),
        &sessions("base", 100),
        16,
        Duration::from_secs(8),
    )
    .await;
    println!("{}", report.summary("baseline", None));
    assert!(report.ok > 500, "too few presses to judge: {}", report.ok);
    assert_exact(&report, &finals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_exact_when_a_node_is_removed_and_added_again() {
    let cluster = Cluster::start(config(3), 1, &database_url()).await;
    let app = cluster.apps[0].clone();
    let n2 = cluster.nodes[1].address.clone();
    let admin = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        app.remove_node(&n2).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        app.add_node(&n2, "n2").await;
    });
    let (report, finals) = checker::run(
        &cluster.urls(),
        &sessions("readd", 100),
        16,
        Duration::from_secs(9),
    )
    .await;
    admin.await.unwrap();
    println!("{}", report.summary("node removed and re-added", None));
    assert_exact(&report, &finals);
    let served_by_n2_after = report
        .answers
        .iter()
        .filter(|a| a.at > Duration::from_secs(6) && a.served_by.as_deref() == Some("n2"))
        .count();
    assert!(served_by_n2_after > 0, "the re-added node took no sessions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_alternating_with_a_removal_keep_counts_exact() {
    let cluster = Cluster::start(config(3), 2, &database_url()).await;
    let app = cluster.apps[1].clone();
    let n3 = cluster.nodes[2].address.clone();
    let admin = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        app.remove_node(&n3).await;
    });
    let (report, finals) = checker::run(
        &cluster.urls(),
        &sessions("replicas", 100),
        16,
        Duration::from_secs(8),
    )
    .await;
    admin.await.unwrap();
    println!("{}", report.summary("two replicas and a removal", None));
    assert_exact(&report, &finals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_serving_from_its_cache_never_serves_a_stale_mapping_while_another_removes_nodes_and_sweeps(
) {
    let shared = config(3);
    let mut serving = shared.clone();
    serving.sweep_interval_secs = 3600; // only the other replica sweeps
    let mut cluster = Cluster::start(shared, 1, &database_url()).await;
    let replica = Arc::new(spawn_app_with(serving).await);
    cluster.apps.push(replica.clone());
    let admin = cluster.apps[0].clone();
    let (n2, n3) = (
        cluster.nodes[1].address.clone(),
        cluster.nodes[2].address.clone(),
    );
    let changes = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        admin.remove_node(&n2).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        admin.add_node(&n2, "n2").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        admin.remove_node(&n3).await;
    });
    // Clients talk to the caching replica only.
    let (report, finals) = checker::run(
        std::slice::from_ref(&replica.address),
        &sessions("cached", 100),
        16,
        Duration::from_secs(9),
    )
    .await;
    changes.await.unwrap();
    println!(
        "{}",
        report.summary("cache: another replica removes nodes and sweeps", None)
    );
    assert_exact(&report, &finals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_connections_with_short_sessions_see_no_error() {
    let cluster = Cluster::start(config(3), 1, &database_url()).await;
    let (report, finals) = checker::run(
        &cluster.urls(),
        &sessions("c64", 200),
        64,
        Duration::from_secs(10),
    )
    .await;
    println!("{}", report.summary("64 connections, TTL 3 s", None));
    assert_exact(&report, &finals);
}

/// A node fault: never above the truth, loss bounded by what the node held,
/// the other nodes' sessions served every second of the fault `window` at
/// least half as fast as before it.
fn assert_bounded_node_fault(
    report: &Report,
    finals: &Finals,
    faulty: &str,
    window: std::ops::Range<usize>,
) {
    assert_never_above_truth(report);
    let beyond = report.loss_beyond(Some(faulty), finals);
    assert!(
        beyond.is_empty(),
        "lost more than the faulty node held: {beyond:?}"
    );
    let (worst, normal) = report.worst_second_during(Some(faulty), window);
    assert!(
        worst * 2 >= normal,
        "healthy nodes answered {worst} presses in their worst second of the fault, {normal} before it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_and_restarted_costs_at_most_its_own_clicks() {
    let mut cluster = Cluster::start(config(3), 1, &database_url()).await;
    let load = start_load(&cluster, "kill", 100, 10);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.nodes[0].kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.nodes[0].restart();
    let (report, finals) = load.await.unwrap();
    println!(
        "{}",
        report.summary("kill -9 of a node, restarted 3 s later", Some("n1"))
    );
    assert_bounded_node_fault(&report, &finals, "n1", 3..6);
}

/// Issue 46's scenario: 16 closed-loop clients press 48 sessions through two
/// replicas over three nodes for 10 s; one node is killed with kill -9 after
/// 4 s and stays dead. Sessions live the default ten minutes, so none was
/// archived since its placement.
async fn a_node_killed_under_load(hand_over: bool) -> (Report, Finals) {
    let mut config = config(600);
    config.failover_hand_over = hand_over;
    let mut cluster = Cluster::start(config, 2, &database_url()).await;
    let load = {
        let (urls, sessions) = (cluster.urls(), sessions("killed", 48));
        tokio::spawn(
            async move { checker::run(&urls, &sessions, 16, Duration::from_secs(10)).await },
        )
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.nodes[0].kill();
    let (report, finals) = load.await.unwrap();
    let scenario = match hand_over {
        true => "kill -9 of a node under 16 clients, two replicas",
        false => "the same without the hand-over (FAILOVER_HAND_OVER=false)",
    };
    println!("{}", report.summary(scenario, Some("n1")));
    assert_never_above_truth(&report);
    (report, finals)
}

/// The failover archives on the dead node's behalf the totals the replicas
/// showed: per session, the clicks lost are at most its presses whose
/// outcome nobody saw (504s, cut connections), and no answer repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_under_load_loses_no_click_a_user_was_shown() {
    let (report, finals) = a_node_killed_under_load(true).await;
    let beyond = report.loss_beyond_unshown(&finals);
    assert!(
        beyond.is_empty(),
        "lost clicks users were shown: {beyond:?}"
    );
    assert_eq!(report.repeats, 0, "answers repeated");
}

/// Without the hand-over the killed node's sessions go on from their last
/// archive: their users lose every click they were shown since (the loss
/// the README's fault table gives for `FAILOVER_HAND_OVER=false`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_hand_over_a_node_killed_under_load_loses_clicks_users_were_shown() {
    let (report, finals) = a_node_killed_under_load(false).await;
    let beyond = report.loss_beyond_unshown(&finals);
    assert!(
        !beyond.is_empty(),
        "no session lost a click it was shown: the killed node held none?"
    );
    println!("FIGURES sessions that lost shown clicks: {}", beyond.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_never_pushes_a_count_above_the_truth_and_stalls_only_itself() {
    let cluster = Cluster::start(config(3), 1, &database_url()).await;
    let load = start_load(&cluster, "hang", 100, 14);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Long enough for sweeps to send /clean to the stopped node and time
    // out: those cleans are processed when it wakes up, late.
    cluster.nodes[0].pause();
    tokio::time::sleep(Duration::from_secs(6)).await;
    cluster.nodes[0].resume();
    let (report, finals) = load.await.unwrap();
    println!(
        "{}",
        report.summary("SIGSTOP of a node for 6 s", Some("n1"))
    );
    assert_bounded_node_fault(&report, &finals, "n1", 3..9);
}

/// The audit's hole 6: a node stopped (SIGSTOP) for 8 s under eight
/// closed-loop clients, each pressing six sessions in turn, while sweeps
/// expire sessions (and so clean the stopped node). A press the node took
/// answers 504 and is never sent elsewhere (never above the truth). Every
/// client soon waits on a press at the stopped node, and that wait is one
/// node timeout (2 s), not more: the sweep's clean gives up as soon as a
/// press's timer declares the node down, and fails it over itself. So
/// the other nodes' sessions are served at half their pace or better in
/// all but at most three seconds of the stop (0.1.0 served nothing for
/// the whole 8 s; before this fix, four seconds of nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_under_closed_loop_clients_stalls_only_its_own_sessions() {
    let cluster = Cluster::start(config(3), 1, &database_url()).await;
    let (urls, sessions) = (cluster.urls(), sessions("stop8", 48));
    let load =
        tokio::spawn(
            async move { checker::run(&urls, &sessions, 8, Duration::from_secs(16)).await },
        );
    // Sessions pressed once, twenty a second: each sweep finds some of the
    // stopped node's ended, and cleans it while it cannot answer.
    let one_shots = {
        let url = cluster.urls()[0].clone();
        let tag = unique("once");
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            for i in 0..300 {
                let _ = http
                    .post(format!("{url}/press"))
                    .json(&serde_json::json!({ "session_id": format!("{tag}-{i}") }))
                    .timeout(Duration::from_millis(100))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    cluster.nodes[0].pause();
    tokio::time::sleep(Duration::from_secs(8)).await;
    cluster.nodes[0].resume();
    let (report, finals) = load.await.unwrap();
    one_shots.abort();
    println!(
        "{}",
        report.summary(
            "SIGSTOP of a node for 8 s, 8 closed-loop clients",
            Some("n1")
        )
    );
    assert_never_above_truth(&report);
    let beyond = report.loss_beyond(Some("n1"), &finals);
    assert!(
        beyond.is_empty(),
        "lost more than the stopped node held: {beyond:?}"
    );
    let (_, normal) = report.worst_second_during(Some("n1"), 4..12);
    let during = &report.seconds(Some("n1"))[4..12];
    let slow = during.iter().filter(|&&n| n * 2 < normal).count();
    assert!(
        slow <= 3,
        "the other nodes answered under half their pace ({normal}/s) in {slow} seconds of the stop: {during:?}"
    );
}

/// Redis killed at 3 s and started again at 4 s, empty or from its AOF.
async fn redis_restart(aof: bool) -> (Report, Finals, Duration) {
    let mut redis = RedisProcess::start(aof);
    let mut config = config(3);
    config.redis_url = redis.url();
    let cluster = Cluster::start(config, 1, &database_url()).await;
    let load = start_load(&cluster, "redis", 100, 14);
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.start_again();
    let restarted_at = Duration::from_secs(4);
    let (report, finals) = load.await.unwrap();
    // How long until every session was served again after the restart.
    let resumed = report
        .answers
        .iter()
        .filter(|a| a.at > restarted_at && a.clicks.is_none())
        .map(|a| a.at)
        .max()
        .unwrap_or(restarted_at)
        - restarted_at;
    drop(cluster);
    (report, finals, resumed)
}

/// A dependency outage: never above the truth, no session reset, nothing
/// lost but the presses refused meanwhile, and only the `allowed` errors.
fn assert_outage_cost_only_refusals(report: &Report, finals: &Finals, allowed: &[&str]) {
    assert_never_above_truth(report);
    assert_eq!(report.repeats, 0, "a session was reset or repeated");
    let beyond = report.loss_beyond(None, finals);
    assert!(
        beyond.is_empty(),
        "clicks lost beyond the refused presses: {beyond:?}"
    );
    for code in report.errors.keys() {
        assert!(
            allowed.contains(&code.as_str()),
            "unexpected error {code}: {:?}",
            report.errors
        );
    }
}

fn assert_redis_recovery(report: &Report, finals: &Finals, resumed: Duration) {
    assert_outage_cost_only_refusals(
        report,
        finals,
        &["redis_unavailable", "registry_rebuilding"],
    );
    assert!(
        resumed < Duration::from_secs(8),
        "served again only {resumed:?} after the restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_is_rebuilt_without_resetting_a_session() {
    let (report, finals, resumed) = redis_restart(false).await;
    println!(
        "{} resumed_after_ms={}",
        report.summary("Redis killed, restarted empty", None),
        resumed.as_millis()
    );
    assert!(
        report.errors.contains_key("registry_rebuilding"),
        "the rebuild was never seen: {:?}",
        report.errors
    );
    assert_redis_recovery(&report, &finals, resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_its_aof_loses_nothing() {
    let (report, finals, resumed) = redis_restart(true).await;
    println!(
        "{} resumed_after_ms={}",
        report.summary("Redis killed, restarted with AOF", None),
        resumed.as_millis()
    );
    // A restart is another Redis process: the registry is rebuilt even
    // though the AOF kept everything (it cannot tell a complete AOF from
    // an `everysec` one that lost the last second), and loses nothing.
    assert_redis_recovery(&report, &finals, resumed);
}

/// Postgres (for the balancer and the nodes) cut or blackholed from 3 s
/// to 6 s, sessions expiring all along.
async fn postgres_outage(blackhole: bool) -> (Report, Finals) {
    common::ensure_database().await;
    let postgres = TcpProxy::start(testkit::postgres_addr()).await;
    let config = common::through_postgres_proxy(config(3), &postgres);
    let node_database_url = config.database_url.clone();
    let cluster = Cluster::start(config, 1, &node_database_url).await;
    let load = start_load(&cluster, "pg", 100, 11);
    tokio::time::sleep(Duration::from_secs(3)).await;
    if blackhole {
        postgres.blackhole();
    } else {
        postgres.cut();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    postgres.restore();
    load.await.unwrap()
}

fn assert_postgres_recovery(report: &Report, finals: &Finals) {
    assert_outage_cost_only_refusals(report, finals, &["archive_unavailable", "clean_failed"]);
    // Served again at full pace once Postgres is back (from 8 s on).
    let (_, median) = report.worst_second(None);
    let late = report
        .answers
        .iter()
        .filter(|a| {
            a.clicks.is_some() && a.at >= Duration::from_secs(9) && a.at < Duration::from_secs(10)
        })
        .count();
    assert!(
        late * 2 >= median,
        "{late} answers in second 9 against a median of {median}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cut_costs_errors_for_expired_sessions_and_no_clicks() {
    let (report, finals) = postgres_outage(false).await;
    println!("{}", report.summary("Postgres cut for 3 s", None));
    assert_postgres_recovery(&report, &finals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_blackholed_answers_fast_errors_and_loses_no_clicks() {
    let (report, finals) = postgres_outage(true).await;
    println!("{}", report.summary("Postgres blackholed for 3 s", None));
    assert_postgres_recovery(&report, &finals);
}

/// A raw `POST /press` request for `session`.
fn raw_press(session: &str, close: bool) -> String {
    let body = serde_json::json!({ "session_id": session }).to_string();
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{connection}\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_resets_mid_clean_leaves_no_fence_or_lock_behind() {
    use tokio::io::AsyncWriteExt;
    common::ensure_database().await;
    let mut config = config(1);
    config.sweep_interval_secs = 3600; // only presses archive here
                                       // The nodes reach Postgres through a proxy, blackholed during the
                                       // reset: their /clean then takes a second, so the client surely hangs
                                       // up in the middle of it.
    let postgres = TcpProxy::start(testkit::postgres_addr()).await;
    let node_database_url = common::through_postgres_proxy(config.clone(), &postgres).database_url;
    let cluster = Cluster::start(config, 1, &node_database_url).await;
    let app = &cluster.apps[0];
    let ids = sessions("reset", 30);
    for id in &ids {
        assert_eq!(app.press(id).await.clicks(), 1);
    }
    tokio::time::sleep(Duration::from_millis(1200)).await; // all expired
    let store = &app.ctx.store;
    let node_of = |id: &String| {
        let id = id.clone();
        async move { store.sessions.lookup(&id).await.unwrap().unwrap().node }
    };
    let first_node = node_of(&ids[0]).await;
    let mut other = None;
    for id in &ids[1..] {
        if node_of(id).await != first_node {
            other = Some(id.clone());
            break;
        }
    }
    let other = other.expect("sessions on two nodes");
    postgres.blackhole();
    // Pressing an expired session archives its node's expired sessions
    // (fence, lock, /clean, fold); the client resets 3 ms into that.
    let target = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&target).await.unwrap();
    stream
        .write_all(raw_press(&ids[0], false).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    #[allow(deprecated)] // SO_LINGER 0: close with a reset, at once
    stream.set_linger(Some(Duration::ZERO)).unwrap();
    drop(stream);
    // The same from inside: the press future of a session on another node
    // is dropped 3 ms in, as any server drops a request whose client left.
    let press = tokio::spawn({
        let ctx = app.ctx.clone();
        let id = nodes_control::session::SessionId::parse(other.clone()).unwrap();
        async move { ctx.sessions.press(&id).await.map(|p| p.clicks) }
    });
    tokio::time::sleep(Duration::from_millis(3)).await;
    press.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    postgres.restore();
    // The cleans go on by themselves and leave nothing raised or held.
    testkit::eventually(
        Duration::from_secs(5),
        "no fence raised, no lock held",
        || async {
            let fences = store.fences.fences().await.unwrap();
            let mut held = Vec::new();
            for node in &cluster.nodes {
                let lock = format!("node:{}", node.address);
                match store.locks.try_lock(&lock, 1000).await.unwrap() {
                    Some(token) => store.locks.unlock(&lock, &token).await.unwrap(),
                    None => held.push(lock),
                }
            }
            testkit::holds(fences.is_empty() && held.is_empty(), || (fences, held))
        },
    )
    .await;
    // Every session continues at once from its archive (the reset press
    // may or may not have counted: 2 or 3 for the first).
    for id in &ids {
        let started = tokio::time::Instant::now();
        let answer = app.press(id).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{id} waited {:?}",
            started.elapsed()
        );
        if id == &ids[0] || id == &other {
            assert!((2..=3).contains(&answer.clicks()), "{answer:?}");
        } else {
            assert_eq!(answer.clicks(), 2, "{id}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_after_its_request_still_gets_the_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start(config(600), 1, &database_url()).await;
    let app = &cluster.apps[0];
    let target = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&target).await.unwrap();
    let session = unique("half-close");
    stream
        .write_all(raw_press(&session, true).as_bytes())
        .await
        .unwrap();
    stream.shutdown().await.unwrap(); // FIN: nothing more will be sent
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("You clicked 1 times"), "{answer}");
}

/// A replica whose clock is 30 s behind (libfaketime, a real process) is
/// live for the others all the same: heartbeats and liveness are written
/// and judged on Redis's clock alone (design.md §4.16). Before, its
/// heartbeat looked 30 s old to every other replica, whose cleaners then
/// stopped waiting for its acks, and its presses met cleans of their nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_clock_is_30_s_behind_stays_live_for_the_others() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let library = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .find(|path| std::path::Path::new(path).exists())
    .expect("libfaketime is missing: apt-get install -y faketime (CI installs it)");
    let config = common::test_config();
    let app = spawn_app_with(config.clone()).await;
    let silence = Duration::from_secs(5);
    let alone = app.ctx.store.replicas.live_replicas(silence).await.unwrap();
    assert_eq!(alone.len(), 1, "{alone:?}");
    let skewed = common::process::BalancerProcess::start(
        &[
            ("REDIS_KEY_PREFIX", config.redis_key_prefix.as_str()),
            ("LD_PRELOAD", library),
            ("FAKETIME", "-30s"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        std::process::Stdio::null(),
    )
    .await;
    // The skew is real: its answers are dated 30 s ago.
    let answer = skewed
        .http()
        .get(format!("{}/healthz", skewed.url))
        .send()
        .await
        .unwrap();
    let date = answer.headers()["date"].to_str().unwrap().to_owned();
    let dated = chrono::DateTime::parse_from_rfc2822(&date).unwrap();
    let behind = chrono::Utc::now()
        .signed_duration_since(dated)
        .num_seconds();
    assert!(
        (25..=35).contains(&behind),
        "its clock is {behind} s behind ({date})"
    );
    // It heartbeats from its start; for three heartbeats it stays live.
    for _ in 0..3 {
        let live = app.ctx.store.replicas.live_replicas(silence).await.unwrap();
        assert_eq!(live.len(), 2, "the skewed replica is not live: {live:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One sequential client's press through `balancer`, judged against the
/// truth it keeps for `session`: the count, and how long it took.
async fn press_judged(
    balancer: &common::process::BalancerProcess,
    session: &str,
    truth: &mut std::collections::HashMap<String, i64>,
) -> (Option<i64>, i64, Duration) {
    let sent = truth.entry(session.to_owned()).or_default();
    *sent += 1;
    let started = std::time::Instant::now();
    let answer = balancer.press(session).await;
    let took = started.elapsed();
    let status = answer.status();
    let body = answer.text().await.unwrap();
    let clicks = (status == 200).then(|| testkit::parse_clicks(&body).expect("a click answer"));
    (clicks, *sent, took)
}

/// Two replicas (real processes) over a node that forgets everything at
/// every clean; one replica is stopped (SIGSTOP) for 7 s, longer than its
/// lease and than `LEASE_MS + NODE_TIMEOUT_MS + 1 s`, with its cache full
/// of live sessions, while the other goes on pressing and older sessions
/// expire (their clean forgets the live ones too, which are re-based).
/// Before 0.2.0: the other replica's cleans waited out the stopped one for
/// `LEASE_MS + NODE_TIMEOUT_MS + 1 s`, and once resumed, the stopped one
/// trusted its cached mappings again, answering from bases the clean had
/// replaced. Now a clean waits for a silent replica only until it has
/// surely lapsed (`LEASE_MS` plus a quarter), the node refuses presses
/// under an older epoch, and a lapsed lease voids the cache: every answer
/// through either replica is exact, and the other's presses wait at most
/// that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_past_its_lease_stalls_the_other_at_most_its_wait_and_resets_no_session()
{
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("paused"));
    let env = [
        ("REDIS_KEY_PREFIX", prefix.as_str()),
        ("SESSION_TTL_SECS", "9"),
        ("SWEEP_INTERVAL_SECS", "1"),
        ("NODE_TIMEOUT_MS", "2000"),
        ("LEASE_MS", "3000"),
    ];
    let other = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let stopped = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let node = NodeProcess::start_with("n1", &database_url(), &["--clean-all"]);
    other.node("add", &node.address).await;
    let mut truth = std::collections::HashMap::new();
    let mut wrong = Vec::new();
    let mut judge =
        |phase: &str, session: &str, (clicks, sent, _): (Option<i64>, i64, Duration)| {
            if clicks != Some(sent) {
                wrong.push(format!(
                    "{phase} {session}: {clicks:?} where the truth is {sent}"
                ));
            }
        };
    let started = std::time::Instant::now();
    // Sessions that expire while the replica is stopped: their clean makes
    // the node forget every session it holds.
    let expiring: Vec<String> = (0..4).map(|i| unique(&format!("expiring{i}"))).collect();
    for s in &expiring {
        let answer = press_judged(&other, s, &mut truth).await;
        judge("first", s, answer);
    }
    // They expire (TTL 9 s) about a second into the stop, so a clean that
    // waited the stopped replica out would hold the node for seconds.
    tokio::time::sleep(Duration::from_secs(7).saturating_sub(started.elapsed())).await;
    // Live sessions, served (and cached) by both replicas.
    let live: Vec<String> = (0..8).map(|i| unique(&format!("live{i}"))).collect();
    for _ in 0..3 {
        for s in &live {
            let answer = press_judged(&stopped, s, &mut truth).await;
            judge("before", s, answer);
            let answer = press_judged(&other, s, &mut truth).await;
            judge("before", s, answer);
        }
    }
    stopped.pause();
    let paused_at = std::time::Instant::now();
    let (mut slowest, mut served) = (Duration::ZERO, 0);
    while paused_at.elapsed() < Duration::from_secs(7) {
        for s in live.iter().chain(&expiring) {
            let answer = press_judged(&other, s, &mut truth).await;
            slowest = slowest.max(answer.2);
            served += usize::from(answer.0.is_some());
            judge("while stopped", s, answer);
        }
    }
    let stop = paused_at.elapsed();
    stopped.resume();
    for _ in 0..3 {
        for s in &live {
            let answer = press_judged(&stopped, s, &mut truth).await;
            judge("after, stopped one", s, answer);
            let answer = press_judged(&other, s, &mut truth).await;
            judge("after, other", s, answer);
        }
    }
    println!(
        "FIGURES scenario=\"replica SIGSTOP 7 s, clean-all node, sessions expiring meanwhile\" other_presses_per_s_while_stopped={:.0} slowest_press_ms={} wrong={}",
        served as f64 / stop.as_secs_f64(),
        slowest.as_millis(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} wrong answers: {wrong:#?}",
        wrong.len()
    );
    // The sessions that expired meanwhile were cleaned once the stopped
    // replica had surely lapsed.
    let others_wait = protocol::silence::Silence::new(Duration::from_secs(3)).others_wait();
    assert!(
        slowest < others_wait + Duration::from_millis(1500),
        "a press of the other replica took {slowest:?} while one was stopped"
    );
}

/// Redis restarted on an older snapshot (`BGSAVE`, new sessions and more
/// presses, then `SHUTDOWN NOSAVE` and a start on the same directory): its
/// keys look complete, its data is seconds old. Before: no rebuild ran;
/// sessions created after the snapshot restarted from 1 (1,128 resets in
/// the run). Now the Redis's identity has changed, so nothing is
/// read from it until the registry is rebuilt, every node archived first:
/// never above the truth, no session reset, nothing lost but the presses
/// refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_on_an_older_snapshot_is_rebuilt_without_resetting_a_session() {
    let mut redis = RedisProcess::start(false);
    let mut config = config(3);
    config.redis_url = redis.url();
    let cluster = Cluster::start(config, 2, &database_url()).await;
    let cli = |args: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // Sessions from before the snapshot, and the checking load from then on.
    let load = start_load(&cluster, "rollback", 60, 12);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = cli(&["LASTSAVE"]);
    cli(&["BGSAVE"]);
    for _ in 0..100 {
        if cli(&["LASTSAVE"]) != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(cli(&["LASTSAVE"]), before, "the snapshot was written");
    // Seconds of presses (and expiries, and new mappings) the snapshot
    // does not hold; then Redis comes back on it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cli(&["SHUTDOWN", "NOSAVE"]);
    redis.kill();
    redis.start_again();
    let (report, finals) = load.await.unwrap();
    println!(
        "{}",
        report.summary("Redis restarted on a 3 s old snapshot", None)
    );
    drop(cluster);
    assert_outage_cost_only_refusals(
        &report,
        &finals,
        &["redis_unavailable", "registry_rebuilding"],
    );
}

/// A replica stopped (SIGSTOP) with a press at its node, and resumed long
/// after the press's timeout: the node's answer and the press's timer are
/// ready together. It reads the answer (the model's hole 2, design.md): the
/// press is served and the node, which answered, stays up. In 0.1.0 the
/// timer could win: a live node was marked down, its sessions reset, and
/// the press was sent again elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_resumed_past_a_press_timeout_reads_the_answer_waiting_for_it() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("resumed"));
    let env = [
        ("REDIS_KEY_PREFIX", prefix.as_str()),
        ("NODE_TIMEOUT_MS", "500"),
    ];
    let balancer = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let nodes = [
        NodeProcess::start("r1", &database_url()),
        NodeProcess::start("r2", &database_url()),
    ];
    for node in &nodes {
        balancer.node("add", &node.address).await;
    }
    // Three rounds: in 0.1.0 each was a coin toss between answer and timer.
    for round in 0..3 {
        let session = unique(&format!("resumed{round}"));
        let first = balancer.press(&session).await;
        assert_eq!(first.status(), 200);
        let served_by = first.headers()["x-served-by"].to_str().unwrap().to_owned();
        let node = nodes.iter().find(|n| n.name == served_by).unwrap();
        // The node stops first, so the press waits at it; then the replica
        // stops, the node answers into the stopped replica's socket, and
        // the replica resumes a second later, past the press's timeout.
        node.pause();
        let press = tokio::spawn({
            let (http, url) = (balancer.http().clone(), balancer.url.clone());
            async move {
                http.post(format!("{url}/press"))
                    .json(&serde_json::json!({ "session_id": session }))
                    .send()
                    .await
                    .unwrap()
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        balancer.pause();
        node.resume();
        tokio::time::sleep(Duration::from_secs(1)).await;
        balancer.resume();
        let answer = press.await.unwrap();
        let status = answer.status();
        let body = answer.text().await.unwrap();
        assert_eq!(status, 200, "round {round}: {body}");
        assert_eq!(
            testkit::parse_clicks(&body),
            Some(2),
            "round {round}: {body}"
        );
    }
    let nodes_now: Vec<serde_json::Value> = balancer
        .http()
        .get(format!("{}/nodes", balancer.url))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for node in &nodes_now {
        assert_eq!(node["state"], "up", "{nodes_now:?}");
    }
}

/// A replica paused past its lease with a press at a stopped node, while
/// the other replica fails that node over and the session goes on
/// elsewhere. When both resume, the node counts the old press and its
/// answer waits in the paused replica's socket: shown, it would be a count
/// the session's new node shows again (the model's `lease_voids_answers`).
/// It is answered 504 `replica_paused`, and no 200 since the failover
/// repeats another (the code before showed 1, 2, 2, 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_read_after_a_lease_lapse_is_not_shown_when_the_session_moved_meanwhile() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("lapsed"));
    let env = [
        ("REDIS_KEY_PREFIX", prefix.as_str()),
        ("NODE_TIMEOUT_MS", "500"),
        ("LEASE_MS", "2000"),
    ];
    let paused = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let other = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let nodes = [
        NodeProcess::start("l1", &database_url()),
        NodeProcess::start("l2", &database_url()),
    ];
    for node in &nodes {
        paused.node("add", &node.address).await;
    }
    let session = unique("lapsed");
    let first = paused.press(&session).await;
    assert_eq!(first.status(), 200);
    let served_by = first.headers()["x-served-by"].to_str().unwrap().to_owned();
    let node = nodes.iter().find(|n| n.name == served_by).unwrap();
    node.pause();
    let late = paused.press_in_background(&session);
    tokio::time::sleep(Duration::from_millis(200)).await;
    paused.pause();
    // The other replica finds the node silent, fails it over, and the
    // session goes on from its archive on the other node.
    let mut shown = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer = other.press(&session).await;
        if answer.status() == 200 {
            let body = answer.text().await.unwrap();
            shown.push(testkit::parse_clicks(&body).unwrap());
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never served elsewhere"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.resume();
    // Silent past its lease (LEASE_MS 2000).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    paused.resume();
    let (status, body) = late.await.unwrap();
    if status == 200 {
        shown.push(testkit::parse_clicks(&body).unwrap());
    }
    for _ in 0..3 {
        let answer = other.press(&session).await;
        assert_eq!(answer.status(), 200);
        shown.push(testkit::parse_clicks(&answer.text().await.unwrap()).unwrap());
    }
    let mut distinct = shown.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        shown.len(),
        "an answer since the failover repeats: {shown:?}"
    );
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("replica_paused"), "{body}");
}

/// Waits until `balancer` has a press in flight at `node` (`GET /nodes`).
async fn at_node(balancer: &common::process::BalancerProcess, node: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let listed: Vec<serde_json::Value> = balancer
            .http()
            .get(format!("{}/nodes", balancer.url))
            .bearer_auth(common::ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let in_flight = listed
            .iter()
            .find(|n| n["address"] == node)
            .and_then(|n| n["in_flight"].as_u64());
        if in_flight.is_some_and(|n| n > 0) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no press at {node}: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Issue 44's hole 1: a replica paused 1.2 s (past a second, short of its
/// lease) with a press at a fencing node that is stopped too, while the
/// other replica removes that node. Before, the removal went on without
/// the paused replica's acknowledgement after a second, the session went
/// on elsewhere, and the paused replica, resumed, showed the stopped
/// node's late count again (9 rounds of 13 with `NODE_TIMEOUT_MS` 300).
/// Now the others wait for a replica until it has lapsed on its own clock
/// (`protocol::silence`): the removal waits for it, archives the node,
/// and in ten rounds every session's answers count up one by one. Health
/// checks are off: a node stopped 1.2 s fails two of them at this node
/// timeout, and a failover by health check (which the removal then finds)
/// may rightly lose the node's clicks, repeating answers across it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_across_a_fencing_removal_repeats_no_answer() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("removal"));
    let env = [
        ("REDIS_KEY_PREFIX", prefix.as_str()),
        ("NODE_TIMEOUT_MS", "300"),
        ("HEALTH_CHECK", "off"),
    ];
    let paused = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let other = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let nodes = [
        NodeProcess::start("f1", &database_url()),
        NodeProcess::start("f2", &database_url()),
    ];
    for node in &nodes {
        other.node("add", &node.address).await;
    }
    let mut wrong = Vec::new();
    for round in 0..10 {
        let session = unique(&format!("removal{round}"));
        let first = paused.press(&session).await;
        assert_eq!(first.status(), 200, "round {round}");
        let served_by = first.headers()["x-served-by"].to_str().unwrap().to_owned();
        let node = nodes.iter().find(|n| n.name == served_by).unwrap();
        let mut shown = vec![testkit::parse_clicks(&first.text().await.unwrap()).unwrap()];
        node.pause();
        let late = paused.press_in_background(&session);
        // Stopped as soon as the press is at the node (its timer runs
        // from the send, 300 ms).
        at_node(&paused, &node.address).await;
        paused.pause();
        let removal = tokio::spawn({
            let (http, url, address) = (
                other.http().clone(),
                other.url.clone(),
                node.address.clone(),
            );
            async move {
                http.post(format!("{url}/node"))
                    .bearer_auth(common::ADMIN_TOKEN)
                    .json(&serde_json::json!({ "action": "remove", "address": address }))
                    .send()
                    .await
                    .unwrap()
                    .status()
            }
        });
        tokio::time::sleep(Duration::from_millis(1100)).await;
        node.resume();
        paused.resume();
        let (status, body) = late.await.unwrap();
        if status == 200 {
            shown.push(testkit::parse_clicks(&body).unwrap());
        }
        assert!(
            removal.await.unwrap().is_success(),
            "round {round}: removal"
        );
        for _ in 0..2 {
            let answer = other.press(&session).await;
            if answer.status() == 200 {
                shown.push(testkit::parse_clicks(&answer.text().await.unwrap()).unwrap());
            }
        }
        // One by one, but for the late press if its outcome was unknown.
        let expected: Vec<i64> = match status.as_u16() {
            200 => vec![1, 2, 3, 4],
            _ => vec![1, 3, 4],
        };
        if shown != expected {
            wrong.push(format!("round {round}: {shown:?} (late press: {status})"));
        }
        other.node("add", &node.address).await;
    }
    assert!(wrong.is_empty(), "answers not one by one: {wrong:#?}");
}

/// Issue 44's hole 2: a replica stopped 7 s, three times, with presses in
/// flight over three nodes that answer in 60 ms, while two busy loops
/// load the host as a build beside it would. On resuming, the presses'
/// timers are due and their answers wait in the sockets; a timer is
/// evidence only over a stretch the replica ran through
/// (`nodes::deadline::node_silence`), so the answers are read. Before, one
/// run in six took a live node down (12 of 36 sessions restarted at 1,
/// 299 clicks lost). Now: every node stays up, every press is answered
/// 200, and every session is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_with_presses_in_flight_on_a_busy_host_takes_no_live_node_down() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("stopped"));
    let env = [("REDIS_KEY_PREFIX", prefix.as_str())];
    let balancer =
        Arc::new(common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await);
    let delay = ["--min-delay-ms", "60", "--max-delay-ms", "60"];
    let nodes = [
        NodeProcess::start_with("s1", &database_url(), &delay),
        NodeProcess::start_with("s2", &database_url(), &delay),
        NodeProcess::start_with("s3", &database_url(), &delay),
    ];
    for node in &nodes {
        balancer.node("add", &node.address).await;
    }
    let busy: Vec<std::process::Child> = (0..2)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("a busy loop starts")
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tag = unique("stopped");
    let clients: Vec<_> = (0..18)
        .map(|client| {
            let (balancer, stop) = (balancer.clone(), stop.clone());
            let sessions: Vec<String> = (0..2).map(|i| format!("{tag}-{client}-{i}")).collect();
            tokio::spawn(async move {
                let mut logs: Vec<SessionLog> =
                    sessions.iter().map(|_| SessionLog::default()).collect();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for (session, log) in sessions.iter().zip(&mut logs) {
                        press_logged(balancer.http(), &balancer.url, session, log).await;
                    }
                }
                sessions.into_iter().zip(logs).collect::<Vec<_>>()
            })
        })
        .collect();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        balancer.pause();
        tokio::time::sleep(Duration::from_secs(7)).await;
        balancer.resume();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut logs = Vec::new();
    for client in clients {
        logs.extend(client.await.unwrap());
    }
    for mut child in busy {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (mut wrong, mut unknown, mut answered) = (Vec::new(), 0, 0);
    for (session, log) in &logs {
        wrong.extend(log.wrong(session));
        unknown += log.answers.iter().filter(|a| a.is_none()).count();
        answered += log.answers.len();
    }
    let listed: Vec<serde_json::Value> = balancer
        .http()
        .get(format!("{}/nodes", balancer.url))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    println!(
        "FIGURES scenario=\"replica SIGSTOP 7 s x3, 18 clients, nodes answering in 60 ms, two busy loops\" answered={answered} unknown={unknown} wrong={}",
        wrong.len()
    );
    for node in &listed {
        assert_eq!(node["state"], "up", "a node was taken down: {listed:#?}");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(unknown, 0, "presses whose outcome is unknown");
}

/// What one closed-loop client of one session saw: each answer in order
/// (`Some(clicks)` for a 200, `None` for a press whose outcome is unknown:
/// a 504, or a connection reset by a replica killed with the press).
#[derive(Default)]
struct SessionLog {
    answers: Vec<Option<i64>>,
    /// Answered 503 (nothing counted).
    refused: usize,
    sent: i64,
}

impl SessionLog {
    /// Each 200 is the previous one + 1 + at most the unknown presses in
    /// between, and never above the presses sent: no repeat, no gap but
    /// for outcomes not shown, never above the truth.
    fn wrong(&self, session: &str) -> Vec<String> {
        let (mut last, mut unknown, mut wrong) = (0, 0, Vec::new());
        for answer in &self.answers {
            match answer {
                None => unknown += 1,
                Some(clicks) => {
                    if *clicks < last + 1 || *clicks > last + 1 + unknown || *clicks > self.sent {
                        wrong.push(format!(
                            "{session}: {clicks} after {last} with {unknown} unknown between"
                        ));
                    }
                    (last, unknown) = (*clicks, 0);
                }
            }
        }
        wrong
    }
}

/// One press through `url`, judged by what came back.
async fn press_logged(http: &reqwest::Client, url: &str, session: &str, log: &mut SessionLog) {
    log.sent += 1;
    let answer = http
        .post(format!("{url}/press"))
        .json(&serde_json::json!({ "session_id": session }))
        .send()
        .await;
    let Ok(answer) = answer else {
        // The replica died under it (a reset), or was dead (a refused
        // connect: nothing was counted, but the client cannot tell).
        log.answers.push(None);
        return;
    };
    match answer.status().as_u16() {
        200 => {
            let body = answer.text().await.unwrap_or_default();
            log.answers.push(testkit::parse_clicks(&body));
        }
        503 => {
            log.sent -= 1;
            log.refused += 1;
        }
        _ => log.answers.push(None),
    }
}

/// Two replicas (real processes) under one closed-loop client per session,
/// each pressing through both in turn, with sessions expiring all along
/// (cleans with archive). One replica is killed (kill -9) with presses
/// under way, the other serves on alone past the dead one's lease, and the
/// dead one is started again and serves too. Judged per session: no
/// repeat, no gap but for the presses whose outcome was not shown, never
/// above the truth, and at the end every session is exact but for those
/// unknown presses. The survivor's presses wait for the dead one at most
/// as long as its cleans do: until the dead one's heartbeat is `LEASE_MS`
/// plus a quarter old (`protocol::silence`; 0.2.0 waited a second, before
/// the dead one had stopped trusting itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_and_started_again_repeats_no_answer_and_stalls_the_survivor_at_most_the_others_wait(
) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let prefix = format!("{}:", unique("killed"));
    let env = [
        ("REDIS_KEY_PREFIX", prefix.as_str()),
        ("SESSION_TTL_SECS", "2"),
        ("SWEEP_INTERVAL_SECS", "1"),
        ("NODE_TIMEOUT_MS", "2000"),
        ("LEASE_MS", "3000"),
    ];
    let survivor = common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let mut killed =
        common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    let nodes = [
        NodeProcess::start("n1", &database_url()),
        NodeProcess::start("n2", &database_url()),
    ];
    for node in &nodes {
        survivor.node("add", &node.address).await;
    }
    let urls = Arc::new(std::sync::RwLock::new(vec![
        survivor.url.clone(),
        killed.url.clone(),
    ]));
    let slowest_alone = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..12 {
        // A third of the sessions live one press at a time with pauses
        // past their TTL: they expire and are cleaned throughout.
        let session = unique(&format!("killed{i}"));
        let (urls, stop, slowest) = (urls.clone(), stop.clone(), slowest_alone.clone());
        let http = reqwest::Client::new();
        clients.spawn(async move {
            let mut log = SessionLog::default();
            let mut turn = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let targets = urls.read().unwrap().clone();
                let url = &targets[turn % targets.len()];
                turn += 1;
                let started = std::time::Instant::now();
                press_logged(&http, url, &session, &mut log).await;
                if targets.len() == 1 {
                    let mut slowest = slowest.lock().unwrap();
                    *slowest = (*slowest).max(started.elapsed());
                }
                if i % 3 == 0 {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                }
            }
            (session, log)
        });
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Only the survivor from here: a client that picked the killed one
    // already sees its connection reset.
    urls.write().unwrap().truncate(1);
    killed.kill();
    // Past the dead one's lease and a node timeout: the survivor alone,
    // with expiries.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let started_again =
        common::process::BalancerProcess::start(&env, std::process::Stdio::null()).await;
    urls.write().unwrap().push(started_again.url.clone());
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut wrong, mut unknown, mut answered, mut refused) = (Vec::new(), 0, 0, 0);
    let http = reqwest::Client::new();
    while let Some(done) = clients.join_next().await {
        let (session, mut log) = done.unwrap();
        // The last word, through the replica started again.
        press_logged(&http, &started_again.url, &session, &mut log).await;
        let last = log.answers.last().copied().flatten();
        let unknown_here = log.answers.iter().filter(|a| a.is_none()).count() as i64;
        match last {
            Some(clicks) if clicks <= log.sent && clicks >= log.sent - unknown_here => {}
            other => wrong.push(format!(
                "{session}: ended at {other:?} after {} presses ({unknown_here} unknown)",
                log.sent
            )),
        }
        wrong.extend(log.wrong(&session));
        unknown += unknown_here;
        answered += log.answers.len();
        refused += log.refused;
    }
    let slowest = *slowest_alone.lock().unwrap();
    println!(
        "FIGURES scenario=\"replica kill -9 under 12 closed-loop clients, started again 6 s later\" answers={answered} unknown={unknown} refused={refused} slowest_press_alone_ms={} wrong={}",
        slowest.as_millis(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "{} wrong: {wrong:#?}", wrong.len());
    // It served all along: every session has answers after the kill.
    assert!(answered > 12 * 10, "only {answered} answers in 14 s");
    let others_wait = protocol::silence::Silence::new(Duration::from_secs(3)).others_wait();
    assert!(
        slowest < others_wait + Duration::from_millis(1500),
        "a press of the survivor took {slowest:?} while the other was dead"
    );
}
