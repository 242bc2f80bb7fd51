package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// heartbeat handles Heartbeat: it keeps the member's session alive and
// tells it to rejoin while a rebalance is running.
func (c *Coordinator) heartbeat(ctx context.Context, r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	g, ec := c.lockedGroup(ctx, r.Group)
	if ec != 0 {
		resp.ErrorCode = ec
		return resp
	}
	defer g.mu.Unlock()
	if code := g.checkMember(r.MemberID, str(r.InstanceID)); code != 0 {
		resp.ErrorCode = code
		return resp
	}
	m := g.members[r.MemberID]
	if r.Generation != g.gen {
		resp.ErrorCode = kerr.IllegalGeneration.Code
		return resp
	}
	if m.join == nil && m.sync == nil {
		g.touch(m)
	}
	switch g.state {
	case statePreparingRebalance:
		resp.ErrorCode = kerr.RebalanceInProgress.Code
	case stateCompletingRebalance, stateStable:
	default:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	}
	return resp
}
