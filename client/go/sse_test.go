package picomq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// collector receives a subscription's records in a goroutine, each with
// the Next of the event that carried it.
type collector struct {
	recs chan eventRecord
}

type eventRecord struct {
	picomq.Record
	next string
}

func collect(sub *picomq.Subscription) *collector {
	c := &collector{recs: make(chan eventRecord, 100000)}
	go func() {
		defer close(c.recs)
		for ev := range sub.Events() {
			for _, r := range ev.Records {
				c.recs <- eventRecord{r, ev.Next}
			}
		}
	}()
	return c
}

// expect reads want records in order, failing on a gap, a duplicate or a
// timeout. It returns the Next of the event of the last one.
func (c *collector) expect(t *testing.T, cl picomq.Client, from int, want []string) string {
	t.Helper()
	next := ""
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for i, w := range want {
		select {
		case r, ok := <-c.recs:
			if !ok {
				t.Fatalf("subscription ended after %d of %d records", i, len(want))
			}
			if string(r.Body) != w || r.Position != cl.PositionAt(int64(from+i)) {
				t.Fatalf("record %d: %q at %s, want %q at %s (lost or repeated records)", from+i, r.Body, r.Position, w, cl.PositionAt(int64(from+i)))
			}
			next = r.next
		case <-timeout.C:
			t.Fatalf("got %d of %d records within 20s", i, len(want))
		}
	}
	return next
}

func bodies(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf(`{"n":%d}`, i))
	}
	return out
}

func appendBodies(t *testing.T, ctx context.Context, s picomq.Stream, bs []string) {
	t.Helper()
	for _, b := range bs {
		if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSubscribeReconnects: the shared servers end SSE connections after 1s;
// the subscription reconnects from the last position it delivered, so
// records appended before, during and after reconnects arrive exactly once,
// in order.
func TestSubscribeReconnects(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		s := c.Stream(createStream(t, ctx, c, "application/json"))
		appendBodies(t, ctx, s, bodies(0, 5))
		sub, err := s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		col := collect(sub)
		col.expect(t, c, 0, bodies(0, 5))
		appendBodies(t, ctx, s, bodies(5, 20))
		col.expect(t, c, 5, bodies(5, 20))
		// Wait for two server-side connection ends, appending meanwhile.
		for i := 20; sub.Reconnects() < 2; i++ {
			appendBodies(t, ctx, s, bodies(i, i+1))
			col.expect(t, c, i, bodies(i, i+1))
			if ctx.Err() != nil {
				t.Fatal("no reconnect within the test's time")
			}
		}
		next, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := c.OffsetOf(next.Next)
		appendBodies(t, ctx, s, bodies(int(n), int(n)+5))
		// The event of the last record says where to resume: after it.
		if next := col.expect(t, c, int(n), bodies(int(n), int(n)+5)); next != c.PositionAt(n+5) {
			t.Fatalf("the last event's Next is %s, want %s", next, c.PositionAt(n+5))
		}
	})
}

// TestSubscribeCutConnection: a proxy kills the first SSE connection in the
// middle of an event. The subscription resumes from the last event it
// delivered (Last-Event-ID on Pico, the last control event's offset on
// Durable Streams): nothing lost, nothing repeated.
func TestSubscribeCutConnection(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		name := createStream(t, ctx, c, "application/json")
		s := c.Stream(name)
		appendBodies(t, ctx, s, bodies(0, 3))
		px := newProxy(t, serverURL(c.Protocol()))
		var sseRequests atomic.Int32
		px.cutSSE = func(r *http.Request) int {
			if r.URL.Query().Get("live") == "sse" && sseRequests.Add(1) == 1 {
				return 2 // after the second data event
			}
			return 0
		}
		pc := newClient(t, c.Protocol(), px.URL)
		sub, err := pc.Stream(name).Subscribe(ctx, pc.Beginning(), picomq.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		col := collect(sub)
		col.expect(t, c, 0, bodies(0, 3))
		appendBodies(t, ctx, s, bodies(3, 4)) // the second data event: cut
		col.expect(t, c, 3, bodies(3, 4))
		appendBodies(t, ctx, s, bodies(4, 10))
		col.expect(t, c, 4, bodies(4, 10))

		var sse []seenRequest
		for _, r := range px.requests() {
			if r.Query.Get("live") == "sse" {
				sse = append(sse, r)
			}
		}
		if len(sse) < 2 || sub.Reconnects() < 1 {
			t.Fatalf("%d SSE requests, %d reconnects: the cut did not force a reconnect", len(sse), sub.Reconnects())
		}
		second := sse[1]
		if c.Protocol() == picomq.ProtocolPico {
			// The data event of record 3 (id 4) was complete before the
			// cut: the reconnect resumes after it.
			if second.LastEventID != "4" || second.Query.Get("offset") != "4" {
				t.Fatalf("reconnect with Last-Event-ID %q offset %q, want 4", second.LastEventID, second.Query.Get("offset"))
			}
		} else if got := second.Query.Get("offset"); got != c.PositionAt(3) {
			// The cut lost the control event that completes record 3's
			// data event, so the reconnect asks for record 3 again.
			t.Fatalf("reconnect at offset %q, want %q", got, c.PositionAt(3))
		}
	})
}

