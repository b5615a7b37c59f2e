//! The listener's limits and graceful shutdown (design.md §3, §4.13): slow
//! clients cost a socket for a bounded time, SIGTERM ends the process
//! within its grace period even with a client holding a half-sent request.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{spawn_app_with, start_nodes, test_config, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_by_the_header_timeout_while_presses_stay_fast() {
    let mut config = test_config();
    config.header_read_timeout_ms = 1000;
    let app = spawn_app_with(config).await;
    let _nodes = start_nodes(&app, 1, false).await;
    let session = unique("slowloris");
    assert_eq!(app.press(&session).await.clicks(), 1);
    let target = app.address.trim_start_matches("http://").to_owned();
    let before = rss_kib();
    let mut slow = Vec::new();
    for _ in 0..500 {
        let mut stream = tokio::net::TcpStream::connect(&target).await.unwrap();
        stream
            .write_all(b"POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            .await
            .unwrap();
        slow.push(stream);
    }
    // Meanwhile everyone else is served as usual.
    for expected in 2..=21 {
        let started = tokio::time::Instant::now();
        assert_eq!(app.press(&session).await.clicks(), expected);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "a press took {:?}",
            started.elapsed()
        );
    }
    // Past the header timeout every slow connection has been closed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for stream in &mut slow {
        let mut buffer = [0u8; 512];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer))
            .await
            .expect("the server closed the connection");
        // EOF, a 408, or a reset: closed in any case.
        if let Ok(n) = read {
            let next = stream.read(&mut buffer).await.unwrap_or(0);
            assert!(n == 0 || next == 0, "a slow connection is still open");
        }
    }
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "500 slow clients grew the process by {grown_mib} MiB"
    );
    assert_eq!(app.press(&session).await.clicks(), 22);
}

/// Waits for `child` to exit, at most `limit`; its exit status.
fn wait_at_most(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Connects, sends half a request, then SIGTERMs `child`: it must exit 0
/// within its 2 s grace period (and some slack).
async fn sigterm_with_a_half_sent_request(mut child: std::process::Child, port: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut stream = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(stream) => break stream,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(error) => panic!("the process never listened: {error}"),
        }
    };
    stream
        .write_all(b"POST /press HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let exited =
        tokio::task::spawn_blocking(move || wait_at_most(&mut child, Duration::from_secs(6)))
            .await
            .unwrap();
    let status = exited.expect("still running 6 s after SIGTERM");
    assert!(status.success(), "exit status {status}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    drop(stream);
}

#[tokio::test]
async fn the_balancer_exits_within_its_grace_period_on_sigterm_despite_a_half_sent_request() {
    common::ensure_database().await;
    let port = common::process::free_port();
    let prefix = format!("{}:", unique("sigterm"));
    common::teardown::joined(&prefix);
    let child = Command::new(env!("CARGO_BIN_EXE_nodes-control"))
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("DATABASE_URL", common::database_url())
        .env("REDIS_URL", common::redis_url())
        .env("REDIS_KEY_PREFIX", &prefix)
        .env("ADMIN_TOKEN", common::ADMIN_TOKEN)
        .env("SHUTDOWN_GRACE_SECS", "2")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    sigterm_with_a_half_sent_request(child, port).await;
    common::teardown::left(&prefix);
}

#[tokio::test]
async fn click_node_exits_within_its_grace_period_on_sigterm_despite_a_half_sent_request() {
    let port = common::process::free_port();
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("click-node");
    let child = Command::new(binary)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--name",
            "term",
        ])
        .args([
            "--database-url",
            &common::database_url(),
            "--shutdown-grace-secs",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    sigterm_with_a_half_sent_request(child, port).await;
}
