//! The Durable Streams half of the client (docs/durable-streams.md). A
//! record is a value: on `application/json` streams every appended record
//! is one JSON value (the client wraps appends in an array and splits read
//! pages); on other content types the protocol keeps no boundaries, so an
//! append is one body and a read page one record.

use std::time::Duration;

use picomq_protocol::ds as wire;
use bytes::Bytes;
use reqwest::Method;
use serde_json::value::RawValue;

use crate::error::{header_str, header_true, Error, Result};
use crate::transport::{get_page, Call, PageHeaders, PageReply, Transport};
use crate::{ds_record_offset, Ack, AppendRecord, CreateOptions, CreateResult, Live, Page, Record, StreamInfo, DS_OFFSET_DIGITS, POSITION_NOW};

const PAGE_HEADERS: PageHeaders = PageHeaders {
    next: wire::HEADER_NEXT_OFFSET,
    up_to_date: wire::HEADER_UP_TO_DATE,
    closed: wire::HEADER_CLOSED,
    cursor: wire::HEADER_CURSOR,
};

fn position_at(n: i64) -> String {
    format!("{:0w$}_{:0w$}", 0, n, w = DS_OFFSET_DIGITS)
}

/// Whether a content type puts a stream in JSON mode (parameters ignored).
pub(crate) fn is_json(ct: &str) -> bool {
    ct.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json")
}

pub(crate) async fn create(t: &Transport, stream: &str, ct: &str, o: CreateOptions) -> Result<CreateResult> {
    if o.retention.is_some() || o.retention_bytes.is_some() {
        return Err(Error::unsupported(t.protocol, "retention", "streams expire as a whole (ttl)"));
    }
    if o.kafka_topic.is_some() {
        return Err(Error::unsupported(t.protocol, "kafka_topic", "set topic aliases over Pico"));
    }
    let mut call = Call::new(Method::PUT, stream);
    call.headers.push(("Content-Type", ct.to_string()));
    if let Some(ttl) = o.ttl {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        call.headers.push((wire::HEADER_TTL, secs.to_string()));
    }
    if o.closed {
        call.headers.push((wire::HEADER_CLOSED, "true".into()));
    }
    let resp = t.send(&call).await?;
    let created = resp.status().as_u16() == 201;
    let h = resp.headers();
    let info = StreamInfo {
        name: stream.to_string(),
        content_type: header_str(h, "Content-Type").filter(|s| !s.is_empty()).unwrap_or_else(|| ct.to_string()),
        next: header_str(h, wire::HEADER_NEXT_OFFSET).unwrap_or_default(),
        closed: header_true(h, wire::HEADER_CLOSED),
        ttl: o.ttl,
        ..StreamInfo::default()
    };
    Ok(CreateResult { created, info })
}

/// Refuses what a Durable Streams record cannot carry.
fn check(t: &Transport, records: &[AppendRecord]) -> Result<()> {
    if records.iter().any(|r| r.key.is_some()) {
        return Err(Error::unsupported(t.protocol, "record keys", "a Durable Streams record is a value"));
    }
    if records.iter().any(|r| !r.headers.is_empty()) {
        return Err(Error::unsupported(t.protocol, "record headers", "a Durable Streams record is a value"));
    }
    Ok(())
}

/// One append body: a JSON array on JSON streams (one element per record,
/// so a record that is itself an array stays one record), the concatenated
/// bytes otherwise.
pub(crate) fn body(records: &[AppendRecord], json: bool) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(2 + records.iter().map(|r| r.body.len() + 1).sum::<usize>());
    if !json {
        for r in records {
            out.extend_from_slice(&r.body);
        }
        return Ok(out);
    }
    out.push(b'[');
    for (i, r) in records.iter().enumerate() {
        if serde_json::from_slice::<&RawValue>(&r.body).is_err() {
            return Err(Error::InvalidArgument(format!(
                "record {} is not valid JSON, but the stream holds application/json",
                i
            )));
        }
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&r.body);
    }
    out.push(b']');
    Ok(out)
}

pub(crate) async fn append(t: &Transport, stream: &str, records: &[AppendRecord], ct: &str) -> Result<Ack> {
    check(t, records)?;
    if ct.is_empty() {
        return Err(Error::InvalidArgument("a Durable Streams append needs the stream's content type".into()));
    }
    let json = is_json(ct);
    let body = body(records, json)?;
    let count = if json { records.len() } else { 1 };
    let mut call = Call::new(Method::POST, stream);
    call.headers.push(("Content-Type", ct.to_string()));
    call.body = Some(body);
    let resp = t.send(&call).await?;
    let mut ack = Ack { count, next: header_str(resp.headers(), wire::HEADER_NEXT_OFFSET).unwrap_or_default(), ..Ack::default() };
    if let Some(n) = ds_record_offset(&ack.next) {
        if n >= count as i64 {
            ack.start = position_at(n - count as i64);
        }
    }
    Ok(ack)
}

