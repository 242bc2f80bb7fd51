package picomq

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/sdk/hugepage"
)

// RecordsOptions tune a Records iterator.
type RecordsOptions struct {
	// Live keeps the iterator going after it has caught up: it long-polls
	// for new records instead of ending. A live iterator ends only when
	// the stream is closed, on an error, or when the context passed to
	// Next is cancelled.
	Live bool
	// Limit and MaxBytes bound each page (Pico). When both are 0 a Pico
	// iterator asks for pages by bytes, CatchUpPageBytes each (and as
	// many records as the server allows), not the server's default of
	// 1,000 records: catching up is then a few large pages.
	Limit    int
	MaxBytes int
	// ReuseBuffers lets a Pico iterator read later pages into the memory
	// of pages it has finished with, instead of fresh memory for every
	// page: a catch-up then costs the client a few page buffers, not a
	// buffer per page (fresh memory is most of a catch-up's client CPU,
	// docs/sdk-go.md). The price: a Record's Body, Key and header values
	// are valid only until the next call to Next; copy what you keep
	// (Position stays valid). Off by default, since a record kept past
	// Next would then change under its holder.
	ReuseBuffers bool
}

// CatchUpPageBytes is the page size a Pico Records iterator asks for when
// RecordsOptions sets no limit: 4 MiB, the largest read the node serves
// from one object-store GET (docs/sdk-go.md).
const CatchUpPageBytes = 4 << 20

// catchUpLimit is the record limit sent with byte-sized pages: the most a
// node serves in one read (it caps larger values), so bytes bound the page.
const catchUpLimit = 10000

// Records iterates over a stream's records, reading a page at a time:
//
//	it := stream.Records(client.Beginning(), picomq.RecordsOptions{})
//	for it.Next(ctx) {
//		rec := it.Record()
//		…
//	}
//	if err := it.Err(); err != nil { … }
//	resume := it.Position() // continue here later
//
// A Records is not safe for concurrent use.
type Records struct {
	s      *stream
	opts   RecordsOptions
	pos    string // where the next page starts
	cursor string
	page   []Record
	i      int // index of the next record of page
	// lazy, when not nil, is the page of stored batches being handed out
	// (before page), decoded record by record; lazyFrom is where it
	// started.
	lazy     *lazyPage
	lazyFrom string
	cur      Record
	done     bool
	err      error
	// A Pico catch-up reads ahead: as soon as a page's response headers
	// say the stream goes on (not up to date, Pico-Next-Offset past the
	// page's start), the next page's request is sent, on another
	// connection, while this page's body is read and decoded and the
	// caller works through it. waiting is the read Next awaits (nil:
	// none), ahead the reads started after it, in stream order, at most
	// maxReadsAhead of them.
	waiting *pageRead
	ahead   []*pageRead
	// With ReuseBuffers: the free page buffers, and the buffer of the
	// page being handed out, which goes back to bufs when Next moves on.
	bufs    *pageBuffers
	curBody []byte
}

// pageBuffers are the page buffers of a client's Records iterators with
// ReuseBuffers that no page handed out uses any more. Reads ahead take
// from it on their own goroutines, and iterators share it, hence the
// lock.
type pageBuffers struct {
	mu   sync.Mutex
	free [][]byte
}

// maxFreePageBuffers bounds the free buffers kept: one iterator holds
// the page it hands out, the page before it until Next moves on (the
// read after the next one starts on the next one's headers, before that)
// and maxReadsAhead reads in flight, and never needs more. An idle client
// that used ReuseBuffers holds at most these: 12-18 MiB for catch-up
// pages.
const maxFreePageBuffers = maxReadsAhead + 2

// get returns a buffer of n bytes: a free one large enough, else a new
// one with room to spare, so that pages of slightly different sizes (a
// page ends on a batch boundary) fit in it later. A page of a huge page
// or more gets n rounded up to whole huge pages (hugepage.Make: the
// rounded-up tail is never written until a larger page needs it, so
// fresh memory there is never backed). A smaller one gets a plain buffer
// of n rounded up to an eighth of a huge page: rounded up to a huge page
// it was a 4 MiB allocation (hugepage.Make's alignment slack included)
// that the Go heap clears whole when it recycles memory, for a 1 MiB
// page; those clears were a fifth of the client's CPU with 100 readers
// of 1 MiB streams (docs/benchmarks.md, "The 100 cold readers' client").
func (p *pageBuffers) get(n int) []byte {
	p.mu.Lock()
	for i, b := range p.free {
		if cap(b) >= n {
			p.free = slices.Delete(p.free, i, i+1)
			p.mu.Unlock()
			return b[:n]
		}
	}
	p.mu.Unlock()
	if n < hugepage.Size/2 {
		return make([]byte, n) // a small page: its memory is no matter
	}
	if n < hugepage.Size {
		const step = hugepage.Size / 8
		return make([]byte, (n+step-1)&^(step-1))[:n]
	}
	return hugepage.Make((n + hugepage.Size - 1) &^ (hugepage.Size - 1))[:n]
}

