package kafka

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/record"
)

// defaultFetchMaxBytes is the response budget of versions without MaxBytes.
const defaultFetchMaxBytes = 50 << 20

// handleFetch returns stored batches verbatim. It long-polls: when fewer
// than MinBytes are available it waits, without polling, until one of the
// partitions grows or MaxWaitMillis passes; only this connection waits.
// Fetch sessions are not kept (SessionID 0: clients send full requests).
func handleFetch(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.FetchRequest)
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, s.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	for {
		resp, total, changed, stop := s.fetchOnce(ctx, cc, req)
		if stop || total >= int(req.MinBytes) || len(changed) == 0 || !time.Now().Before(deadline) {
			return resp, nil
		}
		resp.release() // not sent: read again below
		if !waitAny(ctx, changed, deadline) {
			// Deadline or connection gone: answer with what there is now.
			resp, _, _, _ = s.fetchOnce(ctx, cc, req)
			return resp, nil
		}
	}
}

// fetchReply is a Fetch response whose partitions' record batches may lie
// in several pieces of memory (history from the block cache): pieces maps
// a partition (topic and partition index) to them, and fetchFrame writes
// them to the socket where they lie. Such a partition's RecordBatches is
// only a stand-in for the encoder.
//
// releases end the loans of block cache memory the record batches lie
// in (stream.BatchRead.Release): writeReplies calls release once the
// response is written to the socket, or will never be (a broken
// connection), so the cache can reuse that memory.
type fetchReply struct {
	*kmsg.FetchResponse
	pieces   map[[2]int][][]byte
	releases []func()
}

// release ends every loan of f's record batches; it is idempotent.
func (f *fetchReply) release() {
	for _, r := range f.releases {
		r()
	}
	f.releases = nil
}

