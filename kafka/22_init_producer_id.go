package kafka

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/txn"
)

// handleInitProducerID hands out producer ids. Without a transactional id
// the producer is idempotent only: its id is random (63 bits), so nodes
// need no shared counter and ids never repeat in practice; the sequence
// state lives in each partition's stream (the producer state the HTTP
// protocols use), so it survives restarts and moves with the stream on
// takeover. A client that asks to bump its epoch (KIP-360, v3+) keeps its
// id with epoch+1: each stream then accepts the new epoch from sequence 0.
// With a transactional id the transaction coordinator answers (kafka/txn):
// the id keeps its producer id and every call fences the epochs before.
func handleInitProducerID(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	if req.TransactionalID != nil {
		pid, epoch, err := s.txns.InitProducerID(ctx, *req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch)
		resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = pid, epoch, txnCode(err, req.Version)
		return resp, nil
	}
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1 {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = newProducerID(), 0
	return resp, nil
}

// txnCode is the error code of a transaction coordinator answer.
// PRODUCER_FENCED exists from the versions of KIP-588; older clients
// know it as INVALID_PRODUCER_EPOCH.
func txnCode(err error, version int16) int16 {
	code := txn.Code(err)
	if code == kerr.ProducerFenced.Code && version < 3 {
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}

func newProducerID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) &^ (1 << 63))
}
