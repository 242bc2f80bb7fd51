package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnOffsetCommit handles TxnOffsetCommit: the offsets a transactional
// producer commits as part of its transaction are appended to the group's
// offsets stream as one transactional batch of that producer. They take
// effect when the transaction coordinator's commit marker lands in the
// stream (an abort marker drops them); until then OffsetFetch with
// require_stable answers UNSTABLE_OFFSET_COMMIT for those partitions.
func (c *Coordinator) txnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	var errCode int16
	var g *group
	var err error
	switch {
	case r.Group == "":
		errCode = kerr.InvalidGroupID.Code
	case r.TransactionalID == "" || r.ProducerID < 0 || r.ProducerEpoch < 0:
		errCode = kerr.InvalidRequest.Code
	default:
		if g, err = c.group(ctx, r.Group); err != nil {
			errCode = code(err)
		} else if r.Version >= 3 && (r.Generation >= 0 || r.MemberID != "") {
			// KIP-447: a producer that names its consumer's
			// generation is checked like an OffsetCommit.
			g.mu.Lock()
			if g.cons != nil {
				errCode = g.consumerCommitAllowed(r.Generation, r.MemberID, r.Version, true)
			} else {
				errCode = g.commitAllowed(r.Generation, r.MemberID, str(r.InstanceID))
			}
			g.mu.Unlock()
		}
	}
	errs := make([][]int16, len(r.Topics))
	var changes []change
	now := c.clock.Now().UnixMilli()
	for i, t := range r.Topics {
		errs[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			switch {
			case errCode != 0:
				errs[i][j] = errCode
			case !readPartition(ctx, t.Topic, p.Partition):
				errs[i][j] = kerr.TopicAuthorizationFailed.Code
			case p.Metadata != nil && len(*p.Metadata) > maxMetadata:
				errs[i][j] = kerr.OffsetMetadataTooLarge.Code
			default:
				cm := committed{offset: p.Offset, epoch: -1, at: now}
				if r.Version >= 2 {
					cm.epoch = p.LeaderEpoch
				}
				if p.Metadata != nil {
					m := *p.Metadata
					cm.metadata = &m
				}
				changes = append(changes, change{p: tp{t.Topic, p.Partition}, c: cm})
			}
		}
	}
	if len(changes) > 0 {
		if err := g.txnCommit(ctx, r.ProducerID, r.ProducerEpoch, changes); err != nil {
			c.log.Warn("kafka transactional offset commit failed", "group", r.Group, "err", err)
			ec := code(err)
			if ec == kerr.NotCoordinator.Code {
				c.drop(g)
			}
			for i := range errs {
				for j := range errs[i] {
					if errs[i][j] == 0 {
						errs[i][j] = ec
					}
				}
			}
		}
	}
	for i, t := range r.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, errs[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
