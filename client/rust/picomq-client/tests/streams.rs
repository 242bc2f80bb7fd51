//! Both protocols against real nodes: create/append/read/head/delete, "now",
//! long-poll wake-up, Durable Streams closed streams, unsupported operations.
//! Parity with the Go client's TestCreateAppendReadHeadDelete,
//! TestRecordsLive and TestDurableStreamsClose.

mod support;

use std::time::{Duration, Instant};

use picomq_client::{connect, AppendRecord, Client, CreateOptions, Header, Kind, Live, Protocol, ReadLimits, CATCH_UP_PAGE_BYTES, POSITION_NOW};
use support::{ds_url, pico_url, unique};

fn clients() -> Vec<Client> {
    vec![connect(Protocol::Pico, &pico_url()).unwrap(), connect(Protocol::DurableStreams, &ds_url()).unwrap()]
}

#[tokio::test]
async fn create_append_read_head_delete_on_both_protocols() {
    for c in clients() {
        let p = c.protocol();
        let s = unique("crud");
        let res = c.create(&s, "application/json", None).await.unwrap();
        assert!(res.created, "{}: {:?}", p, res);
        assert_eq!(res.info.content_type, "application/json", "{}", p);
        let again = c.create(&s, "application/json", None).await.unwrap();
        assert!(!again.created, "{}: identical create", p);
        let err = c.create(&s, "text/plain", None).await.unwrap_err();
        assert_eq!(err.kind(), Kind::Conflict, "{}: {}", p, err);
        let api = err.api().expect("an API error");
        assert!(api.status == 409 && !api.code.is_empty() && !api.message.is_empty(), "{}: {:?}", p, api);

        let ack = c.append(&s, &[r#"{"a":1}"#.into()], "application/json").await.unwrap();
        assert_eq!((ack.start.as_str(), ack.next.as_str(), ack.count), (c.position_at(0).as_str(), c.position_at(1).as_str(), 1), "{}", p);
        let ack = c.append(&s, &[r#"{"b":2}"#.into(), "[3,4]".into()], "application/json").await.unwrap();
        assert_eq!((ack.start, ack.next, ack.count), (c.position_at(1), c.position_at(3), 2), "{}", p);
        let err = c.append(&s, &["not json".into()], "application/json").await.unwrap_err();
        assert!(matches!(err.kind(), Kind::BadRequest | Kind::InvalidArgument), "{}: invalid JSON: {}", p, err);

        let page = c.read(&s, &c.beginning(), Live::Off, ReadLimits::server_default()).await.unwrap();
        let want = [r#"{"a":1}"#, r#"{"b":2}"#, "[3,4]"];
        assert_eq!(page.records.len(), 3, "{}: {:?}", p, page);
        assert!(page.up_to_date, "{}", p);
        assert_eq!(page.next, c.position_at(3), "{}", p);
        for (i, r) in page.records.iter().enumerate() {
            assert_eq!(r.body_text(), want[i], "{}", p);
            assert_eq!(r.position, c.position_at(i as i64), "{}", p);
        }
        // From next: nothing more, up to date; "now" is the end too.
        let end = c.read(&s, &page.next, Live::Off, ReadLimits::server_default()).await.unwrap();
        assert!(end.records.is_empty() && end.up_to_date && end.next == c.position_at(3), "{}: {:?}", p, end);
        let now = c.read(&s, POSITION_NOW, Live::Off, ReadLimits::server_default()).await.unwrap();
        assert!(now.records.is_empty() && now.next == c.position_at(3), "{}: {:?}", p, now);
        if p == Protocol::Pico {
            let limited = c.read(&s, &c.beginning(), Live::Off, ReadLimits::records(2)).await.unwrap();
            assert_eq!((limited.records.len(), limited.next.as_str()), (2, "2"));
        }

        let info = c.head(&s).await.unwrap();
        assert_eq!((info.next.as_str(), info.content_type.as_str()), (c.position_at(3).as_str(), "application/json"), "{}", p);

        c.delete(&s).await.unwrap();
        assert_eq!(c.head(&s).await.unwrap_err().kind(), Kind::NotFound, "{}", p);
        let err = c.read(&s, &c.beginning(), Live::Off, ReadLimits::server_default()).await.unwrap_err();
        assert_eq!((err.status(), err.kind()), (Some(404), Kind::NotFound), "{}", p);
        assert_eq!(c.delete(&s).await.unwrap_err().kind(), Kind::NotFound, "{}", p);
    }
}

#[tokio::test]
async fn pico_keys_headers_and_binary_values_round_trip() {
    let c = connect(Protocol::Pico, &pico_url()).unwrap();
    let s = unique("binary");
    c.create(&s, "application/octet-stream", None).await.unwrap();
    let rec = AppendRecord {
        key: Some(b"customer-7".to_vec()),
        body: vec![0, 0xff, 0x80, b'\n'].into(),
        headers: vec![
            Header { key: "trace".into(), value: Some(b"abc".to_vec()) },
            Header { key: "null".into(), value: None },
        ],
    };
    c.append(&s, &[rec.clone(), AppendRecord::default()], "").await.unwrap();
    let page = c.read(&s, "0", Live::Off, ReadLimits::server_default()).await.unwrap();
    assert_eq!(page.records.len(), 2);
    let r = &page.records[0];
    assert_eq!((&r.key, &r.body, &r.headers), (&rec.key, &rec.body, &rec.headers));
    assert!(r.timestamp.unwrap() > 0);
    assert_eq!((page.records[1].key.as_ref(), page.records[1].body.len()), (None, 0));
    let listed = c.list("/rust-test/binary/", None, None).await.unwrap();
    assert!(listed.streams.iter().any(|i| i.name == s), "{:?}", listed);
    let trimmed = c.trim(&s, "1").await.unwrap();
    assert_eq!(trimmed.start.as_deref(), Some("1"));
    let page = c.read(&s, "-1", Live::Off, ReadLimits::server_default()).await.unwrap();
    assert_eq!((page.records.len(), page.records[0].position.as_str()), (1, "1"));
}

#[tokio::test]
async fn long_poll_wakes_up_on_append() {
    for c in clients() {
        let p = c.protocol();
        let s = unique("live");
        c.create(&s, "text/plain", None).await.unwrap();
        c.append(&s, &["old".into()], "text/plain").await.unwrap();
        let first = c.read(&s, &c.beginning(), Live::LongPoll, ReadLimits::server_default()).await.unwrap();
        assert_eq!(first.records.len(), 1, "{}: a long-poll answers at once when records exist", p);
        assert_eq!(first.records[0].body_text(), "old");
        // Caught up: the next long-poll waits until the append lands, far
        // sooner than the server's 25 s long-poll timeout.
        let (c2, s2, next) = (c.clone(), s.clone(), first.next.clone());
        let started = Instant::now();
        let poll = tokio::spawn(async move { c2.read(&s2, &next, Live::LongPoll, ReadLimits::server_default()).await });
        tokio::time::sleep(Duration::from_millis(200)).await; // lets the poll reach the server first; correct either way
        c.append(&s, &["new".into()], "text/plain").await.unwrap();
        let page = poll.await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(20), "{}: woke after {:?}", p, started.elapsed());
        assert_eq!(page.records.len(), 1, "{}: {:?}", p, page);
        assert_eq!(page.records[0].body_text(), "new", "{}", p);
        assert_eq!(page.records[0].position, c.position_at(1), "{}", p);
    }
}

#[tokio::test]
async fn durable_streams_closed_streams() {
    let c = connect(Protocol::DurableStreams, &ds_url()).unwrap();
    let s = unique("closed");
    let opts = CreateOptions { ttl: Some(Duration::from_secs(3600)), ..CreateOptions::default() };
    c.create_with(&s, "text/plain", opts).await.unwrap();
    c.append(&s, &["hello ".into(), "world".into()], "text/plain").await.unwrap();
    let final_pos = c.close_stream(&s).await.unwrap();
    assert_eq!(final_pos, c.position_at(1), "a byte-stream append is one record");
    let err = c.append(&s, &["late".into()], "text/plain").await.unwrap_err();
    assert_eq!(err.kind(), Kind::Closed, "{}", err);
    assert_eq!(err.api().unwrap().next_position.as_deref(), Some(final_pos.as_str()));
    let info = c.head(&s).await.unwrap();
    assert!(info.closed && info.ttl == Some(Duration::from_secs(3600)), "{:?}", info);
    let page = c.read(&s, &c.beginning(), Live::Off, ReadLimits::server_default()).await.unwrap();
    assert!(page.closed, "{:?}", page);
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].body_text(), "hello world");
    // A long-poll at the end of a closed stream answers at once: nothing will follow.
    let started = Instant::now();
    let end = c.read(&s, &page.next, Live::LongPoll, ReadLimits::server_default()).await.unwrap();
    assert!(end.closed && end.records.is_empty(), "{:?}", end);
    assert!(started.elapsed() < Duration::from_secs(10), "closed long-poll took {:?}", started.elapsed());
    // Created closed.
    let s2 = unique("closed");
    let res = c.create_with(&s2, "text/plain", CreateOptions { closed: true, ..CreateOptions::default() }).await.unwrap();
    assert!(res.info.closed || c.head(&s2).await.unwrap().closed);
}

#[tokio::test]
async fn unsupported_operations_fail_before_sending() {
    // Port 1 refuses connections: an operation that sent anything would be a transport error.
    let ds = connect(Protocol::DurableStreams, "http://127.0.0.1:1").unwrap();
    let pico = connect(Protocol::Pico, "http://127.0.0.1:1").unwrap();
    let keyed = AppendRecord { key: Some(b"k".to_vec()), ..AppendRecord::default() };
    let errs = vec![
        ds.list("", None, None).await.unwrap_err(),
        ds.trim("/s", "0").await.unwrap_err(),
        ds.append("/s", &[keyed], "text/plain").await.unwrap_err(),
        ds.create("/s", "text/plain", Some(Duration::from_secs(1))).await.unwrap_err(),
        pico.close_stream("/s").await.unwrap_err(),
        pico.create_with("/s", "", CreateOptions { ttl: Some(Duration::from_secs(1)), ..CreateOptions::default() }).await.unwrap_err(),
    ];
    for e in errs {
        assert_eq!(e.kind(), Kind::Unsupported, "{}", e);
    }
    assert_eq!(pico.head("/s").await.unwrap_err().kind(), Kind::Transport);
}

#[tokio::test]
async fn http2_cleartext_on_both_protocols() {
    // Prior-knowledge h2c: a node that spoke only HTTP/1.1 would fail the
    // HTTP/2 connection preface, so success means HTTP/2 was spoken.
    for (p, url) in [(Protocol::Pico, pico_url()), (Protocol::DurableStreams, ds_url())] {
        let cfg = picomq_client::ClientConfig { http2: true, ..picomq_client::ClientConfig::default() };
        let c = picomq_client::connect_with(p, &url, cfg).unwrap();
        let s = unique("h2c");
        c.create(&s, "text/plain", None).await.unwrap();
        let ack = c.append(&s, &["over h2c".into()], "text/plain").await.unwrap();
        assert_eq!(ack.start, c.position_at(0), "{}", p);
        let page = c.read(&s, &c.beginning(), Live::Off, ReadLimits::server_default()).await.unwrap();
        assert_eq!(page.records.len(), 1, "{}", p);
        assert_eq!(page.records[0].body_text(), "over h2c", "{}", p);
    }
}

/// The catch-up iterator reads a stream larger than one byte-sized page
/// (so the next page is read ahead while one is consumed) in order, every
/// byte once, ends at the stream's end, and says where to resume; from a
/// middle position it starts there. (A Durable Streams byte stream reads
/// back as one record per page, so there it counts bytes.)
#[tokio::test]
async fn records_iterator_catches_up_across_pages() {
    for c in clients() {
        let p = c.protocol();
        let s = unique("records");
        c.create(&s, "application/octet-stream", None).await.unwrap();
        let value = vec![b'v'; 8 << 10];
        let per_append = 64; // 512 KiB per append
        let appends = (CATCH_UP_PAGE_BYTES as usize * 2 + (1 << 20)) / (value.len() * per_append) + 1;
        let batch: Vec<AppendRecord> = (0..per_append).map(|_| AppendRecord::from(value.clone())).collect();
        for _ in 0..appends {
            c.append(&s, &batch, "application/octet-stream").await.unwrap();
        }
        let total = appends * per_append;

        let mut it = c.records(&s, &c.beginning());
        let (mut n, mut bytes) = (0usize, 0usize);
        while let Some(rec) = it.next().await.unwrap() {
            if p == Protocol::Pico {
                assert_eq!(rec.position, c.position_at(n as i64), "{}: record {}", p, n);
                assert_eq!(rec.body.len(), value.len(), "{}", p);
            }
            n += 1;
            bytes += rec.body.len();
        }
        assert_eq!(bytes, total * value.len(), "{}: bytes read", p);
        if p == Protocol::Pico {
            assert_eq!(n, total, "{}: records read", p);
        }
        assert_eq!(it.position(), c.head(&s).await.unwrap().next, "{}: position at the end", p);
        assert!(it.next().await.unwrap().is_none(), "{}: after the end", p);

        if p == Protocol::Pico {
            let mut it = c.records(&s, &c.position_at(total as i64 - 3));
            let mut rest = Vec::new();
            while let Some(rec) = it.next().await.unwrap() {
                rest.push(rec.position);
            }
            let want: Vec<String> = (total - 3..total).map(|i| c.position_at(i as i64)).collect();
            assert_eq!(rest, want, "{}: from a middle position", p);
        }

        // Dropped mid-stream (a read ahead in flight): nothing breaks.
        let mut it = c.records(&s, &c.beginning());
        assert!(it.next().await.unwrap().is_some(), "{}", p);
        drop(it);
        c.delete(&s).await.unwrap();
    }
}
