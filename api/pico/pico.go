// Package pico serves the Pico HTTP protocol, PicoMQ's native API: a stream
// is a URL path and the standard methods keep their meaning (PUT creates, POST
// appends, GET reads, HEAD describes, DELETE deletes), plus the /_streams
// admin resource (list, describe, reconfigure, trim). All position state
// travels in Pico-* response headers; the server keeps nothing per consumer.
//
// The handler is a thin facade: it parses HTTP, calls the stream service and
// renders the result. docs/api.md is the reference for every header, query
// parameter and status code used here; the wire vocabulary itself lives in
// sdk/wire so the Go SDK can never disagree with it.
package pico

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Service is what the Pico frontend needs from the stream service.
type Service interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	AppendBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.AppendResult, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error)
	WaitFor(ctx context.Context, name string, offset int64) (bool, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	Describe(ctx context.Context, name string) (stream.Info, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context, prefix, after string, limit int) ([]stream.Info, bool, error)
	Configure(ctx context.Context, name string, ch stream.ConfigChange) (stream.Info, error)
}

// Config tunes the handler. Zero values get the defaults documented in
// docs/api.md.
type Config struct {
	// MaxAppendBytes bounds one append request body (413 above it).
	MaxAppendBytes int64
	// MaxRecordBytes bounds one record: key, value, header keys and values.
	MaxRecordBytes int
	// MaxBatchRecords bounds the records of one append.
	MaxBatchRecords int
	// MaxRecordHeaders bounds the headers of one record.
	MaxRecordHeaders int
	// LongPollTimeout caps a live=long-poll read (--long-poll-timeout).
	LongPollTimeout time.Duration
	// SSETimeout caps one live=sse connection (--sse-timeout); the client
	// reconnects with Last-Event-ID.
	SSETimeout time.Duration
	// SSEKeepAlive is the interval of SSE comment lines on an idle
	// connection, so proxies do not cut it.
	SSEKeepAlive time.Duration
	// CursorInterval is the time bucket of Pico-Cursor values.
	CursorInterval time.Duration
	// Now is the clock of cursors; tests inject one.
	Now    func() time.Time
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxAppendBytes   = 4 << 20
	DefaultMaxRecordBytes   = 1 << 20
	DefaultMaxBatchRecords  = 10000
	DefaultMaxRecordHeaders = 64
	DefaultLongPollTimeout  = 25 * time.Second
	DefaultSSETimeout       = 55 * time.Second
	DefaultSSEKeepAlive     = 15 * time.Second
	DefaultCursorInterval   = 20 * time.Second
)

// Handler serves the Pico protocol.
type Handler struct {
	svc   Service
	cfg   Config
	lim   batchLimits
	pages pageCache // rendered live-read pages shared by SSE readers
}

// New returns a Pico handler over svc.
func New(svc Service, cfg Config) *Handler {
	defaults.Set(&cfg.MaxAppendBytes, DefaultMaxAppendBytes)
	defaults.Set(&cfg.MaxRecordBytes, DefaultMaxRecordBytes)
	defaults.Set(&cfg.MaxBatchRecords, DefaultMaxBatchRecords)
	defaults.Set(&cfg.MaxRecordHeaders, DefaultMaxRecordHeaders)
	defaults.Set(&cfg.LongPollTimeout, DefaultLongPollTimeout)
	defaults.Set(&cfg.SSETimeout, DefaultSSETimeout)
	defaults.Set(&cfg.SSEKeepAlive, DefaultSSEKeepAlive)
	defaults.Set(&cfg.CursorInterval, DefaultCursorInterval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{svc: svc, cfg: cfg, lim: batchLimits{
		maxRecords:     cfg.MaxBatchRecords,
		maxRecordBytes: cfg.MaxRecordBytes,
		maxHeaders:     cfg.MaxRecordHeaders,
	}}
}

// ServeHTTP serves the Pico routes: /_streams (list), /_streams/… (admin),
// other /_… paths (reserved: 404), and every other path as a stream name.
// Callers serve their own root routes (/healthz, /metrics, …) before it.
// A plain switch, not a router: an append pays for no route matching,
// request copy or context value.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == wire.PathStreams:
		h.serveList(w, r)
	case strings.HasPrefix(p, wire.PathStreams+"/"):
		h.serveAdmin(w, r)
	case strings.HasPrefix(p, "/_"):
		httpx.WriteError(w, http.StatusNotFound, wire.CodeNotFoundRoute, "no such endpoint: "+p)
	case strings.HasPrefix(p, "/"):
		h.serveStream(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Path
	methods := httpx.StreamMethods{Create: h.create, Append: h.append, Read: h.read, Head: h.head, Delete: h.delete}
	if !methods.Serve(w, r, name) {
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, DELETE")
		httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, r.Method+" is not supported on a stream")
	}
}

// streamJSON describes a stream: the body of create and of
// GET /_streams/{name}, and the elements of a listing.
type streamJSON struct {
	Name           string    `json:"name"`
	ID             uint64    `json:"id"`
	ContentType    string    `json:"contentType"`
	CreatedAt      time.Time `json:"createdAt"`
	KafkaTopic     string    `json:"kafkaTopic,omitempty"`
	RetentionMs    int64     `json:"retentionMs"`
	RetentionBytes int64     `json:"retentionBytes"`
	StartOffset    int64     `json:"startOffset"`
	NextOffset     int64     `json:"nextOffset"`
	Closed         bool      `json:"closed"`
	Owner          string    `json:"owner,omitempty"`
	// Durability is the ack level the stream was created with; omitted
	// when it follows the node's --durability.
	Durability string `json:"durability,omitempty"`
	// Compaction lists a compacted stream's settings under Kafka's config
	// names; omitted when the stream is not compacted.
	Compaction map[string]string `json:"compaction,omitempty"`
}

