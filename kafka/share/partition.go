package share

import (
	"errors"
	"sync"
	"time"
)

// Acknowledge types of ShareFetch/ShareAcknowledge (KIP-932, KIP-1222).
const (
	AckGap     int8 = 0 // offsets without a record (the client saw none): archived
	AckAccept  int8 = 1
	AckRelease int8 = 2
	AckReject  int8 = 3
	AckRenew   int8 = 4 // keep the records acquired: the lock starts again
)

// ErrInvalidRecordState: an acknowledgement names records this member
// does not hold (never acquired, already acknowledged, or its lock ran
// out and they went back to the pool). Kafka's INVALID_RECORD_STATE.
var ErrInvalidRecordState = errors.New("share: records not acquired by this member")

// ErrInvalidAckType is an acknowledge type outside 0-4, or a type list
// whose length fits neither one type for the batch nor one per offset.
var ErrInvalidAckType = errors.New("share: invalid acknowledge type")

type recState uint8

const (
	stAvailable recState = iota // may be acquired (never delivered, or released)
	stAcquired                  // delivered, lock held by member until until
	stAcked                     // accepted: done
	stArchived                  // rejected, delivery limit reached, or no record: done
)

// inflight is one offset between the start offset and the end offset.
type inflight struct {
	state  recState
	count  int16 // deliveries so far
	member string
	until  time.Time
}

// Limits are what a share-partition needs to know of its group's configs.
type Limits struct {
	Lock          time.Duration // acquisition lock (share.record.lock.duration.ms)
	DeliveryLimit int16         // deliveries before a record is archived
	MaxInFlight   int           // end offset - start offset, at most
}

// Span is one stored batch as Acquire sees it: its offsets, whether it is a
// control batch (transaction marker) and whether its records belong to an
// aborted transaction (both are never delivered).
type Span struct {
	First, Last int64
	Skip        bool // control batch or aborted transaction
}

// Range is a run of acquired offsets with one delivery count.
type Range struct {
	First, Last int64
	Count       int16
}

// Partition is a share group's view of one topic partition: the share-
// partition start offset (SPSO, below which everything is done) and the
// state of every offset from there to the end offset (SPEO, the first
// offset never acquired). Methods are safe for concurrent use; time comes
// from the caller, so tests move it.
type Partition struct {
	mu     sync.Mutex
	loaded bool
	spso   int64
	recs   []inflight // recs[i] is offset spso+i
	wake   chan struct{}

	// persisted is the SPSO last written to the offsets store; flushing
	// says a write is under way (one at a time per partition).
	persisted int64
	flushing  bool
	failedAt  time.Time
}

// NewPartition returns a share-partition whose start offset is not known
// yet (Loaded false).
func NewPartition() *Partition { return &Partition{wake: make(chan struct{}), persisted: -1} }

// Loaded says whether Init ran.
func (p *Partition) Loaded() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loaded
}

// Init sets the start offset (durable SPSO or the auto.offset.reset
// answer) and forgets any in-flight state; persisted says the offset came
// from the store.
func (p *Partition) Init(spso int64, persisted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loaded, p.spso, p.recs = true, spso, nil
	if persisted {
		p.persisted = spso
	}
}

// StartOffset returns the SPSO.
func (p *Partition) StartOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spso
}

// EndOffset returns the SPEO.
func (p *Partition) EndOffset() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spso + int64(len(p.recs))
}

// Wake returns a channel closed when records become available again
// (released, lock expired), for long-polling fetches.
func (p *Partition) Wake() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wake
}

func (p *Partition) wakeLocked() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// backToPoolLocked makes an acquired record available again, or archives
// it once it has been delivered limit times.
func (p *Partition) backToPoolLocked(r *inflight, limit int16) {
	r.member, r.until = "", time.Time{}
	if r.count >= limit {
		r.state = stArchived
		return
	}
	r.state = stAvailable
}

// expireLocked returns the records whose lock ran out to the pool.
func (p *Partition) expireLocked(now time.Time, lim Limits) {
	woke := false
	for i := range p.recs {
		r := &p.recs[i]
		if r.state == stAcquired && !now.Before(r.until) {
			p.backToPoolLocked(r, lim.DeliveryLimit)
			woke = true
		}
	}
	if woke {
		p.wakeLocked()
		p.trimLocked()
	}
}

// trimLocked moves the SPSO past the done records at the front.
func (p *Partition) trimLocked() {
	n := 0
	for n < len(p.recs) && (p.recs[n].state == stAcked || p.recs[n].state == stArchived) {
		n++
	}
	if n > 0 {
		p.spso += int64(n)
		p.recs = append(p.recs[:0:0], p.recs[n:]...)
	}
}

// NextOffset expires locks and returns where a fetch should read from:
// the first available in-flight offset, else the end offset. ok is false
// when nothing can be acquired without reading new records and the
// in-flight window is full.
func (p *Partition) NextOffset(now time.Time, lim Limits) (off int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(now, lim)
	for i := range p.recs {
		if p.recs[i].state == stAvailable {
			return p.spso + int64(i), true
		}
	}
	return p.spso + int64(len(p.recs)), len(p.recs) < lim.MaxInFlight
}

