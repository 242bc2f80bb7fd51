// Package cache is a block cache for reads from object storage, with
// read-ahead for sequential readers.
//
// Objects are cut into fixed-size blocks (BlockSize, 256 KiB by default).
// A block is identified by (object key, block index); tiering's objects are
// immutable once committed, so a cached block never needs invalidation.
// Blocks live in a ristretto cache whose cost is the block's byte length,
// so MaxBytes bounds the memory the cache holds.
//
//	ReadAt(key, p, off)
//	  │ blocks covering [off, off+len(p))
//	  ├─ staged or cached? ── copy out
//	  └─ otherwise ─ one ranged GET per missing block, in parallel;
//	                 concurrent readers of one block share one GET
//
// A cold read therefore waits for the block(s) it touches, never for the
// whole object. A reader that moves forward through an object (the catch-up
// of a consumer behind the tail) triggers read-ahead: the next ReadAhead
// blocks are fetched in parallel in the background, so a sequential reader
// sees several GETs in flight instead of one at a time. Readers that know
// what they will read say so with Advise (segment.ReadStream does, for the
// stream's byte range), which starts read-ahead at once and keeps it inside
// the range: an L0 object holds many streams, and fetching the neighbours'
// bytes would waste bandwidth.
//
// Prefetched blocks are kept in a small staging area until read (ristretto
// may decline to admit a block under its admission policy, which must not
// make the read-ahead useless), and every fetched block is also offered to
// ristretto for later readers.
//
// A Cache is safe for concurrent use. It implements segment.RangeReader.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Source is where blocks come from: objstore.Store implements it.
type Source interface {
	ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error)
}

// Options configure a Cache. Zero values mean the defaults in the field
// comments.
type Options struct {
	// MaxBytes bounds the bytes held by the cache proper (default 256 MiB).
	// Staged read-ahead blocks (at most StagingBlocks) come on top.
	MaxBytes int64
	// BlockSize is the unit of fetching and caching (default 256 KiB). It
	// trades the latency of a cold read (one block) against requests per
	// byte.
	BlockSize int64
	// ReadAhead is how many blocks ahead of a sequential reader are fetched
	// in the background (default 8, i.e. 2 MiB in flight); negative
	// disables read-ahead.
	ReadAhead int
	// Parallelism bounds concurrent background fetches (default 8). Demand
	// reads are not limited by it.
	Parallelism int
	// StagingBlocks bounds fetched blocks kept outside ristretto until read
	// (default 4*ReadAhead + 16).
	StagingBlocks int
	// FetchTimeout bounds one block GET (default 30s). Fetches run on the
	// cache's own context, so a block that one reader gave up on still
	// lands for the others.
	FetchTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 256 << 10
	}
	if o.ReadAhead == 0 {
		o.ReadAhead = 8
	}
	if o.ReadAhead < 0 {
		o.ReadAhead = 0
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 8
	}
	if o.StagingBlocks <= 0 {
		o.StagingBlocks = 4*o.ReadAhead + 16
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 30 * time.Second
	}
}

// Stats are cumulative counters.
type Stats struct {
	Hits         int64 // blocks served from memory
	Misses       int64 // blocks a reader had to fetch itself
	Joined       int64 // blocks a reader waited for while another fetch was in flight (often read-ahead)
	Prefetches   int64 // background block fetches started
	FetchedBytes int64 // bytes received from the source
}

type blockID struct {
	key string
	idx int64
}

// block is an immutable fetched block; len(data) < BlockSize marks the
// object's last block.
type block struct {
	id   blockID
	data []byte
}

type fetch struct {
	done     chan struct{}
	blk      *block
	err      error
	prefetch bool          // background fetch nobody has asked for yet; guarded by Cache.mu
	promote  chan struct{} // closed when a reader starts waiting for a prefetch
}

// seqState tracks one object's reader for read-ahead.
type seqState struct {
	next  int64 // block after the last one read
	limit int64 // read-ahead stops before this block (-1: none advised)
	end   int64 // first block past the object's end, once known (-1: unknown)
	ahead int64 // read-ahead issued up to (exclusive)
}

// maxSeqStates bounds per-object read-ahead state; past it the state is
// forgotten (read-ahead restarts on the next sequential access).
const maxSeqStates = 4096

