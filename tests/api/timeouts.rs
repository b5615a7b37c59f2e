//! The two timeout answers: a body that does not arrive in time is a 408,
//! a request that takes too long a 504; both JSON, and nothing is counted.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{spawn_app_with, test_config, unique};

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_a_408_and_counts_nothing() {
    let mut config = test_config();
    config.body_read_timeout_ms = 300;
    let app = spawn_app_with(config).await;
    let _nodes = crate::common::start_nodes(&app, 1, false).await;
    let session = unique("slow-body");
    let body = format!(r#"{{"session_id":"{session}"}}"#);
    let mut stream = TcpStream::connect(app.address.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST /press HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Half the body, then nothing past the timeout.
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("the balancer answers and closes within the body timeout")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"body_timeout""#), "{answer}");
    assert_eq!(
        app.press(&session).await.clicks(),
        1,
        "the cut press counted nothing"
    );
}

#[tokio::test]
async fn a_request_past_the_request_timeout_is_a_504_in_json() {
    let mut config = test_config();
    config.request_timeout_ms = 300;
    config.node_timeout_ms = 5_000;
    let app = spawn_app_with(config).await;
    // A node that takes a second to answer /process.
    testkit::ensure_database().await;
    let mut node_config = click_node::Config::for_tests("slow", &testkit::database_url());
    node_config.min_delay_ms = 1_000;
    node_config.max_delay_ms = 1_000;
    let node: Arc<click_node::Node> = click_node::Node::new(&node_config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(click_node::serve(listener, node, std::future::pending()));
    app.add_node(&address, "slow").await;

    let response = app
        .http
        .get(format!("{}/process/r1", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], "request_timeout", "{body}");
}
