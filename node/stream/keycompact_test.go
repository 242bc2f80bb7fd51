package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// newKeyCompactHarness is a tier harness on the real object format (a
// file store): key compaction writes and reads real segment objects.
func newKeyCompactHarness(t *testing.T) *tierHarness {
	h := newTierHarness(t, stream.DurabilityObject)
	h.close()
	real, err := tiering.NewTier(objstoretest.FileStore(t), tiering.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	h.real = real
	h.open()
	return h
}

func compactedOpts(t *testing.T, configs map[string]string) stream.CreateOptions {
	t.Helper()
	c, err := stream.ParseCompaction(nil, configs)
	if err != nil {
		t.Fatal(err)
	}
	return stream.CreateOptions{Compaction: c}
}

// appendKV appends one record per call (so each lands in its own batch
// and, with object durability, usually its own flush object).
func appendKV(t *testing.T, svc *stream.Service, name, k, v string) int64 {
	t.Helper()
	r := record.Record{Key: []byte(k)}
	if v != "-" {
		r.Value = []byte(v)
	}
	res, err := svc.AppendBatch(context.Background(), name, stream.AppendRequest{Records: []record.Record{r}})
	if err != nil {
		t.Fatalf("append %s=%s: %v", k, v, err)
	}
	return res.FirstOffset
}

// TestKeyCompaction: a compacted stream's object-stored history keeps
// the latest record per key at its offset (offsets increase with holes),
// tombstones stay until delete.retention.ms and then go, a stream sharing
// the objects is untouched, the result survives a restart, and the merge
// of flush objects still works on the compacted layout.
func TestKeyCompaction(t *testing.T) {
	h := newKeyCompactHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/kv", compactedOpts(t, map[string]string{
		"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3600000"})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.Create(ctx, "/plain", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	latest := map[string]int64{}
	for round := 0; round < 4; round++ {
		for k := 0; k < 5; k++ {
			key := fmt.Sprintf("k%d", k)
			latest[key] = appendKV(t, h.svc, "/kv", key, fmt.Sprintf("v%d-%d", k, round))
			appendKV(t, h.svc, "/plain", key, "x")
		}
	}
	latest["k1"] = appendKV(t, h.svc, "/kv", "k1", "-") // tombstone
	if _, err := h.svc.AppendBatch(ctx, "/kv", stream.AppendRequest{Records: []record.Record{{Value: []byte("no key")}}}); err == nil {
		t.Fatal("a record without a key was appended to a compacted stream")
	}

	n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond})
	if err != nil || n != 1 {
		t.Fatalf("CompactKeys = %d, %v; want 1 stream compacted", n, err)
	}
	check := func(when string, tombstone bool) {
		t.Helper()
		recs := readAllRecords(t, h.svc, "/kv")
		want := 5
		if !tombstone {
			want = 4
		}
		if len(recs) != want {
			t.Fatalf("%s: %d records, want %d: %v", when, len(recs), want, recs)
		}
		prev := int64(-1)
		for _, r := range recs {
			if r.Offset <= prev {
				t.Fatalf("%s: offset %d after %d", when, r.Offset, prev)
			}
			prev = r.Offset
			if latest[string(r.Key)] != r.Offset {
				t.Fatalf("%s: key %s at offset %d, latest is at %d", when, r.Key, r.Offset, latest[string(r.Key)])
			}
			if string(r.Key) == "k1" && r.Value != nil {
				t.Fatalf("%s: k1 = %q, want the tombstone", when, r.Value)
			}
		}
		if !tombstone {
			for _, r := range recs {
				if string(r.Key) == "k1" {
					t.Fatalf("%s: tombstone still there", when)
				}
			}
		}
		if got := len(readAllRecords(t, h.svc, "/plain")); got != 20 {
			t.Fatalf("%s: /plain has %d records, want 20", when, got)
		}
	}
	check("after compaction", true)
	if n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{}); err != nil || n != 0 {
		t.Fatalf("a second pass with nothing dirty compacted %d (%v)", n, err)
	}

	h.close()
	h.open()
	check("after a restart", true)

	// delete.retention.ms over: the tombstone goes.
	if _, err := h.svc.Configure(ctx, "/kv", stream.ConfigChange{Compaction: &stream.CompactionChange{
		Configs: map[string]string{"delete.retention.ms": "0"}}}); err != nil {
		t.Fatal(err)
	}
	if n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond}); err != nil || n != 1 {
		t.Fatalf("CompactKeys for the tombstone = %d, %v", n, err)
	}
	check("after the tombstone's retention", false)

	// A new value after compaction (the old one stays until the next
	// run), then the merge of flush objects over the compacted layout.
	appendKV(t, h.svc, "/kv", "k2", "new")
	if _, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 1, DeleteDelay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	recs := readAllRecords(t, h.svc, "/kv")
	if len(recs) != 5 || string(recs[len(recs)-1].Value) != "new" {
		t.Fatalf("after new values and a merge: %v", recs)
	}
	h.close()
	h.open()
	if got := readAllRecords(t, h.svc, "/kv"); len(got) != 5 {
		t.Fatalf("after a merge and a restart: %v", got)
	}
}

// TestKeyCompactionMinLag: records younger than min.compaction.lag.ms
// are not compacted.
func TestKeyCompactionMinLag(t *testing.T) {
	h := newKeyCompactHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/lag", compactedOpts(t, map[string]string{
		"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000", "min.cleanable.dirty.ratio": "0"})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		appendKV(t, h.svc, "/lag", "k", fmt.Sprint(i))
	}
	if n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{}); err != nil || n != 0 {
		t.Fatalf("compacted %d streams (%v) within min.compaction.lag.ms", n, err)
	}
	if got := len(readAllRecords(t, h.svc, "/lag")); got != 5 {
		t.Fatalf("%d records, want 5", got)
	}
}
