//! `nodes-control admin ...` against a running balancer: the binary, its
//! output and its exit codes.

use crate::common;

use std::process::Output;

use common::{spawn_app, unique, TestApp, TestNode, ADMIN_TOKEN};
use serde_json::Value;

async fn admin(app: &TestApp, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nodes-control"))
        .arg("admin")
        .args(["--url", &app.address, "--token", ADMIN_TOKEN])
        .args(args)
        .env_remove("ADMIN_TOKEN")
        .output()
        .await
        .expect("the binary runs")
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

#[tokio::test]
async fn the_admin_cli_adds_lists_drains_and_reads_the_log_and_sessions() {
    let app = spawn_app().await;
    let node = TestNode::start("cli1", false);
    let added = json(&admin(&app, &["add", &node.address, "--weight", "2"]).await);
    assert_eq!(added["result"], "added", "{added}");
    let nodes = json(&admin(&app, &["nodes"]).await);
    assert_eq!(nodes[0]["name"], "cli1");
    assert_eq!(nodes[0]["weight"], 2);

    let session = unique("cli");
    app.press(&session).await;
    let shown = json(&admin(&app, &["session", &session]).await);
    assert_eq!(shown["current"]["node"], node.address.as_str(), "{shown}");

    let drained = json(&admin(&app, &["drain", &node.address, "--deadline-secs", "600"]).await);
    assert_eq!(
        (drained["result"].as_str(), drained["sessions"].as_i64()),
        (Some("draining"), Some(1))
    );
    let removed = json(&admin(&app, &["remove", &node.address]).await);
    assert_eq!(removed["result"], "removed");

    testkit::eventually(
        std::time::Duration::from_secs(5),
        "the three events",
        || async {
            let log =
                json(&admin(&app, &["events", "--node", &node.address, "--limit", "10"]).await);
            let actions: Vec<String> = log
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_owned())
                .collect();
            testkit::holds(actions == ["removed", "draining", "added"], || actions)
        },
    )
    .await;
}

#[tokio::test]
async fn an_admin_cli_error_is_the_balancers_sentence_and_exit_code_1() {
    let app = spawn_app().await;
    let output = admin(&app, &["remove", "http://127.0.0.1:1"]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("404") && stderr.contains("no node"),
        "{stderr}"
    );
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodes-control"))
        .args(["admin", "--url", &app.address, "--token", "wrong", "nodes"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("401"));
}

#[tokio::test]
async fn adding_an_address_that_does_not_answer_warns_that_the_node_is_down() {
    let app = spawn_app().await;
    let output = admin(&app, &["add", "http://127.0.0.1:9"]).await;
    let added = json(&output);
    assert_eq!(added["result"], "added");
    assert_eq!(added["state"], "down");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning: http://127.0.0.1:9 was added but is down")
            && stderr.contains("did not answer"),
        "{stderr}"
    );
    // A node that answers is added without a warning.
    let node = TestNode::start(&unique("answers"), false);
    let output = admin(&app, &["add", &node.address]).await;
    assert_eq!(json(&output)["state"], "up");
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `nodes-control admin nodes | head`: a reader that closes the pipe before
/// the answer is written is not an error (it was a panic, exit 101).
#[tokio::test]
async fn the_admin_cli_piped_into_a_reader_that_stops_early_exits_quietly() {
    let app = spawn_app().await;
    // `true` exits at once; the answer comes a round trip later, into a
    // pipe with no reader.
    let command = format!(
        "set -o pipefail; '{}' admin --url '{}' --token '{}' nodes | true",
        env!("CARGO_BIN_EXE_nodes-control"),
        app.address,
        ADMIN_TOKEN
    );
    let output = tokio::process::Command::new("bash")
        .args(["-c", &command])
        .env_remove("ADMIN_TOKEN")
        .output()
        .await
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
