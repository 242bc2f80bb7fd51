// Package cache is a block cache for reads from object storage, with
// read-ahead for sequential readers.
//
// Objects are cut into fixed-size blocks (BlockSize, 128 KiB by default).
// A block is identified by (object key, block index); tiering's objects are
// immutable once committed, so a cached block never needs invalidation.
// Missing blocks are fetched in runs: one ranged GET for consecutive
// blocks, into one buffer. The run is the unit of memory: its blocks are
// views of that buffer, it enters ristretto whole with its byte length as
// cost, and it leaves whole, so MaxBytes bounds the memory the cache holds.
//
//	ReadAt(key, p, off)              Slice(key, off, min, max)
//	  │ blocks covering the range      │ same lookup, then
//	  ├─ resident? ── copy out         └─ the bytes lie in one run? ── alias it
//	  └─ otherwise ─ one ranged GET per stretch of consecutive missing
//	                 blocks; concurrent readers of one block share one GET
//
// A cold point read therefore waits for the block(s) it touches, never for
// the whole object; a cold Slice that may take more than a block (a scan)
// fetches the FetchBlocks-aligned window around its first block, so that
// scans of neighbouring ranges (streams sharing an L0 object) share a GET. A reader that moves forward through an object (the catch-up
// of a consumer behind the tail) triggers read-ahead: the next ReadAhead
// blocks are fetched in the background as large runs (FetchBlocks per GET,
// Parallelism GETs at a time), so a sequential reader pays few per-request
// costs and finds its next bytes already there. All readers share one
// read-ahead budget in bytes (ReadAheadBytes): read-ahead that does not fit
// is not sent, so memory stays bounded however many readers there are,
// and demand GETs in flight are bounded the same way (FetchBytes). Demand
// comes first: while any reader waits for a GET of its own (a demand GET,
// or read-ahead it caught up with), read-ahead GETs already sent leave
// their bodies unread, so the object store's bandwidth goes to what a
// reader is waiting for and read-ahead fills what is left of it (see
// yieldToDemand). Readers that know
// what they will read say so with Advise (segment.ReadStream does, for the
// stream's byte range), which starts read-ahead at once and keeps it inside
// the range: an L0 object holds many streams, and fetching the neighbours'
// bytes would waste bandwidth.
//
// Slice is the zero-copy path: a sequential scanner (segment's cursor)
// takes the fetched runs themselves as its window buffers, so the bytes of
// a catch-up are written once, by the network read, and never copied or
// allocated again. A range that lies in two runs is copied by Slice;
// SlicePieces lends it as one piece per run instead, for readers that can
// carry a batch in two pieces (stored-batch pages and Kafka fetches). Sliced memory is immutable; a run that leaves the
// cache stays alive exactly as long as a reader still holds a slice of it.
//
// Run buffers of one full GET are recycled: LeasePieces lends like
// SlicePieces with a reference the reader releases once it has written
// the bytes out, and a run that has left the cache for good with no
// reference held goes to a bounded free list, from which the next GET
// takes its buffer (memory already faulted in; Pretouch fills the list at
// start). A run lent any other way (Slice, SlicePieces) escapes: the
// garbage collector owns it, as before. Releasing early would let a GET
// write over bytes a reader is still sending, so only readers that know
// when their write is done lease (docs/storage.md).
//
// Fetched runs are kept in a small FIFO staging area as well as offered
// to ristretto: ristretto applies writes asynchronously and may decline a
// run under its admission policy, and neither may make read-ahead useless
// or turn the next read of a just-fetched block into a second GET.
//
// A Cache is safe for concurrent use. It implements segment.RangeReader.
package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/sdk/hugepage"
)

// Source is where blocks come from: objstore.Store implements it.
type Source interface {
	ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error)
}

// RangeStreamer is the optional Source capability (objstore.RangeStreamer)
// that lets one GET stream straight into a run's buffer.
type RangeStreamer interface {
	ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
}

