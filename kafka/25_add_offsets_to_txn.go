package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleAddOffsetsToTxn adds a consumer group's offsets to a producer's
// transaction: its TxnOffsetCommit then waits in the group's offsets
// stream for the transaction's marker.
func handleAddOffsetsToTxn(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	resp.ErrorCode = txnCode(s.txns.AddOffsets(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Group), req.Version)
	return resp, nil
}
