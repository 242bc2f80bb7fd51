package pico

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

func TestLongPollWokenByAppend(t *testing.T) {
	s := newServer(t, Config{LongPollTimeout: 20 * time.Second}, stream.Config{})
	s.create("/lp", "text/plain")
	s.do("POST", "/lp", []byte("old"))

	// Data already there: answered at once, like a catch-up read.
	recs, _ := s.readJSON("/lp?offset=0&live=long-poll")
	if len(recs) != 1 {
		t.Fatalf("long-poll with data: %+v", recs)
	}

	got := make(chan resp, 1)
	go func() { got <- s.do("GET", "/lp?offset=1&live=long-poll", nil) }()
	time.Sleep(200 * time.Millisecond) // let the poll park
	select {
	case r := <-got:
		t.Fatalf("long-poll returned before any append: %d %s", r.Status, r.Body)
	default:
	}
	start := time.Now()
	s.do("POST", "/lp", []byte("new"))
	var r resp
	within(t, 5*time.Second, "woken long-poll", func() { r = <-got })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("long-poll took %s after the append", d)
	}
	wantStatus(t, r, 200, "woken long-poll")
	var recs2 []jsonRec
	r.json(t, &recs2)
	if len(recs2) != 1 || *recs2[0].Value != "new" || recs2[0].Offset != 1 {
		t.Fatalf("woken long-poll read %+v", recs2)
	}
	wantHeader(t, r, wire.HeaderNextOffset, "2", "woken long-poll")
	wantHeader(t, r, wire.HeaderUpToDate, "true", "woken long-poll")
}

func TestLongPollTimeoutIs204WithHeaders(t *testing.T) {
	s := newServer(t, Config{LongPollTimeout: 300 * time.Millisecond}, stream.Config{})
	s.create("/lp", "text/plain")
	start := time.Now()
	r := s.do("GET", "/lp?offset=0&live=long-poll&cursor=5", nil)
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Fatalf("long-poll returned after %s, want about the 300ms cap", d)
	}
	wantStatus(t, r, 204, "long-poll timeout")
	wantHeader(t, r, wire.HeaderNextOffset, "0", "long-poll timeout")
	wantHeader(t, r, wire.HeaderUpToDate, "true", "long-poll timeout")
	if r.Header.Get(wire.HeaderCursor) == "" || r.Header.Get(wire.HeaderCursor) == "5" || len(r.Body) != 0 {
		t.Fatalf("timeout response: %v %q", r.Header, r.Body)
	}
}

func TestLongPollStreamDeleted(t *testing.T) {
	s := newServer(t, Config{LongPollTimeout: 20 * time.Second}, stream.Config{})
	s.create("/gone", "text/plain")
	got := make(chan resp, 1)
	go func() { got <- s.do("GET", "/gone?live=long-poll", nil) }()
	time.Sleep(200 * time.Millisecond)
	wantStatus(t, s.do("DELETE", "/gone", nil), 204, "delete")
	var r resp
	within(t, 5*time.Second, "long-poll on a deleted stream", func() { r = <-got })
	wantError(t, r, 404, wire.CodeNotFound, "long-poll on a deleted stream")
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	event, id, data string
}

type sseClient struct {
	t      testing.TB
	resp   *http.Response
	rd     *bufio.Reader
	events chan sseEvent
	cancel context.CancelFunc
	// comments counts keep-alive comment lines.
	comments chan struct{}
}

func (s *server) sse(path string, headers ...string) *sseClient {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		s.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != wire.MediaEventStream {
		cancel()
		s.t.Fatalf("SSE %s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	c := &sseClient{t: s.t, resp: res, rd: bufio.NewReader(res.Body), events: make(chan sseEvent, 100), cancel: cancel, comments: make(chan struct{}, 100)}
	go c.loop()
	s.t.Cleanup(func() { cancel(); res.Body.Close() })
	return c
}

func (c *sseClient) loop() {
	defer close(c.events)
	var ev sseEvent
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.event != "" || ev.data != "" {
				c.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
			select {
			case c.comments <- struct{}{}:
			default:
			}
		case strings.HasPrefix(line, "event: "):
			ev.event = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			ev.id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[len("data: "):]
		}
	}
}

func (c *sseClient) next(what string) sseEvent {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			c.t.Fatalf("%s: SSE stream ended", what)
		}
		return ev
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s: no SSE event within 10s", what)
	}
	return sseEvent{}
}

