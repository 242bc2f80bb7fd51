package picomq

// Unit tests of the SDK's parsers and policies; they need no server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestSSEReader(t *testing.T) {
	in := ": keep-alive\n\n" +
		"event: data\nid: 4\ndata: [1,\ndata:  2]\n\n" + // one space is stripped, the second kept
		"event: control\r\ndata:{\"a\":1}\r\n\r\n" + // CRLF
		"event: control\rdata: x\r\r" + // CR alone
		"data: no event name\nid\n\n" +
		"event: data\ndata: unterminated" // dropped: never completed
	r := newSSEReader(strings.NewReader(in))
	want := []sseEvent{
		{event: "data", id: "4", data: []byte("[1,\n 2]")},
		{event: "control", data: []byte(`{"a":1}`)},
		{event: "control", data: []byte("x")},
		{event: "message", data: []byte("no event name")},
	}
	for i, w := range want {
		ev, err := r.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.event != w.event || ev.id != w.id || string(ev.data) != string(w.data) {
			t.Fatalf("event %d: %+v (data %q), want %+v (data %q)", i, ev, ev.data, w, w.data)
		}
	}
	if _, err := r.next(); err != io.EOF {
		t.Fatalf("after the last event: %v, want EOF", err)
	}
}

func TestSSEReaderLongLine(t *testing.T) {
	big := strings.Repeat("x", 300<<10) // several buffer fills
	r := newSSEReader(strings.NewReader("event: data\ndata: " + big + "\n\n"))
	ev, err := r.next()
	if err != nil || string(ev.data) != big {
		t.Fatalf("long line: %v, %d bytes", err, len(ev.data))
	}
}

func TestClientErrorFromResponse(t *testing.T) {
	resp := &http.Response{StatusCode: 409, Header: http.Header{}}
	resp.Header.Set("Pico-Producer-Expected-Seq", "7")
	body := []byte(`{"error":{"code":"producer_seq_gap","message":"gap","expectedSeq":7,"receivedSeq":9}}`)
	e := newClientError("POST", "http://h/s", resp, body, ProtocolPico)
	if e.Kind != KindSequenceGap || e.Code != "producer_seq_gap" || e.Message != "gap" || *e.ExpectedSeq != 7 || *e.ReceivedSeq != 9 {
		t.Fatalf("%+v", e)
	}
	if !strings.Contains(e.Error(), "409 producer_seq_gap: gap") {
		t.Fatalf("message %q", e.Error())
	}
	wrapped := fmt.Errorf("context: %w", e)
	var ce *ClientError
	if !errors.As(wrapped, &ce) || !IsKind(wrapped, KindSequenceGap) || ErrorKind(wrapped) != KindSequenceGap {
		t.Fatal("errors.As / IsKind through wrapping")
	}

	// HEAD: no body; Pico puts the code in a header.
	resp = &http.Response{StatusCode: 404, Header: http.Header{"Pico-Error-Code": {"stream_not_found"}}}
	if e := newClientError("HEAD", "u", resp, nil, ProtocolPico); e.Kind != KindNotFound || e.Code != "stream_not_found" {
		t.Fatalf("HEAD error %+v", e)
	}
	// Durable Streams: numbers in Producer-*/Stream-* headers.
	resp = &http.Response{StatusCode: 403, Header: http.Header{"Producer-Epoch": {"5"}}}
	e = newClientError("POST", "u", resp, []byte(`{"error":{"code":"producer_fenced","message":"m"}}`), ProtocolDurableStreams)
	if e.Kind != KindFenced || e.CurrentEpoch == nil || *e.CurrentEpoch != 5 {
		t.Fatalf("DS fenced %+v", e)
	}
	resp = &http.Response{StatusCode: 409, Header: http.Header{"Stream-Closed": {"true"}, "Stream-Next-Offset": {"0000000000000000_0000000000000003"}}}
	e = newClientError("POST", "u", resp, nil, ProtocolDurableStreams)
	if e.Kind != KindClosed || e.NextPosition != "0000000000000000_0000000000000003" {
		t.Fatalf("DS closed %+v", e)
	}
	// Statuses without a known code; Retry-After.
	for status, kind := range map[int]Kind{400: KindBadRequest, 401: KindUnauthorized, 410: KindGone, 413: KindTooLarge,
		415: KindUnsupportedMedia, 416: KindOutOfRange, 429: KindUnavailable, 500: KindInternal, 503: KindUnavailable, 418: KindUnknown} {
		resp = &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {"3"}}}
		e := newClientError("GET", "u", resp, []byte("plain text"), ProtocolPico)
		if e.Kind != kind || e.RetryAfter != 3*time.Second || e.Message != "plain text" {
			t.Errorf("status %d: %+v, want kind %v", status, e, kind)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.normalized()
	for attempt := 1; attempt <= 8; attempt++ {
		nominal := min(100*time.Millisecond<<(attempt-1), time.Second)
		for range 50 {
			d := p.delay(attempt, 0)
			if d < nominal/2 || d > nominal {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, nominal/2, nominal)
			}
		}
	}
	if d := p.delay(1, 700*time.Millisecond); d != 700*time.Millisecond {
		t.Fatalf("Retry-After 700ms: %v", d)
	}
	if d := p.delay(1, time.Hour); d != time.Second {
		t.Fatalf("Retry-After is capped at MaxBackoff: %v", d)
	}
	if q := (RetryPolicy{}).normalized(); q.MaxAttempts != 1 || q.InitialBackoff <= 0 || q.MaxBackoff < q.InitialBackoff {
		t.Fatalf("zero policy normalized to %+v", q)
	}
}

