package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/node/stream"
)

// TestStateFollowsOwnership: the owner reads back the state record it
// wrote, also after a restart; once the registry gives the stream to
// another node (a takeover this node has not noticed), its next write is
// refused (ErrUnavailable) and the record keeps the last value written
// while it owned the stream.
func TestStateFollowsOwnership(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/st", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := h.svc.State(ctx, "/st"); err != nil || v != nil {
		t.Fatalf("new stream's state: %q %v", v, err)
	}
	for _, v := range []string{"one", "two"} {
		if err := h.svc.PutState(ctx, "/st", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	h.reopen()
	if v, err := h.svc.State(ctx, "/st"); err != nil || string(v) != "two" {
		t.Fatalf("after restart: %q %v, want two", v, err)
	}
	reg := meta.NewRegistry(h.cli, "/test/")
	cur, err := reg.GetStream(ctx, "/st")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.TakeOver(ctx, cur, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.PutState(ctx, "/st", []byte("late")); !errors.Is(err, stream.ErrUnavailable) {
		t.Fatalf("write after a takeover: %v, want ErrUnavailable", err)
	}
	if v, err := reg.StreamState(ctx, cur.ID); err != nil || string(v) != "two" {
		t.Fatalf("record after the refused write: %q %v, want two", v, err)
	}
	if err := h.svc.PutState(ctx, "/missing", []byte("x")); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("state of a missing stream: %v, want ErrNotFound", err)
	}
}