func TestSubscribeStops(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		s := c.Stream(createStream(t, ctx, c, "application/json"))
		appendBodies(t, ctx, s, bodies(0, 2))

		// From "now": only what is appended afterwards.
		sctx, cancel := context.WithCancel(ctx)
		sub, err := s.Subscribe(sctx, picomq.PositionNow, picomq.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		col := collect(sub)
		appendBodies(t, ctx, s, bodies(2, 3))
		col.expect(t, c, 2, bodies(2, 3))

		// Cancelling the context ends it promptly, without an error.
		cancel()
		select {
		case _, ok := <-col.recs:
			for ok {
				_, ok = <-col.recs
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the subscription did not end after its context was cancelled")
		}
		if sub.Err() != nil {
			t.Fatalf("Err after cancel: %v", sub.Err())
		}
		sub.Close()

		// Close ends another one.
		sub, err = s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{NoReconnect: true})
		if err != nil {
			t.Fatal(err)
		}
		ev := <-sub.Events()
		if ev.Type != picomq.EventData || len(ev.Records) != 3 {
			t.Fatalf("first event %+v", ev)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		for range sub.Events() {
		}

		// A missing stream fails at once.
		_, err = c.Stream(uniqueName(t)).Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{})
		if !picomq.IsKind(err, picomq.KindNotFound) {
			t.Fatalf("subscribe to a missing stream: %v", err)
		}
	})
}

// TestSubscribeStreamDeleted: deleting the stream ends a subscription with
// a not-found error once it tries to reconnect.
func TestSubscribeStreamDeleted(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	s := c.Stream(createStream(t, ctx, c, "application/json"))
	sub, err := s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev := <-sub.Events() // the first control event: caught up
	if ev.Type != picomq.EventControl || !ev.UpToDate {
		t.Fatalf("first event %+v", ev)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for range sub.Events() {
	}
	if err := sub.Err(); !picomq.IsKind(err, picomq.KindNotFound) {
		var ce *picomq.ClientError
		errors.As(err, &ce)
		t.Fatalf("Err after delete: %v (%+v)", err, ce)
	}
}

// TestSubscribeOnEvent: with OnEvent set, events are handed to the
// callback on the subscription's reading goroutine, in order, exactly
// once, across a reconnect, and nothing is sent on Events (which is closed
// when the subscription ends). The callback runs before the subscription
// moves on: inside it, Position is still the previous event's Next, which
// a hand-over to another goroutine cannot promise.
func TestSubscribeOnEvent(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		s := c.Stream(createStream(t, ctx, c, "application/json"))
		appendBodies(t, ctx, s, bodies(0, 5))
		col := &collector{recs: make(chan eventRecord, 100000)}
		var sub *picomq.Subscription
		ready := make(chan struct{})
		var prevNext string
		var stale atomic.Int32
		sub, err := s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{OnEvent: func(ev picomq.Event) {
			<-ready // sub is assigned
			if prevNext != "" && sub.Position() != prevNext {
				stale.Add(1)
			}
			prevNext = ev.Next
			for _, r := range ev.Records {
				col.recs <- eventRecord{r, ev.Next}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		col.expect(t, c, 0, bodies(0, 5))
		appendBodies(t, ctx, s, bodies(5, 20))
		col.expect(t, c, 5, bodies(5, 20))
		for i := 20; sub.Reconnects() < 1; i++ { // the test servers end SSE connections after 1s
			appendBodies(t, ctx, s, bodies(i, i+1))
			col.expect(t, c, i, bodies(i, i+1))
			if ctx.Err() != nil {
				t.Fatal("no reconnect within the test's time")
			}
		}
		select {
		case ev, ok := <-sub.Events():
			t.Fatalf("Events delivered %+v (open %v) while OnEvent is set", ev, ok)
		default:
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if _, ok := <-sub.Events(); ok {
			t.Fatal("Events delivered an event after Close")
		}
		if n := stale.Load(); n > 0 {
			t.Fatalf("Position had moved past the previous event inside OnEvent %d times: not called before the subscription moved on", n)
		}
		if err := sub.Err(); err != nil {
			t.Fatalf("Err after Close: %v", err)
		}
	})
}

// BenchmarkSubscribeDelivery: append-to-delivery time of one record
// through a real server, the consumer receiving on Events against
// OnEvent (no hand-over to the consumer's goroutine), same run.
func BenchmarkSubscribeDelivery(b *testing.B) {
	for _, mode := range []string{"events", "onevent"} {
		b.Run(mode, func(b *testing.B) {
			c, err := picomq.NewPico(picoURL)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			s := c.Stream(benchStream(b))
			got := make(chan struct{}, 1)
			opts := picomq.SubscribeOptions{}
			onEvent := func(ev picomq.Event) {
				if len(ev.Records) > 0 {
					got <- struct{}{}
				}
			}
			if mode == "onevent" {
				opts.OnEvent = onEvent
			}
			sub, err := s.Subscribe(ctx, c.Beginning(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Close()
			if mode == "events" {
				go func() {
					for ev := range sub.Events() {
						onEvent(ev)
					}
				}()
			}
			body := make([]byte, 100)
			b.ResetTimer()
			for range b.N {
				if _, err := s.Append(ctx, picomq.AppendRecord{Body: body}); err != nil {
					b.Fatal(err)
				}
				<-got
			}
		})
	}
}
