package meta_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
)

// TestSessionSelfFencesBeforeTheLeaseExpires holds back every keep-alive
// and checks that the session stops being Valid — so the node stops
// acknowledging appends (they get 503) — once its last renewal is older
// than 80% of the TTL: while etcd still holds the lease and before the
// client library notices anything (Lost is still false). Without the age
// check, Valid stays true until the lease is gone, i.e. until another node
// may already own the streams.
func TestSessionSelfFencesBeforeTheLeaseExpires(t *testing.T) {
	e, direct := metatest.StartEmbedded(t)
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	fr := metatest.NewFreezer(t, u.Host)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := meta.Dial(ctx, []string{"http://" + fr.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const ttl = 5 * time.Second
	sess, err := meta.NewRegistry(cli, "/selffence/").Join(ctx, meta.Member{NodeID: "a"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if !sess.Valid() {
		t.Fatal("a fresh session is not Valid")
	}
	frozeAt := time.Now()
	fr.Set(true)
	defer fr.Set(false)

	deadline := frozeAt.Add(3 * ttl)
	for sess.Valid() {
		if time.Now().After(deadline) {
			t.Fatalf("session still Valid %v after keep-alives stopped (TTL %v)", time.Since(frozeAt), ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(frozeAt)
	lost := sess.Lost()
	ttlLeft, err := direct.TimeToLive(ctx, sess.LeaseID())
	if err != nil {
		t.Fatal(err)
	}
	if lost {
		t.Fatalf("session became invalid only when the lease was already lost (%v after the freeze): no self-fencing before expiry", took)
	}
	if ttlLeft.TTL < 0 {
		t.Fatalf("etcd had already expired the lease (TTL %d) when the session turned invalid (%v after the freeze)", ttlLeft.TTL, took)
	}
	// The last renewal happened at most TTL/3 (the keep-alive interval)
	// before the freeze, so invalidity comes within 0.8×TTL of the freeze.
	if limit := ttl*8/10 + time.Second; took > limit {
		t.Fatalf("session turned invalid %v after the freeze, want within 0.8×TTL (%v)", took, limit)
	}
	t.Logf("invalid %v after keep-alives stopped; etcd still gives the lease %ds", took, ttlLeft.TTL)
}