// Cache is a block cache over a Source.
type Cache struct {
	src  Source
	opts Options
	rc   *ristretto.Cache[string, *block]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}

	mu       sync.Mutex
	inflight map[blockID]*fetch
	staged   map[blockID]*block
	order    []blockID // staging FIFO
	seq      map[string]*seqState
	closed   bool

	hits, misses, joined, prefetches, fetched atomic.Int64
}

// New returns a cache over src.
func New(src Source, opts Options) (*Cache, error) {
	opts.setDefaults()
	blocks := max(opts.MaxBytes/opts.BlockSize, 1)
	rc, err := ristretto.NewCache(&ristretto.Config[string, *block]{
		NumCounters:        max(10*blocks, 1000),
		MaxCost:            opts.MaxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cache{
		src: src, opts: opts, rc: rc, ctx: ctx, cancel: cancel,
		sem:      make(chan struct{}, opts.Parallelism),
		inflight: map[blockID]*fetch{},
		staged:   map[blockID]*block{},
		seq:      map[string]*seqState{},
	}, nil
}

// Close stops background fetches, waits for them and drops the cache.
// Reads in progress fail; it is idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.rc.Close()
	return nil
}

// Stats returns the counters so far.
func (c *Cache) Stats() Stats {
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Joined: c.joined.Load(),
		Prefetches: c.prefetches.Load(), FetchedBytes: c.fetched.Load(),
	}
}

// BlockSize returns the block size in use.
func (c *Cache) BlockSize() int64 { return c.opts.BlockSize }

func rcKey(id blockID) string { return id.key + "\x00" + strconv.FormatInt(id.idx, 10) }

// lookup returns a block held in memory, or nil. Called with c.mu held.
func (c *Cache) lookupLocked(id blockID) *block {
	if b, ok := c.staged[id]; ok {
		return b
	}
	if b, ok := c.rc.Get(rcKey(id)); ok && b.id == id {
		return b
	}
	return nil
}

