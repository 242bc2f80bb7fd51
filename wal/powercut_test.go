package wal_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/wal"
	"github.com/PicoMQ/picomq/wal/faultfs"
)

// These tests run the log over faultfs, the fault-injecting filesystem, and
// check the behaviour docs/durability.md promises for each fault. They use
// the log's default sync path (wal.Open, not a test hook), so a WAL that
// stopped calling fdatasync fails TestPowerCutLosesNothingAcknowledged.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openFS(t *testing.T, dir string, fs *faultfs.FS, segSize int64) (*wal.WAL, wal.RecoveryReport) {
	t.Helper()
	w, rep, err := wal.Open(wal.Options{Dir: dir, SegmentSize: segSize, Logger: quiet, FS: fs})
	if err != nil {
		t.Fatalf("Open over faultfs: %v", err)
	}
	return w, rep
}

// record is a self-describing payload: its sequence number, then bytes
// derived from it, so replay can tell a whole record from a torn or
// foreign one.
func record(seq uint64, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.LittleEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq*31+uint64(i)) | 1
	}
	return b
}

// waitBound is how long a power-cut test waits for any one event of the
// log before failing with what it waited for: a broken log fails the test
// in seconds with a clear message, never by the package timeout.
const waitBound = 20 * time.Second

// within fails t with what unless ch delivers within waitBound.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
		t.Fatalf("waited %s for %s", waitBound, what)
		panic("unreachable")
	}
}

// bounded is a context that ends after waitBound, for calls into the log.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	t.Cleanup(cancel)
	return ctx
}

// done turns a wait into a channel for within.
func done(wait func()) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wait(); close(ch) }()
	return ch
}

type acked struct {
	pos  wal.Pos
	data []byte
}

// TestPowerCutLosesNothingAcknowledged appends from several goroutines
// through segment rotations, cuts the power at a random moment (sometimes
// keeping a torn prefix of what was not synced), reopens, and checks that
// every acknowledged entry is there with its bytes at its position and that
// everything replayed is a whole entry some appender wrote.
func TestPowerCutLosesNothingAcknowledged(t *testing.T) {
	for round := range 8 {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(round), 19))
			dir := t.TempDir()
			fs := faultfs.New()
			w, _ := openFS(t, dir, fs, 64<<10)

			var (
				mu      sync.Mutex
				ack     []acked
				written = map[string]bool{}
			)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := uint64(0); ctx.Err() == nil && i < 100000; i++ {
						data := record(uint64(g)<<32|i, 100+int(i%7)*300)
						mu.Lock()
						written[string(data)] = true
						mu.Unlock()
						pos, err := w.Append(ctx, data)
						if err != nil {
							return // the power is off
						}
						mu.Lock()
						ack = append(ack, acked{pos, data})
						mu.Unlock()
					}
				}()
			}
			// Cut the power once a random number of appends are
			// acknowledged: by count, never by sleeping.
			target := 100 + rng.IntN(600)
			deadline := time.Now().Add(time.Minute)
			for {
				mu.Lock()
				n := len(ack)
				mu.Unlock()
				if n >= target {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("only %d appends acknowledged in a minute", n)
				}
				time.Sleep(time.Millisecond)
			}
			var torn faultfs.Tear
			if round%2 == 1 {
				torn = faultfs.TearRandomly(rng)
			}
			mu.Lock()
			ackedAtCut := len(ack)
			mu.Unlock()
			if err := fs.Crash(torn); err != nil {
				t.Fatal(err)
			}
			cancel()
			within(t, done(wg.Wait), "the appenders to stop after the power cut")
			within(t, done(func() { _ = w.Close() }), "the log to close after the power cut") // fails: the power is off

			w2, rep := openFS(t, dir, faultfs.New(), 64<<10)
			defer w2.Close()
			got := map[wal.Pos][]byte{}
			if err := w2.Replay(func(pos wal.Pos, data []byte) error {
				if !written[string(data)] {
					return fmt.Errorf("replayed %d bytes at %+v that no appender wrote", len(data), pos)
				}
				got[pos] = bytes.Clone(data)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for _, a := range ack {
				if !bytes.Equal(got[a.pos], a.data) {
					t.Fatalf("acknowledged entry at %+v lost after the power cut (%d acknowledged, %d replayed, report %+v)",
						a.pos, len(ack), len(got), rep)
				}
			}
			if len(ack) < ackedAtCut || ackedAtCut == 0 {
				t.Fatalf("%d acknowledged at the cut", ackedAtCut)
			}
			// The log continues where recovery left it.
			if _, err := w2.Append(bounded(t), []byte("after")); err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
			t.Logf("%d acknowledged, %d replayed, torn %d bytes", len(ack), len(got), rep.TornBytes)
		})
	}
}

