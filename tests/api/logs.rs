//! What a balancer writes to its log when it is not on a terminal: plain
//! text, and with `ACCESS_LOG=true` a line per request that names the
//! session only by its hash.

use crate::common;

use std::time::Duration;

use common::process::BalancerProcess;
use common::{unique, TestNode};

/// The log file at `path` once `holds` says it has what the test waits for.
async fn log_once(
    path: &std::path::Path,
    within: Duration,
    what: &str,
    holds: impl Fn(&str) -> bool,
) -> String {
    testkit::eventually(within, what, || async {
        let log = std::fs::read_to_string(path).unwrap();
        if holds(&log) {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await
}

#[tokio::test]
async fn a_log_file_gets_plain_access_lines_with_the_session_id_hashed() {
    let path = std::env::temp_dir().join(format!("{}.log", unique("access")));
    let file = std::fs::File::create(&path).unwrap();
    let balancer =
        BalancerProcess::start(&[("ACCESS_LOG", "true"), ("RUST_LOG", "info")], file.into()).await;
    let node = TestNode::start("a1", false);
    balancer.node("add", &node.address).await;
    let session = unique("secret-session");
    let response = balancer.press(&session).await;
    assert_eq!(response.status(), 200);
    let missing = balancer
        .http()
        .get(format!("{}/nope", balancer.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let hash = nodes_control::http::access::session_hash(&session);
    let log = log_once(&path, Duration::from_secs(5), "the access lines", |log| {
        log.contains("/nope") && log.contains(&hash)
    })
    .await;
    drop(balancer);
    let _ = std::fs::remove_file(&path);
    assert!(!log.contains('\u{1b}'), "colour codes in a file:\n{log}");
    assert!(!log.contains(&session), "the session id in clear:\n{log}");
    let press = log
        .lines()
        .find(|l| l.contains(&hash))
        .expect("the press's line");
    for field in [
        "access",
        "method=\"POST\"",
        "path=\"/press\"",
        "status=200",
        "node=\"a1\"",
    ] {
        assert!(press.contains(field), "{field} missing from: {press}");
    }
    let missing = log.lines().find(|l| l.contains("/nope")).unwrap();
    assert!(missing.contains("status=404"), "{missing}");
}

/// The press path's own lines (a failover's WARN among them) name a session
/// only by the hash the access log uses, never by its id.
#[tokio::test]
async fn a_failover_s_log_line_names_the_session_by_its_hash_only() {
    let path = std::env::temp_dir().join(format!("{}.log", unique("failover-log")));
    let file = std::fs::File::create(&path).unwrap();
    let balancer = BalancerProcess::start(&[("RUST_LOG", "info")], file.into()).await;
    let mut doomed = TestNode::start("doomed", false);
    balancer.node("add", &doomed.address).await;
    let session = unique("private-session");
    assert_eq!(balancer.press(&session).await.status(), 200);
    let spare = TestNode::start("spare", false);
    balancer.node("add", &spare.address).await;
    doomed.kill();
    assert_eq!(balancer.press(&session).await.status(), 200, "failed over");
    let hash = nodes_control::http::access::session_hash(&session);
    let log = log_once(
        &path,
        Duration::from_secs(5),
        "the failover's line",
        |log| log.contains("press failed; node marked down"),
    )
    .await;
    drop(balancer);
    let _ = std::fs::remove_file(&path);
    let line = log
        .lines()
        .find(|l| l.contains("press failed; node marked down"))
        .unwrap();
    assert!(line.contains(&hash), "no session hash in: {line}");
    assert!(!log.contains(&session), "the session id in clear:\n{log}");
}

/// click-node's log, written to a file, is plain text too.
#[tokio::test]
async fn a_click_node_log_file_carries_no_colour_codes() {
    let path = std::env::temp_dir().join(format!("{}.log", unique("node-log")));
    let file = std::fs::File::create(&path).unwrap();
    let port = common::process::free_port();
    let mut node = std::process::Command::new(common::process::click_node_binary())
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--name",
            "plain",
        ])
        .args(["--database-url", &common::database_url()])
        .env("RUST_LOG", "info")
        .stdout(file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = log_once(
        &path,
        Duration::from_secs(10),
        "the node's first line",
        |log| log.contains("click-node listening"),
    )
    .await;
    let _ = node.kill();
    let _ = node.wait();
    let _ = std::fs::remove_file(&path);
    assert!(!log.contains('\u{1b}'), "colour codes in a file:\n{log}");
}