// expectData reads a data event and returns its records.
func (c *sseClient) expectData(what string) ([]jsonRec, string) {
	c.t.Helper()
	ev := c.next(what)
	if ev.event != wire.EventData {
		c.t.Fatalf("%s: event %q (%s), want data", what, ev.event, ev.data)
	}
	var recs []jsonRec
	if err := json.Unmarshal([]byte(ev.data), &recs); err != nil {
		c.t.Fatalf("%s: data %q: %v", what, ev.data, err)
	}
	return recs, ev.id
}

func (c *sseClient) expectControl(what string) wire.ControlEvent {
	c.t.Helper()
	ev := c.next(what)
	if ev.event != wire.EventControl {
		c.t.Fatalf("%s: event %q (%s), want control", what, ev.event, ev.data)
	}
	var ctl wire.ControlEvent
	if err := json.Unmarshal([]byte(ev.data), &ctl); err != nil {
		c.t.Fatalf("%s: control %q: %v", what, ev.data, err)
	}
	if ev.id == "" {
		c.t.Fatalf("%s: control event without id", what)
	}
	return ctl
}

func TestSSELiveAppendsAndResume(t *testing.T) {
	s := newServer(t, Config{SSETimeout: 30 * time.Second}, stream.Config{})
	s.create("/sse", "text/plain")
	s.do("POST", "/sse", []byte("a"))

	c := s.sse("/sse?offset=0&live=sse")
	recs, id := c.expectData("catch-up")
	if len(recs) != 1 || *recs[0].Value != "a" || id != "1" {
		t.Fatalf("catch-up: %+v id %s", recs, id)
	}
	if ctl := c.expectControl("after catch-up"); !ctl.UpToDate || ctl.NextOffset != 1 || ctl.Closed || ctl.Cursor == "" {
		t.Fatalf("control %+v", ctl)
	}
	for i, v := range []string{"b", "c"} {
		s.do("POST", "/sse", []byte(v))
		recs, id := c.expectData("live " + v)
		if len(recs) != 1 || *recs[0].Value != v || recs[0].Offset != int64(i+1) || id != []string{"2", "3"}[i] {
			t.Fatalf("live %s: %+v id %s", v, recs, id)
		}
		if ctl := c.expectControl("live " + v); !ctl.UpToDate || ctl.NextOffset != int64(i+2) {
			t.Fatalf("control %+v", ctl)
		}
	}
	c.cancel()

	// Reconnecting with Last-Event-ID resumes there, whatever the URL's
	// offset says (the browser repeats the original URL).
	s.do("POST", "/sse", []byte("d"))
	c2 := s.sse("/sse?offset=0&live=sse", "Last-Event-ID", "3")
	recs, id = c2.expectData("resume")
	if len(recs) != 1 || *recs[0].Value != "d" || id != "4" {
		t.Fatalf("resume: %+v id %s", recs, id)
	}

	// Bad resume points are ordinary JSON errors, before the stream starts.
	wantError(t, s.do("GET", "/sse?live=sse", nil, "Last-Event-ID", "x"), 400, wire.CodeInvalidOffset, "bad Last-Event-ID")
	wantError(t, s.do("GET", "/sse?live=sse&offset=99", nil), 416, wire.CodeOffsetOutOfRange, "SSE beyond the end")
	wantError(t, s.do("GET", "/sse?live=sse&format=binary", nil), 400, wire.CodeBadRequest, "binary SSE")
	wantError(t, s.do("GET", "/nope?live=sse", nil), 404, wire.CodeNotFound, "SSE of a missing stream")
}

