package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, rep := openWAL(t, dir, 1<<20)
	if rep != (RecoveryReport{}) {
		t.Fatalf("fresh log report = %+v, want zero", rep)
	}
	var want []entry
	for i, size := range []int{0, 1, 13, 100, 4095, 4096, 4097, 70_000, 3} {
		data := payload(uint64(i), size)
		pos, err := w.Append(context.Background(), data)
		if err != nil {
			t.Fatalf("Append #%d: %v", i, err)
		}
		if pos.Len != int32(size) {
			t.Fatalf("Append #%d: Len = %d, want %d", i, pos.Len, size)
		}
		got, err := w.ReadAt(pos, nil)
		if err != nil {
			t.Fatalf("ReadAt(%+v): %v", pos, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("ReadAt(%+v) returned different bytes", pos)
		}
		want = append(want, entry{pos, data})
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	w2, rep := openWAL(t, dir, 1<<20)
	if rep.Entries != len(want) || rep.Segments != 1 || rep.TornBytes != 0 {
		t.Fatalf("report = %+v, want %d entries in 1 segment, nothing torn", rep, len(want))
	}
	sameEntries(t, replayAll(t, w2), want)
	// The log continues where it ended.
	pos, err := w2.Append(context.Background(), []byte("after reopen"))
	if err != nil {
		t.Fatal(err)
	}
	last := want[len(want)-1].pos
	if wantOff := last.Offset + int64(last.Len) + headerSize; pos.Segment != last.Segment || pos.Offset != wantOff {
		t.Fatalf("first append after reopen at %+v, want segment %d offset %d", pos, last.Segment, wantOff)
	}
}

// TestEnqueueOrderIsLogOrder checks the contract the stream service relies
// on: positions handed out under its own lock increase in that order, and
// the log holds the entries in exactly that order.
func TestEnqueueOrderIsLogOrder(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 8<<10) // small segments: the order must survive rotation
	var (
		mu      sync.Mutex // stands in for the caller's index lock
		order   []entry
		pending []*Pending
	)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				seq := uint64(g*1000 + i)
				data := payload(seq, 10+int(seq%300))
				mu.Lock()
				p, err := w.Enqueue(data)
				if err != nil {
					mu.Unlock()
					t.Errorf("Enqueue: %v", err)
					return
				}
				order = append(order, entry{p.Pos(), data})
				pending = append(pending, p)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(order); i++ {
		a, b := order[i-1].pos, order[i].pos
		if b.Segment < a.Segment || (b.Segment == a.Segment && b.Offset <= a.Offset) {
			t.Fatalf("position %d (%+v) does not follow position %d (%+v)", i, b, i-1, a)
		}
	}
	if err := pending[len(pending)-1].Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantAllDone(t, pending, "although a later entry is durable")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _ := openWAL(t, dir, 8<<10)
	sameEntries(t, replayAll(t, w2), order)
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	const segSize = 4096
	w, _ := openWAL(t, dir, segSize)
	appendN := func(size int) Pos {
		t.Helper()
		pos, err := w.Append(context.Background(), payload(uint64(size), size))
		if err != nil {
			t.Fatal(err)
		}
		return pos
	}
	// Four 1000-byte entries take 4052 bytes; the fifth does not fit.
	for i := range 4 {
		if pos := appendN(1000); pos.Segment != 1 || pos.Offset != int64(i*1013+headerSize) {
			t.Fatalf("entry %d at %+v, want segment 1 offset %d", i, pos, i*1013+headerSize)
		}
	}
	if pos := appendN(1000); pos.Segment != 2 || pos.Offset != headerSize {
		t.Fatalf("fifth entry at %+v, want start of segment 2", pos)
	}
	// An entry that exactly fills the rest of a segment stays in it.
	if pos := appendN(segSize - 1013 - headerSize); pos.Segment != 2 {
		t.Fatalf("exactly fitting entry went to segment %d", pos.Segment)
	}
	if pos := appendN(0); pos.Segment != 3 {
		t.Fatalf("entry after a full segment went to segment %d, want 3", pos.Segment)
	}
	// An entry larger than a segment gets one of its own, and the next
	// entry starts another.
	big := appendN(3 * segSize)
	if big.Segment != 4 || big.Offset != headerSize {
		t.Fatalf("oversized entry at %+v, want start of segment 4", big)
	}
	if pos := appendN(10); pos.Segment != 5 {
		t.Fatalf("entry after oversized one went to segment %d, want 5", pos.Segment)
	}
	if got := w.ActiveSegment(); got != 5 {
		t.Fatalf("ActiveSegment = %d, want 5", got)
	}
	for seg := uint64(1); seg <= 5; seg++ {
		if _, err := os.Stat(segPath(dir, seg)); err != nil {
			t.Fatalf("segment file: %v", err)
		}
	}
	// Open fills the first segment completely; later ones are filled in
	// the background (TestRotationIntoPartlyFilledSegment).
	if fi, err := os.Stat(segPath(dir, 1)); err != nil || fi.Size() != segSize {
		t.Fatalf("first segment: %v, size %d, want the preallocated %d", err, fi.Size(), segSize)
	}
	if filepath.Base(segPath(dir, 1)) != "00000000000000000001.wal" {
		t.Fatalf("segment name %q", filepath.Base(segPath(dir, 1)))
	}
	if got, err := w.ReadAt(big, nil); err != nil || !bytes.Equal(got, payload(3*segSize, 3*segSize)) {
		t.Fatalf("ReadAt(oversized): %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, rep := openWAL(t, dir, segSize)
	if rep.Segments != 5 || rep.Entries != 9 {
		t.Fatalf("report = %+v, want 5 segments and 9 entries", rep)
	}
	if n := len(replayAll(t, w2)); n != 9 {
		t.Fatalf("replayed %d entries, want 9", n)
	}
}

func TestReadAtConcurrentWithAppends(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 32<<10)
	var (
		mu      sync.Mutex
		durable []Pos
	)
	ctx := context.Background()
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		writers.Go(func() {
			for i := range 200 {
				seq := uint64(g<<32 | i)
				pos, err := w.Append(ctx, payload(seq, 8+int(seq%2000)))
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				durable = append(durable, pos)
				mu.Unlock()
			}
		})
	}
	var reads [4]int
	for r := range 4 {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			var buf []byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				runtimeYield() // leave the two CI cores to the appenders now and then
				mu.Lock()
				if len(durable) == 0 {
					mu.Unlock()
					continue
				}
				pos := durable[rng.IntN(len(durable))]
				mu.Unlock()
				var err error
				buf, err = w.ReadAt(pos, buf)
				if err != nil {
					t.Errorf("ReadAt(%+v): %v", pos, err)
					return
				}
				if len(buf) < 8 || !bytes.Equal(buf, payload(binary.LittleEndian.Uint64(buf), int(pos.Len))) {
					t.Errorf("ReadAt(%+v) returned bytes of no entry", pos)
					return
				}
				reads[r]++
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	if w.ActiveSegment() < 3 {
		t.Fatalf("only %d segments: the test did not exercise rotation", w.ActiveSegment())
	}
	for r, n := range reads {
		if n == 0 {
			t.Errorf("reader %d read nothing", r)
		}
	}
}

func TestReadAtRefusesWhatIsNotDurable(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	p, err := w.Enqueue([]byte("not yet"))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.entered // written, not yet synced
	if _, err := w.ReadAt(p.Pos(), nil); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("ReadAt before fdatasync: %v, want ErrNotDurable", err)
	}
	gate.passThrough()
	gate.release <- nil
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, err := w.ReadAt(p.Pos(), []byte("stale dst contents")); err != nil || string(got) != "not yet" {
		t.Fatalf("ReadAt after fdatasync = %q, %v", got, err)
	}
	pos := p.Pos()
	for _, bad := range []Pos{
		{Segment: pos.Segment, Offset: pos.Offset + 100, Len: 1}, // past the end
		{Segment: pos.Segment + 1, Offset: headerSize, Len: 1},   // future segment
		{Segment: pos.Segment, Offset: 0, Len: 1},                // inside no record
		{Segment: pos.Segment, Offset: pos.Offset, Len: -1},
	} {
		if _, err := w.ReadAt(bad, nil); !errors.Is(err, ErrNotDurable) {
			t.Errorf("ReadAt(%+v): %v, want ErrNotDurable", bad, err)
		}
	}
	wrongLen := pos
	wrongLen.Len--
	if _, err := w.ReadAt(wrongLen, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadAt with a length that disagrees with the record: %v, want ErrCorrupt", err)
	}
}

