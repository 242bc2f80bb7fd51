package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/record"
)

// handleOffsetForLeaderEpoch answers, per partition, the largest leader
// epoch at or below the one asked for and the offset where it ended: where
// the next epoch's first batch is (KIP-101, KIP-320; consumers use it to
// detect truncation after a leader change). A partition's leader epoch is
// its stream's fencing epoch, and the stream service writes that epoch
// into every batch it appends (the header field Kafka brokers write), so
// the epochs' boundaries are read off the stored batches: epochs only grow
// along the offsets, and a binary search reads O(log n) batch headers.
// Batches stored before epochs were written carry -1 or 0 and count as
// epoch 0, older than every epoch (which start at 1). The current epoch
// ends at the high watermark; an epoch above it is unknown (-1, -1).
func handleOffsetForLeaderEpoch(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	for _, rt := range req.Topics {
		ot := kmsg.NewOffsetForLeaderEpochResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			op.Partition = rp.Partition
			epoch, end, err := s.epochEnd(ctx, cc, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch)
			op.ErrorCode, op.LeaderEpoch, op.EndOffset = errCode(err), epoch, end
			if err != nil {
				op.LeaderEpoch, op.EndOffset = -1, -1
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}

// batchEpoch is a stored batch's leader epoch; unknown ones (-1, or 0
// from before epochs were written) are 0.
func batchEpoch(h record.BatchHeader) int32 { return max(h.PartitionLeaderEpoch, 0) }

func (s *Server) epochEnd(ctx context.Context, cc *connState, topic string, p, current, want int32) (int32, int64, error) {
	name, err := s.partitionName(ctx, topic, p, false)
	if err == nil {
		err = s.allow(cc, auth.Read, name)
	}
	if err != nil {
		return 0, 0, err
	}
	info, err := s.svc.Head(ctx, name)
	if err != nil {
		s.forgetOnMissing(topic, err)
		return 0, 0, err
	}
	if err := checkLeaderEpoch(current, info.Epoch); err != nil {
		return 0, 0, err
	}
	switch {
	case int64(want) == info.Epoch:
		return want, info.NextOffset, nil
	case int64(want) > info.Epoch || want < 0:
		return -1, -1, nil
	}
	// The first offset whose batch has an epoch above want: [lo, hi).
	lo, hi := info.StartOffset, info.NextOffset
	found := int32(-1) // the epoch of the latest batch seen below lo
	for lo < hi {
		mid := lo + (hi-lo)/2
		h, ok, err := s.batchAt(ctx, name, mid)
		if err != nil {
			return 0, 0, err
		}
		switch {
		case !ok || h.BaseOffset >= hi: // nothing stored in [mid, hi)
			hi = mid
		case batchEpoch(h) > want:
			hi = min(hi, max(h.BaseOffset, lo))
		default:
			lo, found = h.LastOffset()+1, batchEpoch(h)
		}
	}
	if lo > info.StartOffset {
		// The batch just before lo holds the largest epoch at or below want.
		if h, ok, err := s.batchAt(ctx, name, lo-1); err == nil && ok && h.LastOffset() < lo {
			found = batchEpoch(h)
		}
	}
	if found < 0 {
		found = want // no batch at or below want is left (trimmed, or none)
	}
	return found, lo, nil
}

// batchAt reads the header of the stored batch holding offset (or the
// next one after a gap); ok is false past the end.
func (s *Server) batchAt(ctx context.Context, name string, offset int64) (record.BatchHeader, bool, error) {
	br, err := s.svc.ReadBatches(ctx, name, offset, 1)
	if err != nil {
		return record.BatchHeader{}, false, err
	}
	var first record.BatchHeader
	ok := false
	err = record.SplitBatches(br.Batches, func(_ []byte, h record.BatchHeader) error {
		if !ok {
			first, ok = h, true
		}
		return nil
	})
	return first, ok, err
}