// readRun streams the range of len(buf) bytes starting at off into buf
// and returns the bytes read; a range that ends early is not an error (the
// object ended), a stream cut short is. gate, if set, is called before
// each read of the body and may hold it (read-ahead yielding to demand).
func readRun(ctx context.Context, rs RangeStreamer, key string, off int64, buf []byte, gate func() error) (int64, error) {
	rc, err := rs.ReadRange(ctx, key, off, int64(len(buf)))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	// Not io.ReadFull: it reports both "the object ended" and "the stream
	// was cut" as io.ErrUnexpectedEOF. A RangeStreamer ends a complete
	// range with io.EOF and a cut one with another error.
	var n int64
	for n < int64(len(buf)) {
		if gate != nil {
			if err := gate(); err != nil {
				return n, err
			}
		}
		m, err := rc.Read(buf[n:])
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
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
	// 4 MiB; twice that for a cold scan whose wanted range crosses its
	// aligned window, so the batch there lies in one run). Consecutive missing blocks of one read, and read-ahead, are
	// fetched as runs of up to this many blocks: object stores charge a
	// fixed cost per request, so a sequential reader wants few large GETs
	// while a random reader wants small ones.
	FetchBlocks int
	// ReadAhead is how many blocks ahead of a sequential reader are kept in
	// flight or fetched (default 256, i.e. 32 MiB: at 100 ms per GET that
	// is still a few hundred MB/s for one reader); negative disables
	// read-ahead. It is refilled as soon as FetchBlocks of it (or half, if
	// less) have been consumed, so it stays nearly full and read-ahead
	// GETs are large. ReadAheadBytes caps all readers together.
	ReadAhead int
	// ReadAheadBytes is the node-wide read-ahead budget (default 64 MiB):
	// the bytes of read-ahead GETs in flight plus those fetched and not
	// yet read, over every reader of the cache. A reader's window is only
	// what the budget has room for: read-ahead that does not fit is not
	// sent (the reader fetches on demand, and read-ahead resumes as the
	// budget frees), so a thousand catch-up readers share one bounded
	// amount of memory instead of a window each.
	ReadAheadBytes int64
	// FetchBytes bounds the bytes of demand GETs (the blocks a reader
	// waits for) in flight at once, node-wide (default ReadAheadBytes); a
	// GET past it waits for an earlier one to land.
	FetchBytes int64
	// Parallelism caps concurrent read-ahead GETs (default 64, the S3
	// adapter's idle connections per host). What is in flight is sized
	// by bytes: the budget (ReadAheadBytes) bounds it and memory, and
	// this count only keeps connections to the object store reasonable.
	// It must not bind first: a reader of small objects (the 1 MiB L0
	// objects of a slow stream) covers a GET's latency only with as many
	// GETs in flight as the budget holds, and a cap of 16 held such a
	// reader to 16 MiB per round trip against S3.
	Parallelism int
	// StagingBlocks bounds the FIFO of recently fetched blocks kept besides
	// ristretto (default ReadAheadBytes/BlockSize + 2*FetchBlocks: all the
	// read-ahead the budget allows and the runs readers wait for beyond
	// it), so read-ahead is not evicted before its reader comes.
	StagingBlocks int
	// FetchTimeout bounds one GET (default 30s). Fetches run on the cache's
	// own context, so a block that one reader gave up on still lands for
	// the others.
	FetchTimeout time.Duration
	// PoolBytes bounds the free list of run buffers (default
	// ReadAheadBytes; negative disables recycling). A run of FetchBlocks
	// blocks whose memory left the cache for good, and that no reader
	// holds (see LeasePieces), goes back here and the next GET of that
	// size writes into it: memory already touched, not fresh pages whose
	// first write faults (docs/benchmarks.md). Buffers beyond the bound
	// are left to the garbage collector, so the node's memory stays within
	// the cache and read-ahead budgets plus this.
	PoolBytes int64
}

func (o *Options) setDefaults() {
	defaults.Set(&o.MaxBytes, 256<<20)
	defaults.Set(&o.BlockSize, 128<<10)
	defaults.Set(&o.FetchBlocks, 32)
	if o.ReadAhead == 0 {
		o.ReadAhead = 256
	}
	if o.ReadAhead < 0 {
		o.ReadAhead = 0
	}
	defaults.Set(&o.ReadAheadBytes, 64<<20)
	defaults.Set(&o.FetchBytes, o.ReadAheadBytes)
	defaults.Set(&o.Parallelism, 64)
	defaults.Set(&o.StagingBlocks, int(o.ReadAheadBytes/o.BlockSize)+2*o.FetchBlocks)
	defaults.Set(&o.FetchTimeout, 30*time.Second)
	defaults.Set(&o.PoolBytes, o.ReadAheadBytes)
	if o.PoolBytes < 0 {
		o.PoolBytes = 0
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
	// ReadAheadBytes is the read-ahead budget in use now (bytes in flight
	// or fetched and not yet read); ReadAheadSkipped counts blocks of
	// read-ahead not sent because the budget was spent.
	ReadAheadBytes   int64
	ReadAheadSkipped int64
	// FetchWaits counts demand GETs that waited for FetchBytes.
	FetchWaits int64
	// ReadAheadYields counts times a read-ahead GET held its body unread
	// while a reader waited for a GET of its own (yieldToDemand).
	ReadAheadYields int64
	// Refetched counts blocks fetched again, though in memory or in
	// flight, so that a scan's batch lies in one run (acquire).
	Refetched int64
	// HugePageAdvised counts bytes of run buffers and straddle copies
	// (rounded out to 2 MiB) advised for transparent huge pages before
	// their first write (sdk/hugepage; Linux only).
	HugePageAdvised int64
	// StraddleCopyBytes counts bytes Slice copied because the range asked
	// for lay in two runs (SlicePieces lends such a range uncopied).
	StraddleCopyBytes int64
	// RecycledBytes counts bytes of run buffers that went back to the
	// free list (their run left the cache and every reader released it);
	// ReusedBytes those a GET took from it instead of new memory;
	// PooledBytes is the free list now (at most Options.PoolBytes).
	// EscapedRuns counts runs lent without a reference (Slice,
	// SlicePieces): their memory is never recycled.
	RecycledBytes int64
	ReusedBytes   int64
	PooledBytes   int64
	EscapedRuns   int64
}

type blockID struct {
	key string
	idx int64
}

// run is one GET: blocks [first, first+count) of key, fetched into one
// buffer. It is created in flight (done open) and immutable once done.
type run struct {
	key    string
	first  int64
	count  int64
	rcKey  string
	done   chan struct{} // closed when buf or err is set
	buf    []byte        // the bytes received; shorter than count blocks at the object's end
	err    error
	blocks int64 // blocks it accounts for in the staging FIFO

	// Guarded by Cache.mu.
	prefetch bool          // nobody waits for it yet
	promote  chan struct{} // closed when a reader starts waiting on a prefetch
	staged   bool          // in the staging FIFO
	cached   bool          // offered to ristretto and not let go of since
	forgot   bool          // its object was forgotten while it was in flight
	budget   int64         // read-ahead budget it holds until read or let go of
	fetching bool          // its buffer is allocated (tests count it)
	demand   bool          // a reader waits for it: counted in Cache.demandOpen
	settled  bool          // finish has run: it can no longer become demand

	// Recycling (guarded by Cache.mu). buf goes back to the free list
	// once the run left the cache for good and refs is zero, unless a
	// slice of it was ever lent without a reference (escaped).
	pooled   bool // buf has the pool's size and may be recycled
	escaped  bool // lent by Slice or SlicePieces: left to the GC
	refs     int  // readers holding it: acquire to unpin or lease release
	recycled bool // buf went back to the free list; r.buf is nil
}

func (r *run) ready() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// block returns block idx of a done run; shorter than bs (or empty) at
// and past the object's end. Its capacity ends with it, so appending to
// it can never write into the next block.
func (r *run) block(idx, bs int64) []byte {
	lo := min((idx-r.first)*bs, int64(len(r.buf)))
	hi := min(lo+bs, int64(len(r.buf)))
	return r.buf[lo:hi:hi]
}

// seqState tracks one object's reader for read-ahead.
type seqState struct {
	next  int64 // block after the last one read (-1: none yet)
	limit int64 // read-ahead stops before this block (-1: none advised)
	end   int64 // first block past the object's end, once known (-1: unknown)
	ahead int64 // read-ahead issued up to (exclusive)
}

// maxRefetchBlocks is how many blocks at the end of another run a scan
// fetches again rather than straddle the two runs (acquire): up to
// 256 KiB more from the store against a copy of the whole batch.
const maxRefetchBlocks = 2

// maxSeqStates bounds per-object read-ahead state; past it the state is
// forgotten (read-ahead restarts on the next sequential access).
const maxSeqStates = 4096

// Cache is a block cache over a Source.
type Cache struct {
	src  Source
	opts Options
	rc   *ristretto.Cache[string, *run]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}

	mu           sync.Mutex
	blocks       map[blockID]*run // in flight or resident
	staging      []*run           // FIFO of recently fetched runs
	stagedBlocks int64
	seq          map[string]*seqState
	closed       bool
	cachedBytes  int64         // bytes of runs given to ristretto and not let go of
	aheadUsed    int64         // read-ahead budget held (Options.ReadAheadBytes)
	demandUsed   int64         // demand GET bytes in flight (Options.FetchBytes)
	demandFreed  chan struct{} // closed (and replaced) when demandUsed drops
	// demandOpen counts runs a reader waits for that are not done yet
	// (demand GETs from creation, read-ahead from its promotion); while
	// it is above zero, read-ahead bodies are not read (yieldToDemand).
	demandOpen  int64
	demandIdle  chan struct{} // closed when demandOpen is zero; replaced when it rises
	demandOpenA atomic.Int64  // demandOpen, for the read-ahead's lock-free check

	// Runs ristretto let go of (evicted, rejected, replaced). Its callback
	// may run inside calls made under mu, so it only queues them here,
	// under a lock that guards nothing else; they are retired under mu.
	exitMu sync.Mutex
	exited []*run

	hits, misses, joined, prefetches, requests, fetched atomic.Int64
	skipped, fetchWaits, yields, refetched              atomic.Int64
	hugeAdvised, straddleCopied                         atomic.Int64
	recycledBytes, reusedBytes, escapedRuns             atomic.Int64

	// free holds run buffers of poolSize bytes for reuse (guarded by mu).
	free      [][]byte
	freeBytes int64
	poolSize  int64
}

// New returns a cache over src.
func New(src Source, opts Options) (*Cache, error) {
	opts.setDefaults()
	blocks := max(opts.MaxBytes/opts.BlockSize, 1)
	c := &Cache{
		src: src, opts: opts,
		sem:    make(chan struct{}, opts.Parallelism),
		blocks: map[blockID]*run{},
		seq:    map[string]*seqState{},

		demandFreed: make(chan struct{}),
		demandIdle:  make(chan struct{}),
		poolSize:    int64(opts.FetchBlocks) * opts.BlockSize,
	}
	close(c.demandIdle)
	rc, err := ristretto.NewCache(&ristretto.Config[string, *run]{
		NumCounters:        max(10*blocks, 1000),
		MaxCost:            opts.MaxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnExit: func(r *run) {
			if r == nil {
				return
			}
			c.exitMu.Lock()
			c.exited = append(c.exited, r)
			c.exitMu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	c.rc = rc
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
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
	c.mu.Lock()
	clear(c.blocks)
	c.staging = nil
	c.free, c.freeBytes = nil, 0
	c.mu.Unlock()
	return nil
}

// Stats returns the counters so far.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	ahead, pooled := c.aheadUsed, c.freeBytes
	c.mu.Unlock()
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Joined: c.joined.Load(),
		Prefetches: c.prefetches.Load(), Requests: c.requests.Load(), FetchedBytes: c.fetched.Load(),
		ReadAheadBytes: ahead, ReadAheadSkipped: c.skipped.Load(), FetchWaits: c.fetchWaits.Load(),
		ReadAheadYields: c.yields.Load(), Refetched: c.refetched.Load(),
		HugePageAdvised: c.hugeAdvised.Load(), StraddleCopyBytes: c.straddleCopied.Load(),
		RecycledBytes: c.recycledBytes.Load(), ReusedBytes: c.reusedBytes.Load(), PooledBytes: pooled,
		EscapedRuns: c.escapedRuns.Load(),
	}
}

// releaseLocked returns the read-ahead budget r holds: a reader has come
// for it, or it left the staging FIFO (what stays is the cache's), or it
// failed or was forgotten.
func (c *Cache) releaseLocked(r *run) {
	c.aheadUsed -= r.budget
	r.budget = 0
}

// takeDemand waits until n more bytes of demand GETs fit in FetchBytes
// (a GET larger than the whole budget goes alone).
func (c *Cache) takeDemand(n int64) error {
	waited := false
	for {
		c.mu.Lock()
		if c.demandUsed == 0 || c.demandUsed+n <= c.opts.FetchBytes {
			c.demandUsed += n
			c.mu.Unlock()
			return nil
		}
		freed := c.demandFreed
		c.mu.Unlock()
		if !waited {
			waited = true
			c.fetchWaits.Add(1)
		}
		select {
		case <-freed:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
}

// openDemandLocked counts r as a run a reader waits for, until finish.
func (c *Cache) openDemandLocked(r *run) {
	if r.demand || r.settled {
		return
	}
	r.demand = true
	if c.demandOpen == 0 {
		c.demandIdle = make(chan struct{})
	}
	c.demandOpen++
	c.demandOpenA.Store(c.demandOpen)
}

// closeDemandLocked ends openDemandLocked's count of r (it is done).
func (c *Cache) closeDemandLocked(r *run) {
	r.settled = true
	if !r.demand {
		return
	}
	r.demand = false
	c.demandOpen--
	c.demandOpenA.Store(c.demandOpen)
	if c.demandOpen == 0 {
		close(c.demandIdle)
	}
}

// yieldToDemand holds read-ahead run r's next body read while any reader
// waits for a GET of its own, and returns once none does, r itself is
// promoted (a reader now waits for it), or r has yielded for a quarter of
// FetchTimeout in all (*yielded; so that read-ahead under constant demand
// still lands before its GET times out).
//
// Why the body and not the request: the request goes out at once, so on a
// store with latency (S3 across a network) read-ahead's round trip still
// overlaps the demand GET's; but on a store bound by bandwidth (or by its
// CPU, as loopback MinIO is), ten read-ahead bodies transferred beside the
// demand body make the reader wait for all eleven. A body left unread
// stops its sender once the socket's receive window is full (TCP flow
// control), which leaves the store's bandwidth to the demand GET.
func (c *Cache) yieldToDemand(ctx context.Context, r *run, yielded *time.Duration) error {
	if c.demandOpenA.Load() == 0 {
		return nil
	}
	select {
	case <-r.promote:
		return nil // a reader waits for r: it is demand itself now
	default:
	}
	left := c.opts.FetchTimeout/4 - *yielded
	if left <= 0 {
		return nil
	}
	start := time.Now()
	defer func() { *yielded += time.Since(start) }()
	timer := time.NewTimer(left)
	defer timer.Stop()
	counted := false
	for {
		c.mu.Lock()
		open, idle := c.demandOpen, c.demandIdle
		c.mu.Unlock()
		if open == 0 {
			return nil
		}
		if !counted {
			counted = true
			c.yields.Add(1)
		}
		select {
		case <-idle:
		case <-r.promote:
			return nil
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Cache) giveDemand(n int64) {
	c.mu.Lock()
	c.demandUsed -= n
	close(c.demandFreed)
	c.demandFreed = make(chan struct{})
	c.mu.Unlock()
}

// BlockSize returns the block size in use.
func (c *Cache) BlockSize() int64 { return c.opts.BlockSize }

// retireExitedLocked applies ristretto's exits: a run neither cached nor
// staged leaves the block map, and its memory goes once no reader holds it.
func (c *Cache) retireExitedLocked() {
	c.exitMu.Lock()
	exited := c.exited
	c.exited = nil
	c.exitMu.Unlock()
	for _, r := range exited {
		if r.cached {
			c.cachedBytes -= int64(cap(r.buf))
		}
		r.cached = false
		if !r.staged {
			c.dropLocked(r)
		}
	}
}

// dropLocked removes r's blocks from the map (those still pointing to it).
func (c *Cache) dropLocked(r *run) {
	c.releaseLocked(r)
	for i := range r.count {
		id := blockID{r.key, r.first + i}
		if c.blocks[id] == r {
			delete(c.blocks, id)
		}
	}
	c.maybeRecycleLocked(r)
}

// maybeRecycleLocked puts r's buffer on the free list if r has left the
// cache for good (no block maps to it, neither staged nor in ristretto),
// no reader holds it (refs) and none ever took a slice of it without a
// reference (escaped). Recycling earlier would let the next GET write
// over bytes a reader is still sending: r.buf is cleared, so a reader
// that broke the rule reads nothing rather than another object's bytes.
func (c *Cache) maybeRecycleLocked(r *run) {
	if !r.pooled || r.escaped || r.refs > 0 || r.staged || r.cached || r.recycled || !r.settled {
		return
	}
	for i := range r.count {
		if c.blocks[blockID{r.key, r.first + i}] == r {
			return
		}
	}
	r.recycled = true
	buf := r.buf[:cap(r.buf)]
	r.buf = nil
	if c.putFreeLocked(buf) {
		c.recycledBytes.Add(int64(len(buf)))
	}
}

// putFreeLocked keeps buf (poolSize bytes) on the free list if the list
// has room under PoolBytes and the memory the cache holds for reads
// stays within MaxBytes + 3 x ReadAheadBytes (docs/configuration.md):
// the free list only fills what the cache, the staging FIFO and demand
// GETs leave unused of that bound (counted generously: a run both cached
// and staged counts twice; read-ahead in flight, not counted, mostly
// writes into buffers taken from this list). Otherwise it is left to the
// GC.
func (c *Cache) putFreeLocked(buf []byte) bool {
	held := c.cachedBytes + c.stagedBlocks*c.opts.BlockSize + c.demandUsed
	if int64(cap(buf)) != c.poolSize || c.freeBytes+c.poolSize > c.opts.PoolBytes || c.closed ||
		held+c.freeBytes+c.poolSize > c.opts.MaxBytes+3*c.opts.ReadAheadBytes {
		return false
	}
	c.free = append(c.free, buf[:cap(buf)])
	c.freeBytes += c.poolSize
	return true
}

// takeFreeLocked returns a buffer from the free list, or nil.
func (c *Cache) takeFreeLocked() []byte {
	n := len(c.free)
	if n == 0 {
		return nil
	}
	buf := c.free[n-1]
	c.free[n-1] = nil
	c.free = c.free[:n-1]
	c.freeBytes -= c.poolSize
	c.reusedBytes.Add(int64(len(buf)))
	return buf
}

// unpin ends the hold acquire took on runs.
func (c *Cache) unpin(runs []*run) {
	if len(runs) == 0 {
		return
	}
	c.mu.Lock()
	for _, r := range runs {
		r.refs--
		c.maybeRecycleLocked(r)
	}
	c.mu.Unlock()
}

// escape marks runs as lent without a reference (never recycled) and
// ends acquire's hold on them.
func (c *Cache) escape(runs []*run) {
	c.mu.Lock()
	for _, r := range runs {
		if !r.escaped {
			r.escaped = true
			c.escapedRuns.Add(1)
		}
		r.refs--
	}
	c.mu.Unlock()
}

// Pretouch fills the free list up to PoolBytes with buffers of a run's
// size, each advised for huge pages and written once per 4 KiB page, so
// the first GETs after a start write into memory the kernel has already
// given the process (as a JVM's AlwaysPreTouch). It returns the bytes
// added.
func (c *Cache) Pretouch() int64 {
	var added int64
	for {
		c.mu.Lock()
		room := !c.closed && c.freeBytes+c.poolSize <= c.opts.PoolBytes
		c.mu.Unlock()
		if !room || c.poolSize <= 0 {
			return added
		}
		buf := make([]byte, c.poolSize)
		c.hugeAdvised.Add(hugepage.Advise(buf))
		for i := 0; i < len(buf); i += 4096 {
			buf[i] = 0
		}
		c.mu.Lock()
		ok := c.putFreeLocked(buf)
		c.mu.Unlock()
		if !ok {
			return added
		}
		added += int64(len(buf))
	}
}

// acquire returns the done run holding each block of [first, last],
// fetching missing blocks (one GET per stretch of up to FetchBlocks) and
// waiting for those in flight. Missing blocks up to fetchLast (>= last)
// are fetched in the same GETs, but not waited for.
//
// A scan (atMost > 0: it wants up to block fetchLast in one piece) whose
// first block lies in the last one or two blocks of another run, with
// the blocks after that run missing, fetches those leading blocks again
// with the rest: the batch that begins there then lies in one run and is
// lent, not copied out of two (readers of neighbouring streams of an L0
// object otherwise straddle each other's GETs).
//
// Each distinct run returned is pinned (pins): its buffer is not recycled
// until the caller passes pins to unpin, escape, or a lease's release.
func (c *Cache) acquire(ctx context.Context, key string, first, last, fetchLast int64, scan bool) (runs, pins []*run, err error) {
	runs = make([]*run, fetchLast-first+1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, errors.New("cache: closed")
	}
	c.retireExitedLocked()
	refetch := int64(-1) // blocks up to this one are fetched again
	if r0 := c.blocks[blockID{key, first}]; scan && r0 != nil && fetchLast > first {
		if end := r0.first + r0.count; end-first <= maxRefetchBlocks && end <= fetchLast && c.blocks[blockID{key, end}] == nil {
			refetch = end - 1
			c.refetched.Add(end - first)
		}
	}
	// A scan's missing stretch is one GET up to twice FetchBlocks: the
	// aligned window of a cold scan plus the rest of the batch it starts
	// (a batch crossing the window's end would otherwise be copied out of
	// two runs).
	most := int64(c.opts.FetchBlocks)
	if scan {
		most *= 2
	}
	runStart := int64(-1)
	flush := func(end int64) { // one GET for missing blocks [runStart, end)
		if runStart >= 0 {
			r := c.startRunLocked(key, runStart, end-runStart, false)
			for idx := runStart; idx < end; idx++ {
				runs[idx-first] = r
			}
			runStart = -1
		}
	}
	var touched *run
	for i := range runs {
		idx := first + int64(i)
		r := c.blocks[blockID{key, idx}]
		if r == nil || idx <= refetch {
			c.misses.Add(1)
			if runStart < 0 {
				runStart = idx
			} else if idx-runStart == most {
				flush(idx)
				runStart = idx
			}
			continue
		}
		flush(idx)
		runs[i] = r
		if !r.ready() {
			if r.prefetch {
				// Someone needs it now: let it skip the read-ahead queue.
				r.prefetch = false
				close(r.promote)
				c.openDemandLocked(r)
			}
			c.joined.Add(1)
			continue
		}
		c.hits.Add(1)
		c.releaseLocked(r) // read-ahead that found its reader
		if r != touched && r.cached {
			c.rc.Get(r.rcKey) // tells the admission policy the run is in use
			touched = r
		}
	}
	flush(fetchLast + 1)
	runs = runs[:last-first+1]
	for _, r := range runs {
		if !slices.Contains(pins, r) {
			r.refs++
			pins = append(pins, r)
		}
	}
	c.mu.Unlock()
	for _, r := range pins {
		select {
		case <-r.done:
		case <-ctx.Done():
			c.unpin(pins)
			return nil, nil, ctx.Err()
		}
		if r.err != nil {
			c.unpin(pins)
			return nil, nil, r.err
		}
	}
	return runs, pins, nil
}

// copyOut copies the bytes of key from off into p from the runs holding
// blocks first...; it returns how many bytes the object had there.
func (c *Cache) copyOut(runs []*run, first, off int64, p []byte) int {
	bs := c.opts.BlockSize
	n := 0
	for i, r := range runs {
		idx := first + int64(i)
		b := r.block(idx, bs)
		lo := max(off-idx*bs, 0)
		if lo >= int64(len(b)) {
			break
		}
		n += copy(p[n:], b[lo:])
		if int64(len(b)) < bs {
			break
		}
	}
	return n
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
	runs, pins, err := c.acquire(ctx, key, first, last, last, false)
	if err != nil {
		return 0, err
	}
	n := c.copyOut(runs, first, off, p)
	ended := int64(len(runs[len(runs)-1].block(last, bs))) < bs
	c.unpin(pins) // copied out: nothing of the runs is kept
	c.afterRead(key, first, last, ended)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Slice returns the bytes of key from off: at least atLeast of them, or
// fewer with io.EOF where the object ends, and up to atMost when they
// lie in memory one GET filled. Those are returned without copying: the
// slice aliases the cache, and callers must not modify it (its capacity
// ends with it, so an append copies). Only a range that straddles two
// runs costs a copy of atLeast bytes (Stats.StraddleCopyBytes); a reader
// that can take such a range in pieces uses SlicePieces instead.
func (c *Cache) Slice(ctx context.Context, key string, off int64, atLeast, atMost int) ([]byte, error) {
	runs, pins, first, last, err := c.lend(ctx, key, off, &atLeast, &atMost)
	if err != nil {
		return nil, err
	}
	bs := c.opts.BlockSize
	r := runs[0]
	one := true
	for _, o := range runs[1:] {
		one = one && o == r
	}
	var out []byte
	if one {
		lo := min(off-r.first*bs, int64(len(r.buf)))
		n := min(int64(len(r.buf))-lo, int64(atMost))
		out = r.buf[lo : lo+n : lo+n]
		c.escape(pins) // lent with no way to hand it back
	} else {
		out = make([]byte, atLeast)
		c.hugeAdvised.Add(hugepage.Advise(out)) // fresh memory, as a run's
		n := c.copyOut(runs, first, off, out)
		out = out[:n:n]
		c.straddleCopied.Add(int64(n))
		c.unpin(pins)
	}
	return out, c.lent(key, off, first, last, len(out), atLeast)
}

// SlicePieces returns what Slice does, but a range that lies in the
// memory of several GETs comes as one piece per GET, in order, none of
// them copied: the pieces are consecutive bytes of the object, each
// aliasing the cache (never to be modified, capacity capped). The last
// piece runs on up to atMost bytes in all when they are at hand. A
// scanner that can check and serve a batch in two pieces (segment's
// reads of stored batches) so never copies one that straddles two runs:
// that copy into fresh memory was most of a cold read's CPU besides the
// network (docs/benchmarks.md).
//
// The runs lent are never recycled (their memory is the GC's, as Slice's);
// LeasePieces lends with a reference instead.
func (c *Cache) SlicePieces(ctx context.Context, key string, off int64, atLeast, atMost int) ([][]byte, error) {
	out, pins, err := c.slicePieces(ctx, key, off, atLeast, atMost)
	if pins != nil {
		c.escape(pins)
	}
	return out, err
}

// LeasePieces lends like SlicePieces, with a reference: the pieces stay
// the object's bytes until release is called, and the memory of their
// runs may be reused for other GETs only after every lease of them is
// released and the runs have left the cache. A caller calls release once
// it no longer uses the pieces or anything sliced from them (a response
// written to its socket); never calling it only keeps the runs from being
// recycled. release is idempotent; it is nil when err is not io.EOF or
// nil.
func (c *Cache) LeasePieces(ctx context.Context, key string, off int64, atLeast, atMost int) (pieces [][]byte, release func(), err error) {
	out, pins, err := c.slicePieces(ctx, key, off, atLeast, atMost)
	if pins == nil {
		return out, nil, err
	}
	var once atomic.Bool
	return out, func() {
		if once.CompareAndSwap(false, true) {
			c.unpin(pins)
		}
	}, err
}

// slicePieces is SlicePieces with acquire's pins (nil on error).
func (c *Cache) slicePieces(ctx context.Context, key string, off int64, atLeast, atMost int) ([][]byte, []*run, error) {
	runs, pins, first, last, err := c.lend(ctx, key, off, &atLeast, &atMost)
	if err != nil {
		return nil, nil, err
	}
	bs := c.opts.BlockSize
	var out [][]byte
	n := 0 // bytes in out
	at := off
	for i := 0; i < len(runs) && n < atMost; {
		r := runs[i]
		j := i + 1
		for j < len(runs) && runs[j] == r {
			j++
		}
		// Blocks [first+i, first+j) lie in r: its bytes from at to the
		// end of block first+j-1, or on to atMost in the last run.
		lo := min(at-r.first*bs, int64(len(r.buf)))
		groupEnd := (first+int64(j))*bs - r.first*bs
		hi := min(groupEnd, int64(len(r.buf)))
		if j == len(runs) {
			hi = int64(len(r.buf))
		}
		hi = min(hi, lo+int64(atMost-n))
		if hi > lo {
			out = append(out, r.buf[lo:hi:hi])
			n += int(hi - lo)
			at += hi - lo
		}
		if hi < groupEnd && j < len(runs) {
			break // the object ends in r
		}
		i = j
	}
	return out, pins, c.lent(key, off, first, last, n, atLeast)
}

// lend acquires the runs holding [off, off+atLeast) of key for Slice and
// SlicePieces (normalising atLeast and atMost): runs[i] holds block
// first+i, up to block last.
func (c *Cache) lend(ctx context.Context, key string, off int64, atLeast, atMost *int) (runs, pins []*run, first, last int64, err error) {
	if off < 0 {
		return nil, nil, 0, 0, fmt.Errorf("cache: read %q: negative offset %d", key, off)
	}
	*atLeast = max(*atLeast, 1)
	*atMost = max(*atMost, *atLeast)
	bs := c.opts.BlockSize
	first, last = off/bs, (off+int64(*atLeast)-1)/bs
	// Blocks up to atMost that nobody has asked for yet are fetched with
	// the first one: a cold scan gets the window it wants in one GET, lent
	// whole, and does not wait on them beyond atLeast.
	fetchLast := max(last, min((off+int64(*atMost)-1)/bs, first+int64(c.opts.FetchBlocks)-1))
	// A cold scan's GET (one that may take more than a block) covers the
	// whole FetchBlocks-aligned window around its first block: readers of
	// neighbouring streams in one L0 object then land in one GET instead
	// of sending one each (object stores charge per request, and a
	// hundred small GETs at once cost MinIO or S3 far more than a few
	// large ones). A point read (atMost within a block) still fetches
	// only what it touches.
	//
	// A scan whose first block is at hand (the last block of the previous
	// stream's GET) but whose later blocks are missing fetches on to the
	// end of the window its first missing block lies in, for the same
	// reason: fetching only its own stretch, each reader of an L0
	// object's window found its first block in its predecessor's GET and
	// sent one for its own range, a GET per stream instead of per window
	// (issue 31's 100 cold readers, docs/benchmarks.md). The GET never
	// grows past that window, so it is at most FetchBlocks long where the
	// scan's own range is shorter (a page that reaches further is
	// unchanged).
	from := first
	if fb := int64(c.opts.FetchBlocks); int64(*atMost) > bs {
		if c.missing(key, first) {
			from = first / fb * fb
			fetchLast = max(fetchLast, from+fb-1)
		} else if m := c.firstMissing(key, first+1, fetchLast); m >= 0 {
			fetchLast = max(fetchLast, (m/fb+1)*fb-1)
		}
	}
	runs, pins, err = c.acquire(ctx, key, from, last, fetchLast, int64(*atMost) > bs)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	return runs[first-from:], pins, first, last, nil
}

// lent records a Slice or SlicePieces of n bytes from off for read-ahead
// and returns io.EOF if the object ended before atLeast of them.
func (c *Cache) lent(key string, off, first, last int64, n, atLeast int) error {
	if n < atLeast {
		c.afterRead(key, first, last, true)
		return io.EOF
	}
	end := (off + int64(n) - 1) / c.opts.BlockSize
	c.afterRead(key, first, end, false)
	return nil
}

// firstMissing returns the first block of key in [first, last] that is
// neither cached nor in flight, or -1.
func (c *Cache) firstMissing(key string, first, last int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for idx := first; idx <= last; idx++ {
		if c.blocks[blockID{key, idx}] == nil {
			return idx
		}
	}
	return -1
}

// missing says whether block idx of key is neither cached nor in
// flight.
func (c *Cache) missing(key string, idx int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks[blockID{key, idx}] == nil
}

// startRunLocked starts one GET for blocks [first, first+count) of key
// and returns its run. Called with c.mu held.
func (c *Cache) startRunLocked(key string, first, count int64, prefetch bool) *run {
	r := &run{
		key: key, first: first, count: count,
		rcKey: key + "\x00" + strconv.FormatInt(first, 10),
		done:  make(chan struct{}), prefetch: prefetch, promote: make(chan struct{}),
	}
	for i := range count {
		c.blocks[blockID{key, first + i}] = r
	}
	if prefetch {
		c.prefetches.Add(count)
	}
	c.requests.Add(1)
	c.wg.Add(1)
	if prefetch {
		r.budget = count * c.opts.BlockSize
		c.aheadUsed += r.budget
	} else {
		c.openDemandLocked(r) // from now on read-ahead bodies wait for it
	}
	go func() {
		defer c.wg.Done()
		if prefetch {
			select {
			case c.sem <- struct{}{}:
				defer func() { <-c.sem }()
			case <-r.promote:
			case <-c.ctx.Done():
				c.finish(r, nil, c.ctx.Err(), false)
				return
			}
		} else {
			// Demand GETs wait for room: with many readers missing at
			// once, their buffers are what would exhaust the node.
			n := count * c.opts.BlockSize
			if err := c.takeDemand(n); err != nil {
				c.finish(r, nil, err, false)
				return
			}
			defer c.giveDemand(n)
		}
		// A run of the pool's size writes into a recycled buffer when
		// there is one: memory already touched, no page faults.
		size := count * c.opts.BlockSize
		pooled := size == c.poolSize && c.opts.PoolBytes > 0
		var buf []byte
		c.mu.Lock()
		r.fetching = true
		if pooled {
			buf = c.takeFreeLocked()
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.FetchTimeout)
		defer cancel()
		if buf == nil {
			buf = make([]byte, size)
			c.hugeAdvised.Add(hugepage.Advise(buf)) // before the body's first write
		}
		var n int64
		var err error
		// Read-ahead streamed into its run yields to demand between body
		// reads; a one-block GET (or a source that cannot stream) is read
		// in one call and does not.
		var gate func() error
		if prefetch {
			var yielded time.Duration
			gate = func() error { return c.yieldToDemand(ctx, r, &yielded) }
		}
		if rs, ok := c.src.(RangeStreamer); ok && count > 1 {
			n, err = readRun(ctx, rs, key, first*c.opts.BlockSize, buf, gate)
		} else {
			var m int
			m, err = c.src.ReadAt(ctx, key, buf, first*c.opts.BlockSize)
			n = int64(m)
		}
		if err == io.EOF {
			// A short (or empty) run marks the end of the object. Only
			// the bare io.EOF says so (io.ReaderAt): an error wrapping
			// one is a transport failure, and keeping its empty run as
			// the object's end failed every read of the range after it.
			err = nil
		}
		c.fetched.Add(n)
		if err != nil {
			// Not reused: whatever wrote into it is not known to be done.
			c.finish(r, nil, err, false)
			return
		}
		full := buf
		buf = buf[:n]
		if 2*n < int64(cap(buf)) {
			// The object ended early in the run: keep only what arrived.
			buf = append([]byte(nil), buf...)
			if pooled {
				c.mu.Lock()
				c.putFreeLocked(full) // nobody saw it
				c.mu.Unlock()
			}
			pooled = false
		}
		c.finish(r, buf, err, pooled)
	}()
	return r
}

// finish completes a run: it stages it and offers it to ristretto, or on
// error forgets it so the next reader asks the store again.
//
// pooled says buf may go back to the free list once r is done with.
func (c *Cache) finish(r *run, buf []byte, err error, pooled bool) {
	bs := c.opts.BlockSize
	c.mu.Lock()
	c.retireExitedLocked() // the Sets of earlier runs evicted some
	c.closeDemandLocked(r)
	switch {
	case err != nil:
		r.err = err
		c.dropLocked(r)
	case r.forgot:
		c.releaseLocked(r)
		r.buf = buf // for the readers already waiting; not kept
		r.pooled = pooled
		c.maybeRecycleLocked(r)
	default:
		r.buf = buf
		r.pooled = pooled
		if !r.prefetch {
			// A reader waited for it (promoted read-ahead): it is read,
			// and its bytes are the staging FIFO's to account for now.
			c.releaseLocked(r)
		}
		if int64(len(buf)) < r.count*bs {
			// The first short block is the object's last.
			end := r.first + int64(len(buf))/bs + 1
			if st := c.seq[r.key]; st != nil && (st.end < 0 || end < st.end) {
				st.end = end
			}
		}
		// Every run is staged: ristretto applies Sets asynchronously and
		// may decline a run under its admission policy, and neither may
		// turn the next read of a just-fetched block (read-ahead, or a
		// scan reading a block in several chunks) into a second GET.
		c.stageLocked(r)
		if len(buf) > 0 {
			// The cost is the memory held, not the bytes received: a run
			// that ended short of its blocks keeps its whole buffer.
			// ristretto admits and evicts asynchronously; the bytes it
			// has been given and not let go of are counted here, and a
			// run that would take them past MaxBytes is only staged, so
			// the cache's memory is bounded at every moment, not just
			// once ristretto has caught up.
			if cost := int64(cap(buf)); c.cachedBytes+cost <= c.opts.MaxBytes {
				if r.cached = c.rc.Set(r.rcKey, r, cost); r.cached {
					c.cachedBytes += cost
				}
			}
		}
	}
	c.mu.Unlock()
	close(r.done)
}

// Forget drops every block of key: its object was deleted (retention,
// compaction, garbage collection), so its bytes would only take the place
// of live ones until evicted. Readers holding slices keep theirs.
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	forgotten := map[*run]bool{}
	for id, r := range c.blocks {
		if id.key != key {
			continue
		}
		delete(c.blocks, id)
		if forgotten[r] {
			continue
		}
		forgotten[r] = true
		r.forgot = true
		c.releaseLocked(r)
		if r.cached {
			c.cachedBytes -= int64(cap(r.buf))
			r.cached = false
			c.rc.Del(r.rcKey)
		}
	}
	if len(forgotten) > 0 {
		kept := c.staging[:0]
		for _, r := range c.staging {
			if forgotten[r] {
				r.staged = false
				c.stagedBlocks -= r.blocks
				continue
			}
			kept = append(kept, r)
		}
		clear(c.staging[len(kept):])
		c.staging = kept
		for r := range forgotten {
			c.maybeRecycleLocked(r)
		}
	}
	delete(c.seq, key)
}

func (c *Cache) stageLocked(r *run) {
	r.staged = true
	r.blocks = max((int64(cap(r.buf))+c.opts.BlockSize-1)/c.opts.BlockSize, 1)
	c.staging = append(c.staging, r)
	c.stagedBlocks += r.blocks
	for c.stagedBlocks > int64(c.opts.StagingBlocks) && len(c.staging) > 1 {
		o := c.staging[0]
		c.staging[0] = nil
		c.staging = c.staging[1:]
		c.stagedBlocks -= o.blocks
		o.staged = false
		c.releaseLocked(o) // unread read-ahead: the cache holds it now, or nobody
		if !o.cached {
			c.dropLocked(o)
		}
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
// [first, last] (ended: the object ends in block last) and issues
// read-ahead if the reader is sequential or inside an advised range.
func (c *Cache) afterRead(key string, first, last int64, ended bool) {
	if c.opts.ReadAhead == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.retireExitedLocked()
	st := c.seqLocked(key)
	if ended {
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
// refills once a whole GET of FetchBlocks (or half the window, if that is
// less) is free in it, so that the window stays nearly full and read-ahead
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
	// Refill once a whole GET's worth (FetchBlocks) of the window is free:
	// the window stays nearly full, which is what covers a GET's latency
	// (bytes in flight = bandwidth x latency), and GETs stay large.
	refill := min(int64(c.opts.FetchBlocks), max(window/2, 1))
	if st.ahead >= stop || (st.ahead > from && st.ahead-from > window-refill && st.ahead < stop && stop == from+window) {
		return
	}
	runStart := int64(-1)
	spent := false
	// flush starts one GET for blocks [runStart, end) if the node-wide
	// budget has room; otherwise read-ahead stops there, and the next
	// read of this object tries again from that block.
	flush := func(end int64) {
		if runStart < 0 {
			return
		}
		n := end - runStart
		if c.aheadUsed+n*c.opts.BlockSize > c.opts.ReadAheadBytes {
			c.skipped.Add(stop - runStart)
			st.ahead = runStart
			spent = true
			return
		}
		c.startRunLocked(key, runStart, n, true)
		runStart = -1
	}
	for idx := max(from, st.ahead); idx < stop && !spent; idx++ {
		if c.blocks[blockID{key, idx}] != nil {
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
	if !spent {
		flush(stop)
	}
	if !spent {
		st.ahead = stop
	}
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
