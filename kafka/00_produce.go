package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// handleProduce appends each partition's batch verbatim (client
// compression and CreateTime kept; only the base offset is assigned). Every
// batch of the request is submitted to the write-ahead log first, in
// request order, and then all are awaited together, so one produce to many
// partitions costs one group commit, not one per partition, and needs no
// goroutine per partition. The request is answered when all are durable at
// the stream's durability level (acks=-1), or for acks=1 on a replicated
// topic once the leader's own fsync covers them (docs/kafka.md). acks=0
// gets no response at all.
func handleProduce(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	return s.startProduce(ctx, cc, kreq.(*kmsg.ProduceRequest)).finish(), nil
}

// unboundedProduceTimeout bounds a produce that names no timeout of its
// own (TimeoutMillis 0 or less): Kafka's request.timeout.ms default.
const unboundedProduceTimeout = 30 * time.Second

// produceCall is a produce request whose batches are submitted and whose
// response waits for their durability (finish). A connection submits the
// next produce while this one waits (serveConn), so pipelined produces of
// one client share commit groups.
type produceCall struct {
	srv    *Server
	req    *kmsg.ProduceRequest
	resp   *kmsg.ProduceResponse
	ctx    context.Context
	cancel context.CancelFunc
	subs   []submittedBatch
	// forwards are partitions that moved to another node: sent on to it
	// in finish (produce_forward.go).
	forwards []forwardedPartition
	// batches is scratch for submitPartition.
	batches []splitBatch
}

var producePool = sync.Pool{New: func() any { return new(produceCall) }}

// startProduce validates and submits every batch of req, in request order.
func (s *Server) startProduce(ctx context.Context, cc *connState, req *kmsg.ProduceRequest) *produceCall {
	pc := producePool.Get().(*produceCall)
	pc.srv, pc.req = s, req
	pc.resp = req.ResponseKind().(*kmsg.ProduceResponse)
	// ctx outlasts the connection (serveConn), so the produce is bounded
	// here: by the client's timeout, or unboundedProduceTimeout.
	timeout := unboundedProduceTimeout
	if req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	ctx, pc.cancel = context.WithTimeout(ctx, timeout)
	pc.ctx = ctx
	pc.resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		out := &pc.resp.Topics[i]
		out.Topic = rt.Topic
		out.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			op := &out.Partitions[j]
			*op = kmsg.NewProduceResponseTopicPartition()
			op.Partition = rp.Partition
			op.LogAppendTime, op.LogStartOffset = -1, -1
			s.submitPartition(ctx, cc, pc, req.Version, rt.Topic, rp, op)
		}
	}
	return pc
}

// finish waits until every submitted batch is durable at its stream's
// durability level and returns the response, or nil for acks=0 (Kafka
// sends nothing back). pc is recycled: it must not be used afterwards.
func (pc *produceCall) finish() kmsg.Response {
	// Wait in submission order: the WAL makes batches durable in that
	// order, so after the first wait most of the rest return at once. Every
	// submitted batch is awaited, also in a partition that failed on a
	// later batch, so nothing written is still in flight when the response
	// leaves.
	version := pc.req.Version
	for i := range pc.subs {
		ps := &pc.subs[i]
		var res stream.AppendResult
		var err error
		if pc.req.Acks == 1 {
			res, err = ps.sub.WaitLeader(pc.ctx) // the leader's fsync; followers in the background
		} else {
			res, err = ps.sub.Wait(pc.ctx)
		}
		switch {
		case ps.op.ErrorCode != 0:
			// The partition already failed (a later batch was refused):
			// its answer is that error.
		case err != nil:
			pc.srv.forgetOnMissing(ps.topic, err)
			failPartition(ps.op, version, err)
		case res.Duplicate && res.FirstOffset < 0:
			// A retry of a batch older than the remembered window.
			failPartition(ps.op, version, kerr.DuplicateSequenceNumber)
		case ps.first:
			ps.op.BaseOffset = res.FirstOffset
			if res.LogAppendTime {
				ps.op.LogAppendTime = res.Timestamp
			}
		}
	}
	if len(pc.forwards) > 0 {
		pc.forwardAll(version)
	}
	var resp kmsg.Response
	if pc.req.Acks != 0 {
		resp = pc.resp
	}
	pc.release()
	return resp
}

func (pc *produceCall) release() {
	if pc.cancel != nil {
		pc.cancel()
	}
	clear(pc.subs)
	clear(pc.batches)
	clear(pc.forwards)
	if cap(pc.subs) > 1024 || cap(pc.batches) > 1024 || cap(pc.forwards) > 1024 {
		return // an unusually wide request does not pin its memory
	}
	*pc = produceCall{subs: pc.subs[:0], batches: pc.batches[:0], forwards: pc.forwards[:0]}
	producePool.Put(pc)
}

