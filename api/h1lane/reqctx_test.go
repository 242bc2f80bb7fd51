package h1lane

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime"
	"testing"
	"time"
)

type ctxKey struct{}

// TestReqContextEndsWithTheRequest: a request's context is live while
// its handler runs and cancelled once it returns, whether Done was asked
// for before the end, after it, or never; its values and deadline are the
// connection's; context.Cause agrees with Err.
func TestReqContextEndsWithTheRequest(t *testing.T) {
	conn, cancelConn := context.WithDeadline(context.WithValue(context.Background(), ctxKey{}, "v"), time.Now().Add(time.Hour))
	defer cancelConn()
	for _, when := range []string{"before", "after", "never"} {
		c := &reqContext{conn: conn}
		if c.Err() != nil || c.Value(ctxKey{}) != "v" || context.Cause(c) != nil {
			t.Fatalf("%s: live context: err %v, value %v, cause %v", when, c.Err(), c.Value(ctxKey{}), context.Cause(c))
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(func() time.Time { d, _ := conn.Deadline(); return d }()) {
			t.Fatalf("%s: deadline %v %v", when, d, ok)
		}
		var done <-chan struct{}
		if when == "before" {
			done = c.Done()
			select {
			case <-done:
				t.Fatalf("%s: done while live", when)
			default:
			}
		}
		c.end()
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
			t.Fatalf("%s: ended context: err %v, cause %v", when, c.Err(), context.Cause(c))
		}
		if when == "after" {
			done = c.Done()
		}
		if done != nil {
			select {
			case <-done:
			default:
				t.Fatalf("%s: Done not closed after the end", when)
			}
		}
		if c.Value(ctxKey{}) != "v" {
			t.Fatalf("%s: value lost after the end", when)
		}
	}
}

// TestReqContextConnectionEnds: the connection's end (the lane's Close)
// ends the request's context and its children while the handler runs.
func TestReqContextConnectionEnds(t *testing.T) {
	for _, asked := range []bool{false, true} {
		conn, cancelConn := context.WithCancel(context.Background())
		c := &reqContext{conn: conn}
		var child context.Context
		if asked {
			var cancel context.CancelFunc
			child, cancel = context.WithTimeout(c, time.Hour)
			defer cancel()
		}
		cancelConn()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("asked %v: err %v after the connection ended", asked, c.Err())
		}
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Fatalf("asked %v: Done not closed", asked)
		}
		if child != nil {
			select {
			case <-child.Done():
			case <-time.After(time.Minute):
				t.Fatal("child not cancelled")
			}
		}
		c.end()
	}
}

// TestReqContextChildren: contexts derived from a request's context end
// with the request, are cancelled through the context package's own
// bookkeeping (no goroutine per child), and AfterFunc runs at the end.
func TestReqContextChildren(t *testing.T) {
	c := &reqContext{conn: context.Background()}
	before := runtime.NumGoroutine()
	var children []context.Context
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithTimeout(c, time.Hour)
		defer cancel()
		children = append(children, ctx)
	}
	if n := runtime.NumGoroutine() - before; n > 50 {
		t.Fatalf("%d goroutines for 200 children", n)
	}
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	c.end()
	for i, ctx := range children {
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			t.Fatalf("child %d not cancelled", i)
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("child %d: %v", i, ctx.Err())
		}
	}
	select {
	case <-ran:
	case <-time.After(time.Minute):
		t.Fatal("AfterFunc did not run")
	}
}

// TestServedRequestAllocations: a request served by the lane whose
// handler checks its context but never waits on it allocates less than
// a context.WithCancel per request did (its context and cancel function,
// and the entry in the connection's map of children). The client's side
// allocates nothing.
func TestServedRequestAllocations(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	rg := startRig(t, h, true, time.Minute)
	c, br := dial(t, rg.addr)
	req := []byte("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
	head := make([]byte, 0, 1024)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		head = head[:0]
		for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			line, err := br.ReadSlice('\n')
			if err != nil {
				t.Fatal(err)
			}
			head = append(head, line...)
		}
		if !bytes.HasPrefix(head, []byte("HTTP/1.1 204 ")) {
			t.Fatalf("response %q", head)
		}
	}
	roundTrip()
	allocs := testing.AllocsPerRun(200, roundTrip)
	t.Logf("%.1f allocations per request (client and server)", allocs)
	// The head's string and memory (parseHead), the context, the
	// http.Request, and one in writing the answer: 5. With a
	// context.WithCancel per request it was 6.
	if allocs > 5 {
		t.Fatalf("%.1f allocations per served request, want at most 5", allocs)
	}
}
