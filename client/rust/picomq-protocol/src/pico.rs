//! The Pico protocol's wire names (docs/api.md), as in Go's `sdk/wire`.

/// Record key of a single-body append.
pub const HEADER_KEY: &str = "Pico-Key";
/// Offset of the first record an append wrote.
pub const HEADER_OFFSET: &str = "Pico-Offset";
/// Offset a reader continues from; on HEAD and appends the stream's next offset.
pub const HEADER_NEXT_OFFSET: &str = "Pico-Next-Offset";
/// First offset still readable (after trims).
pub const HEADER_START_OFFSET: &str = "Pico-Start-Offset";
/// `true` when a read returned everything durable so far.
pub const HEADER_UP_TO_DATE: &str = "Pico-Up-To-Date";
/// Opaque value a live reader echoes back (`cursor` query parameter).
pub const HEADER_CURSOR: &str = "Pico-Cursor";
/// LogAppendTime (ms since the Unix epoch) the server stamped on an append.
pub const HEADER_TIMESTAMP: &str = "Pico-Timestamp";
/// The stream's registry id (changes when a stream is re-created).
pub const HEADER_STREAM_ID: &str = "Pico-Stream-Id";
/// Kafka topic alias: sets it on create, reports it on HEAD.
pub const HEADER_KAFKA_TOPIC: &str = "Pico-Kafka-Topic";
/// Ack level chosen on create: `local` or `object`.
pub const HEADER_DURABILITY: &str = "Pico-Durability";
/// Retention by age on create (0 or absent = unlimited).
pub const HEADER_RETENTION_MS: &str = "Pico-Retention-Ms";
/// Retention by size on create (0 or absent = unlimited).
pub const HEADER_RETENTION_BYTES: &str = "Pico-Retention-Bytes";
/// Prefix of record headers of a single-body append.
pub const HEADER_RECORD_HEADER_PREFIX: &str = "Pico-Header-";
/// Identified producer: id, epoch and sequence, sent together or not at all.
pub const HEADER_PRODUCER_ID: &str = "Pico-Producer-Id";
pub const HEADER_PRODUCER_EPOCH: &str = "Pico-Producer-Epoch";
pub const HEADER_PRODUCER_SEQ: &str = "Pico-Producer-Seq";
/// Accompany a `producer_seq_gap` error.
pub const HEADER_PRODUCER_EXPECTED_SEQ: &str = "Pico-Producer-Expected-Seq";
pub const HEADER_PRODUCER_RECEIVED_SEQ: &str = "Pico-Producer-Received-Seq";
/// `true` on the acknowledgement of a producer retry already written.
pub const HEADER_DUPLICATE: &str = "Pico-Duplicate";
/// Records an append wrote or a read returned.
pub const HEADER_RECORD_COUNT: &str = "Pico-Record-Count";
/// The offset a page of stored batches starts at: its first batch may
/// begin below it, and a reader skips those records.
pub const HEADER_PAGE_OFFSET: &str = "Pico-Page-Offset";
/// `true` when the stream is closed (and a read reached its end).
pub const HEADER_CLOSED: &str = "Pico-Closed";
/// Error code of HEAD responses, which have no body.
pub const HEADER_ERROR_CODE: &str = "Pico-Error-Code";
/// The node owning the stream (HEAD).
pub const HEADER_OWNER: &str = "Pico-Owner";
/// On create: the new stream is a fork of this stream, sharing its records
/// below `HEADER_FORK_OFFSET` (default: the source's next offset).
pub const HEADER_FORK_SOURCE: &str = "Pico-Fork-Source";
pub const HEADER_FORK_OFFSET: &str = "Pico-Fork-Offset";
/// On create: the stream is compacted by key; a comma-separated list of
/// Kafka topic configs, e.g. "cleanup.policy=compact, min.compaction.lag.ms=0".
pub const HEADER_COMPACTION: &str = "Pico-Compaction";

/// Query parameters of reads.
pub const QUERY_OFFSET: &str = "offset";
pub const QUERY_LIMIT: &str = "limit";
pub const QUERY_MAX_BYTES: &str = "max_bytes";
pub const QUERY_ENCODING: &str = "encoding";
pub const QUERY_FORMAT: &str = "format";
pub const QUERY_LIVE: &str = "live";
pub const QUERY_CURSOR: &str = "cursor";

/// Values of the `format` query parameter.
pub const FORMAT_JSON: &str = "json";
pub const FORMAT_BINARY: &str = "binary";
pub const FORMAT_RAW: &str = "raw";
/// Stored RecordBatch v2 batches as they are (binary where a page cannot be).
pub const FORMAT_BATCHES: &str = "batches";

/// Values of the `live` query parameter.
pub const LIVE_LONG_POLL: &str = "long-poll";
pub const LIVE_SSE: &str = "sse";