func TestCloseWritesEverythingEnqueued(t *testing.T) {
	dir := t.TempDir()
	w, gate := openGated(t, dir, 1<<20)
	first, err := w.Enqueue([]byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.entered // the writer is busy; everything below queues behind it
	var want []entry
	var pending []*Pending
	for i := range 100 {
		data := payload(uint64(i), 50+i)
		p, err := w.Enqueue(data)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
		want = append(want, entry{p.Pos(), data})
	}
	closed := make(chan error)
	go func() { closed <- w.Close() }()
	gate.passThrough()
	gate.release <- nil
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantAllDone(t, pending, "after Close returned")
	for i, p := range pending {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	if _, err := os.Stat(dir + "/" + segmentName(2) + tmpExt); !os.IsNotExist(err) {
		t.Fatalf("preallocated next segment left behind after Close: %v", err)
	}
	w2, _ := openWAL(t, dir, 1<<20)
	got := replayAll(t, w2)
	if len(got) != 101 {
		t.Fatalf("replayed %d entries, want 101", len(got))
	}
	sameEntries(t, got[1:], want)
}

func TestCallsAfterClose(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 1<<20)
	pos, err := w.Append(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, err := w.Enqueue([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Enqueue: %v, want ErrClosed", err)
	}
	if _, err := w.Append(context.Background(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Append: %v, want ErrClosed", err)
	}
	if _, err := w.ReadAt(pos, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt: %v, want ErrClosed", err)
	}
	if err := w.Replay(func(Pos, []byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Replay: %v, want ErrClosed", err)
	}
	if err := w.RemoveSegmentsBefore(10); !errors.Is(err, ErrClosed) {
		t.Errorf("RemoveSegmentsBefore: %v, want ErrClosed", err)
	}
}

// TestWaitReturnsOnContextButWriteHappens holds the writer goroutine in
// the fdatasync of an Enqueue'd entry and cancels its Wait. (A Wait that
// commits its entry itself cannot return in the middle of that commit; see
// TestCancelledWaitLeavesParkedEntryToWriter.)
func TestWaitReturnsOnContextButWriteHappens(t *testing.T) {
	dir := t.TempDir()
	w, gate := openGated(t, dir, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := w.Enqueue([]byte("survives cancellation"))
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error)
	go func() { res <- p.Wait(ctx) }()
	<-gate.entered
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled context: %v, want context.Canceled", err)
	}
	gate.passThrough()
	gate.release <- nil
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _ := openWAL(t, dir, 1<<20)
	if got := replayAll(t, w2); len(got) != 1 || string(got[0].data) != "survives cancellation" {
		t.Fatalf("log after cancelled Append holds %d entries", len(got))
	}
}

// TestGroupCommit holds the writer in one fdatasync and checks that
// everything enqueued meanwhile is made durable by exactly one more.
func TestGroupCommit(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	first, err := w.Enqueue([]byte("leader"))
	if err != nil {
		t.Fatal(err)
	}
	if n := <-gate.entered; n != 1 {
		t.Fatalf("first fdatasync is call %d", n)
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := w.Append(context.Background(), payload(uint64(i), 100))
			errs <- err
		})
	}
	// Wait until all n are queued behind the held sync.
	for w.Stats().QueuedBytes < n*(headerSize+100) {
		runtimeYield()
	}
	gate.release <- nil
	if err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := <-gate.entered; c != 2 {
		t.Fatalf("second fdatasync is call %d", c)
	}
	gate.release <- nil
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := w.Stats()
	if gate.calls() != 2 || st.Syncs != 2 || st.Groups != 2 {
		t.Fatalf("%d appends took %d fdatasyncs in %d groups, want 2 and 2", n+1, gate.calls(), st.Groups)
	}
	// Groups of 1 and of 50 entries: buckets 0 and 6 (33..64).
	if st.GroupSizes[0] != 1 || st.GroupSizes[6] != 1 {
		t.Fatalf("group size histogram %v, want one group in bucket 0 and one in bucket 6", st.GroupSizes)
	}
	if st.Entries != n+1 {
		t.Fatalf("Stats.Entries = %d, want %d", st.Entries, n+1)
	}
	gate.passThrough()
}

func TestFailureIsSticky(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	okPos, err := enqueueAndRelease(w, gate, []byte("durable"), nil)
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := w.Enqueue([]byte("doomed"))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	queued, err := w.Enqueue([]byte("queued behind the failure"))
	if err != nil {
		t.Fatal(err)
	}
	gate.release <- syscall.EIO
	for _, p := range []*Pending{doomed, queued} {
		err := p.Wait(context.Background())
		if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("Wait after failed fdatasync: %v, want ErrFailed wrapping EIO", err)
		}
	}
	checks := map[string]func() error{
		"Enqueue": func() error { _, err := w.Enqueue([]byte("x")); return err },
		"Append":  func() error { _, err := w.Append(context.Background(), []byte("x")); return err },
		"ReadAt":  func() error { _, err := w.ReadAt(okPos, nil); return err },
		"Replay":  func() error { return w.Replay(func(Pos, []byte) error { return nil }) },
		"Remove":  func() error { return w.RemoveSegmentsBefore(1) },
		"Close":   w.Close,
	}
	for _, name := range []string{"Enqueue", "Append", "ReadAt", "Replay", "Remove", "Close"} {
		if err := checks[name](); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
			t.Errorf("%s after failure: %v, want ErrFailed wrapping EIO", name, err)
		}
	}
	if c := gate.calls(); c != 2 {
		t.Fatalf("fdatasync called %d times, want 2: a failed fdatasync must never be retried", c)
	}
}

