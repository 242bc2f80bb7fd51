package kafka

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// producerID names a Kafka idempotent producer in the stream service's
// producer state, namespaced so it never meets an HTTP producer.
func producerID(pid int64) string { return "kafka:" + strconv.FormatInt(pid, 10) }

// handleProduce appends each partition's batch verbatim (client
// compression and CreateTime kept; only the base offset is assigned).
// Partitions of one request are appended concurrently; the request is
// answered when all are durable at the stream's durability level (acks 1
// and -1 alike, see docs/kafka.md). acks=0 gets no response at all.
func handleProduce(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	var wg sync.WaitGroup
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		out := &resp.Topics[i]
		out.Topic = rt.Topic
		out.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			op := &out.Partitions[j]
			*op = kmsg.NewProduceResponseTopicPartition()
			op.Partition = rp.Partition
			if req.TransactionID != nil {
				op.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.producePartition(ctx, cc, req.Version, rt.Topic, rp, op)
			}()
		}
	}
	wg.Wait()
	if req.Acks == 0 {
		return nil, nil
	}
	return resp, nil
}

func (s *Server) producePartition(ctx context.Context, cc *connState, version int16, topic string, rp kmsg.ProduceRequestTopicPartition, op *kmsg.ProduceResponseTopicPartition) {
	fail := func(err error) {
		op.ErrorCode, op.BaseOffset = errCode(err), -1
		if version >= 8 {
			op.ErrorMessage = errMessage(err)
		}
	}
	name, topicMax, err := s.locatePartition(ctx, topic, rp.Partition, true)
	if err == nil {
		err = s.allow(cc, auth.Write, name)
	}
	if limit := maxBatch(topicMax, s.cfg.MaxMessageBytes); err == nil && len(rp.Records) > limit {
		err = fmt.Errorf("%w: %d bytes of batches, max.message.bytes is %d", kerr.MessageTooLarge, len(rp.Records), limit)
	}
	if err != nil {
		fail(err)
		return
	}
	if len(rp.Records) == 0 {
		fail(fmt.Errorf("%w: no record batch", kerr.InvalidRecord))
		return
	}
	// Validate every batch before appending any: a request is accepted
	// or refused as a whole.
	type batch struct {
		b []byte
		h record.BatchHeader
	}
	var batches []batch // one allocation for the usual single batch
	err = record.SplitBatches(rp.Records, func(b []byte, h record.BatchHeader) error {
		switch {
		case h.Control():
			return fmt.Errorf("%w: clients may not produce control batches", kerr.InvalidRecord)
		case h.Transactional():
			return fmt.Errorf("%w: transactions are not supported", kerr.InvalidRecord)
		case h.Codec() == record.CodecZstd && version < 7:
			return fmt.Errorf("%w: zstd needs produce v7+", kerr.UnsupportedCompressionType)
		}
		batches = append(batches, batch{b, h})
		return nil
	})
	if err != nil {
		fail(err)
		return
	}
	for i, sb := range batches {
		h := sb.h
		ar := stream.AppendRequest{Batch: sb.b}
		if h.ProducerID >= 0 {
			if h.ProducerEpoch < 0 || h.BaseSequence < 0 {
				fail(fmt.Errorf("%w: producer id %d with epoch %d and sequence %d", kerr.InvalidRecord, h.ProducerID, h.ProducerEpoch, h.BaseSequence))
				return
			}
			ar.Producer = &stream.Producer{ID: producerID(h.ProducerID), Epoch: uint64(h.ProducerEpoch), Seq: uint64(h.BaseSequence), PerRecord: true}
		}
		res, err := s.svc.AppendBatch(ctx, name, ar)
		if err != nil {
			s.forgetOnMissing(topic, err)
			fail(err)
			return
		}
		if res.Duplicate && res.FirstOffset < 0 {
			// A retry of a batch older than the remembered window.
			fail(kerr.DuplicateSequenceNumber)
			return
		}
		if i == 0 {
			op.BaseOffset = res.FirstOffset
		}
	}
	op.LogAppendTime = -1
	op.LogStartOffset = -1
}

// forgetOnMissing drops the cached location of a topic whose stream the
// service does not know (deleted, re-created): the next request resolves
// it again.
func (s *Server) forgetOnMissing(topic string, err error) {
	if errCode(err) == kerr.UnknownTopicOrPartition.Code {
		s.topics.forget(topic)
	}
}
