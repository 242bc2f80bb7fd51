package history

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// base is a clean history: two acknowledged appends, a tail that read them,
// and a final read.
func base(durability string) *Log {
	l := &Log{}
	l.AddAppend(Append{Stream: "s", Durability: durability, Value: "a", Start: at(0), End: at(10), Outcome: OK, Offset: 0})
	l.AddAppend(Append{Stream: "s", Durability: durability, Value: "b", Start: at(20), End: at(30), Outcome: OK, Offset: 1})
	l.AddAppend(Append{Stream: "s", Durability: durability, Value: "c", Start: at(40), End: at(50), Outcome: Unknown})
	l.AddRead(Read{Client: 1, Stream: "s", From: 0, Start: at(60), End: at(61), Outcome: OK, Tail: true,
		Records: []Record{{0, "a"}, {1, "b"}}})
	return l
}

func final(l *Log, recs ...Record) {
	l.AddRead(Read{Client: 9, Stream: "s", From: 0, Start: at(10000), End: at(10001), Outcome: OK, Final: true, Records: recs})
}

// localLoss is two acknowledged local appends, an owner loss from
// lossMs for 100ms, and a final read that lost the second append.
func localLoss(lossMs int) func() *Log {
	return func() *Log {
		l := &Log{}
		l.AddAppend(Append{Stream: "s", Durability: "local", Value: "a", End: at(10), Outcome: OK, Offset: 0})
		l.AddAppend(Append{Stream: "s", Durability: "local", Value: "b", End: at(30), Outcome: OK, Offset: 1})
		l.AddFault(Fault{Kind: "kill", Start: at(lossMs), End: at(lossMs + 100), OwnerLoss: true})
		final(l, Record{0, "a"})
		return l
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name  string
		build func() *Log
		want  string // substring of the one expected violation; "" = clean
	}{
		{"clean", func() *Log { l := base("object"); final(l, Record{0, "a"}, Record{1, "b"}); return l }, ""},
		{"unacknowledged append present", func() *Log {
			l := base("object")
			final(l, Record{0, "a"}, Record{1, "b"}, Record{2, "c"})
			return l
		}, ""},
		{"acknowledged object record lost", func() *Log { l := base("object"); final(l, Record{0, "a"}); return l }, "is missing"},
		{"acknowledged offset reused", func() *Log {
			l := base("local")
			final(l, Record{0, "a"}, Record{1, "c"})
			return l
		}, "names two records"},
		{"local loss inside the window after an owner loss", localLoss(500), ""},
		{"local loss long before the owner loss", localLoss(9000), "is missing"},
		{"local loss long before the owner loss, object storage down in between", func() *Log {
			l := localLoss(9000)()
			l.AddFault(Fault{Kind: "minio-down", Start: at(200), End: at(8000), StallsFlush: true})
			return l
		}, ""},
		{"local loss long before the owner loss, object storage down long before", func() *Log {
			l := localLoss(9000)()
			l.AddFault(Fault{Kind: "minio-down", Start: at(31), End: at(500), StallsFlush: true})
			return l
		}, "is missing"},
		{"local offset handed out again after a takeover", func() *Log {
			l := &Log{}
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "a", End: at(10), Outcome: OK, Offset: 0})
			l.AddFault(Fault{Kind: "pause", Start: at(100), End: at(4000), OwnerLoss: true})
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "n", End: at(5000), Outcome: OK, Offset: 0})
			final(l, Record{0, "n"})
			return l
		}, "names another record"},
		{"retried batch written twice", func() *Log {
			l := base("object")
			final(l, Record{0, "a"}, Record{1, "b"}, Record{2, "b"})
			return l
		}, "written twice"},
		{"tail goes backwards", func() *Log {
			l := base("object")
			l.AddRead(Read{Client: 1, Stream: "s", From: 2, Start: at(70), End: at(71), Outcome: OK, Tail: true, Records: []Record{{1, "b"}}})
			final(l, Record{0, "a"}, Record{1, "b"})
			return l
		}, "went backwards"},
		{"torn record", func() *Log {
			l := base("object")
			final(l, Record{0, "a"}, Record{1, "b"}, Record{2, "c-torn"})
			return l
		}, "no client sent"},
		{"read moved past a record", func() *Log {
			l := base("object")
			final(l, Record{0, "a"}, Record{2, "c"})
			return l
		}, "moved past [1, 2)"},
		{"gap left by a takeover", func() *Log {
			l := &Log{}
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "a", End: at(10), Outcome: OK, Offset: 0})
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "b", End: at(30), Outcome: OK, Offset: 1})
			l.AddFault(Fault{Kind: "kill", Start: at(100), End: at(4000), OwnerLoss: true})
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "n", End: at(5000), Outcome: OK, Offset: 1025})
			l.AddRead(Read{Client: 1, Stream: "s", From: 1, Start: at(6000), End: at(6001), Outcome: OK, Tail: true, Records: []Record{{1025, "n"}}})
			final(l, Record{0, "a"}, Record{1025, "n"})
			return l
		}, ""},
		{"local record seen, lost with its owner, retried past the gap", func() *Log {
			l := &Log{}
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "a", End: at(10), Outcome: OK, Offset: 0})
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "b", End: at(30), Outcome: Unknown})
			l.AddRead(Read{Client: 1, Stream: "s", From: 0, Start: at(40), End: at(41), Outcome: OK, Tail: true, Records: []Record{{0, "a"}, {1, "b"}}})
			l.AddFault(Fault{Kind: "kill", Start: at(100), End: at(4000), OwnerLoss: true})
			l.AddAppend(Append{Stream: "s", Durability: "local", Value: "b", Retry: true, End: at(5000), Outcome: OK, Offset: 1025})
			l.AddRead(Read{Client: 1, Stream: "s", From: 2, Start: at(6000), End: at(6001), Outcome: OK, Tail: true, Records: []Record{{1025, "b"}}})
			final(l, Record{0, "a"}, Record{1025, "b"})
			return l
		}, ""},
		{"object record seen, then gone", func() *Log {
			l := base("object")
			l.AddRead(Read{Client: 1, Stream: "s", From: 2, Start: at(70), End: at(71), Outcome: OK, Tail: true, Records: []Record{{2, "c"}}})
			l.AddFault(Fault{Kind: "kill", Start: at(100), End: at(4000), OwnerLoss: true})
			l.AddAppend(Append{Stream: "s", Durability: "object", Value: "c", Retry: true, End: at(5000), Outcome: OK, Offset: 1025})
			final(l, Record{0, "a"}, Record{1, "b"}, Record{1025, "c"})
			return l
		}, "written twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.build().Check(time.Second)
			if tc.want == "" {
				if len(res.Violations) != 0 {
					t.Fatalf("violations in a valid history: %q", res.Violations)
				}
				return
			}
			found := false
			for _, v := range res.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Fatalf("violations %q: none mentions %q", res.Violations, tc.want)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	l := base("object")
	final(l, Record{0, "a"}, Record{1, "b"})
	l.AddFault(Fault{Kind: "kill"})
	l.AddFault(Fault{Kind: "pause"})
	got := l.Check(time.Second).Summary()
	if want := "soak: 5 operations, 2 acknowledged records checked, 2 faults, 0 violations"; got != want {
		t.Fatalf("Summary() = %q, want %q", got, want)
	}
}