// enqueueAndRelease appends data through a held gate, letting the sync
// return syncErr.
func enqueueAndRelease(w *WAL, gate *syncGate, data []byte, syncErr error) (Pos, error) {
	p, err := w.Enqueue(data)
	if err != nil {
		return Pos{}, err
	}
	<-gate.entered
	gate.release <- syncErr
	return p.Pos(), p.Wait(context.Background())
}

func TestBackpressure(t *testing.T) {
	// Segments larger than the queue, so the test measures the queue alone.
	w, gate := openGated(t, t.TempDir(), queueLimit+(2<<20))
	if _, err := w.Enqueue([]byte("leader")); err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	big := make([]byte, 1<<20)
	for w.Stats().QueuedBytes+headerSize+int64(len(big)) <= queueLimit {
		if _, err := w.Enqueue(big); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan *Pending)
	go func() {
		p, err := w.Enqueue(big)
		if err != nil {
			t.Error(err)
		}
		blocked <- p
	}()
	// The extra Enqueue must park on the full queue rather than grow it.
	for {
		w.mu.Lock()
		waiting := w.spaceWaiters
		w.mu.Unlock()
		if waiting == 1 {
			break
		}
		runtimeYield()
	}
	if q := w.Stats().QueuedBytes; q > queueLimit {
		t.Fatalf("queue holds %d bytes, limit %d", q, queueLimit)
	}
	gate.passThrough()
	gate.release <- nil
	p := <-blocked
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReplayOnlyBeforeEnqueue(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 1<<20)
	if got := replayAll(t, w); len(got) != 0 {
		t.Fatalf("empty log replayed %d entries", len(got))
	}
	if _, err := w.Append(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Replay(func(Pos, []byte) error { return nil }); !errors.Is(err, ErrReplayAfterEnqueue) {
		t.Fatalf("Replay after Append: %v, want ErrReplayAfterEnqueue", err)
	}
}

func TestReplayStopsAtCallbackError(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 1<<20)
	for i := range 5 {
		if _, err := w.Append(context.Background(), payload(uint64(i), 10)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	w2, _ := openWAL(t, dir, 1<<20)
	stopErr := errors.New("enough")
	calls := 0
	err := w2.Replay(func(Pos, []byte) error {
		calls++
		if calls == 3 {
			return stopErr
		}
		return nil
	})
	if err != stopErr || calls != 3 {
		t.Fatalf("Replay returned %v after %d calls, want the callback's error after 3", err, calls)
	}
}

func TestSecondOpenIsLockedOut(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 1<<20)
	if _, _, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, Logger: testLogger(t)}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	w2.Close()
}

