package group

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// listGroups handles ListGroups: the groups this node coordinates, those
// with members here and those whose offsets stream it serves, and the share
// groups of Config.ShareGroups. The states and types filters (v4, v5) are
// applied once, here, to every kind.
func (c *Coordinator) listGroups(ctx context.Context, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	type entry struct{ protocolType, state, typ string }
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
				found[id] = entry{state: stateEmpty.String(), typ: "classic"}
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
		_, listed := found[g.id]
		switch {
		case g.cons != nil && (listed || len(g.cons.members) > 0):
			found[g.id] = entry{"consumer", g.cons.state(), "consumer"}
		case listed || len(g.members) > 0:
			found[g.id] = entry{g.protocolType, g.state.String(), "classic"}
		}
		g.mu.Unlock()
	}
	if c.cfg.ShareGroups != nil {
		for id, st := range c.cfg.ShareGroups() {
			found[id] = entry{"share", st, "share"}
		}
	}
	filter := map[string]bool{}
	for _, s := range r.StatesFilter {
		filter[strings.ToLower(s)] = true
	}
	types := map[string]bool{}
	for _, s := range r.TypesFilter {
		types[strings.ToLower(s)] = true
	}
	for id, e := range found {
		if len(filter) > 0 && !filter[strings.ToLower(e.state)] || len(types) > 0 && !types[strings.ToLower(e.typ)] {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = id, e.protocolType, e.state, e.typ
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}
