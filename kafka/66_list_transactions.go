package kafka

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/txn"
)

// handleListTransactions lists the transactions this node coordinates
// (Kafka's per-broker answer: admin clients ask every broker), filtered by
// state, producer id and (v1+) minimum running time.
func handleListTransactions(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	var states []txn.State
	for _, f := range req.StateFilters {
		st, ok := txn.ParseState(f)
		if !ok {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, f)
			continue
		}
		states = append(states, st)
	}
	ms, err := s.txns.List(ctx)
	if err != nil {
		resp.ErrorCode = txn.Code(err)
		return resp, nil
	}
	now := time.Now().UnixMilli()
	for _, m := range ms {
		switch {
		case len(req.StateFilters) > 0 && !slices.Contains(states, m.State):
			continue
		case len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, m.ProducerID):
			continue
		case req.DurationFilterMillis >= 0 && req.Version >= 1 && (m.State != txn.Ongoing || now-m.StartMs < req.DurationFilterMillis):
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = m.ID, m.ProducerID, m.State.String()
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp, nil
}
