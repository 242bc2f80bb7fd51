//! Rust client of PicoMQ. One API speaks both HTTP protocols a node can
//! serve: **Pico**, PicoMQ's native protocol, and **Durable Streams**.
//!
//! ```no_run
//! use picomq_client::{connect, Live, Protocol, ReadLimits};
//!
//! # async fn run() -> Result<(), picomq_client::Error> {
//! let client = connect(Protocol::Pico, "http://127.0.0.1:4437")?;
//! client.create("/orders/1042", "application/json", None).await?;
//! let ack = client.append("/orders/1042", &[r#"{"item":"widget"}"#.into()], "application/json").await?;
//! let page = client.read("/orders/1042", &client.beginning(), Live::Off, ReadLimits::server_default()).await?;
//! # Ok(()) }
//! ```
//!
//! Positions are protocol-specific opaque strings: always continue from the
//! `next` a call returned. Operations a protocol has no equivalent for fail
//! with [`Kind::Unsupported`] before anything is sent. Appends are never
//! retried implicitly; [`producer::Producer`] retries safely under its
//! sequence numbers. See docs/sdk-rust.md in the PicoMQ repository.

mod ds;
mod error;
mod pico;
pub mod producer;
mod records;
mod sse;
mod transport;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use reqwest::{Method, Url};

pub use bytes::Bytes;

pub use error::{ApiError, Error, Kind, Result};
pub use records::{Records, CATCH_UP_PAGE_BYTES};
pub use sse::{Event, EventKind, Subscription};
pub use picomq_protocol as protocol;

use transport::{Call, Transport};

/// The client's version, sent in the User-Agent header.
pub const VERSION: &str = "0.1.0";

/// The HTTP protocol a client speaks; a node serves one (`--protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// PicoMQ's native protocol (docs/api.md).
    Pico,
    /// The Durable Streams protocol (docs/durable-streams.md).
    DurableStreams,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Pico => "pico",
            Protocol::DurableStreams => "durable-streams",
        })
    }
}

impl FromStr for Protocol {
    type Err = Error;
    /// Parses `pico` or `durable-streams` (also `ds`).
    fn from_str(s: &str) -> Result<Protocol> {
        match s.trim().to_ascii_lowercase().as_str() {
            "pico" => Ok(Protocol::Pico),
            "durable-streams" | "ds" => Ok(Protocol::DurableStreams),
            _ => Err(Error::InvalidArgument(format!("protocol {:?}: want pico or durable-streams", s))),
        }
    }
}

/// Whether a read waits for records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    /// Answer at once, possibly with no records.
    Off,
    /// When there are no records at the position, the server holds the
    /// request until records arrive or its long-poll timeout (25 s by
    /// default) passes; a page with no records then means the wait timed out.
    LongPoll,
}

/// Bounds on one read page. `None` leaves the bound to the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadLimits {
    /// Records per page (Pico only; Durable Streams has no such parameter).
    pub max_records: Option<u32>,
    /// Bytes per page (Pico only).
    pub max_bytes: Option<u64>,
}

impl ReadLimits {
    /// The server's defaults.
    pub fn server_default() -> ReadLimits {
        ReadLimits::default()
    }
    /// At most `n` records per page.
    pub fn records(n: u32) -> ReadLimits {
        ReadLimits { max_records: Some(n), max_bytes: None }
    }
}

/// How read-shaped requests (reads, long-polls, HEAD, list) are retried on
/// transport errors and 429/502/503/504. Appends, creates, deletes, trims
/// and closes are never retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included: 1 means no retries.
    pub max_attempts: u32,
    /// Delay before the first retry; each further retry doubles it up to
    /// `max_backoff`. Delays are jittered (half to all of the nominal one);
    /// a server's `Retry-After` is honoured up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 4 attempts, 100 ms doubling up to 5 s (the Go client's default).
    fn default() -> RetryPolicy {
        RetryPolicy { max_attempts: 4, initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5) }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }
    }
}

