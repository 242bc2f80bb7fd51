package e2e

// HTTP-level tests of the Durable Streams facade (api/ds) against the real
// binary: every behaviour the facade implements, status by status and header
// by header. The official conformance suite runs in
// ds_conformance_test.go; these tests pin PicoMQ's own decisions too (offset
// form, name mapping, limits) and fail with a precise message.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const dsPrefix = "/v1/stream"

// startDS runs a node with the Durable Streams facade and a short long-poll.
func startDS(t *testing.T, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--protocol", "durable-streams", "--long-poll-timeout", "300ms"}, extra...)
	return startNode(t, t.TempDir(), args...)
}

func dsURL(p *proc, name string) string { return p.URL + dsPrefix + name }

func off(n int64) string { return fmt.Sprintf("%016d_%016d", 0, n) }

func wantHeader(t *testing.T, r response, name, want string) {
	t.Helper()
	if got := r.Header.Get(name); got != want {
		t.Fatalf("%s: %q, want %q (status %d, body %s)", name, got, want, r.Status, r.Body)
	}
}

func TestDSCreateHeadDelete(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/orders/1")

	r := do(t, "PUT", u, nil, "Content-Type", "text/plain")
	wantStatus(t, r, 201, "create")
	wantHeader(t, r, "Content-Type", "text/plain")
	wantHeader(t, r, "Stream-Next-Offset", off(0))
	wantHeader(t, r, "Location", u)
	wantHeader(t, r, "X-Content-Type-Options", "nosniff")
	wantHeader(t, r, "Cross-Origin-Resource-Policy", "cross-origin")
	wantHeader(t, r, "Access-Control-Allow-Origin", "*")

	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "TEXT/plain; charset=utf-8"), 200, "identical create")
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "application/json"), 409, "create with another type")
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "text/plain", "Stream-TTL", "60"), 409, "create with a TTL")

	r = do(t, "PUT", dsURL(n, "/untyped"), nil)
	wantStatus(t, r, 201, "create without Content-Type")
	wantHeader(t, r, "Content-Type", "application/octet-stream")

	r = do(t, "HEAD", u, nil)
	wantStatus(t, r, 200, "head")
	wantHeader(t, r, "Cache-Control", "no-store")
	wantHeader(t, r, "Stream-Closed", "")
	if len(r.Body) != 0 {
		t.Fatalf("HEAD body %q", r.Body)
	}

	// The DS stream /v1/stream/orders/1 is the PicoMQ stream /orders/1, so
	// names follow PicoMQ's grammar.
	wantStatus(t, do(t, "PUT", dsURL(n, "/_sys"), nil), 400, "reserved name")
	wantStatus(t, do(t, "PUT", dsURL(n, "/a//b"), nil), 400, "empty segment")
	wantStatus(t, do(t, "GET", dsURL(n, "/__ds/subscriptions/x"), nil), 501, "subscription API")
	wantStatus(t, do(t, "GET", n.URL+"/orders/1", nil), 404, "path outside "+dsPrefix)

	wantStatus(t, do(t, "DELETE", u, nil), 204, "delete")
	r = do(t, "GET", u, nil)
	wantStatus(t, r, 404, "read deleted")
	wantHeader(t, r, "X-Content-Type-Options", "nosniff")
	wantStatus(t, do(t, "DELETE", u, nil), 404, "delete again")
	wantStatus(t, do(t, "PATCH", dsURL(n, "/x"), nil), 405, "PATCH")
}