func TestRemoveSegmentsBefore(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 4096)
	// awaitPrepared: every segment fully preallocated, so DiskBytes below is exact.
	all := appendPayloads(t, w, slices.Repeat([]int{900}, 40), awaitPrepared)
	active := w.ActiveSegment() // 40 entries of 913 bytes, 4 per segment: 10 segments
	if active != 10 {
		t.Fatalf("ActiveSegment = %d, want 10", active)
	}
	if err := w.RemoveSegmentsBefore(3); err != nil {
		t.Fatal(err)
	}
	for seg := uint64(1); seg <= active; seg++ {
		_, err := os.Stat(segPath(dir, seg))
		if gone := os.IsNotExist(err); gone != (seg < 3) {
			t.Fatalf("segment %d: removed=%v, stat error %v", seg, gone, err)
		}
	}
	if _, err := w.ReadAt(all[0].pos, nil); !errors.Is(err, ErrRemoved) {
		t.Fatalf("ReadAt in removed segment: %v, want ErrRemoved", err)
	}
	if got, err := w.ReadAt(all[8].pos, nil); err != nil || !bytes.Equal(got, all[8].data) {
		t.Fatalf("ReadAt in kept segment %d: %v", all[8].pos.Segment, err)
	}
	// Asking for everything still keeps the active segment.
	if err := w.RemoveSegmentsBefore(active + 100); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Segments != 1 || st.DiskBytes != 4096 {
		t.Fatalf("after removing all but the active segment: %d segments, %d bytes", st.Segments, st.DiskBytes)
	}
	if got, err := w.ReadAt(all[39].pos, nil); err != nil || !bytes.Equal(got, all[39].data) {
		t.Fatalf("ReadAt in active segment: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, rep := openWAL(t, dir, 4096)
	if rep.Segments != 1 {
		t.Fatalf("reopened with %d segments, want 1", rep.Segments)
	}
	sameEntries(t, replayAll(t, w2), all[36:])
	if pos, err := w2.Append(context.Background(), payload(99, 900)); err != nil || pos.Segment != active+1 {
		t.Fatalf("append after reopen went to %+v (%v), want segment %d", pos, err, active+1)
	}
}

func TestReadAtDuringRemoval(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 4096)
	all := appendPayloads(t, w, slices.Repeat([]int{900}, 40), nil)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			var buf []byte
			for i := r; i < 400; i += 4 {
				e := all[i%len(all)]
				got, err := w.ReadAt(e.pos, buf)
				switch {
				case errors.Is(err, ErrRemoved):
				case err != nil:
					t.Errorf("ReadAt(%+v): %v", e.pos, err)
					return
				case !bytes.Equal(got, e.data):
					t.Errorf("ReadAt(%+v) returned wrong bytes", e.pos)
					return
				}
				buf = got
			}
		})
	}
	for seg := uint64(2); seg <= 10; seg++ {
		if err := w.RemoveSegmentsBefore(seg); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestStats(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 4096)
	sizes := []int{10, 2000, 2000, 300}
	var payloadBytes uint64
	for i, n := range sizes {
		if _, err := w.Append(context.Background(), payload(uint64(i), n)); err != nil {
			t.Fatal(err)
		}
		payloadBytes += uint64(n)
		awaitPrepared(w) // segment 2 fully preallocated before the rotation into it
	}
	st := w.Stats()
	if st.Entries != uint64(len(sizes)) || st.PayloadBytes != payloadBytes ||
		st.SyncedBytes != payloadBytes+uint64(len(sizes))*headerSize {
		t.Fatalf("Stats = %+v", st)
	}
	// 10, 2000 and 2000 fill segment 1 to 4049 bytes; 300 starts segment 2.
	if st.Segments != 2 || st.DiskBytes != 2*4096 {
		t.Fatalf("Stats: %d segments, %d disk bytes; want 2 and %d", st.Segments, st.DiskBytes, 2*4096)
	}
	if st.Groups != 4 || st.Syncs < 4 || st.SyncTime <= 0 || st.GroupSizes[0] != 4 {
		t.Fatalf("Stats: groups %d, syncs %d, sync time %v, sizes %v", st.Groups, st.Syncs, st.SyncTime, st.GroupSizes)
	}
}

