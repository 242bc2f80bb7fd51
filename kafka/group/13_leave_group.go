package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// leaveGroup handles LeaveGroup: one member (v0-2) or a batch (v3+, where
// static members may leave by instance id alone).
func (c *Coordinator) leaveGroup(ctx context.Context, r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	leaving := r.Members
	if r.Version < 3 {
		leaving = []kmsg.LeaveGroupRequestMember{{MemberID: r.MemberID}}
	}
	g, ec := c.lockedGroup(ctx, r.Group)
	if ec != 0 {
		resp.ErrorCode = ec
		return resp
	}
	defer g.mu.Unlock()
	removed, pendingLeft := false, false
	for _, lm := range leaving {
		out := kmsg.NewLeaveGroupResponseMember()
		out.MemberID, out.InstanceID = lm.MemberID, lm.InstanceID
		id, inst := lm.MemberID, str(lm.InstanceID)
		if id == "" && inst != "" {
			id = g.static[inst]
		}
		switch {
		case g.pending[id] != nil:
			g.pending[id].Stop()
			delete(g.pending, id)
			pendingLeft = true
		case id == "":
			out.ErrorCode = kerr.UnknownMemberID.Code
		default:
			if code := g.checkMember(id, inst); code != 0 {
				out.ErrorCode = code
				break
			}
			g.remove(g.members[id], kerr.UnknownMemberID.Code)
			removed = true
		}
		resp.Members = append(resp.Members, out)
	}
	if removed {
		g.afterRemoval()
	} else if pendingLeft {
		g.maybeCompleteJoin()
	}
	if r.Version < 3 {
		resp.ErrorCode = resp.Members[0].ErrorCode
		resp.Members = nil
	}
	return resp
}
