// Package history records what concurrent clients did to PicoMQ streams
// and what they were told, and checks the whole record against the
// durability contract (docs/durability.md), in the style of Jepsen's and
// etcd's robustness checkers: the clients never judge anything while the
// test runs, they only write down every operation with its start and end
// time and its outcome; Check then looks at everything at once.
//
// The checks, per stream:
//   - one record per offset: every read of an offset, from any node at any
//     time, returns the same bytes;
//   - acknowledged appends are readable at the acknowledged offsets with
//     identical bytes (streams with object durability always; local ones
//     unless their owner was lost, and then the loss is measured against the
//     documented window instead);
//   - an offset once acknowledged never names another record (also for
//     local durability: a lost record's offset must not be handed out again);
//   - a value (each append carries a unique one) appears at most once, so an
//     idempotent producer's retried batch is written once;
//   - a reader following a stream never sees offsets go backwards and sees
//     consecutive offsets;
//   - everything read is a whole record some client sent.
//
// Why not a linearizability checker (porcupine): the model of a stream is a
// log whose state is its whole prefix, and reads return ranges of it; a
// linearizability search over that state explodes with a few thousand
// concurrent operations, and the properties above are what the contract
// promises (it promises no real-time order between appends and reads on
// different nodes: history may be served from object storage by any node).
// The per-offset checks are exact and linear in the history.
package history

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Outcome of an operation as the client saw it.
type Outcome int

const (
	// OK: acknowledged (appends) or answered (reads).
	OK Outcome = iota
	// Failed: definitely not applied (a 4xx that says so).
	Failed
	// Unknown: timeout, connection error, 5xx: may or may not be applied.
	Unknown
)

// Record is one record a read returned.
type Record struct {
	Offset int64
	Value  string
}

// Append is one append (or one attempt of an idempotent producer).
type Append struct {
	Client     int
	Stream     string
	Durability string // local or object
	Value      string // unique across the run
	Start, End time.Time
	Outcome    Outcome
	Offset     int64 // acknowledged offset (OK only)
	Retry      bool  // a retry of an earlier attempt with the same producer sequence
	Node       string
}

// Read is one read of a stream from an offset.
type Read struct {
	Client     int
	Stream     string
	From       int64
	Start, End time.Time
	Outcome    Outcome
	Records    []Record
	Node       string
	Tail       bool // part of one client's continuous tail: must not go backwards
	Final      bool // the verification read after the faults stopped
}

// Fault is one injected fault.
type Fault struct {
	Kind       string
	Target     string
	Start, End time.Time
	// OwnerLoss: the fault may have cost a node its streams (kill -9 or a
	// pause past the lease): local-durability records it acknowledged
	// since its last flush may be lost.
	OwnerLoss bool
}

// Log collects operations from concurrent clients.
type Log struct {
	mu      sync.Mutex
	appends []Append
	reads   []Read
	faults  []Fault
}

func (l *Log) AddAppend(a Append) { l.mu.Lock(); l.appends = append(l.appends, a); l.mu.Unlock() }
func (l *Log) AddRead(r Read)     { l.mu.Lock(); l.reads = append(l.reads, r); l.mu.Unlock() }
func (l *Log) AddFault(f Fault)   { l.mu.Lock(); l.faults = append(l.faults, f); l.mu.Unlock() }

// Result is what Check found.
type Result struct {
	Operations   int // appends + reads
	AckedChecked int // acknowledged appends verified against the final reads
	Faults       map[string]int
	Violations   []string
	// LocalLost counts acknowledged local-durability records missing after
	// an owner loss; LossWindow is the largest time between such a
	// record's acknowledgement and the owner loss that took it.
	LocalLost  int
	LossWindow time.Duration
}

// Summary is the closing line of a soak.
func (r Result) Summary() string {
	n := 0
	for _, k := range r.Faults {
		n += k
	}
	return fmt.Sprintf("soak: %d operations, %d acknowledged records checked, %d faults, %d violations",
		r.Operations, r.AckedChecked, n, len(r.Violations))
}

