//! SSE subscriptions against real nodes, both protocols: records already
//! there and appended later arrive in order with their positions, control
//! events say when the reader is caught up, and a closed Durable Streams
//! stream ends the subscription. Parity with the Go client's
//! TestSubscribe tests.

mod support;

use std::time::Duration;

use picomq_client::{connect, Client, EventKind, Protocol, Subscription};
use support::{ds_url, pico_url, unique};

/// Bodies of data events until a control event says the reader is caught
/// up with at least `want` records.
async fn collect(sub: &mut Subscription, want: usize) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), sub.next()).await.expect("an event within 30 s").unwrap().expect("not the end");
        match ev.kind {
            EventKind::Data => got.extend(ev.records.iter().map(|r| r.body_text().into_owned())),
            EventKind::Control if ev.up_to_date && got.len() >= want => return got,
            EventKind::Control => {}
        }
    }
}

#[tokio::test]
async fn subscribe_delivers_old_and_new_records_on_both_protocols() {
    for c in [connect(Protocol::Pico, &pico_url()).unwrap(), connect(Protocol::DurableStreams, &ds_url()).unwrap()] {
        let p = c.protocol();
        let s = unique("sse");
        c.create(&s, "application/json", None).await.unwrap();
        c.append(&s, &[r#"{"n":1}"#.into(), r#"{"n":2}"#.into()], "application/json").await.unwrap();
        let mut sub = c.subscribe(&s, &c.beginning()).await.unwrap();
        assert_eq!(collect(&mut sub, 2).await, vec![r#"{"n":1}"#, r#"{"n":2}"#], "{}", p);
        assert_eq!(sub.position(), c.position_at(2), "{}", p);
        c.append(&s, &[r#"{"n":3}"#.into()], "application/json").await.unwrap();
        assert_eq!(collect(&mut sub, 1).await, vec![r#"{"n":3}"#], "{}", p);
        assert_eq!(sub.position(), c.position_at(3), "{}", p);
    }
}

#[tokio::test]
async fn subscribe_from_now_skips_what_was_there() {
    for c in [connect(Protocol::Pico, &pico_url()).unwrap(), connect(Protocol::DurableStreams, &ds_url()).unwrap()] {
        let s = unique("sse-now");
        c.create(&s, "application/json", None).await.unwrap();
        c.append(&s, &[r#""old""#.into()], "application/json").await.unwrap();
        let mut sub = c.subscribe(&s, picomq_client::POSITION_NOW).await.unwrap();
        c.append(&s, &[r#""new""#.into()], "application/json").await.unwrap();
        assert_eq!(collect(&mut sub, 1).await, vec![r#""new""#], "{}", c.protocol());
    }
}

#[tokio::test]
async fn a_closed_durable_stream_ends_the_subscription() {
    let c: Client = connect(Protocol::DurableStreams, &ds_url()).unwrap();
    let s = unique("sse-closed");
    c.create(&s, "application/json", None).await.unwrap();
    c.append(&s, &[r#"{"last":true}"#.into()], "application/json").await.unwrap();
    c.close_stream(&s).await.unwrap();
    let mut sub = c.subscribe(&s, &c.beginning()).await.unwrap();
    let mut bodies = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), sub.next()).await.expect("an event within 30 s").unwrap() {
            Some(ev) => {
                bodies.extend(ev.records.iter().map(|r| r.body_text().into_owned()));
                if ev.closed {
                    assert!(sub.next().await.unwrap().is_none(), "an event after the closing one");
                    break;
                }
            }
            None => panic!("ended without a closing control event"),
        }
    }
    assert_eq!(bodies, vec![r#"{"last":true}"#]);
}
