package cache

import (
	"bytes"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// recycleOpts is a cache that keeps one GET of 4 blocks at a time and
// nothing in ristretto (MaxBytes 1: no run fits), so a run leaves the
// cache as soon as the next one is staged: eviction is deterministic.
func recycleOpts() Options {
	return Options{MaxBytes: 1, FetchBlocks: 4, ReadAhead: -1, StagingBlocks: 4}
}

// isRecycled reads r's recycled flag under the cache's lock.
func isRecycled(c *Cache, r *run) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.recycled
}

// evictWindow0 reads the object's second window, which stages a new run
// and pushes the first window's run out of the cache.
func evictWindow0(t *testing.T, c *Cache, first *run) {
	t.Helper()
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 4*bs); err != nil {
		t.Fatal(err)
	}
	if runAt(c, "obj", 0) == first {
		t.Fatalf("window 0's run is still in the cache")
	}
}

// TestLeasedRunRecycledOnlyAfterRelease: a run lent by LeasePieces stays
// the object's bytes while the lease is held, even after it left the
// cache; released, its buffer goes to the free list and the next GET
// writes into it.
func TestLeasedRunRecycledOnlyAfterRelease(t *testing.T) {
	c, _, data := setup(t, objstoretest.FileStore(t), 16*bs, recycleOpts())
	pieces, release, err := c.LeasePieces(t.Context(), "obj", 0, bs, 4*bs)
	if err != nil || release == nil {
		t.Fatalf("LeasePieces: %v, release %v", err, release != nil)
	}
	r := runAt(c, "obj", 0)
	evictWindow0(t, c, r)
	if isRecycled(c, r) {
		t.Fatal("a leased run was recycled while its lease is held")
	}
	if s := c.Stats(); s.RecycledBytes != 0 {
		t.Errorf("RecycledBytes %d while the only evicted run is leased", s.RecycledBytes)
	}
	// Another GET must not write into the leased memory.
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 8*bs); err != nil {
		t.Fatal(err)
	}
	if got := bytes.Join(pieces, nil); !bytes.Equal(got, data[:len(got)]) || len(got) != 4*bs {
		t.Fatalf("leased pieces changed while held (%d bytes)", len(got))
	}
	release()
	release() // idempotent: must not count twice
	if !isRecycled(c, r) {
		t.Fatal("released run that left the cache was not recycled")
	}
	s := c.Stats()
	if s.RecycledBytes < 4*bs || s.PooledBytes == 0 {
		t.Errorf("stats after release: recycled %d, pooled %d", s.RecycledBytes, s.PooledBytes)
	}
	reused := s.ReusedBytes
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 12*bs); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().ReusedBytes; got != reused+4*bs {
		t.Errorf("ReusedBytes %d, want %d: the next GET should take the recycled buffer", got, reused+4*bs)
	}
}

// TestLeaseOfCachedRunNotRecycled: releasing a lease of a run that is
// still in the cache does not recycle it (it is recycled when it leaves).
func TestLeaseOfCachedRunNotRecycled(t *testing.T) {
	c, _, _ := setup(t, objstoretest.FileStore(t), 16*bs, recycleOpts())
	_, release, err := c.LeasePieces(t.Context(), "obj", 0, bs, 4*bs)
	if err != nil {
		t.Fatal(err)
	}
	r := runAt(c, "obj", 0)
	release()
	if isRecycled(c, r) || runAt(c, "obj", 0) != r {
		t.Fatal("a run still in the cache was recycled on release")
	}
	evictWindow0(t, c, r)
	if !isRecycled(c, r) {
		t.Fatal("released run not recycled when it left the cache")
	}
}

// TestSliceLentRunIsNeverRecycled: a run lent without a reference (Slice,
// SlicePieces) escapes: it is never recycled, and the slice stays the
// object's bytes however many GETs follow.
func TestSliceLentRunIsNeverRecycled(t *testing.T) {
	for _, how := range []string{"Slice", "SlicePieces"} {
		t.Run(how, func(t *testing.T) {
			c, _, data := setup(t, objstoretest.FileStore(t), 16*bs, recycleOpts())
			var held []byte
			if how == "Slice" {
				s, err := c.Slice(t.Context(), "obj", 0, bs, 4*bs)
				if err != nil {
					t.Fatal(err)
				}
				held = s
			} else {
				ps, err := c.SlicePieces(t.Context(), "obj", 0, bs, 4*bs)
				if err != nil {
					t.Fatal(err)
				}
				held = ps[0]
			}
			r := runAt(c, "obj", 0)
			evictWindow0(t, c, r)
			for off := int64(8 * bs); off < 16*bs; off += 4 * bs {
				if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), off); err != nil {
					t.Fatal(err)
				}
			}
			if isRecycled(c, r) {
				t.Fatal("a run lent without a reference was recycled")
			}
			if !bytes.Equal(held, data[:len(held)]) {
				t.Fatal("a slice lent without a reference changed")
			}
			if s := c.Stats(); s.EscapedRuns == 0 {
				t.Errorf("EscapedRuns 0 after %s", how)
			}
		})
	}
}

