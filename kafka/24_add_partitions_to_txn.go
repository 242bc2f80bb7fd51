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
//
// v4+ is the batched form partition leaders send a transaction's
// coordinator (Kafka's broker-to-broker verification, KIP-890): many
// transactions per request, each either checked (VerifyOnly) or added.
// PicoMQ nodes send it for a Produce v12+ to a partition whose leader
// does not coordinate the transaction (txn_verify.go). Like
// WriteTxnMarkers it needs admin access to each partition, which the
// nodes' internal login has and producers do not (Kafka requires
// CLUSTER_ACTION).
func handleAddPartitionsToTxn(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if req.Version >= 4 {
		for _, tx := range req.Transactions {
			resp.Transactions = append(resp.Transactions, s.addPartitionsBatched(ctx, cc, tx))
		}
		return resp, nil
	}
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

// addPartitionsBatched is one transaction of an AddPartitionsToTxn v4+:
// its partitions are added (or, VerifyOnly, checked) together, and every
// partition answers the outcome, or its own refusal (then nothing is
// added, the others answering OPERATION_NOT_ATTEMPTED as in v0-3).
func (s *Server) addPartitionsBatched(ctx context.Context, cc *connState, tx kmsg.AddPartitionsToTxnRequestTransaction) kmsg.AddPartitionsToTxnResponseTransaction {
	out := kmsg.NewAddPartitionsToTxnResponseTransaction()
	out.TransactionalID = tx.TransactionalID
	codes := make([][]int16, len(tx.Topics))
	var parts, reserve []txn.Partition
	failed := false
	for i, t := range tx.Topics {
		codes[i] = make([]int16, len(t.Partitions))
		for j, p := range t.Partitions {
			name, err := s.partitionName(ctx, t.Topic, p, false)
			if err == nil {
				err = s.allow(cc, auth.Admin, name)
			}
			if err != nil {
				codes[i][j], failed = errCode(err), true
				continue
			}
			parts = append(parts, txn.Partition{Topic: t.Topic, Partition: p})
		}
		reserve = append(reserve, s.txnReserveTopic(cc, t.Topic)...)
	}
	var code int16
	switch {
	case failed:
		code = kerr.OperationNotAttempted.Code
	case tx.VerifyOnly:
		for _, p := range parts {
			if code = txnCode(s.txns.Includes(ctx, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, p), 5); code != 0 {
				break
			}
		}
	default:
		code = txnCode(s.txns.AddPartitions(ctx, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, parts, reserve), 5)
	}
	for i, t := range tx.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			rp.Partition, rp.ErrorCode = p, codes[i][j]
			if rp.ErrorCode == 0 {
				rp.ErrorCode = code
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
	return out
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
		out = append(out, s.txnReserveTopic(cc, t.Topic)...)
	}
	return out
}

// txnReserveTopic is txnReserve of one topic.
func (s *Server) txnReserveTopic(cc *connState, topic string) []txn.Partition {
	e, ok := s.topics.get(topic)
	if !ok || e.partitions > txnReserveMax {
		return nil
	}
	var out []txn.Partition
	for p := range e.partitions {
		if s.allow(cc, auth.Write, partitionStream(e.base, p)) == nil {
			out = append(out, txn.Partition{Topic: topic, Partition: p})
		}
	}
	return out
}