/// SSE event names of `live=sse` reads.
pub const EVENT_DATA: &str = "data";
pub const EVENT_CONTROL: &str = "control";
pub const EVENT_ERROR: &str = "error";

/// Values of the `encoding` query parameter and of the per-record
/// `keyEncoding`/`valueEncoding` fields of JSON reads.
pub const ENCODING_UTF8: &str = "utf8";
pub const ENCODING_BASE64: &str = "base64";

/// Query parameters of `GET /_streams`.
pub const QUERY_PREFIX: &str = "prefix";
pub const QUERY_LIST_CURSOR: &str = "cursor";

/// Media types.
pub const MEDIA_JSON: &str = "application/json";
pub const MEDIA_OCTET_STREAM: &str = "application/octet-stream";
pub const MEDIA_BATCH_JSON: &str = "application/vnd.picomq.batch+json";
pub const MEDIA_BATCH: &str = crate::codec::MEDIA_TYPE;
pub const MEDIA_EVENT_STREAM: &str = "text/event-stream";
/// A read page of stored Kafka RecordBatch v2 batches, uncompressed.
pub const MEDIA_RECORD_BATCHES: &str = "application/vnd.picomq.recordbatches";
pub const MEDIA_MERGE_PATCH: &str = "application/merge-patch+json";

/// Lists streams; `PATH_STREAMS` + name describes or patches one.
pub const PATH_STREAMS: &str = "/_streams";

/// Error codes of `{"error":{"code":…,"message":…}}` bodies: stable API.
pub const CODE_BAD_REQUEST: &str = "bad_request";
pub const CODE_INVALID_NAME: &str = "invalid_stream_name";
pub const CODE_INVALID_OFFSET: &str = "invalid_offset";
pub const CODE_OFFSET_OUT_OF_RANGE: &str = "offset_out_of_range";
pub const CODE_NOT_FOUND: &str = "stream_not_found";
pub const CODE_EXISTS: &str = "stream_exists_with_different_config";
pub const CODE_METHOD_NOT_ALLOWED: &str = "method_not_allowed";
pub const CODE_TOO_LARGE: &str = "payload_too_large";
pub const CODE_UNSUPPORTED_MEDIA: &str = "unsupported_media_type";
pub const CODE_UNAVAILABLE: &str = "unavailable";
/// (503) a `replicated` stream cannot make its minimum of in-sync copies
/// now; nothing was acknowledged, retry.
pub const CODE_NOT_ENOUGH_REPLICAS: &str = "not_enough_replicas";
pub const CODE_INTERNAL: &str = "internal";
pub const CODE_RESERVED_NAME: &str = "reserved_name";
pub const CODE_NOT_FOUND_ROUTE: &str = "not_found";
pub const CODE_REQUEST_TIMEOUT: &str = "request_timeout";
pub const CODE_SERVICE_UNAVAILABLE: &str = "service_unavailable";
pub const CODE_NOT_ACCEPTABLE: &str = "not_acceptable";
pub const CODE_OFFSET_TRIMMED: &str = "offset_trimmed";
pub const CODE_RECORD_TOO_LARGE: &str = "record_too_large";
pub const CODE_TOO_MANY_RECORDS: &str = "too_many_records";
pub const CODE_INVALID_BATCH: &str = "invalid_batch";
pub const CODE_INVALID_HEADER: &str = "invalid_header";
pub const CODE_INVALID_TOPIC: &str = "invalid_topic";
pub const CODE_TOPIC_CONFLICT: &str = "topic_conflict";
pub const CODE_PRODUCER_FENCED: &str = "producer_fenced";
pub const CODE_PRODUCER_SEQ_GAP: &str = "producer_seq_gap";
pub const CODE_PRODUCER_EPOCH_SEQ: &str = "producer_epoch_seq";
pub const CODE_STREAM_CLOSED: &str = "stream_closed";
pub const CODE_CONTENT_TYPE_MISMATCH: &str = "content_type_mismatch";
/// 401: missing or unknown token.
pub const CODE_UNAUTHORIZED: &str = "unauthorized";
/// 403: the token's scopes do not cover the request.
pub const CODE_FORBIDDEN: &str = "forbidden";
/// 429: the token's request rate is exhausted; see Retry-After.
pub const CODE_RATE_LIMITED: &str = "rate_limited";
/// 503: too many append bytes in flight; see Retry-After.
pub const CODE_OVERLOADED: &str = "overloaded";
/// Durable Streams only: a soft-deleted stream that forks still read (410).
pub const CODE_STREAM_GONE: &str = "stream_gone";
/// Durable Streams only: a Stream-Seq that did not increase (409).
pub const CODE_WRITER_SEQ_CONFLICT: &str = "stream_seq_conflict";
/// Durable Streams only: an API PicoMQ does not serve.
pub const CODE_NOT_IMPLEMENTED: &str = "not_implemented";
