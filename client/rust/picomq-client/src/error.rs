//! Errors: a server's answer ([`ApiError`]), an operation the protocol has
//! no equivalent for, a transport failure, or a response the client could
//! not understand. [`Error::kind`] classifies all of them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use picomq_protocol::pico;

use crate::Protocol;

/// Classification of an error, the same classes as the Go client's `Kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// 400: malformed request (bad name, bad position, invalid JSON, …).
    BadRequest,
    /// 401: missing or wrong token.
    Unauthorized,
    /// 403 other than a fenced producer.
    Forbidden,
    /// 404: no such stream.
    NotFound,
    /// 409: exists with another configuration, content type mismatch.
    Conflict,
    /// 409 `stream_closed`: the stream accepts no more appends.
    Closed,
    /// 403 `producer_fenced`: a producer with a higher epoch took over.
    Fenced,
    /// 409: producer sequence gap.
    SequenceGap,
    /// 410: the position was trimmed, or the stream is gone.
    Gone,
    /// 413: above a server limit.
    TooLarge,
    /// 415 or 406.
    UnsupportedMedia,
    /// 416, or `offset_out_of_range`: the position is past the stream's end.
    OutOfRange,
    /// 429, 502, 503, 504: overload, routing unavailable, shutting down.
    Unavailable,
    /// 500: a server bug.
    Internal,
    /// The operation has no equivalent in the client's protocol; nothing was sent.
    Unsupported,
    /// The request did not get an answer (connection refused or lost, timeout).
    Transport,
    /// Redirect loop, bad `Location`, or a refused https→http hop with a token.
    Redirect,
    /// An argument the client refuses before sending anything.
    InvalidArgument,
    /// A response the client could not decode.
    Decode,
    /// Anything else.
    Unknown,
}

/// A non-success answer of the server.
#[derive(Clone, Debug, Default)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// Stable error code (docs/api.md); empty when the answer had none.
    pub code: String,
    pub message: String,
    /// The request that failed.
    pub method: String,
    pub url: String,
    /// The server's `Retry-After`.
    pub retry_after: Option<Duration>,
    /// Producer sequence gap: the sequence the server expected, and received.
    pub expected_seq: Option<u64>,
    pub received_seq: Option<u64>,
    /// Fenced producer: the current epoch.
    pub current_epoch: Option<u64>,
    /// Trimmed position: the stream's first readable position.
    pub start_position: Option<String>,
    /// Closed stream or out-of-range read: the stream's end.
    pub next_position: Option<String>,
}

/// Every error of the client. It is cheap to clone (a producer hands one
/// failure to every record it fails).
#[derive(Clone, Debug)]
pub enum Error {
    /// The server answered with an error status.
    Api(Box<ApiError>),
    /// The operation has no equivalent in the protocol; nothing was sent.
    Unsupported { op: &'static str, protocol: Protocol, reason: &'static str },
    /// The request got no (complete) answer.
    Transport(Arc<reqwest::Error>),
    /// Redirect loop, bad `Location`, or a refused downgrade.
    Redirect(String),
    /// A bad argument, refused before anything was sent.
    InvalidArgument(String),
    /// A response that could not be decoded.
    Decode(String),
}

