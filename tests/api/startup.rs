//! Start-up: configuration errors stop it, dependencies that are away only
//! delay it.

use crate::common;

use common::{spawn_app_with, test_config, unique, TcpProxy, TestNode};

#[tokio::test]
async fn a_malformed_address_in_nodes_stops_the_start_with_its_name() {
    let mut config = test_config();
    config.nodes = vec!["http://127.0.0.1:9".into(), "node1:8080".into()];
    let prefix = config.redis_key_prefix.clone();
    common::ensure_database().await;
    let error = nodes_control::Application::build(config)
        .await
        .err()
        .expect("refused");
    assert!(format!("{error:#}").contains("node1:8080"), "{error:#}");
    let written = testkit::keys_under(&prefix).await;
    assert!(written.is_empty(), "refused, yet it wrote {written:?}");
}

#[tokio::test]
async fn nodes_listed_while_redis_is_away_are_registered_when_it_returns() {
    let redis = TcpProxy::start(testkit::single_redis_addr()).await;
    redis.cut();
    let node = TestNode::start("late", false);
    let mut config = test_config();
    config.redis_url = format!("redis://{}", redis.addr);
    config.nodes = vec![node.address.clone()];
    let app = spawn_app_with(config).await;
    assert_eq!(app.press(&unique("early")).await.status, 503);
    redis.restore();
    let answer = common::press_until_ok(&app, &unique("late")).await;
    assert_eq!(answer.served_by.as_deref(), Some("late"));
}
