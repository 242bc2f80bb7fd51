package meta_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// hasTopicKey reports whether the topic index holds an entry for topic.
func hasTopicKey(t *testing.T, cli *clientv3.Client, topic string) bool {
	t.Helper()
	resp, err := cli.Get(testCtx(t), testPrefix+"topics/"+topic)
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// TestDerivedAliasWithoutIndexKey: a stream whose alias is derived from a
// name without '.' holds it with its record alone (one etcd key per
// stream), and the alias still resolves, is freed with the stream and is
// refused to every other claim. Aliases that are explicit, or derived from
// a name with '.', keep their index entry.
func TestDerivedAliasWithoutIndexKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	ab := mustCreate(t, reg, metadata.Stream{Name: "/a/b", KafkaTopic: "a.b"})
	if hasTopicKey(t, cli, "a.b") {
		t.Fatal("a derived alias of a name without '.' got an index entry")
	}
	if got, err := reg.LookupTopic(ctx, "a.b"); err != nil || got.ID != ab.ID || got.Name != "/a/b" {
		t.Fatalf("LookupTopic(a.b) = %+v, %v; want /a/b", got, err)
	}
	// Every other way to claim a.b is refused: an explicit alias, the
	// dotted name that derives the same alias, an update.
	for _, name := range []string{"/x", "/a.b"} {
		if _, created, err := reg.CreateStream(ctx, metadata.Stream{Name: name, KafkaTopic: "a.b"}); !errors.Is(err, metadata.ErrTopicTaken) || created {
			t.Fatalf("create %s claiming a.b: created=%v err=%v, want ErrTopicTaken", name, created, err)
		}
		if _, err := reg.GetStream(ctx, name); !errors.Is(err, metadata.ErrNotFound) {
			t.Fatalf("%s exists after its claim failed: %v", name, err)
		}
	}
	mustCreate(t, reg, metadata.Stream{Name: "/y"})
	if _, err := reg.UpdateStream(ctx, "/y", func(s *metadata.Stream) error { s.KafkaTopic = "a.b"; return nil }); !errors.Is(err, metadata.ErrTopicTaken) {
		t.Fatalf("update claiming a.b: %v, want ErrTopicTaken", err)
	}

	// Explicit, and derived from a dotted name: index entries as before.
	mustCreate(t, reg, metadata.Stream{Name: "/c", KafkaTopic: "c.d"})
	mustCreate(t, reg, metadata.Stream{Name: "/e.f", KafkaTopic: "e.f"})
	if !hasTopicKey(t, cli, "c.d") || !hasTopicKey(t, cli, "e.f") {
		t.Fatal("an explicit or dotted-name alias has no index entry")
	}
	// ... and they hold their alias against the name that would derive it.
	for _, name := range []string{"/c/d", "/e/f"} {
		topic := name[1:2] + "." + name[3:]
		if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: name, KafkaTopic: topic}); !errors.Is(err, metadata.ErrTopicTaken) {
			t.Fatalf("create %s claiming %s: %v, want ErrTopicTaken", name, topic, err)
		}
	}

	// A name that could hold g.h keylessly but does not: an explicit claim
	// of g.h elsewhere succeeds, after which that name cannot take it.
	mustCreate(t, reg, metadata.Stream{Name: "/g/h"})
	z := mustCreate(t, reg, metadata.Stream{Name: "/z", KafkaTopic: "g.h"})
	if got, err := reg.LookupTopic(ctx, "g.h"); err != nil || got.ID != z.ID {
		t.Fatalf("LookupTopic(g.h) = %+v, %v; want /z", got, err)
	}
	if _, err := reg.UpdateStream(ctx, "/g/h", func(s *metadata.Stream) error { s.KafkaTopic = "g.h"; return nil }); !errors.Is(err, metadata.ErrTopicTaken) {
		t.Fatalf("/g/h taking g.h held by /z: %v, want ErrTopicTaken", err)
	}

	// Moving a keyless alias away and back, and deleting, free it.
	if _, err := reg.UpdateStream(ctx, "/a/b", func(s *metadata.Stream) error { s.KafkaTopic = "other"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.LookupTopic(ctx, "a.b"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("a.b after /a/b dropped it: %v, want ErrNotFound", err)
	}
	if !hasTopicKey(t, cli, "other") {
		t.Fatal("an explicit alias set by an update has no index entry")
	}
	if _, err := reg.UpdateStream(ctx, "/a/b", func(s *metadata.Stream) error { s.KafkaTopic = "a.b"; return nil }); err != nil {
		t.Fatal(err)
	}
	if hasTopicKey(t, cli, "a.b") || hasTopicKey(t, cli, "other") {
		t.Fatal("index entries left after moving a keyless alias away and back")
	}
	if got, err := reg.LookupTopic(ctx, "a.b"); err != nil || got.ID != ab.ID {
		t.Fatalf("LookupTopic(a.b) after moving back = %+v, %v", got, err)
	}
	deleteFreesTopic(t, ctx, reg, ab, "/x")
}

// TestDerivedAliasIndexEntryOfEarlierVersions: earlier versions wrote an
// index entry for every alias. Such an entry of an alias that is now held
// keylessly still resolves and holds the alias, and goes with it.
func TestDerivedAliasIndexEntryOfEarlierVersions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	rec := `{"name":"/old/t","id":7,"createdAt":"2026-11-01T10:00:00Z","epoch":1,"kafkaTopic":"old.t"}`
	for k, v := range map[string]string{
		"streams//old/t":      rec,
		"topics/old.t":        `{"stream":"/old/t","id":7}`,
		"counters/stream-id":  "7",
		"streams//old/u":      `{"name":"/old/u","id":6,"createdAt":"2026-11-01T10:00:00Z","epoch":1,"kafkaTopic":"old.u"}`,
		"topics/old.u":        `{"stream":"/old/u","id":6}`,
		"streams//other/kept": `{"name":"/other/kept","id":5,"createdAt":"2026-11-01T10:00:00Z","epoch":1}`,
	} {
		if _, err := cli.Put(ctx, testPrefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := reg.LookupTopic(ctx, "old.t"); err != nil || got.ID != 7 {
		t.Fatalf("LookupTopic through an earlier version's entry = %+v, %v", got, err)
	}
	if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: "/n", KafkaTopic: "old.t"}); !errors.Is(err, metadata.ErrTopicTaken) {
		t.Fatalf("claim of old.t: %v, want ErrTopicTaken", err)
	}
	if _, err := reg.UpdateStream(ctx, "/old/t", func(s *metadata.Stream) error { s.KafkaTopic = "new.t"; return nil }); err != nil {
		t.Fatal(err)
	}
	if hasTopicKey(t, cli, "old.t") {
		t.Fatal("the earlier version's entry outlived the alias")
	}
	if err := reg.DeleteStream(ctx, "/old/u", 6); err != nil {
		t.Fatal(err)
	}
	if hasTopicKey(t, cli, "old.u") {
		t.Fatal("the earlier version's entry outlived the stream")
	}
}