// TestReadAtRunsAreRecycled: ReadAt copies out and keeps nothing, so its
// runs are recycled once they leave the cache.
func TestReadAtRunsAreRecycled(t *testing.T) {
	c, _, _ := setup(t, objstoretest.FileStore(t), 16*bs, recycleOpts())
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 0); err != nil {
		t.Fatal(err)
	}
	r := runAt(c, "obj", 0)
	evictWindow0(t, c, r)
	if !isRecycled(c, r) {
		t.Fatal("a run only copied from was not recycled after it left the cache")
	}
	if c.Stats().RecycledBytes != 4*bs {
		t.Errorf("RecycledBytes %d, want %d", c.Stats().RecycledBytes, 4*bs)
	}
}

// TestShortRunsAreNotPooled: a run cut short by the object's end keeps a
// buffer of its own size, which is never pooled.
func TestShortRunsAreNotPooled(t *testing.T) {
	c, _, _ := setup(t, objstoretest.FileStore(t), 4*bs+100, recycleOpts())
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 4*bs); err != io.EOF {
		t.Fatalf("read at the object's end: %v, want EOF", err)
	}
	r := runAt(c, "obj", 4)
	if _, err := c.ReadAt(t.Context(), "obj", make([]byte, 4*bs), 0); err != nil {
		t.Fatal(err)
	}
	if runAt(c, "obj", 4) == r {
		t.Fatal("the short run is still in the cache")
	}
	if isRecycled(c, r) {
		t.Error("a short run's buffer was pooled")
	}
}

// TestPretouchFillsThePool: Pretouch puts PoolBytes of buffers on the
// free list, and the first GETs write into them.
func TestPretouchFillsThePool(t *testing.T) {
	c, _, data := setup(t, objstoretest.FileStore(t), 16*bs, Options{FetchBlocks: 4, ReadAhead: -1, PoolBytes: 8 * bs})
	if n := c.Pretouch(); n != 8*bs {
		t.Fatalf("Pretouch added %d bytes, want %d", n, 8*bs)
	}
	if n := c.Pretouch(); n != 0 {
		t.Fatalf("a second Pretouch added %d bytes to a full pool", n)
	}
	if s := c.Stats(); s.PooledBytes != 8*bs {
		t.Fatalf("PooledBytes %d, want %d", s.PooledBytes, 8*bs)
	}
	p := make([]byte, 8*bs)
	if _, err := c.ReadAt(t.Context(), "obj", p, 0); err != nil || !bytes.Equal(p, data[:8*bs]) {
		t.Fatalf("read through pre-touched buffers: %v or wrong bytes", err)
	}
	if s := c.Stats(); s.ReusedBytes != 8*bs || s.PooledBytes != 0 {
		t.Errorf("after two GETs: reused %d, pooled %d; want %d, 0", s.ReusedBytes, s.PooledBytes, 8*bs)
	}
}

// TestLeasesUnderEvictionRace: readers lease random ranges of several
// objects through a cache far smaller than them, so runs leave the
// cache (and their buffers are recycled into other objects' GETs)
// constantly; each reader checks every byte it leased when it gets it
// and again after holding it a while, just before releasing it. A
// release that came early (or a recycle of a run still leased) lets a
// GET of another range write into bytes a reader still holds, and the
// second check (or -race) sees it. Every store the package tests.
func TestLeasesUnderEvictionRace(t *testing.T) {
	for name, mk := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := mk(t)
			const objects, size = 3, 40*bs + 123
			datas := make([][]byte, objects)
			for i := range datas {
				d := make([]byte, size)
				rng := rand.New(rand.NewPCG(uint64(i), 1))
				for j := range d {
					d[j] = byte(rng.Uint32())
				}
				datas[i] = d
				if err := objstore.Put(t.Context(), store, "obj"+strconv.Itoa(i), d, objstore.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			c, err := New(&counted{Store: store}, Options{BlockSize: bs, MaxBytes: 8 * bs, FetchBlocks: 4, ReadAhead: 8, ReadAheadBytes: 8 * bs, StagingBlocks: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rounds := 150
			if name != "file" {
				rounds = 40
			}
			var wg sync.WaitGroup
			for g := range 6 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for range rounds {
						i := rng.IntN(objects)
						key, data := "obj"+strconv.Itoa(i), datas[i]
						off := rng.Int64N(size)
						atLeast := 1 + rng.IntN(2*bs)
						pieces, release, err := c.LeasePieces(t.Context(), key, off, atLeast, atLeast+rng.IntN(6*bs))
						if err != nil && err != io.EOF {
							t.Errorf("LeasePieces(%s, %d): %v", key, off, err)
							return
						}
						check := func(when string) bool {
							at := off
							for _, p := range pieces {
								if !bytes.Equal(p, data[at:at+int64(len(p))]) {
									t.Errorf("%s [%d, +%d) %s: not the object's bytes", key, at, len(p), when)
									return false
								}
								at += int64(len(p))
							}
							return true
						}
						ok := check("when leased")
						// Hold the lease while the others fetch and evict.
						for range rng.IntN(20) {
							runtime.Gosched()
						}
						ok = ok && check("just before release")
						if release != nil {
							release()
						}
						if !ok {
							return
						}
					}
				})
			}
			wg.Wait()
			if s := c.Stats(); s.RecycledBytes == 0 || s.ReusedBytes == 0 {
				t.Errorf("no recycling happened (recycled %d, reused %d): the test did not exercise it", s.RecycledBytes, s.ReusedBytes)
			}
		})
	}
}
