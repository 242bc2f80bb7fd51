// Package wire is the single source of truth for the Pico protocol's wire
// vocabulary: header names, query parameters, media types, error codes and
// the JSON shapes of error bodies and read records.
// Both the server (api/pico) and the Go SDK import it, so a rename can never
// leave the two sides disagreeing. It imports nothing from the server.
package wire

// Request and response headers of the Pico protocol.
const (
	// HeaderKey carries the record key of a single-body append.
	HeaderKey = "Pico-Key"
	// HeaderOffset is the offset of the first record an append wrote.
	HeaderOffset = "Pico-Offset"
	// HeaderNextOffset is the offset a reader should continue from, and on
	// HEAD/append the stream's next offset (one past the last durable record).
	HeaderNextOffset = "Pico-Next-Offset"
	// HeaderStartOffset is the first offset still readable (after trims).
	HeaderStartOffset = "Pico-Start-Offset"
	// HeaderUpToDate is "true" when a read returned everything durable so far.
	HeaderUpToDate = "Pico-Up-To-Date"
	// HeaderCursor is an opaque value a client may echo back; reserved for
	// CDN cache-busting of live reads.
	HeaderCursor = "Pico-Cursor"
	// HeaderTimestamp is the LogAppendTime (ms since the Unix epoch) the
	// server stamped on an append.
	HeaderTimestamp = "Pico-Timestamp"
	// HeaderStreamID is the stream's registry id; it changes when a stream is
	// deleted and created again, so caches can tell incarnations apart.
	HeaderStreamID = "Pico-Stream-Id"
	// HeaderKafkaTopic is the Kafka topic alias of the stream: on create it
	// sets the alias (an empty value means none), on HEAD it reports it.
	HeaderKafkaTopic = "Pico-Kafka-Topic"
	// HeaderDurability on create chooses the stream's ack level: "local"
	// (after the owner's WAL fsync) or "object" (after upload + commit).
	HeaderDurability = "Pico-Durability"
	// HeaderForkSource on create makes the new stream a fork of the named
	// stream: it starts with the source's records below HeaderForkOffset
	// (default: the source's next offset), shared rather than copied, and
	// continues with its own appends.
	HeaderForkSource = "Pico-Fork-Source"
	HeaderForkOffset = "Pico-Fork-Offset"
	// HeaderRetentionMs and HeaderRetentionBytes set a stream's retention on
	// create (absent or 0 = unlimited).
	HeaderRetentionMs    = "Pico-Retention-Ms"
	HeaderRetentionBytes = "Pico-Retention-Bytes"
	// HeaderCompaction on create makes the stream compacted by key: a
	// comma-separated list of Kafka topic configs, e.g.
	// "cleanup.policy=compact, min.compaction.lag.ms=0" (docs/api.md).
	HeaderCompaction = "Pico-Compaction"
	// HeaderRecordHeaderPrefix prefixes the record headers of a single-body
	// append: "Pico-Header-Trace: abc" adds the record header trace=abc.
	// HTTP field names are case-insensitive, so the record header name is
	// the lower-cased rest of the field name.
	HeaderRecordHeaderPrefix = "Pico-Header-"
	// HeaderProducerID, HeaderProducerEpoch and HeaderProducerSeq make an
	// append idempotent. They are sent together or not at all; on a
	// response, epoch and seq are the producer's current epoch and highest
	// accepted sequence.
	HeaderProducerID    = "Pico-Producer-Id"
	HeaderProducerEpoch = "Pico-Producer-Epoch"
	HeaderProducerSeq   = "Pico-Producer-Seq"
	// HeaderProducerExpectedSeq and HeaderProducerReceivedSeq accompany a
	// producer_seq_gap error.
	HeaderProducerExpectedSeq = "Pico-Producer-Expected-Seq"
	HeaderProducerReceivedSeq = "Pico-Producer-Received-Seq"
	// HeaderDuplicate is "true" on the acknowledgement of a producer retry
	// that was already written: nothing was appended again.
	HeaderDuplicate = "Pico-Duplicate"
	// HeaderRecordCount is the number of records an append wrote or a read
	// returned.
	HeaderRecordCount = "Pico-Record-Count"
	// HeaderPageOffset is the offset a read page of stored batches
	// (MediaRecordBatches) starts at: its first batch may begin below it,
	// and a reader skips those records, as a Kafka consumer does.
	HeaderPageOffset = "Pico-Page-Offset"
	// HeaderClosed is "true" when the stream is closed (no more appends)
	// and, on reads, the read reached its end.
	HeaderClosed = "Pico-Closed"
	// HeaderErrorCode carries the error code of HEAD responses, which have
	// no body.
	HeaderErrorCode = "Pico-Error-Code"
)

// Query parameters of reads.
const (
	QueryOffset   = "offset"
	QueryLimit    = "limit"
	QueryMaxBytes = "max_bytes"
	QueryEncoding = "encoding"
	// QueryFormat selects the read format (json, binary, raw); it wins over
	// the Accept header.
	QueryFormat = "format"
	// QueryLive selects a live read: long-poll or sse.
	QueryLive = "live"
	// QueryCursor echoes the Pico-Cursor of the previous live read.
	QueryCursor = "cursor"
)

