package kafka

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleInitProducerID hands out idempotent producer ids. An id is random
// (63 bits), so nodes need no shared counter and ids never repeat in
// practice; the sequence state lives in each partition's stream (the
// producer state the HTTP protocols use), so it survives restarts and
// moves with the stream on takeover. A client that asks to bump its epoch
// (KIP-360, v3+) keeps its id with epoch+1: each stream then accepts the
// new epoch from sequence 0. Transactions are not supported.
func handleInitProducerID(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	if req.TransactionalID != nil {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		resp.ProducerID, resp.ProducerEpoch = -1, -1
		return resp, nil
	}
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < math.MaxInt16-1 {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = newProducerID(), 0
	return resp, nil
}

func newProducerID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) &^ (1 << 63))
}
