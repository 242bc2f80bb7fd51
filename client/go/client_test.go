package picomq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

func TestCreateAppendReadHeadDelete(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		s := c.Stream(uniqueName(t))

		res, err := s.Create(ctx, "application/json", 0)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.Info.ContentType != "application/json" {
			t.Fatalf("create: %+v", res)
		}
		res, err = s.Create(ctx, "application/json", 0)
		if err != nil || res.Created {
			t.Fatalf("identical create: %+v %v", res, err)
		}
		_, err = s.Create(ctx, "text/plain", 0)
		if !picomq.IsKind(err, picomq.KindConflict) {
			t.Fatalf("create with another content type: %v, want KindConflict", err)
		}
		var ce *picomq.ClientError
		if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code == "" || ce.Message == "" {
			t.Fatalf("conflict error %#v", err)
		}

		ack, err := s.Append(ctx, picomq.AppendRecord{Body: []byte(`{"a":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if ack.Start != c.PositionAt(0) || ack.Next != c.PositionAt(1) || ack.Count != 1 {
			t.Fatalf("first ack %+v", ack)
		}
		ack, err = s.Append(ctx, picomq.AppendRecord{Body: []byte(`{"b":2}`)}, picomq.AppendRecord{Body: []byte(`[3,4]`)})
		if err != nil {
			t.Fatal(err)
		}
		if ack.Start != c.PositionAt(1) || ack.Next != c.PositionAt(3) || ack.Count != 2 {
			t.Fatalf("batch ack %+v", ack)
		}
		_, err = s.Append(ctx, picomq.AppendRecord{Body: []byte(`not json`)})
		if !picomq.IsKind(err, picomq.KindBadRequest) {
			t.Fatalf("invalid JSON append: %v, want KindBadRequest", err)
		}

		page, err := s.Read(ctx, c.Beginning(), picomq.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{`{"a":1}`, `{"b":2}`, `[3,4]`}
		if len(page.Records) != len(want) || !page.UpToDate || page.Next != c.PositionAt(3) {
			t.Fatalf("page %+v", page)
		}
		for i, r := range page.Records {
			if string(r.Body) != want[i] || r.Position != c.PositionAt(int64(i)) {
				t.Fatalf("record %d: %q at %q, want %q at %q", i, r.Body, r.Position, want[i], c.PositionAt(int64(i)))
			}
		}
		// Continuing from Next: nothing more, up to date.
		page, err = s.Read(ctx, page.Next, picomq.ReadOptions{})
		if err != nil || len(page.Records) != 0 || !page.UpToDate || page.Next != c.PositionAt(3) {
			t.Fatalf("read at the end: %+v %v", page, err)
		}
		// "now" is the end on both protocols.
		page, err = s.Read(ctx, picomq.PositionNow, picomq.ReadOptions{})
		if err != nil || len(page.Records) != 0 || page.Next != c.PositionAt(3) {
			t.Fatalf("read at now: %+v %v", page, err)
		}

		info, err := s.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Next != c.PositionAt(3) || info.ContentType != "application/json" {
			t.Fatalf("head %+v", info)
		}
		info, err = s.Describe(ctx)
		if err != nil || info.Next != c.PositionAt(3) || info.ContentType != "application/json" {
			t.Fatalf("describe %+v %v", info, err)
		}

		if err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = s.Head(ctx)
		if !picomq.IsKind(err, picomq.KindNotFound) {
			t.Fatalf("head after delete: %v, want KindNotFound", err)
		}
		_, err = s.Read(ctx, c.Beginning(), picomq.ReadOptions{})
		if !errors.As(err, &ce) || ce.Status != 404 || ce.Kind != picomq.KindNotFound {
			t.Fatalf("read after delete: %#v", err)
		}
		if err := s.Delete(ctx); !picomq.IsKind(err, picomq.KindNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func TestBinaryRecordsKeysAndHeaders(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	s := c.Stream(createStream(t, ctx, c, "application/octet-stream"))
	recs := []picomq.AppendRecord{
		{Key: []byte("k1"), Body: []byte{0, 1, 2, 0xff}, Headers: []picomq.Header{{Key: "Trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xfe}}}},
		{Body: nil},
		{Key: []byte{}, Body: []byte("plain\ntext")},
	}
	if _, err := s.Append(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got []picomq.Record) {
		t.Helper()
		if len(got) != len(recs) {
			t.Fatalf("%s: %d records, want %d", what, len(got), len(recs))
		}
		for i, r := range got {
			w := recs[i]
			if !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Body, w.Body) || len(r.Headers) != len(w.Headers) {
				t.Fatalf("%s: record %d = %+v, want %+v", what, i, r, w)
			}
			for j := range r.Headers {
				if r.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(r.Headers[j].Value, w.Headers[j].Value) {
					t.Fatalf("%s: record %d header %d = %+v", what, i, j, r.Headers[j])
				}
			}
			if r.Timestamp.IsZero() || time.Since(r.Timestamp) > time.Hour {
				t.Fatalf("%s: record %d timestamp %v", what, i, r.Timestamp)
			}
		}
	}
	page, err := s.Read(ctx, c.Beginning(), picomq.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("read", page.Records)

	// The SSE path decodes the JSON representation (base64 where needed).
	sub, err := s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []picomq.Record
	for ev := range sub.Events() {
		got = append(got, ev.Records...)
		if len(got) >= len(recs) {
			break
		}
	}
	check("subscribe", got)
}

func TestRecordsIterator(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		s := c.Stream(createStream(t, ctx, c, "application/json"))
		const n = 25
		for i := 0; i < n; i += 5 {
			var batch []picomq.AppendRecord
			for j := i; j < i+5; j++ {
				batch = append(batch, picomq.AppendRecord{Body: []byte(strconv.Itoa(j))})
			}
			if _, err := s.Append(ctx, batch...); err != nil {
				t.Fatal(err)
			}
		}
		it := s.Records(c.Beginning(), picomq.RecordsOptions{Limit: 7})
		i := 0
		for it.Next(ctx) {
			r := it.Record()
			if string(r.Body) != strconv.Itoa(i) || r.Position != c.PositionAt(int64(i)) {
				t.Fatalf("record %d: %q at %s", i, r.Body, r.Position)
			}
			i++
			if i == 10 {
				break
			}
		}
		if it.Err() != nil || i != 10 {
			t.Fatalf("after 10: %v, %d records", it.Err(), i)
		}
		// Resume from the iterator's position with a new iterator.
		resume := it.Position()
		if resume != c.PositionAt(10) {
			t.Fatalf("position after 10 records: %q", resume)
		}
		it = s.Records(resume, picomq.RecordsOptions{})
		for it.Next(ctx) {
			if string(it.Record().Body) != strconv.Itoa(i) {
				t.Fatalf("resumed record %d: %q", i, it.Record().Body)
			}
			i++
		}
		if it.Err() != nil || i != n || it.Position() != c.PositionAt(n) {
			t.Fatalf("end: err %v, %d records, position %s", it.Err(), i, it.Position())
		}
		// range-over-func form.
		count := 0
		for _, err := range s.Records(c.Beginning(), picomq.RecordsOptions{}).All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			count++
		}
		if count != n {
			t.Fatalf("All: %d records", count)
		}
	})
}

func TestRecordsLive(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		s := c.Stream(createStream(t, ctx, c, "text/plain"))
		if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("old")}); err != nil {
			t.Fatal(err)
		}
		it := s.Records(c.Beginning(), picomq.RecordsOptions{Live: true})
		if !it.Next(ctx) || string(it.Record().Body) != "old" {
			t.Fatalf("first record: %v %q", it.Err(), it.Record().Body)
		}
		// The iterator is caught up; the next Next long-polls until the
		// append below lands.
		go func() {
			if _, err := s.Append(context.Background(), picomq.AppendRecord{Body: []byte("new")}); err != nil {
				t.Error(err)
			}
		}()
		if !it.Next(ctx) || string(it.Record().Body) != "new" || it.Record().Position != c.PositionAt(1) {
			t.Fatalf("live record: %v %q", it.Err(), it.Record().Body)
		}
	})
}

// TestLongPollCancel: cancelling the context of Next interrupts a pending
// long-poll at once, although the server would hold it for 25s.
func TestLongPollCancel(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		name := createStream(t, ctx, c, "text/plain")
		px := newProxy(t, serverURL(c.Protocol()))
		pc := newClient(t, c.Protocol(), px.URL)
		it := pc.Stream(name).Records(pc.Beginning(), picomq.RecordsOptions{Live: true})
		nctx, cancel := context.WithCancel(ctx)
		done := make(chan time.Time, 1)
		go func() {
			it.Next(nctx)
			done <- time.Now()
		}()
		// Wait until the long-poll is at the server, then cancel.
		px.waitArrival(t, 10*time.Second, func(r seenRequest) bool { return r.Query.Get("live") == "long-poll" })
		cancelled := time.Now()
		cancel()
		select {
		case end := <-done:
			if d := end.Sub(cancelled); d > 2*time.Second {
				t.Fatalf("Next returned %v after cancel", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Next still blocked 10s after its context was cancelled")
		}
		if !errors.Is(it.Err(), context.Canceled) {
			t.Fatalf("Err after cancel: %v", it.Err())
		}
		// The iterator carries on with a live context.
		if _, err := c.Stream(name).Append(ctx, picomq.AppendRecord{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if !it.Next(ctx) || string(it.Record().Body) != "x" {
			t.Fatalf("Next after a cancelled Next: %v", it.Err())
		}
	})
}

// TestRetryPolicy: read-shaped calls are retried on 503 (with
// Retry-After), appends never; cancelling the context interrupts a retry
// delay.
func TestRetryPolicy(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	direct := newClient(t, picomq.ProtocolPico, picoURL)
	name := createStream(t, ctx, direct, "text/plain")
	px := newProxy(t, picoURL)
	var failures atomic.Int32
	failures.Store(2)
	px.intercept = func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if failures.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"code":"unavailable","message":"test"}}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	c := newClient(t, picomq.ProtocolPico, px.URL, picomq.WithRetryPolicy(picomq.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	s := c.Stream(name)
	if _, err := s.Read(ctx, "0", picomq.ReadOptions{}); err != nil {
		t.Fatalf("read after two 503s: %v", err)
	}
	if n := len(px.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}

	failures.Store(1)
	_, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("x")})
	if !picomq.IsKind(err, picomq.KindUnavailable) {
		t.Fatalf("append through a 503: %v, want KindUnavailable", err)
	}
	if n := len(px.requests()); n != 4 {
		t.Fatalf("the append was sent %d times, want once", n-3)
	}

	// A long Retry-After: the context ends the wait.
	px.intercept = func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		w.Header().Set("Retry-After", "30")
		http.Error(w, `{"error":{"code":"unavailable","message":"test"}}`, http.StatusServiceUnavailable)
		return true
	}
	slow := newClient(t, picomq.ProtocolPico, px.URL, picomq.WithRetryPolicy(picomq.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Minute, MaxBackoff: time.Minute}))
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := slow.Stream(name).Head(rctx)
		errc <- err
	}()
	px.waitArrival(t, 10*time.Second, func(r seenRequest) bool { return r.Method == "HEAD" })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("head during a retry delay: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled context did not end the retry delay")
	}
}

func TestListDescribeTrim(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	prefix := uniqueName(t) + "/"
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("%ss%d", prefix, i)
		names = append(names, name)
		if _, err := c.Stream(name).Create(ctx, "text/plain", time.Hour, picomq.WithKafkaTopic("")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, err := c.List(ctx, picomq.ListOptions{Prefix: prefix, Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Streams {
			got = append(got, s.Name)
			if s.Retention != time.Hour || s.ContentType != "text/plain" {
				t.Fatalf("listed %+v", s)
			}
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("listing does not end")
		}
		cursor = page.NextCursor
	}
	if fmt.Sprint(got) != fmt.Sprint(names) {
		t.Fatalf("listed %v, want %v", got, names)
	}

	s := c.Stream(names[0])
	for i := range 4 {
		if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.Trim(ctx, "2")
	if err != nil {
		t.Fatal(err)
	}
	if info.Start != "2" || info.Next != "4" {
		t.Fatalf("after trim: %+v", info)
	}
	info, err = s.Describe(ctx)
	if err != nil || info.Start != "2" || info.ID == 0 || info.CreatedAt.IsZero() || info.Retention != time.Hour {
		t.Fatalf("describe %+v %v", info, err)
	}
	// From the beginning, a trimmed stream reads from its start.
	page, err := s.Read(ctx, "-1", picomq.ReadOptions{})
	if err != nil || len(page.Records) != 2 || page.Records[0].Position != "2" {
		t.Fatalf("read from the start after trim: %+v %v", page, err)
	}
	_, err = s.Read(ctx, "0", picomq.ReadOptions{})
	var ce *picomq.ClientError
	if !picomq.IsKind(err, picomq.KindGone) || !errors.As(err, &ce) || ce.StartPosition != "2" {
		t.Fatalf("read of a trimmed offset: %#v", err)
	}
}

// TestUnsupported: operations without an equivalent fail with a structured
// error, and send nothing.
func TestUnsupported(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	px := newProxy(t, picoURL)
	ds := newClient(t, picomq.ProtocolDurableStreams, px.URL)
	pico := newClient(t, picomq.ProtocolPico, px.URL)
	s := ds.Stream("/x")
	check := func(what string, err error) {
		t.Helper()
		var ue *picomq.UnsupportedError
		if !picomq.IsKind(err, picomq.KindUnsupported) || !errors.Is(err, picomq.ErrUnsupported) || !errors.As(err, &ue) || ue.Op == "" {
			t.Fatalf("%s: %v, want an UnsupportedError", what, err)
		}
	}
	_, err := ds.List(ctx, picomq.ListOptions{})
	check("DS List", err)
	_, err = s.Trim(ctx, "0000000000000000_0000000000000001")
	check("DS Trim", err)
	_, err = s.Create(ctx, "text/plain", time.Hour)
	check("DS retention", err)
	_, err = s.Create(ctx, "text/plain", 0, picomq.WithKafkaTopic("t"))
	check("DS topic", err)
	_, err = s.Append(ctx, picomq.AppendRecord{Key: []byte("k"), Body: []byte("v")})
	check("DS key", err)
	p, err := s.NewProducer(picomq.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Send(ctx, picomq.AppendRecord{Body: []byte("v"), Headers: []picomq.Header{{Key: "h"}}})
	check("DS producer header", err)
	_, err = pico.Stream("/x").CloseStream(ctx)
	check("Pico CloseStream", err)
	_, err = pico.Stream("/x").Create(ctx, "text/plain", 0, picomq.WithTTL(time.Minute))
	check("Pico TTL", err)
	if n := len(px.requests()); n != 0 {
		t.Fatalf("unsupported operations sent %d requests", n)
	}
}

func TestDurableStreamsClose(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolDurableStreams, dsURL)
	s := c.Stream(uniqueName(t))
	if _, err := s.Create(ctx, "text/plain", 0, picomq.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, picomq.AppendRecord{Body: []byte("hello ")}, picomq.AppendRecord{Body: []byte("world")}); err != nil {
		t.Fatal(err)
	}
	sub, err := s.Subscribe(ctx, c.Beginning(), picomq.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	final, err := s.CloseStream(ctx)
	if err != nil || final != c.PositionAt(1) {
		t.Fatalf("close: %q %v", final, err)
	}
	var body []byte
	var last picomq.Event
	for ev := range sub.Events() {
		for _, r := range ev.Records {
			body = append(body, r.Body...)
		}
		last = ev
	}
	if sub.Err() != nil || !last.Closed || string(body) != "hello world" {
		t.Fatalf("subscription of a closed stream: err %v, last %+v, body %q", sub.Err(), last, body)
	}
	_, err = s.Append(ctx, picomq.AppendRecord{Body: []byte("late")})
	var ce *picomq.ClientError
	if !picomq.IsKind(err, picomq.KindClosed) || !errors.As(err, &ce) || ce.NextPosition != final {
		t.Fatalf("append to a closed stream: %#v", err)
	}
	info, err := s.Head(ctx)
	if err != nil || !info.Closed || info.TTL != time.Hour {
		t.Fatalf("head: %+v %v", info, err)
	}
	page, err := s.Read(ctx, c.Beginning(), picomq.ReadOptions{})
	if err != nil || !page.Closed || len(page.Records) != 1 || string(page.Records[0].Body) != "hello world" {
		t.Fatalf("read: %+v %v", page, err)
	}
	// A live iterator ends at the end of a closed stream.
	it := s.Records(c.Beginning(), picomq.RecordsOptions{Live: true})
	n := 0
	for it.Next(ctx) {
		n++
	}
	if it.Err() != nil || n != 1 {
		t.Fatalf("live iterator over a closed stream: %v, %d records", it.Err(), n)
	}
}

func TestConstructorsDoNoIO(t *testing.T) {
	// Nothing listens on port 1: constructors and handles must not care.
	for _, p := range []picomq.Protocol{picomq.ProtocolPico, picomq.ProtocolDurableStreams} {
		c, err := picomq.New(p, "http://127.0.0.1:1", picomq.WithToken("t"))
		if err != nil {
			t.Fatal(err)
		}
		s := c.Stream("/a")
		if _, err := s.NewProducer(picomq.ProducerOptions{}); err != nil {
			t.Fatal(err)
		}
		_ = s.Records(c.Beginning(), picomq.RecordsOptions{})
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://h?q=1", "://x"} {
		if _, err := picomq.NewPico(bad); err == nil {
			t.Errorf("NewPico(%q) accepted", bad)
		}
	}
	if _, err := picomq.NewPico("http://h", picomq.WithToken("a\nb")); err == nil {
		t.Error("a token with a line break was accepted")
	}
}
