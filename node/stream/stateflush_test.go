package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
)

// TestStateOnlyFlushCommitsClose: a close after the last append leaves a
// flush with a state change and no bytes. On the real object tier (which
// refuses an object without batches) that flush must still commit the
// closure, so a node restarted without its WAL sees the stream closed.
func TestStateOnlyFlushCommitsClose(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		mustCreate(t, h.svc, "/c", stream.CreateOptions{Initial: recs("a", "b")})
		if err := h.svc.Flush(ctx); err != nil {
			t.Fatalf("flush of the data: %v", err)
		}
		if _, err := h.svc.AppendBatch(ctx, "/c", stream.AppendRequest{Close: true}); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := h.svc.Flush(ctx); err != nil {
			t.Fatalf("flush holding only the close: %v", err)
		}
		h.restartWithoutWAL()
		info, err := h.svc.Head(ctx, "/c")
		if err != nil {
			t.Fatalf("head after a restart without the WAL: %v", err)
		}
		if !info.Closed {
			t.Fatalf("closure lost after a state-only flush and a restart without the WAL: %+v", info)
		}
		if got := readFrom(t, h.svc, "/c", 0); got != "a|b" {
			t.Fatalf("records after restart: %q, want a|b", got)
		}
	})
}

// TestCompactStateOnlyManifests: manifests that hold only state changes
// (streams closed before any data was flushed) are compacted like any
// other: the merged manifest keeps each stream's state, with no object to
// upload, and the closures survive a restart without the WAL.
func TestCompactStateOnlyManifests(t *testing.T) {
	eachRealStore(t, func(t *testing.T, h *tierHarness) {
		ctx := context.Background()
		for _, name := range []string{"/x", "/y", "/z"} {
			mustCreate(t, h.svc, name, stream.CreateOptions{})
			if _, err := h.svc.AppendBatch(ctx, name, stream.AppendRequest{Close: true}); err != nil {
				t.Fatalf("close %s: %v", name, err)
			}
			if err := h.svc.Flush(ctx); err != nil {
				t.Fatalf("flush after closing %s: %v", name, err)
			}
		}
		before, err := h.reg.Manifests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 1, DeleteDelay: time.Millisecond})
		if err != nil {
			t.Fatalf("compact %d state-only manifests: %v", len(before), err)
		}
		if n < 2 {
			t.Fatalf("compaction replaced %d of %d state-only manifests, want them merged", n, len(before))
		}
		h.restartWithoutWAL()
		for _, name := range []string{"/x", "/y", "/z"} {
			info, err := h.svc.Head(ctx, name)
			if err != nil || !info.Closed {
				t.Fatalf("%s after compaction and a restart without the WAL: %+v %v, want closed", name, info, err)
			}
		}
	})
}
