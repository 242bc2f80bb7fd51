package stream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

// harness is a stream service over a real WAL in a temp dir and a real
// embedded etcd, reopenable to simulate a restart.
type harness struct {
	t   *testing.T
	dir string
	cli *clientv3.Client
	w   *wal.WAL
	svc *stream.Service
	now func() time.Time
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, dir: t.TempDir(), cli: metatest.StartEtcd(t)}
	h.open()
	t.Cleanup(func() { h.w.Close() })
	return h
}

func (h *harness) open() {
	h.t.Helper()
	w, _, err := wal.Open(wal.Options{Dir: h.dir})
	if err != nil {
		h.t.Fatal(err)
	}
	h.w = w
	svc, err := stream.Open(context.Background(), stream.Config{NodeID: "n1", Now: h.now}, w, meta.NewRegistry(h.cli, "/test/"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.svc = svc
}

func (h *harness) reopen() {
	h.t.Helper()
	h.svc.Close()
	if err := h.w.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

func vals(recs []record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func TestCreateIdempotentAndConflict(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	info, created, err := h.svc.Create(ctx, "/a/b", stream.CreateOptions{ContentType: "application/json"})
	if err != nil || !created || info.ID == 0 {
		t.Fatalf("create: %+v %v %v", info, created, err)
	}
	again, created, err := h.svc.Create(ctx, "/a/b", stream.CreateOptions{ContentType: "Application/JSON; charset=utf-8"})
	if err != nil || created || again.ID != info.ID {
		t.Fatalf("identical re-create: %+v %v %v", again, created, err)
	}
	if _, _, err := h.svc.Create(ctx, "/a/b", stream.CreateOptions{ContentType: "text/plain"}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("different re-create: %v, want ErrConflict", err)
	}
	for _, bad := range []string{"", "a", "/", "/a//b", "/a/../b", "/a/", "/a b", "/a%2Fb", "/_sys/x", "/metrics"} {
		if _, _, err := h.svc.Create(ctx, bad, stream.CreateOptions{}); !errors.Is(err, stream.ErrInvalidName) && !errors.Is(err, stream.ErrReservedName) {
			t.Errorf("create %q: %v, want an invalid/reserved name error", bad, err)
		}
	}
}

func TestAppendReadOffsetsAndLimits(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/s", stream.CreateOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	res, err := h.svc.Append(ctx, "/s", []record.Record{{Value: []byte("a")}, {Key: []byte("k"), Value: []byte("b")}})
	if err != nil || res.FirstOffset != 0 || res.NextOffset != 2 {
		t.Fatalf("append: %+v %v", res, err)
	}
	res, err = h.svc.Append(ctx, "/s", []record.Record{{Value: []byte("c")}})
	if err != nil || res.FirstOffset != 2 || res.NextOffset != 3 {
		t.Fatalf("append: %+v %v", res, err)
	}
	// Reading from the middle of a batch skips its earlier records.
	page, err := h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := vals(page.Records); fmt.Sprint(got) != "[b c]" || page.NextOffset != 3 || !page.UpToDate {
		t.Fatalf("read@1: %v next=%d upToDate=%v", got, page.NextOffset, page.UpToDate)
	}
	if string(page.Records[0].Key) != "k" || page.Records[0].Offset != 1 {
		t.Fatalf("record 1: %+v", page.Records[0])
	}
	page, err = h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0, MaxRecords: 1})
	if err != nil || len(page.Records) != 1 || page.NextOffset != 1 || page.UpToDate {
		t.Fatalf("limit 1: %+v %v", page, err)
	}
	page, err = h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 3})
	if err != nil || len(page.Records) != 0 || page.NextOffset != 3 || !page.UpToDate {
		t.Fatalf("read at end: %+v %v", page, err)
	}
	if _, err := h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 4}); !errors.Is(err, stream.ErrOffsetOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := h.svc.Append(ctx, "/missing", []record.Record{{Value: []byte("x")}}); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("append to missing: %v", err)
	}
}