func TestDSCreateValidation(t *testing.T) {
	n := startDS(t)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name    string
		headers []string
		status  int
	}{
		{"ttl ok", []string{"Stream-TTL", "3600"}, 201},
		{"expires Z", []string{"Stream-Expires-At", soon}, 201},
		{"expires offset", []string{"Stream-Expires-At", strings.Replace(soon, "Z", "+00:00", 1)}, 201},
		{"both", []string{"Stream-TTL", "60", "Stream-Expires-At", soon}, 400},
		{"ttl word", []string{"Stream-TTL", "abc"}, 400},
		{"ttl negative", []string{"Stream-TTL", "-1"}, 400},
		{"ttl leading zero", []string{"Stream-TTL", "060"}, 400},
		{"ttl plus", []string{"Stream-TTL", "+60"}, 400},
		{"ttl float", []string{"Stream-TTL", "60.5"}, 400},
		{"ttl exponent", []string{"Stream-TTL", "1e3"}, 400},
		{"ttl zero", []string{"Stream-TTL", "0"}, 400},
		{"ttl huge", []string{"Stream-TTL", "99999999999999999999"}, 400},
		{"expires garbage", []string{"Stream-Expires-At", "not-a-timestamp"}, 400},
		{"bad content type", []string{"Content-Type", "text/"}, 400},
		{"sub-offset without source", []string{"Stream-Fork-Sub-Offset", "0"}, 400},
		{"fork offset without source", []string{"Stream-Fork-Offset", off(0)}, 400},
	} {
		r := do(t, "PUT", dsURL(n, "/v/"+strings.ReplaceAll(tc.name, " ", "-")), nil, tc.headers...)
		if r.Status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.Status, tc.status, r.Body)
		}
	}
	r := do(t, "HEAD", dsURL(n, "/v/ttl-ok"), nil)
	wantHeader(t, r, "Stream-TTL", "3600")
	r = do(t, "HEAD", dsURL(n, "/v/expires-Z"), nil)
	if got, _ := time.Parse(time.RFC3339Nano, r.Header.Get("Stream-Expires-At")); got.Format(time.RFC3339Nano) != soon {
		t.Errorf("Stream-Expires-At %q, want %q", r.Header.Get("Stream-Expires-At"), soon)
	}
}

func TestDSAppendReadOffsetsETag(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/log")
	r := do(t, "PUT", u, []byte("first"), "Content-Type", "text/plain")
	wantStatus(t, r, 201, "create with body")
	wantHeader(t, r, "Stream-Next-Offset", off(1))

	r = do(t, "POST", u, []byte("second"), "Content-Type", "text/plain")
	wantStatus(t, r, 204, "append")
	wantHeader(t, r, "Stream-Next-Offset", off(2))

	r = do(t, "GET", u, nil)
	wantStatus(t, r, 200, "read")
	if string(r.Body) != "firstsecond" {
		t.Fatalf("read %q", r.Body)
	}
	wantHeader(t, r, "Stream-Next-Offset", off(2))
	wantHeader(t, r, "Stream-Up-To-Date", "true")
	wantHeader(t, r, "Cache-Control", "public, max-age=60, stale-while-revalidate=300")
	tag := r.Header.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag")
	}
	r = do(t, "GET", u, nil, "If-None-Match", tag)
	wantStatus(t, r, 304, "revalidate")
	if len(r.Body) != 0 {
		t.Fatalf("304 body %q", r.Body)
	}
	wantStatus(t, do(t, "GET", u, nil, "If-None-Match", `"other"`), 200, "stale tag")

	r = do(t, "GET", u+"?offset="+off(1)+"&unknown=1", nil)
	if string(r.Body) != "second" {
		t.Fatalf("read from offset 1: %q", r.Body)
	}
	r = do(t, "GET", u+"?offset="+off(2), nil)
	wantStatus(t, r, 200, "read at tail")
	wantHeader(t, r, "Stream-Up-To-Date", "true")
	if len(r.Body) != 0 {
		t.Fatalf("read at tail: %q", r.Body)
	}
	r = do(t, "GET", u+"?offset=now", nil)
	wantStatus(t, r, 200, "offset=now")
	wantHeader(t, r, "Stream-Next-Offset", off(2))
	wantHeader(t, r, "Cache-Control", "no-store")
	wantHeader(t, r, "ETag", "")

	if tag2 := do(t, "GET", u, nil).Header.Get("ETag"); tag2 != tag {
		t.Fatalf("ETag changed without a change: %s vs %s", tag, tag2)
	}
	do(t, "POST", u, []byte("third"), "Content-Type", "text/plain")
	if tag3 := do(t, "GET", u, nil).Header.Get("ETag"); tag3 == tag {
		t.Fatal("ETag did not change after an append")
	}

	for _, q := range []string{"offset=", "offset=0,1", "offset=0%201", "offset=a&offset=b", "offset=..%2Fx",
		"offset=" + fmt.Sprintf("%016d_%016d", 1, 0), "offset=9", "offset=" + off(99), "offset=%zz", "live=long-poll", "live=sse", "offset=-1&live=maybe"} {
		if r := do(t, "GET", u+"?"+q, nil); r.Status != 400 {
			t.Errorf("GET ?%s: status %d, want 400", q, r.Status)
		}
	}

	wantStatus(t, do(t, "POST", u, nil, "Content-Type", "text/plain"), 400, "empty append")
	req, _ := http.NewRequest("POST", u, strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("append without Content-Type: %d, want 400", resp.StatusCode)
	}
	wantStatus(t, do(t, "POST", u, []byte("{}"), "Content-Type", "application/json"), 409, "append with another type")
	wantStatus(t, do(t, "POST", dsURL(n, "/missing"), []byte("x"), "Content-Type", "text/plain"), 404, "append to missing")
	wantStatus(t, do(t, "POST", u, make([]byte, 5<<20), "Content-Type", "text/plain"), 413, "append over the limit")
}

