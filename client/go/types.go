package picomq

import (
	"context"
	"time"
)

// Protocol is the HTTP protocol a Client speaks.
type Protocol int

const (
	// ProtocolPico is PicoMQ's native protocol (docs/api.md).
	ProtocolPico Protocol = iota + 1
	// ProtocolDurableStreams is the Durable Streams protocol
	// (docs/durable-streams.md).
	ProtocolDurableStreams
)

func (p Protocol) String() string {
	switch p {
	case ProtocolPico:
		return "pico"
	case ProtocolDurableStreams:
		return "durable-streams"
	}
	return "unknown protocol"
}

// Client is a connection-less handle on one PicoMQ endpoint. It is the union
// of both protocols: operations without an equivalent in the client's
// protocol return an *UnsupportedError (IsKind(err, KindUnsupported))
// without sending anything. A Client is safe for concurrent use.
type Client interface {
	// Protocol reports which protocol the client speaks.
	Protocol() Protocol
	// Beginning is the position of a stream's first record: "0" (Pico) or
	// "-1" (Durable Streams).
	Beginning() string
	// Stream returns a handle on the stream with this name, a path such as
	// "/orders/1042". It does no I/O and does not check that the stream
	// exists.
	Stream(name string) Stream
	// List returns one page of streams whose names start with
	// opts.Prefix. Pico only.
	List(ctx context.Context, opts ListOptions) (ListPage, error)
	// PositionAt returns the position of record offset n. Both of PicoMQ's
	// HTTP protocols name the same record offsets (the offsets Kafka
	// clients see), so positions can be computed for seeking; on other
	// servers this is meaningless.
	PositionAt(offset int64) string
	// OffsetOf is the inverse of PositionAt. It fails for sentinels such
	// as "now".
	OffsetOf(position string) (int64, error)
	// Close releases idle connections. Handles stay usable.
	Close() error
}

// Stream is a handle on one stream. It is safe for concurrent use.
type Stream interface {
	// Name is the stream's name ("/orders/1042").
	Name() string
	// Create creates the stream with content type contentType (empty means
	// application/octet-stream). retention bounds the age of records
	// (0 keeps them forever; Pico only). Creating a stream that exists with
	// the same configuration succeeds with Created false; with another
	// configuration it fails with KindConflict.
	Create(ctx context.Context, contentType string, retention time.Duration, opts ...CreateOption) (CreateResult, error)
	// Append appends records as one atomic batch: they get consecutive
	// positions and are acknowledged together once durable. Append is
	// never retried automatically (use a Producer for safe retries).
	Append(ctx context.Context, records ...AppendRecord) (Ack, error)
	// Read reads one page from position from (Beginning(), a Next
	// returned earlier, or "now").
	Read(ctx context.Context, from string, opts ReadOptions) (Page, error)
	// Records iterates over the stream from position from, page by page;
	// with opts.Live it waits for new records after catching up.
	Records(from string, opts RecordsOptions) *Records
	// Subscribe opens a server-sent-events subscription from position from.
	Subscribe(ctx context.Context, from string, opts SubscribeOptions) (*Subscription, error)
	// NewProducer returns a batching, idempotent producer for the stream.
	// It does no I/O.
	NewProducer(opts ProducerOptions) (*Producer, error)
	// Head returns the stream's metadata (a HEAD request).
	Head(ctx context.Context) (StreamInfo, error)
	// Describe returns the stream's full description (Pico:
	// GET /_streams/{name}; Durable Streams: what HEAD reports).
	Describe(ctx context.Context) (StreamInfo, error)
	// Delete deletes the stream and its data.
	Delete(ctx context.Context) error
	// Trim makes records before position before unreadable (Pico only).
	Trim(ctx context.Context, before string) (StreamInfo, error)
	// CloseStream closes the stream: it accepts no more appends and
	// readers see its end (Durable Streams only). It returns the final
	// position.
	CloseStream(ctx context.Context) (string, error)
}

// Header is one record header. Headers are ordered and may repeat a key.
type Header struct {
	Key   string
	Value []byte
}

// AppendRecord is a record to append. Key and Headers are Pico only.
type AppendRecord struct {
	Key     []byte   // nil = no key
	Body    []byte   // the value; nil is an empty value
	Headers []Header // record headers
}

// Record is a record read from a stream.
type Record struct {
	// Position is where this record starts: reading from it returns this
	// record first.
	Position string
	// Timestamp is when the server appended the record (Pico only; zero
	// over Durable Streams).
	Timestamp time.Time
	Key       []byte // nil when the record has no key (always over Durable Streams)
	Body      []byte
	Headers   []Header
}

