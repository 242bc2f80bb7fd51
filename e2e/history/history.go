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
//   - a reader following a stream never sees offsets go backwards, and
//     offsets it is moved past (a gap a takeover left, docs/durability.md)
//     never held a record in any read;
//   - everything read is a whole record some client sent.
//
// Deletion is part of the model. A trim or retention moves a stream's
// start offset: a read below it may be refused (offset_trimmed) and a
// reader moved past it, but only when a trim or retention that reaches it
// was issued; acknowledged records below the final start offset may be
// gone only then; a read of a trimmed offset that does answer must answer
// the record the offset always named. A deleted stream's records are no
// longer demanded. A fork is a stream whose offsets below its fork point
// are its source's: every read of them must return the source's record
// there, and every acknowledged record of the source below the fork point
// must be in the fork's final reads, also after the source was deleted and
// its objects garbage collected.
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
	"strings"
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

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	}
	return "unknown"
}

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
	// Trimmed: the read was refused as below the start offset
	// (offset_trimmed), which the server said is StartOffset. A final
	// read's From is the start offset it began at.
	Trimmed     bool
	StartOffset int64
}

// Trim is one request that moves a stream's start offset: an explicit trim
// to To, or a retention setting (Retention), after which the server moves
// the start offset by itself, anywhere up to the tail.
type Trim struct {
	Stream     string
	To         int64
	Retention  bool
	Start, End time.Time
	Outcome    Outcome
}

// Delete is one stream delete.
type Delete struct {
	Stream     string
	Start, End time.Time
	Outcome    Outcome
}

// Fork is the creation of Stream as a fork of Source at offset At (the
// fork's next offset when created); only acknowledged creates.
type Fork struct {
	Stream, Source string
	At             int64
	Start, End     time.Time
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
	// StallsFlush: object storage was down, slow or failing, so flushes
	// could not finish: the documented local loss window grows by the
	// time it lasted (docs/durability.md).
	StallsFlush bool
}

// Log collects operations from concurrent clients.
type Log struct {
	mu      sync.Mutex
	appends []Append
	reads   []Read
	faults  []Fault
	trims   []Trim
	deletes []Delete
	forks   []Fork
}

func (l *Log) AddAppend(a Append) { l.mu.Lock(); l.appends = append(l.appends, a); l.mu.Unlock() }
func (l *Log) AddRead(r Read)     { l.mu.Lock(); l.reads = append(l.reads, r); l.mu.Unlock() }
func (l *Log) AddFault(f Fault)   { l.mu.Lock(); l.faults = append(l.faults, f); l.mu.Unlock() }
func (l *Log) AddTrim(t Trim)     { l.mu.Lock(); l.trims = append(l.trims, t); l.mu.Unlock() }
func (l *Log) AddDelete(d Delete) { l.mu.Lock(); l.deletes = append(l.deletes, d); l.mu.Unlock() }
func (l *Log) AddFork(f Fork)     { l.mu.Lock(); l.forks = append(l.forks, f); l.mu.Unlock() }

// Deleted reports whether a delete of stream may have taken effect (it
// was acknowledged or its outcome is unknown).
func (l *Log) Deleted(stream string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.deletes {
		if d.Stream == stream && d.Outcome != Failed {
			return true
		}
	}
	return false
}

