package meta

import (
	"testing"
	"time"
)

// gatherTest is a create queue whose last transaction, answered just now,
// took took and left expect creates expected (those it held plus those
// queued behind it), with queued creates queued now.
func gatherTest(expect, queued int, took time.Duration) (*createQueue, *Registry) {
	q := &createQueue{expect: expect, lastTxn: took, answered: time.Now()}
	for range queued {
		q.calls = append(q.calls, &createCall{need: 1})
	}
	return q, &Registry{maxTxnOps: DefaultMaxTxnOps}
}

// gather runs q.gatherLocked as commitLoop does and reports on the
// returned channel when it is done.
func gather(q *createQueue, r *Registry) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		q.mu.Lock()
		q.gatherLocked(r)
		q.mu.Unlock()
		close(done)
	}()
	return done
}

func awaitGather(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the committer still waits %s", what)
	}
}

// TestGatherWaitsForAnsweredCreates: after a transaction of 3 creates with
// 2 more queued behind it, the next is sent once the 3 answered creates are
// back (not before the last one arrives), and the next commit after that
// does not wait again unless a transaction sets a new expectation.
func TestGatherWaitsForAnsweredCreates(t *testing.T) {
	defer func(m time.Duration) { regatherMax = m }(regatherMax)
	regatherMax = time.Hour // only the arrivals can end the wait
	q, r := gatherTest(5, 2, 2*time.Hour)
	done := gather(q, r)
	for i := range 3 {
		arrive(t, q, r) // once the committer waits
		if i < 2 {
			select {
			case <-done:
				t.Fatalf("the committer went on with %d of the 3 answered creates back", i+1)
			default:
			}
		}
	}
	awaitGather(t, done, "with every answered create back")
	if q.expect != 0 {
		t.Fatalf("expect = %d after the wait, want 0 (wait once)", q.expect)
	}
}

// TestGatherDoesNotHoldLoneCreates: a create expected alone (one client
// creating one stream after another), a full batch, and a create arriving
// well after the last answer are sent without waiting for anyone.
func TestGatherDoesNotHoldLoneCreates(t *testing.T) {
	defer func(m time.Duration) { regatherMax = m }(regatherMax)
	regatherMax = time.Hour
	q, r := gatherTest(1, 1, time.Hour)
	awaitGather(t, gather(q, r), "for a lone client's create")

	q, r = gatherTest(DefaultMaxTxnOps+10, DefaultMaxTxnOps, time.Hour)
	q.waitOps = DefaultMaxTxnOps
	awaitGather(t, gather(q, r), "with a full batch queued")

	q, r = gatherTest(32, 1, time.Hour)
	q.answered = time.Now().Add(-2 * time.Hour)
	awaitGather(t, gather(q, r), "for creates answered long ago")
}

// TestGatherWaitIsBounded: when the answered creates do not come back the
// wait ends after the last commit time.
func TestGatherWaitIsBounded(t *testing.T) {
	q, r := gatherTest(32, 1, 20*time.Millisecond)
	awaitGather(t, gather(q, r), "after the last commit time")
}

// arrive queues one create once the committer waits in gatherLocked, as
// create does.
func arrive(t *testing.T, q *createQueue, r *Registry) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		q.mu.Lock()
		waiting := q.arrived != nil
		if waiting {
			q.calls = append(q.calls, &createCall{need: 1})
			q.arriveLocked(r)
		}
		q.mu.Unlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer does not wait for answered creates")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGatherWaitsWhileCreatesKeepArriving: a create that arrives while the
// committer waits moves the end of the wait to a commit time after it, so
// the wait goes on past a commit time after the answer while the
// answered clients are still coming back, and ends when the last is back.
func TestGatherWaitsWhileCreatesKeepArriving(t *testing.T) {
	defer func(m, c time.Duration) { regatherMax, regatherCap = m, c }(regatherMax, regatherCap)
	regatherMax, regatherCap = time.Hour, time.Hour
	const took = 10 * time.Second
	q, r := gatherTest(3, 1, took)
	// Answered a commit time ago but for 200 ms: without arrivals the
	// wait would end 200 ms from now.
	q.answered = time.Now().Add(-took + 200*time.Millisecond)
	end := q.answered.Add(took)
	done := gather(q, r)
	arrive(t, q, r) // the second of three, well before end
	time.Sleep(time.Until(end) + 300*time.Millisecond)
	select {
	case <-done:
		t.Fatal("the committer went on a commit time after the answer although a create arrived since")
	default:
	}
	arrive(t, q, r)
	awaitGather(t, done, "with every answered create back")
	if len(q.calls) != 3 {
		t.Fatalf("%d creates queued, want 3", len(q.calls))
	}
}

// TestGatherWaitIsCapped: however long commits take, the committer waits at
// most regatherCap after the answer.
func TestGatherWaitIsCapped(t *testing.T) {
	defer func(m, c time.Duration) { regatherMax, regatherCap = m, c }(regatherMax, regatherCap)
	regatherMax, regatherCap = time.Hour, 50*time.Millisecond
	q, r := gatherTest(32, 1, time.Hour)
	awaitGather(t, gather(q, r), "past regatherCap")
}
