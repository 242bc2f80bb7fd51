package stream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

// eachRealStore runs fn once over a tiering.Tier on a file store and once
// over MinIO (skipped without PICOMQ_S3_ENDPOINT, failed under CI): the
// garbage collector must be safe against the real object format and the
// real listing, not only the in-memory test tier.
func eachRealStore(t *testing.T, fn func(t *testing.T, h *tierHarness)) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) objstore.Store
	}{
		{"file", objstoretest.FileStore},
		{"s3", func(t *testing.T) objstore.Store { return objstoretest.S3FromEnv(t)(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.store(t)
			h := newTierHarness(t, stream.DurabilityObject)
			h.close()
			real, err := tiering.NewTier(store, tiering.TierOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { real.Close() })
			h.real = real
			h.open()
			fn(t, h)
		})
	}
}

// restartWithoutWAL stops the node, deletes its WAL and starts it again:
// from then on every record must come from object storage.
func (h *tierHarness) restartWithoutWAL() {
	h.t.Helper()
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

// readFrom reads name from offset from to its tail, failing (never
// spinning) when a page makes no progress: lost records show up as a read
// that returns nothing yet is not up to date.
func readFrom(t *testing.T, svc *stream.Service, name string, from int64) string {
	t.Helper()
	var out []string
	for {
		res, err := svc.Read(context.Background(), name, stream.ReadOptions{Offset: from})
		if err != nil {
			t.Fatalf("read %s at %d: %v", name, from, err)
		}
		out = append(out, vals(res.Records)...)
		if res.UpToDate {
			return join(out)
		}
		if len(res.Records) == 0 {
			t.Fatalf("read %s at %d: no records, not up to date (next offset %d, read so far %q): the records are gone", name, from, res.NextOffset, join(out))
		}
		from = res.NextOffset
	}
}

// TestGCKeepsObjectsALiveForkReads: a soft-deleted source's objects hold a
// live fork's inherited history, so garbage collection must keep them until
// the last fork is gone; otherwise the fork silently reads nothing once
// the WAL no longer has the records.
func TestGCKeepsObjectsALiveForkReads(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		mustCreate(t, h.svc, "/src", stream.CreateOptions{Initial: recs("s0", "s1")})
		if _, err := h.svc.Append(ctx, "/src", recs("s2")); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, h.svc, "/fork", stream.CreateOptions{Fork: fork("/src", -1, 0)})
		if _, err := h.svc.Append(ctx, "/fork", recs("f3")); err != nil {
			t.Fatal(err)
		}
		if err := h.svc.Delete(ctx, "/src"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.svc.Head(ctx, "/src"); !errors.Is(err, stream.ErrGone) {
			t.Fatalf("source with a live fork after delete: %v, want soft-deleted (ErrGone)", err)
		}
		n, err := h.svc.CollectGarbage(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("gc deleted %d objects while a fork reads all of them", n)
		}
		h.restartWithoutWAL()
		if got := readFrom(t, h.svc, "/fork", 0); got != "s0|s1|s2|f3" {
			t.Fatalf("fork after gc and a restart without the WAL reads %q, want s0|s1|s2|f3", got)
		}
		// Not vacuous: once the fork is deleted too, the whole chain's
		// objects are garbage and the same pass deletes them.
		if err := h.svc.Delete(ctx, "/fork"); err != nil {
			t.Fatal(err)
		}
		if n, err := h.svc.CollectGarbage(ctx, time.Hour); err != nil || n < 2 {
			t.Fatalf("gc after the last fork went deleted %d objects (%v), want the source's and the fork's", n, err)
		}
		if ms, err := h.reg.Manifests(ctx); err != nil || len(ms) != 0 {
			t.Fatalf("manifests left after the chain was collected: %d (%v)", len(ms), err)
		}
	})
}