// Result is what Check found.
type Result struct {
	Operations   int // appends + reads
	AckedChecked int // acknowledged appends verified against the final reads
	Faults       map[string]int
	Violations   []string
	// LocalLost counts acknowledged local-durability records missing after
	// an owner loss; LossWindow is the largest time between such a
	// record's acknowledgement and the owner loss that took it, and
	// LossWindowNoStall the largest among losses with no object-storage
	// fault between acknowledgement and loss.
	LocalLost         int
	LossWindow        time.Duration
	LossWindowNoStall time.Duration
	// OwnerChanges counts, per stream, the times an acknowledgement came
	// from another node than the one before it: takeovers (and rejoins).
	OwnerChanges int
	// Gaps counts the distinct offset ranges readers were moved past
	// (takeovers after an owner loss), GapOffsets their total size.
	Gaps, GapOffsets int64
	// LocalLostSeen counts checks that passed because a local record a
	// reader had seen was lost with its owner (offsets then a gap).
	LocalLostSeen int
	// Deletion: trims and retention settings issued, reads refused below
	// the start offset, acknowledged records gone below a final start
	// offset (trimmed), streams deleted and their acknowledged records no
	// longer demanded, forks created, records of fork reads checked
	// against the source, and source records found in forks' final reads.
	Trims, TrimRefusals, Trimmed     int
	Deletes, DeletedRecords          int
	Forks, ForkReadsChecked, ForkAck int
	// GCRuns and GCDeleted are the nodes' garbage collection passes and
	// the objects they deleted during the run; the soak fills them in
	// from the nodes' metrics (GCKnown), not Check.
	GCRuns, GCDeleted int
	GCKnown           bool
}

// Summary is the closing line of a soak.
func (r Result) Summary() string {
	n := 0
	for _, k := range r.Faults {
		n += k
	}
	if !r.GCKnown && r.Forks == 0 {
		return fmt.Sprintf("soak: %d operations, %d acknowledged records checked, %d faults, %d violations",
			r.Operations, r.AckedChecked, n, len(r.Violations))
	}
	return fmt.Sprintf("soak: %d operations, %d acknowledged records checked, %d faults, %d GC runs, %d objects deleted, %d fork reads checked, %d violations",
		r.Operations, r.AckedChecked, n, r.GCRuns, r.GCDeleted, r.ForkReadsChecked, len(r.Violations))
}

// DeletionSummary is the soak's line about deletion: what the checker
// saw of trims, retention, deletes and forks.
func (r Result) DeletionSummary() string {
	return fmt.Sprintf("%d trims and retention settings, %d reads refused below a start offset, %d acknowledged records trimmed, "+
		"%d streams deleted (%d acknowledged records no longer demanded), %d forks, %d fork reads checked against their source, "+
		"%d source records found in forks' final reads",
		r.Trims, r.TrimRefusals, r.Trimmed, r.Deletes, r.DeletedRecords, r.Forks, r.ForkReadsChecked, r.ForkAck)
}

