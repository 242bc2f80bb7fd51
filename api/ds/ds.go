// Package ds serves the Durable Streams protocol (ElectricSQL's open
// protocol, PROTOCOL.md in github.com/durable-streams/durable-streams) on
// its exact wire vocabulary: Stream-* and Producer-* headers, offsets in the
// "%016d_%016d" form plus the -1 and now sentinels, JSON mode, catch-up,
// long-poll and SSE reads, ETag revalidation, cursors, CORS.
//
// Like the Pico frontend it is a thin facade over the stream service: it
// parses HTTP, calls the service, renders the result. Streams live under
// /v1/stream/ (the prefix the protocol's conformance suite uses); the DS
// stream /v1/stream/a/b is the PicoMQ stream /a/b, the same one Pico and
// Kafka clients see. docs/durable-streams.md is the reference.
package ds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Prefix is the URL path under which streams are served.
const Prefix = "/v1/stream"

// CORS: any origin may read and write (access control is the auth layer's
// job), and browsers may send and see every protocol header.
const (
	corsAllowMethods  = "GET, POST, PUT, DELETE, HEAD, OPTIONS"
	corsAllowHeaders  = "Content-Type, Authorization, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset"
	corsExposeHeaders = "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-Sse-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, ETag, Location, Content-Type"
)

// producerPrefix namespaces Durable Streams producer ids in the stream
// service, so they never collide with Pico or Kafka producers.
const producerPrefix = "ds:"

// Service is what the facade needs from the stream service.
type Service interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	AppendBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.AppendResult, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	Touch(ctx context.Context, name string) (stream.Info, error)
	Delete(ctx context.Context, name string) error
	WaitFor(ctx context.Context, name string, offset int64) (bool, error)
}

// Config tunes the handler. Zero values get defaults.
type Config struct {
	// BaseURL is the absolute URL clients reach this node at (the node's
	// advertise URL); Location headers are built from it. Empty: derived
	// from the request's Host.
	BaseURL string
	// MaxAppendBytes bounds one request body (413 above it).
	MaxAppendBytes int64
	// LongPollTimeout is how long a long-poll waits for data before 204;
	// an idle SSE connection gets a keep-alive control event as often.
	LongPollTimeout time.Duration
	// SSETimeout caps one SSE connection; the client reconnects from the
	// last offset it saw, which keeps intermediaries from timing out and
	// rebalances long-lived connections.
	SSETimeout time.Duration
	// ReadRecords / ReadBytes bound one response page (0 = the service's
	// defaults).
	ReadRecords int
	ReadBytes   int
	Now         func() time.Time
	Logger      *slog.Logger
}

// Handler serves the Durable Streams protocol.
type Handler struct {
	svc Service
	cfg Config
}

// New returns a handler over svc.
func New(svc Service, cfg Config) *Handler {
	defaults.Set(&cfg.MaxAppendBytes, 4<<20)
	defaults.Set(&cfg.LongPollTimeout, 25*time.Second)
	defaults.Set(&cfg.SSETimeout, 55*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Handler{svc: svc, cfg: cfg}
}

// ServeHTTP serves the protocol: streams under Prefix, and a protocol 404
// (with the same security headers) for every other path. Callers serve
// their own root routes (/healthz, /metrics, …) before it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, Prefix+"/"):
		h.serveStreams(w, r)
	case strings.HasPrefix(p, "/"):
		setCommonHeaders(w.Header())
		httpx.WriteError(w, http.StatusNotFound, wire.CodeNotFoundRoute, "no such endpoint: "+p+" (Durable Streams are served under "+Prefix+"/)")
	default:
		http.NotFound(w, r)
	}
}

// setCommonHeaders sets what every response carries, errors included: the
// browser security headers and CORS.
func setCommonHeaders(hd http.Header) {
	hd["X-Content-Type-Options"] = nosniffValue
	hd["Cross-Origin-Resource-Policy"] = corpValue
	hd["Access-Control-Allow-Origin"] = anyOriginValue
	hd["Access-Control-Expose-Headers"] = exposeValue
}

// The common header values, shared read-only by every response (no
// allocation per request; net/http only reads them, and Add or Set replace
// rather than modify them).
var (
	nosniffValue   = []string{"nosniff"}
	corpValue      = []string{"cross-origin"}
	anyOriginValue = []string{"*"}
	exposeValue    = []string{corsExposeHeaders}
)

// serveStreams dispatches one request under Prefix.
func (h *Handler) serveStreams(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	setCommonHeaders(hd)
	if r.Method == http.MethodOptions {
		hd.Set("Access-Control-Allow-Methods", corsAllowMethods)
		hd.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		hd.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	name, err := streamName(r.URL.Path)
	if err != nil {
		if errors.Is(err, errReservedDS) {
			h.fail(w, r, http.StatusNotImplemented, wire.CodeNotImplemented, err.Error())
			return
		}
		h.fail(w, r, http.StatusBadRequest, wire.CodeInvalidName, err.Error())
		return
	}
	methods := httpx.StreamMethods{Create: h.create, Append: h.append, Read: h.read, Head: h.head, Delete: h.delete}
	if !methods.Serve(w, r, name) {
		hd.Set("Allow", corsAllowMethods)
		h.fail(w, r, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, r.Method+" is not supported on a stream")
	}
}

var errReservedDS = errors.New("the Durable Streams subscription APIs (" + Prefix + "/__ds/) are not implemented")

// streamName maps the request path /v1/stream/{rest} to the PicoMQ stream
// name /{rest}, checked against PicoMQ's name grammar.
func streamName(path string) (string, error) {
	rest, ok := strings.CutPrefix(path, Prefix)
	if !ok || !strings.HasPrefix(rest, "/") {
		return "", fmt.Errorf("stream URLs are %s/{name}", Prefix)
	}
	if rest == "/__ds" || strings.HasPrefix(rest, "/__ds/") {
		return "", errReservedDS
	}
	if err := stream.ValidateName(rest); err != nil {
		return "", fmt.Errorf("stream name %q: %v", truncateForMessage(rest), err)
	}
	return rest, nil
}

// fail writes an error. HEAD responses never have a body.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	h.failDetail(w, r, status, wire.ErrorDetail{Code: code, Message: msg})
}

func (h *Handler) failDetail(w http.ResponseWriter, r *http.Request, status int, d wire.ErrorDetail) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		httpx.SetRetryAfter(hd, status)
		w.WriteHeader(status)
		return
	}
	httpx.WriteErrorDetail(w, status, d)
}