/// Options of [`connect_with`].
#[derive(Clone, Debug, Default)]
pub struct ClientConfig {
    /// Sent as `Authorization: Bearer <token>` on every request and on every
    /// redirect hop.
    pub token: Option<String>,
    /// Speak cleartext HTTP/2 (h2c, "prior knowledge") instead of HTTP/1.1.
    /// The node must serve it (`picomq serve --h2c`).
    pub http2: bool,
    /// Retries of read-shaped requests.
    pub retry: RetryPolicy,
    /// PEM certificates (one or more) of the CAs an `https://` node's
    /// certificate may chain to, e.g. a cluster's private CA, trusted in
    /// addition to the system's roots.
    pub ca_pem: Option<Vec<u8>>,
}

/// A record header. Headers are ordered and may repeat a key (Pico only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    /// `None` is a null value.
    pub value: Option<Vec<u8>>,
}

/// A record to append. Key and headers are Pico only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendRecord {
    pub key: Option<Vec<u8>>,
    /// The record's bytes: a `Bytes` is shared, not copied, by clones (a
    /// producer's retries) and prints as text in `{:?}`.
    pub body: Bytes,
    pub headers: Vec<Header>,
}

impl From<&str> for AppendRecord {
    fn from(s: &str) -> AppendRecord {
        AppendRecord { body: Bytes::copy_from_slice(s.as_bytes()), ..AppendRecord::default() }
    }
}

impl From<String> for AppendRecord {
    fn from(s: String) -> AppendRecord {
        AppendRecord { body: Bytes::from(s), ..AppendRecord::default() }
    }
}

impl From<Vec<u8>> for AppendRecord {
    fn from(body: Vec<u8>) -> AppendRecord {
        AppendRecord { body: Bytes::from(body), ..AppendRecord::default() }
    }
}

impl From<&[u8]> for AppendRecord {
    fn from(b: &[u8]) -> AppendRecord {
        AppendRecord { body: Bytes::copy_from_slice(b), ..AppendRecord::default() }
    }
}

impl From<Bytes> for AppendRecord {
    fn from(body: Bytes) -> AppendRecord {
        AppendRecord { body, ..AppendRecord::default() }
    }
}

/// A record read from a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Where this record starts: reading from it returns this record first.
    pub position: String,
    /// When the server appended it, ms since the Unix epoch (Pico only).
    pub timestamp: Option<i64>,
    /// `None` when the record has no key (always over Durable Streams).
    pub key: Option<Vec<u8>>,
    /// The record's bytes: a view of the page's body (no copy per record),
    /// printed as text by `{:?}` (`b"{\"item\":\"widget\"}"`).
    pub body: Bytes,
    pub headers: Vec<Header>,
}

impl Record {
    /// The body as text (invalid UTF-8 replaced).
    pub fn body_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }
}

/// Acknowledgement of an append: the records are durable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// Position of the first record appended; empty when unknown (a
    /// producer duplicate the server no longer knows the positions of).
    pub start: String,
    /// Position after the last record.
    pub next: String,
    /// Records written (a Durable Streams byte-stream append is one).
    pub count: usize,
    /// Append time the server stamped, ms since the Unix epoch (Pico only).
    pub timestamp: Option<i64>,
    /// A producer retry found its batch already written: nothing was
    /// written again.
    pub duplicate: bool,
}

/// One read page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub records: Vec<Record>,
    /// The position to read from next.
    pub next: String,
    /// The page reached the stream's end as it was when the server answered.
    pub up_to_date: bool,
    /// The stream is closed and the page reached its final position.
    pub closed: bool,
    /// The server's cursor for the next live read, if any.
    pub cursor: Option<String>,
}

/// A stream's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamInfo {
    pub name: String,
    pub content_type: String,
    /// First readable position (Pico only).
    pub start: Option<String>,
    /// Position after the last record.
    pub next: String,
    pub closed: bool,
    /// Retention by age (Pico) or time to live (Durable Streams).
    pub retention: Option<Duration>,
    pub ttl: Option<Duration>,
    /// Kafka topic alias (Pico only).
    pub kafka_topic: Option<String>,
}

/// Result of a create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateResult {
    /// False when an identical stream existed already.
    pub created: bool,
    pub info: StreamInfo,
}