func TestDSWriterSeq(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/seq")
	do(t, "PUT", u, nil, "Content-Type", "text/plain")
	post := func(seq string) int {
		return do(t, "POST", u, []byte("x"), "Content-Type", "text/plain", "Stream-Seq", seq).Status
	}
	for _, tc := range []struct {
		seq    string
		status int
	}{{"09", 204}, {"10", 204}, {"10", 409}, {"2", 204}, {"10", 409}, {"B", 204}, {"A", 409}, {"a", 204}, {"", 400}} {
		if got := post(tc.seq); got != tc.status {
			t.Errorf("Stream-Seq %q: %d, want %d", tc.seq, got, tc.status)
		}
	}
}

func TestDSJSONMode(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/j")
	wantStatus(t, do(t, "PUT", u, []byte(`[]`), "Content-Type", "application/json; charset=utf-8"), 201, "create with []")
	r := do(t, "GET", u, nil)
	if string(r.Body) != "[]" {
		t.Fatalf("empty JSON stream reads %q", r.Body)
	}
	for _, b := range []string{`{"e": 1}`, `[{"a":1}, {"b":2}]`, `[[1,2],[3,4]]`, `[[[1,2,3]]]`, `"s"`, `null`} {
		wantStatus(t, do(t, "POST", u, []byte(b), "Content-Type", "application/json"), 204, "append "+b)
	}
	wantStatus(t, do(t, "POST", u, []byte(`[]`), "Content-Type", "application/json"), 400, "append []")
	wantStatus(t, do(t, "POST", u, []byte(`{ invalid json }`), "Content-Type", "application/json"), 400, "append invalid JSON")
	r = do(t, "GET", u, nil)
	wantHeader(t, r, "Content-Type", "application/json; charset=utf-8")
	want := `[{"e":1},{"a":1},{"b":2},[1,2],[3,4],[[1,2,3]],"s",null]`
	if string(r.Body) != want {
		t.Fatalf("JSON read %s, want %s", r.Body, want)
	}
	wantHeader(t, r, "Stream-Next-Offset", off(8)) // one record per flattened value
	r = do(t, "GET", u+"?offset=now", nil)
	if string(r.Body) != "[]" {
		t.Fatalf("offset=now on JSON: %q", r.Body)
	}
}

