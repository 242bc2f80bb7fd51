package segment

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/extent"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// memRuns serves one object from memory the way the block cache lends its
// runs: Slice aliases the object up to the end of the run of runSize bytes
// holding off, and copies only when atLeast bytes straddle two runs.
type memRuns struct {
	data    []byte
	runSize int
	slices  int // calls answered without a copy
	copies  int // calls answered with a copy (the range straddled two runs)
}

func (m *memRuns) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	return memObject(m.data).ReadAt(ctx, key, p, off)
}

func (m *memRuns) Slice(_ context.Context, _ string, off int64, atLeast, atMost int) ([]byte, error) {
	if off >= int64(len(m.data)) {
		return nil, io.EOF
	}
	runEnd := min((off/int64(m.runSize)+1)*int64(m.runSize), int64(len(m.data)))
	if off+int64(atLeast) <= runEnd {
		m.slices++
		end := min(runEnd, off+int64(atMost))
		return m.data[off:end:end], nil
	}
	m.copies++
	p := make([]byte, atLeast)
	n := copy(p, m.data[off:])
	if n < atLeast {
		return p[:n], io.EOF
	}
	return p, nil
}

// readCursor reads stream range e of src through a cursor, maxBytes at a
// time, checking that no returned data has capacity over the source and
// that appending to it leaves the source alone.
func readCursor(t *testing.T, src RangeReader, e extent.Extent, maxBytes int) []byte {
	t.Helper()
	c, err := NewCursor(src, "k", e, e.First)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		b, err := c.Next(t.Context(), maxBytes)
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("stream %d maxBytes %d: %v", e.StreamID, maxBytes, err)
		}
		if cap(b.Data) != len(b.Data) {
			t.Fatalf("maxBytes %d: Data has spare capacity %d over the source", maxBytes, cap(b.Data)-len(b.Data))
		}
		_ = append(b.Data, 0xFF) // must copy, not write into the source
		got = append(got, b.Data...)
	}
}

// TestSlicerSourceReadsAlike: every read shape returns the same bytes
// through a Slicer as through plain reads, whatever the run size, and the
// data handed out can be appended to without writing into the source.
func TestSlicerSourceReadsAlike(t *testing.T) {
	streams := threeStreams()
	data, info := build(t, WriterOptions{IndexInterval: 500}, streams...)
	pristine := bytes.Clone(data)
	for _, runSize := range []int{1, 97, 4096, len(data)} {
		src := &memRuns{data: data, runSize: runSize}
		r, err := Open(t.Context(), src, "k", int64(len(data)))
		if err != nil {
			t.Fatalf("run size %d: Open: %v", runSize, err)
		}
		for i, e := range info.Streams {
			all := bytes.Join(streams[i].batches, nil)
			for _, maxBytes := range []int{1, 700, 5000, 0} {
				if got := readCursor(t, src, e, maxBytes); !bytes.Equal(got, all) {
					t.Fatalf("run size %d stream %d maxBytes %d: cursor read differs", runSize, e.StreamID, maxBytes)
				}
			}
			for _, off := range []int64{e.First, (e.First + e.Last()) / 2, e.Last()} {
				viaStream, err := ReadStream(t.Context(), src, "k", e, off, 0)
				if err != nil {
					t.Fatal(err)
				}
				viaReader, err := r.ReadBatches(t.Context(), e.StreamID, off, 0)
				if err != nil {
					t.Fatal(err)
				}
				plain, err := ReadStream(t.Context(), memObject(pristine), "k", e, off, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(viaStream.Data, plain.Data) || !bytes.Equal(viaReader.Data, plain.Data) {
					t.Fatalf("run size %d stream %d offset %d: slicer reads differ from plain reads", runSize, e.StreamID, off)
				}
			}
		}
		if !bytes.Equal(data, pristine) {
			t.Fatalf("run size %d: the source was modified through returned data", runSize)
		}
		if runSize > 1 && src.slices == 0 {
			t.Errorf("run size %d: no read was served without a copy", runSize)
		}
	}
}

// TestSlicerSourceCorruptionNeverServed: flipped bits and truncation are
// detected on the zero-copy path as on the plain one.
func TestSlicerSourceCorruptionNeverServed(t *testing.T) {
	batches := segmenttest.Stream(0, 4, 2, 5, 100)
	orig, info := build(t, WriterOptions{IndexInterval: -1}, testStream{id: 1, batches: batches})
	want := bytes.Join(batches, nil)
	e := info.Streams[0]
	epoch := epochBytes(e.Offset, batches)
	for i := e.Offset; i < e.End(); i++ {
		data := bytes.Clone(orig)
		data[i] ^= 0x40
		for _, runSize := range []int{64, 1 << 20} {
			got, err := ReadStream(context.Background(), &memRuns{data: data, runSize: runSize}, "k", e, e.First, 0)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d: %v, want ErrCorrupt", i, err)
				}
				continue
			}
			if !epoch[i] || len(got.Data) != len(want) {
				t.Fatalf("byte %d (run size %d): corrupt range served", i, runSize)
			}
		}
	}
	short := &memRuns{data: orig[:e.Offset+150], runSize: 64}
	if _, err := ReadStream(t.Context(), short, "k", e, e.First, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated object: %v, want ErrCorrupt", err)
	}
}

