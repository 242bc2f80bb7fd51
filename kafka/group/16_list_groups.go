package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// listGroups handles ListGroups: the groups this node coordinates, those
// with members here and those whose offsets stream it serves.
func (c *Coordinator) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	type entry struct{ protocolType, state string }
	found := map[string]entry{}
	after := ""
	for {
		infos, more, err := c.svc.List(ctx, groupsRoot, after, 1000)
		if err != nil {
			resp.ErrorCode = code(err)
			return resp
		}
		for _, in := range infos {
			after = in.Name
			id, ok := groupID(in.Name)
			if !ok {
				continue
			}
			if _, self, err := c.loc.Locate(ctx, in.Name); err == nil && self {
				found[id] = entry{state: stateEmpty.String()}
			}
		}
		if !more || len(infos) == 0 {
			break
		}
	}
	c.mu.Lock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		if _, listed := found[g.id]; listed || len(g.members) > 0 {
			found[g.id] = entry{g.protocolType, g.state.String()}
		}
		g.mu.Unlock()
	}
	filter := map[string]bool{}
	for _, s := range r.StatesFilter {
		filter[s] = true
	}
	for id, e := range found {
		if len(filter) > 0 && !filter[e.state] {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, e.protocolType, e.state, "classic"
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}