// put gives back a buffer no record handed out may alias any more.
func (p *pageBuffers) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxFreePageBuffers {
		p.free = append(p.free, b[:0])
	}
}

// alloc is the body allocator of the iterator's page reads: nil (fresh
// memory per page) unless ReuseBuffers.
func (it *Records) alloc() func(int) []byte {
	if it.bufs == nil {
		return nil
	}
	return it.bufs.get
}

// maxReadsAhead bounds the page reads a Records iterator has in flight
// beyond the page it is reading or handing out. One is enough to keep a
// node busy while the client takes a page (docs/benchmarks.md, "Fifth
// pass"); more would hold more connections and pages of memory per reader.
const maxReadsAhead = 1

// pageRead is one page read started ahead of need.
type pageRead struct {
	from   string
	cursor string
	cancel context.CancelFunc
	head   chan struct{} // closed once the headers are in (or the read failed)
	headOK bool          // set before head closes: hdr holds the headers' page
	hdr    Page          // Next, UpToDate, Closed, Cursor; no records
	done   chan struct{} // closed once page and err are set
	page   Page
	err    error
}

func (s *stream) Records(from string, opts RecordsOptions) *Records {
	if from == "" {
		from = s.c.Beginning()
	}
	if !s.ds() && opts.Limit == 0 && opts.MaxBytes == 0 {
		opts.Limit, opts.MaxBytes = catchUpLimit, CatchUpPageBytes
	}
	it := &Records{s: s, opts: opts, pos: from}
	if opts.ReuseBuffers && !s.ds() {
		it.bufs = &s.c.pageBufs
	}
	return it
}

// readOptions are the options of the iterator's next page read.
func (it *Records) readOptions(cursor string) ReadOptions {
	return ReadOptions{Limit: it.opts.Limit, MaxBytes: it.opts.MaxBytes, LongPoll: it.opts.Live, Cursor: cursor}
}

// goesOn reports whether a page read from `from` whose headers are hdr is
// followed by more history worth reading ahead: not up to date (a read
// there would long-poll or find nothing), not closed, and moving forward.
func goesOn(from string, hdr Page) bool {
	return !hdr.UpToDate && !hdr.Closed && hdr.Next != "" && hdr.Next != from
}

// startAhead starts reading the page at from. Only pages of history are
// read ahead (never a long-poll). The read runs on ctx without its
// cancellation (a caller may give each Next its own short context), bound
// by its own deadline; an iterator dropped mid-stream leaves at most
// maxReadsAhead+1 such reads to finish, each within readAheadTimeout.
func (it *Records) startAhead(ctx context.Context, from, cursor string) {
	a := &pageRead{from: from, cursor: cursor, head: make(chan struct{}), done: make(chan struct{})}
	opts := it.readOptions(cursor)
	opts.LongPoll = false
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readAheadTimeout)
	a.cancel = cancel
	s := it.s
	alloc := it.alloc()
	go func() {
		defer close(a.done)
		defer cancel()
		r, err := s.picoReadStart(rctx, from, opts)
		if err != nil {
			a.err = err
			close(a.head)
			return
		}
		r.alloc = alloc
		a.hdr, a.headOK = r.page, true
		close(a.head)
		a.page, a.err = s.picoReadFinish(r, true)
	}()
	it.ahead = append(it.ahead, a)
}

// readAheadTimeout bounds a page read started ahead of need.
const readAheadTimeout = 2 * time.Minute

// topUp starts the reads ahead that the headers already in allow, up to
// maxReadsAhead. It does not block: when the next read depends on headers
// still on their way it returns the channel that closes when they arrive,
// else nil.
func (it *Records) topUp(ctx context.Context) <-chan struct{} {
	for len(it.ahead) < maxReadsAhead {
		src := it.waiting
		if n := len(it.ahead); n > 0 {
			src = it.ahead[n-1]
		}
		if src == nil {
			return nil
		}
		select {
		case <-src.head:
		default:
			return src.head
		}
		if !src.headOK || !goesOn(src.from, src.hdr) {
			return nil
		}
		cursor := src.hdr.Cursor
		if cursor == "" {
			cursor = src.cursor
		}
		it.startAhead(ctx, src.hdr.Next, cursor)
	}
	return nil
}

// dropAhead cancels the reads ahead (after one failed, or a position
// changed under them): the next page is then read as without read-ahead.
func (it *Records) dropAhead() {
	for _, a := range it.ahead {
		a.cancel()
	}
	it.ahead = nil
}

