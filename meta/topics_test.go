package meta_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
)

// TestTopicAliasUniqueOnCreate: a create that asks for a topic another
// stream holds creates nothing, and the alias resolves to its first holder.
func TestTopicAliasUniqueOnCreate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	a := mustCreate(t, reg, metadata.Stream{Name: "/a", KafkaTopic: "orders"})

	_, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/b", KafkaTopic: "orders"})
	if !errors.Is(err, metadata.ErrTopicTaken) || created {
		t.Fatalf("create with a taken topic: created=%v err=%v, want ErrTopicTaken", created, err)
	}
	if _, err := reg.GetStream(ctx, "/b"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("/b exists after its create failed on the topic: %v", err)
	}
	got, err := reg.LookupTopic(ctx, "orders")
	if err != nil || got.ID != a.ID || got.Name != "/a" {
		t.Fatalf("LookupTopic = %+v, %v; want /a", got, err)
	}
	// An existing stream of the same name wins over a topic conflict: the
	// caller compares configurations.
	again, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/a", KafkaTopic: "other"})
	if err != nil || created || again.KafkaTopic != "orders" {
		t.Fatalf("re-create /a: %+v %v %v", again, created, err)
	}
	// The documented key layout.
	resp, err := cli.Get(ctx, testPrefix+"topics/orders")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("topic index not at <prefix>topics/<topic>: %v %v", resp, err)
	}
	if _, err := reg.LookupTopic(ctx, "nope"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("LookupTopic(nope) = %v, want ErrNotFound", err)
	}
}

// TestDeleteFreesTopic: deleting a stream frees its alias for another.
func TestDeleteFreesTopic(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	a := mustCreate(t, reg, metadata.Stream{Name: "/a", KafkaTopic: "t"})
	deleteFreesTopic(t, ctx, reg, a, "/b")
}

// deleteFreesTopic deletes s and checks that its alias no longer resolves,
// then that a new stream next can take it.
func deleteFreesTopic(t *testing.T, ctx context.Context, reg *meta.Registry, s metadata.Stream, next string) {
	t.Helper()
	if err := reg.DeleteStream(ctx, s.Name, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.LookupTopic(ctx, s.KafkaTopic); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("topic %s of deleted stream %s still resolves: %v", s.KafkaTopic, s.Name, err)
	}
	n := mustCreate(t, reg, metadata.Stream{Name: next, KafkaTopic: s.KafkaTopic})
	if got, err := reg.LookupTopic(ctx, s.KafkaTopic); err != nil || got.ID != n.ID {
		t.Fatalf("LookupTopic(%s) after re-use = %+v %v; want %s", s.KafkaTopic, got, err, next)
	}
}

// TestUpdateMovesTopic: changing KafkaTopic through UpdateStream moves the
// index entry atomically, refuses a taken alias without writing, and
// dropping the alias frees it.
func TestUpdateMovesTopic(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	mustCreate(t, reg, metadata.Stream{Name: "/a", KafkaTopic: "one"})
	mustCreate(t, reg, metadata.Stream{Name: "/b", KafkaTopic: "taken"})

	if _, err := reg.UpdateStream(ctx, "/a", func(s *metadata.Stream) error { s.KafkaTopic = "two"; s.RetentionMs = 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.LookupTopic(ctx, "one"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("old alias still resolves: %v", err)
	}
	if got, err := reg.LookupTopic(ctx, "two"); err != nil || got.Name != "/a" || got.RetentionMs != 5 {
		t.Fatalf("new alias: %+v %v", got, err)
	}

	_, err := reg.UpdateStream(ctx, "/a", func(s *metadata.Stream) error { s.KafkaTopic = "taken"; s.RetentionMs = 9; return nil })
	if !errors.Is(err, metadata.ErrTopicTaken) {
		t.Fatalf("update to a taken alias: %v, want ErrTopicTaken", err)
	}
	if got, _ := reg.GetStream(ctx, "/a"); got.KafkaTopic != "two" || got.RetentionMs != 5 {
		t.Fatalf("failed update wrote something: %+v", got)
	}
	if got, _ := reg.LookupTopic(ctx, "taken"); got.Name != "/b" {
		t.Fatalf("failed update stole the alias: %+v", got)
	}

	if _, err := reg.UpdateStream(ctx, "/a", func(s *metadata.Stream) error { s.KafkaTopic = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.LookupTopic(ctx, "two"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("dropped alias still resolves: %v", err)
	}
	mustCreate(t, reg, metadata.Stream{Name: "/c", KafkaTopic: "two"})
}

// TestConcurrentTopicClaimsExactlyOneWins races creates and updates for
// one alias: exactly one stream ends up holding it.
func TestConcurrentTopicClaimsExactlyOneWins(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	const n = 8
	for i := 0; i < n; i++ {
		mustCreate(t, reg, metadata.Stream{Name: fmt.Sprintf("/u%d", i)})
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			_, created, err := reg.CreateStream(ctx, metadata.Stream{Name: fmt.Sprintf("/c%d", i), KafkaTopic: "hot"})
			switch {
			case err == nil && created:
				wins.Add(1)
			case !errors.Is(err, metadata.ErrTopicTaken):
				t.Errorf("create: %v", err)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			_, err := reg.UpdateStream(ctx, fmt.Sprintf("/u%d", i), func(s *metadata.Stream) error { s.KafkaTopic = "hot"; return nil })
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, metadata.ErrTopicTaken):
				t.Errorf("update: %v", err)
			}
		}(i)
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims of one alias succeeded, want exactly 1", wins.Load())
	}
	all, err := reg.AllStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holders := 0
	for _, s := range all {
		if s.KafkaTopic == "hot" {
			holders++
		}
	}
	if holders != 1 {
		t.Fatalf("%d records carry the alias, want 1", holders)
	}
	if _, err := reg.LookupTopic(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
}
