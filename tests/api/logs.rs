//! What a balancer writes to its log when it is not on a terminal: plain
//! text, and with `ACCESS_LOG=true` a line per request that names the
//! session only by its hash.

use crate::common;

use std::time::Duration;

use common::process::BalancerProcess;
use common::{unique, TestNode};

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
    let log = testkit::eventually(Duration::from_secs(5), "the access lines", || async {
        let log = std::fs::read_to_string(&path).unwrap();
        if log.contains("/nope") && log.contains(&hash) {
            Ok(log)
        } else {
            Err(log)
        }
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
