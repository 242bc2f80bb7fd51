package h1lane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testHandler answers the paths the tests use. Each response says
// whether the lane served it (net/http puts its server in the context,
// the lane does not).
type testHandler struct {
	entered chan struct{} // /block and /poll: the handler runs
	release chan struct{} // /block and /poll: let it finish
	bodyErr chan error    // /echo: the body's read error
}

func newTestHandler() *testHandler {
	return &testHandler{entered: make(chan struct{}, 16), release: make(chan struct{}), bodyErr: make(chan error, 16)}
}

func (h *testHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Context().Value(http.ServerContextKey) == nil {
		w.Header().Set("Lane", "1")
	}
	switch r.URL.Path {
	case "/block", "/poll":
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-time.After(20 * time.Second):
		}
		fallthrough
	case "/echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			select {
			case h.bodyErr <- err:
			default:
			}
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.RequestURI(), b)
	case "/big":
		_, _ = io.ReadAll(r.Body)
		for i := 0; i < 10; i++ {
			_, _ = w.Write(bytes.Repeat([]byte{'a' + byte(i)}, 1024))
		}
	case "/declared":
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Length", "10240")
		_, _ = w.Write(bytes.Repeat([]byte{'d'}, 10240))
	case "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
	case "/deadline":
		// What the node's --body-timeout does.
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, err := io.ReadAll(r.Body)
		select {
		case h.bodyErr <- err:
		default:
		}
	case "/inject":
		w.Header().Set("X-Inject", "a\r\nEvil: 1")
		w.Header().Set("Bad Name", "x")
	case "/nocontent":
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

type rig struct {
	addr string
	lane *Server // nil: plain net/http
	srv  *http.Server
}

const testMaxHeaderBytes = 1 << 10

// startRig serves h on loopback as the node does: with the lane in front
// of net/http (lane true) or net/http alone, h2c on.
func startRig(t testing.TB, h http.Handler, lane bool, timeouts time.Duration) *rig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	rg := &rig{addr: ln.Addr().String(), srv: &http.Server{Handler: h, Protocols: protocols,
		MaxHeaderBytes: testMaxHeaderBytes, ReadHeaderTimeout: timeouts, IdleTimeout: timeouts}}
	srvLn := ln
	if lane {
		rg.lane = New(Config{Handler: h, MaxHeaderBytes: testMaxHeaderBytes, ReadHeaderTimeout: timeouts, IdleTimeout: timeouts})
		srvLn = rg.lane.HandOff()
		go func() { _ = rg.lane.Serve(ln) }()
	}
	go func() { _ = rg.srv.Serve(srvLn) }()
	t.Cleanup(func() { rg.shutdown(context.Background()) })
	return rg
}

func (rg *rig) shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	laneErr := make(chan error, 1)
	go func() {
		if rg.lane != nil {
			laneErr <- rg.lane.Shutdown(ctx)
			return
		}
		laneErr <- nil
	}()
	return errors.Join(rg.srv.Shutdown(ctx), <-laneErr)
}

