package pico

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// server is the Pico handler over a real stream service (real WAL, real
// etcd) behind a real loopback listener, so live reads, flushing and
// connection handling are exercised as in production.
type server struct {
	t   testing.TB
	env *streamtest.Env
	cfg Config
	srv *httptest.Server
	URL string
}

func newServer(t testing.TB, cfg Config, scfg stream.Config) *server {
	t.Helper()
	s := &server{t: t, env: streamtest.New(t, scfg), cfg: cfg}
	s.start()
	return s
}

func (s *server) start() {
	s.srv = httptest.NewServer(New(s.env.Svc, s.cfg))
	s.URL = s.srv.URL
	s.t.Cleanup(s.srv.Close)
}

// restart restarts the stream service (clean WAL close, recovery) and
// serves it again on a new listener.
func (s *server) restart() {
	s.srv.Close()
	s.env.Restart()
	s.start()
}

type resp struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r resp) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("body %q is not the expected JSON: %v", r.Body, err)
	}
}

// do sends a request; headers are name, value pairs.
func (s *server) do(method, path string, body []byte, headers ...string) resp {
	s.t.Helper()
	r, err := s.try(context.Background(), method, path, body, headers...)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (s *server) try(ctx context.Context, method, path string, body []byte, headers ...string) (resp, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		return resp{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return resp{}, err
	}
	return resp{Status: res.StatusCode, Header: res.Header, Body: b}, nil
}

func wantStatus(t testing.TB, r resp, status int, what string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, r.Status, status, strings.TrimSpace(string(r.Body)))
	}
}

// wantError checks status and the JSON error body's code (and that a
// message is present), and returns the decoded detail.
func wantError(t testing.TB, r resp, status int, code, what string) wire.ErrorDetail {
	t.Helper()
	wantStatus(t, r, status, what)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, wire.MediaJSON) {
		t.Fatalf("%s: error Content-Type %q, want JSON", what, ct)
	}
	var body wire.ErrorBody
	r.json(t, &body)
	if body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("%s: error %s, want code %q and a message", what, r.Body, code)
	}
	return body.Error
}

func wantHeader(t testing.TB, r resp, name, value, what string) {
	t.Helper()
	if got := r.Header.Get(name); got != value {
		t.Fatalf("%s: %s = %q, want %q (headers %v)", what, name, got, value, r.Header)
	}
}

// jsonRec is a record of a JSON read.
type jsonRec struct {
	Offset        int64             `json:"offset"`
	Timestamp     int64             `json:"timestamp"`
	Key           *string           `json:"key"`
	KeyEncoding   string            `json:"keyEncoding"`
	Value         *string           `json:"value"`
	ValueEncoding string            `json:"valueEncoding"`
	Headers       []wire.JSONHeader `json:"headers"`
}

func (s *server) readJSON(path string) ([]jsonRec, resp) {
	s.t.Helper()
	r := s.do("GET", path, nil)
	wantStatus(s.t, r, 200, "GET "+path)
	var recs []jsonRec
	r.json(s.t, &recs)
	return recs, r
}

func (s *server) create(name, ct string, headers ...string) resp {
	s.t.Helper()
	r := s.do("PUT", name, nil, append([]string{"Content-Type", ct}, headers...)...)
	if r.Status != 201 {
		s.t.Fatalf("create %s: %d %s", name, r.Status, r.Body)
	}
	return r
}

// within fails the test if f does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not finish within %s", what, d)
	}
}