func TestPositions(t *testing.T) {
	pico, _ := NewPico("http://h")
	ds, _ := NewDurableStreams("http://h")
	if pico.Beginning() != "0" || ds.Beginning() != "-1" {
		t.Fatal("beginnings")
	}
	if got := ds.PositionAt(42); got != "0000000000000000_0000000000000042" {
		t.Fatalf("DS PositionAt: %s", got)
	}
	for _, c := range []Client{pico, ds} {
		for _, n := range []int64{0, 1, 9999999999} {
			if got, err := c.OffsetOf(c.PositionAt(n)); err != nil || got != n {
				t.Fatalf("%v: OffsetOf(PositionAt(%d)) = %d, %v", c.Protocol(), n, got, err)
			}
		}
		for _, bad := range []string{"now", "-1", "", "x", "1_2_3", "00000000000000001_1"} {
			if _, err := c.OffsetOf(bad); err == nil {
				t.Errorf("%v: OffsetOf(%q) accepted", c.Protocol(), bad)
			}
		}
	}
	// The DS stream root: /v1/stream by default, a given path as is.
	if c, _ := NewDurableStreams("http://h:1/"); c.(*client).prefix != "/v1/stream" {
		t.Fatal("default DS prefix")
	}
	if c, _ := NewDurableStreams("http://h:1/custom/root/"); c.(*client).prefix != "/custom/root" {
		t.Fatal("explicit DS prefix")
	}
	if got := pico.(*client).requestURI(&call{path: "/a/b:c", query: map[string][]string{"offset": {"3"}}}); got != "/a/b:c?offset=3" {
		t.Fatalf("request URI %q", got)
	}
}

func TestDSBody(t *testing.T) {
	body, err := dsBody([]AppendRecord{{Body: []byte(` {"a":1} `)}, {Body: []byte(`[1,2]`)}}, true)
	if err != nil || string(body) != `[{"a":1},[1,2]]` {
		t.Fatalf("JSON body %s %v", body, err)
	}
	body, err = dsBody([]AppendRecord{{Body: []byte("ab")}, {Body: []byte("c")}}, false)
	if err != nil || string(body) != "abc" {
		t.Fatalf("byte body %s %v", body, err)
	}
	if _, err := dsBody([]AppendRecord{{Body: []byte("{")}}, true); !IsKind(err, KindBadRequest) {
		t.Fatalf("invalid JSON: %v", err)
	}
	c, _ := NewDurableStreams("http://h")
	recs, err := dsRecords([]byte(`[1,"x"]`), true, "-1", "0000000000000000_0000000000000007", c.(*client))
	if err != nil || len(recs) != 2 || recs[0].Position != c.PositionAt(5) || recs[1].Position != c.PositionAt(6) || string(recs[1].Body) != `"x"` {
		t.Fatalf("JSON page: %+v %v", recs, err)
	}
	// Positions cannot be derived from a foreign offset form: the first
	// record starts where the read did.
	recs, _ = dsRecords([]byte(`[1,2]`), true, "abc", "def", c.(*client))
	if recs[0].Position != "abc" || recs[1].Position != "" {
		t.Fatalf("foreign offsets: %+v", recs)
	}
	recs, _ = dsRecords([]byte("bytes"), false, "-1", "0000000000000000_0000000000000007", c.(*client))
	if len(recs) != 1 || recs[0].Position != "-1" || string(recs[0].Body) != "bytes" {
		t.Fatalf("byte page: %+v", recs)
	}
}

// livePair is what the node writes to a live reader per append: a data
// event and its control event.
const livePair = "event: data\nid: 8\ndata: [{\"offset\":7,\"timestamp\":1764950000000,\"value\":\"1764950000000000000 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}]\n\n" +
	"event: control\nid: 8\ndata: {\"nextOffset\":8,\"upToDate\":true,\"closed\":false,\"cursor\":\"176495000\"}\n\n"

