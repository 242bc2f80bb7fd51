package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// The bare relay floor of many cold readers (issue 31's cold-many row):
// the relay child of relayfloor.go, given the byte ranges of every
// stream's batches in the store's objects (a plan the matrix reads from
// the objects' footers, untimed), serves each stream to its own reader on
// a connection of its own. It does only what a node serving those readers
// must: each object's wanted bytes fetched once, as ranged GETs of at
// most floorRange bytes (floorRange-aligned windows, floorGETs in flight,
// in key order), CRC-32C over every byte served, and each stream's bytes
// written to its HTTP response as relay frames. No records, no index, no
// cache: a window's buffer goes back to the pool once every reader of a
// range in it has written its part. A reader's windows come in the same
// key order as the fetches, so the earliest window waited for is always
// in flight or done (no reader can hold the pool while it waits).
//
// A child serves one pass (GET /stream?i=N for each stream N of the plan,
// all at once): its first, in a fresh process, as the cold-many row's
// node is restarted before its read.

// planSpan is one stream's range of bytes in one object.
type planSpan struct {
	stream int // index of the stream in the plan
	key    string
	off, n int64
}

// maxPlanSpans bounds a plan file, so a corrupt one cannot exhaust the
// child.
const maxPlanSpans = 1 << 20

// parsePlan reads a plan: one line per span, "STREAM KEY OFF N", STREAM
// counting streams from 0, each stream's spans in the order its reader
// wants them. It fails on a malformed line, a negative offset, an empty
// or overflowing range, a key with spaces or an empty one, or more than
// maxPlanSpans lines; it returns the spans and the number of streams
// (one more than the largest STREAM).
func parsePlan(r io.Reader) ([]planSpan, int, error) {
	var spans []planSpan
	streams := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(sc.Text(), " ")
		if len(f) != 4 || f[1] == "" {
			return nil, 0, fmt.Errorf("plan line %d: want STREAM KEY OFF N, got %q", line, sc.Text())
		}
		stream, err1 := strconv.ParseUint(f[0], 10, 31)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		n, err3 := strconv.ParseInt(f[3], 10, 64)
		if err := cmp.Or(err1, err2, err3); err != nil {
			return nil, 0, fmt.Errorf("plan line %d: %w", line, err)
		}
		if off < 0 || n <= 0 || off > 1<<50 || n > 1<<50 {
			return nil, 0, fmt.Errorf("plan line %d: range [%d, +%d) out of bounds", line, off, n)
		}
		if len(spans) == maxPlanSpans {
			return nil, 0, fmt.Errorf("plan: more than %d spans", maxPlanSpans)
		}
		spans = append(spans, planSpan{stream: int(stream), key: f[1], off: off, n: n})
		streams = max(streams, int(stream)+1)
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("plan line %d: %w", len(spans)+1, err)
	}
	return spans, streams, nil
}

// formatPlan writes spans as parsePlan reads them.
func formatPlan(spans []planSpan) []byte {
	var b []byte
	for _, s := range spans {
		b = fmt.Appendf(b, "%d %s %d %d\n", s.stream, s.key, s.off, s.n)
	}
	return b
}

// storePlan reads the footer of every segment object of st (L0 and L1
// keys) and returns each stream's spans: its extents in offset order,
// an extent already covered by earlier ones (the same offsets in an L0
// object and a compacted L1 one) left out. Streams are numbered in the
// order of their ids; total is the bytes of all spans.
func storePlan(ctx context.Context, st objstore.Store) (spans []planSpan, streams int, total int64, err error) {
	type ext struct {
		key         string
		off, n      int64
		first, next int64
	}
	byID := map[uint64][]ext{}
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return nil, 0, 0, err
		}
		_, _, _, l0 := tiering.ParseL0Key(a.Key)
		_, _, l1 := tiering.ParseL1Key(a.Key)
		if !l0 && !l1 {
			continue
		}
		r, err := segment.Open(ctx, st, a.Key, a.Size)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("footer of %s: %w", a.Key, err)
		}
		for _, e := range r.Streams() {
			byID[e.StreamID] = append(byID[e.StreamID], ext{a.Key, e.Offset, e.Length, e.First, e.Next})
		}
	}
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for id := range byID {
			if !yield(id) {
				return
			}
		}
	})
	for i, id := range ids {
		es := byID[id]
		slices.SortFunc(es, func(a, b ext) int { return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(b.next, a.next)) })
		covered := int64(-1)
		for _, e := range es {
			if e.next <= covered {
				continue
			}
			spans = append(spans, planSpan{stream: i, key: e.key, off: e.off, n: e.n})
			total += e.n
			covered = e.next
		}
	}
	return spans, len(ids), total, nil
}