// Check verifies the recorded history. lossWindow is the documented
// local-durability loss window (about --seal-max-age plus a flush); a
// local record lost after an owner loss that was acknowledged longer than
// that before the loss is a violation, unless object storage was failing
// in between: the window then grows by how long flushes were stalled
// (each StallsFlush fault, plus lossWindow after it to upload the
// backlog).
func (l *Log) Check(lossWindow time.Duration) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := Result{Operations: len(l.appends) + len(l.reads) + len(l.trims) + len(l.deletes) + len(l.forks), Faults: map[string]int{}}
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

	durability := map[string]string{}
	for _, a := range l.appends {
		durability[a.Stream] = a.Durability
	}
	type streamView struct {
		at         map[int64]string    // offset → the value every read returned
		seen       map[int64]time.Time // offset → when a read first returned it
		where      map[string]int64    // value → offset
		final      map[int64]string    // what the final reads returned
		finalHi    int64               // the final reads covered [start, finalHi)
		finalStart int64               // the highest start offset a final read began at
		hasFinal   bool
	}
	views := map[string]*streamView{}
	view := func(s string) *streamView {
		v := views[s]
		if v == nil {
			v = &streamView{at: map[int64]string{}, seen: map[int64]time.Time{}, where: map[string]int64{}, final: map[int64]string{}}
			views[s] = v
		}
		return v
	}
	lastTail := map[[2]any]int64{} // (client, stream) → next offset the tail expects
	type gap struct {
		stream   string
		from, to int64 // [from, to) skipped
		node     string
		at       time.Time // when the read that skipped it ended
	}
	gaps := map[gap]bool{}
	type dup struct {
		stream, value string
		off1, off2    int64
	}
	var twice []dup
	// lostWithOwner: a local record a read returned at off that the final
	// reads do not hold, and an owner loss came after that read: the
	// documented local loss (readers may have seen what is lost).
	lostWithOwner := func(stream string, off int64, value string) bool {
		v := view(stream)
		if durability[stream] != "local" || v.final[off] == value {
			return false
		}
		if _, ok := l.ownerLossAfter(v.seen[off]); ok {
			res.LocalLostSeen++
			return true
		}
		return false
	}
	reads := append([]Read(nil), l.reads...)
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].Start.Before(reads[j].Start) })
	for _, r := range reads {
		if r.Outcome != OK {
			continue
		}
		v := view(r.Stream)
		if r.Trimmed {
			res.TrimRefusals++
			if r.StartOffset <= r.From || !l.trimReaches(r.Stream, r.StartOffset, r.End) {
				bad("%s: a read from %d on %s was refused as trimmed (start offset %d), but no trim or retention issued before it reaches that far",
					r.Stream, r.From, r.Node, r.StartOffset)
			}
			continue
		}
		if r.Final {
			v.finalStart, v.hasFinal = max(v.finalStart, r.From), true
		}
		for i, rec := range r.Records {
			if i > 0 && rec.Offset <= r.Records[i-1].Offset {
				bad("%s: a read from %d on %s went from offset %d to %d", r.Stream, r.From, r.Node, r.Records[i-1].Offset, rec.Offset)
			}
			if i > 0 && rec.Offset > r.Records[i-1].Offset+1 {
				gaps[gap{r.Stream, r.Records[i-1].Offset + 1, rec.Offset, r.Node, r.End}] = true
			}
			if _, ok := sent[rec.Value]; !ok {
				bad("%s: offset %d read on %s holds %q, which no client sent (torn or foreign record)", r.Stream, rec.Offset, r.Node, clip(rec.Value))
			}
			if old, ok := v.at[rec.Offset]; ok && old != rec.Value {
				bad("%s: offset %d names two records: %q and %q (the second read on %s)", r.Stream, rec.Offset, clip(old), clip(rec.Value), r.Node)
			} else if !ok {
				v.at[rec.Offset], v.seen[rec.Offset] = rec.Value, r.End
			}
			if off, ok := v.where[rec.Value]; ok && off != rec.Offset {
				twice = append(twice, dup{r.Stream, rec.Value, off, rec.Offset})
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
			} else if ok && r.Records[0].Offset > want {
				gaps[gap{r.Stream, want, r.Records[0].Offset, r.Node, r.End}] = true
			}
			lastTail[key] = r.Records[len(r.Records)-1].Offset + 1
		}
	}

	// A gap is fine only if no read anywhere ever saw a record in it.
	type span struct {
		stream   string
		from, to int64
	}
	distinct := map[span]bool{}
	for g := range gaps {
		v := view(g.stream)
		if l.trimReaches(g.stream, g.to, g.at) {
			continue // moved past trimmed offsets: they may hold anything they held
		}
		for off := g.from; off < g.to && off < g.from+1<<20; off++ {
			if val, ok := v.at[off]; ok && !lostWithOwner(g.stream, off, val) {
				bad("%s: a read on %s was moved past [%d, %d), but offset %d holds %q (%s)", g.stream, g.node, g.from, g.to, off, clip(val),
					l.explainSeen(sent[val], v.seen[off], g.at, v.final[off] == val))
				break
			}
		}
		distinct[span{g.stream, g.from, g.to}] = true
	}
	for _, d := range twice {
		if lostWithOwner(d.stream, d.off1, d.value) || lostWithOwner(d.stream, d.off2, d.value) {
			continue // the first copy was lost with its owner; the retry is the one kept
		}
		bad("%s: record %q at offsets %d and %d (written twice)", d.stream, clip(d.value), d.off1, d.off2)
	}
	for sp := range distinct {
		res.Gaps++
		res.GapOffsets += sp.to - sp.from
	}

	deleted := map[string]bool{}
	for _, d := range l.deletes {
		if d.Outcome != Failed && !deleted[d.Stream] {
			deleted[d.Stream] = true
			res.Deletes++
		}
	}
	for _, t := range l.trims {
		if t.Outcome != Failed {
			res.Trims++
		}
	}
	// missingAllowed: an acknowledged append absent from the final reads
	// where it should be is the documented local loss, or a violation.
	missingAllowed := func(a *Append) bool {
		loss, ok := l.ownerLossAfter(a.End)
		stall := l.flushStall(a.End, loss, lossWindow)
		if a.Durability == "local" && ok && loss.Sub(a.End) <= lossWindow+stall {
			res.LocalLost++
			res.LossWindow = max(res.LossWindow, loss.Sub(a.End))
			if stall == 0 {
				res.LossWindowNoStall = max(res.LossWindowNoStall, loss.Sub(a.End))
			}
			return true
		}
		return false
	}
	acked := map[string]map[int64]*Append{} // stream → offset → its acknowledged append
	for i := range l.appends {
		a := &l.appends[i]
		if a.Outcome != OK {
			continue
		}
		if acked[a.Stream] == nil {
			acked[a.Stream] = map[int64]*Append{}
		}
		acked[a.Stream][a.Offset] = a
		v := view(a.Stream)
		res.AckedChecked++
		if deleted[a.Stream] && !v.hasFinal {
			res.DeletedRecords++
			continue
		}
		if got, ok := v.at[a.Offset]; ok && got != a.Value {
			bad("%s: offset %d was acknowledged for %q at %s but reads return %q: an acknowledged offset names another record",
				a.Stream, a.Offset, clip(a.Value), a.End.Format("15:04:05.000"), clip(got))
			continue
		}
		if v.final[a.Offset] == a.Value {
			continue
		}
		if a.Offset < v.finalStart {
			if l.trimReaches(a.Stream, a.Offset+1, time.Time{}) {
				res.Trimmed++
				continue
			}
			bad("%s: acknowledged record %q at offset %d is below the final start offset %d, but no trim or retention reaches it",
				a.Stream, clip(a.Value), a.Offset, v.finalStart)
			continue
		}
		// Missing: allowed only for local durability after an owner loss
		// that came within the loss window after the acknowledgement.
		if missingAllowed(a) {
			continue
		}
		bad("%s (%s): acknowledged record %q at offset %d (acknowledged %s by %s) is missing from the final reads (they end at %d)",
			a.Stream, a.Durability, clip(a.Value), a.Offset, a.End.Format("15:04:05.000"), a.Node, v.finalHi)
	}

	// Forks: offsets below the fork point are the source's (through the
	// source's own fork point, for forks of forks).
	parent := map[string]Fork{}
	for _, f := range l.forks {
		parent[f.Stream] = f
		res.Forks++
	}
	// inherited returns the acknowledged append and the value any read
	// returned at off in stream's history, looking through fork points.
	var inherited func(stream string, off int64, depth int) (*Append, string, bool)
	inherited = func(stream string, off int64, depth int) (*Append, string, bool) {
		if a := acked[stream][off]; a != nil {
			return a, a.Value, true
		}
		if val, ok := view(stream).at[off]; ok {
			return nil, val, true
		}
		if f, ok := parent[stream]; ok && off < f.At && depth < 100 {
			return inherited(f.Source, off, depth+1)
		}
		return nil, "", false
	}
	for _, f := range l.forks {
		v := view(f.Stream)
		for off, val := range v.at {
			if off >= f.At {
				continue
			}
			res.ForkReadsChecked++
			if _, want, ok := inherited(f.Source, off, 0); ok && want != val {
				bad("%s (a fork of %s at %d): offset %d reads %q, but the source's record there is %q", f.Stream, f.Source, f.At, off, clip(val), clip(want))
			}
		}
		if deleted[f.Stream] || !v.hasFinal {
			continue
		}
		for off := v.finalStart; off < f.At; off++ {
			a, _, ok := inherited(f.Source, off, 0)
			if !ok || a == nil {
				continue
			}
			if v.final[off] == a.Value {
				res.ForkAck++
				continue
			}
			if missingAllowed(a) {
				continue
			}
			bad("%s (a fork of %s at %d): the source's acknowledged record %q at offset %d (acknowledged %s) is missing from the fork's final reads",
				f.Stream, f.Source, f.At, clip(a.Value), off, a.End.Format("15:04:05.000"))
		}
	}
	res.OwnerChanges = l.ownerChanges()
	return res
}

