package picomq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// pageGate is an HTTP server in front of the real node that forwards every
// request and can hold a stream read's answer: before its headers
// (holdHeaders) or before the last bytes of its body (holdTail, until the
// read of the page after it has arrived). It knows the reads it has seen
// by their offset query.
type pageGate struct {
	*httptest.Server
	target string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever reads changes
	reads   []string      // offset query of each stream read, in arrival order
	// holdTail, when set, makes a read's answer keep its last bytes back
	// until the read at its Pico-Next-Offset has arrived, or until
	// holdTail passes (then tailMissed records the offset).
	holdTail   time.Duration
	tailMissed []string
	// holdFrom, when > 0, makes the holdFrom-th read and later ones wait
	// for release before they are forwarded.
	holdFrom int
	release  chan struct{}
	// fail, when it returns a status for a read, answers it so (once per
	// offset) instead of forwarding; cutBody cuts the body short instead.
	fail    func(offset string, n int) int
	cutBody func(offset string, n int) bool
}

func newPageGate(t testing.TB, target string) *pageGate {
	g := &pageGate{target: target, changed: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

func (g *pageGate) serve(w http.ResponseWriter, r *http.Request) {
	isRead := r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/sdk-test/")
	off := r.URL.Query().Get("offset")
	var hold chan struct{}
	var n int
	var tail time.Duration
	if isRead {
		g.mu.Lock()
		g.reads = append(g.reads, off)
		n = len(g.reads)
		close(g.changed)
		g.changed = make(chan struct{})
		if g.holdFrom > 0 && n >= g.holdFrom {
			hold = g.release
		}
		tail = g.holdTail
		fail, cut := g.fail, g.cutBody
		g.mu.Unlock()
		if fail != nil {
			if status := fail(off, n); status != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				io.WriteString(w, `{"error":{"code":"bad_request","message":"gate says no"}}`)
				return
			}
		}
		if cut != nil && cut(off, n) {
			defer func() { panic(http.ErrAbortHandler) }() // after half the body
			tail = -1
		}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, g.target+r.URL.RequestURI(), r.Body)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if tail < 0 { // cut: half the body, then the connection drops
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		return
	}
	next := resp.Header.Get("Pico-Next-Offset")
	if !isRead || tail == 0 || len(body) < 16 || resp.Header.Get("Pico-Up-To-Date") == "true" {
		w.Write(body)
		return
	}
	w.Write(body[:len(body)-16])
	w.(http.Flusher).Flush()
	if !g.await(r.Context(), tail, func() bool { return g.sawRead(next) }) {
		g.mu.Lock()
		g.tailMissed = append(g.tailMissed, off)
		g.holdTail = 0 // one miss says it; do not slow the rest down
		g.mu.Unlock()
	}
	w.Write(body[len(body)-16:])
}

func (g *pageGate) sawRead(off string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.reads {
		if o == off {
			return true
		}
	}
	return false
}

// await waits until cond holds (checked whenever a read arrives) or within
// passes.
func (g *pageGate) await(ctx context.Context, within time.Duration, cond func() bool) bool {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		g.mu.Lock()
		changed := g.changed
		g.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return cond()
		case <-ctx.Done():
			return false
		}
	}
}

func (g *pageGate) lastRead() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.reads) == 0 {
		return ""
	}
	return g.reads[len(g.reads)-1]
}

func (g *pageGate) readCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.reads)
}