// TestSlicerWindowsOverlap: a scan's next window starts inside the memory
// of the previous one when a batch straddles the window end; batches from
// the two windows are adjacent in memory but the first window's capacity
// ends early, and joining them must copy, not reslice past it.
func TestSlicerWindowsOverlap(t *testing.T) {
	batches := segmenttest.Stream(0, 200, 4, 700, 1000) // ~570 KiB
	data, info := build(t, WriterOptions{}, testStream{id: 1, batches: batches})
	want := bytes.Join(batches, nil)
	e := info.Streams[0]
	for _, maxBytes := range []int{40 << 10, 100 << 10, 0} {
		src := &memRuns{data: data, runSize: len(data)}
		if got := readCursor(t, src, e, maxBytes); !bytes.Equal(got, want) {
			t.Fatalf("maxBytes %d: cursor read differs", maxBytes)
		}
		var got []byte
		for off := e.First; off <= e.Last(); {
			b, err := ReadStream(t.Context(), src, "k", e, off, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b.Data...)
			off = b.NextOffset
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("maxBytes %d: ReadStream pages differ", maxBytes)
		}
	}
}

// memPieceRuns is memRuns that also lends a range across runs as one
// piece per run (PieceSlicer), as the block cache's SlicePieces does.
type memPieceRuns struct {
	memRuns
	split int // SlicePieces calls answered with more than one piece
}

func (m *memPieceRuns) SlicePieces(_ context.Context, _ string, off int64, atLeast, atMost int) ([][]byte, error) {
	var out [][]byte
	n := 0
	for at := off; n < atMost && at < int64(len(m.data)); {
		runEnd := min((at/int64(m.runSize)+1)*int64(m.runSize), int64(len(m.data)), at+int64(atMost-n))
		out = append(out, m.data[at:runEnd:runEnd])
		n += int(runEnd - at)
		at = runEnd
		if n >= atLeast {
			break // the last piece runs to its run's end (or atMost), no further
		}
	}
	if len(out) > 1 {
		m.split++
	}
	if n < atLeast {
		return out, io.EOF
	}
	return out, nil
}