// trimReaches reports whether a trim or retention of stream that may have
// taken effect, issued before t (any time if t is zero), moves the start
// offset to at least to.
func (l *Log) trimReaches(stream string, to int64, t time.Time) bool {
	for _, tr := range l.trims {
		if tr.Stream != stream || tr.Outcome == Failed || (!t.IsZero() && !tr.Start.Before(t)) {
			continue
		}
		if tr.Retention || tr.To >= to {
			return true
		}
	}
	// A fork starts where its source started when the fork was created
	// (docs/durable-streams.md, forks of trimmed sources): a trim or
	// retention of the source issued before the fork was acknowledged
	// reaches the fork too. A later one never does.
	for _, f := range l.forks {
		if f.Stream == stream && f.Source != stream && l.trimReaches(f.Source, to, f.End) {
			return true
		}
	}
	return false
}

// flushStall is how much of [from, to] flushes were stalled by object
// storage faults, each counted until recovery after it ends.
func (l *Log) flushStall(from, to time.Time, recovery time.Duration) time.Duration {
	var d time.Duration
	for _, f := range l.faults {
		if !f.StallsFlush {
			continue
		}
		start, end := f.Start, f.End.Add(recovery)
		if from.After(start) {
			start = from
		}
		if to.Before(end) {
			end = to
		}
		if end.After(start) {
			d += end.Sub(start)
		}
	}
	return d
}

