// Package cache is a block cache for reads from object storage, with
// read-ahead for sequential readers.
//
// Objects are cut into fixed-size blocks (BlockSize, 128 KiB by default).
// A block is identified by (object key, block index); tiering's objects are
// immutable once committed, so a cached block never needs invalidation.
// Blocks live in a ristretto cache whose cost is the block's byte length,
// so MaxBytes bounds the memory the cache holds.
//
//	ReadAt(key, p, off)
//	  │ blocks covering [off, off+len(p))
//	  ├─ staged or cached? ── copy out
//	  └─ otherwise ─ one ranged GET per run of consecutive missing blocks;
//	                 concurrent readers of one block share one GET
//
// A cold read therefore waits for the block(s) it touches, never for the
// whole object. A reader that moves forward through an object (the catch-up
// of a consumer behind the tail) triggers read-ahead: the next ReadAhead
// blocks are fetched in the background as large runs (FetchBlocks per GET,
// Parallelism GETs at a time), so a sequential reader pays few per-request
// costs and finds its next bytes already there. Readers that know
// what they will read say so with Advise (segment.ReadStream does, for the
// stream's byte range), which starts read-ahead at once and keeps it inside
// the range: an L0 object holds many streams, and fetching the neighbours'
// bytes would waste bandwidth.
//
// Fetched blocks are kept in a small FIFO staging area as well as offered
// to ristretto: ristretto applies writes asynchronously and may decline a
// block under its admission policy, and neither may make read-ahead useless
// or turn the next read of a just-fetched block into a second GET.
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

// RangeStreamer is the optional Source capability (objstore.RangeStreamer)
// that lets one GET fill many blocks without an intermediate copy.
type RangeStreamer interface {
	ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
}

