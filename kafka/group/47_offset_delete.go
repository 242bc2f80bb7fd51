package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// subscribed returns the topics the members of a running consumer group
// subscribe to (from their consumer-protocol metadata).
func (g *group) subscribed() map[string]bool {
	out := map[string]bool{}
	for _, m := range g.members {
		var md kmsg.ConsumerMemberMetadata
		if err := md.ReadFrom(m.metadata(g.protocol)); err != nil {
			continue
		}
		for _, t := range md.Topics {
			out[t] = true
		}
	}
	return out
}

// offsetDelete handles OffsetDelete: it removes committed offsets of
// topics that no member of the group consumes.
func (c *Coordinator) offsetDelete(ctx context.Context, r *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g, err := c.group(ctx, r.Group)
	if err != nil {
		resp.ErrorCode = code(err)
		return resp
	}
	g.mu.Lock()
	var subs map[string]bool
	switch {
	case g.cons != nil && len(g.cons.members) > 0:
		subs = g.cons.subscribedNames()
	case len(g.members) == 0:
	case g.protocolType == "consumer":
		subs = g.subscribed()
	default:
		resp.ErrorCode = kerr.NonEmptyGroup.Code
	}
	known := len(g.members) > 0 || g.cons != nil && len(g.cons.members) > 0 || g.offs.exists()
	g.mu.Unlock()
	if !known {
		resp.ErrorCode = kerr.GroupIDNotFound.Code
	}
	if resp.ErrorCode != 0 {
		return resp
	}
	var changes []change
	denied := map[tp]bool{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if !readPartition(ctx, t.Topic, p.Partition) {
				denied[tp{t.Topic, p.Partition}] = true
				continue
			}
			if _, ok := g.offs.lookup(tp{t.Topic, p.Partition}); ok && !subs[t.Topic] {
				changes = append(changes, change{p: tp{t.Topic, p.Partition}, del: true})
			}
		}
	}
	ec := int16(0)
	if err := g.commit(ctx, changes); err != nil {
		ec = code(err)
	}
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, ec
			switch {
			case denied[tp{t.Topic, p.Partition}]:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case subs[t.Topic]:
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
