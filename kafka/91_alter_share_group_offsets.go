package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
)

// handleAlterShareGroupOffsets sets share-partition start offsets of a
// group without members, stored as one append; records before a new start
// offset are not delivered, records from it are (again).
func handleAlterShareGroupOffsets(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.AlterShareGroupOffsetsResponse)
	if _, c := s.shareOffsets(ctx, cc, req.GroupID); c != 0 {
		resp.ErrorCode = c
		return resp, nil
	}
	if c := s.shareGroupIdle(req.GroupID); c != 0 {
		resp.ErrorCode = c
		return resp, nil
	}
	var changes []group.ShareOffset
	type at struct{ t, p int }
	var where []at
	for _, rt := range req.Topics {
		ot := kmsg.NewAlterShareGroupOffsetsResponseTopic()
		ot.Topic = rt.Topic
		t, err := s.resolveTopic(ctx, rt.Topic)
		if err == nil {
			ot.TopicID = t.id
		}
		for _, rp := range rt.Partitions {
			op := kmsg.NewAlterShareGroupOffsetsResponseTopicPartition()
			op.Partition = rp.Partition
			switch {
			case err != nil:
				op.ErrorCode, op.ErrorMessage = errCode(err), errMessage(err)
			case rp.Partition < 0 || int(rp.Partition) >= len(t.partitions):
				op.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.StartOffset < 0:
				op.ErrorCode = kerr.InvalidRequest.Code
			default:
				changes = append(changes, group.ShareOffset{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.StartOffset})
				where = append(where, at{len(resp.Topics), len(ot.Partitions)})
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	if len(changes) > 0 {
		err := s.groups.CommitShareOffsets(ctx, req.GroupID, changes)
		for _, w := range where {
			resp.Topics[w.t].Partitions[w.p].ErrorCode = group.Code(err)
		}
		s.share.Touch(req.GroupID)
		for _, ot := range resp.Topics {
			only := map[int32]bool{}
			for _, op := range ot.Partitions {
				only[op.Partition] = true
			}
			s.forgetSharePartitions(req.GroupID, ot.TopicID, only)
		}
	}
	return resp, nil
}