func dial(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func post(path, body string, extra ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: t\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n" +
		strings.Join(append(extra, ""), "\r\n") + "\r\n" + body
}

// readResp reads one response and its body.
func readResp(t testing.TB, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

func TestPipelinedPosts(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	var reqs string
	for i := range 5 {
		reqs += post(fmt.Sprintf("/echo?i=%d", i), strings.Repeat("x", i*300))
	}
	if _, err := io.WriteString(c, reqs); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		resp, body := readResp(t, br, "POST")
		want := fmt.Sprintf("POST /echo?i=%d %q", i, strings.Repeat("x", i*300))
		if resp.StatusCode != 200 || body != want || resp.Header.Get("Lane") != "1" {
			t.Fatalf("response %d: %d lane=%q %q, want 200 from the lane %q", i, resp.StatusCode, resp.Header.Get("Lane"), body, want)
		}
		if resp.ContentLength != int64(len(want)) || resp.Header.Get("Date") == "" || resp.Close {
			t.Fatalf("response %d: length %d, Date %q, close %v", i, resp.ContentLength, resp.Header.Get("Date"), resp.Close)
		}
	}
}

func TestPostsThenLongPollHandedOff(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, post("/echo", "a"))
	if resp, _ := readResp(t, br, "POST"); resp.Header.Get("Lane") != "1" {
		t.Fatal("first POST not served by the lane")
	}
	_, _ = io.WriteString(c, "GET /poll?live=long-poll HTTP/1.1\r\nHost: t\r\n\r\n")
	<-h.entered
	close(h.release)
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 200 || resp.Header.Get("Lane") != "" || body != `GET /poll?live=long-poll ""` {
		t.Fatalf("long-poll: %d lane=%q %q", resp.StatusCode, resp.Header.Get("Lane"), body)
	}
	// The connection stays with net/http.
	_, _ = io.WriteString(c, post("/echo", "b"))
	if resp, body := readResp(t, br, "POST"); resp.Header.Get("Lane") != "" || body != `POST /echo "b"` {
		t.Fatalf("POST after hand-off: lane=%q %q", resp.Header.Get("Lane"), body)
	}
	if n := rg.lane.numConns(); n != 0 {
		t.Fatalf("lane still tracks %d connections after the hand-off", n)
	}
}

func TestChunkedPostHandedOff(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	resp, body := readResp(t, br, "POST")
	if resp.StatusCode != 200 || resp.Header.Get("Lane") != "" || body != `POST /echo "abcde"` {
		t.Fatalf("chunked: %d lane=%q %q", resp.StatusCode, resp.Header.Get("Lane"), body)
	}
}

func TestExpectContinueHandedOff(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	// net/http sends 100 Continue when the handler starts reading.
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim response %q, %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q", blank)
	}
	_, _ = io.WriteString(c, "hello")
	resp, body := readResp(t, br, "POST")
	if resp.StatusCode != 200 || resp.Header.Get("Lane") != "" || body != `POST /echo "hello"` {
		t.Fatalf("expect: %d lane=%q %q", resp.StatusCode, resp.Header.Get("Lane"), body)
	}
}

func TestH2CPriorKnowledgeHandedOff(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: protocols}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 3 {
		resp, err := client.Post("http://"+rg.addr+"/echo", "text/plain", strings.NewReader("h2"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != `POST /echo "h2"` {
			t.Fatalf("request %d: %s %d %q", i, resp.Proto, resp.StatusCode, b)
		}
	}
}

// TestMalformedAsBefore sends requests net/http rejects itself to the
// lane and to net/http alone: the answers are the same bytes, net/http's
// own plain-text answer with Connection: close (docs/api.md lists these;
// no layer rewrites response bytes).
func TestMalformedAsBefore(t *testing.T) {
	lane := startRig(t, newTestHandler(), true, 10*time.Second)
	plain := startRig(t, newTestHandler(), false, 10*time.Second)
	cases := []struct {
		name, req string
		status    int
	}{
		{"bad request line", "GARBAGE\r\n\r\n", 400},
		{"bad header name", "POST /echo HTTP/1.1\r\nHost: t\r\nBad Name: v\r\nContent-Length: 0\r\n\r\n", 400},
		{"no host", "POST /echo HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400},
		{"bad length", "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n", 400},
		{"oversized head", "POST /echo HTTP/1.1\r\nHost: t\r\nX-Big: " + strings.Repeat("b", 8<<10) + "\r\n\r\n", 431},
		{"unknown transfer encoding", "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, rg := range []*rig{lane, plain} {
				c, _ := dial(t, rg.addr)
				_, _ = io.WriteString(c, tc.req)
				_ = c.(*net.TCPConn).CloseWrite()
				b, _ := io.ReadAll(c)
				got[i] = string(b)
			}
			if got[0] != got[1] {
				t.Fatalf("lane answered\n%q\nnet/http alone\n%q", got[0], got[1])
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got[0])), nil)
			if err != nil {
				t.Fatalf("%q: %v", got[0], err)
			}
			if resp.StatusCode != tc.status || !resp.Close {
				t.Fatalf("status %d close %v, want %d and Connection: close", resp.StatusCode, resp.Close, tc.status)
			}
		})
	}
}

