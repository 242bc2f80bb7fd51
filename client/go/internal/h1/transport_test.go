package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connCounter counts a test server's connections by state.
type connCounter struct {
	opened atomic.Int64
	closed chan struct{} // one value per closed connection
}

func newCountingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *connCounter) {
	t.Helper()
	cc := &connCounter{closed: make(chan struct{}, 1024)}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			cc.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			cc.closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, cc
}

func newReq(t *testing.T, ctx context.Context, method, url string, body []byte) *http.Request {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func send(t *testing.T, tr *Transport, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL, err)
	}
	if n, err := resp.Body.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("%s %s: a Read after the end: %d, %v", req.Method, req.URL, n, err)
	}
	resp.Body.Close()
	return resp, b
}

func TestKeepAliveReusesOneConnection(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s ua=%s cl=%d x=%s body=%s", r.Method, r.Host, r.URL.RequestURI(),
			r.UserAgent(), r.ContentLength, r.Header.Get("X-Test"), b)
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	host := strings.TrimPrefix(srv.URL, "http://")
	for i := range 20 {
		req := newReq(t, context.Background(), "POST", srv.URL+"/a%20b/c?q=1", []byte(fmt.Sprint("body", i)))
		req.Header.Set("X-Test", "v")
		req.Header.Set("User-Agent", "ua/1")
		_, b := send(t, tr, req)
		want := fmt.Sprintf("POST %s /a%%20b/c?q=1 ua=ua/1 cl=%d x=v body=body%d", host, len(fmt.Sprint("body", i)), i)
		if string(b) != want {
			t.Fatalf("got %q, want %q", b, want)
		}
	}
	// Bodiless PUT and DELETE: Content-Length 0 on PUT as net/http sends.
	_, b := send(t, tr, newReq(t, context.Background(), "PUT", srv.URL+"/s", nil))
	if want := fmt.Sprintf("PUT %s /s ua=Go-http-client/1.1 cl=0 x= body=", host); string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
	send(t, tr, newReq(t, context.Background(), "DELETE", srv.URL+"/s", nil))
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d connections for 22 sequential requests, want 1", n)
	}
}

// rawServer accepts connections and runs handle on each, counting them.
type rawServer struct {
	ln      net.Listener
	accepts atomic.Int64
	wg      sync.WaitGroup
}