// livePairs is what the node writes to a live reader for n appends, the
// ids going up as the node's do.
func livePairs(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "event: data\nid: %d\ndata: [{\"offset\":%d,\"timestamp\":1764950000000,\"value\":\"1764950000000000000 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}]\n\n"+
			"event: control\nid: %d\ndata: {\"nextOffset\":%d,\"upToDate\":true,\"closed\":false,\"cursor\":\"176495000\"}\n\n",
			1001+i, 1000+i, 1001+i, 1001+i)
	}
	return b.String()
}

// TestSSEReaderAllocs: reading a live append's two events allocates only
// what the events keep: each one's data and their id, one string for both
// (the node gives them the same). Every line was copied, and every event
// name made a string: 12 allocations per pair; then 4, an id each.
func TestSSEReaderAllocs(t *testing.T) {
	r := newSSEReader(strings.NewReader(livePairs(200)))
	i := 1001
	var id [20]byte
	n := testing.AllocsPerRun(100, func() {
		for _, want := range []string{"data", "control"} {
			ev, err := r.next()
			if err != nil || ev.event != want || ev.id != string(strconv.AppendInt(id[:0], int64(i), 10)) {
				t.Fatalf("%+v %v", ev, err)
			}
		}
		i++
	})
	if n > 3 {
		t.Fatalf("reading a data and a control event: %.0f allocations, want at most 3", n)
	}
}

// TestSubscriptionEventAllocs: what a subscription allocates per append
// it delivers to OnEvent, from the SSE bytes to the two events: the data
// event's bytes, which its record's body aliases, its id, the record slice
// and its position. The events were put in a slice allocated per event,
// each body copied out of the event's data, the control event's Next and
// cursor made anew: 11 allocations.
func TestSubscriptionEventAllocs(t *testing.T) {
	c, err := newClient(ProtocolPico, "http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	const pairs = 100
	in := livePairs(pairs)
	var got []string
	sub := &Subscription{s: &stream{c: c, name: "/s"}, opts: SubscribeOptions{OnEvent: func(e Event) {
		got = append(got[:0], e.Next)
	}}}
	n := testing.AllocsPerRun(5, func() {
		resp := &http.Response{Body: io.NopCloser(strings.NewReader(in)), Header: http.Header{}}
		delivered, closed, err := sub.read(context.Background(), resp)
		if err != nil || !delivered || closed {
			t.Fatalf("read: %v %v %v", delivered, closed, err)
		}
	}) / pairs
	if got[0] != strconv.Itoa(1000+pairs) || sub.Position() != got[0] || sub.cursor != "176495000" {
		t.Fatalf("last event's Next %q, position %q, cursor %q", got[0], sub.Position(), sub.cursor)
	}
	t.Logf("%.2f allocations per append", n)
	if n > 5.5 {
		t.Fatalf("%.2f allocations per append's events, want at most 5", n)
	}
}

// FuzzSSEReader: the events read from a stream do not depend on how its
// bytes arrive (all at once, one byte per read, half of each read), so
// nothing an event holds aliases the reader's buffer.
func FuzzSSEReader(f *testing.F) {
	f.Add(livePair + livePair)
	f.Add(": keep-alive\n\nevent: data\nid: 4\ndata: [1,\ndata:  2]\n\nevent: control\r\ndata:{\"a\":1}\r\n\r\nevent: control\rdata: x\r\rdata: no event name\nid\n\nevent: data\ndata: unterminated")
	f.Add("event: error\ndata: {\"error\":{}}\n\n\r\n\revent:\nid: 1\x00\ndata\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		read := func(r io.Reader) (evs []sseEvent, err error) {
			sr := newSSEReader(r)
			for {
				ev, err := sr.next()
				if err != nil {
					return evs, err
				}
				evs = append(evs, ev)
			}
		}
		whole, werr := read(strings.NewReader(in))
		for _, r := range []io.Reader{iotest.OneByteReader(strings.NewReader(in)), iotest.HalfReader(strings.NewReader(in))} {
			evs, err := read(r)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("error %v, read whole %v", err, werr)
			}
			if len(evs) != len(whole) {
				t.Fatalf("%d events, read whole %d", len(evs), len(whole))
			}
			for i := range evs {
				a, b := evs[i], whole[i]
				if a.event != b.event || a.id != b.id || string(a.data) != string(b.data) || (a.data == nil) != (b.data == nil) {
					t.Fatalf("event %d: %+v, read whole %+v", i, a, b)
				}
			}
		}
	})
}

// BenchmarkSSEReader: reading a live append's data and control events
// (the lines and fields; the records' decode is BenchmarkSSEDecode's).
func BenchmarkSSEReader(b *testing.B) {
	in := strings.Repeat(livePair, 1000)
	b.ReportAllocs()
	var r *sseReader
	i := 0
	for b.Loop() {
		if i%1000 == 0 {
			r = newSSEReader(strings.NewReader(in))
		}
		i++
		for range 2 {
			if _, err := r.next(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
