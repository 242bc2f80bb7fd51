package meta_test

import (
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// TestStreamStateFollowsOwnership: only the owner at the epoch it serves
// the stream under writes its state record; after a takeover the old
// owner's write fails (with the revision it last saw, and without one) and
// the new owner reads the last value written before; a change of the
// record that keeps the ownership does not fail a write; the record goes
// with the stream.
func TestStreamStateFollowsOwnership(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx := t.Context()
	mustCreate(t, reg, metadata.Stream{Name: "/s"})
	s, err := reg.UpdateStream(ctx, "/s", func(m *metadata.Stream) error { m.Owner = "a"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if v, err := reg.StreamState(ctx, s.ID); err != nil || v != nil {
		t.Fatalf("state of a new stream: %q %v, want none", v, err)
	}
	rev, err := reg.PutStreamState(ctx, "/s", s.ID, "a", s.Epoch, 0, []byte("one"))
	if err != nil || rev == 0 {
		t.Fatalf("first write: rev %d, %v", rev, err)
	}
	// A trim keeps the ownership: the next write re-reads and succeeds.
	if _, err := reg.UpdateStream(ctx, "/s", func(m *metadata.Stream) error { m.StartOffset = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	rev2, err := reg.PutStreamState(ctx, "/s", s.ID, "a", s.Epoch, rev, []byte("two"))
	if err != nil || rev2 <= rev {
		t.Fatalf("write after a trim: rev %d (was %d), %v", rev2, rev, err)
	}
	cur, err := reg.GetStream(ctx, "/s")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := reg.TakeOver(ctx, cur, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []int64{rev2, 0} {
		if _, err := reg.PutStreamState(ctx, "/s", s.ID, "a", s.Epoch, r, []byte("zombie")); !errors.Is(err, metadata.ErrConflict) {
			t.Fatalf("old owner's write after a takeover (rev %d): %v, want ErrConflict", r, err)
		}
	}
	if v, err := reg.StreamState(ctx, s.ID); err != nil || string(v) != "two" {
		t.Fatalf("new owner reads %q %v, want two", v, err)
	}
	if _, err := reg.PutStreamState(ctx, "/s", s.ID, "b", taken.Epoch, 0, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.PutStreamState(ctx, "/s", s.ID+1, "b", taken.Epoch, 0, []byte("other")); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("write for another incarnation: %v, want ErrConflict", err)
	}
	if err := reg.DeleteStream(ctx, "/s", s.ID); err != nil {
		t.Fatal(err)
	}
	if v, err := reg.StreamState(ctx, s.ID); err != nil || v != nil {
		t.Fatalf("state after delete: %q %v, want none", v, err)
	}
	if _, err := reg.PutStreamState(ctx, "/s", s.ID, "b", taken.Epoch, 0, []byte("gone")); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("write to a deleted stream: %v, want ErrNotFound", err)
	}
}
