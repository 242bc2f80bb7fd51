package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// Session is a node's live membership: a lease kept alive in the background
// and the member key attached to it. Commits that must be fenced against a
// node declared dead (L0 manifests) are conditioned on the member key's
// creation revision, so a node that lost its lease and rejoined cannot commit
// with the old session, and nobody can commit with an expired one.
type Session struct {
	cli       *clientv3.Client
	lease     clientv3.LeaseID
	key       string
	createRev int64
	done      chan struct{}
	cancel    context.CancelFunc
	closeOnce sync.Once
	// When the last renewal was sent, and the TTL (s) it renewed: a node
	// can tell its lease may have expired before etcd tells it, e.g.
	// after a long pause, and stop acknowledging writes at once. The time
	// is kept on both clocks, and its age is the larger of the two: the
	// wall clock (unix ns) may be stepped back by NTP or a VM restore, the
	// monotonic one (ns since base) may stand still while the host sleeps;
	// either alone could make an expired lease look alive.
	base        time.Time
	renewedAt   atomic.Int64
	renewedMono atomic.Int64
	ttl         atomic.Int64
	// keepAliveOnce replaces cli.KeepAliveOnce in tests of renewOnce.
	keepAliveOnce func(context.Context, clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

func (r *Registry) memberKey(id string) string { return r.prefix + "members/" + id }

// Join registers m under a fresh lease of ttl and keeps it alive. It fails
// with ErrConflict if another live session holds the same node id (two
// processes configured with one --node-id must not both run).
func (r *Registry) Join(ctx context.Context, m metadata.Member, ttl time.Duration) (*Session, error) {
	if m.NodeID == "" {
		return nil, fmt.Errorf("%w: empty node id", metadata.ErrInvalid)
	}
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	asked := time.Now() // the lease runs from no earlier than this
	grant, err := r.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("meta: grant lease: %w", err)
	}
	val, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	key := r.memberKey(m.NodeID)
	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID))).
		Commit()
	if err != nil {
		_, _ = r.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, fmt.Errorf("meta: register member %s: %w", m.NodeID, err)
	}
	if !resp.Succeeded {
		_, _ = r.cli.Revoke(context.WithoutCancel(ctx), grant.ID)
		return nil, fmt.Errorf("%w: node id %q is already registered by a live node", metadata.ErrConflict, m.NodeID)
	}
	return r.keepAlive(grant.ID, key, resp.Header.Revision, grant.TTL, asked), nil
}

// keepAlive starts renewing lease in the background and returns the session
// built on it: member key with creation revision createRev, TTL in seconds,
// last known to be renewed no earlier than renewed.
func (r *Registry) keepAlive(lease clientv3.LeaseID, key string, createRev, ttl int64, renewed time.Time) *Session {
	kctx, cancel := context.WithCancel(context.Background())
	s := &Session{cli: r.cli, lease: lease, key: key, createRev: createRev, done: make(chan struct{}), cancel: cancel}
	s.base = time.Now()
	s.setRenewed(renewed)
	s.ttl.Store(ttl)
	// The first renewal is due a third of the TTL after renewed, not after
	// now: a resumed lease may have little of its TTL left.
	go s.renew(kctx, max(time.Until(renewed.Add(time.Duration(ttl)*time.Second/3)), 0))
	return s
}

// renew renews the lease after first, then every third of its TTL, until
// the lease is gone, etcd stays unreachable past the TTL, or the session
// is closed.
//
// A renewal counts from when it was sent, not from when its answer came:
// etcd extended the lease no earlier than the send, so the lease lives at
// least TTL past it. Timing from the answer would be wrong after a pause:
// an answer that sat in the socket while the process was stopped would
// make a lease etcd has already expired (and whose streams another node
// may have taken over) look freshly renewed.
func (s *Session) renew(ctx context.Context, first time.Duration) {
	defer s.closeOnce.Do(func() { close(s.done) })
	retry := false
	for {
		ttl := time.Duration(s.ttl.Load()) * time.Second
		wait := max(ttl/3, 100*time.Millisecond)
		if retry {
			wait = min(wait, 200*time.Millisecond)
		}
		if first >= 0 {
			wait, first = min(wait, first), -1
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		sent, resp, err := s.renewOnce(ctx, max(ttl/3, 100*time.Millisecond))
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && resp.TTL > 0:
			s.setRenewed(sent)
			s.ttl.Store(resp.TTL)
			retry = false
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return // expired or revoked
		case s.renewalAge() >= ttl:
			return // unreachable past the TTL: etcd may have let it expire
		default:
			retry = true
		}
	}
}