/// Optional parts of a stream's configuration ([`Client::create_with`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// Records older than this are trimmed (Pico only).
    pub retention: Option<Duration>,
    /// The stream is trimmed to this size (Pico only).
    pub retention_bytes: Option<u64>,
    /// Kafka topic alias; `Some("")` creates the stream without one (Pico only).
    pub kafka_topic: Option<String>,
    /// The stream expires after this long unused, whole seconds (Durable Streams only).
    pub ttl: Option<Duration>,
    /// Create the stream closed (Durable Streams only).
    pub closed: bool,
}

/// One page of a listing (Pico only).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    pub streams: Vec<StreamInfo>,
    /// Pass it back to get the next page; `None` at the end.
    pub next_cursor: Option<String>,
}

/// The position every protocol understands as "the stream's end".
pub const POSITION_NOW: &str = "now";

/// A boxed future of [`StreamApi`]'s methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The protocol-neutral API: the union of the Pico and Durable Streams
/// protocols. Operations without an equivalent in the client's protocol
/// fail with [`Kind::Unsupported`] without sending anything: listing and
/// trimming are Pico only, closing a stream Durable Streams only; a Durable
/// Streams record is a value (no key, no headers).
///
/// [`Client`] implements it with the same methods as inherent `async fn`s,
/// so the trait needs importing only for generic code (`&dyn StreamApi`).
pub trait StreamApi: Send + Sync {
    fn protocol(&self) -> Protocol;
    /// The position of a stream's first record: "0" (Pico) or "-1" (Durable Streams).
    fn beginning(&self) -> String;
    fn create<'a>(&'a self, stream: &'a str, content_type: &'a str, retention: Option<Duration>) -> BoxFuture<'a, CreateResult>;
    fn create_with<'a>(&'a self, stream: &'a str, content_type: &'a str, options: CreateOptions) -> BoxFuture<'a, CreateResult>;
    fn append<'a>(&'a self, stream: &'a str, records: &'a [AppendRecord], content_type: &'a str) -> BoxFuture<'a, Ack>;
    fn read<'a>(&'a self, stream: &'a str, from: &'a str, live: Live, limits: ReadLimits) -> BoxFuture<'a, Page>;
    fn head<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, StreamInfo>;
    fn delete<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, ()>;
    fn list<'a>(&'a self, prefix: &'a str, limit: Option<u32>, cursor: Option<&'a str>) -> BoxFuture<'a, ListPage>;
    fn trim<'a>(&'a self, stream: &'a str, before: &'a str) -> BoxFuture<'a, StreamInfo>;
    fn close_stream<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, String>;
}

/// A handle on one PicoMQ node speaking one protocol. It holds a
/// connection pool; clone it freely (clones share the pool). No I/O happens
/// until a call.
#[derive(Clone)]
pub struct Client {
    t: std::sync::Arc<Transport>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Client({} {})", self.t.protocol, self.t.origin)
    }
}

/// A client for `protocol` at `url`, a node's URL such as
/// `http://127.0.0.1:4437`. For Durable Streams a URL without a path means
/// PicoMQ's stream root `/v1/stream`; a URL with a path is the stream root.
/// It does no network I/O.
pub fn connect(protocol: Protocol, url: &str) -> Result<Client> {
    connect_with(protocol, url, ClientConfig::default())
}

