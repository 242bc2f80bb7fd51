package share

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/kafka/clock"
)

var lim = Limits{Lock: 30 * time.Second, DeliveryLimit: 5, MaxInFlight: 100}

// spans10 is one batch of offsets 0-9.
var spans10 = []Span{{First: 0, Last: 9}}

func loaded(spso int64) *Partition {
	p := NewPartition()
	p.Init(spso, true)
	return p
}

func TestAcquireHandsOutEachRecordOnce(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	got := p.Acquire("a", c.Now(), spans10, 10, 4, lim)
	if want := []Range{{0, 3, 1}}; !slices.Equal(got, want) {
		t.Fatalf("first acquire = %v, want %v", got, want)
	}
	from, ok := p.NextOffset(c.Now(), lim)
	if !ok || from != 4 {
		t.Fatalf("NextOffset = %d %v, want 4 true", from, ok)
	}
	got = p.Acquire("b", c.Now(), spans10, 10, 100, lim)
	if want := []Range{{4, 9, 1}}; !slices.Equal(got, want) {
		t.Fatalf("second acquire = %v, want %v (no record twice)", got, want)
	}
	if got := p.Acquire("c", c.Now(), spans10, 10, 100, lim); len(got) != 0 {
		t.Fatalf("third acquire = %v, want nothing", got)
	}
}

func TestAcquireStopsAtEnd(t *testing.T) {
	p := loaded(0)
	got := p.Acquire("a", time.Unix(0, 0), spans10, 6, 100, lim)
	if want := []Range{{0, 5, 1}}; !slices.Equal(got, want) {
		t.Fatalf("acquire below end 6 = %v, want %v", got, want)
	}
}

func TestLockTimeoutRedelivers(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	p.Acquire("a", c.Now(), spans10, 10, 100, lim)
	c.Advance(lim.Lock - time.Millisecond)
	if got := p.Acquire("b", c.Now(), spans10, 10, 100, lim); len(got) != 0 {
		t.Fatalf("before the lock runs out: %v, want nothing", got)
	}
	if e := p.NextExpiry(); !e.Equal(time.Unix(1000, 0).Add(lim.Lock)) {
		t.Fatalf("NextExpiry = %v", e)
	}
	c.Advance(time.Millisecond)
	got := p.Acquire("b", c.Now(), spans10, 10, 100, lim)
	if want := []Range{{0, 9, 2}}; !slices.Equal(got, want) {
		t.Fatalf("after the lock ran out: %v, want %v (delivery count 2)", got, want)
	}
	// a's acknowledgement comes too late: b holds the records now.
	if err := p.Acknowledge("a", c.Now(), []AckBatch{{0, 9, []int8{AckAccept}}}, lim); !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("late ack = %v, want ErrInvalidRecordState", err)
	}
}

func TestDeliveryLimitArchives(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	one := []Span{{First: 0, Last: 0}}
	for i := int16(1); i <= lim.DeliveryLimit; i++ {
		got := p.Acquire("a", c.Now(), one, 1, 10, lim)
		if want := []Range{{0, 0, i}}; !slices.Equal(got, want) {
			t.Fatalf("delivery %d: %v, want %v", i, got, want)
		}
		if i%2 == 0 {
			c.Advance(lim.Lock) // lock runs out
			continue
		}
		if err := p.Acknowledge("a", c.Now(), []AckBatch{{0, 0, []int8{AckRelease}}}, lim); err != nil {
			t.Fatal(err)
		}
	}
	// The release after the DeliveryLimit-th delivery archived it.
	if got := p.Acquire("a", c.Now(), one, 1, 10, lim); len(got) != 0 {
		t.Fatalf("after %d deliveries: %v, want nothing (archived)", lim.DeliveryLimit, got)
	}
	if p.StartOffset() != 1 {
		t.Fatalf("start offset = %d, want 1 (archived record done)", p.StartOffset())
	}
}

func TestAcknowledgeTypes(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	p.Acquire("a", c.Now(), spans10, 10, 100, lim)
	// 0-1 accept, 2 release, 3 reject, 4 gap, 5 renew, 6-9 one type each.
	err := p.Acknowledge("a", c.Now(), []AckBatch{
		{0, 1, []int8{AckAccept}},
		{2, 5, []int8{AckRelease, AckReject, AckGap, AckRenew}},
	}, lim)
	if err != nil {
		t.Fatal(err)
	}
	if p.StartOffset() != 2 {
		t.Fatalf("start offset = %d, want 2", p.StartOffset())
	}
	c.Advance(10 * time.Second)
	// 2 is available again; the rest is held by a (5 renewed).
	got := p.Acquire("b", c.Now(), spans10, 10, 100, lim)
	if want := []Range{{2, 2, 2}}; !slices.Equal(got, want) {
		t.Fatalf("after release: %v, want %v", got, want)
	}
	c.Advance(20 * time.Second) // 6-9 (locked at 0 s) run out; 5 (renewed at 0 s... +30 s) too
	got = p.Acquire("b", c.Now(), spans10, 10, 100, lim)
	if want := []Range{{5, 9, 2}}; !slices.Equal(got, want) {
		t.Fatalf("after the locks ran out: %v, want %v", got, want)
	}
	if err := p.Acknowledge("b", c.Now(), []AckBatch{{2, 2, []int8{AckAccept}}, {5, 9, []int8{AckAccept}}}, lim); err != nil {
		t.Fatal(err)
	}
	if p.StartOffset() != 10 || p.EndOffset() != 10 {
		t.Fatalf("start/end = %d/%d, want 10/10", p.StartOffset(), p.EndOffset())
	}
}

