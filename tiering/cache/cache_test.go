package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// counted decorates a real store: it counts requests and can delay them,
// so tests can see what the cache asks of the store.
type counted struct {
	objstore.Store
	reads atomic.Int64
	delay time.Duration
}

func (c *counted) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	c.reads.Add(1)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	return c.Store.ReadAt(ctx, key, p, off)
}

// ReadRange makes counted a RangeStreamer when its store is one (the
// file store and S3 are), so tests go through the path production reads
// take: read-ahead streaming into its run and yielding to demand.
func (c *counted) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	rs, ok := c.Store.(RangeStreamer)
	if !ok {
		return nil, fmt.Errorf("counted: %T cannot stream ranges", c.Store)
	}
	c.reads.Add(1)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	return rs.ReadRange(ctx, key, off, length)
}

const bs = 64 << 10

func setup(t *testing.T, store objstore.Store, size int, opts Options) (*Cache, *counted, []byte) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>11)
	}
	if err := objstore.Put(t.Context(), store, "obj", data, objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := &counted{Store: store}
	if opts.BlockSize == 0 {
		opts.BlockSize = bs
	}
	c, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, src, data
}

func stores(t *testing.T) map[string]func(t *testing.T) objstore.Store {
	m := map[string]func(t *testing.T) objstore.Store{"file": objstoretest.FileStore}
	m["minio"] = func(t *testing.T) objstore.Store { return objstoretest.S3FromEnv(t)(t) }
	return m
}

// TestReadAtSemantics: through the cache, reads return exactly what the
// store returns, EOF included, over random ranges crossing blocks.
func TestReadAtSemantics(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			size := 5*bs + 1234
			c, _, data := setup(t, open(t), size, Options{})
			rng := rand.New(rand.NewPCG(1, 2))
			for range 300 {
				off := rng.Int64N(int64(size) + 100)
				n := rng.IntN(3 * bs)
				p := make([]byte, n)
				got, err := c.ReadAt(t.Context(), "obj", p, off)
				wantN := max(0, min(n, size-int(off)))
				wantEOF := int(off)+n > size
				if n == 0 {
					wantEOF = false
				}
				if got != wantN || (err == io.EOF) != wantEOF || (err != nil && err != io.EOF) {
					t.Fatalf("ReadAt(off=%d, n=%d) = %d, %v; want %d, EOF=%v", off, n, got, err, wantN, wantEOF)
				}
				if got > 0 && !bytes.Equal(p[:got], data[off:off+int64(got)]) {
					t.Fatalf("ReadAt(off=%d, n=%d): wrong bytes", off, n)
				}
			}
			if _, err := c.ReadAt(t.Context(), "missing", make([]byte, 10), 0); !objstore.IsNotExist(err) {
				t.Errorf("missing object: %v", err)
			}
		})
	}
}

// TestColdReadFetchesOnlyItsBlock: a cold read of 100 bytes in the middle
// of a large object is one GET of one block, not the object.
func TestColdReadFetchesOnlyItsBlock(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 64*bs, Options{ReadAhead: -1})
	p := make([]byte, 100)
	if _, err := c.ReadAt(t.Context(), "obj", p, 20*bs+10); err != nil || !bytes.Equal(p, data[20*bs+10:20*bs+110]) {
		t.Fatal(err)
	}
	if src.reads.Load() != 1 || c.Stats().FetchedBytes != bs {
		t.Errorf("cold read: %d GETs, %d bytes; want 1 GET of one block", src.reads.Load(), c.Stats().FetchedBytes)
	}
	// The same block again is a hit; a read spanning two blocks fetches
	// only the missing one.
	if _, err := c.ReadAt(t.Context(), "obj", p, 20*bs+500); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(t.Context(), "obj", p, 21*bs-50); err != nil || !bytes.Equal(p, data[21*bs-50:21*bs+50]) {
		t.Fatal(err)
	}
	if s := c.Stats(); src.reads.Load() != 2 || s.Misses != 2 || s.Hits != 2 {
		t.Errorf("after re-reads: %d GETs, stats %+v", src.reads.Load(), s)
	}
}

// TestConcurrentMissesShareOneGET: many readers of one cold block cause
// one GET.
func TestConcurrentMissesShareOneGET(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 4*bs, Options{ReadAhead: -1})
	src.delay = 50 * time.Millisecond
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			p := make([]byte, 1000)
			if _, err := c.ReadAt(t.Context(), "obj", p, bs+int64(i)*100); err != nil || !bytes.Equal(p, data[bs+i*100:bs+i*100+1000]) {
				t.Errorf("reader %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if got := src.reads.Load(); got != 1 {
		t.Errorf("%d GETs for one block, want 1", got)
	}
}