// renewOnce sends one renewal and, when it has no answer after half of
// timeout, a second one beside it, each with timeout to answer. The first
// success wins, counted from its own send time; with none, the last error
// is returned. The second request keeps a slow answer (a stalled stream,
// a busy etcd member) from eating the margin a short --lease-ttl leaves:
// at 2 s a renewal is due every 667 ms and Valid ends at 1.6 s, so one
// renewal that times out and its retry 200 ms later would leave almost
// none.
func (s *Session) renewOnce(ctx context.Context, timeout time.Duration) (time.Time, *clientv3.LeaseKeepAliveResponse, error) {
	type answer struct {
		sent time.Time
		resp *clientv3.LeaseKeepAliveResponse
		err  error
	}
	keepAlive := s.keepAliveOnce
	if keepAlive == nil {
		keepAlive = s.cli.KeepAliveOnce
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel() // the request still out, if any, is not needed
	answers := make(chan answer, 2)
	send := func() {
		sent := time.Now()
		tctx, cancel := context.WithTimeout(rctx, timeout)
		defer cancel()
		resp, err := keepAlive(tctx, s.lease)
		answers <- answer{sent, resp, err}
	}
	go send()
	hedge := time.NewTimer(timeout / 2)
	defer hedge.Stop()
	out, hedged := 1, false
	var last answer
	for out > 0 {
		select {
		case a := <-answers:
			out--
			if a.err == nil || errors.Is(a.err, rpctypes.ErrLeaseNotFound) {
				return a.sent, a.resp, a.err
			}
			last = a
		case <-hedge.C:
			if !hedged {
				hedged = true
				out++
				go send()
			}
		}
	}
	return last.sent, last.resp, last.err
}

// setRenewed records a renewal sent at t.
func (s *Session) setRenewed(t time.Time) {
	s.renewedAt.Store(t.UnixNano())
	s.renewedMono.Store(int64(t.Sub(s.base)))
}

// renewalAge is how long ago the last renewal was sent, by whichever clock
// says longer.
func (s *Session) renewalAge() time.Duration {
	wall := time.Since(time.Unix(0, s.renewedAt.Load()))
	mono := time.Since(s.base) - time.Duration(s.renewedMono.Load())
	return max(wall, mono)
}

// Valid reports whether the lease is certainly still alive: the last renewal
// is younger than its TTL minus a safety margin for clock-rate drift. A node
// that is not Valid must not acknowledge writes.
func (s *Session) Valid() bool {
	if s.Lost() {
		return false
	}
	age := s.renewalAge()
	ttl := time.Duration(s.ttl.Load()) * time.Second
	return age < ttl-ttl/5
}

// Done is closed when the session is over (lease lost or Close called).
func (s *Session) Done() <-chan struct{} { return s.done }

// Lost reports whether the session is over.
func (s *Session) Lost() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// fence is the comparison that proves this session is still the live one.
func (s *Session) fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.key), "=", s.createRev)
}

// Close revokes the lease so the node's membership ends at once rather than
// after the TTL.
func (s *Session) Close(ctx context.Context) error {
	s.cancel()
	_, err := s.cli.Revoke(ctx, s.lease)
	s.closeOnce.Do(func() { close(s.done) })
	if err != nil {
		return fmt.Errorf("meta: revoke lease: %w", err)
	}
	return nil
}

// Members lists the live members.
func (r *Registry) Members(ctx context.Context) ([]metadata.Member, error) {
	resp, err := r.cli.Get(ctx, r.prefix+"members/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("meta: list members: %w", err)
	}
	out := make([]metadata.Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := metadata.DecodeMember(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%w: member %s: %v", metadata.ErrCorrupt, kv.Key, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// LeaseID is the session's etcd lease (tests use it to simulate expiry).
func (s *Session) LeaseID() clientv3.LeaseID { return s.lease }

// Resume continues a session whose keep-alive stream broke (etcd was
// unreachable for a while) but whose lease etcd still holds: etcd extends
// leases when it restarts or elects a new leader, so after an etcd outage
// the node usually never stopped being a member. Because the member key was
// never deleted, no other node can have taken over this node's streams, and
// the node may carry on with its state. If the lease or the key is gone,
// Resume returns ErrLeaseLost and the node must Join afresh and re-check
// which streams are still its own.
func (r *Registry) Resume(ctx context.Context, old *Session) (*Session, error) {
	asked := time.Now()
	ttl, err := r.cli.TimeToLive(ctx, old.lease)
	if err != nil {
		return nil, fmt.Errorf("meta: lease time-to-live: %w", err)
	}
	if ttl.TTL < 0 {
		return nil, metadata.ErrLeaseLost
	}
	granted := ttl.GrantedTTL
	// The lease had ttl.TTL seconds left when asked (or later): count it
	// as renewed that much less than a full TTL before then.
	renewed := asked.Add(time.Duration(ttl.TTL-ttl.GrantedTTL) * time.Second)
	if ttl.TTL == 0 {
		// etcd rounds the time left down to whole seconds: 0 is a lease
		// still alive for less than a second, not a lost one. Taking it
		// for lost made the node join afresh, wait for this very lease to
		// expire, and let other nodes take its streams over after a
		// short etcd outage. Renew it now instead.
		sent := time.Now()
		ka, err := r.cli.KeepAliveOnce(ctx, old.lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && ka.TTL <= 0) {
			return nil, metadata.ErrLeaseLost
		}
		if err != nil {
			return nil, fmt.Errorf("meta: renew lease: %w", err)
		}
		granted, renewed = ka.TTL, sent
	}
	g, err := r.cli.Get(ctx, old.key)
	if err != nil {
		return nil, fmt.Errorf("meta: read member key: %w", err)
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != old.createRev || clientv3.LeaseID(g.Kvs[0].Lease) != old.lease {
		return nil, metadata.ErrLeaseLost
	}
	return r.keepAlive(old.lease, old.key, old.createRev, granted, renewed), nil
}

// sessionOf is the Session behind a lease that a caller holds as a
// metadata.Lease (the stream service, which does not link etcd's client):
// only a Session of this package can fence a write.
func sessionOf(l metadata.Lease) (*Session, error) {
	s, ok := l.(*Session)
	switch {
	case l == nil || (ok && s == nil):
		return nil, fmt.Errorf("%w: no session", metadata.ErrLeaseLost)
	case !ok:
		return nil, fmt.Errorf("%w: lease %T is not a meta.Session", metadata.ErrInvalid, l)
	}
	return s, nil
}

// LeaseOf is s as a metadata.Lease for the stream service: a nil
// interface when s is nil, so the service's "no session" checks see it.
func LeaseOf(s *Session) metadata.Lease {
	if s == nil {
		return nil
	}
	return s
}
