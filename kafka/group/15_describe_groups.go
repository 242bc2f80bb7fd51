package group

import (
	"context"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
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
		if g.cons != nil {
			g.describeConsumerAsClassic(&dg)
			g.mu.Unlock()
			resp.Groups = append(resp.Groups, dg)
			continue
		}
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

// describeConsumerAsClassic is DescribeGroups of a consumer-protocol
// group, as Kafka answers it: its state, protocol type "consumer", the
// assignor as protocol, and its members with their subscription and
// current assignment encoded as the classic consumer protocol's metadata
// and assignment (so admin tools show them).
func (g *group) describeConsumerAsClassic(dg *kmsg.DescribeGroupsResponseGroup) {
	cg := g.cons
	dg.State, dg.ProtocolType, dg.Protocol = cg.state(), "consumer", cg.assignor
	names := map[[16]byte]string{}
	for _, t := range cg.topics {
		names[t.ID] = t.Name
	}
	for _, m := range cg.members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.ClientID, dm.ClientHost = m.id, m.clientID, m.host
		if m.instanceID != "" {
			inst := m.instanceID
			dm.InstanceID = &inst
		}
		md := kmsg.NewConsumerMemberMetadata()
		for n := range cg.topics {
			if m.subscribes(n) {
				md.Topics = append(md.Topics, n)
			}
		}
		sort.Strings(md.Topics)
		dm.ProtocolMetadata = md.AppendTo(nil)
		a := kmsg.NewConsumerMemberAssignment()
		for _, id := range sortedIDs(m.assigned) {
			a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: names[id], Partitions: append([]int32(nil), m.assigned[id]...)})
		}
		dm.MemberAssignment = a.AppendTo(nil)
		dg.Members = append(dg.Members, dm)
	}
}
