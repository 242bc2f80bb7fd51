package picomq

import (
	"context"
	"errors"
	"iter"
	"time"
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
	cur    Record
	done   bool
	err    error
	// ahead is the read of the page at pos already in flight (nil: none):
	// while the caller works through one page of a catch-up, the next one
	// is on its way, so the reader does not wait a round trip per page.
	ahead *pageRead
}

// pageRead is one page read started ahead of need.
type pageRead struct {
	from   string
	cursor string
	done   chan struct{}
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
	return &Records{s: s, opts: opts, pos: from}
}

// readOptions are the options of the iterator's next page read.
func (it *Records) readOptions(cursor string) ReadOptions {
	return ReadOptions{Limit: it.opts.Limit, MaxBytes: it.opts.MaxBytes, LongPoll: it.opts.Live, Cursor: cursor}
}

// readAhead starts reading the page at it.pos. Only pages of history are
// read ahead: a page that would long-poll at the end of the stream is
// asked for when it is needed. The read runs on ctx without its
// cancellation (a caller may give each Next its own short context), bound
// by its own deadline; an iterator dropped mid-stream leaves at most this
// one read to finish.
func (it *Records) readAhead(ctx context.Context) {
	a := &pageRead{from: it.pos, cursor: it.cursor, done: make(chan struct{})}
	it.ahead = a
	opts := it.readOptions(a.cursor)
	opts.LongPoll = false
	go func() {
		defer close(a.done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readAheadTimeout)
		defer cancel()
		a.page, a.err = it.s.Read(rctx, a.from, opts)
	}()
}

// readAheadTimeout bounds a page read started ahead of need.
const readAheadTimeout = 2 * time.Minute

// takeAhead returns the page read ahead at it.pos if it arrived whole;
// ok=false (a failed, stale or empty read) means read the page now, so
// errors and long-polls happen as without read-ahead.
func (it *Records) takeAhead(ctx context.Context) (Page, bool, error) {
	a := it.ahead
	if a == nil {
		return Page{}, false, nil
	}
	select {
	case <-a.done:
	case <-ctx.Done():
		return Page{}, false, ctx.Err() // the read stays in flight for the next Next
	}
	it.ahead = nil
	if a.err != nil || a.from != it.pos || len(a.page.Records) == 0 {
		return Page{}, false, nil
	}
	return a.page, true, nil
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
		if it.i < len(it.page) {
			it.cur = it.page[it.i]
			it.i++
			return true
		}
		if it.done {
			return false
		}
		page, ok, err := it.takeAhead(ctx)
		if err != nil {
			it.err = err
			return false
		}
		if !ok {
			page, err = it.s.Read(ctx, it.pos, it.readOptions(it.cursor))
			if err != nil {
				it.err = err
				return false
			}
		}
		it.page, it.i = page.Records, 0
		if page.Next != "" {
			it.pos = page.Next
		}
		if page.Cursor != "" {
			it.cursor = page.Cursor
		}
		if page.Closed || (page.UpToDate && !it.opts.Live) {
			it.done = true
		}
		if !it.done && !page.UpToDate && len(page.Records) > 0 && !it.s.ds() {
			it.readAhead(ctx)
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
