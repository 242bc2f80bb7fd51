package meta_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/tiering/extent"
)

func TestJoinRejectsDuplicateLiveNode(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/t/")
	ctx := context.Background()
	s1, err := reg.Join(ctx, metadata.Member{NodeID: "n1", AdvertiseURL: "http://a"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 5*time.Second); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("second live n1: %v, want ErrConflict", err)
	}
	ms, err := reg.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].AdvertiseURL != "http://a" {
		t.Fatalf("members: %+v %v", ms, err)
	}
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !s1.Lost() {
		t.Fatal("closed session not reported lost")
	}
	if ms, _ := reg.Members(ctx); len(ms) != 0 {
		t.Fatalf("member still listed after Close: %+v", ms)
	}
	if _, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 5*time.Second); err != nil {
		t.Fatalf("rejoin after close: %v", err)
	}
}

// TestCommitManifestFencedByLease: a session whose lease is gone commits
// nothing, even after the node rejoined with a new session.
func TestCommitManifestFencedByLease(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/t/")
	ctx := context.Background()
	old, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m := metadata.Manifest{Node: "n1", Seq: 1, Object: "l0/n1/1", Streams: []metadata.ManifestStream{{Extent: extent.Extent{StreamID: 7, First: 0, Next: 10, Length: 100}}}}
	if err := reg.CommitManifest(ctx, old, m, nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.CommitManifest(ctx, old, m, nil); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("same seq twice: %v", err)
	}
	// Simulate the lease expiring while the node is paused: revoke it
	// behind the session's back.
	if _, err := cli.Revoke(ctx, old.LeaseID()); err != nil {
		t.Fatal(err)
	}
	fresh, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m.Seq = 2
	if err := reg.CommitManifest(ctx, old, m, nil); !errors.Is(err, metadata.ErrLeaseLost) {
		t.Fatalf("commit with the expired session: %v, want ErrLeaseLost", err)
	}
	if err := reg.CommitManifest(ctx, fresh, m, []string{reg.ManifestKey("n1", 1)}); err != nil {
		t.Fatalf("commit with the new session replacing seq 1: %v", err)
	}
	all, err := reg.Manifests(ctx)
	if err != nil || len(all) != 1 || all[0].Seq != 2 || all[0].Streams[0].StreamID != 7 {
		t.Fatalf("manifests: %+v %v", all, err)
	}
	if seq, err := reg.MaxManifestSeq(ctx, "n1"); err != nil || seq != 2 {
		t.Fatalf("max seq %d %v", seq, err)
	}
	if err := reg.DeleteManifests(ctx, []string{all[0].Key}); err != nil {
		t.Fatal(err)
	}
	if all, _ := reg.Manifests(ctx); len(all) != 0 {
		t.Fatalf("after delete: %+v", all)
	}
}

// TestCommitManifestOutcomeUnknown: a commit whose request fails in transit
// is resolved by reading the key back — our manifest there is a success
// (the response was lost, not the write) — and is otherwise reported as
// ErrCommitUnknown, never as a plain failure the caller could take as
// "not committed" and delete the object for.
func TestCommitManifestOutcomeUnknown(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/u/")
	ctx := context.Background()
	sess, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	m := metadata.Manifest{Node: "n1", Seq: 1, Object: "l0/n1/1", Streams: []metadata.ManifestStream{{Extent: extent.Extent{StreamID: 7, First: 0, Next: 10, Length: 100}}}}
	if err := reg.CommitManifest(cancelled, sess, m, nil); !errors.Is(err, metadata.ErrCommitUnknown) {
		t.Fatalf("commit that never left: %v, want ErrCommitUnknown", err)
	}
	if err := reg.CommitManifest(ctx, sess, m, nil); err != nil {
		t.Fatal(err)
	}
	// The same manifest again through a failing request: the read-back
	// finds it, so this is the lost-response case and succeeds.
	if err := reg.CommitManifest(cancelled, sess, m, nil); err != nil {
		t.Fatalf("commit whose manifest is there: %v, want success", err)
	}
	// A different manifest under that key is no proof of anything.
	m.Object = "l0/n1/other"
	if err := reg.CommitManifest(cancelled, sess, m, nil); !errors.Is(err, metadata.ErrCommitUnknown) {
		t.Fatalf("different manifest there: %v, want ErrCommitUnknown", err)
	}
}

// TestManifestsListedAtOneRevision: a listing that spans pages shows the
// manifests as of one revision. A transaction committed between two pages
// that puts a merged manifest under a key the listing has passed and
// removes the manifests it replaces from the keys still ahead would,
// listed page by page at the current revision, lose the merged range
// entirely: a hole readers are moved past as a gap.
func TestManifestsListedAtOneRevision(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/t/")
	ctx := context.Background()
	s1, err := reg.Join(ctx, metadata.Member{NodeID: "n1"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(5) {
		m := metadata.Manifest{Node: "n1", Seq: uint64(i + 1), Object: "l0/n1/" + string(rune('a'+i)),
			Streams: []metadata.ManifestStream{{Extent: extent.Extent{StreamID: 7, First: 10 * i, Next: 10*i + 10, Length: 100}}}}
		if err := reg.CommitManifest(ctx, s1, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	s0, err := reg.Join(ctx, metadata.Member{NodeID: "n0"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	swapped := false
	meta.SetScanPaging(reg, 2, func() {
		if swapped {
			return
		}
		swapped = true
		merged := metadata.Manifest{Node: "n0", Seq: 1, Object: "l0/n0/merged",
			Streams: []metadata.ManifestStream{{Extent: extent.Extent{StreamID: 7, First: 20, Next: 40, Length: 200}}}}
		if err := reg.CommitManifest(ctx, s0, merged, []string{reg.ManifestKey("n1", 3), reg.ManifestKey("n1", 4)}); err != nil {
			t.Errorf("swap between pages: %v", err)
		}
	})
	all, err := reg.Manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !swapped {
		t.Fatal("the listing read one page: the test did not swap between pages")
	}
	next := int64(0)
	for _, m := range all {
		e := m.Streams[0]
		if e.First != next {
			t.Fatalf("listing %v: stream 7 jumps from %d to %d (a hole)", all, next, e.First)
		}
		next = e.Next
	}
	if next != 50 {
		t.Fatalf("listing %v: stream 7 ends at %d, want 50", all, next)
	}
	// The next listing sees the swap.
	meta.SetScanPaging(reg, 2, nil)
	all, err = reg.Manifests(ctx)
	if err != nil || len(all) != 4 || all[0].Node != "n0" {
		t.Fatalf("listing after the swap: %+v %v", all, err)
	}
}