// TestSequentialReadAhead: after two sequential reads, the following
// blocks are already in flight or fetched when the reader gets there.
func TestSequentialReadAhead(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 32*bs, Options{ReadAhead: 4})
	src.delay = 5 * time.Millisecond
	p := make([]byte, bs)
	for i := range 32 {
		if _, err := c.ReadAt(t.Context(), "obj", p, int64(i)*bs); err != nil || !bytes.Equal(p, data[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	s := c.Stats()
	if s.Misses > 2 || s.Prefetches < 28 {
		t.Errorf("sequential scan: %+v; want at most 2 demand misses, the rest read ahead", s)
	}
	// Without an advised range the object's end is found by reading past
	// it, so up to ReadAhead empty GETs are allowed, but no block twice.
	if got := src.reads.Load(); got > 32+4 || s.FetchedBytes != 32*bs {
		t.Errorf("%d GETs, %d bytes for 32 blocks (read-ahead must not fetch a block twice)", got, s.FetchedBytes)
	}
}

// TestReadAheadStaysFull: a sequential reader's window is topped up as
// soon as one whole GET of it is free, not only once half of it has been
// read, so the bytes in flight stay near the window (what covers a slow
// store's latency) and every read-ahead GET is still FetchBlocks long.
func TestReadAheadStaysFull(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 64*bs, Options{ReadAhead: 16, FetchBlocks: 4})
	c.Advise("obj", 0, 64*bs)
	p := make([]byte, bs)
	for i := range 4 {
		if _, err := c.ReadAt(t.Context(), "obj", p, int64(i)*bs); err != nil || !bytes.Equal(p, data[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	c.mu.Lock()
	ahead := c.seq["obj"].ahead
	c.mu.Unlock()
	if ahead != 4+16 {
		t.Errorf("after reading 4 blocks read-ahead reaches block %d; want %d (the window full again)", ahead, 4+16)
	}
	for i := 4; i < 64; i++ {
		if _, err := c.ReadAt(t.Context(), "obj", p, int64(i)*bs); err != nil || !bytes.Equal(p, data[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	if got, s := src.reads.Load(), c.Stats(); got != 16 || s.FetchedBytes != 64*bs {
		t.Errorf("%d GETs of %d bytes for 64 blocks; want 16 GETs of 4 blocks, each block once", got, s.FetchedBytes)
	}
}

// TestAdviseStaysInRange: advised read-ahead never fetches past the range
// end (the neighbouring streams of an L0 object).
func TestAdviseStaysInRange(t *testing.T) {
	c, src, _ := setup(t, objstoretest.FileStore(t), 32*bs, Options{ReadAhead: 8, FetchBlocks: 8})
	c.Advise("obj", 2*bs+10, 5*bs+1) // blocks 2..5
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().FetchedBytes < 4*bs && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	p := make([]byte, 3*bs)
	if _, err := c.ReadAt(t.Context(), "obj", p, 2*bs+10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got, s := src.reads.Load(), c.Stats(); got != 1 || s.FetchedBytes != 4*bs {
		t.Errorf("%d GETs of %d bytes, want the 4 advised blocks in one GET", got, s.FetchedBytes)
	}
	if s := c.Stats(); s.Misses != 0 {
		t.Errorf("advised blocks missed: %+v", s)
	}
}

// TestErrorsAreNotCached: a failed read (object not there yet) is retried
// against the store next time.
func TestErrorsAreNotCached(t *testing.T) {
	store := objstoretest.FileStore(t)
	c, _, _ := setup(t, store, bs, Options{})
	p := make([]byte, 10)
	if _, err := c.ReadAt(t.Context(), "later", p, 0); !objstore.IsNotExist(err) {
		t.Fatalf("want ErrNotExist, got %v", err)
	}
	if err := objstore.Put(t.Context(), store, "later", []byte("0123456789"), objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ReadAt(t.Context(), "later", p, 0); n != 10 || err != nil || string(p) != "0123456789" {
		t.Errorf("after create: %d %v %q", n, err, p)
	}
}

func TestCancelledReader(t *testing.T) {
	c, src, _ := setup(t, objstoretest.FileStore(t), 4*bs, Options{ReadAhead: -1})
	src.delay = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.ReadAt(ctx, "obj", make([]byte, 10), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("want deadline exceeded, got %v", err)
	}
	// The fetch went on without the reader and serves the next one.
	time.Sleep(300 * time.Millisecond)
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 10), 0); err != nil || src.reads.Load() != 1 {
		t.Errorf("second reader: %v, %d GETs", err, src.reads.Load())
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	c, _, _ := setup(t, objstoretest.FileStore(t), 4*bs, Options{})
	c.Advise("obj", 0, 4*bs)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 1), 0); err == nil {
		t.Errorf("read after Close succeeded")
	}
}

// TestColdMultiBlockReadIsOneGET: a cold read spanning several blocks is
// one GET (object stores charge per request), split into cached blocks.
func TestColdMultiBlockReadIsOneGET(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 16*bs, Options{ReadAhead: -1, FetchBlocks: 4})
	p := make([]byte, 6*bs)
	if _, err := c.ReadAt(t.Context(), "obj", p, bs/2); err != nil || !bytes.Equal(p, data[bs/2:bs/2+6*bs]) {
		t.Fatal(err)
	}
	// Blocks 0..6: two runs of at most 4 blocks.
	if got := src.reads.Load(); got != 2 {
		t.Errorf("%d GETs, want 2 runs", got)
	}
	for i := range 7 {
		if _, err := c.ReadAt(t.Context(), "obj", p[:10], int64(i)*bs); err != nil {
			t.Fatal(err)
		}
	}
	if got := src.reads.Load(); got != 2 {
		t.Errorf("re-reading the blocks cost %d more GETs", got-2)
	}
}

// TestSliceSemantics: Slice returns the object's bytes from off, at least
// atLeast of them unless the object ends first (then io.EOF), at most
// atMost, over random ranges and both stores.
func TestSliceSemantics(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			size := 7*bs + 999
			c, _, data := setup(t, open(t), size, Options{FetchBlocks: 3})
			rng := rand.New(rand.NewPCG(3, 4))
			for range 300 {
				off := rng.Int64N(int64(size) + 100)
				atLeast := 1 + rng.IntN(2*bs)
				atMost := atLeast + rng.IntN(4*bs)
				got, err := c.Slice(t.Context(), "obj", off, atLeast, atMost)
				avail := max(0, size-int(off))
				if err != nil && err != io.EOF {
					t.Fatalf("Slice(%d, %d, %d): %v", off, atLeast, atMost, err)
				}
				if (err == io.EOF) != (avail < atLeast) {
					t.Fatalf("Slice(%d, %d, %d) = %d bytes, %v; %d available", off, atLeast, atMost, len(got), err, avail)
				}
				if len(got) < min(atLeast, avail) || len(got) > atMost || cap(got) != len(got) {
					t.Fatalf("Slice(%d, %d, %d) = %d bytes (cap %d)", off, atLeast, atMost, len(got), cap(got))
				}
				if !bytes.Equal(got, data[off:off+int64(len(got))]) {
					t.Fatalf("Slice(%d, %d, %d): wrong bytes", off, atLeast, atMost)
				}
			}
		})
	}
}

// TestSliceIsZeroCopy: bytes one GET fetched are lent, not copied: two
// slices of the same run share memory, and a slice reaches to the end of
// its run when the caller allows it.
func TestSliceIsZeroCopy(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 16*bs, Options{ReadAhead: -1, FetchBlocks: 8})
	// One cold multi-block read: one run of blocks 0..7.
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 8*bs), 0); err != nil {
		t.Fatal(err)
	}
	a, err := c.Slice(t.Context(), "obj", 100, 10, 16*bs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Slice(t.Context(), "obj", 3*bs, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 8*bs-100 || !bytes.Equal(a, data[100:8*bs]) {
		t.Fatalf("slice from 100 has %d bytes, want the rest of the run (%d)", len(a), 8*bs-100)
	}
	if &a[3*bs-100] != &b[0] {
		t.Errorf("two slices of one run do not share memory: the cache copied")
	}
	if got := src.reads.Load(); got != 1 {
		t.Errorf("%d GETs, want 1", got)
	}
	// Straddling two runs costs a copy of exactly what was asked for.
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, bs), 8*bs); err != nil {
		t.Fatal(err)
	}
	s, err := c.Slice(t.Context(), "obj", 8*bs-10, 20, 1000)
	if err != nil || len(s) != 20 || !bytes.Equal(s, data[8*bs-10:8*bs+10]) {
		t.Fatalf("straddling slice: %d bytes, %v", len(s), err)
	}
}

