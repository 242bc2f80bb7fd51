package picomq_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// viaNetHTTP reports whether a request came through net/http's Transport,
// which offers gzip on every request but a HEAD; the lean transport never
// does. (A HEAD's path cannot be told apart this way.)
func viaNetHTTP(r seenRequest) bool { return r.ReqHeader.Get("Accept-Encoding") == "gzip" }

// TestLeanTransportRouting: by default writes and HEADs take the lean
// transport and reads net/http's; WithStdTransport and WithHTTPClient send
// everything through net/http.
func TestLeanTransportRouting(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	px := newProxy(t, picoURL)
	cases := []struct {
		name string
		opts []picomq.Option
		lean map[string]bool // method -> through the lean transport
	}{
		{"default", nil, map[string]bool{"PUT": true, "POST": true, "HEAD": true, "DELETE": true, "GET": false}},
		{"WithStdTransport", []picomq.Option{picomq.WithStdTransport()}, map[string]bool{}},
		{"WithHTTPClient", []picomq.Option{picomq.WithHTTPClient(&http.Client{})}, map[string]bool{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			px.mu.Lock()
			px.seen = nil
			px.mu.Unlock()
			c := newClient(t, picomq.ProtocolPico, px.URL, tc.opts...)
			s := c.Stream(uniqueName(t))
			if _, err := s.Create(ctx, "text/plain", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Head(ctx); err != nil {
				t.Fatal(err)
			}
			if p, err := s.Read(ctx, c.Beginning(), picomq.ReadOptions{}); err != nil || len(p.Records) != 1 {
				t.Fatalf("read: %v %+v", err, p)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatal(err)
			}
			px.mu.Lock()
			defer px.mu.Unlock()
			if len(px.seen) != 5 {
				t.Fatalf("%d requests, want 5", len(px.seen))
			}
			for _, r := range px.seen {
				if r.Method == http.MethodHead {
					continue
				}
				if lean := !viaNetHTTP(r); lean != tc.lean[r.Method] {
					t.Errorf("%s %s: lean transport %v, want %v", r.Method, r.Path, lean, tc.lean[r.Method])
				}
			}
		})
	}
}

// TestLeanTransportErrorsUnchanged: an error status with a JSON body is
// the same *ClientError through either transport.
func TestLeanTransportErrorsUnchanged(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	var errs []*picomq.ClientError
	for _, opts := range [][]picomq.Option{nil, {picomq.WithStdTransport()}} {
		c := newClient(t, picomq.ProtocolPico, picoURL, opts...)
		s := c.Stream("/sdk-test/lean/does-not-exist")
		_, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("a")})
		var ce *picomq.ClientError
		if !errors.As(err, &ce) || !picomq.IsKind(err, picomq.KindNotFound) {
			t.Fatalf("append to a missing stream: %v", err)
		}
		errs = append(errs, ce)
	}
	if a, b := *errs[0], *errs[1]; fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("lean %+v\nstd  %+v", a, b)
	}
}

// TestLeanTransportConcurrentAppends: 64 goroutines appending over one
// client to a real node (run with -race): every append acknowledged once,
// offsets dense per stream.
func TestLeanTransportConcurrentAppends(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	const goroutines, perG, nStreams = 64, 10, 8
	streams := make([]picomq.Stream, nStreams)
	for i := range streams {
		streams[i] = c.Stream(uniqueName(t))
		if _, err := streams[i].Create(ctx, "text/plain", 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := make(map[string]bool)
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := streams[g%nStreams]
			for i := range perG {
				ack, err := s.Append(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, "g%d-%d", g, i)})
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				key := s.Name() + "@" + ack.Start
				dup := seen[key]
				seen[key] = true
				mu.Unlock()
				if dup {
					errc <- fmt.Errorf("%s acknowledged twice", key)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for _, s := range streams {
		info, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(goroutines / nStreams * perG); info.Next != want {
			t.Fatalf("%s: next %s, want %s", s.Name(), info.Next, want)
		}
	}
}
