package picomq_test

// The SDK's tests and examples run against real `picomq serve` processes,
// built from the server module (the repository root; the client is a module
// of its own) in TestMain (PICOMQ_TEST_BIN points at a prebuilt
// binary instead). Nothing here imports a server package: the server is a
// child process spoken to over HTTP.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// exampleAddr is where the examples expect a Pico node: the address in the
// package documentation, so the documented snippet runs unchanged.
const exampleAddr = "127.0.0.1:4437"

var (
	picomqs *testproc.Picomqs

	// picoURL is a Pico node on exampleAddr, shared by tests and examples;
	// dsURL a Durable Streams node. Both end SSE connections after 1s, so
	// every subscription test also exercises reconnecting.
	picoURL string
	dsURL   string

	sharedMu      sync.Mutex
	sharedServers []*server
)

func TestMain(m *testing.M) {
	testproc.PicomqMain("sdk", func(p *testproc.Picomqs) int { return testMain(m, p) })
}

func testMain(m *testing.M, p *testproc.Picomqs) int {
	picomqs = p
	defer func() {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		for _, s := range sharedServers {
			s.Kill()
		}
	}()
	// Benchmarks alone (-run '^$', as make bench-micro does) do not need the
	// documented address.
	flag.Parse()
	addr := exampleAddr
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "^$" {
		addr = ""
	}
	pico, err := startServer(addr, "--sse-timeout", "1s")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sdk tests: the examples need a Pico node on %s (the documented address): %v\n", exampleAddr, err)
		return 1
	}
	ds, err := startServer("", "--protocol", "durable-streams", "--sse-timeout", "1s")
	if err != nil {
		pico.Kill()
		fmt.Fprintln(os.Stderr, "sdk tests:", err)
		return 1
	}
	sharedMu.Lock()
	sharedServers = append(sharedServers, pico, ds)
	sharedMu.Unlock()
	picoURL, dsURL = pico.URL, ds.URL
	code := m.Run()
	if code != 0 {
		for _, s := range []*server{pico, ds} {
			fmt.Fprintf(os.Stderr, "=== log of %s (last 4 KiB) ===\n%s\n", s.URL, tail(s.Logs.String(), 4096))
		}
	}
	return code
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

var freeAddr = testproc.FreeAddr

// server is one `picomq serve` child process.
type server struct {
	URL string
	*testproc.Proc
}

// startServer runs `picomq serve` on addr (a free port if empty) with a
// fresh data dir and waits until /readyz answers 200.
func startServer(addr string, extra ...string) (*server, error) {
	if addr == "" {
		var err error
		if addr, err = freeAddr(); err != nil {
			return nil, err
		}
	} else if ln, err := net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("%s is not free: %v", addr, err)
	} else {
		ln.Close()
	}
	// Serve's Pdeathsig: if the test binary dies (an example's log.Fatal
	// exits at once), the server goes with it instead of holding the
	// example port.
	p, err := picomqs.Serve(addr, 60*time.Second, append([]string{"--kafka-addr", "off",
		"--node-id", "sdk-test", "--log-level", "warn"}, extra...)...)
	if err != nil {
		return nil, err
	}
	return &server{URL: "http://" + addr, Proc: p}, nil
}

// startTestServer is startServer for one test, killed at its end.
func startTestServer(t testing.TB, addr string, extra ...string) *server {
	t.Helper()
	s, err := startServer(addr, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("=== log of %s ===\n%s", s.URL, tail(s.Logs.String(), 8000))
		}
	})
	return s
}