// TestSlicePiecesSemantics: SlicePieces returns what Slice does, as
// consecutive pieces: the same bytes, EOF where the object ends, at least
// atLeast and at most atMost in all, every piece capped.
func TestSlicePiecesSemantics(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			size := 7*bs + 999
			c, _, data := setup(t, open(t), size, Options{FetchBlocks: 3})
			rng := rand.New(rand.NewPCG(5, 6))
			for range 300 {
				off := rng.Int64N(int64(size) + 100)
				atLeast := 1 + rng.IntN(3*bs)
				atMost := atLeast + rng.IntN(4*bs)
				ps, err := c.SlicePieces(t.Context(), "obj", off, atLeast, atMost)
				avail := max(0, size-int(off))
				if err != nil && err != io.EOF {
					t.Fatalf("SlicePieces(%d, %d, %d): %v", off, atLeast, atMost, err)
				}
				got := bytes.Join(ps, nil)
				if (err == io.EOF) != (avail < atLeast) {
					t.Fatalf("SlicePieces(%d, %d, %d) = %d bytes, %v; %d available", off, atLeast, atMost, len(got), err, avail)
				}
				if len(got) < min(atLeast, avail) || len(got) > atMost {
					t.Fatalf("SlicePieces(%d, %d, %d) = %d bytes", off, atLeast, atMost, len(got))
				}
				for _, p := range ps {
					if len(p) == 0 || cap(p) != len(p) {
						t.Fatalf("SlicePieces(%d, %d, %d): an empty or uncapped piece", off, atLeast, atMost)
					}
				}
				if !bytes.Equal(got, data[off:off+int64(len(got))]) {
					t.Fatalf("SlicePieces(%d, %d, %d): wrong bytes", off, atLeast, atMost)
				}
			}
			if n := c.Stats().StraddleCopyBytes; n != 0 {
				t.Errorf("SlicePieces copied %d bytes", n)
			}
		})
	}
}