// Ack acknowledges an append: the records are durable.
type Ack struct {
	// Start is the position of the first record appended; Next the
	// position after the last (the stream's end just after the append).
	Start string
	Next  string
	// Count is the number of records the append wrote.
	Count int
	// Timestamp is the append time the server stamped (Pico only).
	Timestamp time.Time
	// Duplicate is true when a producer retry found its batch already
	// written: nothing was written again. Start and Next are the
	// original's when the server still knows them, else empty.
	Duplicate bool
}

// ReadOptions tune a page read.
type ReadOptions struct {
	// Limit bounds the records of the page (Pico; 0 = server default).
	Limit int
	// MaxBytes bounds the page's bytes (Pico; 0 = server default).
	MaxBytes int
	// LongPoll waits for records (up to the server's long-poll timeout)
	// when there are none at from. A page with no records and
	// UpToDate then means the wait timed out.
	LongPoll bool
	// Cursor is the Cursor of the previous live page (optional; it lets
	// CDNs collapse polls).
	Cursor string
}

// Page is the result of one read.
type Page struct {
	Records []Record
	// Next is the position to read from next.
	Next string
	// UpToDate is true when the page reached the stream's end as it was
	// when the server answered.
	UpToDate bool
	// Closed is true when the stream is closed and the page reached its
	// final position: nothing will ever follow.
	Closed bool
	// Cursor is the server's cursor for the next live read.
	Cursor string

	// body is the buffer the records' byte slices alias: a Records
	// iterator with ReuseBuffers reads a later page into it.
	body []byte
	// lazy, for a Records iterator's page of stored batches, holds the
	// records instead of Records: they are decoded as Next hands them out.
	lazy *lazyPage
}

// hasRecords reports whether the page holds a record.
func (p *Page) hasRecords() bool { return len(p.Records) > 0 || p.lazy != nil }

// CreateOption sets an optional part of a stream's configuration.
type CreateOption func(*createConfig)

type createConfig struct {
	kafkaTopic     *string
	retentionBytes int64
	ttl            time.Duration
	expiresAt      time.Time
	closed         bool
}

// WithKafkaTopic sets the stream's Kafka topic alias; "" creates the stream
// without one (Pico only).
func WithKafkaTopic(topic string) CreateOption {
	return func(c *createConfig) { c.kafkaTopic = &topic }
}

// WithRetentionBytes bounds the stream's size; older records are trimmed
// (Pico only).
func WithRetentionBytes(n int64) CreateOption {
	return func(c *createConfig) { c.retentionBytes = n }
}

// WithTTL makes the stream expire after it has been neither read nor
// written for d, whole seconds (Durable Streams only).
func WithTTL(d time.Duration) CreateOption {
	return func(c *createConfig) { c.ttl = d }
}

// WithExpiresAt makes the stream expire at t (Durable Streams only).
func WithExpiresAt(t time.Time) CreateOption {
	return func(c *createConfig) { c.expiresAt = t }
}

// CreateClosed creates the stream already closed: empty and final
// (Durable Streams only).
func CreateClosed() CreateOption {
	return func(c *createConfig) { c.closed = true }
}

// CreateResult is the outcome of Create.
type CreateResult struct {
	// Created is false when an identical stream already existed.
	Created bool
	Info    StreamInfo
}

// StreamInfo describes a stream. Fields a protocol does not report are
// zero.
type StreamInfo struct {
	Name        string
	ContentType string
	// Start is the first readable position (Pico); Next is the position
	// after the last record (empty when Describe was answered by a node
	// that does not own the stream: only the owner knows its end).
	Start string
	Next  string
	// Closed: the stream accepts no more appends.
	Closed bool

	// Pico.
	ID             uint64 // registry id; changes when the name is re-created
	CreatedAt      time.Time
	KafkaTopic     string
	Retention      time.Duration
	RetentionBytes int64
	Owner          string // the node that owns the stream (Describe, List)

	// Durable Streams.
	TTL       time.Duration
	ExpiresAt time.Time
}

// ListOptions select a page of List.
type ListOptions struct {
	Prefix string // only names starting with it ("/orders/")
	Limit  int    // page size (0 = server default)
	Cursor string // the NextCursor of the previous page
}

// ListPage is one page of List, in byte-wise name order.
type ListPage struct {
	Streams []StreamInfo
	// NextCursor is set when more streams match; pass it as Cursor.
	NextCursor string
}