// appendCounting appends n records of size bytes, record i holding i, ten
// to a batch (a node serves stored batches whole, so small batches make
// small pages possible).
func appendCounting(t testing.TB, ctx context.Context, s picomq.Stream, n, size int) {
	t.Helper()
	for i := 0; i < n; i += 10 {
		batch := make([]picomq.AppendRecord, min(10, n-i))
		for j := range batch {
			batch[j].Body = binary.BigEndian.AppendUint64(make([]byte, 0, size), uint64(i+j))[:size:size]
		}
		if _, err := s.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRecord fails unless its current record is record i of appendCounting.
func checkRecord(t testing.TB, c picomq.Client, it *picomq.Records, i, size int) {
	t.Helper()
	rec := it.Record()
	if len(rec.Body) != size || binary.BigEndian.Uint64(rec.Body) != uint64(i) || rec.Position != c.PositionAt(int64(i)) {
		t.Fatalf("record %d: %d bytes holding %d at position %s", i, len(rec.Body), binary.BigEndian.Uint64(rec.Body), rec.Position)
	}
}

// pagedOpts make small pages: about 40 records of 1 KiB each.
var pagedOpts = picomq.RecordsOptions{MaxBytes: 40 << 10}

// TestRecordsAsksNextPageBeforeBody: during a Pico catch-up the next page's
// request is sent once the current page's headers are in, before its body
// has been read: the gate keeps each body's last bytes back until the next
// read has arrived. Every record arrives once, in order, at its position.
func TestRecordsAsksNextPageBeforeBody(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	const n, size = 600, 1024 // ~15 pages
	g := newPageGate(t, picoURL)
	c := newClient(t, picomq.ProtocolPico, g.URL)
	name := createStream(t, ctx, c, "application/octet-stream")
	s := c.Stream(name)
	appendCounting(t, ctx, s, n, size)
	g.mu.Lock()
	g.holdTail = 20 * time.Second
	g.mu.Unlock()

	it := s.Records(c.Beginning(), pagedOpts)
	i := 0
	for it.Next(ctx) {
		checkRecord(t, c, it, i, size)
		i++
	}
	if it.Err() != nil || i != n || it.Position() != c.PositionAt(n) {
		t.Fatalf("end: err %v, %d records, position %s", it.Err(), i, it.Position())
	}
	g.mu.Lock()
	missed, reads := g.tailMissed, len(g.reads)
	g.mu.Unlock()
	if len(missed) > 0 {
		t.Errorf("the page read at offset %q was read to its end before the next page was asked for", missed[0])
	}
	if reads < 10 || reads > n/20 {
		t.Errorf("%d reads for %d records in pages of ~40; want one per page", reads, n)
	}
}

// TestRecordsReadAheadCancel: cancelling Next while it waits for a page
// read ahead ends that Next with the context's error and leaves the read
// in flight; a later Next takes that read (it is not sent again) and every
// record still arrives once, in order.
func TestRecordsReadAheadCancel(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	const n, size = 200, 1024
	g := newPageGate(t, picoURL)
	c := newClient(t, picomq.ProtocolPico, g.URL)
	name := createStream(t, ctx, c, "application/octet-stream")
	s := c.Stream(name)
	appendCounting(t, ctx, s, n, size)
	release := make(chan struct{})
	g.mu.Lock()
	g.holdFrom, g.release = 2, release // every read after the first waits
	g.mu.Unlock()

	it := s.Records(c.Beginning(), pagedOpts)
	// The second page's read is sent (and held) once the first page's
	// headers are in; its offset says how many records the first holds.
	if !it.Next(ctx) {
		t.Fatalf("first record: %v", it.Err())
	}
	if !g.await(ctx, 30*time.Second, func() bool { return g.readCount() >= 2 }) {
		t.Fatalf("no read ahead: %d reads", g.readCount())
	}
	first, err := strconv.Atoi(g.lastRead())
	if err != nil || first <= 1 || first >= n {
		t.Fatalf("second read at offset %q", g.lastRead())
	}
	i := 0
	checkRecord(t, c, it, i, size)
	for i = 1; i < first; i++ {
		if !it.Next(ctx) {
			t.Fatalf("record %d: %v", i, it.Err())
		}
		checkRecord(t, c, it, i, size)
	}
	second := it.Position()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if it.Next(short) {
		t.Fatalf("Next returned record %s while the page was held", it.Record().Position)
	}
	if !errors.Is(it.Err(), context.DeadlineExceeded) || it.Position() != second {
		t.Fatalf("after the cancelled Next: err %v, position %s, want the context's error at %s", it.Err(), it.Position(), second)
	}
	close(release)
	for ; it.Next(ctx); i++ {
		checkRecord(t, c, it, i, size)
	}
	if it.Err() != nil || i != n || it.Position() != c.PositionAt(n) {
		t.Fatalf("end: err %v, %d records, position %s", it.Err(), i, it.Position())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	sent := 0
	for _, o := range g.reads {
		if o == second {
			sent++
		}
	}
	if sent != 1 {
		t.Errorf("the page at %s was asked for %d times; want once (the held read kept)", second, sent)
	}
}

// TestRecordsReadAheadFails: a page read ahead that fails (an error status,
// or a body cut short) is read again as without read-ahead; every record
// arrives once, in order.
func TestRecordsReadAheadFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(g *pageGate)
	}{
		{"status", func(g *pageGate) {
			failed := map[string]bool{}
			g.fail = func(off string, n int) int {
				if n >= 2 && off != "" && !failed[off] { // every page's first (ahead) read
					failed[off] = true
					return http.StatusBadRequest
				}
				return 0
			}
		}},
		{"cut", func(g *pageGate) {
			cut := map[string]bool{}
			g.cutBody = func(off string, n int) bool {
				if n >= 2 && off != "" && !cut[off] {
					cut[off] = true
					return true
				}
				return false
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 120*time.Second)
			const n, size = 300, 1024
			g := newPageGate(t, picoURL)
			c := newClient(t, picomq.ProtocolPico, g.URL)
			name := createStream(t, ctx, c, "application/octet-stream")
			s := c.Stream(name)
			appendCounting(t, ctx, s, n, size)
			g.mu.Lock()
			tc.set(g)
			g.mu.Unlock()
			it := s.Records(c.Beginning(), pagedOpts)
			i := 0
			for it.Next(ctx) {
				checkRecord(t, c, it, i, size)
				i++
			}
			if it.Err() != nil || i != n || it.Position() != c.PositionAt(n) {
				t.Fatalf("end: err %v, %d records, position %s", it.Err(), i, it.Position())
			}
			if reads := g.readCount(); reads < 2*(n/40) {
				t.Errorf("%d reads; want each page read twice (a failed read ahead, then again)", reads)
			}
		})
	}
}

// TestRecordsDroppedLeavesNoReads: an iterator dropped mid-catch-up leaves
// its reads ahead to finish on their own; none is left running.
func TestRecordsDroppedLeavesNoReads(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	const n, size = 200, 1024
	g := newPageGate(t, picoURL)
	c := newClient(t, picomq.ProtocolPico, g.URL)
	name := createStream(t, ctx, c, "application/octet-stream")
	s := c.Stream(name)
	appendCounting(t, ctx, s, n, size)
	it := s.Records(c.Beginning(), pagedOpts)
	if !it.Next(ctx) {
		t.Fatalf("first record: %v", it.Err())
	}
	if !g.await(ctx, 30*time.Second, func() bool { return g.readCount() >= 2 }) {
		t.Fatalf("no read ahead: %d reads", g.readCount())
	}
	it = nil
	deadline := time.Now().Add(60 * time.Second)
	for readAheadRunning() {
		if time.Now().After(deadline) {
			t.Fatal("a read ahead of a dropped iterator still runs after 60s")
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal(ctx.Err())
	}
}

func readAheadRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*Records).startAhead")
}