// ReadAt reads like objstore.Store.ReadAt, through the cache: io.ReaderAt
// semantics, io.EOF when the object ends first.
func (c *Cache) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("cache: read %q: negative offset %d", key, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	bs := c.opts.BlockSize
	first, last := off/bs, (off+int64(len(p))-1)/bs
	blocks := make([]*block, last-first+1)
	waits := make([]*fetch, len(blocks))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errors.New("cache: closed")
	}
	for i := range blocks {
		id := blockID{key, first + int64(i)}
		if b := c.lookupLocked(id); b != nil {
			blocks[i] = b
			c.hits.Add(1)
			continue
		}
		if f, ok := c.inflight[id]; ok {
			if f.prefetch {
				// Someone needs it now: let it skip the background queue.
				f.prefetch = false
				close(f.promote)
			}
			waits[i] = f
			c.joined.Add(1)
			continue
		}
		c.misses.Add(1)
		waits[i] = c.startLocked(id, false)
	}
	c.mu.Unlock()
	// Fetches run concurrently; wait for all of them.
	for i, f := range waits {
		if f == nil {
			continue
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if f.err != nil {
			return 0, f.err
		}
		blocks[i] = f.blk
	}
	n := 0
	eof := false
	for i, b := range blocks {
		start := (first + int64(i)) * bs
		lo := max(off-start, 0)
		if lo >= int64(len(b.data)) {
			eof = true
			break
		}
		n += copy(p[n:], b.data[lo:])
		if int64(len(b.data)) < bs {
			eof = n < len(p)
			break
		}
	}
	c.afterRead(key, first, last, blocks[len(blocks)-1])
	if eof || n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// startLocked starts fetching block id. Called with c.mu held.
func (c *Cache) startLocked(id blockID, prefetch bool) *fetch {
	f := &fetch{done: make(chan struct{}), prefetch: prefetch, promote: make(chan struct{})}
	c.inflight[id] = f
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if prefetch {
			select {
			case c.sem <- struct{}{}:
				defer func() { <-c.sem }()
			case <-f.promote:
			case <-c.ctx.Done():
				c.finish(id, f, nil, c.ctx.Err())
				return
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.FetchTimeout)
		defer cancel()
		buf := make([]byte, c.opts.BlockSize)
		n, err := c.src.ReadAt(ctx, id.key, buf, id.idx*c.opts.BlockSize)
		if errors.Is(err, io.EOF) {
			err = nil // a short (or empty) block marks the end of the object
		}
		c.fetched.Add(int64(n))
		if err != nil {
			c.finish(id, f, nil, err)
			return
		}
		c.finish(id, f, &block{id: id, data: buf[:n:n]}, nil)
	}()
	return f
}

func (c *Cache) finish(id blockID, f *fetch, b *block, err error) {
	c.mu.Lock()
	delete(c.inflight, id)
	f.blk, f.err = b, err
	demanded := !f.prefetch
	if b != nil {
		if !demanded {
			c.stageLocked(b)
		}
		if len(b.data) > 0 {
			c.rc.Set(rcKey(id), b, int64(len(b.data)))
		}
		if int64(len(b.data)) < c.opts.BlockSize {
			if st := c.seq[id.key]; st != nil && (st.end < 0 || id.idx+1 < st.end) {
				st.end = id.idx + 1
			}
		}
	}
	c.mu.Unlock()
	close(f.done)
	// ristretto applies Sets asynchronously; waiting here (off the
	// reader's path) makes a block read twice in a row a hit.
	if b != nil && demanded {
		c.rc.Wait()
	}
}

func (c *Cache) stageLocked(b *block) {
	if _, ok := c.staged[b.id]; ok {
		return
	}
	c.staged[b.id] = b
	c.order = append(c.order, b.id)
	for len(c.order) > c.opts.StagingBlocks {
		delete(c.staged, c.order[0])
		c.order = c.order[1:]
	}
}

// afterRead updates the read-ahead state of key after a read of blocks
// [first, last] and issues read-ahead if the reader is sequential.
func (c *Cache) afterRead(key string, first, last int64, lastBlk *block) {
	if c.opts.ReadAhead == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.seq[key]
	if st == nil {
		if len(c.seq) >= maxSeqStates {
			clear(c.seq)
		}
		st = &seqState{next: -1, limit: -1, end: -1}
		c.seq[key] = st
	}
	if int64(len(lastBlk.data)) < c.opts.BlockSize {
		st.end = last + 1
	}
	sequential := st.next >= 0 && (first == st.next || first == st.next-1)
	advised := st.limit >= 0 && last+1 < st.limit
	st.next = last + 1
	if sequential || advised {
		c.readAheadLocked(key, st, last+1)
	}
}

// readAheadLocked issues fetches for up to ReadAhead blocks from block
// from, within the advised limit and the known object end.
func (c *Cache) readAheadLocked(key string, st *seqState, from int64) {
	stop := from + int64(c.opts.ReadAhead)
	if st.limit >= 0 {
		stop = min(stop, st.limit)
	}
	if st.end >= 0 {
		stop = min(stop, st.end)
	}
	for idx := max(from, st.ahead); idx < stop; idx++ {
		id := blockID{key, idx}
		if _, ok := c.inflight[id]; ok {
			continue
		}
		if _, ok := c.staged[id]; ok {
			continue
		}
		// Not probing ristretto here would refetch cached blocks; probing
		// counts as an access, which is fine for blocks about to be read.
		if b, ok := c.rc.Get(rcKey(id)); ok && b.id == id {
			continue
		}
		c.prefetches.Add(1)
		c.startLocked(id, true)
	}
	st.ahead = max(st.ahead, stop)
}

// Advise tells the cache that a reader is about to read [off, end) of key
// sequentially. Read-ahead starts now, for up to ReadAhead blocks, and
// continues as the reader advances, never past end. The read path calls it
// for the range it is reading and, to overlap object boundaries, for the
// next object's range before it finishes the current one.
func (c *Cache) Advise(key string, off, end int64) {
	if c.opts.ReadAhead == 0 || end <= off || off < 0 {
		return
	}
	bs := c.opts.BlockSize
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	st := c.seq[key]
	if st == nil {
		if len(c.seq) >= maxSeqStates {
			clear(c.seq)
		}
		st = &seqState{next: -1, end: -1}
		c.seq[key] = st
	}
	st.limit = (end + bs - 1) / bs
	first := off / bs
	if st.ahead < first || st.ahead > st.limit {
		st.ahead = first
	}
	c.readAheadLocked(key, st, first)
}
