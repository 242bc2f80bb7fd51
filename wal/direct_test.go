package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// commitsInCaller opens a WAL whose fdatasync hook counts the syncs run by
// a waiter's own commit (commitParked) rather than by the writer goroutine.
func commitsInCaller(t *testing.T, dir string, segSize int64, inner func(File) error) (*WAL, *atomic.Int64) {
	t.Helper()
	var direct atomic.Int64
	w, _ := openWithSync(t, dir, segSize, func(f File) error {
		if inCommitParked() {
			direct.Add(1)
		}
		return inner(f)
	})
	return w, &direct
}

// inCommitParked: the calling goroutine is inside commitParked.
func inCommitParked() bool {
	buf := make([]byte, 16<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte(").commitParked("))
}

func TestLoneAppendCommitsInCaller(t *testing.T) {
	dir := t.TempDir()
	w, direct := commitsInCaller(t, dir, 1<<20, fdatasync)
	var want []entry
	for i := range 20 {
		data := payload(uint64(i), 100+i)
		pos, err := w.Append(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		// Durable when Append returns: readable at once.
		got, err := w.ReadAt(pos, nil)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadAt(%+v) right after Append: %v", pos, err)
		}
		want = append(want, entry{pos, data})
	}
	for i := range 5 {
		data := payload(uint64(100+i), 50)
		p, err := w.EnqueueForWait(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, err := w.ReadAt(p.Pos(), nil); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadAt(%+v) right after Wait: %v", p.Pos(), err)
		}
		want = append(want, entry{p.Pos(), data})
	}
	st := w.Stats()
	if n := direct.Load(); n != 25 || st.WaiterGroups != 25 || st.Groups != 25 || st.GroupSizes[0] != 25 {
		t.Fatalf("25 lone appends: %d committed by the caller, %d groups (sizes %v); want all 25 in the caller, one entry each",
			n, st.Groups, st.GroupSizes)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _ := openWAL(t, dir, 1<<20)
	sameEntries(t, replayAll(t, w2), want)
}

// TestDirectAndWriterCommitsKeepOrder races waiters that commit their own
// entries against the writer goroutine, through every way to append, with
// rotations among them, and checks every entry sits where Enqueue put it,
// in Enqueue order, readable and replayed after a restart.
// Few appenders often find the log idle and commit their own entries
// while the others queue for the writer; many keep the writer busy.
func TestDirectAndWriterCommitsKeepOrder(t *testing.T) {
	for _, goroutines := range []int{3, 32} {
		t.Run(fmt.Sprintf("goroutines=%d", goroutines), func(t *testing.T) {
			testCommitsKeepOrder(t, goroutines, 960/goroutines)
		})
	}
}

func testCommitsKeepOrder(t *testing.T, goroutines, each int) {
	dir := t.TempDir()
	const segSize = 64 << 10
	w, direct := commitsInCaller(t, dir, segSize, fdatasync)
	// A lone append first: nothing else runs, so its waiter commits it,
	// and the race below starts with the token just handed back.
	first := payload(1<<32, 100)
	firstPos, err := w.Append(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if direct.Load() != 1 {
		t.Fatalf("the lone first append: %d commits in the caller, want 1", direct.Load())
	}
	var mu sync.Mutex
	all := []entry{{firstPos, first}}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			var mine []entry
			for i := range each {
				seq := uint64(g*each + i)
				data := payload(seq, 20+int(seq%700))
				var pos Pos
				var err error
				switch (g + i) % 3 {
				case 0:
					pos, err = w.Append(context.Background(), data)
				case 1:
					var p *Pending
					if p, err = w.EnqueueForWait(data); err == nil {
						pos, err = p.Pos(), p.Wait(context.Background())
					}
				case 2:
					var p *Pending
					if p, err = w.Enqueue(data); err == nil {
						pos, err = p.Pos(), p.Wait(context.Background())
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				if got, err := w.ReadAt(pos, nil); err != nil || !bytes.Equal(got, data) {
					t.Errorf("ReadAt(%+v) after its append returned: %v", pos, err)
					return
				}
				if n := len(mine); n > 0 && !posBefore(mine[n-1].pos, pos) {
					t.Errorf("goroutine %d: entry at %+v after one at %+v", g, pos, mine[n-1].pos)
				}
				mine = append(mine, entry{pos, data})
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// How many of the racing appends found the log idle depends on the
	// scheduling (on a busy machine possibly none): logged below, not
	// asserted.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2, _ := openWAL(t, dir, segSize)
	got := replayAll(t, w2)
	if len(got) != 1+goroutines*each {
		t.Fatalf("replayed %d entries, want %d", len(got), 1+goroutines*each)
	}
	byPos := make(map[Pos][]byte, len(all))
	for _, e := range all {
		byPos[e.pos] = e.data
	}
	for i, e := range got {
		if !bytes.Equal(byPos[e.pos], e.data) {
			t.Fatalf("replayed entry %d at %+v is not what was appended there", i, e.pos)
		}
		if i > 0 && !posBefore(got[i-1].pos, e.pos) {
			t.Fatalf("replayed entry %d at %+v after one at %+v", i, e.pos, got[i-1].pos)
		}
	}
	if segs := got[len(got)-1].pos.Segment; segs < 3 {
		t.Fatalf("the log reached only segment %d: the test meant to rotate under the race", segs)
	}
	st := w.Stats()
	if st.WaiterGroups != uint64(direct.Load()) {
		t.Fatalf("Stats.WaiterGroups = %d, but %d syncs ran in a waiter", st.WaiterGroups, direct.Load())
	}
	t.Logf("%d of %d groups committed by their waiter", st.WaiterGroups, st.Groups)
}

func posBefore(a, b Pos) bool {
	return a.Segment < b.Segment || (a.Segment == b.Segment && a.Offset < b.Offset)
}

// TestDirectCommitFailureFailsForGood fails the fdatasync of a waiter's own
// commit while other callers queue behind it, and checks everyone is woken
// with the error, the writer goroutine exits, fdatasync is not retried and
// the failure is sticky.
func TestDirectCommitFailureFailsForGood(t *testing.T) {
	dir := t.TempDir()
	gate := newSyncGate()
	w, direct := commitsInCaller(t, dir, 1<<20, gate.sync)
	errs := make(chan error, 10)
	go func() {
		_, err := w.Append(context.Background(), []byte("doomed, committed by its caller"))
		errs <- err
	}()
	<-gate.entered
	if direct.Load() != 1 {
		t.Fatal("the lone Append is not committing in its own goroutine")
	}
	// Behind the held commit: entries for the writer goroutine, by
	// every way to enqueue, some waited for, some not.
	queued, err := w.Enqueue([]byte("queued"))
	if err != nil {
		t.Fatal(err)
	}
	forWait, err := w.EnqueueForWait([]byte("queued for a waiter"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		go func() {
			_, err := w.Append(context.Background(), payload(uint64(i), 10))
			errs <- err
		}()
	}
	for w.Stats().QueuedBytes < 2*headerSize+int64(len("queued")+len("queued for a waiter"))+4*(headerSize+10) {
		runtimeYield()
	}
	gate.release <- syscall.EIO
	wantEIO := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("%s: %v, want ErrFailed wrapping EIO", what, err)
		}
	}
	for range 5 {
		wantEIO("Append", <-errs)
	}
	wantEIO("Wait of an Enqueue'd entry", queued.Wait(context.Background()))
	wantEIO("Wait of an EnqueueForWait'ed entry", forWait.Wait(context.Background()))
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatal("the writer goroutine did not exit after a waiter's commit failed")
	}
	_, err = w.Append(context.Background(), []byte("later"))
	wantEIO("Append after the failure", err)
	_, err = w.EnqueueForWait([]byte("later"))
	wantEIO("EnqueueForWait after the failure", err)
	wantEIO("Close", w.Close())
	if c := gate.calls(); c != 1 {
		t.Fatalf("fdatasync called %d times, want 1: a failed fdatasync must never be retried", c)
	}
}

// TestParkedEntryIsWrittenWithoutItsWait checks that an entry left for its
// waiter is still written when the waiter never comes: by the writer once
// another entry follows it, once Done is asked for, or at Close.
func TestParkedEntryIsWrittenWithoutItsWait(t *testing.T) {
	parkOne := func(t *testing.T, w *WAL, data string) *Pending {
		t.Helper()
		p, err := w.EnqueueForWait([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if w.parked.Load() != p.g {
			t.Fatal("a lone EnqueueForWait on an idle log was not left to its waiter")
		}
		return p
	}
	t.Run("another entry follows", func(t *testing.T) {
		w, gate := openGated(t, t.TempDir(), 1<<20)
		first := parkOne(t, w, "first")
		second, err := w.EnqueueForWait([]byte("second"))
		if err != nil {
			t.Fatal(err)
		}
		<-gate.entered // nobody waits yet: the writer goroutine commits both
		gate.passThrough()
		gate.release <- nil
		<-first.g.done // not Done(): that would hand the entry over itself
		for _, p := range []*Pending{first, second} {
			if err := p.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if st := w.Stats(); st.Groups != 1 || st.GroupSizes[1] != 1 {
			t.Fatalf("groups %d, sizes %v: want both entries in one group", st.Groups, st.GroupSizes)
		}
	})
	t.Run("Done", func(t *testing.T) {
		w, _ := openWAL(t, t.TempDir(), 1<<20)
		p := parkOne(t, w, "selected on")
		<-p.Done()
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Close", func(t *testing.T) {
		dir := t.TempDir()
		w, _ := openWAL(t, dir, 1<<20)
		p := parkOne(t, w, "dropped")
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		w2, _ := openWAL(t, dir, 1<<20)
		if got := replayAll(t, w2); len(got) != 1 || string(got[0].data) != "dropped" {
			t.Fatalf("log after Close holds %d entries", len(got))
		}
	})
}

// TestCancelledWaitLeavesParkedEntryToWriter: a Wait whose ctx has already
// ended returns at once, and the writer goroutine still writes the entry.
func TestCancelledWaitLeavesParkedEntryToWriter(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	p, err := w.EnqueueForWait([]byte("waiter gave up"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended ctx: %v, want context.Canceled", err)
	}
	<-gate.entered // the Wait returned: the writer goroutine commits it
	gate.passThrough()
	gate.release <- nil
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestParkedEntryDoesNotBlockBackpressure: one goroutine leaves a large
// entry for its own later Wait, then enqueues more than the queue holds.
// The writer must take the parked entry, or the second Enqueue would wait
// for space forever.
func TestParkedEntryDoesNotBlockBackpressure(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 40 MiB")
	}
	w, _ := openWAL(t, t.TempDir(), 64<<20)
	big := make([]byte, 20<<20)
	done := make(chan error, 1)
	go func() {
		first, err := w.EnqueueForWait(big)
		if err != nil {
			done <- err
			return
		}
		second, err := w.EnqueueForWait(big) // 40 MiB queued: over the limit
		if err != nil {
			done <- err
			return
		}
		done <- errors.Join(first.Wait(context.Background()), second.Wait(context.Background()))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("an Enqueue behind its own goroutine's parked entry never got queue space")
	}
}

// TestLoneAppendAllocations: committing in the caller allocates nothing
// beyond the group every commit has.
func TestLoneAppendAllocations(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 64<<20)
	data := make([]byte, 100)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := w.Append(context.Background(), data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("a lone Append allocates %.1f times, want at most 2 (its group and channel)", allocs)
	}
}

// TestLoneEnqueueForWaitAllocations: the stream service's way to append
// (EnqueueForWait, then Wait) allocates no more than Append: a group's
// first entry's Pending is the group's own. It used to be a third
// allocation per append.
func TestLoneEnqueueForWaitAllocations(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 64<<20)
	data := make([]byte, 100)
	var last Pos
	allocs := testing.AllocsPerRun(200, func() {
		p, err := w.EnqueueForWait(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p.Pos().Len != int32(len(data)) || p.Pos() == last {
			t.Fatalf("entry at %+v after one at %+v", p.Pos(), last)
		}
		last = p.Pos()
	})
	if allocs > 2 {
		t.Fatalf("a lone EnqueueForWait and Wait allocate %.1f times, want at most 2 (its group and channel)", allocs)
	}
}

// TestGroupPendings: the entries of one group each get their own Pending
// with their own position, the first one's being the group's.
func TestGroupPendings(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	if _, err := w.Enqueue([]byte("leader")); err != nil {
		t.Fatal(err)
	}
	<-gate.entered // hold the writer: the entries below form one group
	var ps []*Pending
	for i := 0; i < 3; i++ {
		p, err := w.EnqueueForWait([]byte{byte('a' + i)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if ps[0] != &ps[0].g.first || ps[1] == &ps[1].g.first || ps[0].g != ps[2].g {
		t.Fatalf("pendings %p %p %p of groups %p %p %p", ps[0], ps[1], ps[2], ps[0].g, ps[1].g, ps[2].g)
	}
	for i, p := range ps[1:] {
		if p.Pos().Offset <= ps[i].Pos().Offset {
			t.Fatalf("entry %d at %+v after %+v", i+1, p.Pos(), ps[i].Pos())
		}
	}
	gate.passThrough()
	gate.release <- nil
	for i, p := range ps {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := w.ReadAt(p.Pos(), nil)
		if err != nil || string(got) != string(rune('a'+i)) {
			t.Fatalf("entry %d: %q, %v", i, got, err)
		}
	}
}
