//! Subscriptions over server-sent events (`live=sse`) for both protocols:
//! one connection delivers events as records are appended; when the
//! server ends it (`--sse-timeout`) or it breaks, the subscription
//! reconnects from the position after the last event it returned, so no
//! record is lost or repeated. Parity with the Go client's Subscribe.

use std::collections::VecDeque;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, Response};
use serde_json::Value;

use crate::error::{api_error, Error, Result};
use crate::transport::{retryable, Call};
use crate::{ds, Client, Header, Protocol, Record, POSITION_NOW};

/// Whether an event carries records or the stream's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Records, in order.
    Data,
    /// The position after the events so far, and whether the reader is
    /// caught up or the stream closed.
    Control,
}

/// One event of a [`Subscription`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The records of a data event.
    pub records: Vec<Record>,
    /// The position after this event: resuming there neither loses nor
    /// repeats a record.
    pub next: String,
    /// (Control) the reader has everything appended so far.
    pub up_to_date: bool,
    /// (Control) the stream is closed and fully delivered: the last event.
    pub closed: bool,
    /// (Control) the server's live cursor.
    pub cursor: Option<String>,
}

/// A stream's records as they are appended. Call [`Subscription::next`]
/// until it returns `None` (the end of a closed stream) or an error that
/// reconnecting cannot fix; drop it to stop.
pub struct Subscription {
    client: Client,
    stream: String,
    pos: String,
    cursor: Option<String>,
    /// Durable Streams: the stream is JSON (a data event is an array).
    json_mode: bool,
    resp: Option<Response>,
    base64: bool,
    buf: Vec<u8>,
    /// Durable Streams: a data event's bytes, waiting for its control event.
    pending: Option<Vec<u8>>,
    queue: VecDeque<Event>,
    done: bool,
    reconnects: u32,
}

impl Client {
    /// Subscribes to `stream` from position `from` ([`Client::beginning`],
    /// a `next` returned earlier, or [`POSITION_NOW`]).
    pub async fn subscribe(&self, stream: &str, from: &str) -> Result<Subscription> {
        let info = self.head(stream).await?;
        let pos = if from == POSITION_NOW { info.next.clone() } else { from.to_string() };
        let mut sub = Subscription {
            client: self.clone(),
            stream: stream.to_string(),
            pos,
            cursor: None,
            json_mode: ds::is_json(&info.content_type),
            resp: None,
            base64: false,
            buf: Vec::new(),
            pending: None,
            queue: VecDeque::new(),
            done: false,
            reconnects: 0,
        };
        sub.connect(false).await?;
        Ok(sub)
    }
}

impl Subscription {
    /// The position after the last event returned: where a new
    /// subscription would resume.
    pub fn position(&self) -> &str {
        &self.pos
    }

    /// How many times the subscription has reconnected.
    pub fn reconnects(&self) -> u32 {
        self.reconnects
    }

    async fn connect(&mut self, resume: bool) -> Result<()> {
        let t = self.client.transport();
        let mut call = Call::new(Method::GET, &self.stream);
        call.headers.push(("Accept", picomq_protocol::pico::MEDIA_EVENT_STREAM.to_string()));
        match t.protocol {
            Protocol::Pico => {
                use picomq_protocol::pico as wire;
                call.query.push((wire::QUERY_OFFSET, self.pos.clone()));
                call.query.push((wire::QUERY_LIVE, wire::LIVE_SSE.to_string()));
                // The format parameter wins over Accept (a JSON read).
                call.query.push((wire::QUERY_FORMAT, wire::FORMAT_JSON.to_string()));
                if resume {
                    call.headers.push(("Last-Event-ID", self.pos.clone()));
                }
            }
            Protocol::DurableStreams => {
                call.query.push(("offset", self.pos.clone()));
                call.query.push(("live", "sse".to_string()));
                if let Some(c) = &self.cursor {
                    call.query.push(("cursor", c.clone()));
                }
            }
        }
        let resp = t.send(&call).await?;
        if resp.status().as_u16() != 200 {
            return Err(Error::Decode(format!("subscribe {}: status {}, want 200", self.stream, resp.status())));
        }
        self.base64 = resp
            .headers()
            .get(picomq_protocol::ds::HEADER_SSE_DATA_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map_or(false, |v| v.eq_ignore_ascii_case("base64"));
        self.buf.clear();
        self.pending = None;
        self.resp = Some(resp);
        Ok(())
    }

    /// The next event; `None` once a closed stream has been delivered to
    /// its end. Reconnects as needed, backing off by the client's retry
    /// policy while attempts fail.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        let mut failures = 0u32;
        loop {
            if let Some(e) = self.queue.pop_front() {
                if !e.next.is_empty() {
                    self.pos = e.next.clone();
                }
                if e.cursor.is_some() {
                    self.cursor = e.cursor.clone();
                }
                if e.closed {
                    self.done = true;
                    self.resp = None;
                }
                return Ok(Some(e));
            }
            if self.done {
                return Ok(None);
            }
            let chunk = match self.resp.as_mut() {
                Some(r) => r.chunk().await,
                None => {
                    match self.connect(true).await {
                        Ok(()) => self.reconnects += 1,
                        Err(e) => {
                            let (again, after) = retryable(&e);
                            let policy = self.client.transport().retry;
                            failures += 1;
                            if !again || failures >= policy.max_attempts {
                                return Err(e);
                            }
                            tokio::time::sleep(policy.delay(failures, after)).await;
                        }
                    }
                    continue;
                }
            };
            match chunk {
                Ok(Some(c)) => {
                    self.buf.extend_from_slice(&c);
                    self.parse_events()?;
                }
                // The server ended the connection (or it broke): resume.
                Ok(None) | Err(_) => self.resp = None,
            }
        }
    }

