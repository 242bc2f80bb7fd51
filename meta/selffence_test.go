package meta_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
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
	const ttl = 5 * time.Second
	ctx, sess, fr, direct := sessionThroughFreezer(t, ttl)
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

// TestStaleRenewalAnswerDoesNotReviveAnExpiredLease: etcd renews the lease
// but its answers are held back, then nothing gets through until etcd has
// expired the lease, then the held answers arrive (as after a SIGSTOP, or
// a stalled link). The session must not turn Valid on those answers: the
// lease is gone, and another node may own the streams already. A session
// that timed renewals from when answers arrive would be Valid again for
// most of a TTL and acknowledge writes it cannot keep.
func TestStaleRenewalAnswerDoesNotReviveAnExpiredLease(t *testing.T) {
	const ttl = 5 * time.Second
	ctx, sess, fr, direct := sessionThroughFreezer(t, ttl)
	remaining := func() int64 { return leaseTTL(t, ctx, direct, sess) }
	// 1. Answers held: wait until etcd has renewed the lease without the
	// client hearing it, i.e. etcd gives it a life past the latest expiry
	// it could have had without a renewal (TimeToLive truncates seconds).
	fr.Hold(false, true)
	deadline := time.Now().Add(3 * ttl)
	unrenewedExpiry := time.Now().Add(time.Duration(remaining()+1) * time.Second)
	for {
		time.Sleep(20 * time.Millisecond)
		asked := time.Now()
		if !asked.Add(time.Duration(remaining()) * time.Second).Before(unrenewedExpiry) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd never renewed the lease while its answers were held back")
		}
	}
	// 2. Nothing gets through until etcd has expired the lease.
	fr.Set(true)
	for remaining() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("etcd did not expire the lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// 3. The held answers arrive; requests stay held, so etcd cannot yet
	// tell the client the lease is gone.
	fr.Hold(true, false)
	watchUntil := time.Now().Add(ttl / 2)
	for time.Now().Before(watchUntil) {
		if sess.Valid() {
			t.Fatal("a stale renewal answer made the session Valid after etcd expired its lease")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// 4. Everything through: the session learns the lease is gone.
	fr.Set(false)
	for !sess.Lost() {
		if time.Now().After(deadline.Add(2 * ttl)) {
			t.Fatal("the session never noticed its lease was gone")
		}
		if sess.Valid() {
			t.Fatal("session Valid after its lease expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sessionThroughFreezer joins a member with a lease of ttl through a
// Freezer in front of an embedded etcd; direct is a client that bypasses
// the Freezer, to ask etcd itself about the lease.
func sessionThroughFreezer(t *testing.T, ttl time.Duration) (context.Context, *meta.Session, *metatest.Freezer, *clientv3.Client) {
	t.Helper()
	e, direct := metatest.StartEmbedded(t)
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	fr := metatest.NewFreezer(t, u.Host)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cli, err := meta.Dial(ctx, []string{"http://" + fr.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	sess, err := meta.NewRegistry(cli, "/"+t.Name()+"/").Join(ctx, metadata.Member{NodeID: "a"}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, sess, fr, direct
}

// TestResumedSessionRenewsBeforeItsLeaseRunsOut: a session is resumed when
// its lease outlived the keep-alive loop (etcd renewed it, or extended it
// on restart, but the client did not hear in time). The lease may then
// have much less than a TTL left, and the resumed session must renew it
// before it runs out rather than a full keep-alive interval (TTL/3) after
// resuming: otherwise etcd expires a lease the node had just resumed, the
// member key goes, and other nodes take its streams over.
func TestResumedSessionRenewsBeforeItsLeaseRunsOut(t *testing.T) {
	testResumeWithLeft(t, 1)
}

// TestResumeWithUnderASecondLeft: etcd rounds a lease's time left down to
// whole seconds, so a lease alive for less than a second reads as 0 left.
// Resume must renew it, not take it for lost: a node that joins afresh
// waits for that very lease to expire, and other nodes take its streams
// over after an etcd outage no node died in.
func TestResumeWithUnderASecondLeft(t *testing.T) {
	testResumeWithLeft(t, 0)
}

// testResumeWithLeft resumes a session whose keep-alive loop gave up
// while etcd kept its lease, once etcd gives the lease at most left
// seconds, and checks the resumed session keeps the lease.
func testResumeWithLeft(t *testing.T, left int64) {
	const ttl = 6 * time.Second
	ctx, sess, fr, direct := sessionThroughFreezer(t, ttl)
	ttlLeft := func() int64 { return leaseTTL(t, ctx, direct, sess) }
	// etcd renews the lease but the client hears nothing, so its
	// keep-alive loop gives up (Lost) with the lease alive.
	fr.Hold(false, true)
	deadline := time.Now().Add(4 * ttl)
	for !sess.Lost() {
		if time.Now().After(deadline) {
			t.Fatal("the session never gave up while its renewals went unanswered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fr.Set(true)
	// Resume once the lease has at most left seconds (1: between 1 and
	// 2 seconds, less than the keep-alive interval of TTL/3 = 2s; 0:
	// under a second).
	for ttlLeft() > left {
		if time.Now().After(deadline) {
			t.Fatal("the lease never ran down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	reg := meta.NewRegistry(direct, "/"+t.Name()+"/")
	resumed, err := reg.Resume(ctx, sess)
	if err != nil {
		t.Fatalf("Resume with %ds left: %v", ttlLeft(), err)
	}
	defer func() { _ = resumed.Close(context.WithoutCancel(ctx)) }()
	// Over more than a TTL, the resumed session keeps its lease and is
	// Valid again within a keep-alive interval.
	resumedAt := time.Now()
	validAt := time.Time{}
	for time.Since(resumedAt) < ttl+ttl/2 {
		if resumed.Lost() || ttlLeft() <= 0 {
			t.Fatalf("the resumed session lost its lease %v after resuming", time.Since(resumedAt))
		}
		if validAt.IsZero() && resumed.Valid() {
			validAt = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if validAt.IsZero() || validAt.Sub(resumedAt) > ttl/3 {
		t.Fatalf("the resumed session was not Valid within %v (valid at %v)", ttl/3, validAt.Sub(resumedAt))
	}
}

// leaseTTL is the seconds etcd itself gives sess's lease (-1: expired).
func leaseTTL(t *testing.T, ctx context.Context, direct *clientv3.Client, sess *meta.Session) int64 {
	t.Helper()
	r, err := direct.TimeToLive(ctx, sess.LeaseID())
	if err != nil {
		t.Fatal(err)
	}
	return r.TTL
}
