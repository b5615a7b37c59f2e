//! Sticky presses and even placement (design.md §4.1, §4.2).

use crate::common;

use std::collections::{HashMap, HashSet};

use common::{spawn_cluster, unique};

#[tokio::test]
async fn press_keeps_a_session_on_its_node_and_counts_one_to_fifty() {
    let (app, _nodes) = spawn_cluster(3).await;
    let session = unique("sticky");
    let mut served_by = HashSet::new();
    for expected in 1..=50 {
        let answer = app.press(&session).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.body, format!("You clicked {expected} times"));
        served_by.insert(answer.served_by.expect("X-Served-By header"));
    }
    assert_eq!(
        served_by.len(),
        1,
        "one session went to several nodes: {served_by:?}"
    );
}

#[tokio::test]
async fn three_hundred_new_sessions_spread_over_three_nodes_within_one() {
    let (app, _nodes) = spawn_cluster(3).await;
    let tag = unique("spread");
    let mut per_node: HashMap<String, i64> = HashMap::new();
    for i in 0..300 {
        let answer = app.press(&format!("{tag}-{i}")).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        *per_node.entry(answer.served_by.unwrap()).or_default() += 1;
    }
    let active = app.active_sessions().await;
    assert_eq!(active.len(), 3);
    let counts: Vec<i64> = active.iter().map(|(_, n)| *n).collect();
    assert_eq!(counts.iter().sum::<i64>(), 300);
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(max - min <= 1, "active sessions not even: {active:?}");
    // What users saw agrees with what the registry counts.
    for (name, n) in &active {
        assert_eq!(per_node.get(name), Some(n), "{per_node:?} vs {active:?}");
    }
}

#[tokio::test]
async fn concurrent_first_presses_of_one_session_yield_one_mapping_and_each_count_once() {
    let (app, _nodes) = spawn_cluster(3).await;
    let app = std::sync::Arc::new(app);
    let session = unique("race");
    let presses = (0..100).map(|_| {
        let app = app.clone();
        let session = session.clone();
        tokio::spawn(async move { app.press(&session).await })
    });
    let answers: Vec<_> = futures::future::join_all(presses)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let mut counts: Vec<i64> = answers.iter().map(|a| a.clicks()).collect();
    counts.sort_unstable();
    assert_eq!(counts, (1..=100).collect::<Vec<_>>());
    let nodes: HashSet<_> = answers
        .iter()
        .map(|a| a.served_by.clone().unwrap())
        .collect();
    assert_eq!(nodes.len(), 1, "served by {nodes:?}");
    let active: i64 = app.active_sessions().await.iter().map(|(_, n)| n).sum();
    assert_eq!(active, 1, "one session must be counted once");
}

#[tokio::test]
async fn press_answers_json_when_asked() {
    let (app, _nodes) = spawn_cluster(1).await;
    let session = unique("json");
    app.press(&session).await;
    let response = app
        .http
        .post(format!("{}/press", app.address))
        .header("accept", "application/json")
        .json(&serde_json::json!({ "session_id": session }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-served-by"], "n1");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["session_id"], session.as_str());
    assert_eq!(body["clicks"], 2);
    assert_eq!(body["message"], "You clicked 2 times");
}

#[tokio::test]
async fn sessions_stay_sticky_across_a_balancer_restart_and_a_second_replica() {
    let (first, _nodes) = spawn_cluster(3).await;
    let tag = unique("replica");
    let mut home = HashMap::new();
    for i in 0..30 {
        let answer = first.press(&format!("{tag}-{i}")).await;
        home.insert(i, answer.served_by.unwrap());
    }
    // A second replica sharing the prefix, started after the nodes were added.
    let second = common::spawn_app_with(first.config.clone()).await;
    drop(first);
    for i in 0..30 {
        let answer = second.press(&format!("{tag}-{i}")).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.clicks(), 2);
        assert_eq!(answer.served_by.as_ref(), Some(&home[&i]));
    }
}

#[tokio::test]
async fn press_without_any_node_is_503() {
    let app = common::spawn_app().await;
    let answer = app.press(&unique("lonely")).await;
    assert_eq!(answer.status, 503);
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["code"], "no_node_available");
}

/// A node that closes a connection idle for 30 ms without saying so
/// beforehand (as a node's idle timeout does to a pooled connection).
async fn node_that_closes_idle_connections() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let clicks = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let clicks = clicks.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 8192];
                // One request after another, until the connection has been
                // idle for 30 ms: then it is closed, unannounced.
                loop {
                    let idle = std::time::Duration::from_millis(30);
                    let Ok(Ok(n)) = tokio::time::timeout(idle, stream.read(&mut buffer)).await
                    else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    let mut request = buffer[..n].to_vec();
                    // The whole request: headers, then Content-Length bytes of body.
                    loop {
                        let text = String::from_utf8_lossy(&request).to_lowercase();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length = text
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            if request.len() >= end + 4 + length {
                                break;
                            }
                        }
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&request).to_string();
                    let body = if head.starts_with("POST /press") {
                        format!(
                            "You clicked {} times",
                            clicks.fetch_add(1, Ordering::SeqCst) + 1
                        )
                    } else if head.starts_with("GET /health") {
                        r#"{"status":"ok"}"#.to_owned()
                    } else {
                        "OK".to_owned()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

#[tokio::test]
async fn a_pooled_connection_the_node_closed_while_idle_is_not_a_node_failure() {
    let app = common::spawn_app().await;
    let node = node_that_closes_idle_connections().await;
    app.add_node(&node, "closer").await;
    let session = unique("idle-close");
    for expected in 1..=20 {
        let answer = app.press(&session).await;
        assert_eq!(answer.status, 200, "press {expected}: {answer:?}");
        assert_eq!(answer.clicks(), expected);
        // Long enough for the node to close the connection the press used.
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    }
    assert_eq!(app.nodes().await[0]["state"], "up");
}