// submittedBatch is one batch of a produce request in the write-ahead log,
// awaiting durability, and the response partition it answers.
type submittedBatch struct {
	sub   stream.Submitted
	op    *kmsg.ProduceResponseTopicPartition
	topic string
	first bool // the partition's first batch: its offset is the answer
}

type splitBatch struct {
	b []byte
	h record.BatchHeader
}

func failPartition(op *kmsg.ProduceResponseTopicPartition, version int16, err error) {
	op.ErrorCode, op.BaseOffset = errCode(err), -1
	if version >= 8 {
		op.ErrorMessage = errMessage(err)
	}
}

// submitPartition validates one partition's batches and submits them to the
// stream, adding them to pc.subs; a refusal is written into op. A
// partition's batches are accepted or refused as a whole when they are
// invalid; a batch the stream refuses (a sequence error) fails the
// partition, with the batches before it still written, as before.
func (s *Server) submitPartition(ctx context.Context, cc *connState, pc *produceCall, version int16, topic string, rp kmsg.ProduceRequestTopicPartition, op *kmsg.ProduceResponseTopicPartition) {
	name, topicMax, err := s.locatePartition(ctx, topic, rp.Partition, true)
	if err == nil {
		err = s.allow(cc, auth.Write, name)
	}
	if limit := maxBatch(topicMax, s.cfg.MaxMessageBytes); err == nil && len(rp.Records) > limit {
		err = fmt.Errorf("%w: %d bytes of batches, max.message.bytes is %d", kerr.MessageTooLarge, len(rp.Records), limit)
	}
	if err == nil && len(rp.Records) == 0 {
		err = fmt.Errorf("%w: no record batch", kerr.InvalidRecord)
	}
	if err != nil {
		failPartition(op, version, err)
		return
	}
	// Validate every batch before submitting any: a request is accepted
	// or refused as a whole.
	pc.batches = pc.batches[:0]
	err = record.SplitBatches(rp.Records, func(b []byte, h record.BatchHeader) error {
		switch {
		case h.Control():
			return fmt.Errorf("%w: clients may not produce control batches", kerr.InvalidRecord)
		case !h.Dense():
			return fmt.Errorf("%w: %d records for a span of %d offsets (a produced batch has one record per offset)", kerr.InvalidRecord, h.NumRecords, int64(h.LastOffsetDelta)+1)
		case h.Transactional() && h.ProducerID < 0:
			return fmt.Errorf("%w: a transactional batch without producer id", kerr.InvalidRecord)
		case h.Codec() == record.CodecZstd && version < 7:
			return fmt.Errorf("%w: zstd needs produce v7+", kerr.UnsupportedCompressionType)
		case h.ProducerID >= 0 && (h.ProducerEpoch < 0 || h.BaseSequence < 0):
			return fmt.Errorf("%w: producer id %d with epoch %d and sequence %d", kerr.InvalidRecord, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		pc.batches = append(pc.batches, splitBatch{b, h})
		return nil
	})
	if err != nil {
		failPartition(op, version, err)
		return
	}
	for i, sb := range pc.batches {
		h := sb.h
		ar := stream.AppendRequest{Batch: sb.b, VerifyTxn: h.Transactional()}
		var p stream.Producer
		if h.ProducerID >= 0 {
			p = stream.Producer{ID: stream.KafkaProducerID(h.ProducerID), Epoch: uint64(h.ProducerEpoch), Seq: uint64(h.BaseSequence), PerRecord: true}
			ar.Producer = &p
		}
		sub, err := s.svc.SubmitBatch(ctx, name, ar)
		if err != nil && i == 0 && s.forwardable(cc, err, pc.batches) {
			// Nothing of this partition is written here: it waits out the
			// stream's move and goes to its new owner (produce_forward.go).
			pc.forwards = append(pc.forwards, forwardedPartition{topic: topic, stream: name, rp: rp, op: op, cause: err,
				batches: slices.Clone(pc.batches)})
			return
		}
		if err == nil && sub.Unverified() {
			// The batch would open its producer's transaction here:
			// only once the coordinator says the partition is in it.
			// From v12 (transaction.version 2) the leader adds the
			// partition itself; before, it checks the client did.
			if err = s.verifyTxn(ctx, cc, pc.req.TransactionID, topic, rp.Partition, h.ProducerID, h.ProducerEpoch, version >= 12); err == nil {
				ar.VerifyTxn = false
				sub, err = s.svc.SubmitBatch(ctx, name, ar)
			}
		}
		if err != nil {
			s.forgetOnMissing(topic, err)
			failPartition(op, version, err)
			return // batches submitted before this one are still awaited
		}
		pc.subs = append(pc.subs, submittedBatch{sub: sub, op: op, topic: topic, first: i == 0})
	}
}

// forgetOnMissing drops the cached location of a topic whose stream the
// service does not know (deleted, re-created): the next request resolves
// it again.
func (s *Server) forgetOnMissing(topic string, err error) {
	if errCode(err) == kerr.UnknownTopicOrPartition.Code {
		s.topics.forget(topic)
	}
}