func TestSSETimeoutKeepAliveAndDelete(t *testing.T) {
	s := newServer(t, Config{SSETimeout: 600 * time.Millisecond, SSEKeepAlive: 100 * time.Millisecond}, stream.Config{})
	s.create("/k", "text/plain")
	start := time.Now()
	c := s.sse("/k?live=sse")
	if ctl := c.expectControl("empty stream"); !ctl.UpToDate || ctl.NextOffset != 0 {
		t.Fatalf("control %+v", ctl)
	}
	select {
	case <-c.comments:
	case <-time.After(5 * time.Second):
		t.Fatal("no keep-alive comment on an idle SSE connection")
	}
	// The server ends the connection at the cap.
	within(t, 10*time.Second, "SSE cap", func() {
		for range c.events {
		}
	})
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("SSE ended after %s, before its cap", d)
	}

	s2 := newServer(t, Config{SSETimeout: 30 * time.Second}, stream.Config{})
	s2.create("/d", "text/plain")
	c2 := s2.sse("/d?live=sse")
	c2.expectControl("start")
	wantStatus(t, s2.do("DELETE", "/d", nil), 204, "delete")
	ev := c2.next("after delete")
	if ev.event != wire.EventError || !strings.Contains(ev.data, wire.CodeNotFound) {
		t.Fatalf("after delete: %+v, want an error event", ev)
	}
}

// TestSSEWithEventSourceAccept: browsers' EventSource sends
// Accept: text/event-stream; that must open the SSE stream, not 406.
func TestSSEWithEventSourceAccept(t *testing.T) {
	s := newServer(t, Config{SSETimeout: 5 * time.Second}, stream.Config{})
	s.create("/es", "text/plain")
	s.do("POST", "/es", []byte("hi"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/es?offset=0&live=sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	line, err := bufio.NewReader(r.Body).ReadString('\n')
	if err != nil || line == "" {
		t.Fatalf("no event: %q %v", line, err)
	}
}

// TestJSONStreamReadsEmbedJSON: over HTTP, a JSON read (catch-up and SSE) of
// a JSON stream embeds each value as JSON, so the README tour's record reads
// as {"item":"widget","qty":2} (jq '.[].value.item' works), and a JSON
// batch with valueEncoding "json" stores the JSON value's text: null then
// is the 4-byte value null, not a tombstone.
func TestJSONStreamReadsEmbedJSON(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/orders/1042", wire.MediaJSON)
	s.do("POST", "/orders/1042", []byte("{\"item\":\"widget\",\n \"qty\":2}"), "Content-Type", wire.MediaJSON)
	wantStatus(t, s.do("POST", "/orders/1042", []byte(`[{"value":{"a":1},"valueEncoding":"json"},{"value":"s","valueEncoding":"json"},{"value":null,"valueEncoding":"json"},{"value":null}]`),
		"Content-Type", wire.MediaBatchJSON), 200, "batch with valueEncoding json")
	want := `[{"offset":0,"timestamp":T,"value":{"item":"widget","qty":2}},` +
		`{"offset":1,"timestamp":T,"value":{"a":1}},` +
		`{"offset":2,"timestamp":T,"value":"s","valueEncoding":"json"},` +
		`{"offset":3,"timestamp":T,"value":null,"valueEncoding":"json"},` +
		`{"offset":4,"timestamp":T,"value":null}]`
	stamp := regexp.MustCompile(`"timestamp":\d+`)
	r := s.do("GET", "/orders/1042", nil)
	if got := stamp.ReplaceAllString(string(r.Body), `"timestamp":T`); got != want {
		t.Fatalf("JSON read of a JSON stream\n got %s\nwant %s", got, want)
	}
	var page []struct {
		Value struct{ Item string } `json:"value"`
	}
	if err := json.Unmarshal(r.Body, &page); err == nil || page[0].Value.Item != "widget" {
		// Records 2 and 3 are not objects, so the decode fails after record 0.
		t.Fatalf("record 0 value .item = %q (%v)", page[0].Value.Item, err)
	}
	raw := s.do("GET", "/orders/1042?format=raw&offset=1&limit=3", nil)
	if string(raw.Body) != `{"a":1}"s"null` {
		t.Fatalf("stored values: %q", raw.Body)
	}
	c := s.sse("/orders/1042?offset=0&live=sse")
	ev := c.next("SSE data")
	if got := stamp.ReplaceAllString(ev.data, `"timestamp":T`); ev.event != wire.EventData || got != want {
		t.Fatalf("SSE data of a JSON stream\n got %s %s\nwant %s", ev.event, got, want)
	}
	// encoding=base64 still gives exact bytes of every value.
	recs, _ := s.readJSON("/orders/1042?encoding=base64&limit=1")
	if recs[0].ValueEncoding != wire.EncodingBase64 {
		t.Fatalf("encoding=base64 on a JSON stream: %+v", recs[0])
	}
}
