package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleEndTxn commits or aborts a producer's transaction. It answers once
// the outcome is durable and every marker is written, so a read_committed
// consumer sees the whole transaction (or none of it) right after.
func handleEndTxn(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ErrorCode = txnCode(s.txns.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit), req.Version)
	return resp, nil
}
