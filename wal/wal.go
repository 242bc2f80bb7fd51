package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultSegmentSize is large enough that rotation (an fdatasync, a
	// rename and a directory fsync) is rare, and small enough that tiering
	// can release disk space in useful steps.
	DefaultSegmentSize = 64 << 20

	// queueLimit bounds the bytes waiting for the writer. Past it Enqueue
	// blocks until the writer takes the queue: producers faster than the
	// disk get backpressure instead of growing memory without bound. One
	// write of this size takes tens of milliseconds on an SSD, so a queue
	// this deep already means the disk is saturated.
	queueLimit = 32 << 20

	// GroupBuckets is the number of buckets in Stats.GroupSizes.
	GroupBuckets = 16
)

var (
	// ErrClosed is returned by calls after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrCorrupt means the log holds damage that cannot be a torn write;
	// the error names the segment and offset.
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrFailed wraps the write or fdatasync error that failed the log.
	ErrFailed = errors.New("wal: log failed")
	// ErrLocked means another process (or another WAL in this one) has the
	// directory open.
	ErrLocked = errors.New("wal: directory in use")
	// ErrTooLarge rejects payloads over MaxEntrySize.
	ErrTooLarge = errors.New("wal: entry too large")
	// ErrNotDurable is returned by ReadAt for a position the log has not
	// made durable, including positions that never held an entry. Serving
	// unsynced bytes would let a reader see data a crash can still take back.
	ErrNotDurable = errors.New("wal: position not durable")
	// ErrRemoved is returned by ReadAt for a segment RemoveSegmentsBefore
	// deleted; the data is in object storage by then.
	ErrRemoved = errors.New("wal: segment removed")
	// ErrReplayAfterEnqueue guards Replay, which walks the log without
	// synchronising with the writer.
	ErrReplayAfterEnqueue = errors.New("wal: Replay after Enqueue")
)

// Options configures Open.
type Options struct {
	Dir string // created if missing
	// SegmentSize is the size at which the log rotates to a new segment
	// file: an entry goes to the next segment when it would not fit in the
	// rest of the current one. An entry larger than SegmentSize gets a
	// segment of its own. Zero means DefaultSegmentSize.
	SegmentSize int64
	Logger      *slog.Logger // nil means slog.Default()
	// FS is the filesystem the log works through; nil means OSFS. Tests
	// pass a fault-injecting one (package wal/faultfs).
	FS FS
	// LazySync is how long the fdatasync of entries enqueued with
	// EnqueueLazy may be put off after they are written: such entries
	// share one fdatasync at most LazySync after the first of them was
	// written, or the next ordinary commit's, whichever comes first.
	// Zero: they are fdatasync'ed right after their write, as any entry.
	LazySync time.Duration
}

// Pos locates one entry's payload: segment number, byte offset of the payload
// inside the segment file, payload length.
type Pos struct {
	Segment uint64
	Offset  int64
	Len     int32
}

// RecoveryReport says what Open found and what it discarded. Only a torn
// tail of the last segment is ever discarded.
type RecoveryReport struct {
	Segments int // segment files found
	Entries  int // valid entries in them
	// TornSegment and TornBytes describe the discarded tail when TornBytes
	// > 0: the bytes from the end of the last valid record to the last
	// non-zero byte of the segment. Trailing zeros are not counted because
	// preallocation padding and zero bytes of a torn record look the same.
	TornSegment uint64
	TornBytes   int64
}

// Stats are cumulative since Open unless noted, shaped for Prometheus
// counters, gauges and a group-size histogram.
type Stats struct {
	Segments     int    // gauge: segment files in the log
	DiskBytes    int64  // gauge: their size, including preallocated padding (not the one file being prepared)
	QueuedBytes  int64  // gauge: framed bytes enqueued and not yet taken by the writer
	Entries      uint64 // entries made durable
	PayloadBytes uint64 // payload bytes of those entries
	Groups       uint64 // commit groups: one write and one fdatasync each (plus one per rotation), but lazy groups (LazyGroups) share a later fdatasync
	WaiterGroups uint64 // of Groups, committed by the goroutine waiting for them, not the writer (a lone append on an idle log)
	// LazyGroups: of Groups, written without an fdatasync of their own
	// (only EnqueueLazy entries, Options.LazySync > 0); a later fdatasync
	// covers them.
	LazyGroups uint64
	// OverlappedGroups: of Groups, written while an fdatasync of earlier
	// groups was running (group commit pipelining: a --replica-ack write
	// follower's copy that did not wait for the previous one's fdatasync).
	OverlappedGroups uint64
	Syncs            uint64        // fdatasync calls on segment files
	SyncedBytes      uint64        // framed bytes written, all covered by those fdatasyncs
	SyncTime         time.Duration // time spent in fdatasync
	// GroupSizes counts commit groups by entries per group: bucket 0 holds
	// groups of 1 entry, bucket i > 0 groups of (2^(i-1), 2^i] entries, the
	// last bucket everything larger.
	GroupSizes [GroupBuckets]uint64
}