// Values of the format query parameter.
const (
	FormatJSON   = "json"
	FormatBinary = "binary"
	FormatRaw    = "raw"
	// FormatBatches asks for stored RecordBatch v2 batches as they are
	// (MediaRecordBatches), falling back to FormatBinary for a page that
	// cannot be served that way (docs/api.md#formats).
	FormatBatches = "batches"
)

// Values of the live query parameter.
const (
	LiveLongPoll = "long-poll"
	LiveSSE      = "sse"
)

// Query parameters of GET /_streams.
const (
	QueryPrefix = "prefix"
	// QueryListCursor is the nextCursor of the previous page.
	QueryListCursor = "cursor"
)

// SSE event names of live=sse reads.
const (
	EventData    = "data"
	EventControl = "control"
	EventError   = "error"
)

// Values of the encoding query parameter and of the per-record
// keyEncoding/valueEncoding fields of JSON reads.
const (
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
	// EncodingJSON is valueEncoding only: the value field is the record's
	// value as a JSON value, stored as its JSON text.
	EncodingJSON = "json"
)

// Media types.
const (
	MediaJSON        = "application/json"
	MediaOctetStream = "application/octet-stream"
	// MediaBatchJSON is a JSON batch append: an array of records.
	MediaBatchJSON = "application/vnd.picomq.batch+json"
	// MediaBatch is the Pico record codec (sdk/wire/codec), for appends and
	// reads.
	MediaBatch = "application/vnd.picomq.batch"
	// MediaRecordBatches is a read page of stored Kafka RecordBatch v2
	// batches, uncompressed, concatenated as stored (sdk/wire/recordbatch).
	MediaRecordBatches = "application/vnd.picomq.recordbatches"
	// MediaEventStream is the SSE media type of live=sse reads.
	MediaEventStream = "text/event-stream"
	// MediaMergePatch is the media type of PATCH /_streams/{name} bodies
	// (application/json is accepted too).
	MediaMergePatch = "application/merge-patch+json"
)

// Admin routes.
const (
	// PathStreams lists streams; PathStreams + name describes or patches one.
	PathStreams = "/_streams"
)

// Error codes carried in {"error":{"code":…,"message":…}} bodies. They are
// stable API: clients switch on them, so never rename one.
const (
	CodeBadRequest          = "bad_request"
	CodeInvalidName         = "invalid_stream_name"
	CodeInvalidOffset       = "invalid_offset"
	CodeOffsetOutOfRange    = "offset_out_of_range"
	CodeNotFound            = "stream_not_found"
	CodeExists              = "stream_exists_with_different_config"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeTooLarge            = "payload_too_large"
	CodeUnsupportedMedia    = "unsupported_media_type"
	CodeUnavailable         = "unavailable"
	CodeInternal            = "internal"
	CodeReservedName        = "reserved_name"
	CodeNotFoundRoute       = "not_found"
	CodeRequestTimeout      = "request_timeout"
	CodeServiceUnavailable  = "service_unavailable"
	CodeNotAcceptable       = "not_acceptable"
	CodeOffsetTrimmed       = "offset_trimmed"
	CodeRecordTooLarge      = "record_too_large"
	CodeTooManyRecords      = "too_many_records"
	CodeInvalidBatch        = "invalid_batch"
	CodeInvalidHeader       = "invalid_header"
	CodeInvalidTopic        = "invalid_topic"
	CodeTopicConflict       = "topic_conflict"
	CodeProducerFenced      = "producer_fenced"
	CodeProducerSeqGap      = "producer_seq_gap"
	CodeProducerEpochSeq    = "producer_epoch_seq"
	CodeStreamClosed        = "stream_closed"
	CodeContentTypeMismatch = "content_type_mismatch"
	// CodeNotEnoughReplicas (503): a `replicated` stream cannot make its
	// minimum of in-sync copies now; nothing was acknowledged, retry.
	CodeNotEnoughReplicas = "not_enough_replicas"
	// Authentication and overload (docs/security.md).
	CodeUnauthorized = "unauthorized" // 401: no token, or one the server does not know
	CodeForbidden    = "forbidden"    // 403: the token's scopes do not cover the request
	CodeRateLimited  = "rate_limited" // 429: the token's request rate is exhausted; see Retry-After
	CodeOverloaded   = "overloaded"   // 503: too many append bytes in flight; see Retry-After
	// CodeStreamGone and CodeWriterSeqConflict exist on the Durable Streams
	// protocol only: a soft-deleted stream that forks still read (410), and
	// a Stream-Seq that did not increase (409).
	CodeStreamGone        = "stream_gone"
	CodeWriterSeqConflict = "stream_seq_conflict"
	// CodeNotImplemented: a Durable Streams API PicoMQ does not serve.
	CodeNotImplemented = "not_implemented"
)

// ErrorBody is the JSON shape of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner object of ErrorBody. The optional fields carry
// the numbers some errors are about, so a client acts on them without
// parsing the message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// ExpectedSeq and ReceivedSeq: producer_seq_gap.
	ExpectedSeq *uint64 `json:"expectedSeq,omitempty"`
	ReceivedSeq *uint64 `json:"receivedSeq,omitempty"`
	// CurrentEpoch: producer_fenced.
	CurrentEpoch *uint64 `json:"currentEpoch,omitempty"`
	// StartOffset: offset_trimmed; NextOffset: stream_closed,
	// offset_out_of_range.
	StartOffset *int64 `json:"startOffset,omitempty"`
	NextOffset  *int64 `json:"nextOffset,omitempty"`
}
