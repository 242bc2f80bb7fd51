package wal

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// Tests of group commit pipelining: the writer fdatasyncs written groups
// without the writer token (syncWritten), so a WaitWritten caller (a
// follower with --replica-ack write) writes the next group while that
// fdatasync runs. The syncGate holds the fdatasync deterministically.

// waitCtx is a generous bound for a call that must not block on a held
// fdatasync: on a loaded machine it returns in microseconds, and if it
// blocks the test fails at the bound rather than hanging.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closeGated closes w, releasing any fdatasync the gate still holds (a
// test that failed midway) so Close cannot hang on it.
func closeGated(w *WAL, gate *syncGate) {
	gate.passThrough()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-gate.entered:
			case gate.release <- nil:
			case <-stop:
				return
			}
		}
	}()
	w.Close()
	close(stop)
}

func groupDone(g *group) bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// A write completes while the fdatasync of the previous group is held,
// neither group is durable (Done, ReadAt) before its own fdatasync
// returns, and the second fdatasync covers the second write. Before the
// writer gave its token back for the fdatasync, the second WaitWritten
// waited for the first fdatasync (it fails here at waitCtx's bound).
func TestWriteOverlapsSync(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	defer closeGated(w, gate)
	a, err := w.EnqueueLazy(payload(1, 100)) // LazySync 0: fdatasync'ed right after its write
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitWritten(waitCtx(t)); err != nil {
		t.Fatalf("WaitWritten(a): %v", err)
	}
	if n := <-gate.entered; n != 1 {
		t.Fatalf("fdatasync call %d held, want 1", n)
	}

	// The writer is inside a's fdatasync.
	b, err := w.EnqueueLazy(payload(2, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitWritten(waitCtx(t)); err != nil {
		t.Fatalf("WaitWritten(b) while a's fdatasync is held: %v", err)
	}
	if groupDone(a.g) || groupDone(b.g) {
		t.Fatal("an entry is done while its fdatasync is held")
	}
	for _, p := range []*Pending{a, b} {
		if _, err := w.ReadAt(p.Pos(), nil); !errors.Is(err, ErrNotDurable) {
			t.Fatalf("ReadAt(%+v) before its fdatasync: %v, want ErrNotDurable", p.Pos(), err)
		}
	}

	gate.release <- nil // a's fdatasync returns; it started before b's write
	if err := a.Wait(waitCtx(t)); err != nil {
		t.Fatalf("Wait(a): %v", err)
	}
	if _, err := w.ReadAt(a.Pos(), nil); err != nil {
		t.Fatalf("ReadAt(a) after its fdatasync: %v", err)
	}
	if n := <-gate.entered; n != 2 {
		t.Fatalf("fdatasync call %d held, want 2 (b's)", n)
	}
	if groupDone(b.g) {
		t.Fatal("b done before the fdatasync that covers it returned")
	}
	if _, err := w.ReadAt(b.Pos(), nil); !errors.Is(err, ErrNotDurable) {
		t.Fatalf("ReadAt(b) before its fdatasync: %v, want ErrNotDurable", err)
	}
	gate.release <- nil
	if err := b.Wait(waitCtx(t)); err != nil {
		t.Fatalf("Wait(b): %v", err)
	}
	got, err := w.ReadAt(b.Pos(), nil)
	if err != nil || string(got) != string(payload(2, 100)) {
		t.Fatalf("ReadAt(b) = %q, %v", got, err)
	}
	st := w.Stats()
	if st.Entries != 2 || st.Groups != 2 || st.LazyGroups != 0 || st.OverlappedGroups != 1 || st.Syncs != 2 {
		t.Fatalf("stats %+v: want 2 entries, 2 groups (1 written during an fdatasync), 0 lazy groups, 2 fdatasyncs", st)
	}
}

// A failed fdatasync fails the group written during it as well, though
// that group's WaitWritten had returned, and no fdatasync runs after it:
// a later one could report success for pages the failed one lost.
func TestSyncFailureFailsGroupWrittenDuringIt(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	defer closeGated(w, gate)
	a, err := w.EnqueueLazy(payload(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitWritten(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	b, err := w.EnqueueLazy(payload(2, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitWritten(waitCtx(t)); err != nil {
		t.Fatalf("WaitWritten(b) while a's fdatasync is held: %v", err)
	}
	gate.release <- syscall.EIO
	for name, p := range map[string]*Pending{"a": a, "b": b} {
		if err := p.Wait(waitCtx(t)); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("Wait(%s) = %v, want ErrFailed wrapping EIO", name, err)
		}
	}
	if _, err := w.Enqueue(payload(3, 100)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Enqueue after the failure: %v, want ErrFailed", err)
	}
	if n := gate.calls(); n != 1 {
		t.Fatalf("%d fdatasync calls, want 1: none after the failed one", n)
	}
}

// Ordinary entries enqueued while the writer is in an fdatasync are not
// parked for their waiters: they wait for it and form one group, as
// before pipelining, rather than groups of one each behind it.
func TestOrdinaryEntriesGroupBehindSync(t *testing.T) {
	w, gate := openGated(t, t.TempDir(), 1<<20)
	defer closeGated(w, gate)
	first, err := w.Enqueue(payload(1, 100)) // not parked: the writer commits it
	if err != nil {
		t.Fatal(err)
	}
	<-gate.entered
	errc := make(chan error, 2)
	for i := range 2 {
		p, err := w.EnqueueForWait(payload(uint64(2+i), 100))
		if err != nil {
			t.Fatal(err)
		}
		go func() { errc <- p.Wait(waitCtx(t)) }()
	}
	gate.release <- nil
	if err := first.Wait(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if n := <-gate.entered; n != 2 {
		t.Fatalf("fdatasync call %d, want 2", n)
	}
	gate.release <- nil
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	st := w.Stats()
	if st.Groups != 2 || st.GroupSizes[0] != 1 || st.GroupSizes[1] != 1 || st.OverlappedGroups != 0 || st.Syncs != 2 {
		t.Fatalf("stats %+v: want a group of 1 and one of 2, 2 fdatasyncs", st)
	}
}
