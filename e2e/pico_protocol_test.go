package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// TestPicoProtocol drives a real `picomq serve` through the whole Pico
// protocol: create, append in all three shapes, read in all three formats,
// a long-poll woken by an append, SSE receiving live appends, an
// idempotent producer's retry, stale epoch and gap, then a restart (clean,
// then kill -9) after which data and producer state are intact.
func TestPicoProtocol(t *testing.T) {
	n := startNode(t, t.TempDir())
	const s = "/e2e/orders"
	u := n.URL + s

	r := do(t, "PUT", u, nil, "Content-Type", "application/json")
	wantStatus(t, r, 201, "create")
	if got := r.Header.Get(wire.HeaderKafkaTopic); got != "e2e.orders" {
		t.Fatalf("derived topic %q", got)
	}

	// Three shapes; each append is one ack with consecutive offsets.
	r = do(t, "POST", u, []byte(`{"n":0}`), "Content-Type", "application/json", wire.HeaderKey, "k0", "Pico-Header-Trace", "t0")
	wantStatus(t, r, 200, "single body")
	wantPicoHeader(t, r, wire.HeaderOffset, "0", "single body")
	r = do(t, "POST", u, []byte(`[{"key":"k1","value":{"n":1}},{"value":{"n":2},"headers":[{"key":"h","value":"v"}]},{"value":null}]`),
		"Content-Type", wire.MediaBatchJSON)
	wantStatus(t, r, 200, "JSON batch")
	wantPicoHeader(t, r, wire.HeaderOffset, "1", "JSON batch")
	wantPicoHeader(t, r, wire.HeaderNextOffset, "4", "JSON batch")
	r = do(t, "POST", u, codec.Encode([]codec.Record{{Key: []byte("k4"), Value: []byte(`{"n":4}`)}, {Value: []byte(`{"n":5}`)}}),
		"Content-Type", wire.MediaBatch)
	wantStatus(t, r, 200, "binary batch")
	wantPicoHeader(t, r, wire.HeaderOffset, "4", "binary batch")
	wantPicoHeader(t, r, wire.HeaderNextOffset, "6", "binary batch")

	checkAll := func(what string, wantN int) {
		t.Helper()
		recs := readAll(t, n.URL, s)
		if len(recs) != wantN {
			t.Fatalf("%s: %d records, want %d", what, len(recs), wantN)
		}
		for i, want := range []string{`{"n":0}`, `{"n":1}`, `{"n":2}`, "", `{"n":4}`, `{"n":5}`} {
			if want == "" {
				if recs[i].Value != nil {
					t.Fatalf("%s: record %d = %q, want null", what, i, *recs[i].Value)
				}
				continue
			}
			if recs[i].Value == nil || *recs[i].Value != want || recs[i].Offset != int64(i) {
				t.Fatalf("%s: record %d = %+v, want %s", what, i, recs[i], want)
			}
		}
		if *recs[0].Key != "k0" || *recs[4].Key != "k4" {
			t.Fatalf("%s: keys %v %v", what, recs[0].Key, recs[4].Key)
		}
		bin := do(t, "GET", u+"?offset=0&limit=6", nil, "Accept", wire.MediaBatch)
		wantStatus(t, bin, 200, what+": binary read")
		out, err := codec.Decode(bin.Body, nil, codec.Limits{})
		if err != nil || len(out) != 6 || string(out[5].Value) != `{"n":5}` || out[2].Headers[0].Key != "h" || out[3].Value != nil {
			t.Fatalf("%s: binary read %v %+v", what, err, out)
		}
		raw := do(t, "GET", u+"?offset=0&limit=6&format=raw", nil)
		if string(raw.Body) != `{"n":0}{"n":1}{"n":2}{"n":4}{"n":5}` || raw.Header.Get("Content-Type") != wire.MediaOctetStream {
			t.Fatalf("%s: raw read %q %v", what, raw.Body, raw.Header)
		}
	}
	checkAll("before restart", 6)

	// A long-poll at the end is woken by the next append.
	polled := make(chan response, 1)
	go func() {
		r, err := tryDo(context.Background(), "GET", u+"?offset=6&live=long-poll", nil)
		if err != nil {
			t.Errorf("long-poll: %v", err)
		}
		polled <- r
	}()
	time.Sleep(300 * time.Millisecond)
	wantStatus(t, do(t, "POST", u, []byte(`{"n":6}`)), 200, "append waking the long-poll")
	select {
	case r := <-polled:
		wantStatus(t, r, 200, "long-poll")
		var recs []jsonRecord
		if err := json.Unmarshal(r.Body, &recs); err != nil || len(recs) != 1 || *recs[0].Value != `{"n":6}` {
			t.Fatalf("long-poll body %s %v", r.Body, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by an append")
	}

	// SSE receives live appends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", u+"?offset=7&live=sse", nil)
	sresp, err := http.DefaultClient.Do(req)
	if err != nil || sresp.StatusCode != 200 {
		t.Fatalf("SSE: %v %v", sresp, err)
	}
	defer sresp.Body.Close()
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(sresp.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = line[7:]
			case strings.HasPrefix(line, "data: ") && ev == wire.EventData:
				events <- line[6:]
			}
		}
	}()
	for i := 7; i < 9; i++ {
		wantStatus(t, do(t, "POST", u, []byte(`{"n":`+strconv.Itoa(i)+`}`)), 200, "append for SSE")
		select {
		case data := <-events:
			var recs []jsonRecord
			if err := json.Unmarshal([]byte(data), &recs); err != nil || len(recs) != 1 || recs[0].Offset != int64(i) {
				t.Fatalf("SSE event %q: %v", data, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("SSE did not deliver offset %d", i)
		}
	}
	cancel()

	// Idempotent producer: retry deduplicated, stale epoch, gap.
	produce := func(body string, epoch, seq int) response {
		return do(t, "POST", u, []byte(body), wire.HeaderProducerID, "p1",
			wire.HeaderProducerEpoch, strconv.Itoa(epoch), wire.HeaderProducerSeq, strconv.Itoa(seq))
	}
	r = produce(`{"p":0}`, 1, 0)
	wantStatus(t, r, 200, "producer seq 0")
	wantPicoHeader(t, r, wire.HeaderOffset, "9", "producer seq 0")
	r = produce(`{"p":0}`, 1, 0)
	wantStatus(t, r, 200, "producer retry")
	wantPicoHeader(t, r, wire.HeaderDuplicate, "true", "producer retry")
	wantPicoHeader(t, r, wire.HeaderOffset, "9", "producer retry")
	wantStatus(t, produce(`{"p":1}`, 1, 1), 200, "producer seq 1")
	r = produce(`{"p":"stale"}`, 0, 2)
	wantStatus(t, r, 403, "stale epoch")
	assertErrorBody(t, r, wire.CodeProducerFenced)
	r = produce(`{"p":"gap"}`, 1, 5)
	wantStatus(t, r, 409, "gap")
	assertErrorBody(t, r, wire.CodeProducerSeqGap)
	wantPicoHeader(t, r, wire.HeaderProducerExpectedSeq, "2", "gap")
	wantPicoHeader(t, r, wire.HeaderProducerReceivedSeq, "5", "gap")

	// Restart cleanly, then after kill -9: data and producer state intact.
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		if how == "SIGTERM" {
			n.stop(t)
		} else {
			n.Kill()
		}
		n.restart()
		checkAll("after "+how, 11)
		r = produce(`{"p":1}`, 1, 1)
		wantStatus(t, r, 200, "retry after "+how)
		wantPicoHeader(t, r, wire.HeaderDuplicate, "true", "retry after "+how)
		wantPicoHeader(t, r, wire.HeaderOffset, "10", "retry after "+how)
		wantStatus(t, produce(`{"p":"stale"}`, 0, 2), 403, "stale epoch after "+how)
		r = produce(`{"p":"gap"}`, 1, 3)
		wantStatus(t, r, 409, "gap after "+how)
		wantPicoHeader(t, r, wire.HeaderProducerExpectedSeq, "2", "gap after "+how)
	}
	wantStatus(t, produce(`{"p":2}`, 1, 2), 200, "producer continues")
	if recs := readAll(t, n.URL, s); len(recs) != 12 {
		t.Fatalf("%d records at the end, want 12", len(recs))
	}
}

func wantPicoHeader(t testing.TB, r response, name, value, what string) {
	t.Helper()
	if got := r.Header.Get(name); got != value {
		t.Fatalf("%s: %s = %q, want %q", what, name, got, value)
	}
}
