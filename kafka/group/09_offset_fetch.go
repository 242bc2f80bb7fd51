package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchTopic is one topic of an OffsetFetch.
type fetchTopic struct {
	topic      string
	partitions []int32
}

// fetchGroup answers one group of an OffsetFetch: topics nil means every
// committed offset. A partition without a commit gets offset -1.
func (c *Coordinator) fetchGroup(ctx context.Context, id string, topics []fetchTopic, requireStable bool, memberID *string, epoch int32) ([]kmsg.OffsetFetchResponseGroupTopic, int16) {
	g, err := c.group(ctx, id)
	if err != nil {
		return nil, code(err)
	}
	// v9+ of a consumer-protocol member: it must be at its current epoch.
	g.mu.Lock()
	ec := g.consumerFetchAllowed(memberID, epoch)
	g.mu.Unlock()
	if ec != 0 {
		return nil, ec
	}
	part := func(p int32, cm committed, ok bool) kmsg.OffsetFetchResponseGroupTopicPartition {
		rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
		if ok {
			rp.Offset, rp.LeaderEpoch, rp.Metadata = cm.offset, cm.epoch, cm.metadata
		} else {
			empty := ""
			rp.Metadata = &empty
		}
		return rp
	}
	var out []kmsg.OffsetFetchResponseGroupTopic
	if topics == nil {
		// Every committed offset the principal may read; the others are
		// left out, as Kafka leaves out topics a client may not describe.
		for topic, ps := range g.offs.all() {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = topic
			for p, cm := range ps {
				if readPartition(ctx, topic, p) {
					rt.Partitions = append(rt.Partitions, part(p, cm, true))
				}
			}
			if len(rt.Partitions) > 0 {
				out = append(out, rt)
			}
		}
		return out, 0
	}
	for _, t := range topics {
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = t.topic
		for _, p := range t.partitions {
			if !readPartition(ctx, t.topic, p) {
				rp := part(p, committed{}, false)
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
				continue
			}
			cm, ok := g.offs.lookup(tp{t.topic, p})
			rp := part(p, cm, ok)
			if requireStable && g.offs.isUnstable(tp{t.topic, p}) {
				rp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out, 0
}

// offsetFetch handles OffsetFetch: one group (v0-7) or a batch (v8+).
// With RequireStable, a partition whose offsets wait for a transaction's
// marker answers UNSTABLE_OFFSET_COMMIT (the client retries).
func (c *Coordinator) offsetFetch(ctx context.Context, r *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	if r.Version >= 8 {
		for _, rg := range r.Groups {
			var topics []fetchTopic
			if rg.Topics != nil {
				topics = []fetchTopic{}
				for _, t := range rg.Topics {
					topics = append(topics, fetchTopic{t.Topic, t.Partitions})
				}
			}
			og := kmsg.NewOffsetFetchResponseGroup()
			og.Group = rg.Group
			og.Topics, og.ErrorCode = c.fetchGroup(ctx, rg.Group, topics, r.RequireStable, rg.MemberID, rg.MemberEpoch)
			resp.Groups = append(resp.Groups, og)
		}
		return resp
	}
	var topics []fetchTopic
	if r.Topics != nil || r.Version < 2 {
		topics = []fetchTopic{}
		for _, t := range r.Topics {
			topics = append(topics, fetchTopic{t.Topic, t.Partitions})
		}
	}
	gts, ec := c.fetchGroup(ctx, r.Group, topics, r.RequireStable, nil, -1)
	resp.ErrorCode = ec
	if ec != 0 && r.Version < 2 {
		// v0-1 have no group-level error: every partition carries it.
		for _, t := range r.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, ec
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, gt := range gts {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = gt.Topic
		for _, gp := range gt.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