// WAL is a node-level write-ahead log; see the package doc. All methods are
// safe for concurrent use, except that Replay must finish before the first
// Enqueue.
type WAL struct {
	dir     string
	segSize int64
	log     *slog.Logger
	fs      FS
	sync    func(File) error // fdatasync; replaced by tests to hold or fail calls
	lock    io.Closer

	// mu orders Enqueue calls: it guards the queue and the position the next
	// entry gets.
	mu         sync.Mutex
	work       sync.Cond // the idle writer waits here for entries or Close
	space      sync.Cond // Enqueue waits here while the queue is full
	q          *batch    // entries no committer has taken yet
	spare      *batch    // the last committed batch, reused as the next q
	tailSeg    uint64    // segment the last enqueued entry went to
	tailOff    int64     // offset after the last enqueued entry
	tailSeed   uint32    // segmentSeed(tailSeg)
	writerIdle bool      // the writer goroutine waits on work
	// committing is the writer token: set while one goroutine (the writer,
	// or a caller committing its own entry, see commitParked) owns the
	// writer state below and commits a batch. Exactly one holds it, so
	// that state needs no lock of its own.
	committing bool
	// syncing is set while the writer goroutine runs an fdatasync of
	// written groups without the writer token (syncWritten): the next
	// group can be written meanwhile. Guarded by mu.
	syncing bool
	// parked is q's group when q holds one entry, enqueued by
	// EnqueueForWait or Append while no commit was running, and the writer
	// was not woken for it: its Wait commits it in the caller's goroutine,
	// saving the two goroutine hand-offs (wake the writer, wake the
	// waiter) that otherwise sit between a lone append and its fdatasync.
	// Written under mu; Wait and Done read it without mu first, so the
	// common case, an entry that is not parked, costs no lock.
	parked atomic.Pointer[group]
	// spaceWaiters counts Enqueue calls blocked on a full queue, so the
	// writer broadcasts only when someone listens.
	spaceWaiters int
	// Lazy sync (Options.LazySync), guarded by mu: hasUnsynced mirrors
	// len(unsynced) > 0 for the writer loop; syncDue is set by lazyTimer
	// (of generation lazyGen) when the oldest unsynced group is due.
	lazySync    time.Duration
	hasUnsynced bool
	syncDue     bool
	lazyTimer   *time.Timer
	lazyGen     uint64
	closed      bool
	err         error // sticky failure
	enqueued    bool

	// Writer state: whoever holds the writer token (committing) owns these;
	// Open and Close touch them only when the writer goroutine is not
	// running.
	cur      *segment
	curEnd   int64
	curDirty bool // written since the last fdatasync
	next     *prepared
	idle     *idleGate // lets the next segment's zero-fill use the writer's idle time
	// unsynced are groups written and not yet fdatasync'ed, oldest
	// first (lazy ones, and those whose fdatasync syncWritten runs
	// without the token); the next fdatasync closes them.
	unsynced []lazyGroup
	// spareUnsynced is the list syncWritten last worked through, reused.
	// Writer goroutine only.
	spareUnsynced []lazyGroup

	// syncMu serialises fdatasync calls on segment files. Two running at
	// once on one file could split a writeback error between them: one
	// reports it, the other succeeds and acknowledges what the disk may
	// not have. Held with it, failed is checked before every fdatasync and
	// set by a failed one.
	syncMu sync.Mutex
	// syncPin is the segment whose file syncWritten is fdatasync'ing
	// without the writer token, 0 when none: RemoveSegmentsBefore leaves
	// it (and later ones) open until the call returns.
	syncPin atomic.Uint64

	// segMu guards the segment table and the durable point, which ReadAt
	// reads without contending with Enqueue on mu.
	segMu  sync.RWMutex
	segs   []*segment // contiguous numbers, ascending; the last is the writer's
	durSeg uint64     // everything before (durSeg, durEnd) is fdatasync'ed
	durEnd int64

	removeMu sync.Mutex // serialises RemoveSegmentsBefore with itself and Close

	failed   atomic.Pointer[error] // mirrors err for readers that do not take mu
	isClosed atomic.Bool
	done     chan struct{} // closed when the writer exits

	ctr counters
}

type counters struct {
	entries, payloadBytes, groups, syncs, syncedBytes, syncNanos atomic.Uint64
	waiterGroups, lazyGroups, overlappedGroups                   atomic.Uint64
	groupSizes                                                   [GroupBuckets]atomic.Uint64
}

type segment struct {
	num  uint64
	f    File
	size int64 // file size, including zero padding
	end  int64 // end of the records; final once the writer has moved on
}

// batch is one commit group's bytes, framed and ready for pwrite. Two of
// them alternate between Enqueue and the committer, so the buffers are
// reused.
type batch struct {
	buf   []byte
	spans []span // runs of buf that go to one segment each, usually one
	n     int    // entries
	g     *group
	// durable: an entry needs its fdatasync now (any entry but those of
	// EnqueueLazy).
	durable bool
}

// lazyGroup is a written batch's group whose fdatasync is put off: what
// the counters need once it is durable.
type lazyGroup struct {
	g            *group
	n            int
	payload, buf uint64
}

type span struct {
	seg        uint64
	off        int64 // file offset of buf[start]
	start, end int
}

func (b *batch) reset() {
	if cap(b.buf) > 2*queueLimit {
		b.buf = nil // one huge entry must not pin its buffer forever
	} else {
		b.buf = b.buf[:0]
	}
	b.spans = b.spans[:0]
	b.n = 0
	b.g = nil
	b.durable = false
}

// group is shared by every entry of one commit: one channel close wakes all
// of them, and no entry needs an allocation of its own.
type group struct {
	done chan struct{}
	err  error // set before done is closed
	// wrote is set once the group's bytes are in the segment file (the
	// OS page cache), before its fdatasync, or when the log fails first.
	// written, made only when a WaitWritten has to block (most groups
	// never have such a waiter, and a commit should not pay a second
	// channel), is closed then.
	wmu     sync.Mutex
	wrote   bool
	written chan struct{}
	// first is the Pending of the group's first entry: a lone append,
	// the common case at a low rate, then allocates nothing besides the
	// group and its channel (each allocation on the append path costs
	// about a microsecond when it runs cold).
	first Pending
}

func newGroup() *group {
	return &group{done: make(chan struct{})}
}

// markWritten records that the group is written (or failed) and wakes
// WaitWritten callers.
func (g *group) markWritten() {
	g.wmu.Lock()
	if !g.wrote {
		g.wrote = true
		if g.written != nil {
			close(g.written)
		}
	}
	g.wmu.Unlock()
}

// writtenChan returns nil if the group is written, else a channel closed
// when it is.
func (g *group) writtenChan() <-chan struct{} {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.wrote {
		return nil
	}
	if g.written == nil {
		g.written = make(chan struct{})
	}
	return g.written
}

func (g *group) wait(ctx context.Context) error {
	select {
	case <-g.done:
		return g.err
	default:
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return fmt.Errorf("wal: waiting for fdatasync: %w", ctx.Err())
	}
}

// Pending is an enqueued entry whose durability can be awaited.
type Pending struct {
	pos Pos
	g   *group
	w   *WAL
}

// Pos is the entry's position, assigned by Enqueue.
func (p *Pending) Pos() Pos { return p.pos }

