package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleDescribeProducers lists the producers each partition remembers
// (idempotent and transactional), with the start of a transaction each
// has open there. Only the partition's leader answers (NOT_LEADER elsewhere).
func handleDescribeProducers(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, t := range req.Topics {
		ot := kmsg.NewDescribeProducersResponseTopic()
		ot.Topic = t.Topic
		for _, p := range t.Partitions {
			op := kmsg.NewDescribeProducersResponseTopicPartition()
			op.Partition = p
			name, err := s.partitionName(ctx, t.Topic, p, false)
			if err == nil {
				err = s.allow(cc, auth.Read, name)
			}
			if err == nil {
				ps, perr := s.svc.KafkaProducers(ctx, name)
				err = perr
				for _, kp := range ps {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch = kp.ProducerID, int32(kp.Epoch)
					ap.LastSequence, ap.LastTimestamp = int32(kp.LastSequence), kp.LastTimestamp
					ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, kp.TxnStartOffset
					op.ActiveProducers = append(op.ActiveProducers, ap)
				}
			}
			if err != nil {
				op.ErrorCode, op.ErrorMessage = errCode(err), errMessage(err)
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}