// fetchOnce reads every requested partition once. It returns the response,
// its record bytes, the change channels to wait on, and whether to answer
// now regardless of MinBytes (a partition error).
func (s *Server) fetchOnce(ctx context.Context, cc *connState, req *kmsg.FetchRequest) (*fetchReply, int, []<-chan struct{}, bool) {
	resp := &fetchReply{FetchResponse: req.ResponseKind().(*kmsg.FetchResponse)}
	budget := int(req.MaxBytes)
	if req.Version < 3 || budget <= 0 {
		budget = defaultFetchMaxBytes
	}
	total := 0
	stop := false
	var changed []<-chan struct{}
	for _, rt := range req.Topics {
		ot := kmsg.NewFetchResponseTopic()
		ot.Topic, ot.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			op := kmsg.NewFetchResponseTopicPartition()
			op.Partition = rp.Partition
			// Never null: librdkafka reads a null record set as a
			// malformed response and backs off.
			op.RecordBatches = []byte{}
			if req.IsolationLevel == 1 {
				op.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
			}
			// KIP-74: the first partition with data gets at least one
			// batch, even past the budgets; later ones only what is left.
			limit := min(int(rp.PartitionMaxBytes), budget-total)
			ch, pieces, n, release, err := s.fetchPartition(ctx, cc, req, rt.Topic, rp, limit, total == 0, &op)
			if release != nil {
				resp.releases = append(resp.releases, release)
			}
			if len(pieces) > 1 {
				if resp.pieces == nil {
					resp.pieces = map[[2]int][][]byte{}
				}
				resp.pieces[[2]int{len(resp.Topics), len(ot.Partitions)}] = pieces
			}
			if err != nil {
				op.ErrorCode = errCode(err)
				op.HighWatermark, op.LastStableOffset, op.LogStartOffset = -1, -1, -1
				stop = true
			}
			if ch != nil {
				changed = append(changed, ch)
			}
			total += n
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, total, changed, stop
}

// fetchPartition fills op from one partition and returns the channel that
// signals its next change, the record batches in pieces when they lie in
// more than one (op.RecordBatches then only stands in for them: see
// fetchReply), the bytes returned, and the release of the cache memory
// op.RecordBatches and the pieces lie in (nil if none; called after the
// response is written).
func (s *Server) fetchPartition(ctx context.Context, cc *connState, req *kmsg.FetchRequest, topic string, rp kmsg.FetchRequestTopicPartition, limit int, first bool, op *kmsg.FetchResponseTopicPartition) (<-chan struct{}, [][]byte, int, func(), error) {
	name, err := s.partitionName(ctx, topic, rp.Partition, false)
	if err == nil {
		err = s.allow(cc, auth.Read, name)
	}
	if err != nil {
		return nil, nil, 0, nil, err
	}
	if limit <= 0 && !first {
		limit = 1 // only the offsets: ReadBatches returns at least a batch, dropped below
	}
	// One service call reads and hands over the change channel, taken
	// before the read. The page stays in the pieces it lies in (the block
	// cache's memory for history): no copy on the way to the socket.
	br, err := s.svc.ReadBatchPieces(ctx, name, rp.FetchOffset, max(limit, 1))
	if err != nil {
		s.forgetOnMissing(topic, err)
		return nil, nil, 0, nil, err
	}
	if err := checkLeaderEpoch(rp.CurrentLeaderEpoch, br.Stream.Epoch); err != nil {
		br.Release()
		return nil, nil, 0, nil, err
	}
	op.HighWatermark = br.HighWatermark
	op.LastStableOffset = br.LastStable
	op.LogStartOffset = br.Stream.StartOffset
	pieces := br.Pieces
	if req.IsolationLevel == 1 {
		// read_committed: nothing at or past the last stable offset, and
		// the aborted transactions of what is returned, so the client
		// drops their batches (markers it skips itself).
		pieces = cutAt(pieces, br.LastStable)
		for _, a := range br.Aborted {
			at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
			op.AbortedTransactions = append(op.AbortedTransactions, at)
		}
	}
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	if n > limit && !first {
		br.Release()
		return br.Changed, nil, 0, nil, nil // no room left in this response
	}
	switch {
	case len(pieces) == 1:
		op.RecordBatches = pieces[0]
	case len(pieces) > 1 && n < spliceMin:
		// Small: one copy into the response buffer either way.
		op.RecordBatches = bytes.Join(pieces, nil)
		br.Release()
		return br.Changed, nil, n, nil, nil
	case len(pieces) > 1:
		op.RecordBatches = pieces[0]
		return br.Changed, pieces, n, br.Release, nil
	}
	return br.Changed, nil, n, br.Release, nil
}

// checkLeaderEpoch applies KIP-320: a client that names a leader epoch
// (>= 0) must name the current one.
func checkLeaderEpoch(client int32, current int64) error {
	switch {
	case client < 0 || int64(client) == current:
		return nil
	case int64(client) < current:
		return kerr.FencedLeaderEpoch
	default:
		return kerr.UnknownLeaderEpoch
	}
}

// waitAny blocks until one of chs is closed (true), or deadline or ctx
// (false).
func waitAny(ctx context.Context, chs []<-chan struct{}, deadline time.Time) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	if len(chs) == 1 {
		select {
		case <-chs[0]:
			return true
		case <-timer.C:
		case <-ctx.Done():
		}
		return false
	}
	woke := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				select {
				case woke <- struct{}{}:
				default:
				}
			case <-done:
			}
		}()
	}
	select {
	case <-woke:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// cutAt drops the batches at or past offset end (whole batches: a
// transaction's first batch starts at the last stable offset), and any
// unreadable framing after them. A batch may cross from one piece into
// the next (record.WalkPieces); a piece the cut leaves in part is
// sliced, not copied.
func cutAt(pieces [][]byte, end int64) [][]byte {
	good := 0 // bytes of batches before end
	err := record.WalkPieces(pieces, func(_ [][]byte, h record.BatchHeader, pos int) error {
		if h.BaseOffset >= end {
			return errCutDone
		}
		good = pos + h.Size()
		return nil
	})
	if err == nil {
		return pieces
	}
	return record.AppendCut(nil, pieces, 0, good)
}

// errCutDone ends cutAt's walk at the first batch it drops.
var errCutDone = errors.New("cut")