// Done is closed once the entry is durable or the log has failed; Wait then
// says which. For an entry of EnqueueForWait that nobody is committing yet,
// Done hands it to the writer goroutine, since a select on the channel
// commits nothing.
func (p *Pending) Done() <-chan struct{} {
	p.w.unpark(p.g)
	return p.g.done
}

// Wait blocks until the entry and every entry enqueued before it are
// fdatasync'ed, or ctx is done (the write still happens), or the log failed.
// For an entry of EnqueueForWait that the log left to its waiter, Wait
// commits it in the calling goroutine; ctx is checked before that commit
// starts, and the commit, one write and one fdatasync, cannot be
// interrupted.
func (p *Pending) Wait(ctx context.Context) error { return p.w.wait(ctx, p.g) }

// WaitWritten blocks until the entry and every entry enqueued before it
// are written to their segment file, that is, in the OS page cache: they
// survive the process being killed, not the machine losing power, until
// the fdatasync that follows in the same commit (Wait) completes. It
// returns the log's failure if the log failed first, or ctx's error (the
// write still happens). A parked entry of EnqueueForWait is handed to
// the writer goroutine rather than committed by the caller, which would
// have to wait for the fdatasync too.
func (p *Pending) WaitWritten(ctx context.Context) error {
	g := p.g
	if ch := g.writtenChan(); ch != nil {
		if ctx.Err() == nil {
			p.w.writeParked(g)
		} else {
			p.w.unpark(g)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wal: waiting for write: %w", ctx.Err())
		}
	}
	// A failed log closes done (with err) before written.
	select {
	case <-g.done:
		return g.err
	default:
		return nil
	}
}

// Open recovers the log in opts.Dir (see Recovery in the package doc) and
// starts its writer.
func Open(opts Options) (*WAL, RecoveryReport, error) {
	return open(opts, fdatasync)
}

func open(opts Options, sync func(File) error) (_ *WAL, rep RecoveryReport, err error) {
	if opts.Dir == "" {
		return nil, rep, errors.New("wal: Options.Dir is empty")
	}
	if opts.SegmentSize < 0 {
		return nil, rep, fmt.Errorf("wal: negative Options.SegmentSize %d", opts.SegmentSize)
	}
	if opts.SegmentSize == 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FS == nil {
		opts.FS = OSFS{}
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, rep, fmt.Errorf("wal: create %s: %w", opts.Dir, err)
	}
	lock, err := lockDir(opts.FS, opts.Dir)
	if err != nil {
		return nil, rep, err
	}
	w := &WAL{
		dir:      opts.Dir,
		segSize:  opts.SegmentSize,
		log:      opts.Logger,
		fs:       opts.FS,
		sync:     sync,
		lock:     lock,
		q:        &batch{},
		spare:    &batch{},
		done:     make(chan struct{}),
		idle:     newIdleGate(),
		lazySync: max(opts.LazySync, 0),
	}
	w.work.L = &w.mu
	w.space.L = &w.mu
	defer func() {
		if err != nil {
			for _, s := range w.segs {
				s.f.Close()
			}
			lock.Close()
		}
	}()

	if rep, err = w.recover(); err != nil {
		return nil, rep, err
	}
	if len(w.segs) == 0 {
		// The first segment is filled before Open returns: a new node's
		// first appends should not pay for growing the file.
		w.prepare(1, nil)
		<-w.next.done
		f, size, err := w.next.finish()
		w.next = nil
		if err != nil {
			return nil, rep, err
		}
		w.segs = append(w.segs, &segment{num: 1, f: f, size: size})
		if err := w.fs.Rename(w.tmpPath(1), w.path(1)); err != nil {
			return nil, rep, fmt.Errorf("wal: create first segment: %w", err)
		}
		if err := syncDir(w.fs, w.dir); err != nil {
			return nil, rep, err
		}
	}
	w.cur = w.segs[len(w.segs)-1]
	w.curEnd = w.cur.end
	w.durSeg, w.durEnd = w.cur.num, w.cur.end
	w.tailSeg, w.tailOff, w.tailSeed = w.cur.num, w.cur.end, segmentSeed(w.cur.num)
	w.prepare(w.cur.num+1, w.idle)
	go w.run()
	w.log.Info("wal: opened", "dir", w.dir, "segments", rep.Segments, "entries", rep.Entries,
		"active_segment", w.cur.num, "active_offset", w.curEnd)
	return w, rep, nil
}

// recover scans every segment, repairs a torn tail of the last one, and
// fills w.segs.
func (w *WAL) recover() (RecoveryReport, error) {
	var rep RecoveryReport
	nums, err := listSegments(w.fs, w.dir)
	if err != nil {
		return rep, err
	}
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			return rep, fmt.Errorf("%w: segment %d missing (found %s and %s)",
				ErrCorrupt, nums[i-1]+1, segmentName(nums[i-1]), segmentName(nums[i]))
		}
	}
	var win window
	for i, num := range nums {
		last := i == len(nums)-1
		flag := os.O_RDONLY
		if last {
			flag = os.O_RDWR // the writer continues in it
		}
		f, err := w.fs.OpenFile(w.path(num), flag, 0)
		if err != nil {
			return rep, fmt.Errorf("wal: open segment: %w", err)
		}
		s := &segment{num: num, f: f}
		w.segs = append(w.segs, s)
		if s.size, err = f.Size(); err != nil {
			return rep, fmt.Errorf("wal: stat segment: %w", err)
		}
		sc, err := scanSegment(&win, f, s.size, num)
		if err != nil {
			return rep, err
		}
		s.end = sc.end
		rep.Entries += sc.entries
		if sc.junkEnd == sc.end {
			continue
		}
		if !last {
			return rep, fmt.Errorf("%w: segment %d (%s) offset %d: %s; only the last segment can end in a torn write",
				ErrCorrupt, num, segmentName(num), sc.end, sc.why)
		}
		// Zero the torn bytes rather than truncating: the file keeps its
		// preallocated blocks, and a later, shorter record cannot leave
		// a stale fragment behind it that looks like more log.
		if err := zeroRange(f, sc.end, sc.junkEnd); err != nil {
			return rep, fmt.Errorf("wal: discard torn tail of segment %d: %w", num, err)
		}
		if err := w.sync(f); err != nil {
			return rep, fmt.Errorf("wal: fdatasync segment %d after discarding torn tail: %w", num, err)
		}
		rep.TornSegment, rep.TornBytes = num, sc.junkEnd-sc.end
		w.log.Warn("wal: discarded torn write at end of log",
			"segment", num, "offset", sc.end, "bytes", rep.TornBytes, "reason", sc.why)
	}
	rep.Segments = len(nums)
	return rep, nil
}

