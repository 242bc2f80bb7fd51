package stream

// Retention: a background loop that advances each stream's start offset
// past data older than RetentionMs or beyond RetentionBytes, exactly as an
// explicit trim does. Reads below the start offset are refused from that
// moment (ErrOffsetTrimmed); the bytes themselves are reclaimed later, when
// the WAL is truncated after tiering uploads and object retention deletes
// the segments, because the node-wide WAL cannot delete one stream's
// entries in place.
//
// Granularity is a batch (one append), as in Kafka it is a segment:
//   - time: batches are dropped oldest first while their newest record
//     (the batch's MaxTimestamp) is older than now - RetentionMs; the scan
//     stops at the first batch that is young enough, so a Kafka producer's
//     out-of-order CreateTime cannot punch holes in the log. Batches without
//     a timestamp (-1) stop the scan too.
//   - size: the oldest batches are dropped while the stream's retained
//     bytes (stored batch bytes) exceed RetentionBytes; the newest batch is
//     always kept, so size retention never empties a stream.
//
// The loop costs nothing for streams without retention, and for the others
// one pass over in-memory chunk sizes plus one batch-header read per
// examined WAL batch.

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/record"
)

// RetentionOptions tune RunRetention.
type RetentionOptions struct {
	// Interval between passes (default 10s).
	Interval time.Duration
}

// retentionScanBatch bounds the chunks copied per lock acquisition while
// scanning for time retention, so appends are never held up by a scan.
const retentionScanBatch = 256

// RunRetention applies retention every opts.Interval until ctx is done (a
// job: see Jobs). Stop it before closing the WAL.
func (s *Service) RunRetention(ctx context.Context, opts RetentionOptions) error {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	every(ctx, opts.Interval, s.ApplyRetention)
	return nil
}

// ApplyRetention runs one retention pass over every stream now. The loop
// calls it; tests and operators may too.
func (s *Service) ApplyRetention(ctx context.Context) {
	s.mu.RLock()
	var todo []*streamState
	for _, st := range s.byID {
		st.mu.Lock()
		has := (st.info.RetentionMs > 0 || st.info.RetentionBytes > 0) && retentionApplies(st.info.Compaction)
		st.mu.Unlock()
		if has {
			todo = append(todo, st)
		}
	}
	s.mu.RUnlock()
	now := s.cfg.Now()
	for _, st := range todo {
		if ctx.Err() != nil {
			return
		}
		if err := s.retain(ctx, st, now); err != nil {
			s.cfg.Logger.Warn("retention pass failed; will retry", "stream", st.info.Name, "err", err)
		}
	}
}

// retain advances one stream's start offset as its retention demands.
func (s *Service) retain(ctx context.Context, st *streamState, now time.Time) error {
	st.mu.Lock()
	start, hwm := st.info.StartOffset, st.hwm
	retMs, retBytes := st.info.RetentionMs, st.info.RetentionBytes
	name, id := st.info.Name, st.info.ID
	sizeStart := start
	if retBytes > 0 {
		sizeStart = st.sizeRetentionLocked(start, hwm, retBytes)
	}
	st.mu.Unlock()

	target := max(start, sizeStart)
	if retMs > 0 {
		t, err := s.timeRetention(ctx, st, start, hwm, now.UnixMilli()-retMs)
		if err != nil {
			return err
		}
		target = max(target, t)
	}
	target = min(target, s.forkFloor(id))
	if target <= start {
		return nil
	}
	stored, err := s.updateRecord(ctx, name, func(m *metadata.Stream) error {
		if m.ID != id {
			return ErrNotFound // replaced; its successor has its own retention
		}
		m.StartOffset = max(m.StartOffset, target)
		return nil
	})
	if err != nil {
		return err
	}
	st.applyConfig(stored)
	s.cfg.Logger.Debug("retention advanced start offset", "stream", name, "from", start, "to", stored.StartOffset)
	return nil
}

// chunkBytes is the stored size of a chunk: its WAL entry, or its byte range
// in an object.
func chunkBytes(c *chunk) int64 {
	if c.obj != nil {
		return c.obj.Length
	}
	return int64(c.pos.Len)
}

// sizeRetentionLocked returns the start offset that keeps the retained
// bytes of [start, hwm) at or below limit, dropping whole chunks oldest
// first and never the newest one.
func (st *streamState) sizeRetentionLocked(start, hwm, limit int64) int64 {
	first := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > start })
	last := len(st.chunks) - 1
	for last >= first && st.chunks[last].base >= hwm {
		last-- // not durable yet
	}
	if last <= first {
		return start
	}
	var kept int64
	cut := last // the newest chunk is always kept
	kept = chunkBytes(&st.chunks[last])
	for i := last - 1; i >= first; i-- {
		n := chunkBytes(&st.chunks[i])
		if kept+n > limit {
			break
		}
		kept += n
		cut = i
	}
	return max(start, st.chunks[cut].base)
}

// timeRetention returns the first offset to keep under a time limit: the
// start of the first chunk (from start on) whose newest record is at or
// after cutoffMs.
func (s *Service) timeRetention(ctx context.Context, st *streamState, start, hwm, cutoffMs int64) (int64, error) {
	target := start
	for target < hwm {
		st.mu.Lock()
		i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > target })
		var batch []chunk
		for j := i; j < len(st.chunks) && len(batch) < retentionScanBatch && st.chunks[j].next <= hwm; j++ {
			batch = append(batch, st.chunks[j])
		}
		st.mu.Unlock()
		if len(batch) == 0 {
			return target, nil
		}
		for k := range batch {
			ts, err := s.chunkMaxTimestamp(ctx, st.info.ID, &batch[k])
			if err != nil {
				return target, err
			}
			if ts < 0 || ts >= cutoffMs {
				return target, nil
			}
			target = batch[k].next
		}
	}
	return target, nil
}

// chunkMaxTimestamp is the newest record timestamp of a chunk: known for
// object ranges, read from the batch header for WAL batches.
func (s *Service) chunkMaxTimestamp(ctx context.Context, streamID uint64, c *chunk) (int64, error) {
	if c.obj != nil {
		return c.obj.MaxTimestamp, nil
	}
	if c.gap {
		return 0, nil // holds nothing: as old as can be
	}
	data, err := s.chunkBatches(ctx, streamID, *c, c.base, 1)
	if err != nil {
		return 0, err
	}
	ts := int64(-1)
	err = record.SplitBatches(data, func(_ []byte, h record.BatchHeader) error {
		ts = max(ts, h.MaxTimestamp)
		return nil
	})
	return ts, err
}

// forkFloor is the lowest offset of stream id that a live fork still reads
// (its fork point): retention must not move the start offset past it, or
// the objects under the fork's history would be collected. MaxInt64 when
// nothing forks from the stream.
func (s *Service) forkFloor(id uint64) int64 {
	floor := int64(math.MaxInt64)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, st := range s.byID {
		st.mu.Lock()
		if f := st.info.Fork; f != nil && f.SourceID == id {
			floor = min(floor, f.End)
		}
		st.mu.Unlock()
	}
	return floor
}