// TestOwnerChanges: an acknowledgement from another node than the one
// before it (in arrival order, per stream) is one ownership change.
func TestOwnerChanges(t *testing.T) {
	l := &Log{}
	for i, node := range []string{"a", "a", "b", "b", "a"} {
		l.AddAppend(Append{Stream: "s", Value: node + string(rune('0'+i)), End: at(10 * (5 - i)), Outcome: OK, Offset: int64(i), Node: node})
	}
	l.AddAppend(Append{Stream: "t", Value: "t0", End: at(1), Outcome: OK, Node: "c"})
	// Arrival order of s (by End): a(4) b(3) b(2) a(1) a(0): two changes.
	if got := l.Check(time.Second).OwnerChanges; got != 2 {
		t.Fatalf("OwnerChanges = %d, want 2", got)
	}
}

// finalFrom is a final read that began at the start offset from.
func finalFrom(l *Log, stream string, from int64, recs ...Record) {
	l.AddRead(Read{Client: 9, Stream: stream, From: from, Start: at(10000), End: at(10001), Outcome: OK, Final: true, Records: recs})
}

// forked is a source s with two acknowledged records, forked at 2 as f,
// which got one acknowledged record of its own.
func forked() *Log {
	l := base("object")
	l.AddFork(Fork{Stream: "f", Source: "s", At: 2, Start: at(70), End: at(71)})
	l.AddAppend(Append{Stream: "f", Durability: "object", Value: "F", Start: at(80), End: at(90), Outcome: OK, Offset: 2})
	return l
}