func (w *WAL) path(seg uint64) string    { return filepath.Join(w.dir, segmentName(seg)) }
func (w *WAL) tmpPath(seg uint64) string { return w.path(seg) + tmpExt }

// Replay calls fn for every entry in log order. It is only valid before the
// first Enqueue. data is only valid during the call; an error from fn stops
// the replay and is returned unchanged.
func (w *WAL) Replay(fn func(pos Pos, data []byte) error) error {
	w.mu.Lock()
	closed, failed, enqueued := w.closed, w.err, w.enqueued
	w.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case failed != nil:
		return failed
	case enqueued:
		return ErrReplayAfterEnqueue
	}
	w.segMu.RLock()
	segs := slices.Clone(w.segs)
	w.segMu.RUnlock()
	var win window
	for _, s := range segs {
		win.reset(s.f, s.end)
		end, _, why, err := walk(&win, s.num, s.end, func(off int64, p []byte) error {
			return fn(Pos{Segment: s.num, Offset: off, Len: int32(len(p))}, p)
		})
		if err != nil {
			return err
		}
		if end != s.end {
			return fmt.Errorf("%w: segment %d (%s) offset %d: %s, though Open found it valid",
				ErrCorrupt, s.num, segmentName(s.num), end, why)
		}
	}
	return nil
}

// Enqueue copies data into the log's queue and returns without waiting for
// the disk, unless more than 32 MiB are already waiting for the writer, in
// which case it blocks until the writer takes them (backpressure). The
// position is assigned before Enqueue returns, and entries are written in
// Enqueue order. data may be reused as soon as Enqueue returns.
func (w *WAL) Enqueue(data []byte) (*Pending, error) {
	pos, g, err := w.enqueue(data, false, false)
	if err != nil {
		return nil, err
	}
	return w.pending(pos, g), nil
}

// pending returns the Pending of the entry at pos in g: the group's own
// for its first entry (set by enqueue under mu, never changed after),
// else a new one.
func (w *WAL) pending(pos Pos, g *group) *Pending {
	if g.first.g == g && g.first.pos == pos {
		return &g.first
	}
	return &Pending{pos: pos, g: g, w: w}
}

// EnqueueForWait is Enqueue for a caller that will call Wait (or Done) on
// the result, typically after releasing locks it held to enqueue in order.
// When no commit is running and nothing else is queued, the writer is not
// woken: Wait commits the entry in the caller's goroutine, without the two
// goroutine hand-offs the writer costs. Until then the entry stays queued;
// the writer takes it as soon as another entry is enqueued behind it, Done
// is called, a Wait's ctx has ended, or at Close, so an entry whose Pending
// is dropped is still written, only later.
func (w *WAL) EnqueueForWait(data []byte) (*Pending, error) {
	pos, g, err := w.enqueue(data, true, false)
	if err != nil {
		return nil, err
	}
	return w.pending(pos, g), nil
}

// Append is EnqueueForWait followed by Wait, without allocating a Pending.
// When ctx ends first, the position is returned with the error: the entry
// will still be written. Like Wait, Append does not return in the middle of
// a commit it runs itself.
func (w *WAL) Append(ctx context.Context, data []byte) (Pos, error) {
	pos, g, err := w.enqueue(data, true, false)
	if err != nil {
		return Pos{}, err
	}
	return pos, w.wait(ctx, g)
}

// EnqueueLazy is EnqueueForWait for an entry whose caller waits with
// WaitWritten and can let its fdatasync wait: with Options.LazySync > 0,
// a group of such entries alone is written and not fdatasync'ed; one
// fdatasync covers it at most LazySync later, or sooner when an ordinary
// entry is committed behind it or a Wait asks for it. Until then a crash
// of the machine (not of the process) can lose it, ReadAt refuses it (not
// durable), and its Done stays open. Its Wait (or a Wait on any later
// entry) has the writer fdatasync the unsynced lazy groups at once: who
// waits wants the entry durable now. With LazySync zero it is
// EnqueueForWait.
func (w *WAL) EnqueueLazy(data []byte) (*Pending, error) {
	pos, g, err := w.enqueue(data, true, true)
	if err != nil {
		return nil, err
	}
	return w.pending(pos, g), nil
}

