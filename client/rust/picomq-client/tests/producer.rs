//! Identified producers against a real Pico node: batching, per-record
//! positions, a retry after a lost acknowledgement deduplicated by the
//! server, stale epochs fenced.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picomq_client::producer::{Producer, ProducerConfig};
use picomq_client::{connect, connect_with, ClientConfig, Kind, Live, Protocol, ReadLimits, RetryPolicy};
use support::{listen, pico_url, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn read_all(c: &picomq_client::Client, s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pos = c.beginning();
    loop {
        let page = c.read(s, &pos, Live::Off, ReadLimits::server_default()).await.unwrap();
        out.extend(page.records.iter().map(|r| r.body_text().into_owned()));
        if page.up_to_date {
            return out;
        }
        pos = page.next;
    }
}

#[tokio::test]
async fn producer_batches_in_order_with_per_record_positions() {
    let c = connect(Protocol::Pico, &pico_url()).unwrap();
    let s = unique("producer");
    c.create(&s, "text/plain", None).await.unwrap();
    let p = Producer::new(&c, &s, ProducerConfig { max_batch_records: 100, linger: Duration::from_millis(5), ..ProducerConfig::default() }).unwrap();
    let mut pending = Vec::new();
    for i in 0..1000 {
        pending.push(p.send(format!("r{}", i).into()).await.unwrap());
    }
    p.flush().await.unwrap();
    for (i, a) in pending.into_iter().enumerate() {
        let ack = a.wait().await.unwrap();
        assert_eq!((ack.start, ack.next, ack.count, ack.duplicate), (i.to_string(), (i + 1).to_string(), 1, false));
    }
    let ack = p.send_durable("last".into()).await.unwrap();
    assert_eq!(ack.start, "1000");
    p.close().await.unwrap();
    let got = read_all(&c, &s).await;
    let mut want: Vec<String> = (0..1000).map(|i| format!("r{}", i)).collect();
    want.push("last".into());
    assert_eq!(got, want);
}

/// A TCP proxy to `target` that, on the first connection carrying a
/// producer append, forwards the request, lets the node write and answer,
/// and then cuts the connection instead of passing the answer on: the
/// client cannot know whether the batch was written.
async fn dropping_proxy(target: String) -> (String, Arc<AtomicBool>) {
    let (l, url) = listen().await;
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let addr = target.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            let addr = addr.clone();
            let d = d.clone();
            tokio::spawn(async move {
                let mut server = TcpStream::connect(&addr).await.unwrap();
                loop {
                    let req = match support::read_request(&mut client).await {
                        Some(r) => r,
                        None => return,
                    };
                    let mut raw = format!("{} {} HTTP/1.1\r\n", req.method, req.target);
                    for (k, v) in &req.headers {
                        raw.push_str(&format!("{}: {}\r\n", k, v));
                    }
                    raw.push_str("\r\n");
                    let mut bytes = raw.into_bytes();
                    bytes.extend_from_slice(&req.body);
                    server.write_all(&bytes).await.unwrap();
                    let resp = read_response(&mut server).await;
                    if req.header("pico-producer-id").is_some() && !d.swap(true, Ordering::SeqCst) {
                        return; // the node answered; the client never hears it
                    }
                    client.write_all(&resp).await.unwrap();
                }
            });
        }
    });
    (url, dropped)
}

/// Reads one Content-Length response, raw.
async fn read_response(conn: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .unwrap_or(0);
            while buf.len() < i + 4 + len {
                let n = conn.read(&mut chunk).await.unwrap();
                assert!(n > 0, "node closed mid-response");
                buf.extend_from_slice(&chunk[..n]);
            }
            return buf;
        }
        let n = conn.read(&mut chunk).await.unwrap();
        assert!(n > 0, "node closed before answering");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn producer_retry_after_lost_ack_is_deduplicated() {
    let direct = connect(Protocol::Pico, &pico_url()).unwrap();
    let s = unique("dedup");
    direct.create(&s, "text/plain", None).await.unwrap();
    let (proxy, dropped) = dropping_proxy(pico_url()).await;
    let retry = RetryPolicy { max_attempts: 4, initial_backoff: Duration::from_millis(20), max_backoff: Duration::from_millis(200) };
    let c = connect_with(Protocol::Pico, &proxy, ClientConfig { retry, ..ClientConfig::default() }).unwrap();
    let p = Producer::new(&c, &s, ProducerConfig::default()).unwrap();
    let ack = p.send_durable("once".into()).await.unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the proxy never cut an acknowledgement");
    assert!(ack.duplicate, "the retry should be acknowledged as a duplicate: {:?}", ack);
    assert_eq!(ack.start, "0", "a duplicate carries the original position");
    let ack2 = p.send_durable("twice".into()).await.unwrap();
    assert_eq!((ack2.start.as_str(), ack2.duplicate), ("1", false));
    p.close().await.unwrap();
    assert_eq!(read_all(&direct, &s).await, vec!["once", "twice"], "the retried batch was written once");
}

#[tokio::test]
async fn stale_epoch_is_fenced_and_poisons_the_producer() {
    let c = connect(Protocol::Pico, &pico_url()).unwrap();
    let s = unique("fenced");
    c.create(&s, "text/plain", None).await.unwrap();
    let id = format!("fence-{}", std::process::id());
    let newer = Producer::new(&c, &s, ProducerConfig { id: Some(id.clone()), epoch: 1, ..ProducerConfig::default() }).unwrap();
    newer.send_durable("epoch 1".into()).await.unwrap();
    let stale = Producer::new(&c, &s, ProducerConfig { id: Some(id), epoch: 0, ..ProducerConfig::default() }).unwrap();
    let err = stale.send_durable("epoch 0".into()).await.unwrap_err();
    assert_eq!(err.kind(), Kind::Fenced, "{}", err);
    assert_eq!(err.api().unwrap().current_epoch, Some(1));
    assert_eq!(stale.send("after".into()).await.unwrap_err().kind(), Kind::Fenced, "a failed producer stays failed");
    assert_eq!(stale.error().map(|e| e.kind()), Some(Kind::Fenced));
    newer.close().await.unwrap();
    assert_eq!(read_all(&c, &s).await, vec!["epoch 1"]);
}

#[tokio::test]
async fn plain_appends_are_never_retried() {
    // A node that answers 503 to everything: an append gets the 503 after
    // one attempt, a read after max_attempts.
    let (l, url) = listen().await;
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = count.clone();
    support::serve(l, move |_| {
        n.fetch_add(1, Ordering::SeqCst);
        let body = br#"{"error":{"code":"unavailable","message":"try later"}}"#;
        ("503 Service Unavailable", vec![("Content-Type", "application/json".into())], body.to_vec())
    });
    let retry = RetryPolicy { max_attempts: 3, initial_backoff: Duration::from_millis(1), max_backoff: Duration::from_millis(5) };
    let c = connect_with(Protocol::Pico, &url, ClientConfig { retry, ..ClientConfig::default() }).unwrap();
    let err = c.append("/s", &["x".into()], "").await.unwrap_err();
    assert_eq!((err.kind(), err.status()), (Kind::Unavailable, Some(503)));
    assert_eq!(count.load(Ordering::SeqCst), 1, "an append was retried");
    let err = c.read("/s", "0", Live::Off, ReadLimits::server_default()).await.unwrap_err();
    assert_eq!(err.api().unwrap().code, "unavailable");
    assert_eq!(count.load(Ordering::SeqCst), 4, "a read gets max_attempts attempts");
}