// ownerChanges counts, per stream, consecutive acknowledgements (in the
// order they arrived) served by different nodes.
func (l *Log) ownerChanges() int {
	acks := map[string][]*Append{}
	for i := range l.appends {
		if a := &l.appends[i]; a.Outcome == OK && a.Node != "" {
			acks[a.Stream] = append(acks[a.Stream], a)
		}
	}
	n := 0
	for _, as := range acks {
		sort.Slice(as, func(i, j int) bool { return as[i].End.Before(as[j].End) })
		for i := 1; i < len(as); i++ {
			if as[i].Node != as[i-1].Node {
				n++
			}
		}
	}
	return n
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

// explainSeen says when a record was first seen and the skip happened,
// whether the final reads hold it, and which faults ran around then: what
// a gap violation needs to be told apart (a read path that skipped a
// kept record, or a loss with no owner loss to account for it).
func (l *Log) explainSeen(a *Append, seen, skipped time.Time, final bool) string {
	var b strings.Builder
	if a != nil {
		fmt.Fprintf(&b, "appended %v by %s at %s (offset %d), ", a.Outcome, a.Node, a.End.Format("15:04:05.000"), a.Offset)
	}
	fmt.Fprintf(&b, "first seen %s, skipped by a read ending %s, in the final reads: %v; faults from 10s before:",
		seen.Format("15:04:05.000"), skipped.Format("15:04:05.000"), final)
	n := 0
	for _, f := range l.faults {
		if f.End.Before(seen.Add(-10*time.Second)) || f.Start.After(skipped.Add(10*time.Second)) {
			continue
		}
		fmt.Fprintf(&b, " %s@%s %s-%s", f.Kind, f.Target, f.Start.Format("15:04:05.000"), f.End.Format("15:04:05.000"))
		n++
	}
	if n == 0 {
		b.WriteString(" none")
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
