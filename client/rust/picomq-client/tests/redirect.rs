//! Redirects: the client follows 307s itself, with the same method, body and
//! bearer token on every hop, and remembers the owner. Locally against two
//! tiny servers (node b redirects to node a), and across two real nodes
//! sharing an etcd when e2e/rust_client_test.go provides them.

mod support;

use std::sync::{Arc, Mutex};

use picomq_client::{connect_with, ClientConfig, Kind, Live, Protocol, ReadLimits};
use support::{env_url, listen, unique, SeenRequest};

const TOKEN: &str = "rust-s3cret";

fn with_token(token: &str) -> ClientConfig {
    ClientConfig { token: Some(token.to_string()), ..ClientConfig::default() }
}

#[tokio::test]
async fn redirect_hops_carry_token_and_body() {
    let (la, url_a) = listen().await;
    let (lb, url_b) = listen().await;
    let seen: Arc<Mutex<Vec<(char, SeenRequest)>>> = Arc::new(Mutex::new(Vec::new()));
    // Node a owns every stream: it acknowledges appends.
    let s = seen.clone();
    support::serve(la, move |req| {
        s.lock().unwrap().push(('a', req));
        let body = br#"{"offset":0,"nextOffset":1,"timestamp":1764406800123,"count":1}"#;
        ("200 OK", vec![("Content-Type", "application/json".into())], body.to_vec())
    });
    // Node b redirects to node a, keeping the path and query.
    let (s, a) = (seen.clone(), url_a.clone());
    support::serve(lb, move |req| {
        let loc = format!("{}{}", a, req.target);
        s.lock().unwrap().push(('b', req));
        ("307 Temporary Redirect", vec![("Location", loc)], Vec::new())
    });
    let c = connect_with(Protocol::Pico, &url_b, with_token(TOKEN)).unwrap();
    let ack = c.append("/orders/1042", &["hello".into()], "").await.unwrap();
    assert_eq!((ack.start.as_str(), ack.next.as_str(), ack.timestamp), ("0", "1", Some(1764406800123)));
    let hops = seen.lock().unwrap().clone();
    assert_eq!(hops.iter().map(|h| h.0).collect::<String>(), "ba", "{:?}", hops);
    for (node, r) in &hops {
        assert_eq!(r.method, "POST", "node {}", node);
        assert_eq!(r.target, "/orders/1042", "node {}", node);
        assert_eq!(r.header("authorization"), Some("Bearer rust-s3cret"), "node {}", node);
        assert!(r.body.windows(5).any(|w| w == b"hello"), "node {}: body {:?}", node, r.body);
    }
    // The owner is remembered: the next append goes to node a directly.
    c.append("/orders/1042", &["again".into()], "").await.unwrap();
    let hops = seen.lock().unwrap().clone();
    assert_eq!(hops.iter().map(|h| h.0).collect::<String>(), "baa");
    assert_eq!(hops[2].1.header("authorization"), Some("Bearer rust-s3cret"));
}

#[tokio::test]
async fn redirect_loops_are_bounded() {
    let (l, url) = listen().await;
    let u = url.clone();
    support::serve(l, move |req| ("307 Temporary Redirect", vec![("Location", format!("{}{}", u, req.target))], Vec::new()));
    let c = connect_with(Protocol::Pico, &url, ClientConfig::default()).unwrap();
    assert_eq!(c.head("/loop").await.unwrap_err().kind(), Kind::Redirect);
}

/// Two real nodes sharing an etcd, each behind a recording proxy that is its
/// advertise URL (e2e/rust_client_test.go starts them and afterwards checks
/// that both hops of the append below carried the token).
#[tokio::test]
async fn redirect_across_two_nodes_keeps_the_token() {
    let (a, b) = (env_url("PICOMQ_TEST_NODE_A_URL"), env_url("PICOMQ_TEST_NODE_B_URL"));
    let token = std::env::var("PICOMQ_TEST_TOKEN").unwrap_or_else(|_| TOKEN.to_string());
    let name = std::env::var("PICOMQ_TEST_REDIRECT_STREAM").unwrap_or_else(|_| unique("redirect"));
    let ca = connect_with(Protocol::Pico, &a, with_token(&token)).unwrap();
    ca.create(&name, "application/json", None).await.unwrap(); // node a owns it
    let cb = connect_with(Protocol::Pico, &b, with_token(&token)).unwrap();
    let body = r#"{"hop":"redirected","n":1}"#;
    let ack = cb.append(&name, &[body.into()], "application/json").await.unwrap();
    assert_eq!((ack.start.as_str(), ack.next.as_str()), ("0", "1"));
    for i in 2..=5 {
        cb.append(&name, &[format!(r#"{{"n":{}}}"#, i).into()], "application/json").await.unwrap();
    }
    // A fresh client (no remembered owner) follows the redirect on a read too.
    let fresh = connect_with(Protocol::Pico, &b, with_token(&token)).unwrap();
    let page = fresh.read(&name, "0", Live::Off, ReadLimits::server_default()).await.unwrap();
    assert_eq!(page.records.len(), 5);
    assert_eq!(page.records[0].body_text(), body);
    // The nodes require the token: without it, node b refuses.
    let anonymous = picomq_client::connect(Protocol::Pico, &b).unwrap();
    let err = anonymous.read(&name, "0", Live::Off, ReadLimits::server_default()).await.unwrap_err();
    assert_eq!(err.kind(), Kind::Unauthorized, "{}", err);
}