func TestDSProducers(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/p")
	do(t, "PUT", u, nil, "Content-Type", "text/plain")
	post := func(body, id, epoch, seq string, extra ...string) response {
		h := append([]string{"Content-Type", "text/plain", "Producer-Id", id, "Producer-Epoch", epoch, "Producer-Seq", seq}, extra...)
		return do(t, "POST", u, []byte(body), h...)
	}
	// In order: each step's answer depends on the ones before.
	for _, step := range []struct {
		what                 string
		body, id, epoch, seq string
		status               int
		headers              []string // name, value: headers the answer carries
	}{
		{"first", "a0", "A", "0", "0", 200, []string{"Producer-Epoch", "0", "Producer-Seq", "0"}},
		{"next", "a1", "A", "0", "1", 200, nil},
		{"next", "a2", "A", "0", "2", 200, nil},
		{"duplicate", "a1", "A", "0", "1", 204, []string{"Producer-Seq", "2"}},
		{"gap", "x", "A", "0", "5", 409, []string{"Producer-Expected-Seq", "3", "Producer-Received-Seq", "5"}},
		{"new epoch not at 0", "x", "A", "1", "3", 400, nil},
		{"new epoch", "b0", "A", "1", "0", 200, nil},
		{"stale epoch", "z", "A", "0", "3", 403, []string{"Producer-Epoch", "1"}},
		{"unknown producer past 0", "x", "B", "0", "1", 409, []string{"Producer-Expected-Seq", "0"}},
		{"empty id", "x", "", "0", "0", 400, nil},
	} {
		r := post(step.body, step.id, step.epoch, step.seq)
		wantStatus(t, r, step.status, step.what)
		for i := 0; i+1 < len(step.headers); i += 2 {
			wantHeader(t, r, step.headers[i], step.headers[i+1])
		}
	}
	for _, bad := range [][2]string{{"1abc", "0"}, {"0", "1e3"}, {"-1", "0"}, {"0", "9007199254740992"}} {
		wantStatus(t, post("x", "C", bad[0], bad[1]), 400, fmt.Sprintf("epoch %q seq %q", bad[0], bad[1]))
	}
	wantStatus(t, do(t, "POST", u, []byte("x"), "Content-Type", "text/plain", "Producer-Id", "A"), 400, "partial headers")
	// Dedup runs before the writer sequence check.
	wantStatus(t, post("s0", "S", "0", "0", "Stream-Seq", "m"), 200, "with Stream-Seq")
	wantStatus(t, post("s0", "S", "0", "0", "Stream-Seq", "m"), 204, "retry with Stream-Seq")
	if r := do(t, "GET", u, nil); string(r.Body) != "a0a1a2b0s0" {
		t.Fatalf("producer data %q", r.Body)
	}
}

func TestDSClose(t *testing.T) {
	n := startDS(t, "--long-poll-timeout", "10s") // a wait would show
	u := dsURL(n, "/c")
	do(t, "PUT", u, []byte("data"), "Content-Type", "text/plain")
	r := do(t, "POST", u, nil, "Stream-Closed", "true", "Content-Type", "application/json")
	wantStatus(t, r, 204, "close-only, content type ignored")
	wantHeader(t, r, "Stream-Closed", "true")
	wantHeader(t, r, "Stream-Next-Offset", off(1))
	wantStatus(t, do(t, "POST", u, nil, "Stream-Closed", "TRUE"), 204, "close again")
	r = do(t, "POST", u, []byte("more"), "Content-Type", "text/plain")
	wantStatus(t, r, 409, "append to closed")
	wantHeader(t, r, "Stream-Closed", "true")
	wantHeader(t, r, "Stream-Next-Offset", off(1))
	r = do(t, "POST", u, []byte("{}"), "Content-Type", "application/json")
	wantStatus(t, r, 409, "append of another type to closed")
	wantHeader(t, r, "Stream-Closed", "true")
	r = do(t, "HEAD", u, nil)
	wantHeader(t, r, "Stream-Closed", "true")
	r = do(t, "GET", u+"?offset="+off(1), nil)
	wantStatus(t, r, 200, "EOF read")
	wantHeader(t, r, "Stream-Closed", "true")
	start := time.Now()
	r = do(t, "GET", u+"?offset="+off(1)+"&live=long-poll", nil)
	wantStatus(t, r, 204, "long-poll at the end of a closed stream")
	wantHeader(t, r, "Stream-Closed", "true")
	if time.Since(start) > 5*time.Second {
		t.Fatalf("long-poll on a closed stream waited %s instead of answering at once", time.Since(start))
	}
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "text/plain"), 409, "open re-create of a closed stream")
	wantStatus(t, do(t, "PUT", u, nil, "Content-Type", "text/plain", "Stream-Closed", "true"), 200, "closed re-create")
	wantStatus(t, do(t, "POST", dsURL(n, "/nope"), nil, "Stream-Closed", "true"), 404, "close a missing stream")

	// Append-and-close with a producer; its retry is a duplicate, any other
	// tuple a conflict.
	v := dsURL(n, "/c2")
	do(t, "PUT", v, nil, "Content-Type", "text/plain")
	p := []string{"Content-Type", "text/plain", "Stream-Closed", "true", "Producer-Id", "P", "Producer-Epoch", "0", "Producer-Seq", "0"}
	r = do(t, "POST", v, []byte("final"), p...)
	wantStatus(t, r, 200, "append-and-close")
	wantHeader(t, r, "Stream-Closed", "true")
	wantStatus(t, do(t, "POST", v, []byte("other"), p...), 204, "retry of the closing tuple")
	p[len(p)-1] = "1"
	wantStatus(t, do(t, "POST", v, []byte("x"), p...), 409, "another tuple")
	if r := do(t, "GET", v, nil); string(r.Body) != "final" {
		t.Fatalf("closed stream holds %q", r.Body)
	}
}