// planWindow is one ranged GET of the relay: bytes [off, off+n) of key,
// the hull of the spans wanted in one floorRange-aligned window.
type planWindow struct {
	key     string
	off, n  int64
	readers atomic.Int32 // pieces still to be written; the buffer goes back at 0
	buf     []byte
	err     error
	fetched chan struct{}
}

// planPiece is one stream's bytes [lo, hi) of a window's buffer.
type planPiece struct {
	w      *planWindow
	lo, hi int64
}

// planWindows cuts spans into floorRange-aligned windows, in key order, and
// returns them with each stream's pieces, in the stream's order. Spans
// of one stream are expected in an order of non-decreasing windows
// (storePlan's: a stream's later offsets are in later objects); a plan
// that goes back fails, since it could wait on the pool for ever.
func planWindows(spans []planSpan, streams int) ([]*planWindow, [][]planPiece, error) {
	type wid struct {
		key string
		idx int64
	}
	ws := map[wid]*planWindow{}
	for _, s := range spans {
		for at := s.off; at < s.off+s.n; {
			id := wid{s.key, at / floorRange}
			end := min(s.off+s.n, (id.idx+1)*floorRange)
			w := ws[id]
			if w == nil {
				w = &planWindow{key: s.key, off: at, n: end - at, fetched: make(chan struct{})}
				ws[id] = w
			}
			lo, hi := min(w.off, at), max(w.off+w.n, end)
			w.off, w.n = lo, hi-lo
			at = end
		}
	}
	ids := slices.SortedFunc(func(yield func(wid) bool) {
		for id := range ws {
			if !yield(id) {
				return
			}
		}
	}, func(a, b wid) int { return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.idx, b.idx)) })
	order := make(map[*planWindow]int, len(ids))
	windows := make([]*planWindow, len(ids))
	for i, id := range ids {
		windows[i] = ws[id]
		order[ws[id]] = i
	}
	pieces := make([][]planPiece, streams)
	last := make([]int, streams)
	for _, s := range spans {
		for at := s.off; at < s.off+s.n; {
			w := ws[wid{s.key, at / floorRange}]
			end := min(s.off+s.n, (at/floorRange+1)*floorRange)
			if order[w] < last[s.stream] {
				return nil, nil, fmt.Errorf("plan: stream %d goes back from window %d to %d", s.stream, last[s.stream], order[w])
			}
			last[s.stream] = order[w]
			pieces[s.stream] = append(pieces[s.stream], planPiece{w, at - w.off, end - w.off})
			w.readers.Add(1)
			at = end
		}
	}
	return windows, pieces, nil
}

// manyRelay is the child's state for its one pass.
type manyRelay struct {
	st      objstore.Store
	windows []*planWindow
	pieces  [][]planPiece
	bufs    chan []byte
	start   sync.Once
	served  []atomic.Bool
}

// fetch runs the pass's GETs, in window order, floorGETs at a time (one
// buffer each from bufs).
func (m *manyRelay) fetch(ctx context.Context) {
	for _, w := range m.windows {
		select {
		case w.buf = <-m.bufs:
		case <-ctx.Done():
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			k, err := m.st.ReadAt(ctx, w.key, w.buf[:w.n], w.off)
			if err == io.EOF && int64(k) == w.n {
				err = nil
			}
			if err == nil && int64(k) != w.n {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				w.err = fmt.Errorf("GET %s [%d, +%d): %w", w.key, w.off, w.n, err)
			}
			close(w.fetched)
		}()
	}
}

// serve writes stream i's pieces to w as relay frames, then the end
// frame.
func (m *manyRelay) serve(ctx context.Context, i int, w io.Writer) error {
	var hdr [relayFrameHeader]byte
	for _, p := range m.pieces[i] {
		select {
		case <-p.w.fetched:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.w.err != nil {
			return p.w.err
		}
		b := p.w.buf[p.lo:p.hi]
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(b)))
		binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(b, castagnoli))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if p.w.readers.Add(-1) == 0 {
			m.bufs <- p.w.buf[:cap(p.w.buf)]
		}
	}
	clear(hdr[:])
	_, err := w.Write(hdr[:])
	return err
}

// handle is GET /stream?i=N: stream N of the plan, once.
func (m *manyRelay) handle(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(r.URL.Query().Get("i"))
	if err != nil || i < 0 || i >= len(m.pieces) {
		jsonError(w, http.StatusNotFound, fmt.Sprintf("no stream %q in the plan", r.URL.Query().Get("i")))
		return
	}
	if m.served[i].Swap(true) {
		jsonError(w, http.StatusConflict, "a relay serves each stream once (one pass per process)")
		return
	}
	// The fetches belong to the pass, not to the first request.
	m.start.Do(func() { go m.fetch(context.Background()) })
	if err := m.serve(r.Context(), i, w); err != nil {
		// A failed pass leaves its windows' buffers held: the matrix
		// stops the child after a pass either way.
		fmt.Fprintf(os.Stderr, "relay stream %d: %v\n", i, err)
		panic(http.ErrAbortHandler)
	}
}

