package group

import (
	"context"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerGroupDescribe handles ConsumerGroupDescribe: the members of a
// consumer-protocol group with their current and target assignments. A
// classic group, or one not known, is GROUP_ID_NOT_FOUND, as in Kafka.
func (c *Coordinator) consumerGroupDescribe(ctx context.Context, r *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	for _, id := range r.Groups {
		dg := kmsg.NewConsumerGroupDescribeResponseGroup()
		dg.Group = id
		dg.AuthorizedOperations = math.MinInt32 // not computed (no ACLs)
		resp.Groups = append(resp.Groups, c.describeConsumerGroup(ctx, r.Version, dg))
	}
	return resp
}

func (c *Coordinator) describeConsumerGroup(ctx context.Context, version int16, dg kmsg.ConsumerGroupDescribeResponseGroup) kmsg.ConsumerGroupDescribeResponseGroup {
	if dg.Group == "" {
		dg.ErrorCode = kerr.InvalidGroupID.Code
		return dg
	}
	g, ec := c.lockedGroup(ctx, dg.Group)
	if ec != 0 {
		dg.ErrorCode = ec
		return dg
	}
	defer g.mu.Unlock()
	cg := g.cons
	if cg == nil {
		msg := "Group " + dg.Group + " not found."
		if len(g.members) > 0 {
			msg = "Group " + dg.Group + " is not a consumer group."
		}
		dg.ErrorCode, dg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
		return dg
	}
	// The topic names of the ids, as the group last resolved them.
	names := map[[16]byte]string{}
	for _, t := range cg.topics {
		names[t.ID] = t.Name
	}
	toAssignment := func(a assignment) kmsg.Assignment {
		out := kmsg.Assignment{TopicPartitions: []kmsg.AssignmentTopicPartition{}}
		for _, id := range sortedIDs(a) {
			out.TopicPartitions = append(out.TopicPartitions, kmsg.AssignmentTopicPartition{TopicID: id, Topic: names[id], Partitions: append([]int32(nil), a[id]...)})
		}
		return out
	}
	dg.State, dg.Epoch, dg.AssignmentEpoch, dg.AssignorName = cg.state(), cg.epoch, cg.epoch, cg.assignor
	ids := make([]string, 0, len(cg.members))
	for id := range cg.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := cg.members[id]
		dm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
		dm.MemberID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = m.id, m.epoch, m.clientID, m.host
		if m.instanceID != "" {
			inst := m.instanceID
			dm.InstanceID = &inst
		}
		if m.rack != "" {
			rack := m.rack
			dm.RackID = &rack
		}
		dm.SubscribedTopics = append([]string{}, m.names...)
		if m.regex != "" {
			re := m.regex
			dm.SubscribedTopicRegex = &re
		}
		dm.Assignment, dm.TargetAssignment = toAssignment(m.assigned), toAssignment(cg.target[m.id])
		if version >= 1 {
			dm.MemberType = 1 // a consumer-protocol member
		}
		dg.Members = append(dg.Members, dm)
	}
	return dg
}
