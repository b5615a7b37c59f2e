//! The status page's data: `GET /status/history`, the replica's own record
//! of each node's presses, so a page opened now draws the minutes before it.

use std::time::Duration;

use crate::common;

use common::{spawn_app, start_nodes, unique};

/// Presses the history's newest sample holds for each node, by address.
fn latest(history: &serde_json::Value) -> Vec<(String, u64)> {
    history["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let newest = node["points"].as_array().unwrap().last().cloned();
            let presses = newest.map_or(0, |p| p[1].as_u64().unwrap());
            (node["address"].as_str().unwrap().to_owned(), presses)
        })
        .collect()
}

#[tokio::test]
async fn the_history_holds_presses_forwarded_before_anyone_asked() {
    let app = spawn_app().await;
    let nodes = start_nodes(&app, 2, false).await;
    let tag = unique("charted");
    // No client has looked yet: the replica samples on its own.
    for i in 0..9 {
        assert_eq!(app.press(&format!("{tag}-{}", i % 3)).await.status, 200);
    }
    let on = |served_by: &str| nodes.iter().find(|n| n.name == served_by).unwrap();
    let mut expected: Vec<(String, u64)> = nodes.iter().map(|n| (n.address.clone(), 0)).collect();
    for i in 0..3 {
        let node = on(&app.press(&format!("{tag}-{i}")).await.served_by.unwrap())
            .address
            .clone();
        let slot = expected.iter_mut().find(|(a, _)| *a == node).unwrap();
        slot.1 += 4; // three presses before, this one
    }
    expected.sort();

    let history = testkit::eventually(
        Duration::from_secs(10),
        "a sample after the presses",
        || async {
            let history = app.admin_get("/status/history").await;
            let mut seen = latest(&history);
            seen.sort();
            testkit::holds(seen == expected, || format!("{seen:?}, want {expected:?}"))
                .map(|_| history)
        },
    )
    .await;
    assert_eq!(history["sample_every_ms"], 2000);
    assert_eq!(history["window_ms"], 300_000);
    for node in history["nodes"].as_array().unwrap() {
        let points = node["points"].as_array().unwrap();
        assert!(
            points.windows(2).all(
                |w| w[0][0].as_i64() < w[1][0].as_i64() && w[0][1].as_u64() <= w[1][1].as_u64()
            ),
            "samples oldest first, totals never down: {points:?}"
        );
    }
}

#[tokio::test]
async fn the_history_needs_the_admin_token() {
    let app = spawn_app().await;
    let response = app
        .http
        .get(format!("{}/status/history", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}
