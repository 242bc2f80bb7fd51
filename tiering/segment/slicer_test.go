package segment

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

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
	epoch := map[int64]bool{} // the partition leader epoch is outside every check
	pos := e.Offset
	for _, b := range batches {
		for j := int64(12); j < 16; j++ {
			epoch[pos+j] = true
		}
		pos += int64(len(b))
	}
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