func describe(info stream.Info) streamJSON {
	var compaction map[string]string
	if info.Compaction != nil {
		compaction = map[string]string{}
		for _, c := range stream.CompactionConfigs(info.Compaction) {
			compaction[c[0]] = c[1]
		}
	}
	return streamJSON{
		Compaction: compaction,
		Name:       info.Name, ID: info.ID, ContentType: info.ContentType, CreatedAt: info.CreatedAt,
		KafkaTopic: info.KafkaTopic, RetentionMs: info.RetentionMs, RetentionBytes: info.RetentionBytes,
		StartOffset: info.StartOffset, NextOffset: info.NextOffset, Closed: info.Closed, Owner: info.Owner,
		Durability: info.Durability,
	}
}

func setInfoHeaders(hd http.Header, info stream.Info) {
	if info.Owner != "" {
		hd.Set("Pico-Owner", info.Owner)
	}
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(info.NextOffset, 10))
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(info.StartOffset, 10))
	hd.Set(wire.HeaderStreamID, strconv.FormatUint(info.ID, 10))
	if info.KafkaTopic != "" {
		hd.Set(wire.HeaderKafkaTopic, info.KafkaTopic)
	}
	if info.RetentionMs > 0 {
		hd.Set(wire.HeaderRetentionMs, strconv.FormatInt(info.RetentionMs, 10))
	}
	if info.RetentionBytes > 0 {
		hd.Set(wire.HeaderRetentionBytes, strconv.FormatInt(info.RetentionBytes, 10))
	}
	if info.Closed {
		hd.Set(wire.HeaderClosed, "true")
	}
}

// drainBody reads and discards a small body of a request that takes none
// (PUT, DELETE), so the connection can be reused; a large one is not read.
func drainBody(r *http.Request) error {
	_, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	return err
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, name string) {
	if err := drainBody(r); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	ct := r.Header.Get("Content-Type")
	if isEnvelope(ct) {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest,
			fmt.Sprintf("%q is a Pico batch envelope, not a stream content type", ct))
		return
	}
	opts := stream.CreateOptions{ContentType: ct, Durability: strings.ToLower(strings.TrimSpace(r.Header.Get(wire.HeaderDurability)))}
	if t, ok := r.Header[wire.HeaderKafkaTopic]; ok {
		topic := ""
		if len(t) > 0 {
			topic = strings.TrimSpace(t[0])
		}
		opts.KafkaTopic = &topic
	}
	var err error
	if opts.RetentionMs, _, err = parseNonNegativeHeader(r.Header, wire.HeaderRetentionMs); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	if opts.RetentionBytes, _, err = parseNonNegativeHeader(r.Header, wire.HeaderRetentionBytes); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	if v, ok := headerValue(r.Header, wire.HeaderCompaction); ok {
		if opts.Compaction, err = parseCompactionHeader(v); err != nil {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		}
	}
	if src, ok := headerValue(r.Header, wire.HeaderForkSource); ok {
		opts.Fork = &stream.ForkOptions{Source: src, Offset: -1}
		if at, set, err := parseNonNegativeHeader(r.Header, wire.HeaderForkOffset); err != nil {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		} else if set {
			opts.Fork.Offset = at
		}
	} else if _, ok := headerValue(r.Header, wire.HeaderForkOffset); ok {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, wire.HeaderForkOffset+" without "+wire.HeaderForkSource)
		return
	}
	info, created, err := h.svc.Create(r.Context(), name, opts)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	setInfoHeaders(w.Header(), info)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", name)
	}
	httpx.WriteJSON(w, status, describe(info))
}

func (h *Handler) head(w http.ResponseWriter, r *http.Request, name string) {
	info, err := h.svc.Head(r.Context(), name)
	if err != nil {
		// HEAD responses carry no body; the status and code header say it.
		status, d := h.errorDetail(w, r, err)
		w.Header().Set(wire.HeaderErrorCode, d.Code)
		w.WriteHeader(status)
		return
	}
	setInfoHeaders(w.Header(), info)
	w.Header().Set("Content-Type", info.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, name string) {
	if err := drainBody(r); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	if err := h.svc.Delete(r.Context(), name); err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parseCompactionHeader reads Pico-Compaction: "name=value" Kafka topic
// configs separated by commas or semicolons. cleanup.policy's own value
// may hold a comma ("compact,delete"): a part without "=" continues the
// previous value.
func parseCompactionHeader(v string) (*stream.Compaction, error) {
	configs := map[string]string{}
	last := ""
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' }) {
		part = strings.TrimSpace(part)
		name, value, ok := strings.Cut(part, "=")
		switch {
		case ok:
			name = strings.TrimSpace(name)
			if !stream.IsCompactionConfig(name) {
				return nil, fmt.Errorf("%s: %q is not a compaction config", wire.HeaderCompaction, name)
			}
			configs[name], last = strings.TrimSpace(value), name
		case last != "" && part != "":
			configs[last] += "," + part
		case part != "":
			return nil, fmt.Errorf("%s: want name=value pairs, got %q", wire.HeaderCompaction, part)
		}
	}
	c, err := stream.ParseCompaction(nil, configs)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", wire.HeaderCompaction, err)
	}
	return c, nil
}
