package kafka

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupView is one consumer group as GET /_sys/groups (and the web
// console) shows it: what Kafka's DescribeGroups says, with the lag of
// every committed partition.
type GroupView struct {
	Group        string           `json:"group"`
	State        string           `json:"state"`
	ProtocolType string           `json:"protocolType,omitempty"`
	Protocol     string           `json:"protocol,omitempty"`
	Members      []GroupMember    `json:"members"`
	Partitions   []GroupPartition `json:"partitions"`
}

// GroupMember is one member and, for the "consumer" protocol, the
// partitions it was assigned.
type GroupMember struct {
	MemberID   string             `json:"memberId"`
	InstanceID string             `json:"instanceId,omitempty"`
	ClientID   string             `json:"clientId"`
	ClientHost string             `json:"clientHost"`
	Assigned   map[string][]int32 `json:"assigned,omitempty"`
}

// GroupPartition is one committed offset; End and Lag are -1 when this
// node cannot read the partition's end now (another node owns it).
type GroupPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	// Stream names the partition's stream when End is -1, so that a
	// cluster-wide view can ask the node that owns it.
	Stream string `json:"stream,omitempty"`
}

// Groups describes the groups this node coordinates, through the same
// ListGroups and DescribeGroups a Kafka admin client sends, so the answer
// is exactly what such a client would see.
func (s *Server) Groups(ctx context.Context) ([]GroupView, error) {
	lresp, err := s.groups.Handle(ctx, kmsg.NewPtrListGroupsRequest())
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	list := lresp.(*kmsg.ListGroupsResponse)
	if list.ErrorCode != 0 {
		return nil, fmt.Errorf("list groups: Kafka error %d", list.ErrorCode)
	}
	out := []GroupView{}
	if len(list.Groups) == 0 {
		return out, nil
	}
	dreq := kmsg.NewPtrDescribeGroupsRequest()
	for _, g := range list.Groups {
		dreq.Groups = append(dreq.Groups, g.Group)
	}
	dresp, err := s.groups.Handle(ctx, dreq)
	if err != nil {
		return nil, fmt.Errorf("describe groups: %w", err)
	}
	byGroup := map[string]*GroupView{}
	for _, dg := range dresp.(*kmsg.DescribeGroupsResponse).Groups {
		v := GroupView{Group: dg.Group, State: dg.State, ProtocolType: dg.ProtocolType, Protocol: dg.Protocol,
			Members: []GroupMember{}, Partitions: []GroupPartition{}}
		if dg.ErrorCode != 0 {
			v.State = fmt.Sprintf("error %d", dg.ErrorCode)
		}
		for _, m := range dg.Members {
			gm := GroupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost}
			if m.InstanceID != nil {
				gm.InstanceID = *m.InstanceID
			}
			if dg.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
				var a kmsg.ConsumerMemberAssignment
				if a.ReadFrom(m.MemberAssignment) == nil {
					gm.Assigned = map[string][]int32{}
					for _, t := range a.Topics {
						gm.Assigned[t.Topic] = append(gm.Assigned[t.Topic], t.Partitions...)
					}
				}
			}
			v.Members = append(v.Members, gm)
		}
		out = append(out, v)
	}
	for i := range out {
		byGroup[out[i].Group] = &out[i]
	}
	for _, c := range s.groups.Committed() {
		v := byGroup[c.Group]
		if v == nil {
			continue
		}
		p := GroupPartition{Topic: c.Topic, Partition: c.Partition, Committed: c.Offset, End: -1, Lag: -1}
		if name, err := s.partitionName(ctx, c.Topic, c.Partition, false); err == nil {
			if info, err := s.svc.Head(ctx, name); err == nil {
				p.End, p.Lag = info.NextOffset, max(0, info.NextOffset-c.Offset)
			} else {
				p.Stream = name
			}
		}
		v.Partitions = append(v.Partitions, p)
	}
	for i := range out {
		ps := out[i].Partitions
		sort.Slice(ps, func(a, b int) bool {
			if ps[a].Topic != ps[b].Topic {
				return ps[a].Topic < ps[b].Topic
			}
			return ps[a].Partition < ps[b].Partition
		})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Group < out[b].Group })
	return out, nil
}