func TestDSLongPoll(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/lp")
	do(t, "PUT", u, []byte("a"), "Content-Type", "text/plain")

	r := do(t, "GET", u+"?offset=-1&live=long-poll", nil)
	wantStatus(t, r, 200, "long-poll with data")
	cursor := r.Header.Get("Stream-Cursor")
	if cursor == "" || strings.Trim(cursor, "0123456789") != "" {
		t.Fatalf("Stream-Cursor %q", cursor)
	}
	r = do(t, "GET", u+"?offset=-1&live=long-poll&cursor="+cursor, nil)
	if c2 := r.Header.Get("Stream-Cursor"); len(c2) < len(cursor) || (len(c2) == len(cursor) && c2 <= cursor) {
		t.Fatalf("cursor %s echoed back as %s, want a greater one", cursor, c2)
	}

	start := time.Now()
	r = do(t, "GET", u+"?offset=now&live=long-poll", nil)
	wantStatus(t, r, 204, "long-poll timeout")
	wantHeader(t, r, "Stream-Next-Offset", off(1))
	wantHeader(t, r, "Stream-Up-To-Date", "true")
	if r.Header.Get("Stream-Cursor") == "" {
		t.Fatal("204 without Stream-Cursor")
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 10*time.Second {
		t.Fatalf("long-poll returned after %s, want about --long-poll-timeout", d)
	}

	done := make(chan response, 1)
	go func() { done <- do(t, "GET", u+"?offset="+off(1)+"&live=long-poll", nil) }()
	time.Sleep(100 * time.Millisecond)
	do(t, "POST", u, []byte("b"), "Content-Type", "text/plain")
	r = <-done
	wantStatus(t, r, 200, "woken long-poll")
	if string(r.Body) != "b" {
		t.Fatalf("long-poll got %q", r.Body)
	}
}

// sseEvents reads SSE events from url until stop returns true or the
// connection ends.
func sseEvents(t *testing.T, url string, stop func(ev, data string) bool) (http.Header, [][2]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("SSE %s: status %d", url, resp.StatusCode)
	}
	var events [][2]string
	sc := bufio.NewScanner(resp.Body)
	var ev string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			ev = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "":
			d := strings.Join(data, "\n")
			events = append(events, [2]string{ev, d})
			ev, data = "", nil
			if stop(events[len(events)-1][0], d) {
				return resp.Header, events
			}
		}
	}
	return resp.Header, events
}