// TestConcurrentKeylessAndIndexedClaims races every kind of claim of one
// alias a.b: the name that holds it keylessly (/a/b, by create or by
// update), the dotted name deriving it (/a.b) and explicit aliases, by
// create and by update. Exactly one wins, and the alias resolves to it.
func TestConcurrentKeylessAndIndexedClaims(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	for _, holderExists := range []bool{false, true} {
		t.Run(fmt.Sprintf("holder-exists=%v", holderExists), func(t *testing.T) {
			reg, _ := newRegistry(t)
			const n = 4
			for i := 0; i < n; i++ {
				mustCreate(t, reg, metadata.Stream{Name: fmt.Sprintf("/u%d", i)})
			}
			claims := []func() (bool, error){
				func() (bool, error) {
					_, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/a.b", KafkaTopic: "a.b"})
					return created, err
				},
			}
			if holderExists {
				mustCreate(t, reg, metadata.Stream{Name: "/a/b"})
				claims = append(claims, func() (bool, error) {
					_, err := reg.UpdateStream(ctx, "/a/b", func(s *metadata.Stream) error { s.KafkaTopic = "a.b"; return nil })
					return err == nil, err
				})
			} else {
				claims = append(claims, func() (bool, error) {
					_, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/a/b", KafkaTopic: "a.b"})
					return created, err
				})
			}
			for i := 0; i < n; i++ {
				claims = append(claims, func() (bool, error) {
					_, created, err := reg.CreateStream(ctx, metadata.Stream{Name: fmt.Sprintf("/c%d", i), KafkaTopic: "a.b"})
					return created, err
				}, func() (bool, error) {
					_, err := reg.UpdateStream(ctx, fmt.Sprintf("/u%d", i), func(s *metadata.Stream) error { s.KafkaTopic = "a.b"; return nil })
					return err == nil, err
				})
			}
			var wins atomic.Int32
			var wg sync.WaitGroup
			for _, claim := range claims {
				wg.Add(1)
				go func() {
					defer wg.Done()
					won, err := claim()
					switch {
					case won:
						wins.Add(1)
					case !errors.Is(err, metadata.ErrTopicTaken):
						t.Errorf("claim: %v", err)
					}
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d claims of one alias succeeded, want exactly 1", wins.Load())
			}
			all, err := reg.AllStreams(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var holder string
			for _, s := range all {
				if s.KafkaTopic == "a.b" {
					if holder != "" {
						t.Fatalf("%s and %s both carry a.b", holder, s.Name)
					}
					holder = s.Name
				}
			}
			if got, err := reg.LookupTopic(ctx, "a.b"); err != nil || got.Name != holder {
				t.Fatalf("LookupTopic(a.b) = %+v, %v; want %s", got, err, holder)
			}
		})
	}
}