// TestCheckDeletion: trims, retention, deletes and forks in the model.
func TestCheckDeletion(t *testing.T) {
	cases := []struct {
		name  string
		build func() *Log
		want  string
	}{
		{"trimmed, refused below the start, read from it", func() *Log {
			l := base("object")
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(100), End: at(110), Outcome: OK})
			l.AddRead(Read{Client: 2, Stream: "s", From: 0, Start: at(200), End: at(201), Outcome: OK, Trimmed: true, StartOffset: 1})
			finalFrom(l, "s", 1, Record{1, "b"})
			return l
		}, ""},
		{"record gone below the start offset without a trim", func() *Log {
			l := base("object")
			finalFrom(l, "s", 1, Record{1, "b"})
			return l
		}, "no trim or retention reaches it"},
		{"refused as trimmed without a trim", func() *Log {
			l := base("object")
			l.AddRead(Read{Client: 2, Stream: "s", From: 0, Start: at(200), End: at(201), Outcome: OK, Trimmed: true, StartOffset: 1})
			final(l, Record{0, "a"}, Record{1, "b"})
			return l
		}, "refused as trimmed"},
		{"refused as trimmed before the trim was issued", func() *Log {
			l := base("object")
			l.AddRead(Read{Client: 2, Stream: "s", From: 0, Start: at(200), End: at(201), Outcome: OK, Trimmed: true, StartOffset: 1})
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(300), End: at(310), Outcome: OK})
			finalFrom(l, "s", 1, Record{1, "b"})
			return l
		}, "refused as trimmed"},
		{"trimmed further than asked", func() *Log {
			l := base("object")
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(100), End: at(110), Outcome: OK})
			finalFrom(l, "s", 2)
			return l
		}, "no trim or retention reaches it"},
		{"retention moves the start anywhere", func() *Log {
			l := base("object")
			l.AddTrim(Trim{Stream: "s", Retention: true, Start: at(100), End: at(110), Outcome: OK})
			finalFrom(l, "s", 2)
			return l
		}, ""},
		{"a trimmed offset read again returns another record", func() *Log {
			l := base("object")
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(100), End: at(110), Outcome: OK})
			l.AddRead(Read{Client: 2, Stream: "s", From: 0, Start: at(200), End: at(201), Outcome: OK, Records: []Record{{0, "b"}}})
			finalFrom(l, "s", 1, Record{1, "b"})
			return l
		}, "names two records"},
		{"tail moved past trimmed offsets", func() *Log {
			l := base("object")
			l.AddAppend(Append{Stream: "s", Durability: "object", Value: "d", End: at(150), Outcome: OK, Offset: 2})
			l.AddTrim(Trim{Stream: "s", To: 2, Start: at(100), End: at(110), Outcome: OK})
			l.AddRead(Read{Client: 1, Stream: "s", From: 2, Start: at(300), End: at(301), Outcome: OK, Tail: true, Records: []Record{{2, "d"}}})
			finalFrom(l, "s", 2, Record{2, "d"})
			return l
		}, ""},
		{"deleted stream's records not demanded", func() *Log {
			l := base("object")
			l.AddDelete(Delete{Stream: "s", Start: at(100), End: at(110), Outcome: OK})
			return l
		}, ""},
		{"a failed delete keeps them demanded", func() *Log {
			l := base("object")
			l.AddDelete(Delete{Stream: "s", Start: at(100), End: at(110), Outcome: Failed})
			return l
		}, "is missing"},
		{"fork of a trimmed source starts at the source's start", func() *Log {
			l := base("object")
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(50), End: at(60), Outcome: OK})
			l.AddFork(Fork{Stream: "f", Source: "s", At: 2, Start: at(70), End: at(71)})
			l.AddRead(Read{Client: 2, Stream: "f", From: 0, Start: at(200), End: at(201), Outcome: OK, Trimmed: true, StartOffset: 1})
			finalFrom(l, "s", 1, Record{1, "b"})
			finalFrom(l, "f", 1, Record{1, "b"})
			return l
		}, ""},
		{"a source trim after the fork does not reach the fork", func() *Log {
			l := forked()
			l.AddTrim(Trim{Stream: "s", To: 1, Start: at(100), End: at(110), Outcome: OK})
			l.AddRead(Read{Client: 2, Stream: "f", From: 0, Start: at(200), End: at(201), Outcome: OK, Trimmed: true, StartOffset: 1})
			return l
		}, "refused as trimmed"},
		{"fork reads its source's prefix, source deleted", func() *Log {
			l := forked()
			l.AddDelete(Delete{Stream: "s", Start: at(100), End: at(110), Outcome: OK})
			finalFrom(l, "f", 0, Record{0, "a"}, Record{1, "b"}, Record{2, "F"})
			return l
		}, ""},
		{"fork lost its source's records (GC of a soft-deleted source)", func() *Log {
			l := forked()
			l.AddDelete(Delete{Stream: "s", Start: at(100), End: at(110), Outcome: OK})
			finalFrom(l, "f", 0, Record{2, "F"})
			return l
		}, "missing from the fork's final reads"},
		{"fork reads another record than its source below the fork point", func() *Log {
			l := forked()
			l.AddRead(Read{Client: 3, Stream: "f", From: 0, Start: at(95), End: at(96), Outcome: OK, Records: []Record{{0, "b"}}})
			final(l, Record{0, "a"}, Record{1, "b"})
			finalFrom(l, "f", 0, Record{0, "a"}, Record{1, "b"}, Record{2, "F"})
			return l
		}, "but the source's record there is"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.build().Check(time.Second)
			if tc.want == "" {
				if len(res.Violations) != 0 {
					t.Fatalf("violations in a valid history: %q", res.Violations)
				}
				return
			}
			found := false
			for _, v := range res.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Fatalf("violations %q: none mentions %q", res.Violations, tc.want)
			}
		})
	}
}