// nextPage returns the page at it.pos: the one read ahead if it arrived
// whole, else read now, so errors and long-polls happen as without
// read-ahead. Cancelling ctx while a read ahead is awaited leaves it in
// flight for the next Next.
func (it *Records) nextPage(ctx context.Context) (Page, error) {
	if it.waiting == nil && len(it.ahead) > 0 {
		it.waiting, it.ahead = it.ahead[0], it.ahead[1:]
	}
	if w := it.waiting; w != nil {
	wait:
		for {
			headers := it.topUp(ctx) // the page after w is asked for once w's headers are in
			select {
			case <-w.done:
				break wait
			case <-headers:
			case <-ctx.Done():
				return Page{}, ctx.Err()
			}
		}
		it.topUp(ctx)
		it.waiting = nil
		if w.err == nil && w.from == it.pos && w.page.hasRecords() {
			return w.page, nil
		}
		it.dropAhead()
	}
	return it.readNow(ctx)
}

// readNow reads the page at it.pos on ctx. On Pico the page after it is
// asked for as soon as this one's headers are in.
func (it *Records) readNow(ctx context.Context) (Page, error) {
	opts := it.readOptions(it.cursor)
	if it.s.ds() {
		return it.s.Read(ctx, it.pos, opts)
	}
	if err := it.s.checkName(); err != nil {
		return Page{}, err
	}
	r, err := it.s.picoReadStart(ctx, it.pos, opts)
	if err != nil {
		return Page{}, err
	}
	r.alloc = it.alloc()
	if len(it.ahead) < maxReadsAhead && goesOn(it.pos, r.page) {
		cursor := r.page.Cursor
		if cursor == "" {
			cursor = it.cursor
		}
		it.startAhead(ctx, r.page.Next, cursor)
	}
	return it.s.picoReadFinish(r, true)
}

// Next advances to the next record, reading pages as needed, and reports
// whether there is one. Cancelling ctx interrupts a pending read: Next then
// returns false and Err returns the context's error; a later Next with a
// live context carries on from the same position. Any other error ends the
// iteration.
func (it *Records) Next(ctx context.Context) bool {
	if it.err != nil && !isContextError(it.err) {
		return false
	}
	it.err = nil
	for {
		if it.lazy != nil {
			if rec, ok := it.lazy.next(); ok {
				it.cur = rec
				if len(it.ahead) < maxReadsAhead && len(it.ahead) > 0 {
					it.topUp(ctx)
				}
				return true
			}
			if err := it.lazy.err(); err != nil {
				// A later batch of the page broke: the records handed
				// out were checked (their batches' CRCs held); the
				// iteration ends after them.
				it.pos = it.lazy.resume(it.lazyFrom)
				it.lazy = nil
				it.dropAhead()
				it.err = err
				return false
			}
			it.lazy = nil
		}
		if it.i < len(it.page) {
			it.cur = it.page[it.i]
			it.i++
			if len(it.ahead) < maxReadsAhead && len(it.ahead) > 0 {
				it.topUp(ctx) // a deeper read-ahead grows as headers arrive
			}
			return true
		}
		if it.done {
			if it.bufs != nil {
				// The last page's records were valid until this Next.
				it.bufs.put(it.curBody)
				it.curBody = nil
			}
			return false
		}
		page, err := it.nextPage(ctx)
		if err != nil {
			if !isContextError(err) {
				it.dropAhead() // the iteration ends here
			}
			it.err = err
			return false
		}
		it.page, it.i = page.Records, 0
		it.lazy, it.lazyFrom = page.lazy, it.pos
		if it.bufs != nil {
			// The records of the page before are done with (the caller
			// was told they last until this Next): its buffer can take a
			// later page.
			it.bufs.put(it.curBody)
			it.curBody = page.body
		}
		if page.Next != "" {
			it.pos = page.Next
		}
		if page.Cursor != "" {
			it.cursor = page.Cursor
		}
		if page.Closed || (page.UpToDate && !it.opts.Live) {
			it.done = true
			it.dropAhead()
		}
	}
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Record returns the record Next advanced to.
func (it *Records) Record() Record { return it.cur }

// Err returns the error that stopped the iteration, or nil if it ended at
// the stream's end (or its close).
func (it *Records) Err() error { return it.err }

// Position returns where to resume after the records returned so far: the
// position of the next record not yet returned.
func (it *Records) Position() string {
	if it.lazy != nil {
		if p := it.lazy.nextPosition(it.lazyFrom); p != "" {
			return p
		}
	}
	if it.i < len(it.page) && it.page[it.i].Position != "" {
		return it.page[it.i].Position
	}
	// The page is used up (or, on a Durable Streams server that gives no
	// per-record positions, only its end is known).
	return it.pos
}

// All returns the remaining records as a range-over-func sequence; it stops
// at the first error, which it yields with a zero Record.
//
//	for rec, err := range stream.Records(from, opts).All(ctx) { … }
func (it *Records) All(ctx context.Context) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for it.Next(ctx) {
			if !yield(it.Record(), nil) {
				return
			}
		}
		if err := it.Err(); err != nil {
			yield(Record{}, err)
		}
	}
}