// protocols runs f as a subtest per protocol against the shared servers.
func protocols(t *testing.T, f func(t *testing.T, c picomq.Client)) {
	for _, p := range []struct {
		name string
		new  func(string, ...picomq.Option) (picomq.Client, error)
		url  string
	}{
		{"pico", picomq.NewPico, picoURL},
		{"ds", picomq.NewDurableStreams, dsURL},
	} {
		t.Run(p.name, func(t *testing.T) {
			c, err := p.new(p.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			f(t, c)
		})
	}
}

// newClient returns a client of protocol p for base.
func newClient(t testing.TB, p picomq.Protocol, base string, opts ...picomq.Option) picomq.Client {
	t.Helper()
	c, err := picomq.New(p, base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var nameSeq struct {
	sync.Mutex
	n int
}

// uniqueName returns a stream name no other test uses.
func uniqueName(t testing.TB) string {
	nameSeq.Lock()
	nameSeq.n++
	n := nameSeq.n
	nameSeq.Unlock()
	base := strings.NewReplacer("/", "-", " ", "_", "#", "_").Replace(t.Name())
	return fmt.Sprintf("/sdk-test/%s/%d-%d", base, time.Now().UnixNano()%1e9, n)
}

// seenRequest is what a proxy observed of one request.
type seenRequest struct {
	Method      string
	Path        string
	Query       url.Values
	Auth        string
	LastEventID string
	Body        []byte
	ReqHeader   http.Header // the request's headers
	Status      int         // status of the forwarded response (0 if none)
	Header      http.Header // its headers
}

// proxy is a reverse proxy in front of a real server that records every
// request and can misbehave on purpose.
type proxy struct {
	*httptest.Server
	target *url.URL
	rp     *httputil.ReverseProxy

	mu   sync.Mutex
	seen []seenRequest
	// intercept, when set, may answer a request itself (return true).
	// Called with the request body already read.
	intercept func(w http.ResponseWriter, r *http.Request, body []byte) bool
	// dropResponse, when set and returning true, forwards the request
	// but then cuts the client's connection instead of answering.
	dropResponse func(r *http.Request, n int) bool
	// cutSSEAfter, when > 0, ends an SSE response abruptly after that many
	// data events (once per request for which cutSSE returns true).
	cutSSE func(r *http.Request) int
	// arrived gets every request as it arrives (non-blocking).
	arrived chan seenRequest
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{target: u, arrived: make(chan seenRequest, 1024)}
	p.rp = newReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

// newProxyTo starts a proxy whose target is set later (setTarget).
func newProxyTo(t testing.TB) *proxy {
	return newProxy(t, "http://127.0.0.1:1")
}

func (p *proxy) setTarget(target string) {
	u, _ := url.Parse(target)
	p.mu.Lock()
	p.target = u
	p.rp = newReverseProxy(u)
	p.mu.Unlock()
}

// newReverseProxy streams responses (SSE) and keeps quiet about requests
// the client abandons on purpose (cancelled long-polls).
func newReverseProxy(u *url.URL) *httputil.ReverseProxy {
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return rp
}

func (p *proxy) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenRequest(nil), p.seen...)
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	sr := seenRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Auth: r.Header.Get("Authorization"),
		LastEventID: r.Header.Get("Last-Event-ID"), Body: body, ReqHeader: r.Header.Clone()}
	p.mu.Lock()
	idx := len(p.seen)
	p.seen = append(p.seen, sr)
	intercept, drop, cut, rp, target := p.intercept, p.dropResponse, p.cutSSE, p.rp, p.target
	p.mu.Unlock()
	select {
	case p.arrived <- sr:
	default:
	}
	if intercept != nil && intercept(w, r, body) {
		return
	}
	record := func(status int, h http.Header) {
		p.mu.Lock()
		p.seen[idx].Status, p.seen[idx].Header = status, h.Clone()
		p.mu.Unlock()
	}
	if drop != nil && drop(r, idx) {
		// Forward, let the server act, then lose the answer.
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target.String()+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			record(resp.StatusCode, resp.Header)
		}
		panic(http.ErrAbortHandler)
	}
	if cut != nil {
		if n := cut(r); n > 0 {
			p.serveCutSSE(w, r, target, n, record)
			return
		}
	}
	// The status is recorded when the header is written, before the
	// client can see the response.
	rw := &recordingWriter{ResponseWriter: w, onHeader: record}
	rp.ServeHTTP(rw, r)
}

// serveCutSSE relays an SSE response and aborts the connection after n
// complete data events.
func (p *proxy) serveCutSSE(w http.ResponseWriter, r *http.Request, target *url.URL, n int, record func(int, http.Header)) {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, target.String()+r.URL.RequestURI(), nil)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	record(resp.StatusCode, resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	dataEvents := 0
	for {
		k, err := resp.Body.Read(tmp)
		buf = append(buf, tmp[:k]...)
		// Relay complete events only; count data events.
		for {
			i := bytes.Index(buf, []byte("\n\n"))
			if i < 0 {
				break
			}
			ev := buf[:i+2]
			w.Write(ev)
			_ = rc.Flush()
			if bytes.HasPrefix(ev, []byte("event: data")) || bytes.HasPrefix(ev, []byte("event:data")) {
				dataEvents++
			}
			buf = buf[i+2:]
			if dataEvents >= n {
				// Half an event, then the connection dies.
				if len(buf) > 0 {
					w.Write(buf[:len(buf)/2])
					_ = rc.Flush()
				}
				panic(http.ErrAbortHandler)
			}
		}
		if err != nil {
			return
		}
	}
}

type recordingWriter struct {
	http.ResponseWriter
	status   int
	onHeader func(int, http.Header)
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.onHeader(code, w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// waitArrival waits for a request matching match to reach the proxy.
func (p *proxy) waitArrival(t testing.TB, within time.Duration, match func(seenRequest) bool) seenRequest {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case r := <-p.arrived:
			if match(r) {
				return r
			}
		case <-timer.C:
			t.Fatalf("no matching request reached the proxy within %v; saw %d requests", within, len(p.requests()))
		}
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createStream creates a stream of content type ct under a name no other
// test uses, and returns the name.
func createStream(t testing.TB, ctx context.Context, c picomq.Client, ct string) string {
	t.Helper()
	name := uniqueName(t)
	if _, err := c.Stream(name).Create(ctx, ct, 0); err != nil {
		t.Fatal(err)
	}
	return name
}

// producerSeqHeader is the request header that carries a producer's
// sequence number in protocol p.
func producerSeqHeader(p picomq.Protocol) string {
	if p == picomq.ProtocolDurableStreams {
		return "Producer-Seq"
	}
	return "Pico-Producer-Seq"
}

// checkCounting asserts that recs are the n records "0", "1", ... the
// producer tests send, each once and in order; what says why n.
func checkCounting(t testing.TB, recs []picomq.Record, n int, what string) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("%d records, want %d%s", len(recs), n, what)
	}
	for i, r := range recs {
		if string(r.Body) != fmt.Sprint(i) {
			t.Fatalf("record %d: %s", i, r.Body)
		}
	}
}
