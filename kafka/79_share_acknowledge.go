package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/share"
)

// handleShareAcknowledge applies acknowledgements outside a fetch (and,
// with session epoch -1, closes the share session, releasing what the
// member still holds).
func handleShareAcknowledge(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	gid, member := deref(req.GroupID), deref(req.MemberID)
	if gid == "" || member == "" {
		msg := "group id and member id are required"
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, &msg
		return resp, nil
	}
	resp.AcquisitionLockTimeoutMillis = int32(s.share.Limits(gid).Lock.Milliseconds())
	final, kerrCode := s.share.AckSession(gid, member, req.ShareSessionEpoch)
	if kerrCode != nil {
		resp.ErrorCode = kerrCode.Code
		return resp, nil
	}
	for _, rt := range req.Topics {
		ot := kmsg.NewShareAcknowledgeResponseTopic()
		ot.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			batches := make([]share.AckBatch, 0, len(rp.AcknowledgementBatches))
			for _, b := range rp.AcknowledgementBatches {
				batches = append(batches, share.AckBatch{First: b.FirstOffset, Last: b.LastOffset, Types: b.AcknowledgeTypes})
			}
			op := kmsg.NewShareAcknowledgeResponseTopicPartition()
			op.Partition = rp.Partition
			op.CurrentLeader.LeaderID, op.CurrentLeader.LeaderEpoch = -1, -1
			op.ErrorCode, op.ErrorMessage = s.shareAck(ctx, cc, gid, member, rt.TopicID, rp.Partition, batches)
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	if final {
		s.share.CloseSession(gid, member)
	}
	return resp, nil
}
