//! The Pico half of the client (docs/api.md): binary record codec for
//! appends and reads, JSON for stream descriptions.

use std::time::Duration;

use picomq_protocol::codec::{self, Limits};
use picomq_protocol::pico as wire;
use bytes::Bytes;
use reqwest::Method;
use serde_json::Value;

use crate::error::{header_str, header_true, Error, Result};
use crate::transport::{get_page, read_limited, Call, PageHeaders, PageReply, Transport};
use crate::{Ack, AppendRecord, CreateOptions, CreateResult, Header, ListPage, Live, Page, ReadLimits, Record, StreamInfo, POSITION_NOW};

/// Bound on a page body the client reads into memory.
pub(crate) const MAX_PAGE_BYTES: usize = 256 << 20;

const PAGE_HEADERS: PageHeaders = PageHeaders {
    next: wire::HEADER_NEXT_OFFSET,
    up_to_date: wire::HEADER_UP_TO_DATE,
    closed: wire::HEADER_CLOSED,
    cursor: wire::HEADER_CURSOR,
};

/// Identifies one producer batch.
pub(crate) struct ProducerHeaders<'a> {
    pub id: &'a str,
    pub epoch: u64,
    pub seq: u64,
}

async fn json_body(resp: reqwest::Response) -> Result<Value> {
    let b = read_limited(resp, MAX_PAGE_BYTES).await?;
    serde_json::from_slice(&b).map_err(|e| Error::Decode(format!("decoding the response: {}", e)))
}

/// A stream description of create, describe and listings.
fn info_of(j: &Value) -> StreamInfo {
    let ms = j["retentionMs"].as_u64().unwrap_or(0);
    let next = j["nextOffset"].as_i64().unwrap_or(-1);
    StreamInfo {
        name: j["name"].as_str().unwrap_or_default().to_string(),
        content_type: j["contentType"].as_str().unwrap_or_default().to_string(),
        start: j["startOffset"].as_i64().map(|n| n.to_string()),
        // -1: the node answering does not own the stream.
        next: if next >= 0 { next.to_string() } else { String::new() },
        closed: j["closed"].as_bool().unwrap_or(false),
        retention: if ms > 0 { Some(Duration::from_millis(ms)) } else { None },
        ttl: None,
        kafka_topic: j["kafkaTopic"].as_str().filter(|s| !s.is_empty()).map(|s| s.to_string()),
    }
}

pub(crate) async fn create(t: &Transport, stream: &str, ct: &str, o: CreateOptions) -> Result<CreateResult> {
    if o.ttl.is_some() {
        return Err(Error::unsupported(t.protocol, "ttl", "use a retention period instead"));
    }
    if o.closed {
        return Err(Error::unsupported(t.protocol, "closed", "Pico streams cannot be closed"));
    }
    let mut call = Call::new(Method::PUT, stream);
    call.headers.push(("Content-Type", ct.to_string()));
    if let Some(r) = o.retention.filter(|r| !r.is_zero()) {
        call.headers.push((wire::HEADER_RETENTION_MS, r.as_millis().max(1).to_string()));
    }
    if let Some(b) = o.retention_bytes.filter(|b| *b > 0) {
        call.headers.push((wire::HEADER_RETENTION_BYTES, b.to_string()));
    }
    if let Some(topic) = o.kafka_topic {
        call.headers.push((wire::HEADER_KAFKA_TOPIC, topic));
    }
    let resp = t.send(&call).await?;
    let created = resp.status().as_u16() == 201;
    let j = json_body(resp).await?;
    Ok(CreateResult { created, info: info_of(&j) })
}

/// The codec frame of `records` (an absent body is an empty value, not a
/// null one).
pub(crate) fn encode(records: &[AppendRecord]) -> Vec<u8> {
    let recs: Vec<codec::Record<'_>> = records
        .iter()
        .map(|r| codec::Record {
            offset: 0,
            timestamp: 0,
            key: r.key.as_deref(),
            value: Some(&r.body[..]),
            headers: r.headers.iter().map(|h| codec::Header { key: h.key.as_bytes(), value: h.value.as_deref() }).collect(),
        })
        .collect();
    codec::encode(&recs)
}

/// The encoded size of one record.
pub(crate) fn encoded_size(r: &AppendRecord) -> usize {
    codec::RECORD_OVERHEAD
        + r.key.as_ref().map_or(0, |k| k.len())
        + r.body.len()
        + r.headers.iter().map(|h| codec::HEADER_OVERHEAD + h.key.len() + h.value.as_ref().map_or(0, |v| v.len())).sum::<usize>()
}

pub(crate) async fn append(t: &Transport, stream: &str, records: &[AppendRecord], p: Option<ProducerHeaders<'_>>) -> Result<Ack> {
    append_body(t, stream, encode(records), records.len(), p).await
}

/// Posts an encoded frame of `count` records, once (no retry).
pub(crate) async fn append_body(t: &Transport, stream: &str, body: Vec<u8>, count: usize, p: Option<ProducerHeaders<'_>>) -> Result<Ack> {
    let mut call = Call::new(Method::POST, stream);
    call.headers.push(("Content-Type", wire::MEDIA_BATCH.to_string()));
    if let Some(p) = p {
        call.headers.push((wire::HEADER_PRODUCER_ID, p.id.to_string()));
        call.headers.push((wire::HEADER_PRODUCER_EPOCH, p.epoch.to_string()));
        call.headers.push((wire::HEADER_PRODUCER_SEQ, p.seq.to_string()));
    }
    call.body = Some(body);
    let resp = t.send(&call).await?;
    let dup_header = header_true(resp.headers(), wire::HEADER_DUPLICATE);
    let a = json_body(resp).await?;
    let mut ack = Ack {
        count,
        duplicate: dup_header || a["duplicate"].as_bool().unwrap_or(false),
        timestamp: a["timestamp"].as_i64().filter(|ts| *ts > 0),
        ..Ack::default()
    };
    if let (Some(start), Some(next)) = (a["offset"].as_i64(), a["nextOffset"].as_i64()) {
        if start >= 0 && next >= 0 {
            ack.start = start.to_string();
            ack.next = next.to_string();
        }
    }
    Ok(ack)
}

