package wal

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
)

// countingFS counts the preads made through it.
type countingFile struct {
	File
	reads *int
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	*f.reads++
	return f.File.ReadAt(p, off)
}

// TestReadManyMatchesReadAt: entries spread over segments, asked for in
// random order with some left out, come back as ReadAt returns them, in
// the order asked, with one pread per run of neighbouring records.
func TestReadManyMatchesReadAt(t *testing.T) {
	w, _ := openWAL(t, t.TempDir(), 16<<10)
	var all []Pos
	for i := range 200 {
		pos, err := w.Append(context.Background(), payload(uint64(i), 10+i*7%300))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pos)
	}
	if all[len(all)-1].Segment < 3 {
		t.Fatalf("entries fill only %d segments; the test wants several", all[len(all)-1].Segment)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		var ps []Pos
		for _, p := range all {
			if rng.IntN(4) != 0 || round == 0 {
				ps = append(ps, p)
			}
		}
		rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		seen := 0
		buf, err := w.ReadMany(ps, []byte("stale"), func(i int, data []byte) error {
			if i != seen {
				t.Fatalf("round %d: callback for %d, want %d", round, i, seen)
			}
			seen++
			want, err := w.ReadAt(ps[i], nil)
			if err != nil || !bytes.Equal(data, want) {
				t.Fatalf("round %d: entry %+v: %d bytes, ReadAt %d (%v)", round, ps[i], len(data), len(want), err)
			}
			return nil
		})
		if err != nil || seen != len(ps) {
			t.Fatalf("round %d: ReadMany: %v after %d of %d", round, err, seen, len(ps))
		}
		if len(buf) > 16<<10*int(all[len(all)-1].Segment) {
			t.Fatalf("round %d: buffer of %d bytes for %d segments of entries", round, len(buf), all[len(all)-1].Segment)
		}
	}

	// One pread per segment when every entry is asked for.
	reads := 0
	w.segMu.Lock()
	for i := range w.segs {
		w.segs[i].f = countingFile{File: w.segs[i].f, reads: &reads}
	}
	w.segMu.Unlock()
	if _, err := w.ReadMany(all, nil, func(int, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if segs := int(all[len(all)-1].Segment - all[0].Segment + 1); reads != segs {
		t.Fatalf("%d preads for all entries in %d segments, want one per segment", reads, segs)
	}

	stop := errors.New("stop")
	calls := 0
	if _, err := w.ReadMany(all, nil, func(int, []byte) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("callback error: %v after %d calls, want it returned after 1", err, calls)
	}
}

// TestReadManyRefusesWhatReadAtRefuses: a position not durable or not a
// record fails the whole call, with ReadAt's errors.
func TestReadManyRefusesWhatReadAtRefuses(t *testing.T) {
	dir := t.TempDir()
	w, _ := openWAL(t, dir, 1<<20)
	var ps []Pos
	for i := range 3 {
		pos, err := w.Append(context.Background(), payload(uint64(i), 100))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, pos)
	}
	none := func(i int, b []byte) error {
		t.Errorf("callback for entry %d of a failed read (%d bytes)", i, len(b))
		return nil
	}
	for _, c := range []struct {
		bad  Pos
		want error
	}{
		{Pos{Segment: ps[0].Segment, Offset: ps[2].Offset + 200, Len: 1}, ErrNotDurable},
		{Pos{Segment: ps[0].Segment + 1, Offset: headerSize, Len: 1}, ErrNotDurable},
		{Pos{Segment: ps[0].Segment, Offset: 0, Len: 1}, ErrNotDurable},
		{Pos{Segment: ps[1].Segment, Offset: ps[1].Offset, Len: ps[1].Len - 1}, ErrCorrupt},
	} {
		if _, err := w.ReadMany([]Pos{ps[0], c.bad, ps[2]}, nil, none); !errors.Is(err, c.want) {
			t.Errorf("ReadMany with %+v: %v, want %v", c.bad, err, c.want)
		}
	}
	// A flipped payload byte on disk fails the checksum.
	f, err := os.OpenFile(segPath(dir, ps[1].Segment), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0}, ps[1].Offset+50); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := w.ReadMany(ps, nil, none); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadMany over a damaged payload: %v, want ErrCorrupt", err)
	}
}