// TestResponseHeaderSanitised: CR and LF in a handler's header value
// cannot start a header of their own; an invalid name is not sent.
func TestResponseHeaderSanitised(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, post("/inject", ""))
	resp, _ := readResp(t, br, "POST")
	if resp.Header.Get("Lane") != "1" || resp.Header.Get("Evil") != "" || resp.Header.Get("X-Inject") != "a  Evil: 1" || len(resp.Header["Bad Name"]) != 0 {
		t.Fatalf("header %v", resp.Header)
	}
}

// TestNoWaitForWhatIsNotSimple: a request the lane does not serve goes
// to net/http as soon as that is clear, not after the head timeout: a
// bare-LF head (which net/http accepts) and a GET are answered while the
// client keeps its connection open.
func TestNoWaitForWhatIsNotSimple(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, time.Minute)
	for _, req := range []string{
		"POST /echo HTTP/1.1\nHost: t\nContent-Length: 2\n\nlf",
		"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n",
	} {
		c, br := dial(t, rg.addr)
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = io.WriteString(c, req)
		resp, body := readResp(t, br, "POST")
		if resp.StatusCode != 200 || resp.Header.Get("Lane") != "" || !strings.HasSuffix(body, "/echo \"lf\"") && !strings.HasPrefix(body, "GET") {
			t.Fatalf("%q: %d lane=%q %q", req, resp.StatusCode, resp.Header.Get("Lane"), body)
		}
	}
}

// TestTimeouts: a head that stops half way is cut after the head
// timeout, an idle connection after the idle timeout, and a body that
// stalls at the read deadline a handler set through
// http.ResponseController.
func TestTimeouts(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 200*time.Millisecond)
	for _, req := range []string{"POST /echo HTTP/1.1\r\nHost", post("/echo", "idle")} {
		c, br := dial(t, rg.addr)
		_, _ = io.WriteString(c, req)
		start := time.Now()
		b, err := io.ReadAll(br)
		if err != nil {
			t.Fatalf("%q: %v after %s (want the server to close)", req, err, time.Since(start))
		}
		if strings.Contains(req, "idle") != strings.Contains(string(b), "idle") {
			t.Fatalf("%q: got %q", req, b)
		}
	}
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, "POST /deadline HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly this")
	select {
	case err := <-h.bodyErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("body error %v, want a timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the body read never timed out")
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("after the body timeout: %v (want the server to close)", err)
	}
}

// countingListener counts the read deadlines set on its connections.
type countingListener struct {
	net.Listener
	deadlines *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, deadlines: l.deadlines}, nil
}

