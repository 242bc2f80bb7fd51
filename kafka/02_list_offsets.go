package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/record"
)

// Special ListOffsets timestamps.
const (
	listLatest   = -1
	listEarliest = -2
	// listMaxTimestamp (KIP-734, v7): the record with the largest
	// timestamp, and that timestamp.
	listMaxTimestamp = -3
)

// handleListOffsets answers latest (the high watermark), earliest (the
// start offset) and by timestamp (the first record at or after it).
func handleListOffsets(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		ot := kmsg.NewListOffsetsResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewListOffsetsResponseTopicPartition()
			op.Partition = rp.Partition
			offset, ts, epoch, err := s.listOffset(ctx, cc, rt.Topic, rp, req.IsolationLevel == 1)
			if err != nil {
				op.ErrorCode = errCode(err)
			} else {
				op.Offset, op.Timestamp, op.LeaderEpoch = offset, ts, epoch
				if req.Version == 0 && offset >= 0 && rp.MaxNumOffsets > 0 {
					// v0 answers a list of offsets (Kafka: segment
					// starts before the time); one, the answer above.
					op.OldStyleOffsets = []int64{offset}
				}
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}

// listOffset answers one partition; committed (read_committed, v2+) makes
// "latest" the last stable offset, as in Kafka.
func (s *Server) listOffset(ctx context.Context, cc *connState, topic string, rp kmsg.ListOffsetsRequestTopicPartition, committed bool) (offset, ts int64, epoch int32, err error) {
	name, err := s.partitionName(ctx, topic, rp.Partition, false)
	if err == nil {
		err = s.allow(cc, auth.Read, name)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	info, err := s.svc.Head(ctx, name)
	if err != nil {
		s.forgetOnMissing(topic, err)
		return 0, 0, 0, err
	}
	if err := checkLeaderEpoch(rp.CurrentLeaderEpoch, info.Epoch); err != nil {
		return 0, 0, 0, err
	}
	epoch = int32(info.Epoch)
	switch rp.Timestamp {
	case listLatest:
		if committed {
			br, err := s.svc.ReadBatches(ctx, name, info.NextOffset, 1)
			if err != nil {
				return 0, 0, 0, err
			}
			return br.LastStable, -1, epoch, nil
		}
		return info.NextOffset, -1, epoch, nil
	case listEarliest:
		return info.StartOffset, -1, epoch, nil
	case listMaxTimestamp:
		offset, ts, err = s.maxTimestampOffset(ctx, name, info.StartOffset, info.NextOffset)
		return offset, ts, epoch, err
	}
	if rp.Timestamp < 0 {
		return 0, 0, 0, fmt.Errorf("%w: timestamp %d", kerr.InvalidRequest, rp.Timestamp)
	}
	offset, ts, err = s.offsetForTime(ctx, name, info.StartOffset, info.NextOffset, rp.Timestamp)
	return offset, ts, epoch, err
}

// offsetForTime finds the first record with a timestamp at or after want by
// scanning batch headers (MaxTimestamp) from the start and decoding only
// the batch that holds it. The scan is linear in the stream's size; -1, -1
// when no record is that late.
func (s *Server) offsetForTime(ctx context.Context, name string, from, hwm, want int64) (int64, int64, error) {
	const page = 1 << 20
	for from < hwm {
		br, err := s.svc.ReadBatches(ctx, name, from, page)
		if err != nil {
			return 0, 0, err
		}
		if len(br.Batches) == 0 {
			break
		}
		var found, foundTS int64 = -1, -1
		next := from
		err = record.SplitBatches(br.Batches, func(b []byte, h record.BatchHeader) error {
			next = h.LastOffset() + 1
			if found >= 0 || h.MaxTimestamp < want {
				return nil
			}
			recs, err := record.DecodeRecords(b, nil)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.Offset >= from && r.Timestamp >= want {
					found, foundTS = r.Offset, r.Timestamp
					return nil
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		if found >= 0 {
			return found, foundTS, nil
		}
		if next <= from {
			break
		}
		from = next
	}
	return -1, -1, nil
}

// maxTimestampOffset finds the first record with the partition's largest
// timestamp (ListOffsets -3) by scanning batch headers (MaxTimestamp) from
// the start offset and decoding only the batch that holds it; control
// batches (transaction markers) are not records a client reads and are
// skipped. Linear in the partition's size, as offsetForTime; -1, -1 for a
// partition without records.
func (s *Server) maxTimestampOffset(ctx context.Context, name string, from, hwm int64) (int64, int64, error) {
	const page = 1 << 20
	best, bestTS := int64(-1), int64(-1) // base offset of the batch holding the maximum
	for pos := from; pos < hwm; {
		br, err := s.svc.ReadBatches(ctx, name, pos, page)
		if err != nil {
			return 0, 0, err
		}
		next := pos
		err = record.SplitBatches(br.Batches, func(_ []byte, h record.BatchHeader) error {
			next = h.LastOffset() + 1
			if !h.Control() && h.LastOffset() >= from && h.MaxTimestamp > bestTS {
				best, bestTS = h.BaseOffset, h.MaxTimestamp
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		if next <= pos {
			break
		}
		pos = next
	}
	if best < 0 {
		return -1, -1, nil
	}
	// The batch holding it: the first record at that timestamp, at or
	// after the start offset (a LogAppendTime batch's records all carry
	// MaxTimestamp).
	br, err := s.svc.ReadBatches(ctx, name, max(best, from), 1)
	if err != nil {
		return 0, 0, err
	}
	found := int64(-1)
	err = record.SplitBatches(br.Batches, func(b []byte, h record.BatchHeader) error {
		if found >= 0 || h.BaseOffset != best {
			return nil
		}
		recs, err := record.DecodeRecords(b, nil)
		if err != nil {
			return err
		}
		// The first record at the batch's largest timestamp (a header
		// whose MaxTimestamp no record carries still gets its latest).
		top := int64(-1)
		for _, r := range recs {
			if r.Offset >= from && (h.LogAppendTime() || r.Timestamp > top) {
				found, top = r.Offset, r.Timestamp
				if h.LogAppendTime() || top >= bestTS {
					return nil
				}
			}
		}
		return nil
	})
	if err != nil || found < 0 {
		return 0, 0, fmt.Errorf("%w: max timestamp %d of %s not found again (trimmed meanwhile?): %v", kerr.UnknownServerError, bestTS, name, err)
	}
	return found, bestTS, nil
}
