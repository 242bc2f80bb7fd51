package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitAllowed validates an OffsetCommit's member and generation, in
// Kafka's order. A commit with generation < 0 to a group without members
// is a "simple" commit (a consumer that assigns partitions itself).
func (g *group) commitAllowed(gen int32, memberID, inst string) int16 {
	switch {
	case g.unloaded:
		return kerr.NotCoordinator.Code
	case inst != "" && g.static[inst] != "" && g.static[inst] != memberID:
		return kerr.FencedInstanceID.Code
	case gen < 0 && g.state == stateEmpty:
		return 0
	case g.state == stateCompletingRebalance:
		return kerr.RebalanceInProgress.Code
	case g.members[memberID] == nil:
		return kerr.UnknownMemberID.Code
	case gen != g.gen:
		return kerr.IllegalGeneration.Code
	}
	g.touch(g.members[memberID]) // a commit is as good as a heartbeat
	return 0
}

// offsetCommit handles OffsetCommit: the whole request is one append to
// the group's offsets stream, acknowledged once durable.
func (c *Coordinator) offsetCommit(ctx context.Context, r *kmsg.OffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	errs := make([][]int16, len(r.Topics))
	for i, t := range r.Topics {
		errs[i] = make([]int16, len(t.Partitions))
	}
	setAll := func(code int16) {
		for i := range errs {
			for j := range errs[i] {
				if errs[i][j] == 0 {
					errs[i][j] = code
				}
			}
		}
	}
	var g *group
	var err error
	if r.Group == "" {
		setAll(kerr.InvalidGroupID.Code)
	} else if g, err = c.group(ctx, r.Group); err != nil {
		setAll(code(err))
	} else {
		g.mu.Lock()
		cerr := g.commitAllowed(r.Generation, r.MemberID, str(r.InstanceID))
		g.mu.Unlock()
		setAll(cerr)
	}
	var changes []change
	now := nowMs()
	for i, t := range r.Topics {
		for j, p := range t.Partitions {
			if errs[i][j] != 0 {
				continue
			}
			if !readPartition(ctx, t.Topic, p.Partition) {
				errs[i][j] = kerr.TopicAuthorizationFailed.Code
				continue
			}
			if p.Metadata != nil && len(*p.Metadata) > maxMetadata {
				errs[i][j] = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			cm := committed{offset: p.Offset, epoch: -1, at: now}
			if r.Version >= 6 {
				cm.epoch = p.LeaderEpoch
			}
			if p.Metadata != nil {
				m := *p.Metadata // copied: request strings may alias the read buffer
				cm.metadata = &m
			}
			changes = append(changes, change{p: tp{t.Topic, p.Partition}, c: cm})
		}
	}
	if len(changes) > 0 {
		if err := g.commit(ctx, changes); err != nil {
			c.log.Warn("kafka offset commit failed", "group", r.Group, "err", err)
			setAll(code(err))
			if code(err) == kerr.NotCoordinator.Code {
				c.drop(g)
			}
		}
	}
	for i, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errs[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetchTopic is one topic of an OffsetFetch.
type fetchTopic struct {
	topic      string
	partitions []int32
}

// fetchGroup answers one group of an OffsetFetch: topics nil means every
// committed offset. A partition without a commit gets offset -1.
func (c *Coordinator) fetchGroup(ctx context.Context, id string, topics []fetchTopic) ([]kmsg.OffsetFetchResponseGroupTopic, int16) {
	g, err := c.group(ctx, id)
	if err != nil {
		return nil, code(err)
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
			rt.Partitions = append(rt.Partitions, part(p, cm, ok))
		}
		out = append(out, rt)
	}
	return out, 0
}

// offsetFetch handles OffsetFetch: one group (v0-7) or a batch (v8+).
// There are no transactions, so every offset is stable (RequireStable
// needs no wait).
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
			og.Topics, og.ErrorCode = c.fetchGroup(ctx, rg.Group, topics)
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
	gts, ec := c.fetchGroup(ctx, r.Group, topics)
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
	case len(g.members) == 0:
	case g.protocolType == "consumer":
		subs = g.subscribed()
	default:
		resp.ErrorCode = kerr.NonEmptyGroup.Code
	}
	known := len(g.members) > 0 || g.offs.exists()
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
