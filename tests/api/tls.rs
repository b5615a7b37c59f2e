//! HTTPS nodes: trusted through `NODE_CA_FILE`, refused when untrusted.

use crate::common;

use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;
use common::{spawn_app_with, test_config, unique};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// A reference node behind TLS with a certificate for 127.0.0.1 issued by
/// a fresh CA; returns its https address and the CA in PEM.
async fn tls_node(name: &str) -> (String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    common::ensure_database().await;
    let node = click_node::Node::new(&click_node::Config::for_tests(
        name,
        &common::database_url(),
    ))
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let server =
        axum_server::from_tcp_rustls(listener, RustlsConfig::from_config(Arc::new(server)))
            .unwrap();
    tokio::spawn(server.serve(click_node::app(node).into_make_service()));
    (format!("https://127.0.0.1:{port}"), ca.pem())
}

#[tokio::test]
async fn presses_reach_an_https_node_whose_ca_is_in_node_ca_file() {
    let (address, ca_pem) = tls_node("secure").await;
    let ca_file = std::env::temp_dir().join(format!("{}.pem", unique("ca")));
    std::fs::write(&ca_file, ca_pem).unwrap();
    let mut config = test_config();
    config.node_ca_file = Some(ca_file.clone());
    let app = spawn_app_with(config).await;
    app.add_node(&address, "secure").await;
    assert_eq!(app.nodes().await[0]["state"], "up");
    let session = unique("tls");
    for expected in 1..=3 {
        let answer = app.press(&session).await;
        assert_eq!(answer.served_by.as_deref(), Some("secure"));
        assert_eq!(answer.clicks(), expected);
    }
    let _ = std::fs::remove_file(ca_file);
}

#[tokio::test]
async fn an_https_node_with_an_untrusted_certificate_is_not_used() {
    let (address, _ca) = tls_node("untrusted").await;
    let app = spawn_app_with(test_config()).await;
    app.add_node(&address, "untrusted").await;
    assert_eq!(app.nodes().await[0]["state"], "down");
    assert_eq!(app.press(&unique("tls")).await.status, 503);
}