func TestRenewExtendsLock(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	p.Acquire("a", c.Now(), spans10, 10, 100, lim)
	c.Advance(20 * time.Second)
	if err := p.Acknowledge("a", c.Now(), []AckBatch{{0, 9, []int8{AckRenew}}}, lim); err != nil {
		t.Fatal(err)
	}
	c.Advance(20 * time.Second) // 40 s after acquiring, 20 s after renewing
	if got := p.Acquire("b", c.Now(), spans10, 10, 100, lim); len(got) != 0 {
		t.Fatalf("renewed records went to b: %v", got)
	}
	if err := p.Acknowledge("a", c.Now(), []AckBatch{{0, 9, []int8{AckAccept}}}, lim); err != nil {
		t.Fatalf("accept after renew: %v", err)
	}
}

func TestAcknowledgeIsAllOrNothing(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	p := loaded(0)
	p.Acquire("a", c.Now(), spans10, 10, 5, lim) // 0-4
	err := p.Acknowledge("a", c.Now(), []AckBatch{{0, 1, []int8{AckAccept}}, {4, 6, []int8{AckAccept}}}, lim)
	if !errors.Is(err, ErrInvalidRecordState) {
		t.Fatalf("ack past what a holds = %v, want ErrInvalidRecordState", err)
	}
	if p.StartOffset() != 0 {
		t.Fatalf("start offset = %d: a refused ack applied", p.StartOffset())
	}
	for _, b := range []AckBatch{{0, 1, []int8{9}}, {0, 1, []int8{1, 1, 1}}, {3, 1, []int8{1}}} {
		if err := p.Acknowledge("a", c.Now(), []AckBatch{b}, lim); !errors.Is(err, ErrInvalidAckType) {
			t.Errorf("ack %v = %v, want ErrInvalidAckType", b, err)
		}
	}
}

func TestSkippedSpansAndGapsAreArchived(t *testing.T) {
	p := loaded(0)
	// 0-2 data, 3 a control batch, 4-5 missing (compacted), 6-7 data.
	sp := []Span{{0, 2, false}, {3, 3, true}, {6, 7, false}}
	got := p.Acquire("a", time.Unix(0, 0), sp, 8, 100, lim)
	if want := []Range{{0, 2, 1}, {6, 7, 1}}; !slices.Equal(got, want) {
		t.Fatalf("acquire = %v, want %v", got, want)
	}
	if err := p.Acknowledge("a", time.Unix(0, 0), []AckBatch{{0, 2, []int8{AckAccept}}}, lim); err != nil {
		t.Fatal(err)
	}
	if p.StartOffset() != 6 {
		t.Fatalf("start offset = %d, want 6 (control and gap archived)", p.StartOffset())
	}
}

func TestInFlightWindowIsBounded(t *testing.T) {
	small := lim
	small.MaxInFlight = 4
	p := loaded(0)
	if got := p.Acquire("a", time.Unix(0, 0), spans10, 10, 100, small); !slices.Equal(got, []Range{{0, 3, 1}}) {
		t.Fatalf("acquire = %v, want 0-3", got)
	}
	if _, ok := p.NextOffset(time.Unix(0, 0), small); ok {
		t.Fatal("NextOffset ok with a full window")
	}
	if err := p.Acknowledge("a", time.Unix(0, 0), []AckBatch{{0, 1, []int8{AckAccept}}}, small); err != nil {
		t.Fatal(err)
	}
	if from, ok := p.NextOffset(time.Unix(0, 0), small); !ok || from != 4 {
		t.Fatalf("NextOffset = %d %v, want 4 true", from, ok)
	}
}

func TestReleaseMemberAndWake(t *testing.T) {
	p := loaded(0)
	p.Acquire("a", time.Unix(0, 0), []Span{{0, 4, false}}, 5, 100, lim)
	p.Acquire("b", time.Unix(0, 0), []Span{{5, 9, false}}, 10, 100, lim)
	wake := p.Wake()
	if n := p.ReleaseMember("a", lim); n != 5 {
		t.Fatalf("released %d, want 5", n)
	}
	select {
	case <-wake:
	default:
		t.Fatal("release did not wake waiting fetches")
	}
	if acq, avail := p.InFlight(); acq != 5 || avail != 5 {
		t.Fatalf("in flight = %d acquired %d available, want 5/5", acq, avail)
	}
}

func TestFlushBookkeeping(t *testing.T) {
	now := time.Unix(0, 0)
	p := loaded(0)
	if _, ok := p.BeginFlush(now); ok {
		t.Fatal("flush with the start offset unchanged")
	}
	p.Acquire("a", now, spans10, 10, 100, lim)
	_ = p.Acknowledge("a", now, []AckBatch{{0, 9, []int8{AckAccept}}}, lim)
	off, ok := p.BeginFlush(now)
	if !ok || off != 10 {
		t.Fatalf("BeginFlush = %d %v, want 10 true", off, ok)
	}
	if _, ok := p.BeginFlush(now); ok {
		t.Fatal("two flushes at once")
	}
	p.EndFlush(off, false, now)
	if _, ok := p.BeginFlush(now.Add(time.Second)); ok {
		t.Fatal("flush retried right after a failure")
	}
	if _, ok := p.BeginFlush(now.Add(5 * time.Second)); !ok {
		t.Fatal("flush not retried 5 s after a failure")
	}
}