// NextExpiry is the earliest lock deadline (zero if none), for a
// long-poll to wake when records come back.
func (p *Partition) NextExpiry() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t time.Time
	for i := range p.recs {
		if r := p.recs[i]; r.state == stAcquired && (t.IsZero() || r.until.Before(t)) {
			t = r.until
		}
	}
	return t
}

// Acquire gives member up to max records of spans (stored batches in
// offset order, read from NextOffset's answer) below end (the high
// watermark, or the last stable offset under read_committed), locked until
// now+lim.Lock. Available in-flight records come back with their delivery
// count raised; offsets past the end offset join the in-flight window (up
// to lim.MaxInFlight), skipped spans and offsets without a record as
// archived. It returns the acquired ranges in offset order.
func (p *Partition) Acquire(member string, now time.Time, spans []Span, end int64, max int, lim Limits) []Range {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(now, lim)
	var out []Range
	got := 0
	until := now.Add(lim.Lock)
	take := func(o int64, r *inflight) {
		r.state, r.member, r.until = stAcquired, member, until
		r.count++
		got++
		if n := len(out); n > 0 && out[n-1].Last == o-1 && out[n-1].Count == r.count {
			out[n-1].Last = o
			return
		}
		out = append(out, Range{First: o, Last: o, Count: r.count})
	}
spans:
	for _, sp := range spans {
		for o := max64(sp.First, p.spso); o <= sp.Last && o < end; o++ {
			if got >= max {
				break spans
			}
			i := int(o - p.spso)
			if i < len(p.recs) {
				if r := &p.recs[i]; r.state == stAvailable {
					take(o, r)
				}
				continue
			}
			// New territory: offsets the stream skipped (compaction)
			// are archived, then this one joins the window.
			for len(p.recs) < i {
				if len(p.recs) >= lim.MaxInFlight {
					break spans
				}
				p.recs = append(p.recs, inflight{state: stArchived})
			}
			if len(p.recs) >= lim.MaxInFlight {
				break spans
			}
			if sp.Skip {
				p.recs = append(p.recs, inflight{state: stArchived})
				continue
			}
			p.recs = append(p.recs, inflight{})
			take(o, &p.recs[i])
		}
	}
	p.trimLocked()
	return out
}

// AckBatch is one acknowledgement batch: types holds one type for the
// whole range or one per offset.
type AckBatch struct {
	First, Last int64
	Types       []int8
}

// Acknowledge applies member's acknowledgements to records it holds. All
// batches are checked first: if one names a record member does not hold,
// nothing is applied (ErrInvalidRecordState).
func (p *Partition) Acknowledge(member string, now time.Time, batches []AckBatch, lim Limits) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked(now, lim)
	end := p.spso + int64(len(p.recs))
	for _, b := range batches {
		n := b.Last - b.First + 1
		if b.First > b.Last || (len(b.Types) != 1 && int64(len(b.Types)) != n) {
			return ErrInvalidAckType
		}
		for _, t := range b.Types {
			if t < AckGap || t > AckRenew {
				return ErrInvalidAckType
			}
		}
		if b.First < p.spso || b.Last >= end {
			return ErrInvalidRecordState
		}
		for o := b.First; o <= b.Last; o++ {
			if r := p.recs[o-p.spso]; r.state != stAcquired || r.member != member {
				return ErrInvalidRecordState
			}
		}
	}
	woke := false
	for _, b := range batches {
		for o := b.First; o <= b.Last; o++ {
			t := b.Types[0]
			if len(b.Types) > 1 {
				t = b.Types[o-b.First]
			}
			r := &p.recs[o-p.spso]
			switch t {
			case AckAccept:
				r.state, r.member, r.until = stAcked, "", time.Time{}
			case AckRelease:
				p.backToPoolLocked(r, lim.DeliveryLimit)
				woke = true
			case AckReject, AckGap:
				r.state, r.member, r.until = stArchived, "", time.Time{}
			case AckRenew:
				r.until = now.Add(lim.Lock)
			}
		}
	}
	if woke {
		p.wakeLocked()
	}
	p.trimLocked()
	return nil
}

// ReleaseMember returns every record member holds to the pool (its share
// session closed, or it left the group); the delivery count stays.
func (p *Partition) ReleaseMember(member string, lim Limits) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := range p.recs {
		if r := &p.recs[i]; r.state == stAcquired && r.member == member {
			p.backToPoolLocked(r, lim.DeliveryLimit)
			n++
		}
	}
	if n > 0 {
		p.wakeLocked()
		p.trimLocked()
	}
	return n
}

// InFlight counts the records per state, for tests and describe: acquired
// and available (waiting for redelivery).
func (p *Partition) InFlight() (acquired, available int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.recs {
		switch r.state {
		case stAcquired:
			acquired++
		case stAvailable:
			available++
		}
	}
	return acquired, available
}

// BeginFlush reports the SPSO to store, if it moved since the last write,
// no write is under way and none failed in the last five seconds; the
// caller then calls EndFlush.
func (p *Partition) BeginFlush(now time.Time) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flushing || !p.loaded || p.spso == p.persisted || now.Sub(p.failedAt) < 5*time.Second {
		return 0, false
	}
	p.flushing = true
	return p.spso, true
}

// EndFlush records the outcome of a write of off.
func (p *Partition) EndFlush(off int64, ok bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushing = false
	if ok {
		p.persisted = off
	} else {
		p.failedAt = now
	}
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
