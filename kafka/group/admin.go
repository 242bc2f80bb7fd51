package group

import (
	"context"
	"errors"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
)

// describeGroups handles DescribeGroups. A group this node coordinates
// but that has neither members nor committed offsets is "Dead", as Kafka
// reports unknown groups up to v5.
func (c *Coordinator) describeGroups(ctx context.Context, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = id
		dg.AuthorizedOperations = math.MinInt32 // not computed (no ACLs)
		g, err := c.group(ctx, id)
		if err != nil {
			dg.ErrorCode = code(err)
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		exists := g.offs.exists()
		g.mu.Lock()
		dg.State = g.state.String()
		if len(g.members) == 0 && !exists {
			dg.State = stateDead.String()
		}
		dg.ProtocolType = g.protocolType
		stable := g.state == stateStable
		if stable {
			dg.Protocol = g.protocol
		}
		for _, m := range g.members {
			dm := kmsg.NewDescribeGroupsResponseGroupMember()
			dm.MemberID, dm.ClientID, dm.ClientHost = m.id, m.clientID, m.host
			if m.instanceID != "" {
				inst := m.instanceID
				dm.InstanceID = &inst
			}
			if stable {
				dm.ProtocolMetadata = m.metadata(g.protocol)
				dm.MemberAssignment = m.assignment
			}
			dg.Members = append(dg.Members, dm)
		}
		g.mu.Unlock()
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

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

// deleteGroups handles DeleteGroups: a group without members loses its
// offsets stream and so every committed offset.
func (c *Coordinator) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range r.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = id
		dg.ErrorCode = c.deleteGroup(ctx, id)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func (c *Coordinator) deleteGroup(ctx context.Context, id string) int16 {
	if name, err := streamName(id); err == nil && !adminStream(ctx, name) {
		return kerr.GroupAuthorizationFailed.Code
	}
	g, err := c.group(ctx, id)
	if err != nil {
		return code(err)
	}
	g.mu.Lock()
	busy := len(g.members) > 0 || len(g.pending) > 0
	g.mu.Unlock()
	if busy {
		return kerr.NonEmptyGroup.Code
	}
	if !g.offs.exists() {
		c.drop(g)
		return kerr.GroupIDNotFound.Code
	}
	g.offs.mu.Lock()
	err = c.svc.Delete(ctx, g.stream)
	g.offs.reset(0, 0)
	g.offs.mu.Unlock()
	c.drop(g)
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return kerr.GroupIDNotFound.Code
	case err != nil:
		c.log.Warn("kafka delete group failed", "group", id, "err", err)
		return code(err)
	}
	return 0
}
