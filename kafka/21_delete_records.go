package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
)

// handleDeleteRecords trims partitions: the start offset moves to the
// given offset (-1 = the high watermark), as a Pico trim does.
func handleDeleteRecords(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteRecordsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteRecordsResponse)
	for _, rt := range req.Topics {
		ot := kmsg.NewDeleteRecordsResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewDeleteRecordsResponseTopicPartition()
			op.Partition = rp.Partition
			low, err := s.trimPartition(ctx, cc, rt.Topic, rp.Partition, rp.Offset)
			op.ErrorCode, op.LowWatermark = errCode(err), low
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}

func (s *Server) trimPartition(ctx context.Context, cc *connState, topic string, p int32, offset int64) (int64, error) {
	name, err := s.partitionName(ctx, topic, p, false)
	if err == nil {
		err = s.allow(cc, auth.Admin, name)
	}
	if err != nil {
		return -1, err
	}
	if offset == -1 {
		info, err := s.svc.Head(ctx, name)
		if err != nil {
			return -1, err
		}
		offset = info.NextOffset
	}
	info, err := s.svc.Configure(ctx, name, stream.ConfigChange{TrimBefore: &offset})
	if err != nil {
		return -1, err
	}
	return info.StartOffset, nil
}
