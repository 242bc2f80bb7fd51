package stream_test

import (
	"context"
	"fmt"
	"os"
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
	// A read as stored batches gets the compacted (holed) batches as
	// records: readers of stored batches only see produced shapes.
	page, err := h.svc.Read(ctx, "/kv", stream.ReadOptions{Offset: 0, Batches: true, MaxRecords: 100})
	if err != nil || len(page.Batches) != 0 || len(page.Records) == 0 {
		t.Fatalf("read as batches of a compacted range: %d batches, %d records, %v", len(page.Batches), len(page.Records), err)
	}
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

// TestKeyCompactionMaxLag: below min.cleanable.dirty.ratio a stream is
// compacted again only when its dirty data is older than
// max.compaction.lag.ms.
func TestKeyCompactionMaxLag(t *testing.T) {
	h := newKeyCompactHarness(t)
	ctx := context.Background()
	for name, c := range map[string]map[string]string{
		"/ratio-only": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1"},
		"/max-lag":    {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "1"},
	} {
		if _, _, err := h.svc.Create(ctx, name, compactedOpts(t, c)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			appendKV(t, h.svc, name, "k", fmt.Sprint(i))
		}
	}
	// First runs: everything is dirty (ratio 1 is reached).
	if n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond}); err != nil || n != 2 {
		t.Fatalf("first pass compacted %d (%v), want 2", n, err)
	}
	for _, name := range []string{"/ratio-only", "/max-lag"} {
		appendKV(t, h.svc, name, "k", "new")
	}
	// The dirty share is below 1 now; only the max lag makes a run due
	// (its 1 ms is over once the batch has been uploaded).
	deadline := time.Now().Add(10 * time.Second)
	for len(readAllRecords(t, h.svc, "/max-lag")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("/max-lag not compacted again: %v", readAllRecords(t, h.svc, "/max-lag"))
		}
		if _, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(readAllRecords(t, h.svc, "/ratio-only")); got != 2 {
		t.Fatalf("/ratio-only has %d records, want 2 (compacted once, then below its dirty ratio)", got)
	}
}

// TestKeyCompactionSegmentMs: with a seal age far off, a compacted
// stream's records stay in the WAL (not compactable) until segment.ms
// makes the compactor ask for a flush.
func TestKeyCompactionSegmentMs(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	real, err := tiering.NewTier(objstoretest.FileStore(t), tiering.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	h.real, h.seal, h.sealB = real, time.Hour, 1<<30
	h.open()
	ctx := context.Background()
	for name, seg := range map[string]string{"/seg-short": "1", "/seg-default": "604800000"} {
		if _, _, err := h.svc.Create(ctx, name, compactedOpts(t, map[string]string{
			"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0", "segment.ms": seg})); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			appendKV(t, h.svc, name, "k", fmt.Sprint(i))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(readAllRecords(t, h.svc, "/seg-short")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("/seg-short not compacted: %v", readAllRecords(t, h.svc, "/seg-short"))
		}
		if _, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	// The flush segment.ms asked for uploaded both streams (a node-wide
	// flush); the other one is compacted by the next pass, which is fine:
	// segment.ms is an upper bound.
	if got := len(readAllRecords(t, h.svc, "/seg-default")); got != 4 && got != 1 {
		t.Fatalf("/seg-default: %d records", got)
	}
}

// TestKeyCompactionKeepsClosure: a stream closed after its last append
// (a state-only manifest entry at the end) is still closed after its
// compaction and a restart without its WAL: the compacted entry carries
// the newest state. (The test tier, unlike tiering.Tier, commits a flush
// that holds only a state change: see the report of this change.)
func TestKeyCompactionKeepsClosure(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/closed", compactedOpts(t, map[string]string{"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		appendKV(t, h.svc, "/closed", "k", fmt.Sprint(i))
	}
	if _, err := h.svc.AppendBatch(ctx, "/closed", stream.AppendRequest{Close: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Flush(ctx); err != nil { // the close: a state-only manifest entry
		t.Fatal(err)
	}
	if n, err := h.svc.CompactKeys(ctx, stream.CompactConfig{DeleteDelay: time.Millisecond}); err != nil || n != 1 {
		t.Fatalf("CompactKeys = %d, %v", n, err)
	}
	ms, err := h.reg.Manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, m := range ms {
		entries += len(m.Streams)
	}
	if entries != 1 {
		t.Fatalf("%d manifest entries after compaction, want the compacted one only", entries)
	}
	h.close()
	if err := os.RemoveAll(h.dir); err != nil { // the WAL: state comes from the manifests alone
		t.Fatal(err)
	}
	h.open()
	info, err := h.svc.Head(ctx, "/closed")
	if err != nil || !info.Closed {
		t.Fatalf("after compaction and a restart: closed %v (%v)", info.Closed, err)
	}
	if got := readAllRecords(t, h.svc, "/closed"); len(got) != 1 || string(got[0].Value) != "2" {
		t.Fatalf("records %v", got)
	}
}