// TestSlicePiecesAcrossRunsIsZeroCopy: a range lying in two runs comes
// from SlicePieces as the two runs' own memory, the second piece running
// on to atMost; Slice copies the same range (and counts it in
// StraddleCopyBytes, the metric a pieces read keeps at zero).
func TestSlicePiecesAcrossRunsIsZeroCopy(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 16*bs, Options{ReadAhead: -1, FetchBlocks: 8})
	// Two runs: blocks 0..7 and 8..15.
	for _, off := range []int64{0, 8 * bs} {
		if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 8*bs), off); err != nil {
			t.Fatal(err)
		}
	}
	a, err := c.Slice(t.Context(), "obj", 100, 10, 8*bs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Slice(t.Context(), "obj", 8*bs, 10, 8*bs)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := c.SlicePieces(t.Context(), "obj", 8*bs-1000, 3000, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || len(ps[0]) != 1000 || len(ps[1]) != 4000 {
		t.Fatalf("pieces of %v bytes, want [1000 4000]", lens(ps))
	}
	if &ps[0][0] != &a[8*bs-1000-100] || &ps[1][0] != &b[0] {
		t.Fatal("the pieces are not the runs' memory: the cache copied")
	}
	if !bytes.Equal(bytes.Join(ps, nil), data[8*bs-1000:8*bs+4000]) {
		t.Fatal("wrong bytes")
	}
	if n := c.Stats().StraddleCopyBytes; n != 0 {
		t.Fatalf("StraddleCopyBytes %d after SlicePieces, want 0", n)
	}
	s, err := c.Slice(t.Context(), "obj", 8*bs-1000, 3000, 5000)
	if err != nil || !bytes.Equal(s, data[8*bs-1000:8*bs+2000]) {
		t.Fatalf("straddling Slice: %d bytes, %v", len(s), err)
	}
	if n := c.Stats().StraddleCopyBytes; n != 3000 {
		t.Errorf("StraddleCopyBytes %d after a straddling Slice, want 3000", n)
	}
	if got := src.reads.Load(); got != 2 {
		t.Errorf("%d GETs, want 2", got)
	}
}

func lens(ps [][]byte) []int {
	var n []int
	for _, p := range ps {
		n = append(n, len(p))
	}
	return n
}

// residentBytes is the memory the cache holds: the distinct fetched runs
// reachable from its block map.
func residentBytes(c *Cache) int64 {
	c.rc.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retireExitedLocked()
	seen := map[*run]bool{}
	var n int64
	for _, r := range c.blocks {
		if !seen[r] && r.ready() {
			seen[r] = true
			n += int64(cap(r.buf))
		}
	}
	return n
}

// TestMemoryBound: however much is read, the cache holds at most MaxBytes
// in ristretto plus its staging FIFO, because runs enter and leave whole.
func TestMemoryBound(t *testing.T) {
	const maxBytes = 16 * bs
	opts := Options{MaxBytes: maxBytes, FetchBlocks: 4, ReadAhead: 8}
	c, _, data := setup(t, objstoretest.FileStore(t), 128*bs, opts)
	opts.setDefaults()
	bound := int64(maxBytes) + int64(opts.StagingBlocks)*bs
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 400 {
		var off int64
		if i < 200 {
			off = int64(i%128) * bs // a sequential scan, twice
		} else {
			off = rng.Int64N(int64(len(data) - 3*bs)) // then random reads
		}
		p := make([]byte, 1+rng.IntN(3*bs))
		if _, err := c.ReadAt(t.Context(), "obj", p, off); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			if got := residentBytes(c); got > bound {
				t.Fatalf("after %d reads the cache holds %d bytes, bound %d", i+1, got, bound)
			}
		}
	}
}