    /// Moves every complete event in buf to the queue.
    fn parse_events(&mut self) -> Result<()> {
        loop {
            let (end, skip) = match find_event_end(&self.buf) {
                Some(x) => x,
                None => return Ok(()),
            };
            let raw: Vec<u8> = self.buf.drain(..end + skip).take(end).collect();
            let text = String::from_utf8_lossy(&raw).into_owned();
            let (mut name, mut id, mut data) = (String::from("message"), None, Vec::<&str>::new());
            for line in text.split('\n') {
                let line = line.strip_suffix('\r').unwrap_or(line);
                let (field, value) = match line.find(':') {
                    Some(0) => continue, // a comment
                    Some(i) => (&line[..i], line[i + 1..].strip_prefix(' ').unwrap_or(&line[i + 1..])),
                    None => (line, ""),
                };
                match field {
                    "event" => name = value.to_string(),
                    "data" => data.push(value),
                    "id" => id = Some(value.to_string()),
                    _ => {}
                }
            }
            if data.is_empty() {
                continue;
            }
            let data = data.join("\n");
            self.event(&name, id, data)?;
        }
    }

    fn event(&mut self, name: &str, id: Option<String>, data: String) -> Result<()> {
        let stream = self.stream.clone();
        let bad = move |what: &str, e: &dyn std::fmt::Display| Error::Decode(format!("subscription {}: bad {} event: {}", stream, what, e));
        match self.client.transport().protocol {
            Protocol::Pico => match name {
                "data" => {
                    let records = pico_records(&data).map_err(|e| bad("data", &e))?;
                    let next = id.filter(|s| !s.is_empty()).or_else(|| {
                        records.last().and_then(|r| r.position.parse::<i64>().ok()).map(|n| (n + 1).to_string())
                    });
                    self.queue.push_back(Event { kind: EventKind::Data, records, next: next.unwrap_or_default(), up_to_date: false, closed: false, cursor: None });
                }
                "control" => {
                    let v: Value = serde_json::from_str(&data).map_err(|e| bad("control", &e))?;
                    self.queue.push_back(Event {
                        kind: EventKind::Control,
                        records: Vec::new(),
                        next: v["nextOffset"].as_i64().map(|n| n.to_string()).unwrap_or_default(),
                        up_to_date: v["upToDate"].as_bool().unwrap_or(false),
                        closed: v["closed"].as_bool().unwrap_or(false),
                        cursor: v["cursor"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
                    });
                }
                "error" => {
                    let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
                    let status = status_of_code(v["error"]["code"].as_str().unwrap_or(""));
                    return Err(api_error(Protocol::Pico, "GET", &self.stream.clone(), status, &HeaderMap::new(), data.as_bytes()));
                }
                _ => {}
            },
            Protocol::DurableStreams => match name {
                "data" => {
                    let bytes = if self.base64 {
                        decode_base64(&data.replace(['\n', '\r'], "")).ok_or_else(|| bad("data", &"invalid base64"))?
                    } else {
                        data.into_bytes()
                    };
                    self.pending = Some(bytes);
                }
                "control" => {
                    let v: Value = serde_json::from_str(&data).map_err(|e| bad("control", &e))?;
                    let next = v["streamNextOffset"].as_str().unwrap_or_default().to_string();
                    let closed = v["streamClosed"].as_bool().unwrap_or(false);
                    if let Some(body) = self.pending.take() {
                        let records = ds::records(body, self.json_mode, &self.pos, &next).map_err(|e| bad("data", &e))?;
                        if !records.is_empty() {
                            self.queue.push_back(Event { kind: EventKind::Data, records, next: next.clone(), up_to_date: false, closed: false, cursor: None });
                        }
                    }
                    self.queue.push_back(Event {
                        kind: EventKind::Control,
                        records: Vec::new(),
                        next,
                        up_to_date: v["upToDate"].as_bool().unwrap_or(false) || closed,
                        closed,
                        cursor: v["streamCursor"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
                    });
                }
                _ => {}
            },
        }
        Ok(())
    }
}

/// The end of the first complete event in b (its length, and the length of
/// the blank line after it).
fn find_event_end(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\n' {
            if b.get(i + 1) == Some(&b'\n') {
                return Some((i, 2));
            }
            if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') {
                return Some((i, 3));
            }
        }
        i += 1;
    }
    None
}

