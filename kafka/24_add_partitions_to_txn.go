package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka/txn"
)

// handleAddPartitionsToTxn adds partitions to a producer's transaction
// (v0-3: one transaction per request, from the producer itself). Every
// partition must exist and be writable by the principal; otherwise none
// is added: the others answer OPERATION_NOT_ATTEMPTED, as in Kafka.
func handleAddPartitionsToTxn(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	codes := make([][]int16, len(req.Topics))
	var parts []txn.Partition
	failed := false
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			name, err := s.partitionName(ctx, t.Topic, p, false)
			if err == nil {
				err = s.allow(cc, auth.Write, name)
			}
			if err != nil {
				codes[i][j], failed = errCode(err), true
				continue
			}
			parts = append(parts, txn.Partition{Topic: t.Topic, Partition: p})
		}
	}
	var code int16
	if failed {
		code = kerr.OperationNotAttempted.Code
	} else {
		reserve := s.txnReserve(ctx, cc, req.Topics)
		code = txnCode(s.txns.AddPartitions(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts, reserve), req.Version)
	}
	for i, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, codes[i][j]
			if rp.ErrorCode == 0 {
				rp.ErrorCode = code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// txnReserveMax bounds the partitions of a topic that AddPartitionsToTxn
// reserves (txn.Coordinator.AddPartitions): a larger topic reserves
// nothing, so a coordinator taking a transaction over writes at most
// this many markers per topic it did not need.
const txnReserveMax = 64

// txnReserve is every partition of the request's topics (those of at
// most txnReserveMax partitions) that the principal may write: the
// partitions the producer is likely to add next in the same transaction.
func (s *Server) txnReserve(ctx context.Context, cc *connState, topics []kmsg.AddPartitionsToTxnRequestTopic) []txn.Partition {
	var out []txn.Partition
	for _, t := range topics {
		e, ok := s.topics.get(t.Topic)
		if !ok || e.partitions > txnReserveMax {
			continue
		}
		for p := range e.partitions {
			if s.allow(cc, auth.Write, partitionStream(e.base, p)) == nil {
				out = append(out, txn.Partition{Topic: t.Topic, Partition: p})
			}
		}
	}
	return out
}
