package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleEndTxn commits or aborts a producer's transaction. It answers once
// the outcome is durable and every marker is written, so a read_committed
// consumer sees the whole transaction (or none of it) right after.
//
// v5+ is transaction.version 2 (KIP-890 part 2): the end bumps the epoch,
// the markers carry the bumped one, and the answer names the producer id
// and epoch of the next transaction (txn.Coordinator.EndTxnBumping).
// Older versions end at the producer's epoch, as before.
func handleEndTxn(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	if req.Version >= 5 {
		pid, epoch, err := s.txns.EndTxnBumping(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit)
		resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = pid, epoch, txnCode(err, req.Version)
		return resp, nil
	}
	resp.ErrorCode = txnCode(s.txns.EndTxn(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit), req.Version)
	return resp, nil
}
