// Package clock is the time source of the Kafka coordinators (groups,
// transactions): the real clock in production, a fake one in tests, so a
// session, rebalance or transaction timeout is tested by moving time
// instead of waiting for it.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f once d has passed, as time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the function from running; false if it already ran or
	// was stopped.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a clock that moves only when told (Advance). Functions that fall
// due run synchronously inside Advance, in due order, on the caller's
// goroutine and without the clock's lock held, so they may arm new timers.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[*fakeTimer]struct{}
}

// NewFake starts a fake clock at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: map[*fakeTimer]struct{}{}}
}

type fakeTimer struct {
	c   *Fake
	at  time.Time
	seq uint64
	f   func()
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &fakeTimer{c: f, at: f.now.Add(d), seq: f.seq, f: fn}
	f.timers[t] = struct{}{}
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}

// Advance moves the clock by d, running every function that falls due on
// the way (including ones armed by those functions), each with the clock
// reading its due time.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		var due []*fakeTimer
		for t := range f.timers {
			if !t.at.After(end) {
				due = append(due, t)
			}
		}
		if len(due) == 0 {
			f.now = end
			f.mu.Unlock()
			return
		}
		sort.Slice(due, func(i, j int) bool {
			if !due[i].at.Equal(due[j].at) {
				return due[i].at.Before(due[j].at)
			}
			return due[i].seq < due[j].seq
		})
		t := due[0]
		delete(f.timers, t)
		if t.at.After(f.now) {
			f.now = t.at
		}
		f.mu.Unlock()
		t.f()
	}
}

// Pending is the number of armed timers: a test waits for a request to
// have armed its timer before it moves the clock.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}
