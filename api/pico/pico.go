// Package pico serves the Pico HTTP protocol, PicoMQ's native API: a stream
// is a URL path and the standard methods keep their meaning (PUT creates, POST
// appends, GET reads, HEAD describes, DELETE deletes). All position state
// travels in Pico-* response headers; the server keeps nothing per consumer.
//
// The handler is a thin facade: it parses HTTP, calls the stream service and
// renders the result. docs/api.md is the reference for every header and
// status code used here.
package pico

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/record"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Service is what the Pico frontend needs from the stream service.
type Service interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	Append(ctx context.Context, name string, recs []record.Record) (stream.AppendResult, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	Delete(ctx context.Context, name string) error
}

// Config tunes the handler. Zero values get defaults.
type Config struct {
	// MaxAppendBytes bounds one append request body (413 above it).
	MaxAppendBytes int64
	Logger         *slog.Logger
}

// Handler serves the Pico protocol.
type Handler struct {
	svc Service
	cfg Config
}

// New returns a Pico handler over svc.
func New(svc Service, cfg Config) *Handler {
	if cfg.MaxAppendBytes <= 0 {
		cfg.MaxAppendBytes = 4 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Handler{svc: svc, cfg: cfg}
}

// Register mounts the stream routes on r. They catch every path, so callers
// register their own root routes (/healthz, /metrics, …) first.
func (h *Handler) Register(r *mux.Router) {
	r.PathPrefix("/_").HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		httpx.WriteError(w, http.StatusNotFound, wire.CodeNotFoundRoute, "no such endpoint: "+req.URL.Path)
	})
	r.PathPrefix("/").HandlerFunc(h.serveStream)
}

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Path
	switch r.Method {
	case http.MethodPut:
		h.create(w, r, name)
	case http.MethodPost:
		h.append(w, r, name)
	case http.MethodGet:
		h.read(w, r, name)
	case http.MethodHead:
		h.head(w, r, name)
	case http.MethodDelete:
		h.delete(w, r, name)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, DELETE")
		httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, r.Method+" is not supported on a stream")
	}
}

// classify maps stream-service errors onto an HTTP status and error code.
// ok=false means the error is not a known client or availability condition:
// a server fault, answered with 500 and logged.
func classify(err error) (status int, code string, ok bool) {
	switch {
	case errors.Is(err, stream.ErrReservedName):
		return http.StatusForbidden, wire.CodeReservedName, true
	case errors.Is(err, stream.ErrInvalidName):
		return http.StatusBadRequest, wire.CodeInvalidName, true
	case errors.Is(err, stream.ErrNotFound):
		return http.StatusNotFound, wire.CodeNotFound, true
	case errors.Is(err, stream.ErrConflict):
		return http.StatusConflict, wire.CodeExists, true
	case errors.Is(err, stream.ErrOffsetOutOfRange):
		return http.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange, true
	case errors.Is(err, stream.ErrInvalidArgument), errors.Is(err, record.ErrInvalid):
		return http.StatusBadRequest, wire.CodeBadRequest, true
	case errors.Is(err, stream.ErrUnavailable):
		return http.StatusServiceUnavailable, wire.CodeUnavailable, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or its deadline passed: the outcome of a
		// write is unknown, which 503 tells a retrying idempotent client.
		return http.StatusServiceUnavailable, wire.CodeRequestTimeout, true
	}
	return http.StatusInternalServerError, wire.CodeInternal, false
}

func (h *Handler) writeServiceError(w http.ResponseWriter, r *http.Request, err error) {
	status, code, ok := classify(err)
	msg := err.Error()
	if !ok {
		h.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error"
	}
	httpx.WriteError(w, status, code, msg)
}

// streamInfoJSON is the JSON description of a stream returned by create.
type streamInfoJSON struct {
	Name        string    `json:"name"`
	ContentType string    `json:"contentType"`
	CreatedAt   time.Time `json:"createdAt"`
	StartOffset int64     `json:"startOffset"`
	NextOffset  int64     `json:"nextOffset"`
}

