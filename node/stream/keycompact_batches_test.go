package stream

import (
	"fmt"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// kv is a record of a compaction test: key "" is a null key, value "-" a
// null value (a tombstone).
type kv struct{ k, v string }

func kvRecords(kvs []kv, ts int64) []record.Record {
	out := make([]record.Record, len(kvs))
	for i, x := range kvs {
		out[i].Timestamp = ts
		if x.k != "" {
			out[i].Key = []byte(x.k)
		}
		if x.v != "-" {
			out[i].Value = []byte(x.v)
		}
	}
	return out
}

// kvBatches builds contiguous batches from base: one per group.
func kvBatches(base, ts int64, groups ...[]kv) [][]byte {
	var out [][]byte
	for _, g := range groups {
		out = append(out, record.AppendBatch(nil, record.BatchOptions{BaseOffset: base, Timestamp: ts, ProducerID: -1, CreateTime: true}, kvRecords(g, ts)))
		base += int64(len(g))
	}
	return out
}

// render describes compacted batches: each batch as [base-last: off=k=v ...].
func render(t *testing.T, batches [][]byte) string {
	t.Helper()
	var sb strings.Builder
	next := int64(-1)
	for _, b := range batches {
		h, err := record.Validate(b)
		if err != nil {
			t.Fatal(err)
		}
		if next >= 0 && h.BaseOffset != next {
			t.Fatalf("batches not contiguous: base %d after next %d", h.BaseOffset, next)
		}
		next = h.LastOffset() + 1
		recs, err := record.DecodeRecords(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sb, "[%d-%d:", h.BaseOffset, h.LastOffset())
		if h.Control() {
			sb.WriteString(" control")
		}
		for _, r := range recs {
			if h.Control() {
				break
			}
			v := string(r.Value)
			if r.Value == nil {
				v = "-"
			}
			fmt.Fprintf(&sb, " %d=%s=%s", r.Offset, r.Key, v)
		}
		sb.WriteString("]")
	}
	return sb.String()
}

// TestCompactBatches: the latest record per key stays at its offset;
// earlier ones go; batches keep their spans, and batches left empty merge
// into one empty batch; tombstones go after delete.retention.ms; records
// below the start offset, of aborted transactions, go; null keys and
// transaction markers stay.
func TestCompactBatches(t *testing.T) {
	const now, ts = 10_000, 1_000
	for _, tc := range []struct {
		name    string
		batches [][]byte
		p       keyCompactParams
		want    string
		removed int
	}{
		{"latest per key, gaps kept",
			kvBatches(0, ts, []kv{{"a", "1"}, {"b", "1"}, {"a", "2"}}, []kv{{"c", "1"}, {"b", "2"}}),
			keyCompactParams{Now: now, DeleteRetentionMs: 1000},
			"[0-2: 2=a=2][3-4: 3=c=1 4=b=2]", 2},
		{"a key across batches",
			kvBatches(0, ts, []kv{{"a", "1"}, {"b", "1"}}, []kv{{"a", "2"}}, []kv{{"b", "2"}}),
			keyCompactParams{Now: now, DeleteRetentionMs: 1000},
			"[0-1:][2-2: 2=a=2][3-3: 3=b=2]", 2},
		{"empty batches merge into one",
			kvBatches(10, ts, []kv{{"a", "1"}}, []kv{{"a", "2"}}, []kv{{"a", "3"}, {"b", "1"}}, []kv{{"a", "4"}}),
			keyCompactParams{Start: 10, Now: now, DeleteRetentionMs: 1000},
			"[10-11:][12-13: 13=b=1][14-14: 14=a=4]", 3},
		{"tombstone within delete.retention.ms stays",
			kvBatches(0, ts, []kv{{"a", "1"}, {"a", "-"}}),
			keyCompactParams{Now: now, DeleteRetentionMs: 60_000},
			"[0-1: 1=a=-]", 1},
		{"tombstone past delete.retention.ms goes",
			kvBatches(0, ts, []kv{{"a", "1"}, {"a", "-"}, {"b", "1"}}),
			keyCompactParams{Now: now, DeleteRetentionMs: 1000},
			"[0-2: 2=b=1]", 1},
		{"a value after a tombstone",
			kvBatches(0, ts, []kv{{"a", "1"}, {"a", "-"}}, []kv{{"a", "3"}}),
			keyCompactParams{Now: now, DeleteRetentionMs: 60_000},
			"[0-1:][2-2: 2=a=3]", 2},
		{"null keys stay",
			kvBatches(0, ts, []kv{{"", "x"}, {"a", "1"}, {"", "y"}, {"a", "2"}}),
			keyCompactParams{Now: now},
			"[0-3: 0==x 2==y 3=a=2]", 1},
		{"below the start offset",
			kvBatches(0, ts, []kv{{"a", "1"}, {"b", "1"}, {"c", "1"}}),
			keyCompactParams{Start: 2, Now: now},
			"[0-2: 2=c=1]", 0},
		{"compacting compacted batches (gaps in the input)",
			func() [][]byte {
				in, _, err := compactBatches(kvBatches(0, ts, []kv{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"c", "1"}}), keyCompactParams{Now: now})
				if err != nil {
					t.Fatal(err)
				}
				return append(in, kvBatches(4, ts, []kv{{"b", "2"}, {"d", "1"}})...)
			}(),
			keyCompactParams{Now: now},
			"[0-3: 2=a=2 3=c=1][4-5: 4=b=2 5=d=1]", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, st, err := compactBatches(tc.batches, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(t, out); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if st.Removed != tc.removed {
				t.Errorf("removed %d, want %d", st.Removed, tc.removed)
			}
			if st.BytesIn <= 0 || st.BytesOut <= 0 || st.RecordsOut > st.RecordsIn {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestCompactBatchesTransactions: records of an aborted transaction go,
// a committed transaction's latest values stay, markers stay.
func TestCompactBatchesTransactions(t *testing.T) {
	txn := func(base, pid int64, kvs ...kv) []byte {
		return record.AppendBatch(nil, record.BatchOptions{BaseOffset: base, Timestamp: 5, ProducerID: pid, Transactional: true, CreateTime: true}, kvRecords(kvs, 5))
	}
	batches := [][]byte{
		txn(0, 7, kv{"a", "aborted"}, kv{"b", "aborted"}),
		record.AppendControlBatch(nil, 2, 5, 7, 0, 0, record.MarkerAbort),
		txn(3, 8, kv{"a", "committed"}),
		record.AppendControlBatch(nil, 4, 5, 8, 0, 0, record.MarkerCommit),
	}
	out, st, err := compactBatches(batches, keyCompactParams{Now: 100, Aborted: []AbortedTxn{{ProducerID: 7, FirstOffset: 0, LastOffset: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(t, out), "[0-1:][2-2: control][3-3: 3=a=committed][4-4: control]"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if st.Aborted != 2 {
		t.Errorf("aborted %d, want 2", st.Aborted)
	}
}

// TestCompactBatchesOldestTombstone: the oldest tombstone kept is
// reported, so the compactor comes back for it once delete.retention.ms
// is over.
func TestCompactBatchesOldestTombstone(t *testing.T) {
	in := append(kvBatches(0, 1200, []kv{{"a", "-"}}), kvBatches(1, 1000, []kv{{"b", "-"}})...)
	_, st, err := compactBatches(in, keyCompactParams{Now: 1500, DeleteRetentionMs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if st.OldestTombstone != 1000 {
		t.Fatalf("oldest tombstone %d, want 1000", st.OldestTombstone)
	}
}

// BenchmarkCompactBatches: one compaction of 1,000 batches of 10 records
// over 1,000 keys (each key written 10 times), about 100 KB of values.
func BenchmarkCompactBatches(b *testing.B) {
	var batches [][]byte
	for i := 0; i < 1000; i++ {
		g := make([]kv, 10)
		for j := range g {
			g[j] = kv{fmt.Sprintf("key-%04d", (i*10+j)%1000), fmt.Sprintf("value-%d", i)}
		}
		batches = append(batches, kvBatches(int64(i*10), 1, g)...)
	}
	var in int64
	for _, x := range batches {
		in += int64(len(x))
	}
	b.SetBytes(in)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := compactBatches(batches, keyCompactParams{Now: 10}); err != nil {
			b.Fatal(err)
		}
	}
}
