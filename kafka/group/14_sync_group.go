package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// syncGroup handles SyncGroup: the leader's assignment ends the rebalance
// and every member waiting here gets its share.
func (c *Coordinator) syncGroup(ctx context.Context, r *kmsg.SyncGroupRequest) (kmsg.Response, error) {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(code int16) (kmsg.Response, error) {
		resp.ErrorCode = code
		return resp, nil
	}
	g, ec := c.lockedGroup(ctx, r.Group)
	if ec != 0 {
		return fail(ec)
	}
	if code := g.checkMember(r.MemberID, str(r.InstanceID)); code != 0 {
		g.mu.Unlock()
		return fail(code)
	}
	m := g.members[r.MemberID]
	switch {
	case r.Generation != g.gen:
		g.mu.Unlock()
		return fail(kerr.IllegalGeneration.Code)
	case (r.ProtocolType != nil && *r.ProtocolType != g.protocolType) || (r.Protocol != nil && *r.Protocol != g.protocol):
		g.mu.Unlock()
		return fail(kerr.InconsistentGroupProtocol.Code)
	}
	g.touch(m)
	pt, p := g.protocolType, g.protocol
	switch g.state {
	case statePreparingRebalance:
		g.mu.Unlock()
		return fail(kerr.RebalanceInProgress.Code)
	case stateStable:
		resp.ProtocolType, resp.Protocol = &pt, &p
		resp.MemberAssignment = m.assignment
		g.mu.Unlock()
		return resp, nil
	case stateCompletingRebalance:
	default:
		g.mu.Unlock()
		return fail(kerr.UnknownMemberID.Code)
	}
	if m.sync != nil {
		fresp := kmsg.NewPtrSyncGroupResponse()
		fresp.ErrorCode = kerr.RebalanceInProgress.Code // superseded by this retry
		m.sync.finish(fresp)
	}
	m.sync = newWaiter()
	w := m.sync
	if m.id == g.leader {
		for _, o := range g.members {
			o.assignment = nil
		}
		for _, a := range r.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil {
				o.assignment = append([]byte(nil), a.MemberAssignment...)
			}
		}
		g.stop("sync")
		g.state = stateStable
		for _, o := range g.members {
			if o.sync != nil {
				sresp := kmsg.NewPtrSyncGroupResponse()
				sresp.ProtocolType, sresp.Protocol = &pt, &p
				sresp.MemberAssignment = o.assignment
				o.sync.finish(sresp)
				o.sync = nil
				g.touch(o)
			}
		}
	}
	g.mu.Unlock()
	out, err := c.wait(ctx, w)
	if err != nil {
		return nil, err
	}
	sresp := out.(*kmsg.SyncGroupResponse)
	sresp.Version = r.Version
	return sresp, nil
}
