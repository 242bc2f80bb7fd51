package segment

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// counting is a RangeReader decorator that counts requests.
type counting struct {
	RangeReader
	reads atomic.Int64
}

func (c *counting) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	c.reads.Add(1)
	return c.RangeReader.ReadAt(ctx, key, p, off)
}

// memObject serves one object from memory; used where a test mutates
// thousands of object variants (corruption sweeps, fuzzing) and the store
// itself is not under test.
type memObject []byte

func (m memObject) ReadAt(_ context.Context, _ string, p []byte, off int64) (int, error) {
	if off >= int64(len(m)) {
		return 0, io.EOF
	}
	n := copy(p, m[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

type testStream struct {
	id      uint64
	batches [][]byte
}

func build(t testing.TB, opts WriterOptions, streams ...testStream) ([]byte, Info) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, s := range streams {
		for _, b := range s.batches {
			if err := w.Append(s.id, b); err != nil {
				t.Fatalf("Append(stream %d): %v", s.id, err)
			}
		}
	}
	info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(buf.Len()) {
		t.Fatalf("Info.Size %d, wrote %d", info.Size, buf.Len())
	}
	return buf.Bytes(), info
}

func threeStreams() []testStream {
	return []testStream{
		{id: 3, batches: segmenttest.Stream(0, 40, 5, 100, 1000)},
		{id: 7, batches: segmenttest.Stream(1234, 1, 1, 10, 5000)},
		{id: 1 << 40, batches: segmenttest.Stream(99, 300, 2, 30, 9000)},
	}
}

func putObject(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	if err := objstore.Put(t.Context(), s, key, data, objstore.CreateOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, interval := range []int{-1, 0, 1 << 20} {
		t.Run(fmt.Sprintf("interval=%d", interval), func(t *testing.T) {
			streams := threeStreams()
			data, info := build(t, WriterOptions{IndexInterval: interval}, streams...)
			store := objstoretest.FileStore(t)
			putObject(t, store, "l0/n/1", data)
			src := &counting{RangeReader: store}
			r, err := Open(t.Context(), src, "l0/n/1", int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if got := src.reads.Load(); got != 1 {
				t.Errorf("Open used %d reads, want 1", got)
			}
			if fmt.Sprint(r.Streams()) != fmt.Sprint(info.Streams) {
				t.Errorf("footer streams %v\nwriter said %v", r.Streams(), info.Streams)
			}
			var pos int64
			for i, s := range streams {
				e, ok := r.Stream(s.id)
				if !ok {
					t.Fatalf("stream %d missing", s.id)
				}
				all := bytes.Join(s.batches, nil)
				if e.Offset != pos || e.Length != int64(len(all)) || e.Batches != len(s.batches) || e.CRC != crc32c(all) {
					t.Errorf("stream %d entry %+v", s.id, e)
				}
				if !bytes.Equal(data[e.Offset:e.End()], all) {
					t.Errorf("stream %d bytes not at its range", s.id)
				}
				pos = e.End()
				wantLast := int64(binary.BigEndian.Uint64(s.batches[len(s.batches)-1])) + int64(binary.BigEndian.Uint32(s.batches[len(s.batches)-1][23:]))
				if e.Last() != wantLast {
					t.Errorf("stream %d last offset %d, want %d", s.id, e.Last(), wantLast)
				}
				// Every offset, through the index and without it.
				for off := e.First; off <= e.Last(); off++ {
					got, err := r.ReadBatches(t.Context(), s.id, off, 1)
					if err != nil {
						t.Fatalf("ReadBatches(%d, %d): %v", s.id, off, err)
					}
					if got.Count != 1 || got.FirstOffset > off || got.NextOffset <= off {
						t.Fatalf("ReadBatches(%d, %d) = [%d, %d) count %d", s.id, off, got.FirstOffset, got.NextOffset, got.Count)
					}
					b := s.batches[batchIndexOf(s.batches, off)]
					if !bytes.Equal(got.Data, b) {
						t.Fatalf("ReadBatches(%d, %d): wrong batch", s.id, off)
					}
					if off%7 == 0 || i == 1 {
						got2, err := ReadStream(t.Context(), store, "l0/n/1", e, off, 1)
						if err != nil || !bytes.Equal(got2.Data, got.Data) {
							t.Fatalf("ReadStream(%d, %d) = %v", s.id, off, err)
						}
					}
				}
				// Everything at once.
				got, err := r.ReadBatches(t.Context(), s.id, e.First, 0)
				if err != nil || !bytes.Equal(got.Data, all) || got.NextOffset != e.Next || got.Count != len(s.batches) {
					t.Errorf("whole stream %d: %v", s.id, err)
				}
				// maxBytes stops at whole batches.
				got, err = r.ReadBatches(t.Context(), s.id, e.First, 3*len(s.batches[0])+1)
				if err != nil || got.Count != min(3, len(s.batches)) {
					t.Errorf("maxBytes: %d batches, %v", got.Count, err)
				}
			}
			if _, err := r.ReadBatches(t.Context(), 4, 0, 0); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Errorf("missing stream: %v", err)
			}
			if _, err := r.ReadBatches(t.Context(), 3, 200, 0); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Errorf("offset past the range: %v", err)
			}
			if _, err := ReadStream(t.Context(), store, "l0/n/1", info.Streams[1], 1, 0); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Errorf("ReadStream before the range: %v", err)
			}
		})
	}
}

func batchIndexOf(batches [][]byte, off int64) int {
	for i, b := range batches {
		base := int64(binary.BigEndian.Uint64(b))
		last := base + int64(binary.BigEndian.Uint32(b[23:]))
		if off >= base && off <= last {
			return i
		}
	}
	return -1
}

func TestSparseIndexIsSmall(t *testing.T) {
	s := testStream{id: 1, batches: segmenttest.Stream(0, 8000, 1, 1000, 0)} // ~8 MiB
	_, dense := build(t, WriterOptions{IndexInterval: -1}, s)
	_, sparse := build(t, WriterOptions{}, s)
	if sparse.FooterLen*3 > dense.FooterLen || sparse.FooterLen > 16<<10 {
		t.Errorf("footer: sparse %d bytes, dense %d", sparse.FooterLen, dense.FooterLen)
	}
	t.Logf("8000 batches, 8 MiB: footer %d bytes sparse, %d dense", sparse.FooterLen, dense.FooterLen)
}

func TestOffsetForTimestamp(t *testing.T) {
	s := testStream{id: 9, batches: segmenttest.Stream(10, 500, 3, 50, 1000)} // batch i: ts 1000+i
	data, _ := build(t, WriterOptions{IndexInterval: 1000}, s)
	r, err := Open(t.Context(), memObject(data), "k", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts   int64
		want int64
		ok   bool
	}{{0, 10, true}, {1000, 10, true}, {1001, 13, true}, {1250, 10 + 250*3, true}, {1499, 10 + 499*3, true}, {1500, 0, false}} {
		got, ok, err := r.OffsetForTimestamp(t.Context(), 9, c.ts)
		if err != nil || ok != c.ok || (ok && got != c.want) {
			t.Errorf("OffsetForTimestamp(%d) = %d %v %v, want %d %v", c.ts, got, ok, err, c.want, c.ok)
		}
	}
}

func TestOpenLargeFooterTwoReads(t *testing.T) {
	var streams []testStream
	for i := range 6000 {
		streams = append(streams, testStream{id: uint64(i + 1), batches: [][]byte{segmenttest.Batch(int64(i), 1, 1, 1)}})
	}
	data, info := build(t, WriterOptions{}, streams...)
	if info.FooterLen+TrailerSize <= DefaultTailRead {
		t.Fatalf("footer %d bytes: test needs one larger than the tail read", info.FooterLen)
	}
	src := &counting{RangeReader: memObject(data)}
	r, err := Open(t.Context(), src, "k", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if src.reads.Load() != 2 || len(r.Streams()) != 6000 {
		t.Errorf("reads %d, streams %d", src.reads.Load(), len(r.Streams()))
	}
}

func TestWriterRejects(t *testing.T) {
	good := segmenttest.Batch(0, 2, 10, 1)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	cases := map[string]func(w *Writer) error{
		"bad CRC":    func(w *Writer) error { return w.Append(1, bad) },
		"short":      func(w *Writer) error { return w.Append(1, good[:40]) },
		"truncated":  func(w *Writer) error { return w.Append(1, good[:len(good)-1]) },
		"gap":        func(w *Writer) error { _ = w.Append(1, good); return w.Append(1, segmenttest.Batch(3, 1, 1, 1)) },
		"overlap":    func(w *Writer) error { _ = w.Append(1, good); return w.Append(1, segmenttest.Batch(1, 1, 1, 1)) },
		"descending": func(w *Writer) error { _ = w.Append(5, good); return w.Append(4, good) },
		"interleaved": func(w *Writer) error {
			_ = w.Append(1, good)
			_ = w.Append(2, good)
			return w.Append(1, segmenttest.Batch(2, 1, 1, 1))
		},
	}
	for name, fn := range cases {
		w := NewWriter(io.Discard, WriterOptions{})
		if err := fn(w); !errors.Is(err, ErrInvalidBatch) {
			t.Errorf("%s: %v, want ErrInvalidBatch", name, err)
		}
	}
	w := NewWriter(io.Discard, WriterOptions{})
	if _, err := w.Finish(); err == nil {
		t.Errorf("empty object finished")
	}
	w = NewWriter(io.Discard, WriterOptions{})
	_ = w.Append(1, good)
	if _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(1, segmenttest.Batch(2, 1, 1, 1)); err == nil {
		t.Errorf("Append after Finish")
	}
}

// TestCorruptionNeverServed flips every bit position (one at a time) of a
// small object and reads everything back: each read must either fail with
// ErrCorrupt or return exactly the original batches. The only bytes no
// checksum covers are each batch's partitionLeaderEpoch, which the Kafka
// facade rewrites on fetch; they are excluded from the comparison.
func TestCorruptionNeverServed(t *testing.T) {
	streams := []testStream{
		{id: 1, batches: segmenttest.Stream(0, 3, 2, 5, 100)},
		{id: 2, batches: segmenttest.Stream(50, 2, 1, 5, 200)},
	}
	orig, _ := build(t, WriterOptions{IndexInterval: -1}, streams...)
	epochBytes := map[int]bool{}
	var pos int
	for _, s := range streams {
		for _, b := range s.batches {
			for i := 12; i < 16; i++ {
				epochBytes[pos+i] = true
			}
			pos += len(b)
		}
	}
	want := map[uint64][]byte{1: bytes.Join(streams[0].batches, nil), 2: bytes.Join(streams[1].batches, nil)}
	for i := range orig {
		if epochBytes[i] {
			continue
		}
		for _, bit := range []byte{0x01, 0x80} {
			data := bytes.Clone(orig)
			data[i] ^= bit
			r, err := Open(context.Background(), memObject(data), "k", int64(len(data)))
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("byte %d: Open: %v, want ErrCorrupt", i, err)
				}
				continue
			}
			for id, w := range want {
				e, ok := r.Stream(id)
				if !ok {
					t.Fatalf("byte %d: stream %d vanished without a corruption error", i, id)
				}
				for _, read := range []func() (Batches, error){
					func() (Batches, error) { return r.ReadBatches(context.Background(), id, e.First, 0) },
					func() (Batches, error) {
						return ReadStream(context.Background(), memObject(data), "k", e, e.First, 0)
					},
					func() (Batches, error) { return r.ReadBatches(context.Background(), id, e.Last(), 0) },
					func() (Batches, error) {
						c, err := NewCursor(memObject(data), "k", e, e.First)
						if err != nil {
							return Batches{}, err
						}
						var all Batches
						for {
							b, err := c.Next(context.Background(), 100)
							if err == io.EOF {
								return all, nil
							}
							if err != nil {
								return Batches{}, err
							}
							all.Data = append(all.Data, b.Data...)
						}
					},
				} {
					got, err := read()
					if err != nil {
						if !errors.Is(err, ErrCorrupt) {
							t.Fatalf("byte %d: read: %v, want ErrCorrupt", i, err)
						}
						continue
					}
					if !bytes.HasSuffix(w, got.Data) {
						t.Fatalf("byte %d bit %#x: corrupt data served for stream %d", i, bit, id)
					}
				}
			}
		}
	}
}

