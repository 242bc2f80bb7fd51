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
		var cerr int16
		if g.cons != nil {
			cerr = g.consumerCommitAllowed(r.Generation, r.MemberID, r.Version, false)
		} else {
			cerr = g.commitAllowed(r.Generation, r.MemberID, str(r.InstanceID))
		}
		g.mu.Unlock()
		setAll(cerr)
	}
	var changes []change
	now := c.clock.Now().UnixMilli()
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
