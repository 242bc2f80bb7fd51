package wal_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/wal"
	"github.com/PicoMQ/picomq/wal/faultfs"
)

// Tests of Options.LazySync and EnqueueLazy: a lazy entry is written and
// its WaitWritten returns without an fdatasync of its own; the fdatasync
// comes at most LazySync later or with the next ordinary commit, and
// until then a power cut can take it (docs/durability.md, replica-sync).

func openLazy(t *testing.T, dir string, fs *faultfs.FS, lazy time.Duration) *wal.WAL {
	t.Helper()
	w, _, err := wal.Open(wal.Options{Dir: dir, SegmentSize: 64 << 10, Logger: quiet, FS: fs, LazySync: lazy})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return w
}

func replayed(t *testing.T, dir string) [][]byte {
	t.Helper()
	w := openLazy(t, dir, faultfs.New(), 0)
	defer w.Close()
	var got [][]byte
	if err := w.Replay(func(_ wal.Pos, data []byte) error {
		got = append(got, bytes.Clone(data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// With a LazySync far away, lazy entries are written and not fdatasync'ed
// (no segment fdatasync, not readable, lost by a power cut), until an
// ordinary entry's commit makes them durable with it.
func TestLazyEntriesShareTheNextCommit(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	w := openLazy(t, dir, fs, time.Hour)
	defer w.Close()
	syncs0 := w.Stats().Syncs
	var lazy []*wal.Pending
	for i := range 3 {
		p, err := w.EnqueueLazy(record(uint64(i), 150))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitWritten(bounded(t)); err != nil {
			t.Fatalf("WaitWritten: %v", err)
		}
		lazy = append(lazy, p)
	}
	if n := w.Stats().Syncs - syncs0; n != 0 {
		t.Fatalf("%d fdatasyncs for 3 lazy entries, want none before LazySync", n)
	}
	st := w.Stats()
	if st.LazyGroups != 3 || st.Entries != 0 {
		t.Fatalf("stats: %d lazy groups, %d durable entries; want 3 and 0", st.LazyGroups, st.Entries)
	}
	for _, p := range lazy {
		if isClosed(p.Done()) {
			t.Fatal("a lazy entry's Done closed before any fdatasync")
		}
		if _, err := w.ReadAt(p.Pos(), nil); !errors.Is(err, wal.ErrNotDurable) {
			t.Fatalf("ReadAt of an unsynced lazy entry: %v, want ErrNotDurable", err)
		}
	}
	if _, err := w.Append(bounded(t), record(3, 150)); err != nil {
		t.Fatal(err)
	}
	for _, p := range lazy {
		if !isClosed(p.Done()) {
			t.Fatal("the ordinary commit behind the lazy entries did not complete them")
		}
		if err := p.Wait(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.ReadAt(p.Pos(), nil); err != nil {
			t.Fatalf("ReadAt after the commit: %v", err)
		}
	}
	if st := w.Stats(); st.Entries != 4 || st.Groups != 4 {
		t.Fatalf("stats after the commit: %+v; want 4 entries in 4 groups", st)
	}
}

// The lazy fdatasync happens by itself once LazySync has passed: the
// entry survives a power cut after its Done closed, and that came after
// at least LazySync.
func TestLazySyncIsBounded(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	const lazySync = 30 * time.Millisecond
	w := openLazy(t, dir, fs, lazySync)
	syncs0 := w.Stats().Syncs
	p, err := w.EnqueueLazy(record(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitWritten(bounded(t)); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	within(t, p.Done(), "the lazy entry's fdatasync after LazySync")
	if err := p.Wait(bounded(t)); err != nil {
		t.Fatalf("Wait of a lazy entry: %v", err)
	}
	if d := time.Since(written); d < lazySync/2 {
		t.Fatalf("the lazy entry was durable %s after its write, before LazySync %s: not deferred", d, lazySync)
	}
	if n := w.Stats().Syncs - syncs0; n != 1 {
		t.Fatalf("%d fdatasyncs for one lazy entry, want 1", n)
	}
	if err := fs.Crash(nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if got := replayed(t, dir); len(got) != 1 || !bytes.Equal(got[0], record(1, 100)) {
		t.Fatalf("after a power cut past LazySync the log holds %d entries, want the lazy one", len(got))
	}
}

// Before LazySync a power cut loses a written lazy entry (that is the
// contract's price), and Close fdatasyncs whatever is still unsynced.
func TestLazyEntryPowerCutAndClose(t *testing.T) {
	t.Run("power cut", func(t *testing.T) {
		dir := t.TempDir()
		fs := faultfs.New()
		w := openLazy(t, dir, fs, time.Hour)
		if _, err := w.Append(bounded(t), record(1, 100)); err != nil {
			t.Fatal(err)
		}
		p, err := w.EnqueueLazy(record(2, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitWritten(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if err := fs.Crash(nil); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if got := replayed(t, dir); len(got) != 1 || !bytes.Equal(got[0], record(1, 100)) {
			t.Fatalf("after a power cut before LazySync the log holds %d entries, want only the ordinary one", len(got))
		}
	})
	t.Run("close", func(t *testing.T) {
		dir := t.TempDir()
		fs := faultfs.New()
		w := openLazy(t, dir, fs, time.Hour)
		p, err := w.EnqueueLazy(record(2, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitWritten(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(bounded(t)); err != nil {
			t.Fatalf("Wait after Close: %v", err)
		}
		if err := fs.Crash(nil); err != nil {
			t.Fatal(err)
		}
		if got := replayed(t, dir); len(got) != 1 {
			t.Fatalf("after Close and a power cut the log holds %d entries, want the lazy one", len(got))
		}
	})
}

// A Wait on a lazy entry does not wait out LazySync: it has the writer
// fdatasync the unsynced lazy groups at once (a takeover reading a
// follower's copy waits so).
func TestLazyWaitSyncsNow(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	w := openLazy(t, dir, fs, time.Hour)
	var ps []*wal.Pending
	for i := range 3 {
		p, err := w.EnqueueLazy(record(uint64(i), 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitWritten(bounded(t)); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := ps[1].Wait(bounded(t)); err != nil {
		t.Fatalf("Wait of a lazy entry with LazySync an hour away: %v", err)
	}
	for _, p := range ps {
		if _, err := w.ReadAt(p.Pos(), nil); err != nil {
			t.Fatalf("ReadAt after the Wait: %v", err)
		}
	}
	if err := fs.Crash(nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if got := replayed(t, dir); len(got) != 3 {
		t.Fatalf("after the Wait and a power cut the log holds %d entries, want 3", len(got))
	}
}

// A failed lazy fdatasync fails the log: the lazy entries' Wait reports
// it, as any entry's.
func TestLazySyncFailure(t *testing.T) {
	fs := faultfs.New()
	w := openLazy(t, t.TempDir(), fs, 20*time.Millisecond)
	defer w.Close()
	fs.Fail(faultfs.OpSync, syscall.EIO)
	p, err := w.EnqueueLazy(record(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitWritten(bounded(t)); err != nil {
		t.Fatalf("WaitWritten (the write succeeds): %v", err)
	}
	if err := p.Wait(bounded(t)); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Wait of a lazy entry whose fdatasync failed: %v, want ErrFailed wrapping EIO", err)
	}
	if _, err := w.EnqueueLazy([]byte("later")); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("EnqueueLazy after the failure: %v, want ErrFailed", err)
	}
}

// Many concurrent lazy writers with ordinary appends mixed in: every
// entry is durable in order at the end and every Wait returns (the
// writer-goroutine path of lazy groups, not only the parked one).
func TestLazyAndOrdinaryConcurrent(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	w := openLazy(t, dir, fs, 5*time.Millisecond)
	const goroutines, each = 8, 50
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			for i := range each {
				seq := uint64(g*each + i)
				if g%4 == 0 {
					if _, err := w.Append(bounded(t), record(seq, 64)); err != nil {
						errs <- err
						return
					}
					continue
				}
				p, err := w.EnqueueLazy(record(seq, 64))
				if err == nil {
					err = p.WaitWritten(bounded(t))
				}
				if err == nil {
					err = p.Wait(bounded(t))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range goroutines {
		if err := within(t, errs, "a writer goroutine"); err != nil {
			t.Fatal(err)
		}
	}
	st := w.Stats()
	if st.Entries != goroutines*each {
		t.Fatalf("%d durable entries, want %d", st.Entries, goroutines*each)
	}
	if err := fs.Crash(nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if got := replayed(t, dir); len(got) != goroutines*each {
		t.Fatalf("replayed %d entries after a power cut, want all %d (every Wait returned)", len(got), goroutines*each)
	}
}