// relayManyMain is `benchmatrix relay-many -store URL -plan FILE`: it
// serves GET /stream?i=N (one pass) on a loopback port it prints
// ("listening ADDR") until it is killed.
func relayManyMain(args []string) error {
	fs := flag.NewFlagSet("relay-many", flag.ContinueOnError)
	storeURL := fs.String("store", "", "object store URL (storeurl) of the plan's objects")
	planFile := fs.String("plan", "", "plan file: lines STREAM KEY OFF N")
	touched := fs.Bool("touched", false, "touch the read buffers before listening (relayBuffers)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*planFile)
	if err != nil {
		return err
	}
	spans, streams, err := parsePlan(f)
	f.Close()
	if err != nil {
		return err
	}
	windows, pieces, err := planWindows(spans, streams)
	if err != nil {
		return err
	}
	st, err := storeurl.Open(context.Background(), *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	m := &manyRelay{st: st, windows: windows, pieces: pieces, bufs: relayBuffers(*touched), served: make([]atomic.Bool, streams)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stream", m.handle)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: mux}
	announce(ln.Addr().String())
	return srv.Serve(ln)
}

// manyResult is one pass of the many-readers relay.
type manyResult struct {
	seconds             float64 // from the first request to the last end frame
	bytes               int64   // relayed bytes (batches), all streams
	relayCPU, readerCPU float64 // seconds, the relay process and this one
	spans, gets         int     // the plan's spans, and the relay's ranged GETs (windows)
}

// relayManyPass writes the plan of st's objects to dir, starts a relay
// child on it and reads every stream at once, one reader and connection
// each, checking every frame's CRC and each stream's byte count.
func relayManyPass(ctx context.Context, st objstore.Store, storeURL, dir string, flags ...string) (manyResult, error) {
	spans, streams, total, err := storePlan(ctx, st)
	if err != nil {
		return manyResult{}, err
	}
	if streams == 0 {
		return manyResult{}, fmt.Errorf("no streams in the store's objects")
	}
	windows, _, err := planWindows(spans, streams)
	if err != nil {
		return manyResult{}, err
	}
	want := make([]int64, streams)
	for _, s := range spans {
		want[s.stream] += s.n
	}
	plan, err := os.CreateTemp(dir, "relay-plan-")
	if err != nil {
		return manyResult{}, err
	}
	defer os.Remove(plan.Name())
	_, err = plan.Write(formatPlan(spans))
	if err := cmp.Or(err, plan.Close()); err != nil {
		return manyResult{}, err
	}
	p, addr, err := startChild("relay-many", append([]string{"relay-many", "-store", storeURL, "-plan", plan.Name()}, flags...)...)
	if err != nil {
		return manyResult{}, err
	}
	defer p.stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: streams}}
	defer c.CloseIdleConnections()
	cpu0, rcpu0 := testproc.CPUSeconds(p.pid), testproc.CPUSeconds(os.Getpid())
	t0 := time.Now()
	var wg sync.WaitGroup
	var got atomic.Int64
	errs := make(chan error, streams)
	for i := range streams {
		wg.Go(func() {
			n, err := readRelayStream(ctx, c, addr, i)
			got.Add(n)
			if err == nil && n != want[i] {
				err = fmt.Errorf("%d bytes, want %d", n, want[i])
			}
			if err != nil {
				errs <- fmt.Errorf("relay stream %d: %w", i, err)
				cancel()
			}
		})
	}
	wg.Wait()
	res := manyResult{seconds: time.Since(t0).Seconds(), bytes: got.Load(),
		relayCPU: testproc.CPUSeconds(p.pid) - cpu0, readerCPU: testproc.CPUSeconds(os.Getpid()) - rcpu0,
		spans: len(spans), gets: len(windows)}
	close(errs)
	if err := <-errs; err != nil {
		return res, fmt.Errorf("%w\n%s", err, p.tail())
	}
	if res.bytes != total {
		return res, fmt.Errorf("relayed %d bytes, the plan has %d", res.bytes, total)
	}
	return res, nil
}

// readRelayStream reads stream i from a relay-many child.
func readRelayStream(ctx context.Context, c *http.Client, addr string, i int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/stream?i=%d", addr, i), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return readRelay(resp.Body, 64<<10)
}

// jsonError answers a refused request with status and a JSON body.
func jsonError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
