// Package httpx is the HTTP plumbing shared by the stream-listener frontends
// (Pico, Durable Streams): JSON error bodies, request metrics, access logs and
// panic recovery. It knows nothing about streams.
package httpx

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// WriteError writes {"error":{"code","message"}} with status. Statuses 429
// and 503 carry Retry-After so well-behaved clients back off.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteErrorDetail(w, status, wire.ErrorDetail{Code: code, Message: msg})
}

// WriteErrorDetail is WriteError with the detail's optional fields (the
// numbers a client acts on, see Detail).
func WriteErrorDetail(w http.ResponseWriter, status int, d wire.ErrorDetail) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	SetRetryAfter(h, status)
	WriteJSON(w, status, wire.ErrorBody{Error: d})
}

// SetRetryAfter gives a 429 or 503 a Retry-After of one second, unless the
// handler set its own.
func SetRetryAfter(h http.Header, status int) {
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
}

// WriteJSON writes v as a JSON body with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", wire.MediaJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Metrics are the request metrics of one listener.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight prometheus.Gauge
	byLabels sync.Map // seriesKey -> *series: the vectors' children, resolved once
}

type seriesKey struct {
	method, route string
	code          int
}

// series is the counter and histogram of one (method, route, code).
type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// series returns the children for one request's labels; after the first
// request of a kind it is one map read, with no label hashing or
// formatting of the status code. Only standard methods and valid codes
// are kept, so a client inventing methods cannot grow the cache.
func (m *Metrics) series(method, route string, code int) *series {
	k := seriesKey{method, route, code}
	if o, ok := m.byLabels.Load(k); ok {
		return o.(*series)
	}
	o := &series{
		requests: m.requests.WithLabelValues(method, route, strconv.Itoa(code)),
		duration: m.duration.WithLabelValues(method, route),
	}
	if standardMethod(method) && code >= 100 && code <= 999 {
		m.byLabels.Store(k, o)
	}
	return o
}

func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// NewMetrics registers the HTTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_http_requests_total",
			Help: "HTTP requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "picomq_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route (live reads included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}, []string{"method", "route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "picomq_http_inflight_requests",
			Help: "HTTP requests being served.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.inflight)
	return m
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// WrittenStatus is the status sent, 0 before any.
func (w *statusWriter) WrittenStatus() int { return w.status }

// Flush lets streaming responses (SSE) flush through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Instrument wraps h with metrics, a debug access log, and panic recovery: a
// panic is a bug, so it is logged with the request and answered with a 500
// instead of killing the connection silently.
func Instrument(h http.Handler, route func(*http.Request) string, m *Metrics, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// A writer that knows its status (the HTTP/1.1 fast path's) is
		// used as it is: no wrapper allocated per request.
		sr, direct := w.(statusReporter)
		if !direct {
			sw := &statusWriter{ResponseWriter: w}
			w, sr = sw, sw
		}
		rt := route(r)
		m.inflight.Inc()
		defer func() {
			m.inflight.Dec()
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", p)
				if sr.WrittenStatus() == 0 {
					WriteError(w, http.StatusInternalServerError, wire.CodeInternal, "internal error")
				}
			}
			code := sr.WrittenStatus()
			if code == 0 {
				code = http.StatusOK
			}
			d := time.Since(start)
			o := m.series(r.Method, rt, code)
			o.requests.Inc()
			o.duration.Observe(d.Seconds())
			if log.Enabled(r.Context(), slog.LevelDebug) {
				log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", code, "dur", d)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// statusReporter is a ResponseWriter that reports the status it sent
// (0 before any), as statusWriter records it.
type statusReporter interface {
	http.ResponseWriter
	WrittenStatus() int
}

// ReadBody reads the request body into dst[:0], at most limit bytes (a
// larger body is an *http.MaxBytesError). With a Content-Length the buffer
// is sized once (one spare byte, so seeing EOF does not grow it) and no
// limiting reader is needed: net/http stops the body at its length, which
// the caller has checked against limit. The body is closed once read to
// its end, so net/http does not set up a discard of the rest after the
// handler.
func ReadBody(w http.ResponseWriter, r *http.Request, dst []byte, limit int64) ([]byte, error) {
	var rd io.Reader = r.Body
	if r.ContentLength < 0 || r.ContentLength > limit {
		rd = http.MaxBytesReader(w, r.Body, limit)
	} else if int64(cap(dst)) <= r.ContentLength {
		dst = make([]byte, 0, r.ContentLength+1)
	}
	dst = dst[:0]
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := rd.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			_ = r.Body.Close()
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// ParseUint accepts plain decimal digits only: no sign, no spaces, no
// leading "+", so two spellings of one number cannot exist. Both HTTP
// protocols read offsets and producer numbers with it.
func ParseUint(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a non-negative decimal integer")
		}
	}
	return strconv.ParseUint(s, 10, 64)
}