/// Resolves a position for the query: "now" asks HEAD for the stream's
/// end; "-1" means the stream's current start (no offset parameter, which
/// follows trims).
async fn position(t: &Transport, stream: &str, from: &str) -> Result<Option<String>> {
    match from {
        "" | "-1" => Ok(None),
        POSITION_NOW => Ok(Some(head(t, stream).await?.next)),
        _ if from.parse::<u64>().is_ok() => Ok(Some(from.to_string())),
        _ => Err(Error::InvalidArgument(format!(
            "position {:?} is not a Pico position (a next returned by a read, \"0\", or \"now\")",
            from
        ))),
    }
}

pub(crate) async fn read(t: &Transport, stream: &str, from: &str, live: Live, limits: ReadLimits) -> Result<Page> {
    let mut call = Call::new(Method::GET, stream);
    call.retry = true;
    if let Some(off) = position(t, stream, from).await? {
        call.query.push((wire::QUERY_OFFSET, off));
    }
    call.query.push((wire::QUERY_FORMAT, wire::FORMAT_BINARY.to_string()));
    if let Some(n) = limits.max_records {
        call.query.push((wire::QUERY_LIMIT, n.to_string()));
    }
    if let Some(n) = limits.max_bytes {
        call.query.push((wire::QUERY_MAX_BYTES, n.to_string()));
    }
    if live == Live::LongPoll {
        call.query.push((wire::QUERY_LIVE, wire::LIVE_LONG_POLL.to_string()));
    }
    let PageReply { mut page, body, .. } = get_page(t, &call, &PAGE_HEADERS).await?;
    let body = match body {
        Some(b) => b,
        None => return Ok(page),
    };
    let body = Bytes::from(body);
    let recs = codec::decode(&body, Limits::default()).map_err(|e| Error::Decode(format!("GET {}: {}", stream, e)))?;
    page.records = recs
        .iter()
        .map(|r| Record {
            position: r.offset.to_string(),
            timestamp: Some(r.timestamp),
            key: r.key.map(|k| k.to_vec()),
            body: r.value.map(|v| body.slice_ref(v)).unwrap_or_default(),
            headers: r
                .headers
                .iter()
                .map(|h| Header { key: String::from_utf8_lossy(h.key).into_owned(), value: h.value.map(|v| v.to_vec()) })
                .collect(),
        })
        .collect();
    if page.next.is_empty() {
        if let Some(last) = recs.last() {
            page.next = (last.offset + 1).to_string();
        }
    }
    Ok(page)
}

pub(crate) async fn head(t: &Transport, stream: &str) -> Result<StreamInfo> {
    let mut call = Call::new(Method::HEAD, stream);
    call.retry = true;
    let resp = t.send(&call).await?;
    let h = resp.headers();
    let ms: u64 = header_str(h, wire::HEADER_RETENTION_MS).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(StreamInfo {
        name: stream.to_string(),
        content_type: header_str(h, "Content-Type").unwrap_or_default(),
        start: header_str(h, wire::HEADER_START_OFFSET),
        next: header_str(h, wire::HEADER_NEXT_OFFSET).unwrap_or_default(),
        closed: header_true(h, wire::HEADER_CLOSED),
        retention: if ms > 0 { Some(Duration::from_millis(ms)) } else { None },
        ttl: None,
        kafka_topic: header_str(h, wire::HEADER_KAFKA_TOPIC).filter(|s| !s.is_empty()),
    })
}

pub(crate) async fn list(t: &Transport, prefix: &str, limit: Option<u32>, cursor: Option<&str>) -> Result<ListPage> {
    let mut call = Call::new(Method::GET, wire::PATH_STREAMS);
    call.retry = true;
    call.owner = false;
    if !prefix.is_empty() {
        call.query.push((wire::QUERY_PREFIX, prefix.to_string()));
    }
    if let Some(n) = limit {
        call.query.push((wire::QUERY_LIMIT, n.to_string()));
    }
    if let Some(c) = cursor.filter(|c| !c.is_empty()) {
        call.query.push((wire::QUERY_LIST_CURSOR, c.to_string()));
    }
    let j = json_body(t.send(&call).await?).await?;
    Ok(ListPage {
        streams: j["streams"].as_array().map(|a| a.iter().map(info_of).collect()).unwrap_or_default(),
        next_cursor: j["nextCursor"].as_str().filter(|s| !s.is_empty()).map(|s| s.to_string()),
    })
}

pub(crate) async fn trim(t: &Transport, stream: &str, before: &str) -> Result<StreamInfo> {
    let n: u64 = before
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("trim: {:?} is not a Pico position", before)))?;
    let mut call = Call::new(Method::PATCH, &format!("{}{}", wire::PATH_STREAMS, stream));
    call.owner = false;
    call.headers.push(("Content-Type", wire::MEDIA_MERGE_PATCH.to_string()));
    call.body = Some(serde_json::json!({ "trimBefore": n }).to_string().into_bytes());
    Ok(info_of(&json_body(t.send(&call).await?).await?))
}