// enqueue appends data to q. park: the caller will wait for the entry, so
// when nobody is committing and q was empty the writer is left asleep and
// the waiter commits (commitParked). lazy: the entry's fdatasync may be
// put off (EnqueueLazy).
func (w *WAL) enqueue(data []byte, park, lazy bool) (Pos, *group, error) {
	if len(data) > MaxEntrySize {
		return Pos{}, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEntrySize)
	}
	pcrc := payloadCRC(data) // outside the lock: it is the only per-byte work besides the copy
	need := headerSize + len(data)

	w.mu.Lock()
	for {
		if w.closed {
			w.mu.Unlock()
			return Pos{}, nil, ErrClosed
		}
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return Pos{}, nil, err
		}
		if len(w.q.buf) == 0 || len(w.q.buf)+need <= queueLimit {
			break
		}
		// A parked entry's waiter may be this very goroutine, later: the
		// writer must take it now or the queue never drains.
		w.unparkLocked()
		w.spaceWaiters++
		w.space.Wait()
		w.spaceWaiters--
	}
	if w.tailOff > 0 && w.tailOff+int64(need) > w.segSize {
		w.tailSeg++
		w.tailOff = 0
		w.tailSeed = segmentSeed(w.tailSeg)
	}
	b := w.q
	if b.g == nil {
		b.g = newGroup()
	}
	start := len(b.buf)
	if k := len(b.spans); k == 0 || b.spans[k-1].seg != w.tailSeg {
		b.spans = append(b.spans, span{seg: w.tailSeg, off: w.tailOff, start: start})
	}
	b.buf = slices.Grow(b.buf, need)[:start+need]
	putHeader(b.buf[start:], w.tailSeed, len(data), pcrc)
	copy(b.buf[start+headerSize:], data)
	b.spans[len(b.spans)-1].end = start + need
	b.n++
	b.durable = b.durable || !lazy || w.lazySync == 0
	pos := Pos{Segment: w.tailSeg, Offset: w.tailOff + headerSize, Len: int32(len(data))}
	if b.n == 1 {
		b.g.first = Pending{pos: pos, g: b.g, w: w}
	}
	w.tailOff += int64(need)
	w.enqueued = true
	g := b.g
	switch {
	case w.committing:
		// The token holder wakes the writer for q when it is done.
	case w.syncing && !lazy:
		// The writer takes q as one group when its fdatasync returns.
		// Parked, this entry would be its waiter's group of one,
		// committed behind that fdatasync and splitting the group that
		// gathers under load. A lazy entry's waiter (WaitWritten) writes
		// it at once instead, overlapping the fdatasync.
	case park && b.n == 1:
		w.parked.Store(g)
	case w.parked.Load() != nil:
		// A second entry joined a parked one: the writer takes both now,
		// so no entry waits on another caller's way to its Wait.
		w.unparkLocked()
	case w.writerIdle:
		w.work.Signal()
	}
	w.mu.Unlock()
	return pos, g, nil
}

// unpark hands g to the writer goroutine if g is the parked group.
func (w *WAL) unpark(g *group) {
	if w.parked.Load() != g {
		return
	}
	w.mu.Lock()
	if w.parked.Load() == g {
		w.unparkLocked()
	}
	w.mu.Unlock()
}

// unparkLocked hands the parked group, if any, to the writer. mu held.
func (w *WAL) unparkLocked() {
	if w.parked.Load() == nil {
		return
	}
	w.parked.Store(nil)
	if w.writerIdle {
		w.work.Signal()
	}
}

// wait waits for g, committing it first if it is parked.
func (w *WAL) wait(ctx context.Context, g *group) error {
	select {
	case <-g.done:
		return g.err
	default:
	}
	if ctx.Err() != nil {
		w.unpark(g) // the write still happens, by the writer
	} else {
		w.commitParked(g)
	}
	w.hurry(g)
	return g.wait(ctx)
}

// hurry makes the writer fdatasync the unsynced lazy groups now rather
// than when LazySync is up, for a caller that waits for g to be durable:
// g may be one of them (or behind them). Without LazySync there are none.
func (w *WAL) hurry(g *group) {
	if w.lazySync == 0 {
		return
	}
	select {
	case <-g.done:
		return
	default:
	}
	w.mu.Lock()
	if w.hasUnsynced || w.committing {
		w.syncDue = true
		if w.lazyDueLocked() && w.writerIdle {
			w.work.Signal()
		}
	}
	w.mu.Unlock()
}

// commitParked commits q in the calling goroutine if it is g's parked
// group: the caller takes the writer token, writes and fdatasyncs q, wakes
// g's waiters and gives the token back. Whatever was enqueued meanwhile
// forms the next group and goes to the writer goroutine: the caller
// commits only the group it waits for, so its latency is one commit.
func (w *WAL) commitParked(g *group) {
	b := w.takeParked(g)
	if b == nil {
		return
	}
	if err := w.commit(b); err != nil {
		w.fail(err, b)
		return
	}
	w.ctr.waiterGroups.Add(1)
	close(g.done)
	b.reset()
	w.mu.Lock()
	w.releaseLocked(b)
	w.mu.Unlock()
}

// writeParked is commitParked for WaitWritten: if g is the parked group,
// the caller takes the writer token, writes q and gives the token back;
// the writer goroutine fdatasyncs it (syncWritten), or, for a lazy group,
// a later fdatasync does. Its caller answers without a goroutine
// hand-off on the way (waking the writer to write, being woken by it),
// and without waiting for the disk; and since the fdatasync runs without
// the token, the next caller's write need not wait for it either.
func (w *WAL) writeParked(g *group) {
	b := w.takeParked(g)
	if b == nil {
		return
	}
	if err := w.write(b); err != nil {
		w.fail(err, b)
		return
	}
	g.markWritten()
	w.mu.Lock()
	w.deferSync(b)
	w.releaseLocked(b)
	w.mu.Unlock()
}

// deferSync records the written batch b as waiting for an fdatasync and
// resets it: a durable one makes the writer run that fdatasync now
// (syncWritten), a lazy one waits for LazySync or the next commit.
// Writer token and mu held.
func (w *WAL) deferSync(b *batch) {
	w.unsynced = append(w.unsynced, lazyGroup{g: b.g, n: b.n,
		payload: uint64(len(b.buf) - b.n*headerSize), buf: uint64(len(b.buf))})
	if b.durable {
		w.syncDue = true
	} else {
		w.ctr.lazyGroups.Add(1)
	}
	w.ctr.groups.Add(1)
	w.ctr.groupSizes[min(bits.Len(uint(b.n-1)), GroupBuckets-1)].Add(1)
	b.reset()
}

// lazyDueLocked reports whether the writer should fdatasync the unsynced
// lazy groups now: their time is up, or the log is closing. mu held.
func (w *WAL) lazyDueLocked() bool {
	return !w.committing && w.hasUnsynced && (w.syncDue || w.closed)
}