// readPieces reads range e of src page by page with ReadStreamAtPieces
// (as the tier does), checking the pieces are capped, and returns their
// bytes and the most pieces any batch lay in.
func readPieces(t *testing.T, src RangeReader, e extent.Extent, maxBytes int) ([]byte, int) {
	t.Helper()
	var got []byte
	most := 0
	pos, base := e.Offset, e.First
	for off := e.First; off <= e.Last(); {
		b, err := ReadStreamAtPieces(t.Context(), src, "k", e, pos, base, off, maxBytes)
		if err != nil {
			t.Fatalf("maxBytes %d offset %d: %v", maxBytes, off, err)
		}
		if b.Data != nil || len(b.Pieces) == 0 {
			t.Fatalf("maxBytes %d offset %d: Data set or no pieces", maxBytes, off)
		}
		for _, p := range b.Pieces {
			if cap(p) != len(p) {
				t.Fatalf("maxBytes %d: a piece has spare capacity over the source", maxBytes)
			}
		}
		err = record.WalkPieces(b.Pieces, func(batch [][]byte, _ record.BatchHeader, _ int) error {
			most = max(most, len(batch))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		page := bytes.Join(b.Pieces, nil)
		got = append(got, page...)
		pos, base, off = b.Pos+int64(len(page)), b.NextOffset, b.NextOffset
	}
	return got, most
}

// TestPieceSlicerStraddleUncopied: through a source that lends pieces,
// reads of stored batches return a batch that straddles two runs as two
// pieces and copy nothing (memRuns.copies stays 0), with the same bytes
// as plain reads; without SlicePieces (the code before it) every
// straddling batch was copied by Slice.
func TestPieceSlicerStraddleUncopied(t *testing.T) {
	batches := segmenttest.Stream(0, 60, 8, 1000, 7) // ~8 KiB batches
	data, info := build(t, WriterOptions{}, testStream{id: 1, batches: batches})
	want := bytes.Join(batches, nil)
	e := info.Streams[0]
	for _, runSize := range []int{97, 4096, 20000} {
		for _, maxBytes := range []int{1, 30000, 0} {
			src := &memPieceRuns{memRuns: memRuns{data: data, runSize: runSize}}
			got, most := readPieces(t, src, e, maxBytes)
			if !bytes.Equal(got, want) {
				t.Fatalf("run size %d maxBytes %d: pieces differ from the batches written", runSize, maxBytes)
			}
			if src.copies != 0 {
				t.Errorf("run size %d maxBytes %d: %d straddling reads copied", runSize, maxBytes, src.copies)
			}
			if most < 2 || src.split == 0 {
				t.Errorf("run size %d maxBytes %d: no batch came in pieces (most %d)", runSize, maxBytes, most)
			}
		}
	}
	// The Data reads still copy a straddling batch into one slice.
	src := &memPieceRuns{memRuns: memRuns{data: data, runSize: 4096}}
	if got := readCursor(t, src, e, 0); !bytes.Equal(got, want) {
		t.Fatal("cursor read differs")
	}
	if src.copies == 0 || src.split != 0 {
		t.Errorf("Data reads: %d copies, %d piece reads; want copies and no pieces", src.copies, src.split)
	}
}

// TestPieceSlicerCorruptionNeverServed: a flipped bit anywhere in a batch
// split across runs (in the piece before the boundary or after it, the
// header included) is refused before any byte of the page is served.
func TestPieceSlicerCorruptionNeverServed(t *testing.T) {
	batches := segmenttest.Stream(0, 4, 2, 5, 100)
	orig, info := build(t, WriterOptions{IndexInterval: -1}, testStream{id: 1, batches: batches})
	want := bytes.Join(batches, nil)
	e := info.Streams[0]
	epoch := epochBytes(e.Offset, batches)
	for i := e.Offset; i < e.End(); i++ {
		data := bytes.Clone(orig)
		data[i] ^= 0x40
		for _, runSize := range []int{7, 64, 1 << 20} {
			src := &memPieceRuns{memRuns: memRuns{data: data, runSize: runSize}}
			got, err := ReadStreamPieces(context.Background(), src, "k", e, e.First, 0)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d: %v, want ErrCorrupt", i, err)
				}
				continue
			}
			if !epoch[i] || got.Size() != len(want) {
				t.Fatalf("byte %d (run size %d): corrupt range served", i, runSize)
			}
		}
	}
	short := &memPieceRuns{memRuns: memRuns{data: orig[:e.Offset+150], runSize: 64}}
	if _, err := ReadStreamPieces(t.Context(), short, "k", e, e.First, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated object: %v, want ErrCorrupt", err)
	}
}

// epochBytes returns the object positions of the partition leader epoch
// of each batch laid out from off: the one field outside every check, so
// a flipped bit there is not corruption the reader can see.
func epochBytes(off int64, batches [][]byte) map[int64]bool {
	epoch := map[int64]bool{}
	for _, b := range batches {
		for j := int64(12); j < 16; j++ {
			epoch[off+j] = true
		}
		off += int64(len(b))
	}
	return epoch
}
