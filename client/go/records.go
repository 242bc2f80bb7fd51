package picomq

import (
	"context"
	"errors"
	"iter"
)

// RecordsOptions tune a Records iterator.
type RecordsOptions struct {
	// Live keeps the iterator going after it has caught up: it long-polls
	// for new records instead of ending. A live iterator ends only when
	// the stream is closed, on an error, or when the context passed to
	// Next is cancelled.
	Live bool
	// Limit and MaxBytes bound each page (Pico; 0 = server defaults).
	Limit    int
	MaxBytes int
}

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
}

func (s *stream) Records(from string, opts RecordsOptions) *Records {
	if from == "" {
		from = s.c.Beginning()
	}
	return &Records{s: s, opts: opts, pos: from}
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
		page, err := it.s.Read(ctx, it.pos, ReadOptions{
			Limit: it.opts.Limit, MaxBytes: it.opts.MaxBytes,
			LongPoll: it.opts.Live, Cursor: it.cursor,
		})
		if err != nil {
			it.err = err
			return false
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