// TestConcurrentAppendsOneStream checks that concurrent appenders get
// distinct, gap-free offsets and that the log holds exactly what they wrote.
func TestConcurrentAppendsOneStream(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/c", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 32, 50
	var mu sync.Mutex
	byOffset := map[int64]string{}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				res, err := h.svc.Append(ctx, "/c", []record.Record{{Value: []byte(v)}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := byOffset[res.FirstOffset]; dup {
					t.Errorf("offset %d assigned twice", res.FirstOffset)
				}
				byOffset[res.FirstOffset] = v
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	check := func() {
		var all []record.Record
		for off := int64(0); ; {
			page, err := h.svc.Read(ctx, "/c", stream.ReadOptions{Offset: off})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page.Records...)
			off = page.NextOffset
			if page.UpToDate {
				break
			}
		}
		if len(all) != writers*each {
			t.Fatalf("read %d records, want %d", len(all), writers*each)
		}
		for i, r := range all {
			if r.Offset != int64(i) || string(r.Value) != byOffset[int64(i)] {
				t.Fatalf("offset %d: got %q at %d, acked %q", i, r.Value, r.Offset, byOffset[int64(i)])
			}
		}
	}
	check()
	h.reopen()
	check()
}

// TestRestartRecoversAndSkipsDeleted: data comes back from the WAL after a
// restart, a deleted stream's entries stay deleted, and a re-created stream
// of the same name starts empty.
func TestRestartRecoversAndSkipsDeleted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, n := range []string{"/keep", "/gone"} {
		if _, _, err := h.svc.Create(ctx, n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := h.svc.Append(ctx, n, []record.Record{{Value: []byte(fmt.Sprintf("%s-%d", n, i))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.svc.Delete(ctx, "/gone"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.Create(ctx, "/gone", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Append(ctx, "/gone", []record.Record{{Value: []byte("new-0")}}); err != nil {
		t.Fatal(err)
	}
	h.reopen()
	page, err := h.svc.Read(ctx, "/keep", stream.ReadOptions{})
	if err != nil || fmt.Sprint(vals(page.Records)) != "[/keep-0 /keep-1 /keep-2 /keep-3 /keep-4]" {
		t.Fatalf("/keep after restart: %v %v", vals(page.Records), err)
	}
	page, err = h.svc.Read(ctx, "/gone", stream.ReadOptions{})
	if err != nil || fmt.Sprint(vals(page.Records)) != "[new-0]" {
		t.Fatalf("/gone after restart: %v %v", vals(page.Records), err)
	}
	res, err := h.svc.Append(ctx, "/keep", []record.Record{{Value: []byte("x")}})
	if err != nil || res.FirstOffset != 5 {
		t.Fatalf("append after restart: %+v %v", res, err)
	}
}

// TestLogAppendTimeMonotonic: a clock stepping backwards never produces a
// timestamp older than one already stamped, also across a restart.
func TestLogAppendTimeMonotonic(t *testing.T) {
	clock := time.UnixMilli(1_000_000)
	var mu sync.Mutex
	h := &harness{t: t, dir: t.TempDir(), cli: metatest.StartEtcd(t), now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}}
	h.open()
	t.Cleanup(func() { h.w.Close() })
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stamp := func(at int64) int64 {
		mu.Lock()
		clock = time.UnixMilli(at)
		mu.Unlock()
		res, err := h.svc.Append(ctx, "/t", []record.Record{{Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Timestamp
	}
	if ts := stamp(2_000_000); ts != 2_000_000 {
		t.Fatalf("ts %d", ts)
	}
	if ts := stamp(1_500_000); ts != 2_000_000 {
		t.Fatalf("clock went back: ts %d, want 2000000", ts)
	}
	h.reopen()
	if ts := stamp(1_700_000); ts != 2_000_000 {
		t.Fatalf("after restart: ts %d, want 2000000", ts)
	}
	page, err := h.svc.Read(ctx, "/t", stream.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Records {
		if r.Timestamp != 2_000_000 {
			t.Fatalf("record %d timestamp %d", r.Offset, r.Timestamp)
		}
	}
}

func TestWaitForWakesOnAppend(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/w", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	woke := make(chan bool, 1)
	go func() {
		ok, err := h.svc.WaitFor(ctx, "/w", 0)
		if err != nil {
			t.Error(err)
		}
		woke <- ok
	}()
	if _, err := h.svc.Append(ctx, "/w", []record.Record{{Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-woke:
		if !ok {
			t.Fatal("waiter woke without data")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by append")
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if ok, err := h.svc.WaitFor(cctx, "/w", 1); ok || err != nil {
		t.Fatalf("wait with no new data: %v %v", ok, err)
	}
}

func TestIdempotentProducerRules(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/p", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := func(epoch, seq uint64, v string) (stream.AppendResult, error) {
		return h.svc.AppendBatch(ctx, "/p", stream.AppendRequest{
			Records:  []record.Record{{Value: []byte(v)}},
			Producer: &stream.Producer{ID: "pico:a", Epoch: epoch, Seq: seq},
		})
	}
	var pe *stream.ProducerError
	if _, err := app(0, 3, "x"); !errors.Is(err, stream.ErrProducerSeqGap) || !errors.As(err, &pe) || pe.ExpectedSeq != 0 || pe.ReceivedSeq != 3 {
		t.Fatalf("unknown producer at seq 3: %v", err)
	}
	r0, err := app(0, 0, "a")
	if err != nil || r0.FirstOffset != 0 || r0.Duplicate {
		t.Fatalf("seq 0: %+v %v", r0, err)
	}
	r1, err := app(0, 1, "b")
	if err != nil || r1.FirstOffset != 1 {
		t.Fatalf("seq 1: %+v %v", r1, err)
	}
	dup, err := app(0, 0, "a-retry")
	if err != nil || !dup.Duplicate || dup.FirstOffset != 0 || dup.NextOffset != 1 || dup.ProducerSeq != 1 {
		t.Fatalf("retry of seq 0: %+v %v", dup, err)
	}
	if _, err := app(0, 5, "gap"); !errors.As(err, &pe) || !errors.Is(err, stream.ErrProducerSeqGap) || pe.ExpectedSeq != 2 || pe.ReceivedSeq != 5 {
		t.Fatalf("gap: %v", err)
	}
	if _, err := app(1, 1, "new epoch not at 0"); !errors.Is(err, stream.ErrProducerEpochSeq) {
		t.Fatalf("new epoch at seq 1: %v", err)
	}
	if r, err := app(1, 0, "c"); err != nil || r.FirstOffset != 2 || r.ProducerEpoch != 1 {
		t.Fatalf("new epoch: %+v %v", r, err)
	}
	if _, err := app(0, 2, "zombie"); !errors.Is(err, stream.ErrProducerFenced) || !errors.As(err, &pe) || pe.CurrentEpoch != 1 {
		t.Fatalf("stale epoch: %v", err)
	}
	// State survives a restart: it is rebuilt from the WAL entries.
	h.reopen()
	dup, err = app(1, 0, "c-retry")
	if err != nil || !dup.Duplicate || dup.FirstOffset != 2 {
		t.Fatalf("retry after restart: %+v %v", dup, err)
	}
	if _, err := app(0, 9, "zombie"); !errors.Is(err, stream.ErrProducerFenced) {
		t.Fatalf("stale epoch after restart: %v", err)
	}
	if r, err := app(1, 1, "d"); err != nil || r.FirstOffset != 3 {
		t.Fatalf("continue after restart: %+v %v", r, err)
	}
	page, err := h.svc.Read(ctx, "/p", stream.ReadOptions{})
	if err != nil || fmt.Sprint(vals(page.Records)) != "[a b c d]" {
		t.Fatalf("log holds %v %v, want each accepted batch once", vals(page.Records), err)
	}
}

func TestCloseAndWriterSeq(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/c", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := []record.Record{{Value: []byte("x")}}
	if _, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Records: one, WriterSeq: "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Records: one, WriterSeq: "10"}); !errors.Is(err, stream.ErrWriterSeq) {
		t.Fatalf(`Stream-Seq "10" after "2": %v, want ErrWriterSeq (bytewise order)`, err)
	}
	closer := &stream.Producer{ID: "ds:w", Epoch: 0, Seq: 0}
	res, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Records: one, Producer: closer, Close: true})
	if err != nil || !res.Closed || res.NextOffset != 2 {
		t.Fatalf("append+close: %+v %v", res, err)
	}
	var ce *stream.ClosedError
	if _, err := h.svc.Append(ctx, "/c", one); !errors.As(err, &ce) || ce.NextOffset != 2 {
		t.Fatalf("append to closed: %v", err)
	}
	if res, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Close: true}); err != nil || !res.Closed {
		t.Fatalf("close-only on closed stream must be idempotent: %+v %v", res, err)
	}
	h.reopen()
	info, err := h.svc.Head(ctx, "/c")
	if err != nil || !info.Closed || info.NextOffset != 2 {
		t.Fatalf("after restart: %+v %v", info, err)
	}
	if res, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Records: one, Producer: closer, Close: true}); err != nil || !res.Duplicate || !res.Closed {
		t.Fatalf("retry of the closing batch after restart: %+v %v", res, err)
	}
	if _, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Records: one, Producer: &stream.Producer{ID: "ds:w", Seq: 1}}); !errors.Is(err, stream.ErrStreamClosed) {
		t.Fatalf("other tuple on closed stream: %v", err)
	}
	page, err := h.svc.Read(ctx, "/c", stream.ReadOptions{})
	if err != nil || !page.Closed || !page.UpToDate || len(page.Records) != 2 {
		t.Fatalf("read closed: %+v %v", page, err)
	}
	// Waiting at the end of a closed stream returns at once: a wait that ran
	// into the deadline would answer the context's error (and take a minute,
	// far above any scheduling delay of a loaded machine).
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	if ok, err := h.svc.WaitFor(wctx, "/c", 2); ok || err != nil || time.Since(start) > 30*time.Second {
		t.Fatalf("wait on closed stream: %v %v after %v", ok, err, time.Since(start))
	}
}

// TestReadOfAnAssignedOffsetWaits: an offset the owner has assigned but
// not yet published (an `object` append whose flush committed, so a
// non-owner already serves it from object storage, before this node
// applied the commit) is not out of range. A reader that read the record
// before it through a non-owner and asks the owner for the next offset
// must get that offset once it is published, never a 416 (TestClusterDrain
// readers got one); an offset past every assigned one still is a 416.
func TestReadOfAnAssignedOffsetWaits(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/s", stream.CreateOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if _, err := h.svc.Append(ctx, "/s", []record.Record{{Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	publish := stream.HoldBackPublished(h.svc, "/s", 1) // offset 2 assigned, not published
	if _, err := h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 4}); !errors.Is(err, stream.ErrOffsetOutOfRange) {
		t.Fatalf("read past every assigned offset: %v, want out of range", err)
	}
	type result struct {
		page stream.ReadResult
		err  error
	}
	done := make(chan result, 1)
	go func() {
		page, err := h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 3})
		done <- result{page, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("read at an assigned, unpublished end returned before it was published: %+v %v", r.page, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	publish()
	select {
	case r := <-done:
		if r.err != nil || len(r.page.Records) != 0 || r.page.NextOffset != 3 || !r.page.UpToDate {
			t.Fatalf("read at 3 after publishing: %+v %v, want no records, up to date", r.page, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("read at 3 still waiting after publishing")
	}

	// Never published (a wedged flush): a 503 to retry, not a 416.
	stream.HoldBackPublished(h.svc, "/s", 1)
	if _, err := h.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 3}); !errors.Is(err, stream.ErrUnavailable) {
		t.Fatalf("read at an assigned offset never published: %v, want unavailable", err)
	}
}