// takeParked takes the writer token and q if g is still the parked group
// (commitParked, writeParked); nil if the writer or another waiter took it.
func (w *WAL) takeParked(g *group) *batch {
	if w.parked.Load() != g {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.parked.Load() != g {
		return nil
	}
	return w.takeLocked()
}

// takeLocked takes the writer token and q for a commit. The token must be
// free. mu held.
func (w *WAL) takeLocked() *batch {
	w.committing = true
	if w.syncing {
		w.ctr.overlappedGroups.Add(1)
	}
	w.parked.Store(nil)
	w.idle.set(false)
	b := w.q
	w.q, w.spare = w.spare, nil
	if w.spaceWaiters > 0 {
		w.space.Broadcast()
	}
	return b
}

// releaseLocked gives the writer token back after b was committed and
// reset, and wakes the writer if it has work (or must exit): entries
// enqueued during the commit, or Close. mu held.
func (w *WAL) releaseLocked(b *batch) {
	w.committing = false
	w.spare = b
	if w.err != nil {
		// syncWritten failed while this token holder was writing: what
		// it wrote and queued fails too.
		w.abortLocked()
		w.work.Signal()
		return
	}
	w.hasUnsynced = len(w.unsynced) > 0
	switch {
	case !w.hasUnsynced:
		w.syncDue = false
		if w.lazyTimer != nil {
			w.lazyTimer.Stop()
			w.lazyTimer = nil
		}
	case w.lazyTimer == nil && !w.syncDue:
		// The oldest unsynced group was just written: its fdatasync is
		// due LazySync from now.
		w.lazyGen++
		gen := w.lazyGen
		w.lazyTimer = time.AfterFunc(w.lazySync, func() { w.lazyExpired(gen) })
	}
	if w.lazyDueLocked() {
		if w.writerIdle {
			w.work.Signal()
		}
		return
	}
	if w.q.n > 0 || w.closed {
		if w.writerIdle {
			w.work.Signal()
		}
		return
	}
	if !w.syncing { // syncWritten sets it when its fdatasync is done
		w.idle.set(true)
	}
}

// lazyExpired is the lazy timer of generation gen: the unsynced groups
// are due, the writer fdatasyncs them.
func (w *WAL) lazyExpired(gen uint64) {
	w.mu.Lock()
	if gen == w.lazyGen && w.lazyTimer != nil {
		w.lazyTimer = nil
		w.syncDue = true
		if w.lazyDueLocked() && w.writerIdle {
			w.work.Signal()
		}
	}
	w.mu.Unlock()
}

// run is the writer goroutine: it takes everything queued, writes it,
// gives the writer token back and fdatasyncs it (syncWritten), wakes the
// group, and repeats. Entries enqueued while it writes and syncs form the
// next group; a lazy entry's WaitWritten caller may write its own group
// during the fdatasync (writeParked). It leaves a parked entry to its
// waiter (except at Close), and waits while a waiter commits one.
func (w *WAL) run() {
	defer close(w.done)
	w.mu.Lock()
	w.idle.set(true)
	for {
		for !w.lazyDueLocked() && (w.committing || w.q.n == 0 || (w.parked.Load() != nil && !w.closed)) {
			if w.err != nil || (w.closed && !w.committing && w.q.n == 0 && !w.hasUnsynced) {
				// Failed (by a waiter's commit), or closed with
				// everything enqueued before Close written.
				w.mu.Unlock()
				return
			}
			w.writerIdle = true
			w.work.Wait()
			w.writerIdle = false
		}
		if w.err != nil {
			w.mu.Unlock()
			return
		}
		if w.lazyDueLocked() && (w.q.n == 0 || (w.parked.Load() != nil && !w.closed)) {
			// Written groups are due for their fdatasync, and q is
			// empty or its waiter's to write.
			if w.syncWritten() != nil {
				w.mu.Unlock()
				return
			}
			continue
		}
		b := w.takeLocked()
		w.mu.Unlock()
		if err := w.write(b); err != nil {
			w.fail(err, b)
			return
		}
		b.g.markWritten()
		w.mu.Lock()
		// A durable group sets syncDue: syncWritten is next. A lazy
		// one taken because lazy groups were due keeps it set.
		w.deferSync(b)
		w.releaseLocked(b)
	}
}

// syncWritten fdatasyncs the written groups waiting for it (unsynced)
// without holding the writer token, then completes them and moves the
// durable point to where the log was written when it started: everything
// written before an fdatasync starts is covered by it. Meanwhile a
// WaitWritten caller can take the token and write the next group, which
// the next fdatasync covers. Writer goroutine only; mu held on entry and
// on return, the token free.
func (w *WAL) syncWritten() error {
	gs := w.unsynced
	w.unsynced = w.spareUnsynced[:0]
	w.hasUnsynced, w.syncDue = false, false
	if w.lazyTimer != nil {
		w.lazyTimer.Stop()
		w.lazyTimer = nil
	}
	seg, end := w.cur, w.curEnd
	w.syncPin.Store(seg.num) // before RemoveSegmentsBefore can see a later segment
	w.syncing = true
	w.idle.set(false)
	w.mu.Unlock()

	err := w.syncFile(seg)
	if err == nil {
		w.segMu.Lock()
		w.advanceDurableLocked(seg.num, end)
		seg.size = max(seg.size, end)
		w.segMu.Unlock()
		c := &w.ctr
		for _, u := range gs {
			c.entries.Add(uint64(u.n))
			c.payloadBytes.Add(u.payload)
			c.syncedBytes.Add(u.buf)
			close(u.g.done)
		}
	}
	w.syncPin.Store(0)

	w.mu.Lock()
	w.syncing = false
	if err != nil {
		w.failSyncLocked(err, gs)
	}
	clear(gs)
	w.spareUnsynced = gs[:0]
	if err == nil && !w.committing && w.q.n == 0 && !w.hasUnsynced {
		w.idle.set(true)
	}
	return err
}

// commit writes b, rotating segments where Enqueue decided to, and makes it
// durable in the calling goroutine, holding the writer token throughout
// (commitParked: a lone append on an idle log).
func (w *WAL) commit(b *batch) error {
	if err := w.write(b); err != nil {
		return err
	}
	b.g.markWritten()
	return w.syncBatch(b)
}

// write is commit's first half: b's bytes into the segment files.
func (w *WAL) write(b *batch) error {
	for _, sp := range b.spans {
		if sp.seg != w.cur.num {
			if err := w.rotate(sp.seg); err != nil {
				return err
			}
		}
		if sp.off != w.curEnd {
			return fmt.Errorf("internal error: segment %d: writing at offset %d, log ends at %d", sp.seg, sp.off, w.curEnd)
		}
		p := b.buf[sp.start:sp.end]
		if _, err := w.cur.f.WriteAt(p, sp.off); err != nil {
			return fmt.Errorf("write segment %d at offset %d: %w", sp.seg, sp.off, err)
		}
		w.curEnd += int64(len(p))
		w.curDirty = true
	}
	return nil
}

// syncBatch is commit's second half: the fdatasync that makes the written
// b durable, and the durable point and counters.
func (w *WAL) syncBatch(b *batch) error {
	if err := w.syncCur(); err != nil {
		return err
	}
	w.segMu.Lock()
	w.advanceDurableLocked(w.cur.num, w.curEnd)
	w.cur.size = max(w.cur.size, w.curEnd) // records past a short preallocation extend the file
	w.segMu.Unlock()

	c := &w.ctr
	if b.n > 0 {
		c.entries.Add(uint64(b.n))
		c.payloadBytes.Add(uint64(len(b.buf) - b.n*headerSize))
		c.syncedBytes.Add(uint64(len(b.buf)))
		c.groups.Add(1)
		c.groupSizes[min(bits.Len(uint(b.n-1)), GroupBuckets-1)].Add(1)
	}
	// The groups written before b and not yet fdatasync'ed are durable
	// too (counted as groups when they were written); those an
	// unfinished syncWritten took are completed by it.
	for _, u := range w.unsynced {
		c.entries.Add(uint64(u.n))
		c.payloadBytes.Add(u.payload)
		c.syncedBytes.Add(u.buf)
		close(u.g.done)
	}
	clear(w.unsynced)
	w.unsynced = w.unsynced[:0]
	return nil
}

// advanceDurableLocked moves the durable point to (seg, end) unless it
// is already past it: a syncWritten that started before an inline
// commit's fdatasync may finish after it. segMu held.
func (w *WAL) advanceDurableLocked(seg uint64, end int64) {
	if seg > w.durSeg || (seg == w.durSeg && end > w.durEnd) {
		w.durSeg, w.durEnd = seg, end
	}
}

// syncCur fdatasyncs the writer's segment. Writer token held.
func (w *WAL) syncCur() error {
	if err := w.syncFile(w.cur); err != nil {
		return err
	}
	w.curDirty = false
	return nil
}

// syncFile fdatasyncs s's file, one call at a time (syncMu), and not at
// all once the log has failed: after a failed fdatasync a later one may
// succeed for pages the kernel dropped. A failure is recorded in failed
// before the next caller gets syncMu.
func (w *WAL) syncFile(s *segment) error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	if p := w.failed.Load(); p != nil {
		return *p
	}
	t := time.Now()
	err := w.sync(s.f)
	w.ctr.syncNanos.Add(uint64(time.Since(t)))
	w.ctr.syncs.Add(1)
	if err != nil {
		e := fmt.Errorf("%w: fdatasync segment %d: %w", ErrFailed, s.num, err)
		w.failed.CompareAndSwap(nil, &e) // e, not err: only a failure allocates
		return e
	}
	return nil
}