// TestPowerCutTearsTheUnsyncedTail holds the writer between its write and
// its fdatasync, cuts the power keeping part of that write, and checks that
// recovery truncates the torn record, reports it, and keeps the earlier,
// acknowledged one.
func TestPowerCutTearsTheUnsyncedTail(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	w, _ := openFS(t, dir, fs, 1<<20)
	first := record(1, 500)
	pos, err := w.Append(bounded(t), first)
	if err != nil {
		t.Fatal(err)
	}
	held, release := fs.HoldSegmentSyncs(syscall.EIO)
	p, err := w.Enqueue(record(2, 4000))
	if err != nil {
		t.Fatal(err)
	}
	within(t, held, "the writer's fdatasync of the entry it wrote (a log that acknowledges without fdatasync never calls it)") // written, not synced
	// Keep the first 1000 bytes of the unsynced write: a torn record.
	if err := fs.Crash(func(path string, sizes []int) (int, int) {
		if !strings.HasSuffix(path, ".wal") {
			return 0, 0
		}
		return 0, min(1000, sizes[0])
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := p.Wait(bounded(t)); err == nil {
		t.Fatal("an entry whose fdatasync failed was acknowledged")
	} else if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waited %s for the entry whose fdatasync failed to be refused", waitBound)
	}
	within(t, done(func() { _ = w.Close() }), "the failed log to close")

	w2, rep := openFS(t, dir, faultfs.New(), 1<<20)
	defer w2.Close()
	var n int
	if err := w2.Replay(func(got wal.Pos, data []byte) error {
		n++
		if got != pos || !bytes.Equal(data, first) {
			return fmt.Errorf("replayed %+v, want only the acknowledged %+v", got, pos)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("replayed %d entries, want 1", n)
	}
	if rep.TornBytes == 0 || rep.TornSegment != pos.Segment {
		t.Fatalf("report %+v: want the torn tail of segment %d reported", rep, pos.Segment)
	}
}

// TestFaultsFailTheLogForGood injects EIO and ENOSPC into writes and syncs
// (and ENOSPC into preallocation of the next segment) and checks that the
// failure is sticky: the entry is not acknowledged, every later call fails
// with ErrFailed wrapping the cause, fdatasync is never retried, and what
// was acknowledged before survives a restart.
func TestFaultsFailTheLogForGood(t *testing.T) {
	cases := []struct {
		name  string
		op    faultfs.Op
		errno syscall.Errno
		entry int // size of the entry that meets the fault
	}{
		{"sync EIO", faultfs.OpSync, syscall.EIO, 100},
		{"write EIO", faultfs.OpWrite, syscall.EIO, 100},
		{"write ENOSPC", faultfs.OpWrite, syscall.ENOSPC, 100},
		// An entry that does not fit in segment 1 needs segment 2, whose
		// file is preallocated: ENOSPC creating it fails the rotation.
		// The fault is on creating the file, not on writing its zeros:
		// a rotation that comes before the idle-time zero-fill has
		// written anything stops the fill, so a write fault would be
		// met only on a quiet machine.
		{"preallocation ENOSPC", faultfs.OpOpen, syscall.ENOSPC, 40 << 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fs := faultfs.New()
			w, _ := openFS(t, dir, fs, 64<<10)
			before := record(1, 30<<10)
			pos, err := w.Append(bounded(t), before)
			if err != nil {
				t.Fatal(err)
			}
			var calls sync.Map
			fs.SetHook(func(op faultfs.Op, path string) error {
				if op != tc.op {
					return nil
				}
				if op == faultfs.OpSync && !strings.HasSuffix(path, ".wal") {
					return nil
				}
				if tc.name == "preallocation ENOSPC" && !strings.HasSuffix(path, ".tmp") {
					return nil
				}
				n, _ := calls.LoadOrStore(op, new(int))
				*n.(*int)++
				return tc.errno
			})
			// Segment 2's file may be filled already, before the fault;
			// then the second such entry needs segment 3's, which fails.
			for i := range 3 {
				if _, err = w.Append(bounded(t), record(uint64(10+i), tc.entry)); err != nil {
					break
				}
			}
			if !errors.Is(err, wal.ErrFailed) || !errors.Is(err, tc.errno) {
				t.Fatalf("append meeting %s: %v, want ErrFailed wrapping %v", tc.name, err, tc.errno)
			}
			if _, err := w.Enqueue([]byte("later")); !errors.Is(err, wal.ErrFailed) {
				t.Fatalf("Enqueue after the failure: %v, want ErrFailed", err)
			}
			if _, err := w.ReadAt(pos, nil); !errors.Is(err, wal.ErrFailed) {
				t.Fatalf("ReadAt after the failure: %v, want ErrFailed", err)
			}
			if tc.op == faultfs.OpSync {
				if n, _ := calls.Load(faultfs.OpSync); *n.(*int) != 1 {
					t.Fatalf("fdatasync tried %d times after failing; a failed fdatasync must never be retried", *n.(*int))
				}
			}
			_ = w.Close()
			w2, _ := openFS(t, dir, faultfs.New(), 64<<10)
			defer w2.Close()
			found := false
			if err := w2.Replay(func(p wal.Pos, data []byte) error {
				if p == pos && bytes.Equal(data, before) {
					found = true
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !found {
				t.Fatal("the entry acknowledged before the fault is gone after restart")
			}
		})
	}
}

// TestOSFSSyncReachesTheKernel checks that the real filesystem's Sync issues
// fdatasync: on a closed descriptor the syscall fails with EBADF, where a
// no-op would report success. (Power-cut tests run over faultfs, which
// trusts the real Sync; this closes that gap.)
func TestOSFSSyncReachesTheKernel(t *testing.T) {
	f, err := wal.OSFS{}.OpenFile(t.TempDir()+"/f", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err == nil {
		t.Fatal("Sync on a closed file succeeded: OSFS's Sync does not call fdatasync")
	}
}

// TestWaitWrittenIsNotDurable pins down what WaitWritten promises: the
// entry is in the segment file (a process crash keeps it, the page cache
// being the kernel's), not on the disk. A power cut between its write and
// its fdatasync loses it, while the entry whose Wait returned before the
// cut survives; the pending fdatasync then fails the log.
func TestWaitWrittenIsNotDurable(t *testing.T) {
	dir := t.TempDir()
	fs := faultfs.New()
	w, _ := openFS(t, dir, fs, 64<<10)
	durable := record(1, 200)
	if _, err := w.Append(bounded(t), durable); err != nil {
		t.Fatal(err)
	}
	held, release := fs.HoldSegmentSyncs(nil)
	p, err := w.EnqueueForWait(record(2, 200))
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- p.WaitWritten(bounded(t)) }()
	if err := within(t, wrote, "WaitWritten while the fdatasync is held"); err != nil {
		t.Fatalf("WaitWritten: %v", err)
	}
	within(t, held, "the entry's fdatasync to start")
	if err := fs.Crash(nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := p.Wait(bounded(t)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Wait of the written entry after a power cut: %v, want ErrFailed", err)
	}
	_ = w.Close()

	w2, _ := openFS(t, dir, faultfs.New(), 64<<10)
	defer w2.Close()
	var got [][]byte
	if err := w2.Replay(func(_ wal.Pos, data []byte) error {
		got = append(got, bytes.Clone(data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !bytes.Equal(got[0], durable) {
		t.Fatalf("after the power cut the log holds %d entries, want only the one whose Wait returned", len(got))
	}
}

// A WaitWritten caller that writes its parked entry itself reports a
// failed write as the log's failure, and the log stays failed.
func TestWaitWrittenWriteFailure(t *testing.T) {
	fs := faultfs.New()
	w, _ := openFS(t, t.TempDir(), fs, 64<<10)
	defer w.Close()
	fs.Fail(faultfs.OpWrite, syscall.EIO)
	p, err := w.EnqueueForWait(record(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitWritten(bounded(t)); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitWritten after a failed write: %v, want ErrFailed wrapping EIO", err)
	}
	if err := p.Wait(bounded(t)); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Wait after a failed write: %v, want ErrFailed", err)
	}
	if _, err := w.Enqueue([]byte("later")); !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("Enqueue after a failed write: %v, want ErrFailed", err)
	}
}
