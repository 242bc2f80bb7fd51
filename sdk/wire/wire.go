// Package wire is the single source of truth for the Pico protocol's wire
// vocabulary: header names, query parameters, media types and error codes.
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
	// HeaderKafkaTopic is the Kafka topic alias of the stream.
	HeaderKafkaTopic = "Pico-Kafka-Topic"
)

// Query parameters of reads.
const (
	QueryOffset   = "offset"
	QueryLimit    = "limit"
	QueryMaxBytes = "max_bytes"
	QueryEncoding = "encoding"
)

// Values of the encoding query parameter and of the per-record
// keyEncoding/valueEncoding fields of JSON reads.
const (
	EncodingUTF8   = "utf8"
	EncodingBase64 = "base64"
)

// Media types.
const (
	MediaJSON        = "application/json"
	MediaOctetStream = "application/octet-stream"
)

// Error codes carried in {"error":{"code":…,"message":…}} bodies. They are
// stable API: clients switch on them, so never rename one.
const (
	CodeBadRequest         = "bad_request"
	CodeInvalidName        = "invalid_stream_name"
	CodeInvalidOffset      = "invalid_offset"
	CodeOffsetOutOfRange   = "offset_out_of_range"
	CodeNotFound           = "stream_not_found"
	CodeExists             = "stream_exists_with_different_config"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeTooLarge           = "payload_too_large"
	CodeUnsupportedMedia   = "unsupported_media_type"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
	CodeReservedName       = "reserved_name"
	CodeNotFoundRoute      = "not_found"
	CodeRequestTimeout     = "request_timeout"
	CodeServiceUnavailable = "service_unavailable"
)

// ErrorBody is the JSON shape of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inner object of ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