func TestDSSSE(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/sse")
	attack := "safe\r\n\r\nevent: control\r\ndata: {\"injected\":true}\r\n\r\n leading space"
	do(t, "PUT", u, []byte(attack), "Content-Type", "text/plain")
	do(t, "POST", u, []byte("two"), "Content-Type", "text/plain")

	hdr, evs := sseEvents(t, u+"?offset=-1&live=sse", func(ev, d string) bool { return ev == "control" })
	if hdr.Get("Content-Type") != "text/event-stream" || hdr.Get("Cache-Control") != "no-cache" || hdr.Get("Content-Length") != "" {
		t.Fatalf("SSE headers %v", hdr)
	}
	if len(evs) != 2 || evs[0][0] != "data" || evs[1][0] != "control" {
		t.Fatalf("events %q", evs)
	}
	if want := strings.NewReplacer("\r\n", "\n").Replace(attack) + "two"; evs[0][1] != want {
		t.Fatalf("data %q, want %q", evs[0][1], want)
	}
	var c map[string]any
	if err := json.Unmarshal([]byte(evs[1][1]), &c); err != nil || c["streamNextOffset"] != off(2) || c["upToDate"] != true || c["injected"] != nil {
		t.Fatalf("control %q (%v)", evs[1][1], err)
	}

	// Live: a reader at the tail gets the data appended with the close, then
	// the final control event, and the connection ends.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(150 * time.Millisecond)
		do(t, "POST", u, []byte("last"), "Content-Type", "text/plain", "Stream-Closed", "true")
	}()
	_, evs = sseEvents(t, u+"?offset="+off(2)+"&live=sse", func(string, string) bool { return false })
	wg.Wait()
	if len(evs) < 3 || evs[len(evs)-2][1] != "last" {
		t.Fatalf("live events %q", evs)
	}
	var final map[string]any
	_ = json.Unmarshal([]byte(evs[len(evs)-1][1]), &final)
	if final["streamClosed"] != true || final["streamCursor"] != nil {
		t.Fatalf("final control %q", evs[len(evs)-1][1])
	}

	// Binary streams are base64, one data event per control event.
	b := dsURL(n, "/bin")
	do(t, "PUT", b, []byte{0, 1, 2, 3}, "Content-Type", "application/octet-stream")
	do(t, "POST", b, []byte{0xff, '\n', '\r'}, "Content-Type", "application/octet-stream")
	hdr, evs = sseEvents(t, b+"?offset=-1&live=sse", func(ev, d string) bool { return ev == "control" })
	if hdr.Get("Stream-Sse-Data-Encoding") != "base64" {
		t.Fatalf("binary SSE headers %v", hdr)
	}
	if raw, err := base64.StdEncoding.DecodeString(evs[0][1]); err != nil || string(raw) != "\x00\x01\x02\x03\xff\n\r" {
		t.Fatalf("base64 data %q: %q %v", evs[0][1], raw, err)
	}
	_, evs = sseEvents(t, b+"?offset=now&live=sse", func(ev, d string) bool { return ev == "control" })
	if len(evs) != 1 || !strings.Contains(evs[0][1], `"upToDate":true`) {
		t.Fatalf("offset=now SSE %q", evs)
	}
	if r := do(t, "GET", dsURL(n, "/none")+"?offset=now&live=sse", nil); r.Status != 404 {
		t.Fatalf("SSE on a missing stream: %d", r.Status)
	}
}