// Check verifies the recorded history. lossWindow is the documented
// local-durability loss window (about --seal-max-age plus a flush); a
// local record lost after an owner loss that was acknowledged longer than
// that before the loss is a violation.
func (l *Log) Check(lossWindow time.Duration) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := Result{Operations: len(l.appends) + len(l.reads), Faults: map[string]int{}}
	for _, f := range l.faults {
		res.Faults[f.Kind]++
	}
	bad := func(format string, args ...any) {
		if len(res.Violations) < 1000 {
			res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
		}
	}
	sent := map[string]*Append{} // value → (any) append that carried it
	for i := range l.appends {
		a := &l.appends[i]
		if prev, ok := sent[a.Value]; !ok || (a.Outcome == OK && prev.Outcome != OK) {
			sent[a.Value] = a
		}
	}

	type streamView struct {
		at      map[int64]string // offset → the value every read returned
		where   map[string]int64 // value → offset
		final   map[int64]string // what the final reads returned
		finalHi int64            // the final reads covered [start, finalHi)
	}
	views := map[string]*streamView{}
	view := func(s string) *streamView {
		v := views[s]
		if v == nil {
			v = &streamView{at: map[int64]string{}, where: map[string]int64{}, final: map[int64]string{}}
			views[s] = v
		}
		return v
	}
	lastTail := map[[2]any]int64{} // (client, stream) → next offset the tail expects
	reads := append([]Read(nil), l.reads...)
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].Start.Before(reads[j].Start) })
	for _, r := range reads {
		if r.Outcome != OK {
			continue
		}
		v := view(r.Stream)
		for i, rec := range r.Records {
			if i > 0 && rec.Offset != r.Records[i-1].Offset+1 {
				bad("%s: a read from %d on %s jumped from offset %d to %d", r.Stream, r.From, r.Node, r.Records[i-1].Offset, rec.Offset)
			}
			if _, ok := sent[rec.Value]; !ok {
				bad("%s: offset %d read on %s holds %q, which no client sent (torn or foreign record)", r.Stream, rec.Offset, r.Node, clip(rec.Value))
			}
			if old, ok := v.at[rec.Offset]; ok && old != rec.Value {
				bad("%s: offset %d names two records: %q and %q (the second read on %s)", r.Stream, rec.Offset, clip(old), clip(rec.Value), r.Node)
			} else if !ok {
				v.at[rec.Offset] = rec.Value
			}
			if off, ok := v.where[rec.Value]; ok && off != rec.Offset {
				bad("%s: record %q at offsets %d and %d (written twice)", r.Stream, clip(rec.Value), off, rec.Offset)
			} else if !ok {
				v.where[rec.Value] = rec.Offset
			}
			if r.Final {
				v.final[rec.Offset] = rec.Value
			}
		}
		if r.Final && len(r.Records) > 0 {
			v.finalHi = max(v.finalHi, r.Records[len(r.Records)-1].Offset+1)
		}
		if r.Tail && len(r.Records) > 0 {
			key := [2]any{r.Client, r.Stream}
			if want, ok := lastTail[key]; ok && r.Records[0].Offset < want {
				bad("%s: client %d's tail went backwards: expected offset %d, got %d from %s", r.Stream, r.Client, want, r.Records[0].Offset, r.Node)
			}
			lastTail[key] = r.Records[len(r.Records)-1].Offset + 1
		}
	}

	for i := range l.appends {
		a := &l.appends[i]
		if a.Outcome != OK {
			continue
		}
		v := view(a.Stream)
		res.AckedChecked++
		if got, ok := v.at[a.Offset]; ok && got != a.Value {
			bad("%s: offset %d was acknowledged for %q at %s but reads return %q: an acknowledged offset names another record",
				a.Stream, a.Offset, clip(a.Value), a.End.Format("15:04:05.000"), clip(got))
			continue
		}
		if v.final[a.Offset] == a.Value {
			continue
		}
		// Missing: allowed only for local durability after an owner loss
		// that came within the loss window after the acknowledgement.
		loss, ok := l.ownerLossAfter(a.End)
		if a.Durability == "local" && ok && loss.Sub(a.End) <= lossWindow {
			res.LocalLost++
			res.LossWindow = max(res.LossWindow, loss.Sub(a.End))
			continue
		}
		bad("%s (%s): acknowledged record %q at offset %d (acknowledged %s) is missing from the final reads (they end at %d)",
			a.Stream, a.Durability, clip(a.Value), a.Offset, a.End.Format("15:04:05.000"), v.finalHi)
	}
	return res
}

// ownerLossAfter returns the start of the first owner-loss fault that ended
// after t (it may have begun before: a paused owner acknowledges nothing,
// but one killed right after acknowledging loses the record).
func (l *Log) ownerLossAfter(t time.Time) (time.Time, bool) {
	var best time.Time
	for _, f := range l.faults {
		if f.OwnerLoss && f.End.After(t) && (best.IsZero() || f.Start.Before(best)) {
			best = f.Start
		}
	}
	if best.Before(t) && !best.IsZero() {
		best = t
	}
	return best, !best.IsZero()
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
