package group

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// joinGroup handles JoinGroup (see docs/kafka.md, "Consumer groups").
func (c *Coordinator) joinGroup(ctx context.Context, r *kmsg.JoinGroupRequest) (kmsg.Response, error) {
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation = -1
	fail := func(code int16) (kmsg.Response, error) {
		resp.ErrorCode = code
		return resp, nil
	}
	session := time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if r.Version == 0 || r.RebalanceTimeoutMillis <= 0 {
		rebalance = session
	}
	switch {
	case r.Group == "":
		return fail(kerr.InvalidGroupID.Code)
	case session < c.cfg.MinSessionTimeout || session > c.cfg.MaxSessionTimeout:
		return fail(kerr.InvalidSessionTimeout.Code)
	case r.ProtocolType == "" || len(r.Protocols) == 0:
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	ci := clientOf(ctx)
	inst := str(r.InstanceID)
	g, ec := c.lockedGroup(ctx, r.Group)
	if ec != 0 {
		return fail(ec)
	}
	if g.cons != nil && len(g.cons.members) > 0 {
		// A consumer-protocol group refuses classic members (Kafka does
		// too unless its group.consumer.migration.policy allows them).
		g.mu.Unlock()
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	g.dropConsumers() // an empty consumer-protocol group becomes classic
	if !g.supports(r.ProtocolType, r.Protocols) {
		g.mu.Unlock()
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	newMember := func(id string) *member {
		return &member{id: id, instanceID: inst, clientID: ci.id, host: ci.host, protocolType: r.ProtocolType,
			protocols: copyProtocols(r.Protocols), session: session, rebalance: rebalance}
	}
	// add puts m in the group, waiting for the join to complete.
	add := func(m *member) *waiter {
		if len(g.members) == 0 {
			g.protocolType = r.ProtocolType
		}
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
		return g.awaitJoin(m, r.Version) // m.join is nil again if that completed the join
	}

	var w *waiter
	switch {
	case r.MemberID == "" && inst != "" && g.static[inst] != "":
		// A static member restarted: it takes its old place.
		w = g.replaceStatic(g.members[g.static[inst]], newMember(newMemberID(ci.id)), r, resp, add)
	case r.MemberID == "" && inst == "" && r.Version >= 4:
		// KIP-394: hand out an id and let the member come back with it,
		// so a client that dies before rejoining leaves no member behind.
		id := newMemberID(ci.id)
		g.pending[id] = c.clock.AfterFunc(session, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if t := g.pending[id]; t != nil {
				delete(g.pending, id)
				g.maybeCompleteJoin()
			}
		})
		g.mu.Unlock()
		resp.MemberID = id
		return fail(kerr.MemberIDRequired.Code)
	case r.MemberID == "":
		w = add(newMember(newMemberID(ci.id)))
	case g.pending[r.MemberID] != nil:
		g.pending[r.MemberID].Stop()
		delete(g.pending, r.MemberID)
		w = add(newMember(r.MemberID))
	default:
		m := g.members[r.MemberID]
		if code := g.checkMember(r.MemberID, inst); code != 0 {
			g.mu.Unlock()
			return fail(code)
		}
		w = g.rejoin(m, r, resp)
	}
	g.mu.Unlock()
	if w == nil {
		return resp, nil // answered at once
	}
	return c.wait(ctx, w)
}

// checkMember validates a known member's id and static instance id.
func (g *group) checkMember(id, inst string) int16 {
	if inst != "" {
		if cur, ok := g.static[inst]; ok && cur != id {
			return kerr.FencedInstanceID.Code
		}
	}
	if g.members[id] == nil {
		return kerr.UnknownMemberID.Code
	}
	return 0
}

// rejoin handles JoinGroup of a known member. It returns nil when resp is
// the answer, else the waiter to wait on.
func (g *group) rejoin(m *member, r *kmsg.JoinGroupRequest, resp *kmsg.JoinGroupResponse) *waiter {
	changed := !sameProtocols(m.protocols, r.Protocols)
	if changed {
		m.protocols = copyProtocols(r.Protocols)
	}
	m.session = time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	if r.Version > 0 && r.RebalanceTimeoutMillis > 0 {
		m.rebalance = time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	} else {
		m.rebalance = m.session
	}
	if m.join != nil {
		// A retried JoinGroup (the client gave up on the first, whose
		// connection is likely gone): only the new one waits.
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Version, resp.ErrorCode, resp.Generation, resp.MemberID = m.joinVer, kerr.RebalanceInProgress.Code, -1, m.id
		m.join.finish(resp)
		m.join = nil
	}
	wait := func() *waiter { return g.awaitJoin(m, r.Version) }
	switch g.state {
	case statePreparingRebalance:
		return wait()
	case stateCompletingRebalance, stateStable:
		// A follower with unchanged metadata gets the current generation
		// back (it lost the response); the leader or a changed member
		// rebalances.
		if changed || (m.id == g.leader && g.state == stateStable) {
			return wait()
		}
		*resp = *g.joinResponse(m, r.Version)
		g.touch(m)
		return nil
	default:
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return nil
	}
}

// replaceStatic gives a restarted static member (same group.instance.id,
// new member id) the place of its previous incarnation, which is fenced.
// In a stable group nothing rebalances: the member gets the current
// generation and its old assignment from SyncGroup.
func (g *group) replaceStatic(old, nm *member, r *kmsg.JoinGroupRequest, resp *kmsg.JoinGroupResponse, add func(*member) *waiter) *waiter {
	wasLeader := g.leader == old.id
	nm.assignment = old.assignment
	g.remove(old, kerr.FencedInstanceID.Code)
	if g.state != stateStable || (wasLeader && r.Version < 9) || !nm.speaks(g.protocol) {
		// Mid-rebalance, or a leader that cannot be told to skip the
		// assignment, or new subscriptions: rebalance with it.
		return add(nm)
	}
	g.members[nm.id] = nm
	g.static[nm.instanceID] = nm.id
	if wasLeader {
		g.leader = nm.id
	}
	*resp = *g.joinResponse(nm, r.Version)
	resp.SkipAssignment = wasLeader
	g.touch(nm)
	return nil
}
