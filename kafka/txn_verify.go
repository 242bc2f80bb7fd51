package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/txn"
	"github.com/PicoMQ/picomq/node/stream"
)

// verifyTxn is KIP-890 part 1 at the partition leader: the first
// transactional batch of a producer's transaction on a partition (the
// stream says whether the transaction is already open there:
// AppendRequest.VerifyTxn) is written only if the transaction coordinator
// has the partition in the producer's open transaction. Otherwise a client
// that skipped AddPartitionsToTxn would leave a transaction no marker ever
// ends, holding the partition's read_committed consumers back.
//
// Answers as Kafka 3.6+: INVALID_TXN_STATE when the partition is not in an
// open transaction of this producer and epoch, INVALID_PRODUCER_EPOCH for
// a fenced epoch, NOT_ENOUGH_REPLICAS (retriable for every client) when
// the coordinator cannot be asked now.
func (s *Server) verifyTxn(ctx context.Context, id *string, topic string, p int32, pid int64, epoch int16) error {
	err := s.checkTxn(ctx, id, topic, p, pid, epoch)
	switch {
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
type txnChecks struct{ ok, refused, unavailable atomic.Int64 }

// TxnStats are the Kafka transaction counters of this node's frontend
// (metrics, docs/operations.md): the partition leader's KIP-890 checks by
// outcome, the coordinator's state writes and the partition adds that
// needed none.
type TxnStats struct {
	ChecksOK, ChecksRefused, ChecksUnavailable int64
	StateWrites, ReservedAdds                  int64
}

// TxnStats reads the counters.
func (s *Server) TxnStats() TxnStats {
	w, r := s.txns.Stats()
	return TxnStats{ChecksOK: s.txnChecks.ok.Load(), ChecksRefused: s.txnChecks.refused.Load(),
		ChecksUnavailable: s.txnChecks.unavailable.Load(), StateWrites: w, ReservedAdds: r}
}

func (s *Server) checkTxn(ctx context.Context, id *string, topic string, p int32, pid int64, epoch int16) error {
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
	if self {
		err = s.txns.Includes(ctx, *id, pid, epoch, part)
	} else {
		err = s.verifyAt(ctx, b, *id, pid, epoch, part)
	}
	if errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return err
	}
	if err != nil {
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
	cl, err := s.peers.client(net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	if err != nil {
		return err
	}
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return fmt.Errorf("no connection to %s", b.Host)
	}
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{id}
	resp, err := req.RequestWith(ctx, seeds[0])
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