// rotate makes seg, the next segment, the writer's file.
func (w *WAL) rotate(seg uint64) error {
	if seg != w.cur.num+1 {
		return fmt.Errorf("internal error: rotation from segment %d to %d", w.cur.num, seg)
	}
	// The old segment must be durable before the new one is visible:
	// recovery forgives a torn tail only in the last segment. A
	// syncWritten may have made it so already (curDirty is the token
	// holder's: only its own fdatasyncs clear it).
	w.segMu.RLock()
	synced := w.durSeg == w.cur.num && w.durEnd == w.curEnd
	w.segMu.RUnlock()
	if w.curDirty && !synced {
		if err := w.syncCur(); err != nil {
			return err
		}
	}
	p := w.next
	w.next = nil
	if p == nil || p.seg != seg {
		return fmt.Errorf("internal error: rotating to segment %d without its prepared file", seg)
	}
	f, size, err := p.finish()
	if err != nil {
		return err
	}
	if err := w.fs.Rename(w.tmpPath(seg), w.path(seg)); err != nil {
		f.Close()
		return fmt.Errorf("install segment %d: %w", seg, err)
	}
	s := &segment{num: seg, f: f, size: size}
	w.segMu.Lock()
	w.cur.end = w.curEnd
	w.advanceDurableLocked(w.cur.num, w.curEnd)
	w.segs = append(w.segs, s)
	w.segMu.Unlock()
	w.cur, w.curEnd = s, 0
	w.prepare(seg+1, w.idle)
	if err := syncDir(w.fs, w.dir); err != nil {
		return err
	}
	w.log.Debug("wal: rotated", "segment", seg)
	return nil
}

// fail makes err sticky, fails b and everything still queued, and wakes
// blocked Enqueue calls and the writer goroutine, which exits. It is called
// by the holder of the writer token, which never gives it back: nobody
// touches the files again, because after a failed fdatasync the page cache
// may claim data the disk does not have.
func (w *WAL) fail(cause error, b *batch) {
	err := w.setFailed(cause)
	w.mu.Lock()
	w.err = err
	if b.g != nil {
		b.g.err = err
		close(b.g.done)
		b.g.markWritten()
	}
	w.abortLocked()
	w.mu.Unlock()
	w.log.Error("wal: log failed; every later call returns this error", "err", cause)
}

// failSyncLocked is fail for syncWritten, whose fdatasync of gs failed
// without the writer token: gs fail, and what is queued and written
// after them fails now, or, if a caller holds the token, when it gives
// the token back (releaseLocked). mu held.
func (w *WAL) failSyncLocked(cause error, gs []lazyGroup) {
	err := w.setFailed(cause)
	w.err = err
	for _, u := range gs {
		u.g.err = err
		close(u.g.done)
	}
	if !w.committing {
		w.abortLocked()
	}
	w.log.Error("wal: log failed; every later call returns this error", "err", cause)
}

// setFailed records the log's failure, the first one if syncFile already
// did, and returns it wrapped around ErrFailed.
func (w *WAL) setFailed(cause error) error {
	err := cause
	if !errors.Is(err, ErrFailed) {
		err = fmt.Errorf("%w: %w", ErrFailed, cause)
	}
	w.failed.CompareAndSwap(nil, &err)
	return *w.failed.Load()
}