/// [`connect`] with a token, HTTP/2, a retry policy and the CA of an
/// `https://` node.
pub fn connect_with(protocol: Protocol, url: &str, config: ClientConfig) -> Result<Client> {
    let bad = |why: &str| Error::InvalidArgument(format!("base URL {:?}: {}", url, why));
    let u = Url::parse(url.trim()).map_err(|e| bad(&e.to_string()))?;
    if !(u.scheme() == "http" || u.scheme() == "https") || u.host_str().is_none() {
        return Err(bad("want http://host[:port] or https://host[:port]"));
    }
    if u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(bad("no query, fragment or user info allowed"));
    }
    let mut prefix = u.path().trim_end_matches('/').to_string();
    if protocol == Protocol::DurableStreams && prefix.is_empty() {
        prefix = picomq_protocol::ds::PREFIX.to_string();
    }
    if let Some(t) = &config.token {
        if t.contains('\r') || t.contains('\n') {
            return Err(Error::InvalidArgument("token contains a line break".into()));
        }
    }
    let mut origin = u.clone();
    origin.set_path("");
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(format!("picomq-rust/{}", VERSION))
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(64);
    if config.http2 {
        b = b.http2_prior_knowledge();
    }
    if let Some(pem) = &config.ca_pem {
        for cert in pem_certificates(pem)? {
            b = b.add_root_certificate(cert);
        }
    }
    let http = b.build().map_err(|e| Error::InvalidArgument(format!("building the HTTP client: {}", e)))?;
    let mut retry = config.retry;
    retry.max_attempts = retry.max_attempts.max(1);
    if retry.max_backoff < retry.initial_backoff {
        retry.max_backoff = retry.initial_backoff;
    }
    Ok(Client { t: std::sync::Arc::new(Transport::new(protocol, http, origin, prefix, config.token, retry)) })
}

/// The certificates of a PEM bundle (reqwest of this version parses one
/// per call).
fn pem_certificates(pem: &[u8]) -> Result<Vec<reqwest::Certificate>> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let text = std::str::from_utf8(pem).map_err(|_| Error::InvalidArgument("ca_pem: not PEM text".into()))?;
    let mut out = Vec::new();
    for (i, _) in text.match_indices(BEGIN) {
        let end = text[i..].find("-----END CERTIFICATE-----").map(|e| i + e + 25).unwrap_or(text.len());
        let cert = reqwest::Certificate::from_pem(text[i..end].as_bytes())
            .map_err(|e| Error::InvalidArgument(format!("ca_pem: certificate {}: {}", out.len() + 1, e)))?;
        out.push(cert);
    }
    if out.is_empty() {
        return Err(Error::InvalidArgument("ca_pem: no PEM certificate in it".into()));
    }
    Ok(out)
}

/// Width of each half of PicoMQ's Durable Streams offsets,
/// "<generation>_<record offset>", both zero-padded.
const DS_OFFSET_DIGITS: usize = 16;

/// Parses PicoMQ's Durable Streams offset form (generation 0).
fn ds_record_offset(pos: &str) -> Option<i64> {
    let (gen, off) = pos.split_once('_')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= DS_OFFSET_DIGITS && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(gen) || !digits(off) || gen.parse::<i64>().ok()? != 0 {
        return None;
    }
    off.parse().ok()
}

impl Client {
    /// The protocol the client speaks.
    pub fn protocol(&self) -> Protocol {
        self.t.protocol
    }

    /// The position of a stream's first record: "0" (Pico) or "-1" (Durable Streams).
    pub fn beginning(&self) -> String {
        match self.t.protocol {
            Protocol::Pico => "0".into(),
            Protocol::DurableStreams => picomq_protocol::ds::OFFSET_BEGINNING.into(),
        }
    }

    /// The position of record offset `n`. Both of PicoMQ's protocols name
    /// the same record offsets, so positions can be computed for seeking;
    /// against another Durable Streams server this is meaningless.
    pub fn position_at(&self, n: i64) -> String {
        match self.t.protocol {
            Protocol::Pico => n.to_string(),
            Protocol::DurableStreams => format!("{:0w$}_{:0w$}", 0, n, w = DS_OFFSET_DIGITS),
        }
    }

    /// The inverse of [`Client::position_at`]; `None` for sentinels such as "now".
    pub fn offset_of(&self, position: &str) -> Option<i64> {
        match self.t.protocol {
            Protocol::Pico => position.parse().ok().filter(|n: &i64| *n >= 0),
            Protocol::DurableStreams => ds_record_offset(position),
        }
    }

