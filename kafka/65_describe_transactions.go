package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/txn"
)

// handleDescribeTransactions describes transactional ids this node
// coordinates (NOT_COORDINATOR for the others: clients ask the
// coordinator FindCoordinator names).
func handleDescribeTransactions(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID = id
		m, err := s.txns.Describe(ctx, id)
		if err != nil {
			ts.ErrorCode = txn.Code(err)
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		ts.State, ts.TimeoutMillis, ts.ProducerID, ts.ProducerEpoch = m.State.String(), m.TimeoutMs, m.ProducerID, m.Epoch
		ts.StartTimestamp = -1
		if m.State == txn.Ongoing || m.State == txn.PrepareCommit || m.State == txn.PrepareAbort {
			ts.StartTimestamp = m.StartMs
		}
		for _, p := range m.Partitions {
			if n := len(ts.Topics); n > 0 && ts.Topics[n-1].Topic == p.Topic {
				ts.Topics[n-1].Partitions = append(ts.Topics[n-1].Partitions, p.Partition)
				continue
			}
			tt := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			tt.Topic, tt.Partitions = p.Topic, []int32{p.Partition}
			ts.Topics = append(ts.Topics, tt)
		}
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp, nil
}