/// Result of the client's calls.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error's class.
    pub fn kind(&self) -> Kind {
        match self {
            Error::Api(e) => kind_of(e.status, &e.code),
            Error::Unsupported { .. } => Kind::Unsupported,
            Error::Transport(_) => Kind::Transport,
            Error::Redirect(_) => Kind::Redirect,
            Error::InvalidArgument(_) => Kind::InvalidArgument,
            Error::Decode(_) => Kind::Decode,
        }
    }

    /// The server's answer, when there was one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The HTTP status of a server's error answer.
    pub fn status(&self) -> Option<u16> {
        self.api().map(|e| e.status)
    }

    pub(crate) fn unsupported(protocol: Protocol, op: &'static str, reason: &'static str) -> Error {
        Error::Unsupported { op, protocol, reason }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(e) => {
                write!(f, "picomq: {} {}: {}", e.method, e.url, e.status)?;
                if !e.code.is_empty() {
                    write!(f, " {}", e.code)?;
                }
                if !e.message.is_empty() {
                    write!(f, ": {}", e.message)?;
                }
                Ok(())
            }
            Error::Unsupported { op, protocol, reason } => {
                write!(f, "picomq: {} is not supported over {}: {}", op, protocol, reason)
            }
            Error::Transport(e) => write!(f, "picomq: {}", e),
            Error::Redirect(m) | Error::InvalidArgument(m) | Error::Decode(m) => write!(f, "picomq: {}", m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Transport(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Error {
        Error::Transport(Arc::new(e))
    }
}

fn kind_of(status: u16, code: &str) -> Kind {
    match code {
        pico::CODE_NOT_FOUND | pico::CODE_NOT_FOUND_ROUTE => return Kind::NotFound,
        pico::CODE_PRODUCER_FENCED => return Kind::Fenced,
        pico::CODE_PRODUCER_SEQ_GAP | "producer_sequence_gap" => return Kind::SequenceGap,
        pico::CODE_STREAM_CLOSED => return Kind::Closed,
        pico::CODE_OFFSET_TRIMMED | pico::CODE_STREAM_GONE => return Kind::Gone,
        pico::CODE_OFFSET_OUT_OF_RANGE => return Kind::OutOfRange,
        pico::CODE_PRODUCER_EPOCH_SEQ | "producer_epoch_must_start_at_zero" => return Kind::BadRequest,
        pico::CODE_REQUEST_TIMEOUT => return Kind::Unavailable,
        _ => {}
    }
    match status {
        400 => Kind::BadRequest,
        401 => Kind::Unauthorized,
        403 => Kind::Forbidden,
        404 => Kind::NotFound,
        409 => Kind::Conflict,
        410 => Kind::Gone,
        413 => Kind::TooLarge,
        406 | 415 => Kind::UnsupportedMedia,
        416 => Kind::OutOfRange,
        429 | 502 | 503 | 504 => Kind::Unavailable,
        500 => Kind::Internal,
        _ => Kind::Unknown,
    }
}

fn header_u64(h: &reqwest::header::HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

pub(crate) fn header_str(h: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(|s| s.to_string())
}

pub(crate) fn header_true(h: &reqwest::header::HeaderMap, name: &str) -> bool {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map_or(false, |s| s.trim().eq_ignore_ascii_case("true"))
}

/// Builds the error of a non-success answer from its status, headers and
/// (JSON error) body.
pub(crate) fn api_error(
    protocol: Protocol,
    method: &str,
    url: &str,
    status: u16,
    h: &reqwest::header::HeaderMap,
    body: &[u8],
) -> Error {
    let mut e = ApiError { status, method: method.to_string(), url: url.to_string(), ..ApiError::default() };
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let detail = parsed.as_ref().map(|v| &v["error"]).filter(|d| d["code"].is_string());
    if let Some(d) = detail {
        e.code = d["code"].as_str().unwrap_or_default().to_string();
        e.message = d["message"].as_str().unwrap_or_default().to_string();
        e.expected_seq = d["expectedSeq"].as_u64();
        e.received_seq = d["receivedSeq"].as_u64();
        e.current_epoch = d["currentEpoch"].as_u64();
        e.start_position = d["startOffset"].as_i64().map(|n| n.to_string());
        e.next_position = d["nextOffset"].as_i64().map(|n| n.to_string());
    } else if !body.is_empty() {
        let text = String::from_utf8_lossy(body);
        e.message = text.trim().chars().take(200).collect();
    }
    if e.code.is_empty() {
        e.code = header_str(h, pico::HEADER_ERROR_CODE).unwrap_or_default();
    }
    if e.message.is_empty() {
        e.message = reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or_default()
            .to_string();
    }
    use picomq_protocol::ds;
    match protocol {
        Protocol::DurableStreams => {
            e.expected_seq = e.expected_seq.or_else(|| header_u64(h, ds::HEADER_PRODUCER_EXPECTED_SEQ));
            e.received_seq = e.received_seq.or_else(|| header_u64(h, ds::HEADER_PRODUCER_RECEIVED_SEQ));
            if status == 403 {
                e.current_epoch = e.current_epoch.or_else(|| header_u64(h, ds::HEADER_PRODUCER_EPOCH));
            }
            if let Some(next) = header_str(h, ds::HEADER_NEXT_OFFSET) {
                e.next_position = Some(next);
            }
            if e.code.is_empty() && status == 409 && header_true(h, ds::HEADER_CLOSED) {
                e.code = pico::CODE_STREAM_CLOSED.to_string();
            }
        }
        Protocol::Pico => {
            e.expected_seq = e.expected_seq.or_else(|| header_u64(h, pico::HEADER_PRODUCER_EXPECTED_SEQ));
            if e.next_position.is_none() && header_true(h, pico::HEADER_CLOSED) {
                e.next_position = header_str(h, pico::HEADER_NEXT_OFFSET);
            }
        }
    }
    e.retry_after = header_u64(h, "Retry-After").map(|s| Duration::from_secs(s.min(3600)));
    Error::Api(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn pico_error_bodies_carry_code_and_numbers() {
        let body = br#"{"error":{"code":"producer_seq_gap","message":"gap","expectedSeq":3,"receivedSeq":5}}"#;
        let e = api_error(Protocol::Pico, "POST", "http://n/s", 409, &headers(&[("Retry-After", "2")]), body);
        assert_eq!(e.kind(), Kind::SequenceGap);
        let a = e.api().unwrap();
        assert_eq!((a.expected_seq, a.received_seq, a.retry_after), (Some(3), Some(5), Some(Duration::from_secs(2))));
        assert_eq!(e.to_string(), "picomq: POST http://n/s: 409 producer_seq_gap: gap");

        let fenced = api_error(Protocol::Pico, "POST", "u", 403, &HeaderMap::new(), br#"{"error":{"code":"producer_fenced","message":"m","currentEpoch":7}}"#);
        assert_eq!((fenced.kind(), fenced.api().unwrap().current_epoch), (Kind::Fenced, Some(7)));
        let trimmed = api_error(Protocol::Pico, "GET", "u", 410, &HeaderMap::new(), br#"{"error":{"code":"offset_trimmed","message":"m","startOffset":10}}"#);
        assert_eq!((trimmed.kind(), trimmed.api().unwrap().start_position.as_deref()), (Kind::Gone, Some("10")));
    }

    #[test]
    fn head_errors_and_plain_bodies_are_classified_by_status() {
        let e = api_error(Protocol::Pico, "HEAD", "u", 404, &headers(&[("Pico-Error-Code", "stream_not_found")]), b"");
        assert_eq!((e.kind(), e.api().unwrap().code.as_str(), e.api().unwrap().message.as_str()), (Kind::NotFound, "stream_not_found", "Not Found"));
        let e = api_error(Protocol::Pico, "GET", "u", 502, &HeaderMap::new(), b"bad gateway from a proxy");
        assert_eq!((e.kind(), e.api().unwrap().message.as_str()), (Kind::Unavailable, "bad gateway from a proxy"));
        let e = api_error(Protocol::Pico, "GET", "u", 401, &HeaderMap::new(), br#"{"error":{"code":"unauthorized","message":"no token"}}"#);
        assert_eq!(e.kind(), Kind::Unauthorized);
    }

    #[test]
    fn durable_streams_errors_read_protocol_headers() {
        let h = headers(&[("Stream-Closed", "true"), ("Stream-Next-Offset", "0000000000000000_0000000000000002")]);
        let e = api_error(Protocol::DurableStreams, "POST", "u", 409, &h, b"");
        assert_eq!(e.kind(), Kind::Closed);
        assert_eq!(e.api().unwrap().next_position.as_deref(), Some("0000000000000000_0000000000000002"));
        let h = headers(&[("Producer-Epoch", "4")]);
        let e = api_error(Protocol::DurableStreams, "POST", "u", 403, &h, b"");
        assert_eq!(e.api().unwrap().current_epoch, Some(4));
        let h = headers(&[("Producer-Expected-Seq", "1"), ("Producer-Received-Seq", "3")]);
        let e = api_error(Protocol::DurableStreams, "POST", "u", 409, &h, br#"{"error":{"code":"producer_seq_gap","message":"m"}}"#);
        assert_eq!((e.kind(), e.api().unwrap().expected_seq, e.api().unwrap().received_seq), (Kind::SequenceGap, Some(1), Some(3)));
    }
}
