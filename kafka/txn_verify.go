package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/txn"
	"github.com/PicoMQ/picomq/node/stream"
)

// verifyTxn is KIP-890 at the partition leader: the first transactional
// batch of a producer's transaction on a partition (the stream says
// whether the transaction is already open there: AppendRequest.VerifyTxn)
// is written only once the transaction coordinator has the partition in
// the producer's open transaction. Otherwise a client that skipped
// AddPartitionsToTxn would leave a transaction no marker ever ends,
// holding the partition's read_committed consumers back.
//
// Part 1 (add false, Produce v3-v11) asks the coordinator whether the
// producer added the partition. Part 2 (add true, Produce v12+, a client
// of transaction.version 2) has the leader add it: the coordinator
// records it durably (starting the transaction if none is open) before
// the batch is written, exactly as the client's AddPartitionsToTxn would.
//
// Answers as Kafka 3.6+: INVALID_TXN_STATE when the partition is not in an
// open transaction of this producer and epoch (part 1), INVALID_PRODUCER_EPOCH
// for a fenced epoch, NOT_ENOUGH_REPLICAS (retriable for every client) when
// the coordinator cannot be asked now; part 2 also CONCURRENT_TRANSACTIONS
// (the previous transaction's markers are still being written; franz-go
// retries it) and INVALID_PRODUCER_ID_MAPPING (another producer id).
func (s *Server) verifyTxn(ctx context.Context, cc *connState, id *string, topic string, p int32, pid int64, epoch int16, add bool) error {
	err := s.checkTxn(ctx, cc, id, topic, p, pid, epoch, add)
	switch {
	case err == nil && add:
		s.txnChecks.added.Add(1)
	case err == nil:
		s.txnChecks.ok.Add(1)
	case errors.Is(err, kerr.NotEnoughReplicas):
		s.txnChecks.unavailable.Add(1)
	default:
		s.txnChecks.refused.Add(1)
	}
	return err
}

// txnChecks count verifyTxn's outcomes (TxnStats).
type txnChecks struct{ ok, added, refused, unavailable atomic.Int64 }

// TxnStats are the Kafka transaction counters of this node's frontend
// (metrics, docs/operations.md): the partition leader's KIP-890 checks by
// outcome (ChecksAdded: partitions a Produce v12+ added to its
// transaction), the coordinator's state writes and the partition adds
// that needed none.
type TxnStats struct {
	ChecksOK, ChecksAdded, ChecksRefused, ChecksUnavailable int64
	StateWrites, ReservedAdds                               int64
}

// TxnStats reads the counters.
func (s *Server) TxnStats() TxnStats {
	w, r := s.txns.Stats()
	return TxnStats{ChecksOK: s.txnChecks.ok.Load(), ChecksAdded: s.txnChecks.added.Load(), ChecksRefused: s.txnChecks.refused.Load(),
		ChecksUnavailable: s.txnChecks.unavailable.Load(), StateWrites: w, ReservedAdds: r}
}

func (s *Server) checkTxn(ctx context.Context, cc *connState, id *string, topic string, p int32, pid int64, epoch int16, add bool) error {
	if id == nil || *id == "" {
		return fmt.Errorf("%w: a transactional batch in a produce request without transactional id", kerr.InvalidTxnState)
	}
	part := txn.Partition{Topic: topic, Partition: p}
	name, ok := txn.StreamName(*id)
	if !ok {
		return fmt.Errorf("%w: transactional id %q", kerr.InvalidTxnState, *id)
	}
	b, self, err := s.Locate(stream.WithSystemAccess(ctx), name)
	if err != nil {
		return coordinatorUnreachable(*id, err)
	}
	switch {
	case add && self:
		err = s.txns.AddPartitions(ctx, *id, pid, epoch, []txn.Partition{part}, s.txnReserveTopic(cc, topic))
	case add:
		err = s.addAt(ctx, b, *id, pid, epoch, part)
	case self:
		err = s.txns.Includes(ctx, *id, pid, epoch, part)
	default:
		err = s.verifyAt(ctx, b, *id, pid, epoch, part)
	}
	switch {
	case errors.Is(err, kerr.ProducerFenced):
		// Produce has no PRODUCER_FENCED: a fenced epoch is
		// INVALID_PRODUCER_EPOCH there, as in Kafka.
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, kerr.InvalidTxnState), errors.Is(err, kerr.InvalidProducerEpoch),
		errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.ConcurrentTransactions):
		return err
	case err != nil:
		return coordinatorUnreachable(*id, err)
	}
	return nil
}

