package picomq

// Tests of how the client hands requests to its transports (send) and of
// the first-hop URL cache (newRequest).

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingJar counts the lookups http.Client.Do makes on every request it
// sends; the client's direct route must make none.
type countingJar struct {
	mu      sync.Mutex
	lookups int
}

func (j *countingJar) SetCookies(*url.URL, []*http.Cookie) {}
func (j *countingJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	j.lookups++
	j.mu.Unlock()
	return nil
}

func (j *countingJar) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lookups
}

// TestSendSkipsClientDoForLean: with the SDK's own client, writes and
// HEADs go to the lean transport without http.Client.Do (which would
// consult the jar planted here); reads, WithStdTransport and URLs with
// user info go through Do.
func TestSendSkipsClientDoForLean(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		opts   []Option
		method string
		base   string
		viaDo  bool
	}{
		{"POST", nil, "POST", srv.URL, false},
		{"HEAD", nil, "HEAD", srv.URL, false},
		{"DELETE", nil, "DELETE", srv.URL, false},
		{"GET", nil, "GET", srv.URL, true},
		{"POST WithStdTransport", []Option{WithStdTransport()}, "POST", srv.URL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newClient(ProtocolPico, tc.base, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			jar := &countingJar{}
			c.hc.Jar = jar
			var body []byte
			if tc.method == "POST" {
				body = []byte("x")
			}
			for range 3 {
				resp, err := c.do(ctx, &call{method: tc.method, path: "/s", body: body, owner: &ownerCache{}})
				if err != nil {
					t.Fatal(err)
				}
				drain(resp)
			}
			if got := jar.count() > 0; got != tc.viaDo {
				t.Fatalf("through http.Client.Do: %v (%d jar lookups), want %v", got, jar.count(), tc.viaDo)
			}
		})
	}
	t.Run("user info", func(t *testing.T) {
		c, err := newClient(ProtocolPico, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		jar := &countingJar{}
		c.hc.Jar = jar
		u, _ := url.Parse(srv.URL)
		u.User = url.UserPassword("u", "p")
		req, err := http.NewRequestWithContext(ctx, "POST", u.String()+"/s", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.send(req)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if jar.count() == 0 {
			t.Fatal("a URL with user info did not go through http.Client.Do")
		}
	})
}

// TestSendErrorsReadAsClientDo: a network error on the direct route is the
// *url.Error http.Client.Do would return, word for word, and still a dial
// error for the owner-cache fallback.
func TestSendErrorsReadAsClientDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, method := range []string{"POST", "HEAD", "PUT"} {
		var msgs []string
		for _, opts := range [][]Option{nil, {WithStdTransport()}} {
			c, err := newClient(ProtocolPico, base, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.do(ctx, &call{method: method, path: "/a b", body: []byte("x")})
			c.Close()
			var ue *url.Error
			if !errors.As(err, &ue) || !isDialError(err) {
				t.Fatalf("%s %v: %#v, want a *url.Error around a dial error", method, opts, err)
			}
			msgs = append(msgs, err.Error())
		}
		if msgs[0] != msgs[1] {
			t.Fatalf("%s: direct route %q\nhttp.Client.Do  %q", method, msgs[0], msgs[1])
		}
	}
	for _, m := range []string{"POST", "HEAD", "PATCH", "DELETE", "PUT", "post", "M-SEARCH"} {
		want := m[:1] + strings.ToLower(m[1:])
		if got := urlErrorOp(m); got != want {
			t.Errorf("urlErrorOp(%q) = %q, want %q", m, got, want)
		}
	}
}

// TestNewRequestURLCache: a request built from the cached parse of its
// target is the request http.NewRequest builds from the target string,
// and a different target is parsed afresh.
func TestNewRequestURLCache(t *testing.T) {
	c, err := newClient(ProtocolPico, "http://127.0.0.1:4437", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := &ownerCache{}
	targets := []string{
		"http://127.0.0.1:4437/orders/1",
		"http://127.0.0.1:4437/orders/1", // a hit
		"http://127.0.0.1:/a%20b/c%2Fd?x=1&y=%26",
		"http://127.0.0.1:/a%20b/c%2Fd?x=1&y=%26",
		"http://[::1]:80/v1/stream/%E2%82%AC",
		"http://[::1]:80/v1/stream/%E2%82%AC",
		"http://127.0.0.1:4437/orders/1", // a miss again
	}
	var prev *http.Request
	for i, target := range targets {
		cl := &call{method: "POST", path: "/ignored", header: http.Header{"Content-Type": {"text/plain"}}, body: []byte("hello"), owner: o}
		got, err := c.newRequest(ctx, cl, target, true)
		if err != nil {
			t.Fatal(err)
		}
		want, err := http.NewRequestWithContext(ctx, "POST", target, strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if got.URL.String() != want.URL.String() || got.Host != want.Host || got.URL.RequestURI() != want.URL.RequestURI() ||
			got.URL.Host != want.URL.Host || got.ContentLength != want.ContentLength || got.Context() != ctx {
			t.Fatalf("%s: built %s host %q len %d, want %s host %q len %d", target, got.URL, got.Host, got.ContentLength, want.URL, want.Host, want.ContentLength)
		}
		rc, err := got.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(rc); string(b) != "hello" {
			t.Fatalf("GetBody: %q", b)
		}
		hit := i > 0 && targets[i-1] == target
		if shared := prev != nil && got.URL == prev.URL; shared != hit {
			t.Fatalf("%s: URL shared with the previous request %v, want %v", target, shared, hit)
		}
		prev = got
	}
	// A redirect's hop (cache false) neither uses nor replaces the entry.
	cl := &call{method: "POST", owner: o}
	r1, _ := c.newRequest(ctx, cl, "http://127.0.0.1:4437/orders/1", false)
	if r1.URL == prev.URL {
		t.Fatal("an uncached hop used the cache")
	}
	r2, _ := c.newRequest(ctx, cl, "http://127.0.0.1:4437/orders/1", true)
	if r2.URL != prev.URL {
		t.Fatal("an uncached hop replaced the cache entry")
	}
	// Calls without an owner (no stream) parse every time.
	r3, _ := c.newRequest(ctx, &call{method: "PUT"}, "http://127.0.0.1:4437/x", true)
	r4, _ := c.newRequest(ctx, &call{method: "PUT"}, "http://127.0.0.1:4437/x", true)
	if r3.URL == r4.URL {
		t.Fatal("a call without an owner cache shared a URL")
	}
}
