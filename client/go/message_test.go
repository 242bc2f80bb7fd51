package picomq

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

// captureServer answers every request with tailAck and hands each request
// it read, body included, to got.
func captureServer(t *testing.T) (string, <-chan *http.Request) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan *http.Request, 16)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, err := io.ReadAll(req.Body)
					if err != nil {
						return
					}
					req.Body = io.NopCloser(bytes.NewReader(body))
					got <- req
					if _, err := io.WriteString(nc, tailAck); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), got
}

func bodyOf(t *testing.T, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAppendMessageIsTheSameRequest: an append rendered by sendMessage
// reaches the server as the same request as the one newRequest and the
// lean transport send for it (method, request URI, Host, every header,
// body), for the client options and headers appends have.
func TestAppendMessageIsTheSameRequest(t *testing.T) {
	base, got := captureServer(t)
	for _, tc := range []struct {
		name  string
		proto Protocol
		opts  []Option
		path  string
		hdr   http.Header
	}{
		{"pico", ProtocolPico, nil, "/orders/1", http.Header{"Content-Type": {"application/vnd.picomq.batch"}}},
		{"token and agent", ProtocolPico, []Option{WithToken("s3cret"), WithUserAgent("bench/1")}, "/a b/ü?x",
			http.Header{"Content-Type": {"application/vnd.picomq.batch"}}},
		{"no agent", ProtocolPico, []Option{WithUserAgent("")}, "/s", http.Header{"Content-Type": {"text/plain"}}},
		{"producer, durable streams", ProtocolDurableStreams, nil, "/logs/x", http.Header{
			"Content-Type": {"application/json"}, "Producer-Id": {"p-1"}, "Producer-Epoch": {"3"}, "Producer-Seq": {"17"}}},
		{"idempotency key", ProtocolPico, nil, "/k", http.Header{"Content-Type": {"text/plain"}, "Idempotency-Key": {"k1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newClient(tc.proto, base, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl := &call{method: "POST", path: tc.path, header: tc.hdr, body: []byte("0123456789"), owner: &ownerCache{}, message: true}
			// The first append parses and caches its target: newRequest.
			resp, err := c.do(context.Background(), cl)
			if err != nil {
				t.Fatal(err)
			}
			drain(resp)
			viaRequest := <-got
			target := c.origin + c.requestURI(cl)
			lt := cl.owner.cachedLean(target)
			if lt == nil {
				t.Fatal("no lean target cached after the first append")
			}
			resp, ok, err := c.sendMessage(context.Background(), cl, lt)
			if !ok || err != nil {
				t.Fatalf("sendMessage: ok %v, %v", ok, err)
			}
			if resp.Request != lt.post || resp.StatusCode != http.StatusOK {
				t.Fatalf("response %d for %p, want 200 for %p", resp.StatusCode, resp.Request, lt.post)
			}
			drain(resp)
			viaMessage := <-got
			if viaMessage.Method != viaRequest.Method || viaMessage.RequestURI != viaRequest.RequestURI || viaMessage.Host != viaRequest.Host ||
				viaMessage.ContentLength != viaRequest.ContentLength || !reflect.DeepEqual(viaMessage.Header, viaRequest.Header) {
				t.Fatalf("sendMessage sent\n%s %s Host %s %d %v\nnewRequest sent\n%s %s Host %s %d %v",
					viaMessage.Method, viaMessage.RequestURI, viaMessage.Host, viaMessage.ContentLength, viaMessage.Header,
					viaRequest.Method, viaRequest.RequestURI, viaRequest.Host, viaRequest.ContentLength, viaRequest.Header)
			}
			if a, b := bodyOf(t, viaMessage), bodyOf(t, viaRequest); !bytes.Equal(a, b) {
				t.Fatalf("body %q, want %q", a, b)
			}
			// And the next append takes the message path by itself.
			if _, err := c.do(context.Background(), cl); err != nil {
				t.Fatal(err)
			}
			<-got
		})
	}
}

// TestAppendMessageDeclines: the targets and calls sendMessage must leave
// to net/http's request path.
func TestAppendMessageDeclines(t *testing.T) {
	base, got := captureServer(t)
	target := func(c *client) (*leanTarget, *call) {
		cl := &call{method: "POST", path: "/s", header: http.Header{"Content-Type": {"text/plain"}}, body: []byte("x"), owner: &ownerCache{}, message: true}
		resp, err := c.do(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		<-got
		return cl.owner.cachedLean(c.origin + c.requestURI(cl)), cl
	}
	t.Run("std transport", func(t *testing.T) {
		c, err := newClient(ProtocolPico, base, []Option{WithStdTransport()})
		if err != nil {
			t.Fatal(err)
		}
		if lt, _ := target(c); lt != nil {
			t.Fatal("a lean target without the lean transport")
		}
	})
	t.Run("proxy", func(t *testing.T) {
		c, err := newClient(ProtocolPico, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.rt.std.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse(base) } // the server as its own proxy
		if lt, _ := target(c); lt != nil {
			t.Fatal("a lean target through a proxy")
		}
	})
	t.Run("bad header", func(t *testing.T) {
		c, err := newClient(ProtocolPico, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		lt, cl := target(c)
		if lt == nil {
			t.Fatal("no lean target")
		}
		for _, h := range []http.Header{{"Content-Type": {"a\r\nb"}}, {"Bad Name": {"x"}}, {"Connection": {"close"}}, {"Expect": {"100-continue"}}} {
			cl.header = h
			if _, ok, _ := c.sendMessage(context.Background(), cl, lt); ok {
				t.Fatalf("sendMessage took %v", h)
			}
		}
	})
}

// TestAppendAllocs: an append's allocations, the request's and the ack's,
// against a server answering at once: 33 through http.Request, 22 with
// sendMessage.
func TestAppendAllocs(t *testing.T) {
	srv := newTailServer(t)
	c, err := NewPico(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Stream("/allocs")
	rec := AppendRecord{Body: make([]byte, 100)}
	ctx := context.Background()
	if _, err := s.Append(ctx, rec); err != nil { // caches the target, dials
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(200, func() {
		if _, err := s.Append(ctx, rec); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%v allocations per append", n)
	if n > 24 {
		t.Fatalf("%v allocations per append, want at most 24", n)
	}
}
