package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

// countingLog counts the WAL reads of single entries.
type countingLog struct {
	*wal.WAL
	reads atomic.Int64
}

func (l *countingLog) ReadAt(pos wal.Pos, dst []byte) ([]byte, error) {
	l.reads.Add(1)
	return l.WAL.ReadAt(pos, dst)
}

// openTailService opens a stream service on a real WAL (its single-entry
// reads counted) and etcd, with one text stream named name.
func openTailService(tb testing.TB, name string) (*stream.Service, *countingLog) {
	tb.Helper()
	w, _, err := wal.Open(wal.Options{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	log := &countingLog{WAL: w}
	svc, err := stream.Open(context.Background(), stream.Config{NodeID: "n1"}, log, meta.NewRegistry(metatest.StartEtcd(tb), "/test/"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(svc.Close)
	if _, _, err := svc.Create(context.Background(), name, stream.CreateOptions{ContentType: "text/plain"}); err != nil {
		tb.Fatal(err)
	}
	return svc, log
}

// TestLiveReadOfLatestAppendSkipsWAL: a reader at the tail reads the batch
// just appended from memory, not back from the WAL; older batches, and
// batches too large to hold, still come from the WAL, with the same bytes.
func TestLiveReadOfLatestAppendSkipsWAL(t *testing.T) {
	ctx := context.Background()
	svc, log := openTailService(t, "/tail")
	read := func(offset int64) []string {
		t.Helper()
		res, err := svc.Read(ctx, "/tail", stream.ReadOptions{Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		return vals(res.Records)
	}
	for i := range 3 {
		if _, err := svc.Append(ctx, "/tail", []record.Record{{Value: fmt.Appendf(nil, "v%d", i)}}); err != nil {
			t.Fatal(err)
		}
		before := log.reads.Load()
		if got := read(int64(i)); fmt.Sprint(got) != fmt.Sprintf("[v%d]", i) {
			t.Fatalf("live read at %d: %v", i, got)
		}
		if n := log.reads.Load() - before; n != 0 {
			t.Fatalf("live read at %d of the batch just appended: %d WAL reads, want 0", i, n)
		}
	}
	// The earlier batches are no longer held: they are read back.
	before := log.reads.Load()
	if got := read(0); fmt.Sprint(got) != "[v0 v1 v2]" {
		t.Fatalf("read from 0: %v", got)
	}
	if n := log.reads.Load() - before; n != 2 {
		t.Fatalf("read of two older batches and the latest: %d WAL reads, want 2", n)
	}
	// A batch larger than what is held goes through the WAL.
	big := bytes.Repeat([]byte("x"), 64<<10)
	if _, err := svc.Append(ctx, "/tail", []record.Record{{Value: big}}); err != nil {
		t.Fatal(err)
	}
	before = log.reads.Load()
	if got := read(3); len(got) != 1 || got[0] != string(big) {
		t.Fatalf("read of the large batch: %d records", len(got))
	}
	if n := log.reads.Load() - before; n != 1 {
		t.Fatalf("read of a large latest batch: %d WAL reads, want 1", n)
	}
}

// BenchmarkLiveRead reads one 100 B record as a woken live reader does:
// "memory" the batch just appended (held in memory), "wal" the batch
// before it (read back from the WAL, as every live read did before).
func BenchmarkLiveRead(b *testing.B) {
	ctx := context.Background()
	svc, _ := openTailService(b, "/b")
	for range 2 {
		if _, err := svc.Append(ctx, "/b", []record.Record{{Value: bytes.Repeat([]byte("v"), 100)}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		offset int64
	}{{"memory", 1}, {"wal", 0}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := svc.Read(ctx, "/b", stream.ReadOptions{Offset: c.offset, MaxRecords: 1})
				if err != nil || len(res.Records) != 1 {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// TestReadMakesNoWakeChannel: a read that does not wait leaves the
// stream without a wake channel. Every read made one (a live reader's
// included): an allocation per read, and a close by the next append for
// nobody.
func TestReadMakesNoWakeChannel(t *testing.T) {
	ctx := context.Background()
	svc, _ := openTailService(t, "/a")
	for i := range 3 {
		if _, err := svc.Append(ctx, "/a", []record.Record{{Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		res, err := svc.Read(ctx, "/a", stream.ReadOptions{Offset: int64(i)})
		if err != nil || len(res.Records) != 1 {
			t.Fatal(res, err)
		}
		if stream.WakePending(svc, "/a") {
			t.Fatalf("read %d, which did not wait, left a wake channel on the stream", i)
		}
	}
	// A live wait still makes one, and the next append wakes it.
	woke := make(chan bool, 1)
	go func() {
		ok, _ := svc.WaitFor(ctx, "/a", 3)
		woke <- ok
	}()
	for !stream.WakePending(svc, "/a") {
		runtime.Gosched()
	}
	if _, err := svc.Append(ctx, "/a", []record.Record{{Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if !<-woke {
		t.Fatal("WaitFor at the end returned without data after an append")
	}
}

// TestLiveReadAllocations: a live reader's read of the batch just
// appended (one record, held in memory) allocates 4 times, for what it
// returns and decodes (the records, their decoding, the walk over the
// batch, the read's bookkeeping); the one-piece list the batch was
// handed on in used to be a fifth.
func TestLiveReadAllocations(t *testing.T) {
	ctx := context.Background()
	svc, log := openTailService(t, "/allocs")
	res, err := svc.Append(ctx, "/allocs", []record.Record{{Value: bytes.Repeat([]byte{'v'}, 100)}})
	if err != nil {
		t.Fatal(err)
	}
	before := log.reads.Load()
	allocs := testing.AllocsPerRun(100, func() {
		r, err := svc.Read(ctx, "/allocs", stream.ReadOptions{Offset: res.FirstOffset})
		if err != nil || len(r.Records) != 1 || !r.UpToDate {
			t.Fatalf("read: %d records, up to date %v, %v", len(r.Records), r.UpToDate, err)
		}
	})
	if n := log.reads.Load() - before; n != 0 {
		t.Fatalf("%d WAL reads: the batch was not held in memory", n)
	}
	if allocs > 4 {
		t.Fatalf("a live read of the latest batch allocates %.1f times, want at most 4", allocs)
	}
}

// TestWaitForReadyAllocatesNothing: WaitFor at an offset that is already
// readable (a live reader woken by an append, checking again) allocates
// nothing; it used to make the stream's next wake channel first, on the
// way from the append's fdatasync to the reader's write.
func TestWaitForReadyAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	svc, _ := openTailService(t, "/wait")
	val := []record.Record{{Value: []byte("v")}}
	var next int64
	appendOnce := func() stream.AppendResult {
		res, err := svc.Append(ctx, "/wait", val)
		if err != nil {
			t.Fatal(err)
		}
		next = res.NextOffset
		return res
	}
	// AllocsPerRun counts every goroutine's allocations: in a full
	// package run another test's leftover goroutines can add one per run
	// to either loop. Noise only adds, so one attempt without a
	// difference shows the property; without it every attempt has one
	// more allocation per WaitFor.
	var appendOnly, withWait float64
	for range 5 {
		appendOnly = testing.AllocsPerRun(100, func() { appendOnce() })
		withWait = testing.AllocsPerRun(100, func() {
			res := appendOnce()
			if ok, err := svc.WaitFor(ctx, "/wait", res.FirstOffset); !ok || err != nil {
				t.Fatalf("WaitFor(%d): %v %v", res.FirstOffset, ok, err)
			}
		})
		if withWait <= appendOnly {
			break
		}
	}
	if withWait > appendOnly {
		t.Fatalf("an append allocates %.1f times, an append and a WaitFor for it %.1f", appendOnly, withWait)
	}
	// A WaitFor at the end still waits, and the next append wakes it.
	woke := make(chan error, 1)
	go func() {
		ok, err := svc.WaitFor(ctx, "/wait", next)
		if err == nil && !ok {
			err = fmt.Errorf("WaitFor(%d) returned without data", next)
		}
		woke <- err
	}()
	deadline := time.After(time.Minute)
	for {
		if _, err := svc.Append(ctx, "/wait", val); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-woke:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-deadline:
			t.Fatal("a WaitFor at the end was not woken by appends for a minute")
		case <-time.After(10 * time.Millisecond): // appends until the waiter, parked or not, sees one
		}
	}
}