func TestEnqueueAllocatesOnlyThePending(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	if _, err := w.Enqueue([]byte("leader")); err != nil {
		t.Fatal(err)
	}
	<-gate.entered // hold the writer so every Enqueue below joins one group
	data := make([]byte, 100)
	allocs := testing.AllocsPerRun(2000, func() {
		if _, err := w.Enqueue(data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("Enqueue allocates %.1f times per call, want at most 1 (the Pending)", allocs)
	}
	gate.passThrough()
	gate.release <- nil
}

func TestRejectsOversizedEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 1 GiB of address space")
	}
	w, _ := openWAL(t, t.TempDir(), 1<<20)
	// Fresh zero pages from the OS: the allocation is not touched, because
	// Enqueue checks the length before it reads a byte.
	huge := make([]byte, MaxEntrySize+1)
	if _, err := w.Enqueue(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Enqueue(%d bytes): %v, want ErrTooLarge", len(huge), err)
	}
}

func TestOpenRemovesStalePreallocation(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 4096)
	if _, err := w.Append(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	stale := filepath.Join(dir, segmentName(7)+tmpExt)
	if err := os.WriteFile(stale, []byte("half-filled"), 0o644); err != nil {
		t.Fatal(err)
	}
	w2, rep := openWAL(t, dir, 4096)
	if rep.Segments != 1 || rep.Entries != 1 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale %s survived Open: %v", stale, err)
	}
	w2.Close()
	ents, _ := os.ReadDir(dir)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{segmentName(1), lockName}; !slices.Equal(names, want) {
		t.Fatalf("directory after Close holds %v, want %v", names, want)
	}
}

