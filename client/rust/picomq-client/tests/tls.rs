//! https:// against a real node whose certificate chains to a private CA
//! (e2e/rust_client_test.go makes the CA, starts the node with TLS and
//! passes PICOMQ_TEST_TLS_URL and PICOMQ_TEST_TLS_CA, the CA's PEM file).

mod support;

use picomq_client::{connect, connect_with, ClientConfig, Kind, Live, Protocol, ReadLimits};
use support::{env_url, unique};

fn ca_pem() -> Vec<u8> {
    let path = env_url("PICOMQ_TEST_TLS_CA");
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading the CA {}: {}", path, e))
}

#[tokio::test]
async fn append_and_read_over_tls_with_a_private_ca() {
    let url = env_url("PICOMQ_TEST_TLS_URL");
    assert!(url.starts_with("https://"), "{}", url);
    let cfg = ClientConfig { ca_pem: Some(ca_pem()), token: std::env::var("PICOMQ_TEST_TLS_TOKEN").ok(), ..ClientConfig::default() };
    let c = connect_with(Protocol::Pico, &url, cfg).unwrap();
    let s = unique("tls");
    assert!(c.create(&s, "application/json", None).await.unwrap().created);
    let ack = c.append(&s, &[r#"{"over":"tls"}"#.into(), r#"{"n":2}"#.into()], "application/json").await.unwrap();
    assert_eq!((ack.start.as_str(), ack.count), ("0", 2));
    let page = c.read(&s, &c.beginning(), Live::Off, ReadLimits::server_default()).await.unwrap();
    let bodies: Vec<_> = page.records.iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies, vec![&br#"{"over":"tls"}"#[..], &br#"{"n":2}"#[..]]);
}

#[tokio::test]
async fn an_unknown_ca_is_refused() {
    // Without the private CA, the node's certificate chains to nothing the
    // client trusts: the handshake fails and nothing is sent.
    let c = connect(Protocol::Pico, &env_url("PICOMQ_TEST_TLS_URL")).unwrap();
    let err = c.head("/rust-test/tls/never").await.unwrap_err();
    assert_eq!(err.kind(), Kind::Transport, "{}", err);
}