func coordinatorUnreachable(id string, err error) error {
	return fmt.Errorf("%w: cannot verify the transaction of %q with its coordinator now: %v", kerr.NotEnoughReplicas, id, err)
}

// verifyAt asks the coordinating node b for the transaction's state
// (DescribeTransactions, the API admin clients use) and checks it.
func (s *Server) verifyAt(ctx context.Context, b group.Broker, id string, pid int64, epoch int16, part txn.Partition) error {
	peer, err := s.peers.broker(b)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	resp, err := req.RequestWith(ctx, peer)
	if err != nil {
		return fmt.Errorf("DescribeTransactions to node %d: %w", b.NodeID, err)
	}
	if len(resp.TransactionStates) != 1 {
		return fmt.Errorf("DescribeTransactions to node %d: %d states for one id", b.NodeID, len(resp.TransactionStates))
	}
	ts := resp.TransactionStates[0]
	if code := ts.ErrorCode; code == kerr.TransactionalIDNotFound.Code {
		return fmt.Errorf("%w: transactional id %q is unknown to its coordinator", kerr.InvalidTxnState, id)
	} else if err := kerr.ErrorForCode(code); err != nil {
		return fmt.Errorf("DescribeTransactions to node %d: %w", b.NodeID, err)
	}
	state, ok := txn.ParseState(ts.State)
	if !ok {
		return fmt.Errorf("DescribeTransactions to node %d: state %q", b.NodeID, ts.State)
	}
	m := txn.Meta{ID: id, ProducerID: ts.ProducerID, Epoch: ts.ProducerEpoch, State: state}
	for _, t := range ts.Topics {
		for _, p := range t.Partitions {
			m.Partitions = append(m.Partitions, txn.Partition{Topic: t.Topic, Partition: p})
		}
	}
	return txn.Includes(m, pid, epoch, part)
}

// addAt has the coordinating node b add part to the producer's
// transaction: AddPartitionsToTxn v4+, the batched form Kafka brokers send
// each other, with VerifyOnly false (the node's internal login, which
// the handler requires for these versions).
func (s *Server) addAt(ctx context.Context, b group.Broker, id string, pid int64, epoch int16, part txn.Partition) error {
	peer, err := s.peers.broker(b)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
	tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch = id, pid, epoch
	tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
	tt.Topic, tt.Partitions = part.Topic, []int32{part.Partition}
	tx.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{tt}
	req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{tx}
	resp, err := req.RequestWith(ctx, peer)
	if err != nil {
		return fmt.Errorf("AddPartitionsToTxn to node %d: %w", b.NodeID, err)
	}
	if resp.Version < 4 {
		return fmt.Errorf("AddPartitionsToTxn to node %d: it answers v%d, not the v4+ a leader needs", b.NodeID, resp.Version)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("AddPartitionsToTxn to node %d: %w", b.NodeID, err)
	}
	for _, rt := range resp.Transactions {
		for _, t := range rt.Topics {
			for _, p := range t.Partitions {
				if rt.TransactionalID == id && t.Topic == part.Topic && p.Partition == part.Partition {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return fmt.Errorf("AddPartitionsToTxn to node %d: %w", b.NodeID, err)
					}
					return nil
				}
			}
		}
	}
	return fmt.Errorf("AddPartitionsToTxn to node %d: no answer for %s/%d", b.NodeID, part.Topic, part.Partition)
}
