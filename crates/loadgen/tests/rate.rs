//! The open-loop `rate` scenario against a real reference node and against
//! a server that answers slower than the rate asks.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use loadgen::rate::{self, RateOptions};

fn options(addr: &str, rate: f64, connections: usize, sessions: usize) -> RateOptions {
    RateOptions {
        addr: addr.to_owned(),
        rate,
        duration: Duration::from_secs(1),
        connections,
        sessions,
        prefix: format!("rate-{}-", uuid::Uuid::new_v4().simple()),
        timeout: Duration::from_secs(5),
        label: "test".into(),
    }
}

#[tokio::test]
async fn every_press_offered_reaches_the_node_once() {
    let node = testkit::spawn_node("rate1", false).await;
    let addr = node.address.trim_start_matches("http://").to_owned();
    let opts = options(&addr, 400.0, 8, 20);
    let point = rate::run(&opts).await.unwrap();
    assert_eq!((point.sent, point.ok, point.errors), (400, 400, 0));
    assert!(point.p50_ms <= point.p99_ms && point.p99_ms <= point.max_ms);
    // 400 presses over 20 ids in turn: each id counted 20, so its next
    // press is its 21st.
    let client = reqwest::Client::new();
    for i in [0, 7, 19] {
        let answer = client
            .post(format!("{}/press", node.address))
            .json(&serde_json::json!({ "session_id": format!("{}{i}", opts.prefix) }))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(answer.contains("21 times"), "session {i}: {answer}");
    }
}

/// A server that answers every request after `delay`, one at a time per
/// connection.
async fn slow_server(delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let service = hyper::service::service_fn(move |_request| async move {
                tokio::time::sleep(delay).await;
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}

#[tokio::test]
async fn a_slow_server_is_charged_for_every_press_that_queued_behind_it() {
    // 100 presses a second on one connection to a server that takes 50 ms
    // each: it carries 20 a second. A closed-loop client would see 50 ms;
    // counted from when each press was due, the queue shows.
    let addr = slow_server(Duration::from_millis(50)).await;
    let point = rate::run(&options(&addr, 100.0, 1, 10)).await.unwrap();
    assert!(point.saturated(), "{point:?}");
    assert!(
        point.ok < 100 && point.errors == 100 - point.ok,
        "{point:?}"
    );
    assert!(point.p99_ms > 500.0, "{point:?}");
    assert!(point.p50_ms >= 50.0, "{point:?}");
}

#[tokio::test]
async fn a_run_that_would_send_nothing_is_refused_with_its_reason() {
    let refused =
        |opts: RateOptions| async move { rate::run(&opts).await.unwrap_err().to_string() };
    let opts = options("127.0.0.1:1", 100.0, 1, 1);
    assert!(refused(RateOptions {
        rate: 0.0,
        ..opts.clone()
    })
    .await
    .contains("at least 1 press"));
    assert!(refused(RateOptions {
        rate: f64::INFINITY,
        ..opts.clone()
    })
    .await
    .contains("at least 1 press"));
    assert!(refused(RateOptions {
        sessions: 0,
        ..opts.clone()
    })
    .await
    .contains("one session"));
    assert!(refused(RateOptions {
        duration: Duration::ZERO,
        ..opts
    })
    .await
    .contains("sends nothing"));
}