// TestGCKeepsObjectStraddlingTrimPoint: a trim inside an object that holds
// several records leaves that object partly live; garbage collection must
// keep it (its records after the trim point exist nowhere else once the
// WAL is gone) and delete only objects wholly below the start offset.
func TestGCKeepsObjectStraddlingTrimPoint(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		mustCreate(t, h.svc, "/t", stream.CreateOptions{})
		// Object durability: each append is acknowledged after its own
		// flush, so this is one object [0,4) and two objects [4,5), [5,6).
		if _, err := h.svc.Append(ctx, "/t", recs("r0", "r1", "r2", "r3")); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{"r4", "r5"} {
			if _, err := h.svc.Append(ctx, "/t", recs(v)); err != nil {
				t.Fatal(err)
			}
		}
		ms, err := h.reg.Manifests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		straddles := false
		for _, m := range ms {
			for _, r := range m.Streams {
				straddles = straddles || (r.First < 2 && r.Next > 2)
			}
		}
		if !straddles {
			t.Fatalf("setup: no object holds offsets on both sides of 2: %+v", ms)
		}
		trim := int64(2)
		if _, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: &trim}); err != nil {
			t.Fatal(err)
		}
		if n, err := h.svc.CollectGarbage(ctx, time.Hour); err != nil || n != 0 {
			t.Errorf("gc after a trim inside the first object deleted %d objects (%v), want 0", n, err)
		}
		h.restartWithoutWAL()
		if got := readFrom(t, h.svc, "/t", 2); got != "r2|r3|r4|r5" {
			t.Fatalf("read from the trim point after gc and a restart without the WAL: %q, want r2|r3|r4|r5", got)
		}
		if _, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 1}); !errors.Is(err, stream.ErrOffsetTrimmed) {
			t.Fatalf("read below the trim point: %v, want ErrOffsetTrimmed", err)
		}
		// Trimming to the object's end makes it garbage: the boundary is
		// exact in both directions.
		trim = 4
		if _, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: &trim}); err != nil {
			t.Fatal(err)
		}
		if n, err := h.svc.CollectGarbage(ctx, time.Hour); err != nil || n != 1 {
			t.Fatalf("gc after trimming to 4 deleted %d objects (%v), want the one object [0,4)", n, err)
		}
		page, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 4})
		if err != nil || fmt.Sprint(vals(page.Records)) != "[r4 r5]" {
			t.Fatalf("read from 4 after collecting [0,4): %v %v", vals(page.Records), err)
		}
	})
}

// TestGCKeepsSourceRecordsAForkReadsBelowTheSourceTrim: a source may be
// trimmed up to a live fork's fork point, but the fork still reads the
// source's records from its own start offset; garbage collection must keep
// them. A fork of an already trimmed source starts where its source
// starts, so it never offers records that may be gone.
func TestGCKeepsSourceRecordsAForkReadsBelowTheSourceTrim(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		mustCreate(t, h.svc, "/src", stream.CreateOptions{})
		for _, v := range []string{"a", "b", "c", "d", "e"} {
			if _, err := h.svc.Append(ctx, "/src", recs(v)); err != nil {
				t.Fatal(err)
			}
		}
		mustCreate(t, h.svc, "/f", stream.CreateOptions{Fork: fork("/src", 3, 0)})
		// A fork of a fork, so the source's records are read through two
		// fork points.
		mustCreate(t, h.svc, "/ff", stream.CreateOptions{Fork: fork("/f", 2, 0)})
		two := int64(2)
		if _, err := h.svc.Configure(ctx, "/src", stream.ConfigChange{TrimBefore: &two}); err != nil {
			t.Fatalf("trim of the source below the fork point: %v", err)
		}
		one := int64(1)
		if _, err := h.svc.Configure(ctx, "/f", stream.ConfigChange{TrimBefore: &one}); err != nil {
			t.Fatalf("trim of the middle fork below the second fork point: %v", err)
		}
		if n, err := h.svc.CollectGarbage(ctx, time.Hour); err != nil || n != 0 {
			t.Errorf("gc deleted %d objects (%v) that forks still read", n, err)
		}
		late := mustCreate(t, h.svc, "/late", stream.CreateOptions{Fork: fork("/src", -1, 0)})
		if late.StartOffset != 2 {
			t.Errorf("fork of a source trimmed to 2 starts at %d, want 2", late.StartOffset)
		}
		h.restartWithoutWAL()
		if got := readFrom(t, h.svc, "/f", 1); got != "b|c" {
			t.Errorf("fork after the source's trim, gc and a restart without the WAL reads %q from its start, want b|c", got)
		}
		if got := readFrom(t, h.svc, "/ff", 0); got != "a|b" {
			t.Errorf("fork of the fork reads %q, want a|b", got)
		}
		if got := readFrom(t, h.svc, "/late", 2); got != "c|d|e" {
			t.Errorf("fork of the trimmed source reads %q, want c|d|e", got)
		}
		if _, err := h.svc.Read(ctx, "/late", stream.ReadOptions{Offset: 1}); !errors.Is(err, stream.ErrOffsetTrimmed) {
			t.Errorf("read of the late fork below its source's start: %v, want ErrOffsetTrimmed", err)
		}
		if _, err := h.svc.Read(ctx, "/src", stream.ReadOptions{Offset: 1}); !errors.Is(err, stream.ErrOffsetTrimmed) {
			t.Errorf("read of the source below its start: %v, want ErrOffsetTrimmed", err)
		}
	})
}