    /// Creates `stream` with `content_type` (empty: application/octet-stream)
    /// and, over Pico, a retention period (`None` keeps records forever).
    /// Creating a stream that exists with the same configuration succeeds
    /// with `created` false; another configuration is [`Kind::Conflict`].
    pub async fn create(&self, stream: &str, content_type: &str, retention: Option<Duration>) -> Result<CreateResult> {
        self.create_with(stream, content_type, CreateOptions { retention, ..CreateOptions::default() }).await
    }

    /// [`Client::create`] with all options.
    pub async fn create_with(&self, stream: &str, content_type: &str, options: CreateOptions) -> Result<CreateResult> {
        let ct = if content_type.is_empty() { picomq_protocol::pico::MEDIA_OCTET_STREAM } else { content_type };
        match self.t.protocol {
            Protocol::Pico => pico::create(&self.t, stream, ct, options).await,
            Protocol::DurableStreams => ds::create(&self.t, stream, ct, options).await,
        }
    }

    /// Appends `records` as one atomic batch: consecutive positions,
    /// acknowledged together once durable. Never retried implicitly (a
    /// [`producer::Producer`] retries safely). `content_type` is the
    /// stream's: Durable Streams needs it for every append (a JSON stream
    /// takes each record as one JSON value); Pico sends the binary record
    /// codec and ignores it.
    pub async fn append(&self, stream: &str, records: &[AppendRecord], content_type: &str) -> Result<Ack> {
        match self.t.protocol {
            Protocol::Pico => pico::append(&self.t, stream, records, None).await,
            Protocol::DurableStreams => ds::append(&self.t, stream, records, content_type).await,
        }
    }

    /// Reads one page from position `from`: [`Client::beginning`], a `next`
    /// returned earlier, or [`POSITION_NOW`].
    pub async fn read(&self, stream: &str, from: &str, live: Live, limits: ReadLimits) -> Result<Page> {
        match self.t.protocol {
            Protocol::Pico => pico::read(&self.t, stream, from, live, limits).await,
            Protocol::DurableStreams => ds::read(&self.t, stream, from, live).await,
        }
    }

    /// The stream's metadata (a HEAD request).
    pub async fn head(&self, stream: &str) -> Result<StreamInfo> {
        match self.t.protocol {
            Protocol::Pico => pico::head(&self.t, stream).await,
            Protocol::DurableStreams => ds::head(&self.t, stream).await,
        }
    }

    /// Deletes the stream and its data.
    pub async fn delete(&self, stream: &str) -> Result<()> {
        let call = Call::new(Method::DELETE, stream);
        self.t.send(&call).await?;
        Ok(())
    }

    /// One page of the streams whose names start with `prefix` (Pico only).
    pub async fn list(&self, prefix: &str, limit: Option<u32>, cursor: Option<&str>) -> Result<ListPage> {
        match self.t.protocol {
            Protocol::Pico => pico::list(&self.t, prefix, limit, cursor).await,
            Protocol::DurableStreams => Err(Error::unsupported(self.t.protocol, "list", "the protocol has no listing")),
        }
    }

    /// Makes records before position `before` unreadable (Pico only).
    pub async fn trim(&self, stream: &str, before: &str) -> Result<StreamInfo> {
        match self.t.protocol {
            Protocol::Pico => pico::trim(&self.t, stream, before).await,
            Protocol::DurableStreams => Err(Error::unsupported(self.t.protocol, "trim", "streams expire as a whole")),
        }
    }

    /// Closes the stream: no more appends, readers see its end (Durable
    /// Streams only). Returns the final position.
    pub async fn close_stream(&self, stream: &str) -> Result<String> {
        match self.t.protocol {
            Protocol::Pico => Err(Error::unsupported(self.t.protocol, "close_stream", "Pico streams cannot be closed")),
            Protocol::DurableStreams => ds::close(&self.t, stream).await,
        }
    }

    pub(crate) fn transport(&self) -> &std::sync::Arc<Transport> {
        &self.t
    }
}

