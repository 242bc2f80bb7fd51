package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// testLogger sends the log's slog output to the test's output, so it shows
// up with -v or when the test fails.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// openWAL opens dir and closes the log when the test ends (if the test did
// not close it itself).
func openWAL(t testing.TB, dir string, segSize int64) (*WAL, RecoveryReport) {
	t.Helper()
	return openWithSync(t, dir, segSize, fdatasync)
}

func openWithSync(t testing.TB, dir string, segSize int64, sync func(File) error) (*WAL, RecoveryReport) {
	t.Helper()
	w, rep, err := open(Options{Dir: dir, SegmentSize: segSize, Logger: testLogger(t)}, sync)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
			t.Errorf("Close: %v", err)
		}
	})
	return w, rep
}

// payload returns deterministic bytes for sequence number seq: the number
// itself, then a xorshift stream seeded by it. Every byte depends on seq, so
// a payload from one seq can never pass for another's.
func payload(seq uint64, size int) []byte {
	b := make([]byte, size)
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], seq)
	n := copy(b, head[:])
	x := seq*0x9E3779B97F4A7C15 | 1
	for i := n; i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x) | 1 // never zero: keeps torn-byte accounting exact in tests
	}
	return b
}

type entry struct {
	pos  Pos
	data []byte
}

// appendPayloads appends one payload per size (payload(i, size)) and
// returns them with their positions; after, when not nil, runs after each
// append.
func appendPayloads(t testing.TB, w *WAL, sizes []int, after func(*WAL)) []entry {
	t.Helper()
	var all []entry
	for i, n := range sizes {
		data := payload(uint64(i), n)
		pos, err := w.Append(context.Background(), data)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, entry{pos, data})
		if after != nil {
			after(w)
		}
	}
	return all
}

// replayAll returns every entry Replay yields, copying the data.
func replayAll(t testing.TB, w *WAL) []entry {
	t.Helper()
	var out []entry
	err := w.Replay(func(pos Pos, data []byte) error {
		out = append(out, entry{pos, bytes.Clone(data)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return out
}

func sameEntries(t testing.TB, got, want []entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].pos != want[i].pos {
			t.Fatalf("entry %d at %+v, want %+v", i, got[i].pos, want[i].pos)
		}
		if !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("entry %d at %+v: payload differs", i, got[i].pos)
		}
	}
}

// wantAllDone fails unless every entry of pending is done already; when
// ends the message ("entry 3 not done <when>").
func wantAllDone(t testing.TB, pending []*Pending, when string) {
	t.Helper()
	for i, p := range pending {
		select {
		case <-p.Done():
		default:
			t.Fatalf("entry %d not done %s", i, when)
		}
	}
}

func segPath(dir string, seg uint64) string { return filepath.Join(dir, segmentName(seg)) }

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// syncGate is an fdatasync hook that lets a test hold the writer inside a
// sync, observe it there, and choose the result.
type syncGate struct {
	mu      sync.Mutex
	n       int
	hold    bool
	entered chan int   // receives the call number (1-based) of a held call
	release chan error // a held call returns the next value sent here
}

func newSyncGate() *syncGate {
	return &syncGate{hold: true, entered: make(chan int), release: make(chan error)}
}

// openGated opens a WAL whose fdatasyncs go through a new syncGate.
func openGated(t testing.TB, dir string, segSize int64) (*WAL, *syncGate) {
	t.Helper()
	gate := newSyncGate()
	w, _ := openWithSync(t, dir, segSize, gate.sync)
	return w, gate
}

func (g *syncGate) sync(f File) error {
	g.mu.Lock()
	g.n++
	n, hold := g.n, g.hold
	g.mu.Unlock()
	if hold {
		g.entered <- n
		if err := <-g.release; err != nil {
			return err
		}
	}
	return fdatasync(f)
}

// passThrough stops holding calls; calls already held still need a release.
func (g *syncGate) passThrough() {
	g.mu.Lock()
	g.hold = false
	g.mu.Unlock()
}

func (g *syncGate) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// awaitPrepared waits until the background zero-fill of the next segment
// is complete, so a test that counts disk bytes does not depend on whether
// the filler or the next rotation came first. It must be called only while
// no append is in flight: the writer touches w.next only inside a commit,
// and an idle writer lets the fill run to the end.
func awaitPrepared(w *WAL) {
	if p := w.next; p != nil {
		<-p.done
	}
}
