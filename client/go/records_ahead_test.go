package picomq_test

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// TestRecordsCatchUpPagesAhead: a Pico catch-up asks for pages by bytes
// (CatchUpPageBytes, as many records as the node allows), and the next
// page's request is in flight while the caller is still on the current
// page; every record arrives once, in order.
func TestRecordsCatchUpPagesAhead(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	px := newProxy(t, picoURL)
	c := newClient(t, picomq.ProtocolPico, px.URL)
	name := createStream(t, ctx, c, "application/octet-stream")
	s := c.Stream(name)
	const n, size = 10000, 1024 // ~10 MiB: three pages of 4 MiB
	for i := 0; i < n; i += 2500 {
		batch := make([]picomq.AppendRecord, 2500)
		for j := range batch {
			batch[j].Body = binary.BigEndian.AppendUint64(make([]byte, 0, size), uint64(i+j))[:size:size]
		}
		if _, err := s.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	isRead := func(r seenRequest) bool { return r.Method == "GET" && strings.HasSuffix(r.Path, name) }
	for len(px.arrived) > 0 { // the appends
		<-px.arrived
	}

	it := s.Records(c.Beginning(), picomq.RecordsOptions{})
	if !it.Next(ctx) {
		t.Fatalf("first record: %v", it.Err())
	}
	first := px.waitArrival(t, 10*time.Second, isRead)
	if got := first.Query.Get("max_bytes"); got != strconv.Itoa(picomq.CatchUpPageBytes) {
		t.Errorf("first page asked for max_bytes=%q, want %d (pages sized by bytes)", got, picomq.CatchUpPageBytes)
	}
	// The caller is still on record 0; the second page is asked for now.
	second := px.waitArrival(t, 10*time.Second, isRead)
	if off := second.Query.Get("offset"); off == "" || off == "0" {
		t.Errorf("second read at offset %q; want where the first page ended", off)
	}
	i := 0
	for {
		if got := binary.BigEndian.Uint64(it.Record().Body); got != uint64(i) || len(it.Record().Body) != size {
			t.Fatalf("record %d: holds %d (%d bytes)", i, got, len(it.Record().Body))
		}
		i++
		if !it.Next(ctx) {
			break
		}
	}
	if it.Err() != nil || i != n || it.Position() != c.PositionAt(n) {
		t.Fatalf("end: err %v, %d records, position %s", it.Err(), i, it.Position())
	}
	reads := 0
	for _, r := range px.requests() {
		if isRead(r) {
			reads++
		}
	}
	if reads > 4 {
		t.Errorf("%d reads for %d MB; want about one per %d MiB", reads, n*size/1000000, picomq.CatchUpPageBytes>>20)
	}
}