// readRun streams the range starting at off into bufs, in order, and
// returns the bytes read; a range that ends early is not an error (the
// object ended), a stream cut short is.
func readRun(ctx context.Context, rs RangeStreamer, key string, off int64, bufs [][]byte) (int64, error) {
	var total int64
	for _, b := range bufs {
		total += int64(len(b))
	}
	rc, err := rs.ReadRange(ctx, key, off, total)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	// Not io.ReadFull: it reports both "the object ended" and "the stream
	// was cut" as io.ErrUnexpectedEOF. A RangeStreamer ends a complete
	// range with io.EOF and a cut one with another error.
	var n int64
	for _, b := range bufs {
		for f := 0; f < len(b); {
			m, err := rc.Read(b[f:])
			f += m
			n += int64(m)
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Options configure a Cache. Zero values mean the defaults in the field
// comments.
type Options struct {
	// MaxBytes bounds the bytes held by the cache proper (default 256 MiB).
	// The staging FIFO (StagingBlocks) comes on top.
	MaxBytes int64
	// BlockSize is the unit of caching (default 128 KiB): a cold random
	// read waits for the blocks it touches and nothing more.
	BlockSize int64
	// FetchBlocks is the most blocks one GET fetches (default 32, i.e.
	// 4 MiB). Consecutive missing blocks of one read, and read-ahead, are
	// fetched as runs of up to this many blocks: object stores charge a
	// fixed cost per request, so a sequential reader wants few large GETs
	// while a random reader wants small ones.
	FetchBlocks int
	// ReadAhead is how many blocks ahead of a sequential reader are kept in
	// flight or fetched (default 128, i.e. 16 MiB); negative disables
	// read-ahead. It is refilled when half of it has been consumed, so
	// read-ahead GETs are large.
	ReadAhead int
	// Parallelism bounds concurrent read-ahead GETs (default 3: 12 MiB in
	// flight with the default run size). Against remote S3, where one
	// connection is slower than the network, raise it together with
	// ReadAhead. Demand reads are not limited by it.
	Parallelism int
	// StagingBlocks bounds the FIFO of recently fetched blocks kept besides
	// ristretto (default ReadAhead + 2*FetchBlocks: the read-ahead window
	// and the runs in flight beyond it).
	StagingBlocks int
	// FetchTimeout bounds one GET (default 30s). Fetches run on the cache's
	// own context, so a block that one reader gave up on still lands for
	// the others.
	FetchTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 128 << 10
	}
	if o.FetchBlocks <= 0 {
		o.FetchBlocks = 32
	}
	if o.ReadAhead == 0 {
		o.ReadAhead = 128
	}
	if o.ReadAhead < 0 {
		o.ReadAhead = 0
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 3
	}
	if o.StagingBlocks <= 0 {
		o.StagingBlocks = o.ReadAhead + 2*o.FetchBlocks
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 30 * time.Second
	}
}

// Stats are cumulative counters.
type Stats struct {
	Hits         int64 // blocks served from memory
	Misses       int64 // blocks a reader had to fetch itself
	Joined       int64 // blocks a reader waited for while a fetch was in flight (often read-ahead)
	Prefetches   int64 // blocks fetched by read-ahead
	Requests     int64 // GETs sent to the source
	FetchedBytes int64 // bytes received from the source
}

type blockID struct {
	key string
	idx int64
}

// block is an immutable fetched block; len(data) < BlockSize marks the
// object's last block (or a block past its end).
type block struct {
	id   blockID
	data []byte
}

// run is one GET covering consecutive blocks.
type run struct {
	prefetch bool          // nobody waits for it yet; guarded by Cache.mu
	promote  chan struct{} // closed when a reader starts waiting on a prefetch
}

type fetch struct {
	done chan struct{}
	blk  *block
	err  error
	run  *run
}

// seqState tracks one object's reader for read-ahead.
type seqState struct {
	next  int64 // block after the last one read (-1: none yet)
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

	runBufs sync.Pool // *[]byte of run GETs

	hits, misses, joined, prefetches, requests, fetched atomic.Int64
}

// runBuf returns a pooled buffer of at least n bytes.
func (c *Cache) runBuf(n int64) *[]byte {
	if pb, ok := c.runBufs.Get().(*[]byte); ok && int64(cap(*pb)) >= n {
		return pb
	}
	b := make([]byte, int64(c.opts.FetchBlocks)*c.opts.BlockSize)
	return &b
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
		Prefetches: c.prefetches.Load(), Requests: c.requests.Load(), FetchedBytes: c.fetched.Load(),
	}
}

// BlockSize returns the block size in use.
func (c *Cache) BlockSize() int64 { return c.opts.BlockSize }

func rcKey(id blockID) string { return id.key + "\x00" + strconv.FormatInt(id.idx, 10) }

// presentLocked reports whether block id is in memory or being fetched.
func (c *Cache) presentLocked(id blockID) bool {
	if _, ok := c.inflight[id]; ok {
		return true
	}
	if _, ok := c.staged[id]; ok {
		return true
	}
	b, ok := c.rc.Get(rcKey(id))
	return ok && b.id == id
}

// lookupLocked returns a block held in memory, or nil.
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
	runStart := int64(-1)
	flush := func(end int64) { // start a GET for missing blocks [runStart, end)
		if runStart >= 0 {
			for i, f := range c.startRunLocked(key, runStart, end-runStart, false) {
				waits[runStart-first+int64(i)] = f
			}
			runStart = -1
		}
	}
	for i := range blocks {
		idx := first + int64(i)
		id := blockID{key, idx}
		if b := c.lookupLocked(id); b != nil {
			flush(idx)
			blocks[i] = b
			c.hits.Add(1)
			continue
		}
		if f, ok := c.inflight[id]; ok {
			flush(idx)
			if f.run.prefetch {
				// Someone needs it now: let it skip the read-ahead queue.
				f.run.prefetch = false
				close(f.run.promote)
			}
			waits[i] = f
			c.joined.Add(1)
			continue
		}
		c.misses.Add(1)
		if runStart < 0 {
			runStart = idx
		} else if idx-runStart == int64(c.opts.FetchBlocks) {
			flush(idx)
			runStart = idx
		}
	}
	flush(last + 1)
	c.mu.Unlock()
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

// startRunLocked starts one GET for blocks [first, first+count) of key
// and returns their fetches. Called with c.mu held.
func (c *Cache) startRunLocked(key string, first, count int64, prefetch bool) []*fetch {
	r := &run{prefetch: prefetch, promote: make(chan struct{})}
	fs := make([]*fetch, count)
	for i := range fs {
		fs[i] = &fetch{done: make(chan struct{}), run: r}
		c.inflight[blockID{key, first + int64(i)}] = fs[i]
	}
	if prefetch {
		c.prefetches.Add(count)
	}
	c.requests.Add(1)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if prefetch {
			select {
			case c.sem <- struct{}{}:
				defer func() { <-c.sem }()
			case <-r.promote:
			case <-c.ctx.Done():
				c.finish(key, first, fs, nil, 0, c.ctx.Err())
				return
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.FetchTimeout)
		defer cancel()
		// Each block owns its memory, so that evicting a block frees it
		// and MaxBytes stays an honest bound. A run is streamed straight
		// into its blocks when the source can stream a range; otherwise it
		// is read into a pooled buffer and copied out.
		bs := c.opts.BlockSize
		bufs := make([][]byte, count)
		for i := range bufs {
			bufs[i] = make([]byte, bs)
		}
		var n int64
		var err error
		if rs, ok := c.src.(RangeStreamer); ok && count > 1 {
			n, err = readRun(ctx, rs, key, first*bs, bufs)
		} else if count == 1 {
			var m int
			m, err = c.src.ReadAt(ctx, key, bufs[0], first*bs)
			n = int64(m)
		} else {
			pb := c.runBuf(count * bs)
			var m int
			m, err = c.src.ReadAt(ctx, key, (*pb)[:count*bs], first*bs)
			n = int64(m)
			for i := range bufs {
				copy(bufs[i], (*pb)[min(int64(i)*bs, n):min(int64(i+1)*bs, n)])
			}
			c.runBufs.Put(pb)
		}
		if errors.Is(err, io.EOF) {
			err = nil // short (or empty) blocks mark the end of the object
		}
		c.fetched.Add(n)
		c.finish(key, first, fs, bufs, n, err)
	}()
	return fs
}

// finish hands the result of one run to its fetches, stages the blocks
// and offers them to ristretto.
func (c *Cache) finish(key string, first int64, fs []*fetch, bufs [][]byte, n int64, err error) {
	bs := c.opts.BlockSize
	c.mu.Lock()
	for i, f := range fs {
		id := blockID{key, first + int64(i)}
		delete(c.inflight, id)
		if err != nil {
			f.err = err
			continue
		}
		m := min(max(n-int64(i)*bs, 0), bs)
		data := bufs[i][:m:m]
		b := &block{id: id, data: data}
		f.blk = b
		// Every fetched block is staged: ristretto applies Sets
		// asynchronously and may decline a new block under its admission
		// policy, and neither may turn the next read of the block
		// (read-ahead, or a scan reading a block in several chunks) into a
		// second GET.
		c.stageLocked(b)
		if len(data) > 0 {
			c.rc.Set(rcKey(id), b, int64(len(data)))
		}
		if int64(len(data)) < bs {
			if st := c.seq[key]; st != nil && (st.end < 0 || id.idx+1 < st.end) {
				st.end = id.idx + 1
			}
		}
	}
	c.mu.Unlock()
	for _, f := range fs {
		close(f.done)
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

func (c *Cache) seqLocked(key string) *seqState {
	st := c.seq[key]
	if st == nil {
		if len(c.seq) >= maxSeqStates {
			clear(c.seq)
		}
		st = &seqState{next: -1, limit: -1, end: -1}
		c.seq[key] = st
	}
	return st
}

// afterRead updates the read-ahead state of key after a read of blocks
// [first, last] and issues read-ahead if the reader is sequential or
// inside an advised range.
func (c *Cache) afterRead(key string, first, last int64, lastBlk *block) {
	if c.opts.ReadAhead == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.seqLocked(key)
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

// readAheadLocked keeps up to ReadAhead blocks from block from in flight
// or fetched, within the advised limit and the known object end. It
// refills only when less than half the window is left, so that read-ahead
// GETs are runs of many blocks.
func (c *Cache) readAheadLocked(key string, st *seqState, from int64) {
	window := int64(c.opts.ReadAhead)
	stop := from + window
	if st.limit >= 0 {
		stop = min(stop, st.limit)
	}
	if st.end >= 0 {
		stop = min(stop, st.end)
	}
	if st.ahead >= stop || (st.ahead > from && st.ahead-from > window/2 && st.ahead < stop && stop == from+window) {
		return
	}
	runStart := int64(-1)
	flush := func(end int64) {
		if runStart >= 0 {
			c.startRunLocked(key, runStart, end-runStart, true)
			runStart = -1
		}
	}
	for idx := max(from, st.ahead); idx < stop; idx++ {
		if c.presentLocked(blockID{key, idx}) {
			flush(idx)
			continue
		}
		if runStart < 0 {
			runStart = idx
		} else if idx-runStart == int64(c.opts.FetchBlocks) {
			flush(idx)
			runStart = idx
		}
	}
	flush(stop)
	st.ahead = stop
}

// Advise tells the cache that a reader is about to read [off, end) of key
// sequentially. Read-ahead starts now and continues as the reader
// advances, never past end. The read path calls it for the range it is
// reading and, to overlap object boundaries, for the next object's range
// before it finishes the current one.
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
	st := c.seqLocked(key)
	st.limit = (end + bs - 1) / bs
	first := off / bs
	if st.ahead < first || st.ahead > st.limit {
		st.ahead = first
	}
	c.readAheadLocked(key, st, first)
}