// runtimeYield lets other goroutines run while a test polls a condition it
// cannot be notified about.
func runtimeYield() { runtime.Gosched() }

// TestRotationIntoPartlyFilledSegment stops the background zero-fill early,
// as a rotation does when the active segment fills faster than the next one
// is prepared, and checks the log writes past the fill and recovers it.
func TestRotationIntoPartlyFilledSegment(t *testing.T) {
	dir := t.TempDir()
	const segSize = 8 << 20
	w, _ := openWAL(t, dir, segSize)
	// The writer only touches w.next inside a commit, and nothing is
	// enqueued yet; finish may be called again by the rotation.
	p := w.next
	if _, _, err := p.finish(); err != nil {
		t.Fatal(err)
	}
	if p.size >= segSize/4 {
		// The fill got far before it was stopped: cut the file back to a
		// quarter, the state a fill stopped early leaves (the file holds
		// exactly the zeros written so far), so the test never depends on
		// timing and never skips.
		if err := p.f.(osFile).f.Truncate(segSize / 4); err != nil {
			t.Fatal(err)
		}
		p.size = segSize / 4
	}
	small, err := w.Append(context.Background(), []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	big, err := w.Append(context.Background(), payload(2, segSize-10))
	if err != nil {
		t.Fatal(err)
	}
	if big.Segment != 2 {
		t.Fatalf("big entry went to segment %d, want 2", big.Segment)
	}
	if got, err := w.ReadAt(big, nil); err != nil || !bytes.Equal(got, payload(2, segSize-10)) {
		t.Fatalf("ReadAt(%+v) in a segment filled to only %d bytes: %v", big, p.size, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, rep := openWAL(t, dir, segSize)
	if rep.Entries != 2 || rep.TornBytes != 0 {
		t.Fatalf("report %+v, want 2 entries and nothing torn", rep)
	}
	sameEntries(t, replayAll(t, w2), []entry{{small, []byte("first")}, {big, payload(2, segSize-10)}})
}

// TestZeroFillUsesOnlyIdleTime checks the filler writes nothing while the
// writer is busy and fills the whole segment once it is idle.
func TestZeroFillUsesOnlyIdleTime(t *testing.T) {
	const segSize = 1 << 20
	w := &WAL{dir: t.TempDir(), segSize: segSize, fs: OSFS{}}

	busy := newIdleGate() // never idle
	w.prepare(5, busy)
	f, size, err := w.next.finish()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if size != 0 {
		t.Fatalf("filled %d bytes while the writer was busy", size)
	}

	idle := newIdleGate()
	w.prepare(6, idle)
	idle.set(true)
	<-w.next.done // not stopped: returns only when the fill is complete
	f, size, err = w.next.finish()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsize, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	if size != segSize || fsize != segSize {
		t.Fatalf("idle writer: filled %d bytes, file has %d, want %d", size, fsize, segSize)
	}
}

// WaitWritten returns once the entry is in the segment file, while its
// fdatasync is still held, and the bytes are there for a reader of the
// file; Wait still waits for the fdatasync.
func TestWaitWrittenReturnsBeforeSync(t *testing.T) {
	dir := t.TempDir()
	w, gate := openGated(t, dir, 1<<20)
	for _, parked := range []bool{false, true} {
		data := []byte(fmt.Sprintf("written, not synced (parked %v)", parked))
		var p *Pending
		var err error
		if parked {
			p, err = w.EnqueueForWait(data) // left to its waiter: WaitWritten must hand it over
		} else {
			p, err = w.Enqueue(data)
		}
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		written := make(chan error, 1)
		go func() { written <- p.WaitWritten(ctx) }()
		<-gate.entered // the writer is inside the fdatasync and stays there
		if err := <-written; err != nil {
			t.Fatalf("WaitWritten while the fdatasync is held: %v", err)
		}
		select {
		case <-p.Done():
			t.Fatal("Done closed while the fdatasync is held")
		default:
		}
		raw, err := os.ReadFile(segPath(dir, p.Pos().Segment))
		if err != nil {
			t.Fatal(err)
		}
		end := p.Pos().Offset + int64(p.Pos().Len)
		if got := raw[p.Pos().Offset:end]; string(got) != string(data) {
			t.Fatalf("segment file holds %q where WaitWritten's entry goes, want %q", got, data)
		}
		gate.release <- nil
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// A failed write or fdatasync reaches WaitWritten of entries that were
// not written yet, and WaitWritten honours its ctx.
func TestWaitWrittenFailureAndContext(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	first, err := w.Enqueue([]byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	queued, err := w.Enqueue([]byte("queued behind a failing fdatasync"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := queued.WaitWritten(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitWritten with a cancelled ctx on an unwritten entry: %v, want context.Canceled", err)
	}
	gate.release <- syscall.EIO
	// queued was never written: only the failure ends its WaitWritten.
	if err := queued.WaitWritten(context.Background()); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitWritten of an entry queued behind a failed fdatasync: %v, want ErrFailed wrapping EIO", err)
	}
	// first was written; once its failure is known, WaitWritten reports it.
	if err := first.Wait(context.Background()); !errors.Is(err, ErrFailed) {
		t.Fatalf("Wait: %v, want ErrFailed", err)
	}
	if err := first.WaitWritten(context.Background()); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitWritten after its fdatasync failed: %v, want ErrFailed wrapping EIO", err)
	}
}