func setInfoHeaders(hd http.Header, info stream.Info) {
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(info.NextOffset, 10))
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(info.StartOffset, 10))
	hd.Set(wire.HeaderStreamID, strconv.FormatUint(info.ID, 10))
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, name string) {
	// A create carries no records; drain a small body so keep-alive works
	// and reject a large one rather than read it.
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16)); err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	info, created, err := h.svc.Create(r.Context(), name, stream.CreateOptions{ContentType: r.Header.Get("Content-Type")})
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
	httpx.WriteJSON(w, status, streamInfoJSON{
		Name: info.Name, ContentType: info.ContentType, CreatedAt: info.CreatedAt,
		StartOffset: info.StartOffset, NextOffset: info.NextOffset,
	})
}

// appendAck is the JSON body of a successful append.
type appendAck struct {
	Offset     int64 `json:"offset"`
	NextOffset int64 `json:"nextOffset"`
	Timestamp  int64 `json:"timestamp"`
}

func (h *Handler) append(w http.ResponseWriter, r *http.Request, name string) {
	info, err := h.svc.Head(r.Context(), name)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct != "" && !stream.SameContentType(ct, info.ContentType) {
		httpx.WriteError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMedia,
			fmt.Sprintf("stream %s holds %q; the request body is %q", name, info.ContentType, ct))
		return
	}
	if r.ContentLength > h.cfg.MaxAppendBytes {
		httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
			fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, h.cfg.MaxAppendBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxAppendBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
				fmt.Sprintf("body exceeds the limit of %d bytes", h.cfg.MaxAppendBytes))
			return
		}
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	if isJSON(info.ContentType) && !jsonValid(body) {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "body is not valid JSON, but the stream holds "+info.ContentType)
		return
	}
	rec := record.Record{Value: body}
	if k, ok := r.Header[wire.HeaderKey]; ok && len(k) > 0 {
		rec.Key = []byte(k[0])
	}
	ack, err := h.svc.Append(r.Context(), name, []record.Record{rec})
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set(wire.HeaderOffset, strconv.FormatInt(ack.FirstOffset, 10))
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(ack.NextOffset, 10))
	hd.Set(wire.HeaderTimestamp, strconv.FormatInt(ack.Timestamp, 10))
	httpx.WriteJSON(w, http.StatusOK, appendAck{Offset: ack.FirstOffset, NextOffset: ack.NextOffset, Timestamp: ack.Timestamp})
}

// isJSON reports whether a content type is JSON (application/json or a
// +json structured syntax suffix).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func parseNonNegative(r *http.Request, key string) (int64, bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, true, fmt.Errorf("%s=%q is not a non-negative integer", key, v)
	}
	return n, true, nil
}

func (h *Handler) read(w http.ResponseWriter, r *http.Request, name string) {
	offset, _, err := parseNonNegative(r, wire.QueryOffset)
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeInvalidOffset, err.Error())
		return
	}
	limit, _, err := parseNonNegative(r, wire.QueryLimit)
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	maxBytes, _, err := parseNonNegative(r, wire.QueryMaxBytes)
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	enc := r.URL.Query().Get(wire.QueryEncoding)
	if enc != "" && enc != wire.EncodingUTF8 && enc != wire.EncodingBase64 {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("encoding=%q: want utf8 or base64", enc))
		return
	}
	res, err := h.svc.Read(r.Context(), name, stream.ReadOptions{
		Offset:     offset,
		MaxRecords: int(min(limit, 1<<30)),
		MaxBytes:   int(min(maxBytes, 1<<30)),
	})
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", wire.MediaJSON)
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(res.NextOffset, 10))
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(res.StartOffset, 10))
	hd.Set(wire.HeaderUpToDate, strconv.FormatBool(res.UpToDate))
	hd.Set("Cache-Control", "no-store")
	buf := appendRecordsJSON(make([]byte, 0, 256+estimateSize(res.Records)), res.Records, enc == wire.EncodingBase64)
	hd.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}

func (h *Handler) head(w http.ResponseWriter, r *http.Request, name string) {
	info, err := h.svc.Head(r.Context(), name)
	if err != nil {
		// HEAD responses carry no body; the status and code header say it.
		status, code, _ := classify(err)
		w.Header().Set("Pico-Error-Code", code)
		w.WriteHeader(status)
		return
	}
	setInfoHeaders(w.Header(), info)
	w.Header().Set("Content-Type", info.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, name string) {
	if err := h.svc.Delete(r.Context(), name); err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