func newRawServer(t *testing.T, handle func(n int64, c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := s.accepts.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

// readRequest reads one request, body included.
func readRequest(br *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return req, err
}

func TestServerClosedIdleConnectionIsNotReused(t *testing.T) {
	closed := make(chan struct{}, 10)
	srv := newRawServer(t, func(_ int64, c net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.Close() // no Connection: close: the client finds out by itself
		closed <- struct{}{}
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for range 3 {
		// A POST without an idempotency key: it must not meet the dead
		// connection, since it could not be resent.
		send(t, tr, newReq(t, context.Background(), "POST", srv.url(), []byte("x")))
		<-closed
	}
	if n := srv.accepts.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// TestStaleConnectionRule: a reused connection that the server closes
// after reading the request, without answering. Only replayable requests
// are resent; a request on a new connection never is.
func TestStaleConnectionRule(t *testing.T) {
	var requests atomic.Int64
	srv := newRawServer(t, func(_ int64, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			requests.Add(1)
			if i == 1 {
				return // the second request on a connection: read, then dropped
			}
			if req.Method == "HEAD" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
			} else {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	cases := []struct {
		name   string
		method string
		header string
		resent bool
	}{
		{"POST", "POST", "", false},
		{"POST with Idempotency-Key", "POST", "Idempotency-Key", true},
		{"POST with X-Idempotency-Key", "POST", "X-Idempotency-Key", true},
		{"HEAD", "HEAD", "", true},
		{"DELETE", "DELETE", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &Transport{}
			defer tr.CloseIdleConnections()
			mk := func() *http.Request {
				var body []byte
				if tc.method == "POST" {
					body = []byte("payload")
				}
				req := newReq(t, context.Background(), tc.method, srv.url(), body)
				if tc.header != "" {
					req.Header.Set(tc.header, "k1")
				}
				return req
			}
			send(t, tr, mk())
			accepts0, requests0 := srv.accepts.Load(), requests.Load()
			resp, err := tr.RoundTrip(mk())
			if tc.resent {
				if err != nil {
					t.Fatalf("replayable request not resent: %v", err)
				}
				resp.Body.Close()
				if a, r := srv.accepts.Load()-accepts0, requests.Load()-requests0; a != 1 || r != 2 {
					t.Fatalf("%d new connections, %d requests received; want 1 and 2", a, r)
				}
				return
			}
			if err == nil {
				t.Fatal("non-replayable request succeeded on a dropped connection")
			}
			if !errors.Is(err, ErrServerClosedIdle) {
				t.Fatalf("error %v, want ErrServerClosedIdle", err)
			}
			if a, r := srv.accepts.Load()-accepts0, requests.Load()-requests0; a != 0 || r != 1 {
				t.Fatalf("%d new connections, %d requests received; want 0 and 1", a, r)
			}
		})
	}
}

func TestNewConnectionIsNeverResent(t *testing.T) {
	var requests atomic.Int64
	srv := newRawServer(t, func(_ int64, _ net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err == nil {
			requests.Add(1)
		}
	})
	tr := &Transport{}
	req := newReq(t, context.Background(), "HEAD", srv.url(), nil)
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("no error from a connection closed without an answer")
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("request received %d times, want 1", n)
	}
}

func TestConnectionCloseIsHonoured(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	tr := &Transport{}
	for range 3 {
		if _, b := send(t, tr, newReq(t, context.Background(), "POST", srv.URL, []byte("x"))); string(b) != "bye" {
			t.Fatalf("body %q", b)
		}
	}
	if n := cc.opened.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (one per Connection: close)", n)
	}
}

func TestChunkedResponse(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		for i := range 5 {
			fmt.Fprintf(w, "part%d;", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Sum", "5")
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for range 3 {
		resp, b := send(t, tr, newReq(t, context.Background(), "POST", srv.URL, []byte("x")))
		if string(b) != "part0;part1;part2;part3;part4;" || resp.ContentLength != -1 {
			t.Fatalf("body %q, length %d", b, resp.ContentLength)
		}
		if resp.Trailer.Get("X-Sum") != "5" {
			t.Fatalf("trailer %v", resp.Trailer)
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestInterimResponsesAreSkipped(t *testing.T) {
	srv := newRawServer(t, func(_ int64, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 201 Created\r\nX-Final: yes\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for range 2 {
		resp, b := send(t, tr, newReq(t, context.Background(), "PUT", srv.url(), []byte("x")))
		if resp.StatusCode != 201 || resp.Header.Get("X-Final") != "yes" || string(b) != "ok" {
			t.Fatalf("got %d %v %q", resp.StatusCode, resp.Header, b)
		}
	}
	if n := srv.accepts.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestSwitchingProtocolsIsAnError(t *testing.T) {
	srv := newRawServer(t, func(_ int64, c net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n\r\n")
		}
	})
	if _, err := (&Transport{}).RoundTrip(newReq(t, context.Background(), "POST", srv.url(), nil)); err == nil {
		t.Fatal("101 accepted")
	}
}

func TestHeadAndNoContentHaveNoBody(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "HEAD":
			w.Header().Set("Content-Length", "10")
		case "DELETE":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotModified)
		}
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for range 2 {
		for _, m := range []string{"HEAD", "DELETE", "POST"} {
			resp, b := send(t, tr, newReq(t, context.Background(), m, srv.URL, nil))
			if len(b) != 0 || resp.Body != http.NoBody {
				t.Fatalf("%s: body %q", m, b)
			}
			if m == "HEAD" && resp.ContentLength != 10 {
				t.Fatalf("HEAD: ContentLength %d, want 10", resp.ContentLength)
			}
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestContextCancellation(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newRawServer(t, func(_ int64, c net.Conn, br *bufio.Reader) {
		req, err := readRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/body" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
		}
		<-release // stall: the rest never comes
	})
	t.Run("waiting for the response", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := (&Transport{}).RoundTrip(newReq(t, ctx, "POST", srv.url()+"/head", []byte("x")))
			errc <- err
		}()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		tr := &Transport{}
		resp, err := tr.RoundTrip(newReq(t, ctx, "POST", srv.url()+"/body", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
		resp.Body.Close()
		if len(tr.idle) != 0 {
			t.Fatal("an interrupted connection went back to the pool")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := (&Transport{}).RoundTrip(newReq(t, ctx, "DELETE", srv.url()+"/head", nil))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestLargeBodies(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // then answer: chunked, kept alive
		w.Write(b)
	})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	for range 2 {
		if resp, b := send(t, tr, newReq(t, context.Background(), "POST", srv.URL, big)); !bytes.Equal(b, big) || resp.Close {
			t.Fatalf("echoed %d bytes, want %d; close %v %v", len(b), len(big), resp.Close, resp.Header)
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
	// A body closed before its end closes its connection.
	resp, err := tr.RoundTrip(newReq(t, context.Background(), "POST", srv.URL, big))
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 1000)
	resp.Body.Close()
	<-cc.closed
	send(t, tr, newReq(t, context.Background(), "POST", srv.URL, []byte("x")))
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestConcurrentRequests(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body)
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				want := fmt.Sprintf("g%d-%d", g, i)
				req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(want))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != want {
					errs <- fmt.Errorf("got %q (%v), want %q", b, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := cc.opened.Load(); n > 64 {
		t.Fatalf("%d connections for 64 concurrent clients", n)
	}
}

func TestDialErrorIsAnOpError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = (&Transport{}).RoundTrip(newReq(t, context.Background(), "POST", "http://"+addr+"/s", []byte("x")))
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("error %#v, want a *net.OpError of Op dial", err)
	}
}

func TestInvalidHeaderIsRefused(t *testing.T) {
	srv := newRawServer(t, func(int64, net.Conn, *bufio.Reader) {})
	req := newReq(t, context.Background(), "POST", srv.url(), []byte("x"))
	req.Header.Set("Content-Type", "text/plain\r\nX-Injected: 1")
	if _, err := (&Transport{}).RoundTrip(req); err == nil {
		t.Fatal("a header value with a line break was sent")
	}
	if n := srv.accepts.Load(); n != 0 {
		t.Fatalf("%d connections opened for an invalid request", n)
	}
}

func TestIdleConnectionsAreClosed(t *testing.T) {
	srv, cc := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	tr := &Transport{IdleTimeout: 20 * time.Millisecond}
	send(t, tr, newReq(t, context.Background(), "POST", srv.URL, nil))
	select {
	case <-cc.closed: // the idle timeout closed it
	case <-time.After(10 * time.Second):
		t.Fatal("idle connection not closed after its idle timeout")
	}
	tr = &Transport{}
	send(t, tr, newReq(t, context.Background(), "POST", srv.URL, nil))
	tr.CloseIdleConnections()
	select {
	case <-cc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("CloseIdleConnections left the connection open")
	}
	send(t, tr, newReq(t, context.Background(), "POST", srv.URL, nil))
	if n := cc.opened.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

func TestSupports(t *testing.T) {
	ok := newReq(t, context.Background(), "POST", "http://h/x", []byte("b"))
	if !Supports(ok) {
		t.Fatal("an in-memory POST is not supported")
	}
	tls := newReq(t, context.Background(), "POST", "https://h/x", nil)
	stream, _ := http.NewRequest("POST", "http://h/x", io.MultiReader(strings.NewReader("b")))
	expect := newReq(t, context.Background(), "PUT", "http://h/x", nil)
	expect.Header.Set("Expect", "100-continue")
	for _, r := range []*http.Request{tls, stream, expect} {
		if Supports(r) {
			t.Fatalf("%s %s %v supported", r.Method, r.URL, r.Header)
		}
	}
}