// TestMemoryBoundShortRuns: a run that reaches past an object's end keeps
// the buffer it was fetched into, and the bound counts that memory, not
// just the bytes received.
func TestMemoryBoundShortRuns(t *testing.T) {
	const maxBytes = 16 * bs
	opts := Options{MaxBytes: maxBytes, BlockSize: bs, FetchBlocks: 4, ReadAhead: -1}
	store := objstoretest.FileStore(t)
	// One GET of 4 blocks receives just over half its buffer, the most a
	// run keeps without trimming: each holds 4 blocks for 2 received.
	data := make([]byte, 2*bs+1)
	for i := range 40 {
		if err := objstore.Put(t.Context(), store, fmt.Sprintf("obj%d", i), data, objstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	opts.setDefaults()
	bound := int64(maxBytes) + int64(opts.StagingBlocks)*bs
	for i := range 40 {
		// A reader that does not know the size asks for 4 blocks.
		if n, err := c.ReadAt(t.Context(), fmt.Sprintf("obj%d", i), make([]byte, 4*bs), 0); n != len(data) || err != io.EOF {
			t.Fatalf("read %d bytes, %v; want %d, EOF", n, err, len(data))
		}
		if got := residentBytes(c); got > bound {
			t.Fatalf("after %d objects the cache holds %d bytes, bound %d", i+1, got, bound)
		}
	}
}

// TestForget: a forgotten object is fetched again on the next read, and
// slices handed out before stay intact.
func TestForget(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 4*bs, Options{ReadAhead: -1})
	held, err := c.Slice(t.Context(), "obj", 0, bs, bs)
	if err != nil {
		t.Fatal(err)
	}
	c.Forget("obj")
	if got := residentBytes(c); got != 0 {
		t.Errorf("%d bytes resident after Forget", got)
	}
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
	if got := src.reads.Load(); got != 2 {
		t.Errorf("%d GETs, want the forgotten block fetched again", got)
	}
	if !bytes.Equal(held, data[:bs]) {
		t.Errorf("a slice held across Forget changed")
	}
}

// TestConcurrentReadersForgetAndEviction: readers, slicers, advisers and
// Forget race on a cache much smaller than the object; every byte served
// is the object's (run with -race).
func TestConcurrentReadersForgetAndEviction(t *testing.T) {
	c, _, data := setup(t, objstoretest.FileStore(t), 96*bs+77, Options{MaxBytes: 8 * bs, FetchBlocks: 4, ReadAhead: 8, StagingBlocks: 6})
	size := int64(len(data))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 150 {
				off := rng.Int64N(size)
				switch rng.IntN(5) {
				case 0:
					c.Forget("obj")
				case 1:
					c.Advise("obj", off, min(off+int64(rng.IntN(20*bs)), size))
				case 2:
					p := make([]byte, 1+rng.IntN(3*bs))
					n, err := c.ReadAt(t.Context(), "obj", p, off)
					if (err != nil && err != io.EOF) || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
						t.Errorf("ReadAt(%d, %d) = %d, %v or wrong bytes", off, len(p), n, err)
						return
					}
				default:
					atLeast := 1 + rng.IntN(bs)
					s, err := c.Slice(t.Context(), "obj", off, atLeast, atLeast+rng.IntN(8*bs))
					if (err != nil && err != io.EOF) || !bytes.Equal(s, data[off:off+int64(len(s))]) {
						t.Errorf("Slice(%d) = %d bytes, %v or wrong bytes", off, len(s), err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// heldBytes is residentBytes plus the buffers of GETs in flight: all the
// object bytes the cache holds right now.
func heldBytes(c *Cache) (n, staged, cached, inflight int64) { // the parts help debugging
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retireExitedLocked()
	seen := map[*run]bool{}
	for _, r := range c.blocks {
		if seen[r] {
			continue
		}
		seen[r] = true
		switch {
		case r.ready():
			n += int64(cap(r.buf))
			if r.staged {
				staged += int64(cap(r.buf))
			} else {
				cached += int64(cap(r.buf))
			}
		case r.fetching:
			n += r.count * c.opts.BlockSize
			inflight += r.count * c.opts.BlockSize
		}
	}
	return n, staged, cached, inflight
}

// TestManyReadersShareTheBudget: a thousand catch-up readers, each
// scanning its own object from a slow store at once, never make the cache
// hold more than its configured memory (the cache, the staging FIFO, the
// read-ahead budget and the demand GETs' budget) however many readers
// there are, and every reader still gets all its bytes.
func TestManyReadersShareTheBudget(t *testing.T) {
	const (
		readers = 1000
		blk     = 2 << 10
		objSize = 16*blk + 100
	)
	store := objstoretest.FileStore(t)
	data := make([]byte, objSize)
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	for i := range readers {
		if err := objstore.Put(t.Context(), store, fmt.Sprintf("o%04d", i), data, objstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{MaxBytes: 64 * blk, BlockSize: blk, FetchBlocks: 4, ReadAhead: 8, ReadAheadBytes: 32 * blk, FetchBytes: 16 * blk}
	src := &counted{Store: store, delay: time.Millisecond}
	c, err := New(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	opts.setDefaults()
	bound := opts.MaxBytes + int64(opts.StagingBlocks)*blk + opts.ReadAheadBytes + opts.FetchBytes

	var peak, peakAhead atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h, _, _, _ := heldBytes(c); h > peak.Load() {
				peak.Store(h)
			}
			if a := c.Stats().ReadAheadBytes; a > peakAhead.Load() {
				peakAhead.Store(a)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			key := fmt.Sprintf("o%04d", i)
			c.Advise(key, 0, objSize) // what segment's scan does
			for off := int64(0); off < objSize; {
				s, err := c.Slice(ctx, key, off, 1, 4*blk)
				if (err != nil && err != io.EOF) || len(s) == 0 || !bytes.Equal(s, data[off:off+int64(len(s))]) {
					t.Errorf("reader %d at %d: %d bytes, %v or wrong bytes", i, off, len(s), err)
					return
				}
				off += int64(len(s))
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	if p := peak.Load(); p > bound {
		t.Errorf("%d readers: the cache held up to %d bytes, configured bound %d", readers, p, bound)
	}
	if a := peakAhead.Load(); a > opts.ReadAheadBytes {
		t.Errorf("read-ahead budget in use reached %d, budget %d", a, opts.ReadAheadBytes)
	}
	s := c.Stats()
	if s.FetchedBytes < readers*objSize {
		t.Errorf("fetched %d bytes for %d readers of %d", s.FetchedBytes, readers, objSize)
	}
	t.Logf("peak held %d of bound %d; read-ahead peak %d; %+v", peak.Load(), bound, peakAhead.Load(), s)
}

// TestColdSlicesOfOneWindowShareOneGET: a cold Slice fetches the whole
// FetchBlocks-aligned window around its first block, so readers of
// neighbouring ranges of one object (streams sharing an L0 object) are
// served by that one GET instead of sending one each.
func TestColdSlicesOfOneWindowShareOneGET(t *testing.T) {
	c, src, data := setup(t, objstoretest.FileStore(t), 16*bs, Options{ReadAhead: -1, FetchBlocks: 8})
	for _, off := range []int64{5*bs + 7, 2 * bs, 6*bs + 100, 0} {
		got, err := c.Slice(t.Context(), "obj", off, 10, bs+1)
		if err != nil || !bytes.Equal(got, data[off:off+int64(len(got))]) || len(got) < 10 {
			t.Fatalf("Slice(%d): %d bytes, %v", off, len(got), err)
		}
	}
	if got := src.reads.Load(); got != 1 {
		t.Errorf("%d GETs for four slices of one 8-block window, want 1", got)
	}
	// The next window is a GET of its own.
	if _, err := c.Slice(t.Context(), "obj", 9*bs, 10, bs+1); err != nil {
		t.Fatal(err)
	}
	if got := src.reads.Load(); got != 2 {
		t.Errorf("%d GETs after a slice of the second window, want 2", got)
	}
}

// heldSource serves data as one object: ReadAt of the block at offset 0
// (the demand GET in TestReadAheadYieldsToDemand) waits until release is
// closed; ranged GETs (read-ahead) answer only once that demand GET has
// been sent, like a store's response headers arriving after a round trip,
// and stream their bodies 16 KiB per Read, noting any read made while the
// demand GET is held.
type heldSource struct {
	data       []byte
	demandSent chan struct{}
	release    chan struct{}
	ranges     atomic.Int64 // ranged GETs answered
	held       atomic.Bool  // the demand GET is in progress
	watch      atomic.Bool  // note body reads during it
	violations atomic.Int64 // read-ahead body reads while the demand GET was held
}

func (h *heldSource) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if off == 0 {
		h.held.Store(true)
		close(h.demandSent)
		select {
		case <-h.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		h.held.Store(false)
	}
	if off >= int64(len(h.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *heldSource) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	select {
	case <-h.demandSent:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	h.ranges.Add(1)
	end := min(off+length, int64(len(h.data)))
	return io.NopCloser(&heldBody{h: h, rest: h.data[off:end]}), nil
}

type heldBody struct {
	h    *heldSource
	rest []byte
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.h.watch.Load() && b.h.held.Load() {
		b.h.violations.Add(1)
	}
	if len(b.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 16<<10)], b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// TestReadAheadYieldsToDemand: read-ahead GETs sent before a reader's
// demand GET (as a cold read's prefetch of the following objects is) do
// not read their bodies while the demand GET is in progress, so on a
// store bound by bandwidth the reader does not wait for them; a reader
// that catches up with one of them is served at once (it becomes demand
// itself); and once the demand GET is done they complete. Without the
// yield (readRun's gate) the read-ahead bodies are read beside the demand
// one and the test fails on the violations.
func TestReadAheadYieldsToDemand(t *testing.T) {
	data := make([]byte, 64*bs)
	for i := range data {
		data[i] = byte(i*131 + i>>11)
	}
	src := &heldSource{data: data, demandSent: make(chan struct{}), release: make(chan struct{})}
	c, err := New(src, Options{BlockSize: bs, FetchBlocks: 4, ReadAhead: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	src.watch.Store(true)
	// Read-ahead first (blocks 32..47: four GETs of four blocks), then
	// the demand GET (block 0).
	c.Advise("obj", 32*bs, 64*bs)
	type result struct {
		b   []byte
		err error
	}
	demand := make(chan result, 1)
	go func() {
		b, err := c.Slice(t.Context(), "obj", 0, bs, bs)
		demand <- result{b, err}
	}()
	<-src.demandSent
	// Await either outcome: every read-ahead GET answered and holding
	// its body, or a body read during the demand GET.
	deadline := time.Now().Add(30 * time.Second)
	for src.violations.Load() == 0 && (src.ranges.Load() < 4 || c.Stats().ReadAheadYields < 4) {
		if time.Now().After(deadline) {
			t.Fatalf("read-ahead neither yielded nor read: %d ranges answered, %+v", src.ranges.Load(), c.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if v := src.violations.Load(); v > 0 {
		t.Fatalf("read-ahead bodies were read %d times while the reader's demand GET was in progress", v)
	}
	src.watch.Store(false)

	// A reader that reaches a held read-ahead run is not held with it.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := make([]byte, bs)
	if _, err := c.ReadAt(ctx, "obj", p, 33*bs); err != nil || !bytes.Equal(p, data[33*bs:34*bs]) {
		t.Fatalf("read of held read-ahead while another demand GET is in progress: %v", err)
	}
	select {
	case r := <-demand:
		t.Fatalf("demand read returned before its GET was released: %v", r.err)
	default:
	}

	close(src.release)
	r := <-demand
	if r.err != nil || !bytes.Equal(r.b, data[:bs]) {
		t.Fatalf("demand read: %v", r.err)
	}
	// The rest of the read-ahead lands once the demand GET is done.
	for c.Stats().FetchedBytes < 17*bs {
		if time.Now().After(deadline) {
			t.Fatalf("read-ahead did not complete after the demand GET: %+v", c.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	for i := 32; i < 48; i++ {
		if _, err := c.ReadAt(ctx, "obj", p, int64(i)*bs); err != nil || !bytes.Equal(p, data[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	if s := c.Stats(); s.Misses != 1 {
		t.Errorf("%+v: want one demand miss (block 0), the rest read ahead", s)
	}
}

// TestScanFromARunsEndIsOneRun: a scan whose first bytes lie in the last
// block of an earlier run, with the blocks after it missing (a reader of
// the next stream of an L0 object), fetches that block again with the
// rest, so the batch it reads is lent from one run rather than copied out
// of two.
func TestScanFromARunsEndIsOneRun(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c, src, data := setup(t, newStore(t), 32*bs, Options{ReadAhead: -1, FetchBlocks: 8})
			if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 8*bs), 0); err != nil {
				t.Fatal(err)
			}
			off := int64(8*bs - 100)
			head, err := c.Slice(t.Context(), "obj", off, 12, 4*bs)
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.Slice(t.Context(), "obj", off, 4*bs, 4*bs)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.Slice(t.Context(), "obj", off, 4*bs, 4*bs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, data[off:off+4*bs]) || !bytes.Equal(b, a) {
				t.Fatal("slices differ from the object")
			}
			if &a[0] != &b[0] || &a[0] != &head[0] {
				t.Fatalf("the scan's range is copied out of two runs (first slice %d bytes)", len(head))
			}
			if got := src.reads.Load(); got != 2 {
				t.Errorf("%d GETs, want 2", got)
			}
			if got := c.Stats().Refetched; got != 1 {
				t.Errorf("%d blocks fetched again, want 1", got)
			}
		})
	}
}

// TestColdScanAcrossTheWindowIsOneRun: a cold scan whose wanted range
// crosses the end of its aligned window (a batch starting near it) is one
// GET, so the batch is lent from one run rather than copied out of two.
func TestColdScanAcrossTheWindowIsOneRun(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c, src, data := setup(t, newStore(t), 32*bs, Options{ReadAhead: -1, FetchBlocks: 8})
			off := int64(8*bs - 100)
			head, err := c.Slice(t.Context(), "obj", off, 12, 4*bs)
			if err != nil {
				t.Fatal(err)
			}
			a, err := c.Slice(t.Context(), "obj", off, 4*bs, 4*bs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, data[off:off+4*bs]) {
				t.Fatal("slice differs from the object")
			}
			if &a[0] != &head[0] {
				t.Fatalf("the scan's range is copied out of two runs (first slice %d bytes)", len(head))
			}
			if got := src.reads.Load(); got != 1 {
				t.Errorf("%d GETs, want 1", got)
			}
		})
	}
}

// gated decorates a real store: GETs wait at a gate until it opens, and
// the store records how many were waiting at once.
type gated struct {
	objstore.Store
	open chan struct{}
	mu   sync.Mutex
	cur  int
	max  int
}

func (g *gated) wait(ctx context.Context) error {
	g.mu.Lock()
	g.cur++
	g.max = max(g.max, g.cur)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.cur--; g.mu.Unlock() }()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gated) waiting() int { g.mu.Lock(); defer g.mu.Unlock(); return g.cur }

func (g *gated) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := g.wait(ctx); err != nil {
		return 0, err
	}
	return g.Store.ReadAt(ctx, key, p, off)
}

func (g *gated) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.Store.(RangeStreamer).ReadRange(ctx, key, off, length)
}

// TestReadAheadInFlightIsSizedByBytes: read-ahead of many small objects
// (a slow stream's L0 objects, advised one after another by the stream
// service) sends as many GETs at once as the byte budget holds, beyond
// the 16 a fixed count allowed; with a smaller budget, the budget is what
// stops it. Against a 100 ms store, GETs in flight are the reader's speed.
func TestReadAheadInFlightIsSizedByBytes(t *testing.T) {
	const objects, objBlocks = 40, 2
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := mk(t)
			data := make([]byte, objBlocks*bs)
			for i := range objects {
				if err := objstore.Put(t.Context(), store, fmt.Sprintf("small/%02d", i), data, objstore.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct {
				budget int64
				want   int
			}{
				{64 << 20, objects},       // the default budget holds them all
				{10 * objBlocks * bs, 10}, // the budget, not a count, stops at 10
			} {
				g := &gated{Store: store, open: make(chan struct{})}
				c, err := New(g, Options{BlockSize: bs, ReadAheadBytes: tc.budget})
				if err != nil {
					t.Fatal(err)
				}
				for i := range objects {
					c.Advise(fmt.Sprintf("small/%02d", i), 0, objBlocks*bs)
				}
				deadline := time.Now().Add(30 * time.Second)
				for g.waiting() < tc.want && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if got := g.waiting(); got != tc.want {
					t.Errorf("budget %d: %d read-ahead GETs in flight, want %d", tc.budget, got, tc.want)
				}
				if tc.want < objects && c.Stats().ReadAheadSkipped == 0 {
					t.Errorf("budget %d: read-ahead beyond the budget was not counted as skipped", tc.budget)
				}
				close(g.open)
				_ = c.Close()
				if g.max > tc.want {
					t.Errorf("budget %d: up to %d GETs in flight, want at most %d", tc.budget, g.max, tc.want)
				}
			}
		})
	}
}

// TestNeighbourScansShareTheirWindow: scans of consecutive ranges of one
// object (the streams of an L0 object, read by one reader each), each
// starting in the last block of the one before, fetch each window once:
// the second scan, whose first block is at hand, fetches its missing
// blocks on to the end of their window, so the third and fourth find
// theirs in flight. Before, each fetched only its own stretch: a GET per
// range (issue 31's 100 cold readers, docs/benchmarks.md).
func TestNeighbourScansShareTheirWindow(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c, src, data := setup(t, newStore(t), 32*bs, Options{ReadAhead: -1, FetchBlocks: 8})
			for i, r := range [][2]int64{{0, 13 * bs / 2}, {13 * bs / 2, 3 * bs}, {19 * bs / 2, 3 * bs}, {25 * bs / 2, 3 * bs}} {
				got, err := c.SlicePieces(t.Context(), "obj", r[0], 12, int(r[1]))
				n := 0
				for _, p := range got {
					if !bytes.Equal(p, data[r[0]+int64(n):r[0]+int64(n+len(p))]) {
						t.Fatalf("range %d: bytes differ from the object", i)
					}
					n += len(p)
				}
				if err != nil || int64(n) != r[1] {
					t.Fatalf("range %d: %d of %d bytes, %v", i, n, r[1], err)
				}
			}
			if got := src.reads.Load(); got != 2 {
				t.Errorf("%d GETs for four neighbouring ranges in two windows, want 2", got)
			}
		})
	}
}

// TestScanAtHandGrowsNoFurtherThanAWindow: a scan whose first block is at
// hand fetches on to the end of the window of its first missing block and
// no further: a short range is rounded up to that window's end, and a
// long page (lend caps its fetch FetchBlocks past its first block) only
// to the end of the window that cap falls in, so a single reader's pages
// never wait for a GET longer than a window and their own bytes.
func TestScanAtHandGrowsNoFurtherThanAWindow(t *testing.T) {
	c, _, data := setup(t, objstoretest.FileStore(t), 64*bs, Options{ReadAhead: -1, FetchBlocks: 8})
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 8*bs), 0); err != nil { // window [0, 8)
		t.Fatal(err)
	}
	// A page from block 7 of up to 8 blocks: blocks 8..14 missing, the
	// range ends in block 14, inside window [8, 16): rounded up to 15
	// (the GET starts at block 7 again, acquire's refetch of a run's
	// last block).
	if got, err := c.SlicePieces(t.Context(), "obj", 7*bs, 12, 8*bs); err != nil || len(got) == 0 || !bytes.Equal(got[0], data[7*bs:7*bs+len(got[0])]) {
		t.Fatalf("short page: %v", err)
	}
	r := runAt(c, "obj", 8)
	if r == nil || r.first+r.count != 16 {
		t.Fatalf("short page's GET %s, want one ending with block 15", runSpan(r))
	}
	// A page from block 15 of up to 16 blocks: its fetch reaches
	// FetchBlocks past its first block (block 22, lend's cap); the rule
	// takes it to the end of window [16, 24) and no further.
	if _, err := c.SlicePieces(t.Context(), "obj", 15*bs, 12, 16*bs); err != nil {
		t.Fatal(err)
	}
	r = runAt(c, "obj", 16)
	if r == nil || r.first+r.count != 24 {
		t.Fatalf("long page's GET %s, want one ending with block 23", runSpan(r))
	}
	// A page from block 33 (blocks 32, 33 at hand) reaching block 40,
	// past its first missing block's window [32, 40): nothing is added,
	// not the rest of window [40, 48).
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 2*bs), 32*bs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SlicePieces(t.Context(), "obj", 33*bs, 12, 8*bs); err != nil {
		t.Fatal(err)
	}
	r = runAt(c, "obj", 34)
	if r == nil || r.first+r.count != 41 {
		t.Fatalf("third page's GET %s, want one ending with block 40", runSpan(r))
	}
}

// runSpan describes a run's blocks for a test failure.
func runSpan(r *run) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("[%d, %d)", r.first, r.first+r.count)
}

// runAt is the run holding block idx of key (nil if none), read under the
// cache's lock.
func runAt(c *Cache, key string, idx int64) *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks[blockID{key, idx}]
}