impl StreamApi for Client {
    fn protocol(&self) -> Protocol {
        Client::protocol(self)
    }
    fn beginning(&self) -> String {
        Client::beginning(self)
    }
    fn create<'a>(&'a self, stream: &'a str, content_type: &'a str, retention: Option<Duration>) -> BoxFuture<'a, CreateResult> {
        Box::pin(Client::create(self, stream, content_type, retention))
    }
    fn create_with<'a>(&'a self, stream: &'a str, content_type: &'a str, options: CreateOptions) -> BoxFuture<'a, CreateResult> {
        Box::pin(Client::create_with(self, stream, content_type, options))
    }
    fn append<'a>(&'a self, stream: &'a str, records: &'a [AppendRecord], content_type: &'a str) -> BoxFuture<'a, Ack> {
        Box::pin(Client::append(self, stream, records, content_type))
    }
    fn read<'a>(&'a self, stream: &'a str, from: &'a str, live: Live, limits: ReadLimits) -> BoxFuture<'a, Page> {
        Box::pin(Client::read(self, stream, from, live, limits))
    }
    fn head<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, StreamInfo> {
        Box::pin(Client::head(self, stream))
    }
    fn delete<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(Client::delete(self, stream))
    }
    fn list<'a>(&'a self, prefix: &'a str, limit: Option<u32>, cursor: Option<&'a str>) -> BoxFuture<'a, ListPage> {
        Box::pin(Client::list(self, prefix, limit, cursor))
    }
    fn trim<'a>(&'a self, stream: &'a str, before: &'a str) -> BoxFuture<'a, StreamInfo> {
        Box::pin(Client::trim(self, stream, before))
    }
    fn close_stream<'a>(&'a self, stream: &'a str) -> BoxFuture<'a, String> {
        Box::pin(Client::close_stream(self, stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip() {
        let ds = connect(Protocol::DurableStreams, "http://127.0.0.1:1").unwrap();
        assert_eq!(ds.position_at(3), "0000000000000000_0000000000000003");
        assert_eq!(ds.offset_of(&ds.position_at(42)), Some(42));
        assert_eq!(ds.offset_of("now"), None);
        assert_eq!(ds.offset_of("0000000000000001_0000000000000003"), None, "generation 1 is not a record offset");
        let p = connect(Protocol::Pico, "http://127.0.0.1:1").unwrap();
        assert_eq!(p.position_at(3), "3");
        assert_eq!(p.offset_of("-1"), None);
        assert_eq!(p.beginning(), "0");
        assert_eq!(ds.beginning(), "-1");
    }

    #[test]
    fn connect_refuses_bad_urls() {
        for u in ["127.0.0.1:4437", "ftp://x", "http://h/?q=1", "http://u@h/", "https://u@h/"] {
            assert_eq!(connect(Protocol::Pico, u).unwrap_err().kind(), Kind::InvalidArgument, "{}", u);
        }
        let bad_token = ClientConfig { token: Some("a\nb".into()), ..ClientConfig::default() };
        assert!(connect_with(Protocol::Pico, "http://h", bad_token).is_err());
        assert!(connect(Protocol::Pico, "https://127.0.0.1:4437").is_ok());
        let not_pem = ClientConfig { ca_pem: Some(b"no certificate here".to_vec()), ..ClientConfig::default() };
        assert_eq!(connect_with(Protocol::Pico, "https://h", not_pem).unwrap_err().kind(), Kind::InvalidArgument);
    }

    #[test]
    fn bodies_print_as_text() {
        let r = Record { body: Bytes::from_static(br#"{"item":"widget"}"#), ..Record::default() };
        assert_eq!(format!("{:?}", r.body), r#"b"{\"item\":\"widget\"}""#);
        let a: AppendRecord = "abc".into();
        assert_eq!(a.body, "abc");
    }

    #[test]
    fn retry_delays_double_with_jitter_and_honour_retry_after() {
        let p = RetryPolicy { max_attempts: 5, initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_millis(350) };
        for _ in 0..50 {
            let d1 = p.delay(1, None);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100), "{:?}", d1);
            let d3 = p.delay(3, None);
            assert!(d3 >= Duration::from_millis(175) && d3 <= Duration::from_millis(350), "{:?}", d3);
        }
        assert_eq!(p.delay(1, Some(Duration::from_secs(1))), Duration::from_millis(350));
    }
}