type countingConn struct {
	net.Conn
	deadlines *atomic.Int64
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.deadlines.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// TestOneDeadlinePerRequest: a request whose head and body arrive with
// its first bytes costs the socket one read deadline (the idle wait's),
// not three (idle, head, and the body deadline the handler sets), while a
// body that has to be waited for still gets the handler's deadline
// (TestTimeouts).
func TestOneDeadlinePerRequest(t *testing.T) {
	h := newTestHandler()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var deadlines atomic.Int64
	lane := New(Config{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second})
	go func() { _ = lane.Serve(countingListener{Listener: ln, deadlines: &deadlines}) }()
	defer lane.Close()
	c, br := dial(t, ln.Addr().String())
	const requests = 20
	for i := range requests {
		// /deadline sets a read deadline through http.ResponseController,
		// as the node's --body-timeout does; its body is all there.
		if _, err := io.WriteString(c, post("/deadline", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if resp, _ := readResp(t, br, "POST"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if err := <-h.bodyErr; err != nil {
			t.Fatalf("body: %v", err)
		}
	}
	// The wait for the first byte of each request, and for the end of the
	// connection: one more per request would mean the head or the body
	// deadline went to the socket although nothing had to be read.
	if n := deadlines.Load(); n > requests+1 {
		t.Fatalf("%d read deadlines set for %d requests", n, requests)
	}
}

func TestConnectionClose(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, post("/echo", "bye", "Connection: close")+post("/echo", "never"))
	resp, body := readResp(t, br, "POST")
	if !resp.Close || resp.Header.Get("Lane") != "1" || body != `POST /echo "bye"` {
		t.Fatalf("close=%v lane=%q %q", resp.Close, resp.Header.Get("Lane"), body)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after Connection: close: %q, %v (want EOF)", rest, err)
	}
}

func TestClientClosesMidBody(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 10*time.Second)
	c, _ := dial(t, rg.addr)
	_, _ = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n0123456789")
	c.Close()
	select {
	case err := <-h.bodyErr:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("body error %v, want unexpected EOF", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never saw the body end")
	}
	deadline := time.Now().Add(20 * time.Second)
	for rg.lane.numConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lane keeps the broken connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestUnreadBodyDrained(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	// /nocontent never reads its body; the next request still parses.
	_, _ = io.WriteString(c, post("/nocontent", strings.Repeat("z", 5000))+post("/echo", "next"))
	if resp, _ := readResp(t, br, "POST"); resp.StatusCode != 204 || resp.ContentLength > 0 {
		t.Fatalf("first: %d length %d", resp.StatusCode, resp.ContentLength)
	}
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != `POST /echo "next"` {
		t.Fatalf("second: %d %q", resp.StatusCode, body)
	}
}

// TestUnreadLargeBodyAnswered: a handler that refuses a large body
// without reading it (413 over the append limit) gets its answer to the
// client, which is still sending, instead of a connection reset.
func TestUnreadLargeBodyAnswered(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for range 3 {
		resp, err := client.Post("http://"+rg.addr+"/nocontent", "text/plain", bytes.NewReader(make([]byte, 5<<20)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Lane") != "1" || !resp.Close {
			t.Fatalf("status %d lane=%q close=%v", resp.StatusCode, resp.Header.Get("Lane"), resp.Close)
		}
	}
}

func TestLargeAndFlushedResponses(t *testing.T) {
	rg := startRig(t, newTestHandler(), true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, post("/big", "")+post("/declared", "")+post("/sse", "")+post("/echo", "after"))
	resp, body := readResp(t, br, "POST")
	if len(resp.TransferEncoding) != 1 || len(body) != 10240 || body[0] != 'a' || body[10239] != 'j' || resp.Header.Get("Lane") != "1" {
		t.Fatalf("big: TE %v, %d bytes", resp.TransferEncoding, len(body))
	}
	resp, body = readResp(t, br, "POST")
	if resp.ContentLength != 10240 || body != strings.Repeat("d", 10240) {
		t.Fatalf("declared: length %d, %d bytes", resp.ContentLength, len(body))
	}
	resp, body = readResp(t, br, "POST")
	if resp.Header.Get("Content-Type") != "text/event-stream" || body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("flushed: %q %q", resp.Header.Get("Content-Type"), body)
	}
	if _, body = readResp(t, br, "POST"); body != `POST /echo "after"` {
		t.Fatalf("after: %q", body)
	}
}

// TestShutdownWaitsForInFlight: an append in progress is answered in
// full, an idle connection is closed, and Shutdown returns when both are
// done.
func TestShutdownWaitsForInFlight(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 10*time.Second)
	idle, idleBr := dial(t, rg.addr)
	_, _ = io.WriteString(idle, post("/echo", "i"))
	readResp(t, idleBr, "POST")
	busy, busyBr := dial(t, rg.addr)
	_, _ = io.WriteString(busy, post("/block", "payload"))
	<-h.entered
	done := make(chan error, 1)
	go func() { done <- rg.shutdown(context.Background()) }()
	// The idle connection is closed by the shutdown...
	if b, err := io.ReadAll(idleBr); err != nil || len(b) != 0 {
		t.Fatalf("idle connection: %q, %v (want EOF)", b, err)
	}
	// ...which still waits for the busy one.
	finishInFlight(t, h, busyBr, done)
}

// TestShutdownUnderLoad: Shutdown while many connections send requests
// back to back (each one idle and busy in turn, its state changing under
// Shutdown's feet) and one request is in progress: every response a
// client gets is whole, each connection ends with a close rather than a
// cut response or a hang, the request in progress is answered, and
// Shutdown returns only after it, with no connection left.
func TestShutdownUnderLoad(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 10*time.Second)
	busy, busyBr := dial(t, rg.addr)
	_, _ = io.WriteString(busy, post("/block", "payload"))
	<-h.entered

	const clients = 16
	var served atomic.Int64
	errs := make(chan error, clients)
	started := make(chan struct{}, clients)
	for i := range clients {
		c, br := dial(t, rg.addr)
		go func() {
			want := fmt.Sprintf(`POST /echo "%d"`, i)
			for n := 0; ; n++ {
				if n == 3 {
					started <- struct{}{}
				}
				if _, err := io.WriteString(c, post("/echo", fmt.Sprint(i))); err != nil {
					errs <- nil // closed between two requests
					return
				}
				if _, err := br.Peek(1); err != nil {
					if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
						errs <- nil // closed while idle (the request raced the close)
					} else {
						errs <- fmt.Errorf("client %d, request %d: %v (want a response or a close)", i, n, err)
					}
					return
				}
				resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
				if err != nil {
					errs <- fmt.Errorf("client %d, request %d: %v (want a whole response)", i, n, err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				if err != nil || string(b) != want {
					errs <- fmt.Errorf("client %d, request %d: %q, %v", i, n, b, err)
					return
				}
				served.Add(1)
				if resp.Close {
					errs <- nil
					return
				}
			}
		}()
	}
	for range clients {
		<-started
	}
	done := make(chan error, 1)
	go func() { done <- rg.lane.Shutdown(context.Background()) }()
	for range clients {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a client's connection was neither served nor closed")
		}
	}
	finishInFlight(t, h, busyBr, done)
	if n := rg.lane.numConns(); n != 0 {
		t.Fatalf("%d connections left after Shutdown", n)
	}
	t.Logf("%d requests served around the shutdown", served.Load())
}

// TestShutdownDeadlineCloses: a request that outlives the shutdown
// context is cut and its context cancelled.
func TestShutdownDeadlineCloses(t *testing.T) {
	h := newTestHandler()
	rg := startRig(t, h, true, 10*time.Second)
	c, br := dial(t, rg.addr)
	_, _ = io.WriteString(c, post("/block", "x"))
	<-h.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := rg.lane.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("a response came through a closed connection")
	}
	close(h.release)
}

// FuzzConn feeds arbitrary bytes to a lane connection with a real
// handler behind it: the connection always ends (the server answers and
// closes once the client stops sending) and nothing panics.
func FuzzConn(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s + "body"))
	}
	f.Add([]byte(post("/echo", "a") + post("/big", "") + "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\nshort"))
	f.Add([]byte(post("/sse", "") + "GET /echo HTTP/1.1\r\nHost: t\r\n\r\n" + post("/echo", "x")))
	f.Add([]byte(post("/nocontent", "zz", "Connection: close")))
	h := newTestHandler()
	close(h.release) // /block and /poll answer at once
	rg := startRig(f, h, true, 2*time.Second)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := net.Dial("tcp", rg.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			_, _ = c.Write(b)
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%q: the connection hangs", b)
			}
		}
	})
}

// finishInFlight checks that a Shutdown (done) still waits for the
// blocked request on busyBr, releases it, and checks that it is answered
// in full with Connection: close and that Shutdown then returns.
func finishInFlight(t *testing.T, h *testHandler, busyBr *bufio.Reader, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	default:
	}
	close(h.release)
	resp, body := readResp(t, busyBr, "POST")
	if resp.StatusCode != 200 || body != `POST /block "payload"` || !resp.Close {
		t.Fatalf("in flight: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return after the last response")
	}
}