/// The status an SSE error event's code has on a plain answer.
fn status_of_code(code: &str) -> u16 {
    use picomq_protocol::pico as wire;
    match code {
        wire::CODE_NOT_FOUND => 404,
        wire::CODE_UNAVAILABLE => 503,
        wire::CODE_INTERNAL => 500,
        "offset_trimmed" => 410,
        _ => 400,
    }
}

/// The records of a Pico JSON read (docs/api.md#formats): an embedded
/// JSON value is its JSON text; a string is UTF-8 or base64 text per its
/// encoding; null is an empty body.
fn pico_records(data: &str) -> std::result::Result<Vec<Record>, String> {
    let arr: Vec<Value> = serde_json::from_str(data).map_err(|e| e.to_string())?;
    let text = |v: &Value, enc: &Value| -> std::result::Result<Option<Vec<u8>>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) if enc.as_str() == Some("base64") => decode_base64(s).map(Some).ok_or_else(|| "invalid base64".to_string()),
            Value::String(s) if enc.as_str() != Some("json") => Ok(Some(s.clone().into_bytes())),
            other => Ok(Some(other.to_string().into_bytes())),
        }
    };
    arr.iter()
        .map(|r| {
            let offset = r["offset"].as_i64().ok_or("record without offset")?;
            let key = match &r["key"] {
                Value::Null => None,
                k => text(k, &r["keyEncoding"])?,
            };
            let body = text(&r["value"], &r["valueEncoding"])?.unwrap_or_default();
            let headers = r["headers"]
                .as_array()
                .map(|hs| {
                    hs.iter()
                        .map(|h| Ok(Header { key: h["key"].as_str().unwrap_or_default().to_string(), value: text(&h["value"], &h["valueEncoding"])? }))
                        .collect::<std::result::Result<Vec<_>, String>>()
                })
                .transpose()?
                .unwrap_or_default();
            Ok(Record { position: offset.to_string(), timestamp: r["timestamp"].as_i64(), key, body: Bytes::from(body), headers })
        })
        .collect()
}

/// Standard base64 with padding, as the servers write it.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("AP+A").unwrap(), vec![0, 0xff, 0x80]);
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("a").is_none() && decode_base64("a*==").is_none());
    }

    #[test]
    fn event_boundaries() {
        assert_eq!(find_event_end(b"data: x\n\nrest"), Some((7, 2)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((8, 3)));
        assert_eq!(find_event_end(b"data: x\n"), None);
    }

    #[test]
    fn pico_json_records() {
        let recs = pico_records(r#"[{"offset":4,"timestamp":7,"key":"k","value":{"a":1}},{"offset":5,"timestamp":8,"key":null,"value":"AP8=","valueEncoding":"base64","headers":[{"key":"h","value":"v"}]}]"#).unwrap();
        assert_eq!((recs[0].position.as_str(), recs[0].key.as_deref(), &recs[0].body[..]), ("4", Some(&b"k"[..]), &br#"{"a":1}"#[..]));
        assert_eq!((&recs[1].body[..], recs[1].headers[0].value.as_deref()), (&[0u8, 0xff][..], Some(&b"v"[..])));
    }
}