func TestDSForks(t *testing.T) {
	n := startDS(t)
	src, f := dsURL(n, "/src"), dsURL(n, "/fork")
	do(t, "PUT", src, []byte("hello"), "Content-Type", "text/plain")
	do(t, "POST", src, []byte(" world"), "Content-Type", "text/plain")

	r := do(t, "PUT", f, nil, "Stream-Forked-From", dsPrefix+"/src", "Stream-Fork-Offset", off(1), "Stream-Fork-Sub-Offset", "3")
	wantStatus(t, r, 201, "fork")
	wantHeader(t, r, "Content-Type", "text/plain")
	wantHeader(t, r, "Stream-Forked-From", "")
	wantHeader(t, r, "Stream-Next-Offset", off(2))
	if r := do(t, "GET", f, nil); string(r.Body) != "hello wo" {
		t.Fatalf("fork reads %q", r.Body)
	}
	wantStatus(t, do(t, "PUT", f, nil, "Stream-Forked-From", dsPrefix+"/src", "Stream-Fork-Offset", off(1), "Stream-Fork-Sub-Offset", "3"), 200, "identical fork")
	wantStatus(t, do(t, "PUT", f, nil, "Stream-Forked-From", dsPrefix+"/src", "Stream-Fork-Offset", off(1), "Stream-Fork-Sub-Offset", "2"), 409, "fork with another sub-offset")
	wantStatus(t, do(t, "POST", f, []byte("rld!"), "Content-Type", "text/plain"), 204, "append to fork")
	if r := do(t, "GET", f, nil); string(r.Body) != "hello world!" {
		t.Fatalf("fork after append reads %q", r.Body)
	}

	for _, tc := range []struct {
		headers []string
		status  int
	}{
		{[]string{"Stream-Forked-From", dsPrefix + "/missing"}, 404},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Stream-Fork-Offset", "9999999999999999_9999999999999999"}, 400},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Stream-Fork-Offset", off(9)}, 400},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Stream-Fork-Sub-Offset", "1"}, 400},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Stream-Fork-Offset", off(0), "Stream-Fork-Sub-Offset", "05"}, 400},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Stream-Fork-Offset", off(0), "Stream-Fork-Sub-Offset", "6"}, 400},
		{[]string{"Stream-Forked-From", dsPrefix + "/src", "Content-Type", "application/json"}, 409},
		{[]string{"Stream-Forked-From", "/elsewhere/src"}, 400},
	} {
		if r := do(t, "PUT", dsURL(n, "/bad"), nil, tc.headers...); r.Status != tc.status {
			t.Errorf("fork %q: %d, want %d (%s)", tc.headers, r.Status, tc.status, r.Body)
		}
	}

	// Soft delete: the source is gone (410) but the fork still reads it.
	wantStatus(t, do(t, "DELETE", src, nil), 204, "delete source")
	for _, m := range []string{"GET", "HEAD", "DELETE"} {
		wantStatus(t, do(t, m, src, nil), 410, m+" soft-deleted source")
	}
	wantStatus(t, do(t, "POST", src, []byte("x"), "Content-Type", "text/plain"), 410, "append to soft-deleted source")
	wantStatus(t, do(t, "PUT", src, nil, "Content-Type", "text/plain"), 409, "re-create soft-deleted source")
	wantStatus(t, do(t, "PUT", dsURL(n, "/f2"), nil, "Stream-Forked-From", dsPrefix+"/src"), 409, "fork a soft-deleted source")
	if r := do(t, "GET", f, nil); string(r.Body) != "hello world!" {
		t.Fatalf("fork of a deleted source reads %q", r.Body)
	}
	wantStatus(t, do(t, "DELETE", f, nil), 204, "delete fork")
	wantStatus(t, do(t, "HEAD", src, nil), 404, "source after its last fork went")
}

func TestDSTTLExpiry(t *testing.T) {
	n := startDS(t)
	u := dsURL(n, "/ttl")
	wantStatus(t, do(t, "PUT", u, []byte("x"), "Content-Type", "text/plain", "Stream-TTL", "2"), 201, "create")
	time.Sleep(1200 * time.Millisecond)
	wantStatus(t, do(t, "GET", u+"?offset=now", nil), 200, "offset=now read (touches)")
	time.Sleep(1200 * time.Millisecond) // 2.4s after create, 1.2s after the touch
	wantStatus(t, do(t, "HEAD", u, nil), 200, "alive after a touch")
	time.Sleep(2100 * time.Millisecond) // HEAD did not touch
	for _, m := range []string{"HEAD", "GET"} {
		wantStatus(t, do(t, m, u, nil), 404, m+" after expiry")
	}
	wantStatus(t, do(t, "PUT", u, []byte(`["new"]`), "Content-Type", "application/json"), 201, "re-create")
	if r := do(t, "GET", u, nil); string(r.Body) != `["new"]` {
		t.Fatalf("re-created stream reads %q", r.Body)
	}
}

func TestDSCORS(t *testing.T) {
	n := startDS(t)
	r := do(t, "OPTIONS", dsURL(n, "/any"), nil, "Origin", "https://example.com",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "if-none-match")
	wantStatus(t, r, 204, "preflight")
	for _, h := range []string{"if-none-match", "stream-seq", "producer-id", "stream-fork-sub-offset"} {
		if !strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), h) {
			t.Errorf("Access-Control-Allow-Headers %q lacks %s", r.Header.Get("Access-Control-Allow-Headers"), h)
		}
	}
	if !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "Stream-Next-Offset") {
		t.Errorf("expose headers %q", r.Header.Get("Access-Control-Expose-Headers"))
	}
}