pub(crate) async fn close(t: &Transport, stream: &str) -> Result<String> {
    let mut call = Call::new(Method::POST, stream);
    call.headers.push((wire::HEADER_CLOSED, "true".into()));
    let resp = t.send(&call).await?;
    Ok(header_str(resp.headers(), wire::HEADER_NEXT_OFFSET).unwrap_or_default())
}

pub(crate) async fn read(t: &Transport, stream: &str, from: &str, live: Live) -> Result<Page> {
    let from = if from.is_empty() { wire::OFFSET_BEGINNING } else { from };
    let mut call = Call::new(Method::GET, stream);
    call.retry = true;
    call.query.push((wire::QUERY_OFFSET, from.to_string()));
    if live == Live::LongPoll {
        call.query.push((wire::QUERY_LIVE, wire::LIVE_LONG_POLL.to_string()));
    }
    let PageReply { mut page, content_type, body } = get_page(t, &call, &PAGE_HEADERS).await?;
    let body = match body {
        Some(b) => b,
        None => return Ok(page),
    };
    page.records = records(body, is_json(&content_type), from, &page.next).map_err(|e| Error::Decode(format!("GET {}: {}", stream, e)))?;
    Ok(page)
}

/// Splits a payload into records. The protocol gives no per-record
/// positions; on PicoMQ, where a position names a record offset, they are
/// derived from the page's end position.
pub(crate) fn records(body: Vec<u8>, json: bool, from: &str, next: &str) -> std::result::Result<Vec<Record>, String> {
    if !json {
        if body.is_empty() {
            return Ok(Vec::new());
        }
        let position = if from == POSITION_NOW { String::new() } else { from.to_string() };
        return Ok(vec![Record { position, body: Bytes::from(body), ..Record::default() }]);
    }
    let body = Bytes::from(body);
    let vals: Vec<&RawValue> = serde_json::from_slice(&body).map_err(|e| format!("decoding the JSON page: {}", e))?;
    let n = vals.len() as i64;
    let end = ds_record_offset(next).filter(|end| *end >= n);
    Ok(vals
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let position = match end {
                Some(end) => position_at(end - n + i as i64),
                None if i == 0 && from != POSITION_NOW => from.to_string(),
                None => String::new(),
            };
            // A raw value borrows the page: the record is a view of it.
            Record { position, body: body.slice_ref(v.get().as_bytes()), ..Record::default() }
        })
        .collect())
}

pub(crate) async fn head(t: &Transport, stream: &str) -> Result<StreamInfo> {
    let mut call = Call::new(Method::HEAD, stream);
    call.retry = true;
    let resp = t.send(&call).await?;
    let h = resp.headers();
    Ok(StreamInfo {
        name: stream.to_string(),
        content_type: header_str(h, "Content-Type").unwrap_or_default(),
        next: header_str(h, wire::HEADER_NEXT_OFFSET).unwrap_or_default(),
        closed: header_true(h, wire::HEADER_CLOSED),
        ttl: header_str(h, wire::HEADER_TTL).and_then(|s| s.parse().ok()).map(Duration::from_secs),
        ..StreamInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bodies_wrap_each_record_as_one_value() {
        let recs: Vec<AppendRecord> = vec![r#"{"a":1}"#.into(), "[3,4]".into()];
        assert_eq!(body(&recs, true).unwrap(), br#"[{"a":1},[3,4]]"#.to_vec());
        assert_eq!(body(&recs, false).unwrap(), br#"{"a":1}[3,4]"#.to_vec());
        assert!(body(&["not json".into()], true).is_err());
    }

    #[test]
    fn json_pages_split_with_derived_positions() {
        let recs = records(br#"[{"a":1}, [3,4]]"#.to_vec(), true, "-1", &position_at(5)).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].body, br#"{"a":1}"#.to_vec());
        assert_eq!(recs[1].body, b"[3,4]".to_vec());
        assert_eq!(recs[0].position, position_at(3));
        assert_eq!(recs[1].position, position_at(4));
        assert!(is_json("Application/JSON; charset=utf-8"));
    }
}