func TestTruncatedAndWrongSize(t *testing.T) {
	data, _ := build(t, WriterOptions{}, threeStreams()...)
	for _, c := range []struct {
		name string
		obj  []byte
		size int64
	}{
		{"truncated", data[:len(data)-100], int64(len(data) - 100)},
		{"size larger than object", data, int64(len(data) + 10)},
		{"padded", append(bytes.Clone(data), 0, 0), int64(len(data) + 2)},
		{"tiny", data[:10], 10},
		{"not a segment", bytes.Repeat([]byte("x"), 100), 100},
	} {
		_, err := Open(t.Context(), memObject(c.obj), "k", c.size)
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Key != "k" {
			t.Errorf("%s: %v, want *CorruptionError for key k", c.name, err)
		}
	}
	// A stream range that the object no longer holds.
	r, err := Open(t.Context(), memObject(data), "k", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	e := r.Streams()[0]
	if _, err := ReadStream(t.Context(), memObject(data[:e.Offset+100]), "k", e, e.First, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short range: %v", err)
	}
}

func TestMissingObjectIsNotCorruption(t *testing.T) {
	store := objstoretest.FileStore(t)
	_, err := Open(t.Context(), store, "nope", 1000)
	if !objstore.IsNotExist(err) || errors.Is(err, ErrCorrupt) {
		t.Errorf("missing object: %v", err)
	}
}

func TestCursor(t *testing.T) {
	streams := threeStreams()
	data, info := build(t, WriterOptions{IndexInterval: 500}, streams...)
	r, err := Open(t.Context(), memObject(data), "k", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range info.Streams {
		all := bytes.Join(streams[i].batches, nil)
		for _, maxBytes := range []int{1, 700, 5000, 0} {
			c, err := NewCursor(memObject(data), "k", e, e.First)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			next := e.First
			for {
				b, err := c.Next(t.Context(), maxBytes)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if b.FirstOffset != next || (maxBytes > 0 && b.Count > 1 && len(b.Data) > maxBytes) {
					t.Fatalf("stream %d maxBytes %d: batches [%d, %d) count %d size %d, expected start %d", e.StreamID, maxBytes, b.FirstOffset, b.NextOffset, b.Count, len(b.Data), next)
				}
				next = b.NextOffset
				got = append(got, b.Data...)
			}
			if !bytes.Equal(got, all) || next != e.Next {
				t.Errorf("stream %d maxBytes %d: cursor read %d bytes up to %d, want %d up to %d", e.StreamID, maxBytes, len(got), next, len(all), e.Next)
			}
		}
		// A cursor from the index at a middle offset starts at the batch
		// holding it.
		mid := (e.First + e.Last()) / 2
		c, err := r.Cursor(e.StreamID, mid)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Next(t.Context(), 1)
		if err != nil || b.FirstOffset > mid || b.NextOffset <= mid {
			t.Errorf("Reader.Cursor(%d): [%d, %d) %v", mid, b.FirstOffset, b.NextOffset, err)
		}
	}
	if _, err := NewCursor(memObject(data), "k", info.Streams[0], -1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Errorf("cursor before range: %v", err)
	}
}

// TestPageEndBatchIsNotRead: a read stops at the first batch that would
// take it past maxBytes on that batch's header alone, without reading or
// checking its bytes (the next read does): a page of 4 MiB over 1 MiB
// batches read a fourth batch only to turn it down, so every byte of it
// was read, checked and (split between two GETs) copied twice. Shown by a
// corrupt batch after the page's end: the page is served, and the read
// that reaches the batch reports the corruption. Before the change the
// first page failed with ErrCorrupt.
func TestPageEndBatchIsNotRead(t *testing.T) {
	batches := segmenttest.Stream(0, 4, 10, 100, 1000)
	data, info := build(t, WriterOptions{}, testStream{id: 5, batches: batches})
	e := info.Streams[0]
	two := len(batches[0]) + len(batches[1])
	// Corrupt the body (not the header) of the third batch.
	bad := bytes.Clone(data)
	bad[e.Offset+int64(two)+int64(len(batches[2]))-5] ^= 0x40
	// maxBytes leaves room, but not enough for the third batch.
	limit := two + len(batches[2])/2
	got, err := ReadStream(t.Context(), memObject(bad), "k", e, e.First, limit)
	if err != nil {
		t.Fatalf("page of two batches before a corrupt third: %v", err)
	}
	if !bytes.Equal(got.Data, data[e.Offset:e.Offset+int64(two)]) || got.Count != 2 || got.NextOffset != 20 {
		t.Fatalf("page: %d bytes, %d batches, next %d; want the first two batches, next 20", len(got.Data), got.Count, got.NextOffset)
	}
	if _, err := ReadStream(t.Context(), memObject(bad), "k", e, got.NextOffset, limit); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of the corrupt batch: %v, want ErrCorrupt", err)
	}
	// A first batch larger than maxBytes is still served whole.
	if got, err := ReadStream(t.Context(), memObject(data), "k", e, e.First, 1); err != nil || got.Count != 1 {
		t.Fatalf("maxBytes below one batch: %d batches, %v; want the first batch", got.Count, err)
	}
}
