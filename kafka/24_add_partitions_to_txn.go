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
	topics := make([]txnTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i] = txnTopic{t.Topic, t.Partitions}
	}
	codes := s.addToTxn(ctx, cc, req.TransactionalID, req.ProducerID, req.ProducerEpoch, topics, auth.Write, false, req.Version)
	for i, t := range req.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// addPartitionsBatched is one transaction of an AddPartitionsToTxn v4+,
// answered as addToTxn decides, with admin access needed.
func (s *Server) addPartitionsBatched(ctx context.Context, cc *connState, tx kmsg.AddPartitionsToTxnRequestTransaction) kmsg.AddPartitionsToTxnResponseTransaction {
	out := kmsg.NewAddPartitionsToTxnResponseTransaction()
	out.TransactionalID = tx.TransactionalID
	topics := make([]txnTopic, len(tx.Topics))
	for i, t := range tx.Topics {
		topics[i] = txnTopic{t.Topic, t.Partitions}
	}
	codes := s.addToTxn(ctx, cc, tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, topics, auth.Admin, tx.VerifyOnly, 5)
	for i, t := range tx.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			rp.Partition, rp.ErrorCode = p, codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
	return out
}

// txnTopic is one topic's partitions in an AddPartitionsToTxn, whichever
// form it came in.
type txnTopic struct {
	topic      string
	partitions []int32
}

// addToTxn adds topics' partitions to a transaction (or, verifyOnly,
// checks that they are in it) and returns each partition's code: its own
// refusal (unknown, or the principal lacks level on it; then nothing is
// added and the others answer OPERATION_NOT_ATTEMPTED, as in Kafka), else
// the transaction's outcome. version picks the error codes (txnCode).
func (s *Server) addToTxn(ctx context.Context, cc *connState, id string, pid int64, epoch int16, topics []txnTopic, level auth.Level, verifyOnly bool, version int16) [][]int16 {
	codes := make([][]int16, len(topics))
	var parts []txn.Partition
	failed := false
	for i, t := range topics {
		codes[i] = make([]int16, len(t.partitions))
		for j, p := range t.partitions {
			name, err := s.partitionName(ctx, t.topic, p, false)
			if err == nil {
				err = s.allow(cc, level, name)
			}
			if err != nil {
				codes[i][j], failed = errCode(err), true
				continue
			}
			parts = append(parts, txn.Partition{Topic: t.topic, Partition: p})
		}
	}
	var code int16
	switch {
	case failed:
		code = kerr.OperationNotAttempted.Code
	case verifyOnly:
		for _, p := range parts {
			if code = txnCode(s.txns.Includes(ctx, id, pid, epoch, p), version); code != 0 {
				break
			}
		}
	default:
		var reserve []txn.Partition
		for _, t := range topics {
			reserve = append(reserve, s.txnReserveTopic(cc, t.topic)...)
		}
		code = txnCode(s.txns.AddPartitions(ctx, id, pid, epoch, parts, reserve), version)
	}
	for i := range codes {
		for j := range codes[i] {
			if codes[i][j] == 0 {
				codes[i][j] = code
			}
		}
	}
	return codes
}

// txnReserveMax bounds the partitions of a topic that AddPartitionsToTxn
// reserves (txn.Coordinator.AddPartitions): a larger topic reserves
// nothing, so a coordinator taking a transaction over writes at most
// this many markers per topic it did not need.
const txnReserveMax = 64

// txnReserveTopic is every partition of topic (if it has at most
// txnReserveMax) that the principal may write: the partitions the producer
// is likely to add next in the same transaction.
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
