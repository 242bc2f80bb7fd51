package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
)

// handleDeleteShareGroupOffsets removes a group's share state for whole
// topics (the group must have no members): its next member starts them
// per share.auto.offset.reset.
func handleDeleteShareGroupOffsets(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteShareGroupOffsetsResponse)
	offs, c := s.shareOffsets(ctx, cc, req.GroupID)
	if c != 0 {
		resp.ErrorCode = c
		return resp, nil
	}
	if c := s.shareGroupIdle(req.GroupID); c != 0 {
		resp.ErrorCode = c
		return resp, nil
	}
	for _, rt := range req.Topics {
		ot := kmsg.NewDeleteShareGroupOffsetsResponseTopic()
		ot.Topic = rt.Topic
		t, err := s.resolveTopic(ctx, rt.Topic)
		if err != nil {
			ot.ErrorCode, ot.ErrorMessage = kerr.UnknownTopicOrPartition.Code, errMessage(err)
			resp.Topics = append(resp.Topics, ot)
			continue
		}
		ot.TopicID = t.id
		var changes []group.ShareOffset
		for p := range offs[rt.Topic] {
			changes = append(changes, group.ShareOffset{Topic: rt.Topic, Partition: p, Delete: true})
		}
		if len(changes) > 0 {
			ot.ErrorCode = group.Code(s.groups.CommitShareOffsets(ctx, req.GroupID, changes))
		}
		s.forgetSharePartitions(req.GroupID, t.id, nil)
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}