// abortLocked fails what is queued and what is written and not yet
// fdatasync'ed once the log has failed, and wakes everyone blocked on the
// log. mu held, by the token holder or while nobody holds the token.
func (w *WAL) abortLocked() {
	err := w.err
	w.parked.Store(nil)
	if q := w.q; q.g != nil {
		q.g.err = err
		close(q.g.done)
		q.g.markWritten()
		q.reset()
	}
	// Written, never fdatasync'ed: their WaitWritten callers have
	// returned, their Wait callers learn the failure.
	for _, u := range w.unsynced {
		u.g.err = err
		close(u.g.done)
	}
	w.unsynced = nil
	w.hasUnsynced = false
	if w.lazyTimer != nil {
		w.lazyTimer.Stop()
		w.lazyTimer = nil
	}
	w.space.Broadcast()
	w.work.Broadcast() // the writer exits when a waiter's commit failed
}

// ReadAt returns the payload at pos, verifying its checksums, appended to
// dst[:0]. pos must be durable; it is safe to call concurrently with
// appends.
func (w *WAL) ReadAt(pos Pos, dst []byte) ([]byte, error) {
	if err := w.failed.Load(); err != nil {
		return dst[:0], *err
	}
	if w.isClosed.Load() {
		return dst[:0], ErrClosed
	}
	if pos.Offset < headerSize || pos.Len < 0 || pos.Len > MaxEntrySize {
		return dst[:0], fmt.Errorf("%w: invalid position %+v", ErrNotDurable, pos)
	}
	f, err := w.durableFile(pos, pos.Offset+int64(pos.Len))
	if err != nil {
		return dst[:0], err
	}

	// One pread for header and payload; the payload is then moved down
	// over the header.
	n := headerSize + int(pos.Len)
	dst = slices.Grow(dst[:0], n)[:n]
	if _, err := f.ReadAt(dst, pos.Offset-headerSize); err != nil {
		return dst[:0], w.readError(err, pos.Segment, pos.Offset-headerSize)
	}
	if err := checkRecord(dst, pos, segmentSeed(pos.Segment)); err != nil {
		return dst[:0], err
	}
	copy(dst, dst[headerSize:])
	return dst[:pos.Len], nil
}

// RemoveSegmentsBefore deletes the segment files numbered below seg, except
// the one the writer is using. Files go oldest first, so a crash midway
// leaves the numbering contiguous; a file that cannot be removed stops the
// call and stays in the log.
func (w *WAL) RemoveSegmentsBefore(seg uint64) error {
	if err := w.failed.Load(); err != nil {
		return *err
	}
	w.removeMu.Lock()
	defer w.removeMu.Unlock()
	if w.isClosed.Load() {
		return ErrClosed
	}
	w.segMu.RLock()
	var victims []*segment
	if pin := w.syncPin.Load(); pin != 0 {
		seg = min(seg, pin) // syncWritten is fdatasync'ing that file
	}
	for _, s := range w.segs[:len(w.segs)-1] {
		if s.num >= seg {
			break
		}
		victims = append(victims, s)
	}
	w.segMu.RUnlock()

	var errs []error
	removed := 0
	for _, s := range victims {
		// An unlinked file stays readable through open descriptors, so a
		// concurrent ReadAt is unharmed until the table drops it below.
		if err := w.fs.Remove(w.path(s.num)); err != nil {
			errs = append(errs, fmt.Errorf("wal: remove segment %d: %w", s.num, err))
			break
		}
		removed++
	}
	if removed == 0 {
		return errors.Join(errs...)
	}
	w.segMu.Lock()
	w.segs = slices.Clone(w.segs[removed:])
	w.segMu.Unlock()
	for _, s := range victims[:removed] {
		if err := s.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("wal: close removed segment %d: %w", s.num, err))
		}
	}
	if err := syncDir(w.fs, w.dir); err != nil {
		errs = append(errs, err)
	}
	w.log.Info("wal: removed segments", "first", victims[0].num, "last", victims[removed-1].num)
	return errors.Join(errs...)
}

// ActiveSegment returns the segment the most recently enqueued entry went
// to (the one recovery ended in, before any Enqueue). Later entries go there
// or to higher numbers.
func (w *WAL) ActiveSegment() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tailSeg
}

// Stats returns a snapshot of the log's gauges and counters.
func (w *WAL) Stats() Stats {
	var s Stats
	w.segMu.RLock()
	s.Segments = len(w.segs)
	for _, seg := range w.segs {
		s.DiskBytes += seg.size
	}
	w.segMu.RUnlock()
	w.mu.Lock()
	s.QueuedBytes = int64(len(w.q.buf))
	w.mu.Unlock()
	c := &w.ctr
	s.Entries = c.entries.Load()
	s.PayloadBytes = c.payloadBytes.Load()
	s.Groups = c.groups.Load()
	s.WaiterGroups = c.waiterGroups.Load()
	s.LazyGroups = c.lazyGroups.Load()
	s.OverlappedGroups = c.overlappedGroups.Load()
	s.Syncs = c.syncs.Load()
	s.SyncedBytes = c.syncedBytes.Load()
	s.SyncTime = time.Duration(c.syncNanos.Load())
	for i := range s.GroupSizes {
		s.GroupSizes[i] = c.groupSizes[i].Load()
	}
	return s
}

// Close writes and fdatasyncs everything already enqueued, then closes the
// files and releases the directory. It returns the log's failure, if any;
// calls after the first return ErrClosed.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.work.Broadcast()
	w.space.Broadcast()
	w.mu.Unlock()
	<-w.done

	w.removeMu.Lock()
	defer w.removeMu.Unlock()
	w.isClosed.Store(true)
	var errs []error
	if err := w.failed.Load(); err != nil {
		errs = append(errs, *err)
	}
	if p := w.next; p != nil {
		if err := p.discard(w.fs, w.tmpPath(p.seg)); err != nil {
			errs = append(errs, err)
		}
		w.next = nil
	}
	w.segMu.Lock()
	for _, s := range w.segs {
		if err := s.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("wal: close segment %d: %w", s.num, err))
		}
	}
	w.segs = nil
	w.segMu.Unlock()
	if err := w.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("wal: release lock: %w", err))
	}
	return errors.Join(errs...)
}
